package driverclient

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"

	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/internal/calls"
)

// clientInterceptor logs every call the sidecar makes on the wire (for a v1alpha1 driver, the
// adapter's v1alpha1 calls), with the logger of its context when it carries one (see callLogger),
// else with fallback. Metrics and the call timeout are per v1alpha2 operation (operations).
func clientInterceptor(fallback logr.Logger) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, fullMethod string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption,
	) error {
		log := callLogger(ctx, fallback)
		method := calls.MethodName(fullMethod)
		start := time.Now()
		log.V(driver.LogLevelBodies).Info("request", "method", method, "request", driver.StripSecrets(req))
		err := invoker(ctx, fullMethod, req, reply, cc, opts...)
		var resp any
		if err == nil {
			resp = reply
		}
		calls.Observe(log, nil, "", method, start, driver.StripSecrets(resp), err)
		return err
	}
}

// callLogger returns the logger of the call's context, when it has one: controller-runtime puts
// the reconcile's logger there, with the controller's and the object's names, so that each line
// of a driver call names the object it was made for. Otherwise it returns fallback.
func callLogger(ctx context.Context, fallback logr.Logger) logr.Logger {
	if log, err := logr.FromContext(ctx); err == nil {
		return log
	}
	return fallback
}
