package sidecar

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
)

// Secret refresh (a COSI extension; docs/sidecar.md, "Secret refresh"). KEP-1979 asks that COSI
// keep the access Secrets up to date with the object store's information. Two ways:
//
//   - periodically: every Secret check interval, the Bucket reconciler asks the driver for each
//     provisioned Bucket's information again (DriverGetBucket) and records it in the Bucket's
//     status.bucketInfo when it changed. The accesses of the Bucket wake, and rewrite in place the
//     Secret keys whose value came from the Bucket's previous information (the grant record keeps
//     the information each access's Secrets were written against): a value the driver gave the
//     access itself (an access-specific endpoint) is left alone. Nothing is written while nothing
//     changed, and no grant is made.
//   - on demand: a new value of AnnotationRefreshSecret on an access has its Secrets written
//     again from a new DriverGrantBucketAccess answer: what only a grant answers (certificate
//     authority, SAS token expiry) is refreshed too. A Secret whose data did not change is not
//     written.
//   - before credentials expire: when the driver's answer says when the credentials expire (an
//     Azure SAS token's expiry), the Secrets are written again from a new grant once four fifths
//     of their lifetime passed, as the kubelet renews projected ServiceAccount tokens. The grant
//     record keeps the expiry and when the Secrets got it, so a restart does not lose the moment.

// refresh rewrites the access's Secrets when the driver's answer changed: on demand
// (AnnotationRefreshSecret), before the credentials they hold expire, or when a Bucket's
// information changed since the Secrets were written. It returns when to look again: while a
// rotation in progress holds it back, or at the credentials' renewal. Nothing is read from the
// API server or written when there is nothing to refresh: the decision is made on the cache.
func (r *BucketAccessReconciler) refresh(ctx context.Context, ba *cosiapi.BucketAccess) (time.Duration, error) {
	g, _ := r.Grants.store.cachedRecord(ctx, ba.UID)
	if g == nil || g.AccountID != ba.Status.AccountID {
		return 0, nil
	}
	token := ba.Annotations[cosiapi.AnnotationRefreshSecret]
	asked := token != "" && token != g.RefreshToken
	renewAt := renewal(g.ExpiryFrom, g.Expiry)
	due := !renewAt.IsZero() && !time.Now().Before(renewAt)
	changed := r.changedBuckets(ctx, ba, g)
	switch {
	case !asked && !due && len(changed) == 0:
		return until(renewAt), nil
	case due && g.renewsByRotation() && !g.rotationStuckPastExpiry():
		// The rotation renews them (rotate), and writes the Buckets' information too. Looked at
		// again at the expiry: a rotation whose driver call keeps failing by then is given up,
		// and a grant renews them (renew).
		if wait := time.Until(g.Expiry.Add(expiryMargin)); wait > 0 {
			return wait, nil
		}
		return requeueDelay, nil
	case g.Rotation != nil:
		// The rotation writes the Secrets; refreshed once it is done. Its grace period does not
		// hold back a renewal: it may outlast the credentials, which the Secrets already hold;
		// nor does a driver that has not answered it yet (renew).
		if due && (g.Rotation.Written != nil || g.Rotation.To == "") {
			return r.renew(ctx, ba)
		}
		return requeueDelay, nil
	case asked:
		renewAt, err := r.refreshAsked(ctx, ba, token)
		return until(renewAt), err
	case due:
		// A grant writes the Buckets' information too: a change waits for nothing more.
		return r.renew(ctx, ba)
	}
	return until(renewAt), r.refreshBucketInfo(ctx, ba, changed)
}

