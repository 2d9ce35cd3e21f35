package sidecar

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/kube/lookup"
	"github.com/kube-cosi/cosi/internal/kube/patch"
)

// preparedGrant is what a grant needs once the access may be granted.
type preparedGrant struct {
	// buckets are the access's Buckets, by claim name.
	buckets map[string]*cosiapi.Bucket
	// req is what both phases send to the driver.
	req grantRequest
	// held is false only when no credentials of the access's account can have been handed out
	// (see granted).
	held bool
}

// prepareGrant returns what the grant needs once the access may be granted: it still exists, its
// Buckets are provisioned, it has its finalizer, and its Secrets can be written. It returns nil
// while something is missing, with the problem that says what (waitingForBuckets, secretTaken,
// secretNotWritable) or none while the access is gone or granted already.
func (r *BucketAccessReconciler) prepareGrant(
	ctx context.Context, ba *cosiapi.BucketAccess, again bool,
) (*preparedGrant, error) {
	live, err := r.liveAccess(ctx, ba)
	if err != nil || live == nil {
		return nil, err
	}
	if live.UID != ba.UID || live.DeletionTimestamp != nil {
		return nil, nil // gone or going: the deletion path takes over
	}
	if !again && conditions.IsTrue(live, cosiapi.ConditionProvisioned) {
		// Granted already: the cache is behind the status this sidecar wrote (a reconcile
		// queued during the grant runs before the informer delivers it). Granting on the stale
		// copy would call the driver once more; the update wakes the Secret checks instead.
		return nil, nil
	}
	buckets, ready, err := r.buckets(ctx, ba)
	if err != nil || !ready {
		return nil, err
	}
	req := newGrantRequest(ba, buckets, driverParameters(ba.Status.Parameters, r.Driver.Protocol()))
	if err := patch.AddFinalizer(ctx, r.Client, ba); err != nil {
		return nil, err
	}
	// Before anything is granted, the Secrets must be writable: credentials that cannot be
	// written would only be minted for nothing.
	ready, present, conflict, stuck, err := r.secretsReady(ctx, ba)
	switch {
	case err != nil:
		return nil, err
	case conflict != "":
		return nil, secretTaken(errSecretConflict{conflict})
	case stuck != "":
		return nil, secretNotWritable(stuck, errRequeue(stuck))
	case !ready:
		return nil, errRequeue("a Secret of the access is being deleted; writing it again when it is gone")
	}
	return &preparedGrant{buckets: buckets, req: req, held: granted(live) || present}, nil
}

// liveAccess returns the access as the API server has it, nil when it is gone. An access without
// an account ID gets one in phase 1 (ensureAccount) before anything is recorded or granted, with a
// status write locked to the version of ba: that write proves ba current (not deleted, not
// provisioned meanwhile) as a read would, so ba is taken as it is and the read saved (about 2 % of
// the API server's CPU for an access, docs/benchmark.md). A gone access costs at most a
// DriverGenerateBucketAccessId, which creates nothing. Every other grant reads the access uncached.
func (r *BucketAccessReconciler) liveAccess(
	ctx context.Context, ba *cosiapi.BucketAccess,
) (*cosiapi.BucketAccess, error) {
	if ba.Status.AccountID == "" {
		return ba, nil
	}
	live := &cosiapi.BucketAccess{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ba), live); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return live, nil
}

// granted reports whether the access's Secrets were ever written: the grant succeeded and
// recordGranted set Provisioned True and ProvisionFailed False (DriverSucceeded). Provisioned
// stays True until the access is revoked (a failed call, a lost Secret or a Bucket that is no
// longer provisioned leaves it), ProvisionFailed until a call fails.
//
// With no Secret of the access present either (prepareGrant), no credentials of its account can
// have been handed out: workloads get them only from those Secrets. Only then does the grant say
// so to a v1alpha1 driver's adapter (v1alpha1.WithNoCredentialsHeld), which may then revoke the
// account and grant it again when the driver answers ALREADY_EXISTS: the driver made the account
// in a call whose answer was lost (the sidecar stopped, or its answers were lost in a restart,
// before a Secret was written) and will not return its key again. Otherwise ALREADY_EXISTS is
// final, and the key that workloads hold keeps working (the Secret was lost, not the key).
//
// Both facts are needed: the Secrets alone are the tenant's to delete, and the conditions alone
// miss a Secret written by a sidecar that stopped before recordGranted. The conditions are read
// uncached (the cache may not show this sidecar's own recordGranted yet), and only who can write
// bucketaccesses/status can remove them: tenants with the standard Role cannot; a tenant allowed
// to (loose RBAC) affects only their own access, whose account is pinned to the one the driver
// generates for its UID (the grant record, ensureAccount), and gets no more than a new key for
// it, as re-creating the access would give. A Secret with the access's label is the tenant's to
// forge as well, which only makes the grant keep the account.
func granted(ba *cosiapi.BucketAccess) bool {
	return conditions.IsTrue(ba, cosiapi.ConditionProvisioned) ||
		conditions.Has(ba, cosiapi.ConditionProvisionFailed, metav1.ConditionFalse, cosiapi.ReasonDriverSucceeded)
}

