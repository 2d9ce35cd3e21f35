package sidecar

import (
	"context"
	"maps"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/kube/patch"
	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
)

// refreshBucket asks the driver for a provisioned Bucket's information again, once per
// RefreshInterval (spread by a rate limit like the Secret checks, schedule.go), and records it in
// status when it changed. A failed call leaves the status as it is (a Warning event says why) and
// is tried again at the next interval: the Bucket stays provisioned.
func (r *BucketReconciler) refreshBucket(ctx context.Context, bucket *cosiapi.Bucket) (reconcile.Result, error) {
	key := client.ObjectKeyFromObject(bucket)
	if r.RefreshInterval <= 0 || !refreshable(bucket) {
		r.refreshes.forget(key, bucket.UID)
		return reconcile.Result{}, nil
	}
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
	if _, err := parseBucketParameters(bucket.Spec.Parameters); err != nil {
		return nil
	}
	if r.Driver.Protocol() == driverclient.ProtocolV1alpha1 {
		// v1alpha1 has no RPC to look a bucket up: the adapter's DriverGetBucket makes an answer up
		// from the bucket ID, poorer than what DriverCreateBucket returned (no endpoint, no region).
		// Taking it for the driver's would degrade the Bucket's information and wake its accesses.
		return nil
	}
	req := newBucketRequest(bucket, driverParameters(bucket.Spec.Parameters, r.Driver.Protocol()))
	resp, err := r.Driver.DriverGetBucket(ctx, req.get(bucket.Status.BucketID))
	if status.Code(err) == codes.Unimplemented {
		return nil // the driver cannot say: the information stays what provisioning recorded
	}
	if err != nil {
		r.Recorder.Eventf(bucket, nil, corev1.EventTypeWarning, cosiapi.EventFailedRefresh, "Refresh",
			"%s", conditions.Truncate(rpcError{"DriverGetBucket", err}.Error()))
		return nil
	}
	if err := driver.ValidateBucketInfo(resp.GetProtocols(), r.Info.GetSupportedProtocols(), req.protocols); err != nil {
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

// refreshable reports whether a Bucket's information is asked of the driver again at intervals:
// an imported Bucket's, and a dynamically provisioned one's only when its class opts in
// (cosiapi.ParameterRefreshBucketInfo). KEP-1979 says DriverGetBucket "does not apply to
// dynamically-provisioned Buckets".
func refreshable(bucket *cosiapi.Bucket) bool {
	if bucket.Spec.ExistingBucketID != "" {
		return true
	}
	params, err := parseBucketParameters(bucket.Spec.Parameters)
	return err == nil && params.refreshInfo
}
