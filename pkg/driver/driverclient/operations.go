package driverclient

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/pkg/driver/internal/calls"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// operations is what the sidecar calls: the v1alpha2 Identity and Provisioner, whatever protocol
// the driver speaks (for a v1alpha1 driver, identity and provisioner are pkg/driver/v1alpha1's
// adapter). Each v1alpha2 operation is measured once here, under its v1alpha2 name and the code the
// sidecar gets, however many driver calls it took (none, for what the adapter answers itself, or
// several); it waits until no call it must not overlap is in flight (inFlight), and then has the
// call timeout.
type operations struct {
	identity    cosiproto.IdentityClient
	provisioner cosiproto.ProvisionerClient
	metrics     *calls.OperationMetrics
	driverName  func() string
	timeout     time.Duration
	inFlight    *calls.InFlight
	// perBucket: every call holds its buckets exclusively (v1alpha1).
	perBucket bool
}

var (
	_ cosiproto.IdentityClient    = (*operations)(nil)
	_ cosiproto.ProvisionerClient = (*operations)(nil)
)

// run measures one operation: the wait for its keys (bounded by ctx), then call (bounded by the
// call timeout too).
func run[Req, Resp any](
	ctx context.Context,
	o *operations,
	method string,
	keys []lockKey,
	req Req,
	call func(context.Context, Req, ...grpc.CallOption) (Resp, error),
	opts []grpc.CallOption,
) (Resp, error) {
	start := time.Now()
	resp, err := func() (Resp, error) {
		unlock, err := o.inFlight.Lock(ctx, keys)
		if err != nil {
			var none Resp
			return none, err
		}
		defer unlock()
		if o.timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, o.timeout)
			defer cancel()
		}
		return call(ctx, req, opts...)
	}()
	if o.metrics != nil {
		name, code := o.driverName(), status.Code(err)
		o.metrics.Duration.WithLabelValues(name, method, code.String()).Observe(time.Since(start).Seconds())
		if code != codes.OK {
			o.metrics.Errors.WithLabelValues(o.metrics.ErrorLabels(name, method, code)...).Inc()
		}
	}
	return resp, err
}

func (o *operations) DriverGetInfo(
	ctx context.Context, req *cosiproto.DriverGetInfoRequest, opts ...grpc.CallOption,
) (*cosiproto.DriverGetInfoResponse, error) {
	return run(ctx, o, "DriverGetInfo", nil, req, o.identity.DriverGetInfo, opts)
}

func (o *operations) DriverGenerateBucketId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketIdRequest, opts ...grpc.CallOption,
) (*cosiproto.DriverGenerateBucketIdResponse, error) {
	// The name is the bucket's until the driver gives it an ID (usually the same).
	keys := bucketKeys(req.GetName())
	return run(ctx, o, "DriverGenerateBucketId", keys, req, o.provisioner.DriverGenerateBucketId, opts)
}

func (o *operations) DriverCreateBucket(
	ctx context.Context, req *cosiproto.DriverCreateBucketRequest, opts ...grpc.CallOption,
) (*cosiproto.DriverCreateBucketResponse, error) {
	return run(ctx, o, "DriverCreateBucket", bucketKeys(req.GetBucketId()), req, o.provisioner.DriverCreateBucket, opts)
}

func (o *operations) DriverGetBucket(
	ctx context.Context, req *cosiproto.DriverGetBucketRequest, opts ...grpc.CallOption,
) (*cosiproto.DriverGetBucketResponse, error) {
	return run(ctx, o, "DriverGetBucket", bucketKeys(req.GetBucketId()), req, o.provisioner.DriverGetBucket, opts)
}

func (o *operations) DriverDeleteBucket(
	ctx context.Context, req *cosiproto.DriverDeleteBucketRequest, opts ...grpc.CallOption,
) (*cosiproto.DriverDeleteBucketResponse, error) {
	return run(ctx, o, "DriverDeleteBucket", bucketKeys(req.GetBucketId()), req, o.provisioner.DriverDeleteBucket, opts)
}

func (o *operations) DriverGenerateBucketAccessId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketAccessIdRequest, opts ...grpc.CallOption,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	keys := accessKeys(o.perBucket, req.GetAccountName(), accessedIDs(req.GetBuckets()))
	return run(ctx, o, "DriverGenerateBucketAccessId", keys, req, o.provisioner.DriverGenerateBucketAccessId, opts)
}

func (o *operations) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest, opts ...grpc.CallOption,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	keys := accessKeys(o.perBucket, req.GetAccountId(), accessedIDs(req.GetBuckets()))
	return run(ctx, o, "DriverGrantBucketAccess", keys, req, o.provisioner.DriverGrantBucketAccess, opts)
}

func (o *operations) DriverRevokeBucketAccess(
	ctx context.Context, req *cosiproto.DriverRevokeBucketAccessRequest, opts ...grpc.CallOption,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	keys := accessKeys(o.perBucket, req.GetAccountId(), revokedIDs(req.GetBuckets()))
	return run(ctx, o, "DriverRevokeBucketAccess", keys, req, o.provisioner.DriverRevokeBucketAccess, opts)
}

func (o *operations) DriverRotateBucketAccessCredentials(
	ctx context.Context, req *cosiproto.DriverRotateBucketAccessCredentialsRequest, opts ...grpc.CallOption,
) (*cosiproto.DriverRotateBucketAccessCredentialsResponse, error) {
	keys := accessKeys(o.perBucket, req.GetAccountId(), accessedIDs(req.GetBuckets()))
	return run(ctx, o, "DriverRotateBucketAccessCredentials", keys, req,
		o.provisioner.DriverRotateBucketAccessCredentials, opts)
}

func (o *operations) DriverRetireBucketAccessCredentials(
	ctx context.Context, req *cosiproto.DriverRetireBucketAccessCredentialsRequest, opts ...grpc.CallOption,
) (*cosiproto.DriverRetireBucketAccessCredentialsResponse, error) {
	keys := accessKeys(o.perBucket, req.GetAccountId(), nil)
	return run(ctx, o, "DriverRetireBucketAccessCredentials", keys, req,
		o.provisioner.DriverRetireBucketAccessCredentials, opts)
}

func (o *operations) DriverGetBucketUsage(
	ctx context.Context, req *cosiproto.DriverGetBucketUsageRequest, opts ...grpc.CallOption,
) (*cosiproto.DriverGetBucketUsageResponse, error) {
	// A read that changes nothing (cosi.proto): it holds no key, so that a slow answer (a store slow
	// to count, a handler that goes on after the call's deadline) never holds up the grants,
	// revocations or deletion of its bucket (TestAttack44SlowUsageDoesNotHoldUpGrants).
	return run(ctx, o, "DriverGetBucketUsage", nil, req, o.provisioner.DriverGetBucketUsage, opts)
}
