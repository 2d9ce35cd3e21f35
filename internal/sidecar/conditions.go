package sidecar

import (
	"fmt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

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
func (e rpcError) retryable() bool { return driver.Retryable(e.err) }

// result hands err to controller-runtime: retryable driver errors and API errors are retried with
// backoff; final driver errors stop retrying until the object changes.
func result(err error) (reconcile.Result, error) {
	if err == nil || apierrors.IsConflict(err) {
		return apiutil.Result(err)
	}
	var rpc rpcError
	if asRPC(err, &rpc) && !rpc.retryable() {
		return reconcile.Result{}, reconcile.TerminalError(err)
	}
	return reconcile.Result{}, err
}

func asRPC(err error, target *rpcError) bool {
	e, ok := err.(rpcError)
	if ok {
		*target = e
	}
	return ok
}

// finalError is an error that retrying cannot fix (an invalid combination of objects); it is
// recorded in conditions and not retried until the object changes.
func finalError(format string, args ...any) error {
	return reconcile.TerminalError(fmt.Errorf(format, args...))
}
