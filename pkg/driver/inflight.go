package driver

import (
	"context"

	"google.golang.org/grpc"

	"github.com/kube-cosi/cosi/pkg/driver/internal/calls"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// serverKeys are the keys a v1alpha2 call holds in the driver's process (see inFlightInterceptor):
// the same as the sidecar's client takes for it. Calls that name no bucket or account hold none,
// nor does DriverGetBucketUsage, a read that changes nothing: a slow one must not hold up the
// bucket's grants (TestAttack44SlowUsageDoesNotHoldUpGrants).
func serverKeys(req any) []calls.LockKey {
	switch r := req.(type) {
	case *cosiproto.DriverGenerateBucketIdRequest:
		return calls.BucketKeys(r.GetName())
	case *cosiproto.DriverCreateBucketRequest:
		return calls.BucketKeys(r.GetBucketId())
	case *cosiproto.DriverGetBucketRequest:
		return calls.BucketKeys(r.GetBucketId())
	case *cosiproto.DriverDeleteBucketRequest:
		return calls.BucketKeys(r.GetBucketId())
	case *cosiproto.DriverGenerateBucketAccessIdRequest:
		return calls.AccessKeys(false, r.GetAccountName(), calls.AccessedIDs(r.GetBuckets()))
	case *cosiproto.DriverGrantBucketAccessRequest:
		return calls.AccessKeys(false, r.GetAccountId(), calls.AccessedIDs(r.GetBuckets()))
	case *cosiproto.DriverRevokeBucketAccessRequest:
		return calls.AccessKeys(false, r.GetAccountId(), calls.RevokedIDs(r.GetBuckets()))
	case *cosiproto.DriverRotateBucketAccessCredentialsRequest:
		return calls.AccessKeys(false, r.GetAccountId(), calls.AccessedIDs(r.GetBuckets()))
	case *cosiproto.DriverRetireBucketAccessCredentialsRequest:
		return calls.AccessKeys(false, r.GetAccountId(), nil)
	}
	return nil
}

// inFlightInterceptor keeps a driver's calls apart per bucket and account inside the driver's
// process, for as long as the driver's handler runs, whether or not its caller still waits. The
// sidecar's client keeps its own calls apart too, but only until it gives up on a call
// (--driver-timeout): a handler that does not pass its context on to the store goes on after
// that, and a revocation or deletion that overtook it would find nothing to undo, answer OK, and
// leave what the late call then creates to nobody. Here such a revocation or deletion waits for
// the late call (bounded by its own deadline, DEADLINE_EXCEEDED naming the key; the sidecar
// retries it) and then undoes what it did.
func inFlightInterceptor(l *calls.InFlight) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		unlock, err := l.Lock(ctx, serverKeys(req))
		if err != nil {
			return nil, err
		}
		defer unlock()
		return handler(ctx, req)
	}
}
