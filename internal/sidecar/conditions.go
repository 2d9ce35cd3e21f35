package sidecar

import (
	"context"
	"errors"
	"fmt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kube-cosi/cosi/internal/apiutil"
	"github.com/kube-cosi/cosi/pkg/driver"
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

// retryable reports whether the driver call may succeed when repeated (see driver.Retryable).
// NotFound from DriverGetBucket is retried too: an imported bucket may appear (KEP-1979
// "DriverGetBucket").
func (e rpcError) retryable() bool {
	return driver.Retryable(e.err) || (e.method == "DriverGetBucket" && status.Code(e.err) == codes.NotFound)
}

// result hands err to controller-runtime: retryable driver errors and API errors are retried with
// backoff; final driver errors stop retrying until the object changes.
func result(err error) (reconcile.Result, error) {
	if err == nil || apierrors.IsConflict(err) {
		return apiutil.Result(err)
	}
	var rpc rpcError
	if errors.As(err, &rpc) && !rpc.retryable() {
		return reconcile.Result{}, reconcile.TerminalError(err)
	}
	return reconcile.Result{}, err
}

// finalError is an error that retrying cannot fix (an invalid combination of objects); it is
// recorded in conditions and not retried until the object changes.
func finalError(format string, args ...any) error {
	return reconcile.TerminalError(fmt.Errorf(format, args...))
}

// operationTimeout bounds a reconcile that outlives a shutdown.
const operationTimeout = 2 * time.Minute

// finishOnShutdown detaches a reconcile from the manager's shutdown: when the sidecar stops, a
// reconcile in flight still records what the driver did. Otherwise a driver call that succeeded
// could not write its result, and the next sidecar would repeat it (one extra DriverGrantBucketAccess
// per object in flight at each restart, measured by cosi-bench).
func finishOnShutdown(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), operationTimeout)
}
