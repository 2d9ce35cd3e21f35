package sidecar

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// grant provisions the access in two phases and writes its Secrets (KEP-1979 "Generating Bucket
// Access Credentials", sidecar steps). again is set when the Secrets of a provisioned access are
// written anew (check); otherwise the access is granted only if it is not provisioned yet. It
// returns when the credentials it wrote are renewed (renewal), zero when they do not expire or
// nothing was written. What stopped it is recorded in the access's status (recordProblem).
func (r *BucketAccessReconciler) grant(ctx context.Context, ba *cosiapi.BucketAccess, again bool) (time.Time, error) {
	renewAt, err := r.grantSteps(ctx, ba, again)
	return renewAt, r.recordProblem(ctx, ba, err)
}

// grantSteps takes the steps of a grant in their order, each recorded before the next is taken;
// the first that cannot go on returns what stopped it.
func (r *BucketAccessReconciler) grantSteps(
	ctx context.Context, ba *cosiapi.BucketAccess, again bool,
) (time.Time, error) {
	// Counted in flight first, then the access confirmed uncached: a Bucket's reconcile revokes a
	// recorded grant only when the access is gone (uncached) and no grant for it is in flight, so
	// either it sees this grant, or this grant sees the access gone.
	done := r.Grants.inFlight.start(ba.UID)
	defer done()
	// COSI's own parameters are checked before the driver is asked anything: an invalid one is
	// final, and nothing is granted until the access changes (parameters.go).
	if _, err := parseAccessParameters(ba.Status.Parameters); err != nil {
		return time.Time{}, invalidObjects(cosiapi.ReasonInvalidParameter, err.Error())
	}
	// The access still exists, its Buckets are provisioned, it has its finalizer, and its Secrets
	// can be written (access_prepare.go); nil while something is missing.
	p, err := r.prepareGrant(ctx, ba, again)
	if err != nil || p == nil {
		return time.Time{}, err
	}
	// No Bucket's deletion runs meanwhile, and none starts before the cache shows it this grant's
	// record (bucket_fence.go).
	leave, doomed := r.Grants.enterFence(p.buckets)
	if leave == nil {
		return time.Time{}, invalidObjects(cosiapi.ReasonInvalidReference,
			fmt.Sprintf("Bucket %s is being deleted: no new access is granted to it", doomed))
	}
	var recorded *corev1.ConfigMap
	defer func() { leave(recorded) }()
	// Phase 1: the account ID in status, or the one there verified (access_account.go).
	if err := r.ensureAccount(ctx, ba, p); err != nil {
		return time.Time{}, err
	}
	// Recorded before the driver is asked: whatever happens to the BucketAccess or its Buckets
	// from now on, the grant can be revoked (record.go).
	written, existed, err := r.Grants.store.put(ctx, grantRecordFor(ba, p.buckets, p.req.parameters))
	if err != nil {
		return time.Time{}, err
	}
	recorded = written
	// The accounts earlier grants made whose IDs could not be recorded then (access_driveraccounts.go).
	if err := r.recordUnrecorded(ctx, ba.UID, written); err != nil {
		return time.Time{}, err
	}
	// Phase 2 (access_credentials.go); account IDs a v1alpha1 driver chooses itself are recorded
	// on the way (access_driveraccounts.go).
	resp, forget, err := r.askCredentials(r.withDriverAccounts(ctx, ba, written, existed, p.held), ba, p)
	if err != nil {
		return time.Time{}, err
	}
	if err := r.writeSecrets(ctx, ba, p.buckets, p.req.protocol, resp); err != nil {
		return time.Time{}, err
	}
	now, expiry := metav1.Now(), credentialsExpiry(resp.GetCredentials())
	if err := r.Grants.store.recordCredential(ctx, written, resp.GetCredentialId(), now, expiry); err != nil {
		return time.Time{}, err
	}
	if err := r.recordGranted(ctx, ba, written); err != nil {
		return time.Time{}, err
	}
	forget()
	return renewal(&now, expiry), nil
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
