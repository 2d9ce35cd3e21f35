package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/lookup"
	"github.com/kube-cosi/cosi/internal/patch"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Grant records make revocation independent of what a tenant can do to their BucketAccess. A
// tenant can remove the access's finalizer and delete it in the same instant: the object, and with
// it the account ID the revocation needs, is gone before any controller can put the finalizer
// back. So before asking the driver for credentials, the sidecar records the grant on each Bucket
// it is for, in an annotation (Buckets are cluster-scoped: tenants cannot write them). A grant
// whose BucketAccess is gone is revoked from the record, and the record removed, when the Bucket is
// reconciled: at start-up, when an access goes, and before a Bucket is deleted.

// grantAnnotationPrefix prefixes the annotation that records one access's grant on a Bucket; the
// access's UID follows.
const grantAnnotationPrefix = cosiapi.GroupName + "/grant-"

// grantRecord is what revoking an access needs once the BucketAccess is gone.
type grantRecord struct {
	Namespace          string            `json:"namespace"`
	Name               string            `json:"name"`
	UID                types.UID         `json:"uid"`
	AccountID          string            `json:"accountID"`
	Protocol           cosiapi.Protocol  `json:"protocol"`
	AuthenticationType string            `json:"authenticationType"`
	ServiceAccountName string            `json:"serviceAccountName,omitempty"`
	Parameters         map[string]string `json:"parameters,omitempty"`
	BucketIDs          []string          `json:"bucketIDs"`
	// SecretNames are the access's Secrets, in Namespace: deleted with the grant when the access
	// vanished without its cleanup.
	SecretNames []string `json:"secretNames,omitempty"`
}

func newGrantRecord(ba *cosiapi.BucketAccess) grantRecord {
	rec := grantRecord{
		Namespace: ba.Namespace, Name: ba.Name, UID: ba.UID, AccountID: ba.Status.AccountID, Protocol: ba.Spec.Protocol,
		AuthenticationType: string(
			ba.Status.AuthenticationType,
		), Parameters: ba.Status.Parameters, SecretNames: secretNames(ba),
	}
	if ba.Status.AuthenticationType == cosiapi.AuthenticationTypeServiceAccount {
		rec.ServiceAccountName = ba.Spec.ServiceAccountName
	}
	for _, b := range ba.Status.AccessedBuckets {
		if b.BucketID != "" {
			rec.BucketIDs = append(rec.BucketIDs, b.BucketID)
		}
	}
	return rec
}

func grantKey(uid types.UID) string { return grantAnnotationPrefix + string(uid) }

// revokeRequest is the driver request that revokes the recorded grant.
func (g grantRecord) revokeRequest() *cosiproto.DriverRevokeBucketAccessRequest {
	req := &cosiproto.DriverRevokeBucketAccessRequest{
		AccountId: g.AccountID, Protocol: rpcProtocol(g.Protocol),
		AuthenticationType: rpcAuthenticationType(cosiapi.AuthenticationType(g.AuthenticationType)), Parameters: g.Parameters,
	}
	if req.AuthenticationType == cosiproto.AuthenticationType_SERVICE_ACCOUNT {
		req.ServiceAccount = &cosiproto.ServiceAccount{Namespace: g.Namespace, Name: g.ServiceAccountName}
	}
	for _, id := range g.BucketIDs {
		req.Buckets = append(req.Buckets, &cosiproto.DriverRevokeBucketAccessRequest_Bucket{BucketId: id})
	}
	return req
}

// grantRecords returns the grants recorded on a Bucket, by access UID.
func grantRecords(b *cosiapi.Bucket) (map[types.UID]grantRecord, error) {
	out := map[types.UID]grantRecord{}
	for k, v := range b.Annotations {
		if !strings.HasPrefix(k, grantAnnotationPrefix) {
			continue
		}
		var g grantRecord
		if err := json.Unmarshal([]byte(v), &g); err != nil {
			return nil, fmt.Errorf("annotation %s of Bucket %s: %w", k, b.Name, err)
		}
		out[types.UID(strings.TrimPrefix(k, grantAnnotationPrefix))] = g
	}
	return out, nil
}

// recordGrant records the access's grant on each of its Buckets, before the driver is asked.
func (r *BucketAccessReconciler) recordGrant(
	ctx context.Context, ba *cosiapi.BucketAccess, buckets map[string]*cosiapi.Bucket,
) error {
	value, err := json.Marshal(newGrantRecord(ba))
	if err != nil {
		return err
	}
	// Written on every grant, not skipped when a cached copy shows it: the copy may predate a
	// revocation that removed it.
	for _, name := range slices.Sorted(maps.Keys(buckets)) {
		b := buckets[name]
		if err := patch.Annotation(ctx, r.Client, b, grantKey(ba.UID), string(value)); err != nil {
			return err
		}
	}
	return nil
}

