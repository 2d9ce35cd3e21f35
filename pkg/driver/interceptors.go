package driver

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"

	"github.com/kube-cosi/cosi/pkg/driver/internal/calls"
)

// Log verbosity of the SDK's gRPC logging, on both sides.
const (
	// LogLevelCalls logs one line per call: method, code, duration.
	LogLevelCalls = calls.LogLevelCalls
	// LogLevelBodies also logs requests and responses, with secrets stripped.
	LogLevelBodies = calls.LogLevelBodies
)

// serverInterceptor logs, measures and validates every call a driver serves. Validation runs
// before the handler, so a driver never sees a request the COSI spec calls invalid.
func serverInterceptor(
	log logr.Logger, metrics *calls.OperationMetrics, driverName string,
) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		method := calls.MethodName(info.FullMethod)
		start := time.Now()
		log.V(LogLevelBodies).Info("request", "method", method, "request", StripSecrets(req))

		resp, err := func() (any, error) {
			if err := ValidateRequest(req); err != nil {
				return nil, err
			}
			return handler(ctx, req)
		}()
		calls.Observe(log, metrics, driverName, method, start, StripSecrets(resp), err)
		return resp, err
	}
}
