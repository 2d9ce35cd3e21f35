package sidecar_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/sidecar"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Usage is information: a driver whose DriverGetBucketUsage hangs until --driver-timeout (a store
// slow to count, an overloaded admin API) must not hold up provisioning. The usage reads run on
// workers of their own; when they ran on the Bucket controller's (the first read inside the
// reconcile that provisioned the Bucket), two hung reads took both workers and no third Bucket
// was provisioned until they timed out (from a reviewer's attack; it fails on d6d6169: "bc-claim-3 not provisioned").
func TestHungUsageDoesNotHoldUpProvisioning(t *testing.T) {
	t.Parallel()
	h, d := newUsageHarness(t, true, time.Hour, func(o *sidecar.Options) {
		o.DriverTimeout = sidecar.MaxDriverTimeout // the reads hang for longer than the test
		o.Workers = 2
	})
	d.setAnswer(func(ctx context.Context, _ *cosiproto.DriverGetBucketUsageRequest) (
		*cosiproto.DriverGetBucketUsageResponse, error,
	) {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	})
	var buckets []*cosiapi.Bucket
	for range 6 {
		b := h.bucket(cosiapi.DeletionPolicyDelete, cosiapi.ProtocolS3)
		h.create(b)
		buckets = append(buckets, b)
	}
	for _, b := range buckets {
		provisioned(t, b, bucketConditions)
	}
}