// grantRecorded reports whether every Bucket records a grant of the access with its account ID.
func grantRecorded(ba *cosiapi.BucketAccess, buckets map[string]*cosiapi.Bucket) bool {
	for _, b := range buckets {
		var g grantRecord
		v, ok := b.Annotations[grantKey(ba.UID)]
		if !ok || json.Unmarshal([]byte(v), &g) != nil || g.AccountID != ba.Status.AccountID {
			return false
		}
	}
	return true
}

// recordedGrant returns the grant of the access recorded on the Buckets its status names, or nil.
func (r *BucketAccessReconciler) recordedGrant(ctx context.Context, ba *cosiapi.BucketAccess) (*grantRecord, error) {
	for _, ab := range ba.Status.AccessedBuckets {
		// Uncached: a record written a moment ago may not be in the cache yet, and deciding
		// from the cache could skip the revocation.
		b := &cosiapi.Bucket{}
		if err := r.APIReader.Get(ctx, types.NamespacedName{Name: ab.BucketName}, b); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, err
		}
		records, err := grantRecords(b)
		if err != nil {
			return nil, err
		}
		if g, ok := records[ba.UID]; ok && g.AccountID != "" {
			return &g, nil
		}
	}
	return nil, nil
}

// forgetGrant removes the access's grant record from the Buckets, once it is revoked.
func forgetGrant(ctx context.Context, c client.Client, uid types.UID, bucketNames []string) error {
	for _, name := range bucketNames {
		b := &cosiapi.Bucket{}
		if err := c.Get(ctx, types.NamespacedName{Name: name}, b); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return err
		}
		if _, ok := b.Annotations[grantKey(uid)]; !ok {
			continue
		}
		if err := patch.Annotation(ctx, c, b, grantKey(uid), ""); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

// inFlight counts the grants this sidecar is making, by access UID. A grant record whose access is
// gone is not revoked while a DriverGrantBucketAccess for it may still be running: the revocation
// could come first, and the grant would then create an account nobody revokes. The sidecar that
// makes grants is the one that revokes records (one leader per driver), so a process-local count
// is enough.
type inFlight struct {
	mu    sync.Mutex
	count map[types.UID]int
}

func (f *inFlight) start(uid types.UID) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.count == nil {
		f.count = map[types.UID]int{}
	}
	f.count[uid]++
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.count[uid]--; f.count[uid] <= 0 {
			delete(f.count, uid)
		}
	}
}

func (f *inFlight) has(uid types.UID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count[uid] > 0
}

// revokeOrphanedGrants revokes the grants recorded on a Bucket whose BucketAccess is gone, and
// removes their records. It returns the accesses that still hold a grant.
func (r *BucketReconciler) revokeOrphanedGrants(ctx context.Context, b *cosiapi.Bucket) ([]string, error) {
	records, err := grantRecords(b)
	if err != nil {
		return nil, err
	}
	var live []string
	inFlight := false
	for _, uid := range slices.Sorted(maps.Keys(records)) {
		g := records[uid]
		gone, err := r.accessGone(ctx, g)
		if err != nil {
			return nil, err
		}
		if !gone {
			live = append(live, g.Namespace+"/"+g.Name)
			continue
		}
		if r.Grants.has(uid) {
			// Revoked once the grant in flight has finished, by this Bucket's next reconcile.
			inFlight = true
			live = append(live, g.Namespace+"/"+g.Name)
			continue
		}
		// As the access's own deletion would (KEP "Deleting a BucketAccess" step 3): Secrets
		// first, then the revocation.
		if err := deleteAccessSecrets(ctx, r.Client, g.Namespace, g.UID, g.SecretNames); err != nil {
			return nil, err
		}
		if g.AccountID != "" && len(g.BucketIDs) > 0 {
			if _, err := r.Driver.DriverRevokeBucketAccess(ctx, g.revokeRequest()); err != nil {
				return nil, r.failedRevoke(ctx, b, g, err)
			}
		}
		if err := patch.Annotation(ctx, r.Client, b, grantKey(uid), ""); err != nil {
			return nil, err
		}
	}
	if inFlight {
		return nil, errRequeue("a grant recorded on the Bucket for a deleted BucketAccess is in flight")
	}
	return live, nil
}

// accessGone reports whether the recorded access no longer exists. The cache answers "it exists";
// "gone" is confirmed with the API server.
func (r *BucketReconciler) accessGone(ctx context.Context, g grantRecord) (bool, error) {
	ba := &cosiapi.BucketAccess{}
	return lookup.ConfirmGone(ctx, r.Client, r.APIReader, types.NamespacedName{Namespace: g.Namespace, Name: g.Name}, ba,
		func() bool { return ba.UID == g.UID })
}
