package sidecar

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/kube/patch"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// delete deprovisions the bucket once its claim is being deleted (KEP-1979 "Deleting a Bucket",
// step 3). Without the controller's annotation nothing happens, even with a deletion timestamp:
// an admin deleting a Bucket whose claim still exists must not lose data.
func (r *BucketReconciler) delete(ctx context.Context, bucket *cosiapi.Bucket) error {
	if !controllerutil.ContainsFinalizer(bucket, cosiapi.FinalizerProtection) {
		return nil
	}
	if bucket.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted] == "" {
		ref := bucket.Spec.BucketClaimRef
		return r.waiting(ctx, bucket,
			fmt.Sprintf("deletion waits until BucketClaim %s/%s is deleted", ref.Namespace, ref.Name))
	}
	if bucket.DeletionTimestamp == nil {
		return nil // Delete policy: the controller deletes the Bucket next. Retain: nothing to do.
	}
	// No grant on it starts from now on, and one under way is waited for until the cache shows
	// its record (bucket_fence.go).
	if doomed, err := r.Grants.doom(ctx, bucket); err != nil {
		return err
	} else if !doomed {
		return errRequeue("deletion waits for a grant under way on this Bucket")
	}
	// No grant outlives its Bucket object: those of accesses that are gone are revoked now, and
	// the controller released the Bucket only once no access held it.
	live, err := r.liveGrants(ctx, bucket)
	if err != nil {
		return err
	}
	if len(live) > 0 {
		return r.waiting(ctx, bucket,
			fmt.Sprintf("deletion waits until the BucketAccesses %v that hold this Bucket are deleted", live))
	}
	// An imported bucket is never deleted, whatever its policy: the API refuses Delete with
	// existingBucketID, and a Bucket stored before that rule is treated as Retain.
	// Nor is a bucket whose creation the driver answered ALREADY_EXISTS while the Bucket was never
	// provisioned: this Bucket did not create it, and it may hold someone else's data.
	if notCreated(bucket) {
		r.Recorder.Eventf(bucket, nil, corev1.EventTypeWarning, cosiapi.EventBucketNotDeleted, "DriverDeleteBucket",
			"backend bucket %q not deleted: the driver answered its creation ALREADY_EXISTS (annotation %s), so this "+
				"Bucket did not create it; delete it in the backend if it is not someone else's",
			bucket.Status.BucketID, cosiapi.AnnotationBucketNotCreated)
	} else if bucket.Spec.DeletionPolicy == cosiapi.DeletionPolicyDelete && bucket.Spec.ExistingBucketID == "" &&
		bucket.Status.BucketID != "" {
		_, err := r.Driver.DriverDeleteBucket(ctx, &cosiproto.DriverDeleteBucketRequest{
			BucketId: bucket.Status.BucketID, Parameters: driverParameters(bucket.Spec.Parameters, r.Driver.Protocol()),
		})
		if err != nil {
			return r.record.failed(ctx, bucket, rpcError{"DriverDeleteBucket", err}, cosiapi.EventFailedDeleteBucket)
		}
	}
	// Retain: the backend bucket stays; only the object goes.
	return patch.RemoveFinalizer(ctx, r.Client, bucket)
}

// notCreated reports whether the driver answered the Bucket's creation ALREADY_EXISTS and no
// creation succeeded since (cosiapi.AnnotationBucketNotCreated, on a Bucket never provisioned).
func notCreated(bucket *cosiapi.Bucket) bool {
	_, refused := bucket.Annotations[cosiapi.AnnotationBucketNotCreated]
	return refused && bucket.Spec.ExistingBucketID == "" && !conditions.IsTrue(bucket, cosiapi.ConditionProvisioned)
}

// waiting records why a deleting Bucket's deprovisioning waits.
func (r *BucketReconciler) waiting(ctx context.Context, bucket *cosiapi.Bucket, msg string) error {
	status := r.record.status(bucket)
	s := metav1.ConditionUnknown
	if conditions.IsTrue(bucket, cosiapi.ConditionProvisioned) {
		s = metav1.ConditionTrue // a provisioned bucket stays provisioned while it waits
	}
	conditions.Set(bucket, cosiapi.ConditionProvisioned, s, cosiapi.ReasonDeletionBlocked, msg)
	_, err := status.PatchIfChanged(ctx, patch.NoLock)
	return err
}

// liveGrants revokes the grants recorded for the Bucket whose access is gone, and returns the
// accesses that still hold one.
func (r *BucketReconciler) liveGrants(ctx context.Context, bucket *cosiapi.Bucket) ([]string, error) {
	records, err := r.Grants.store.forBucket(ctx, bucket.Name)
	if err != nil {
		return nil, err
	}
	var live []string
	for _, uid := range slices.Sorted(maps.Keys(records)) {
		revoked, err := r.Grants.revokeOrphan(ctx, uid)
		if err != nil {
			return nil, err
		}
		if !revoked {
			live = append(live, records[uid].Namespace+"/"+records[uid].Name)
		}
	}
	return live, nil
}
