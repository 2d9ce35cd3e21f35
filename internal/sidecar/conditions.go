package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kube-cosi/cosi/internal/kube/lookup"
	"github.com/kube-cosi/cosi/internal/kube/requeue"
)

// rpcError describes a failed driver call for conditions, events and the returned error. The
// message is the driver's own (drivers must not put secrets in it, per the COSI spec); COSI never
// adds request or response contents.
type rpcError struct {
	method string
	err    error
}

func (e rpcError) Error() string {
	st := status.Convert(e.err)
	return fmt.Sprintf("%s: %s: %s", e.method, st.Code(), st.Message())
}

func (e rpcError) Unwrap() error { return e.err }

// retryable reports whether the driver call is tried again, with backoff. KEP-1979 says create
// and grant "retry with backoff" and delete and revoke "retry the gRPC call": a failed revoke or
// delete is never given up (credentials or buckets would outlive their objects), and create, get
// and grant stop only on the codes that repeating the same request cannot fix: InvalidArgument,
// AlreadyExists (a conflicting resource), OutOfRange (an unsupported combination) and
// Unimplemented. Everything else, PermissionDenied, NotFound, FailedPrecondition, Internal and
// Unknown included, may be fixed by an admin or the backend, and backs off (capped; see
// RateLimiter). That a call may still be in flight is a separate question: driver.Retryable.
func (e rpcError) retryable() bool {
	switch e.method {
	case "DriverRevokeBucketAccess", "DriverDeleteBucket":
		return true
	}
	if _, ok := status.FromError(e.err); !ok {
		return true // no status: the connection failed
	}
	switch status.Code(e.err) {
	case codes.InvalidArgument, codes.AlreadyExists, codes.OutOfRange, codes.Unimplemented:
		return false
	}
	return true
}

// result hands err to controller-runtime: retryable driver errors and API errors are retried with
// backoff (a namespace that is gone is looked at again at intervals: requeue.Result); final
// driver errors stop retrying until the object changes.
func result(err error) (reconcile.Result, error) {
	if err == nil || apierrors.IsConflict(err) || lookup.NamespaceGone(err) {
		return requeue.Result(err)
	}
	var later requeueError
	if errors.As(err, &later) {
		return reconcile.Result{RequeueAfter: requeueDelay}, nil
	}
	var rpc rpcError
	if errors.As(err, &rpc) && !rpc.retryable() {
		return reconcile.Result{}, reconcile.TerminalError(err)
	}
	return reconcile.Result{}, err
}

// isFinal reports whether result hands err to controller-runtime as final: not retried until the
// object changes.
func isFinal(err error) bool {
	_, rerr := result(err)
	return rerr != nil && errors.Is(rerr, reconcile.TerminalError(nil))
}

// finalError is an error that retrying cannot fix (an invalid combination of objects); it is
// recorded in conditions and not retried until the object changes.
func finalError(format string, args ...any) error {
	return reconcile.TerminalError(fmt.Errorf(format, args...))
}

// requeueDelay is how long the sidecar waits before looking again at something it cannot watch:
// a Secret in the way of an access's Secret, or one being deleted.
const requeueDelay = 5 * time.Second

// requeueError says that a reconcile waits for something the sidecar cannot watch: it is looked at
// again after requeueDelay, without counting as a failure.
type requeueError struct{ msg string }

func (e requeueError) Error() string { return e.msg }

func errRequeue(msg string) error { return requeueError{msg} }

// operationTimeout bounds a reconcile that outlives a shutdown.
const operationTimeout = 2 * time.Minute

// finishOnShutdown detaches a reconcile from the manager's shutdown: when the sidecar stops, a
// reconcile in flight still records what the driver did. Otherwise a driver call that succeeded
// could not write its result, and the next sidecar would repeat it (one extra DriverGrantBucketAccess
// per object in flight at each restart, measured by cosi-bench).
func finishOnShutdown(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), operationTimeout)
}
