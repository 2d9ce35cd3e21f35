package controller

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/cache/index"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/kube/patch"
)

// References between COSI objects are derived from the live objects, never taken from what is
// written on them: a tenant can edit the annotations and finalizers of their BucketClaims and
// BucketAccesses, so an annotation is only COSI's published view (KEP-1979 requires it), and a
// decision that could lose data or leave credentials valid (deleting a claim or a bucket) is made
// from the accesses themselves (see holders).

// holdsReference reports whether an access still holds its claims and Buckets: until the
// controller has removed its protection finalizer after the sidecar's cleanup, it may have
// credentials in the backend.
func holdsReference(ba *cosiapi.BucketAccess) bool {
	return ba.DeletionTimestamp == nil || controllerutil.ContainsFinalizer(ba, cosiapi.FinalizerProtection)
}

// handedOff reports whether the controller handed the access to its driver's sidecar: only then
// can it have credentials.
func handedOff(ba *cosiapi.BucketAccess) bool { return ba.Status.DriverName != "" }

// refusedForGood reports whether the sidecar refused a handed-off access before phase 1, with a
// final refusal: ResourcesValidated False (its Buckets lack its protocol; a Bucket is gone, not
// bound to it, or being released; a COSI parameter of its class is invalid), or Provisioned False
// with ProvisioningFailed (the driver refused with a final code, InvalidArgument or OutOfRange, or
// answered unusably). It has no credentials (the account ID is persisted before anything is
// granted), and the sidecar grants it nothing before the access changes; should it then grant (a
// refusal that no longer holds), the grant is recorded first, and the sidecar deletes no bucket
// while a recorded grant's access exists. So it does not hold its claim or Bucket. A refusal
// written later replaces an earlier one (the sidecar refuses again, for the release, once the
// claim is deleting): any of these reasons counts.
func refusedForGood(ba *cosiapi.BucketAccess) bool {
	if ba.Status.AccountID != "" {
		return false
	}
	invalid := func(reason string) bool {
		return conditions.Has(ba, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse, reason)
	}
	return invalid(cosiapi.ReasonUnsupportedProtocol) || invalid(cosiapi.ReasonInvalidReference) ||
		invalid(cosiapi.ReasonInvalidParameter) ||
		conditions.Has(ba, cosiapi.ConditionProvisioned, metav1.ConditionFalse, cosiapi.ReasonProvisioningFailed)
}

func namesClaim(ba *cosiapi.BucketAccess, claim string) bool {
	return slices.ContainsFunc(ba.Spec.BucketClaims,
		func(c cosiapi.BucketClaimAccess) bool { return c.BucketClaimName == claim })
}

func namesBucket(ba *cosiapi.BucketAccess, bucket string) bool {
	return slices.ContainsFunc(ba.Status.AccessedBuckets,
		func(b cosiapi.AccessedBucket) bool { return b.BucketName == bucket })
}

// referencingAccesses returns the names of the accesses in the cache that name the claim and hold
// it, handed off or not: the has-bucketaccess-references annotation publishes them (KEP-1979
// "Generating Bucket Access Credentials" step 3.5). No decision is made on it: deletion asks
// holders.
func referencingAccesses(ctx context.Context, c client.Reader, claim *cosiapi.BucketClaim) ([]string, error) {
	var list cosiapi.BucketAccessList
	if err := index.AccessesByClaim.List(ctx, c, &list, "", index.ClaimKey(claim.Namespace, claim.Name)); err != nil {
		return nil, err
	}
	var names []string
	for i := range list.Items {
		if ba := &list.Items[i]; namesClaim(ba, claim.Name) && holdsReference(ba) {
			names = append(names, ba.Name)
		}
	}
	return names, nil
}

// deletingClaimRefusal is the refusal of an access to a claim being deleted (KEP-1979 step 3.7),
// written by the access's reconcile and by the claim's deletion (the fence of holders) alike. It
// names the claim's UID: see holders.
func deletingClaimRefusal(claim *cosiapi.BucketClaim) refusal {
	return refusal{cosiapi.ReasonInvalidReference, fmt.Sprintf(
		"BucketClaim %s (uid %s) is being deleted: no new access is granted to it", claim.Name, claim.UID)}
}

