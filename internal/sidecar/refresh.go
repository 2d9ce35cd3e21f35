package sidecar

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/kube/patch"
	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	cosiproto "github.com/kube-cosi/cosi/proto"
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

// refreshBucket asks the driver for a provisioned Bucket's information again, once per
// RefreshInterval (spread by a rate limit like the Secret checks, checks.go), and records it in
// status when it changed. A failed call leaves the status as it is (a Warning event says why) and
// is tried again at the next interval: the Bucket stays provisioned.
func (r *BucketReconciler) refreshBucket(ctx context.Context, bucket *cosiapi.Bucket) (reconcile.Result, error) {
	if r.RefreshInterval <= 0 {
		return reconcile.Result{}, nil
	}
	key := client.ObjectKeyFromObject(bucket)
	// A refresh not due yet, and the next one, are woken at their time by the schedule
	// (wakeChecks).
	if r.refreshes.due(key, bucket.UID, r.RefreshInterval) > 0 {
		return reconcile.Result{}, nil
	}
	err := r.refreshBucketInfo(ctx, bucket)
	if err != nil {
		return r.result(bucket, cosiapi.EventFailedRefresh, err)
	}
	r.refreshes.done(key, bucket.UID)
	return reconcile.Result{}, nil
}

func (r *BucketReconciler) refreshBucketInfo(ctx context.Context, bucket *cosiapi.Bucket) error {
	if r.Driver.Protocol() == driverclient.ProtocolV1alpha1 {
		// v1alpha1 has no RPC to look a bucket up: the adapter's DriverGetBucket makes an answer up
		// from the bucket ID, poorer than what DriverCreateBucket returned (no endpoint, no region).
		// Taking it for the driver's would degrade the Bucket's information and wake its accesses.
		return nil
	}
	protocols := rpcProtocols(bucket.Spec.Protocols)
	resp, err := r.Driver.DriverGetBucket(ctx, &cosiproto.DriverGetBucketRequest{
		BucketId: bucket.Status.BucketID, Protocols: protocols, Parameters: driverParameters(bucket.Spec.Parameters),
	})
	if status.Code(err) == codes.Unimplemented {
		return nil // the driver cannot say: the information stays what provisioning recorded
	}
	if err != nil {
		r.Recorder.Eventf(bucket, nil, corev1.EventTypeWarning, cosiapi.EventFailedRefresh, "Refresh",
			"%s", conditions.Truncate(rpcError{"DriverGetBucket", err}.Error()))
		return nil
	}
	if err := driver.ValidateBucketInfo(resp.GetProtocols(), r.Info.GetSupportedProtocols(), protocols); err != nil {
		r.Recorder.Eventf(bucket, nil, corev1.EventTypeWarning, cosiapi.EventFailedRefresh, "Refresh",
			"%s", conditions.Truncate("DriverGetBucket: the driver's answer does not fit the Bucket: "+err.Error()))
		return nil
	}
	info := bucketStatusInfo(resp.GetProtocols())
	if maps.Equal(info, bucket.Status.BucketInfo) {
		return nil
	}
	s := r.record.status(bucket)
	bucket.Status.BucketInfo = info
	return s.Patch(ctx, patch.NoLock)
}

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
	case g.Rotation != nil:
		// The rotation writes the Secrets; refreshed once it is done. Its grace period does not
		// hold back a renewal: it may outlast the credentials, which the Secrets already hold.
		if due && g.Rotation.Written != nil {
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

// renewal is when credentials written at from and expiring at expiry are written again: once four
// fifths of their lifetime passed, and not sooner than requeueDelay after from, so that a driver
// whose new credentials do not expire later is not asked in a loop. Zero when they do not expire,
// or had expired when written (a new grant then waits for an admin's AnnotationRefreshSecret).
func renewal(from, expiry *metav1.Time) time.Time {
	if from == nil || expiry == nil || !expiry.After(from.Time) {
		return time.Time{}
	}
	at := from.Add(expiry.Sub(from.Time) * 4 / 5)
	if earliest := from.Add(requeueDelay); at.Before(earliest) {
		at = earliest
	}
	return at
}

// until is the wait until t, zero (no wait) when t is; at least a millisecond otherwise.
func until(t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return max(time.Until(t), time.Millisecond)
}

// credentialsExpiry is when the credentials of a driver's answer expire; nil when they do not.
func credentialsExpiry(creds *cosiproto.CredentialInfo) *metav1.Time {
	ts := creds.GetAzure().GetExpiryTimestamp()
	if ts == nil {
		return nil
	}
	return ptr.To(metav1.NewTime(ts.AsTime()))
}

// renew writes the access's Secrets again from a new grant, before the credentials they hold
// expire. The record is read uncached first: the cache may not show the last renewal yet, and
// renewing twice would ask the driver for nothing.
func (r *BucketAccessReconciler) renew(ctx context.Context, ba *cosiapi.BucketAccess) (time.Duration, error) {
	g, _, err := r.Grants.store.get(ctx, ba.UID)
	if err != nil || g == nil || g.Rotation != nil && g.Rotation.Written == nil {
		return requeueDelay, err
	}
	renewAt := renewal(g.ExpiryFrom, g.Expiry)
	if renewAt.IsZero() || time.Now().Before(renewAt) {
		return until(renewAt), nil
	}
	old, from := g.Expiry.UTC().Format(time.RFC3339), g.ExpiryFrom
	next, err := r.grant(ctx, ba, true)
	if err != nil {
		return 0, err
	}
	g, _, err = r.Grants.store.get(ctx, ba.UID)
	if err != nil || g == nil {
		return until(next), err
	}
	// A grant that wrote the Secrets recorded when (renewals are requeueDelay apart, more than
	// the record's precision); one that did not (a Bucket being provisioned again, the access
	// going) asked the driver nothing: looked at again later, or when the objects change.
	if g.ExpiryFrom != nil && g.ExpiryFrom.Equal(from) {
		return requeueDelay, nil
	}
	switch {
	case g.Expiry == nil:
		r.Recorder.Eventf(ba, nil, corev1.EventTypeNormal, cosiapi.EventSecretsRefreshed, "Refresh",
			"renewed before the credentials' expiry at %s: the new credentials do not expire", old)
	case g.Expiry.UTC().Format(time.RFC3339) > old:
		r.Recorder.Eventf(ba, nil, corev1.EventTypeNormal, cosiapi.EventSecretsRefreshed, "Refresh",
			"renewed before the credentials' expiry at %s: the new credentials expire at %s", old,
			g.Expiry.UTC().Format(time.RFC3339))
	case next.IsZero():
		r.Recorder.Eventf(ba, nil, corev1.EventTypeWarning, cosiapi.EventFailedRefresh, "Refresh",
			"the driver's new credentials expired already, at %s: not renewed again until an admin sets a new "+
				"value of annotation %s", g.Expiry.UTC().Format(time.RFC3339), cosiapi.AnnotationRefreshSecret)
	default:
		r.Recorder.Eventf(ba, nil, corev1.EventTypeWarning, cosiapi.EventFailedRefresh, "Refresh",
			"the driver's new credentials still expire at %s: renewing again at %s", old,
			next.UTC().Format(time.RFC3339))
	}
	return until(next), nil
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
	before, err := r.secretData(ctx, ba)
	if err != nil {
		return time.Time{}, err
	}
	renewAt, err := r.grant(ctx, ba, true)
	if err != nil {
		return time.Time{}, err
	}
	// The grant rewrote the record (with the Buckets' information it was made with): read again.
	g, cm, err := r.Grants.store.get(ctx, ba.UID)
	if err != nil || g == nil {
		return renewAt, err
	}
	g.RefreshToken = token
	if err := r.Grants.store.update(ctx, cm, *g); err != nil {
		return time.Time{}, err
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
			keys, err := r.refreshSecret(ctx, ba, claim, g.BucketInfo[b.Name], b.Status.BucketInfo)
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
		g.BucketInfo[name] = b.Status.BucketInfo
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
		if v := to[k]; v != "" {
			data[k] = []byte(v)
		} else {
			delete(data, k)
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