// buckets resolves the Buckets of the access by claim name. ready is false while a Bucket is not
// provisioned yet: the access waits, and the Bucket watch wakes it.
//
// The hand-off in status is checked against the Buckets themselves before anything is granted:
// whoever can write bucketaccesses/status could otherwise name any Bucket of the cluster. Each
// Bucket must be bound to the claim of this access that names it, in the access's namespace.
func (r *BucketAccessReconciler) buckets(
	ctx context.Context, ba *cosiapi.BucketAccess,
) (map[string]*cosiapi.Bucket, bool, error) {
	buckets := map[string]*cosiapi.Bucket{}
	var waiting []string
	for _, ab := range ba.Status.AccessedBuckets {
		b := &cosiapi.Bucket{}
		// A final refusal only for a Bucket confirmed gone uncached: the cache may not have a
		// Bucket created a moment before the hand-off.
		gone, err := lookup.ConfirmGone(ctx, r.Client, r.APIReader, types.NamespacedName{Name: ab.BucketName}, b,
			func() bool { return true })
		if err != nil {
			return nil, false, err
		}
		if gone {
			return nil, false, invalidObjects(cosiapi.ReasonInvalidReference,
				fmt.Sprintf("Bucket %s of BucketClaim %s does not exist", ab.BucketName, ab.BucketClaimName))
		}
		ref := b.Spec.BucketClaimRef
		switch {
		case !slices.ContainsFunc(ba.Spec.BucketClaims, func(c cosiapi.BucketClaimAccess) bool {
			return c.BucketClaimName == ab.BucketClaimName
		}) ||
			buckets[ab.BucketClaimName] != nil:
			return nil, false, invalidObjects(cosiapi.ReasonInvalidReference,
				fmt.Sprintf("status names BucketClaim %s, which spec does not, or twice", ab.BucketClaimName))
		case ref.Namespace != ba.Namespace || ref.Name != ab.BucketClaimName || ref.UID == "":
			return nil, false, invalidObjects(cosiapi.ReasonInvalidReference,
				fmt.Sprintf("Bucket %s is not bound to BucketClaim %s", ab.BucketName, ab.BucketClaimName))
		case b.DeletionTimestamp != nil || b.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted] != "":
			return nil, false, invalidObjects(cosiapi.ReasonInvalidReference,
				fmt.Sprintf("BucketClaim %s is being deleted: no new access is granted to it", ab.BucketClaimName))
		case b.Spec.DriverName != r.Info.GetName():
			return nil, false, invalidObjects(cosiapi.ReasonInvalidReference,
				fmt.Sprintf("Bucket %s belongs to driver %s, not %s", ab.BucketName, b.Spec.DriverName, r.Info.GetName()))
		case b.Status.BucketID == "" || !conditions.IsTrue(b, cosiapi.ConditionProvisioned):
			waiting = append(waiting, ab.BucketName)
		case !slices.Contains(b.Status.Protocols, ba.Spec.Protocol):
			return nil, false, invalidObjects(cosiapi.ReasonUnsupportedProtocol,
				fmt.Sprintf("Bucket %s does not support %s (it supports %v)", ab.BucketName, ba.Spec.Protocol, b.Status.Protocols))
		}
		buckets[ab.BucketClaimName] = b
	}
	for _, claim := range ba.Spec.BucketClaims {
		if buckets[claim.BucketClaimName] == nil {
			return nil, false, invalidObjects(cosiapi.ReasonInvalidReference,
				fmt.Sprintf("BucketClaim %s has no accessed Bucket in status", claim.BucketClaimName))
		}
	}
	if len(waiting) > 0 {
		return nil, false, waitingForBuckets(waiting)
	}
	return buckets, true, nil
}