// changedBuckets returns, by name, the Buckets of the access whose information (from the cache)
// differs from what the record says its Secrets were written against.
func (r *BucketAccessReconciler) changedBuckets(
	ctx context.Context, ba *cosiapi.BucketAccess, g *cachedGrant,
) map[string]*cosiapi.Bucket {
	changed := map[string]*cosiapi.Bucket{}
	for _, ab := range ba.Status.AccessedBuckets {
		b := &cosiapi.Bucket{}
		err := r.Client.Get(ctx, types.NamespacedName{Name: ab.BucketName}, b)
		if err != nil || len(b.Status.BucketInfo) == 0 {
			continue
		}
		if g.bucketInfoChanged(ab.BucketName, b.Status.BucketInfo) {
			changed[ab.BucketName] = b
		}
	}
	return changed
}

// refreshAsked writes the Secrets again from a new grant, and records the request handled. It
// returns when the credentials it wrote are renewed (renewal), zero when they do not expire.
func (r *BucketAccessReconciler) refreshAsked(
	ctx context.Context, ba *cosiapi.BucketAccess, token string,
) (time.Time, error) {
	g, _, err := r.Grants.store.get(ctx, ba.UID)
	if err != nil || g == nil || g.RefreshToken == token {
		if g != nil {
			return renewal(g.ExpiryFrom, g.Expiry), err
		}
		return time.Time{}, err
	}
	if g.Rotation != nil && g.Rotation.Written == nil {
		// Started since the cache's copy was read: refreshed once the rotation wrote the Secrets.
		return time.Time{}, errRequeue("a rotation is writing the Secrets; refreshing them once it is done")
	}
	before, err := r.secretData(ctx, ba)
	if err != nil {
		return time.Time{}, err
	}
	renewAt, err := r.grant(ctx, ba, true)
	// Refused for good (the condition and an event say why), the request is answered too: a new
	// value of the annotation asks again. Kept unanswered, it would be asked of the driver again
	// whenever another part of the upkeep needs the access.
	final := isFinal(err)
	if err != nil && !final {
		return time.Time{}, err
	}
	// The grant rewrote the record (with the Buckets' information it was made with): read again.
	g, cm, gerr := r.Grants.store.get(ctx, ba.UID)
	if gerr != nil || g == nil {
		return renewAt, errors.Join(err, gerr)
	}
	g.RefreshToken = token
	if uerr := r.Grants.store.update(ctx, cm, *g); uerr != nil || final {
		return time.Time{}, errors.Join(err, uerr)
	}
	after, err := r.secretData(ctx, ba)
	if err != nil {
		return renewAt, err
	}
	var keys []string
	for name, data := range after {
		for k := range keysChanged(before[name], data) {
			keys = append(keys, name+"/"+k)
		}
	}
	slices.Sort(keys)
	msg := "refreshed on request (" + cosiapi.AnnotationRefreshSecret + "): nothing changed"
	if len(keys) > 0 {
		msg = "refreshed on request (" + cosiapi.AnnotationRefreshSecret + "): " + strings.Join(keys, ", ")
	}
	r.Recorder.Eventf(ba, nil, corev1.EventTypeNormal, cosiapi.EventSecretsRefreshed, "Refresh", "%s",
		conditions.Truncate(msg))
	return renewAt, nil
}

// secretData returns the data of the access's own Secrets, by name.
func (r *BucketAccessReconciler) secretData(
	ctx context.Context, ba *cosiapi.BucketAccess,
) (map[string]map[string][]byte, error) {
	out := map[string]map[string][]byte{}
	for _, claim := range ba.Spec.BucketClaims {
		state, s, err := r.probeSecret(ctx, ba, claim.AccessSecretName)
		if err != nil {
			return nil, err
		}
		if state == slotOurs {
			out[claim.AccessSecretName] = s.Data
		}
	}
	return out, nil
}

// keysChanged returns the keys whose value differs between two Secrets' data.
func keysChanged(a, b map[string][]byte) map[string]bool {
	out := map[string]bool{}
	for k, v := range a {
		if w, ok := b[k]; !ok || string(v) != string(w) {
			out[k] = true
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out[k] = true
		}
	}
	return out
}

