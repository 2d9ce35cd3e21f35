package driver

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Log verbosity of the SDK's gRPC logging, on both sides.
const (
	// LogLevelCalls logs one line per call: method, code, duration.
	LogLevelCalls = 2
	// LogLevelBodies also logs requests and responses, with secrets stripped.
	LogLevelBodies = 5
)

// serverInterceptor logs, measures and validates every call a driver serves. Validation runs
// before the handler, so a driver never sees a request the COSI spec calls invalid.
func serverInterceptor(log logr.Logger, metrics *operationMetrics, driverName string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		method := methodName(info.FullMethod)
		start := time.Now()
		log.V(LogLevelBodies).Info("request", "method", method, "request", StripSecrets(req))

		resp, err := func() (any, error) {
			if err := ValidateRequest(req); err != nil {
				return nil, err
			}
			return handler(ctx, req)
		}()
		observe(log, metrics, driverName, method, start, resp, err)
		return resp, err
	}
}

// clientInterceptor logs every call the sidecar makes on the wire (for a v1alpha1 driver, the
// adapter's v1alpha1 calls), with the logger of its context when it carries one (see callLogger),
// else with fallback. Metrics and the call timeout are per v1alpha2 operation (operations).
func clientInterceptor(fallback logr.Logger) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, fullMethod string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption,
	) error {
		log := callLogger(ctx, fallback)
		method := methodName(fullMethod)
		start := time.Now()
		log.V(LogLevelBodies).Info("request", "method", method, "request", StripSecrets(req))
		err := invoker(ctx, fullMethod, req, reply, cc, opts...)
		var resp any
		if err == nil {
			resp = reply
		}
		observe(log, nil, "", method, start, resp, err)
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

func observe(
	log logr.Logger,
	metrics *operationMetrics,
	driverName, method string,
	start time.Time,
	resp any,
	err error,
) {
	elapsed := time.Since(start)
	code := status.Code(err)
	if metrics != nil {
		metrics.duration.WithLabelValues(driverName, method, code.String()).Observe(elapsed.Seconds())
		if code != codes.OK {
			metrics.errors.WithLabelValues(metrics.errorLabels(driverName, method, code)...).Inc()
		}
	}
	if err != nil {
		// The status message is the driver's; drivers must not put secrets in it (COSI spec).
		log.V(LogLevelCalls).Info("call failed", "method", method, "code", code.String(),
			"message", status.Convert(err).Message(), "duration", elapsed)
		return
	}
	log.V(LogLevelCalls).Info("call succeeded", "method", method, "duration", elapsed)
	log.V(LogLevelBodies).Info("response", "method", method, "response", StripSecrets(resp))
}
