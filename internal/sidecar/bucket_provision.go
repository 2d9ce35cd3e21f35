package sidecar

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/kube/patch"
	"github.com/kube-cosi/cosi/pkg/driver"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// provision creates (dynamic) or finds (static) the backend bucket and records it in status
// (KEP-1979 "Creating a Bucket" and "Accessing an Existing OSP Bucket", sidecar steps).
func (r *BucketReconciler) provision(ctx context.Context, bucket *cosiapi.Bucket) error {
	if _, err := parseBucketParameters(bucket.Spec.Parameters); err != nil {
		return r.record.invalid(ctx, bucket, cosiapi.ReasonInvalidParameter, err.Error())
	}
	req := newBucketRequest(bucket, driverParameters(bucket.Spec.Parameters, r.Driver.Protocol()))
	// The driver's protocols first: nothing is created in the backend for a Bucket that would be
	// refused afterwards.
	for _, p := range req.protocols {
		if !slices.Contains(r.Info.GetSupportedProtocols(), p) {
			return r.record.invalid(ctx, bucket, cosiapi.ReasonUnsupportedProtocol,
				fmt.Sprintf("driver %s does not support protocol %s (it supports %v)",
					r.Info.GetName(), apiProtocol(p), apiProtocols(r.Info.GetSupportedProtocols())))
		}
	}
	var info *cosiproto.ProtocolBucketInfo
	if id := bucket.Spec.ExistingBucketID; id != "" {
		resp, err := r.Driver.DriverGetBucket(ctx, req.get(id))
		if err != nil {
			return r.record.failed(ctx, bucket, rpcError{"DriverGetBucket", err}, cosiapi.EventFailedCreateBucket)
		}
		info = resp.GetProtocols()
	} else {
		if bucket.Status.BucketID == "" {
			if err := r.generateID(ctx, bucket, req); err != nil {
				return err
			}
		}
		// Phase 2.
		resp, err := r.Driver.DriverCreateBucket(ctx, req.create(bucket.Status.BucketID))
		if err != nil {
			// A bucket of this ID exists that this Bucket did not create: it must not be deleted
			// with the Bucket (bucket_delete.go). Marked before the failure is recorded.
			if status.Code(err) == codes.AlreadyExists {
				if err := patch.Annotation(ctx, r.Client, bucket, cosiapi.AnnotationBucketNotCreated,
					time.Now().UTC().Format(time.RFC3339)); err != nil {
					return err
				}
			}
			return r.record.failed(ctx, bucket, rpcError{"DriverCreateBucket", err}, cosiapi.EventFailedCreateBucket)
		}
		info = resp.GetProtocols()
		if err := patch.RemoveAnnotation(ctx, r.Client, bucket, cosiapi.AnnotationBucketNotCreated); err != nil {
			return err
		}
	}

	if err := driver.ValidateBucketInfo(info, r.Info.GetSupportedProtocols(), req.protocols); err != nil {
		return r.record.invalid(ctx, bucket, cosiapi.ReasonUnsupportedProtocol,
			"the driver's answer does not fit the Bucket: "+err.Error())
	}
	status := r.record.status(bucket)
	if id := bucket.Spec.ExistingBucketID; id != "" {
		bucket.Status.BucketID = id
	}
	bucket.Status.Protocols = nil
	for _, p := range driver.BucketInfoProtocols(info) {
		bucket.Status.Protocols = append(bucket.Status.Protocols, apiProtocol(p))
	}
	bucket.Status.BucketInfo = bucketStatusInfo(info)
	reason, msg := cosiapi.ReasonProvisioned, "the bucket exists in the backend"
	if bucket.Spec.ExistingBucketID != "" {
		reason, msg = imported(r.Driver)
	}
	conditions.MarkTrue(bucket, cosiapi.ConditionProvisioned, reason, msg)
	conditions.MarkFalse(bucket, cosiapi.ConditionProvisionFailed, cosiapi.ReasonDriverSucceeded, "")
	conditions.MarkTrue(bucket, cosiapi.ConditionResourcesValidated, cosiapi.ReasonValid, "")
	return status.Patch(ctx, patch.NoLock)
}

// generateID is phase 1 of a dynamic Bucket: get the ID and persist it before anything exists in
// the backend, so that whatever phase 2 creates can always be deleted.
func (r *BucketReconciler) generateID(
	ctx context.Context, bucket *cosiapi.Bucket, req bucketRequest,
) error {
	resp, err := r.Driver.DriverGenerateBucketId(ctx, req.generate(bucket.Name))
	if err != nil {
		return r.record.failed(ctx, bucket, rpcError{"DriverGenerateBucketId", err}, cosiapi.EventFailedCreateBucket)
	}
	if resp.GetBucketId() == "" {
		return r.record.invalid(ctx, bucket, cosiapi.ReasonProvisioningFailed,
			"DriverGenerateBucketId returned an empty bucket_id")
	}
	status := r.record.status(bucket)
	bucket.Status.BucketID = resp.GetBucketId()
	conditions.Init(bucket, cosiapi.ConditionProvisionFailed, cosiapi.ConditionResourcesValidated)
	conditions.MarkUnknown(bucket, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioning,
		"bucket ID generated; creating the bucket")
	return status.Patch(ctx, patch.NoLock)
}