// refreshBucketInfo carries the changed information of Buckets into the Secrets of their claims:
// a Secret key whose value is the one the Bucket's previous information gave takes the new one
// (or goes, when the new information has none); other values (the driver gave the access its
// own) stay. Secrets whose data does not change are not written. The record then holds the new
// information.
func (r *BucketAccessReconciler) refreshBucketInfo(
	ctx context.Context, ba *cosiapi.BucketAccess, changed map[string]*cosiapi.Bucket,
) error {
	g, cm, err := r.Grants.store.get(ctx, ba.UID)
	if err != nil || g == nil {
		return err
	}
	var written []string
	if g.BucketInfo != nil { // a record of an earlier version: the information is only recorded
		for _, claim := range ba.Spec.BucketClaims {
			b := changed[bucketNameOf(ba, claim.BucketClaimName)]
			if b == nil {
				continue
			}
			keys, err := r.refreshSecret(ctx, ba, claim, g.infoWritten(b.Name), b.Status.BucketInfo)
			if err != nil {
				return err
			}
			for _, k := range keys {
				written = append(written, claim.AccessSecretName+"/"+k)
			}
		}
	}
	if g.BucketInfo == nil {
		g.BucketInfo = map[string]map[string]string{}
	}
	for name, b := range changed {
		// A value the new information lacks stays in the Secrets (refreshSecret): the record
		// keeps it apart (KeptInfo), so that a later answer with a value replaces it.
		kept := map[string]string{}
		for k, v := range g.infoWritten(name) {
			if _, ok := b.Status.BucketInfo[k]; !ok {
				kept[k] = v
			}
		}
		g.BucketInfo[name] = b.Status.BucketInfo
		if len(kept) == 0 {
			delete(g.KeptInfo, name)
			continue
		}
		if g.KeptInfo == nil {
			g.KeptInfo = map[string]map[string]string{}
		}
		g.KeptInfo[name] = kept
	}
	if err := r.Grants.store.update(ctx, cm, *g); err != nil {
		return err
	}
	if len(written) > 0 {
		slices.Sort(written)
		r.Recorder.Eventf(ba, nil, corev1.EventTypeNormal, cosiapi.EventSecretsRefreshed, "Refresh", "%s",
			conditions.Truncate("the Buckets' information changed: "+strings.Join(written, ", ")))
	}
	return nil
}

// refreshSecret rewrites the bucket information of one claim's Secret from old to new, and
// returns the keys it changed.
func (r *BucketAccessReconciler) refreshSecret(
	ctx context.Context, ba *cosiapi.BucketAccess, claim cosiapi.BucketClaimAccess, before, after map[string]string,
) ([]string, error) {
	state, s, err := r.probeSecret(ctx, ba, claim.AccessSecretName)
	if err != nil || state != slotOurs {
		return nil, err // a Secret that is not there is written again by the Secret check, with a grant
	}
	from, to := secretBucketInfo(ba.Spec.Protocol, before), secretBucketInfo(ba.Spec.Protocol, after)
	data := maps.Clone(s.Data)
	for _, k := range bucketInfoKeys(ba.Spec.Protocol) {
		have, ok := s.Data[k]
		if ok != (from[k] != "") || string(have) != from[k] {
			continue // not the Bucket's previous value: the driver gave it to the access
		}
		// A value the Bucket's information no longer has stays: a workload may use it, and a
		// driver that answers less has not said it is wrong.
		if v := to[k]; v != "" {
			data[k] = []byte(v)
		}
	}
	keys := slices.Sorted(maps.Keys(keysChanged(s.Data, data)))
	if len(keys) == 0 {
		return nil, nil
	}
	if err := r.writeSecret(ctx, ba, claim, data, s.Annotations[cosiapi.AnnotationCredentialID]); err != nil {
		return nil, err
	}
	return keys, nil
}

// bucketNameOf is the Bucket that status names for a claim of the access.
func bucketNameOf(ba *cosiapi.BucketAccess, claim string) string {
	for _, ab := range ba.Status.AccessedBuckets {
		if ab.BucketClaimName == claim {
			return ab.BucketName
		}
	}
	return ""
}