// holders returns the accesses that hold the claim namespace/claim (bucket empty), or the Bucket
// bucket of that claim, which is gone: handed off to the driver's sidecar (for that Bucket) and
// not yet released by it. A claim's deletion, and the release of a Bucket whose claim is gone,
// wait for them (KEP-1979: claims in use are not deleted).
//
// For a claim's deletion, an access that names the claim but was not handed off (refused,
// waiting) has no credentials and does not hold it, once it is fenced so that it never will be
// handed off. The fence is a status write to the access (the refusal), locked to the version of
// the access read live just before, with a message that names the claim's UID, so that it
// changes the access unless this claim's refusal is there already (written, then, after the
// claim was deleting). The hand-off is a status write locked to the version of the access it was
// computed from, and it is computed only after a live read of each claim showed it alive and not
// deleting (BucketAccessReconciler.accessedBucket). So a hand-off computed before the fence
// conflicts (and its next pass reads the claim deleting), a hand-off that won makes the fence
// conflict (and the next pass here sees it handed off), and one computed from a version with the
// fence read the claim after it was deleting. A Bucket whose claim is gone needs no fence: no
// hand-off reads that claim alive any more, and one that read it before lands on a released
// Bucket, which the sidecar refuses (KEP-1979 step 4.5), as before.
//
// Candidates come from the cache (the indexes of accesses by claim and by Bucket), not from an
// uncached list of every access of the namespace or the cluster: the accesses the controller
// hands off are read from this cache, and a cache never goes back, so every access handed off,
// or whose hand-off is in flight, is in it when this runs, with its status possibly older: those
// the cache shows not handed off are read live. An access the cache does not have yet has not
// been read by any hand-off, and a hand-off that reads it later reads the claim deleting or gone.
func holders(
	ctx context.Context, c client.Client, live client.Reader, rec events.EventRecorder,
	namespace, claim, bucket string, fence *refusal,
) ([]string, error) {
	var candidates []cosiapi.BucketAccess
	var list cosiapi.BucketAccessList
	if err := index.AccessesByClaim.List(ctx, c, &list, "", index.ClaimKey(namespace, claim)); err != nil {
		return nil, err
	}
	candidates = append(candidates, list.Items...)
	if bucket != "" {
		if err := index.AccessesByBucket.List(ctx, c, &list, "", bucket); err != nil {
			return nil, err
		}
		candidates = append(candidates, list.Items...)
	}
	holds := func(ba *cosiapi.BucketAccess) bool {
		if bucket != "" {
			return namesBucket(ba, bucket) && holdsReference(ba) && !refusedForGood(ba)
		}
		return handedOff(ba) && ba.Namespace == namespace && namesClaim(ba, claim) && holdsReference(ba) &&
			!refusedForGood(ba)
	}
	var names []string
	seen := map[types.UID]bool{}
	for i := range candidates {
		ba := &candidates[i]
		if seen[ba.UID] {
			continue
		}
		seen[ba.UID] = true
		switch {
		case holds(ba):
			names = append(names, ba.Namespace+"/"+ba.Name)
			continue
		case handedOff(ba) || ba.DeletionTimestamp != nil || ba.Namespace != namespace || !namesClaim(ba, claim):
			// Handed off elsewhere (a hand-off is final), or deleting and never handed off: a
			// hand-off computed from an older version conflicts, and deleting accesses are not
			// handed off.
			continue
		}
		held, err := readAndFence(ctx, c, live, rec, ba, holds, fence)
		if err != nil {
			return nil, err
		}
		if held {
			names = append(names, ba.Namespace+"/"+ba.Name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// readAndFence reads live an access the cache shows not handed off: it may hold the claim or
// Bucket by now. If it does not, and fence is set, it records the fence on it, locked to the
// version read (see holders).
func readAndFence(
	ctx context.Context, c client.Client, live client.Reader, rec events.EventRecorder,
	cached *cosiapi.BucketAccess, holds func(*cosiapi.BucketAccess) bool, fence *refusal,
) (bool, error) {
	ba := &cosiapi.BucketAccess{}
	if err := live.Get(ctx, client.ObjectKeyFromObject(cached), ba); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	switch {
	case ba.UID != cached.UID:
		return false, nil
	case holds(ba):
		return true, nil
	case fence == nil || handedOff(ba) || ba.DeletionTimestamp != nil:
		return false, nil
	}
	status := patch.NewStatus(c, ba, accessConditions...)
	conditions.Init(ba, cosiapi.ConditionProvisionFailed)
	reject(ba, *fence)
	patched, err := status.PatchIfChanged(ctx, patch.OptimisticLock)
	if err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if patched {
		rec.Eventf(ba, nil, corev1.EventTypeWarning, cosiapi.EventFailedGrantAccess, "HandOff", "%s", fence.msg)
	}
	return false, nil
}
