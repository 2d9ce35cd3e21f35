package calls

import (
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The log verbosities of the SDK's gRPC logging (driver.LogLevelCalls and driver.LogLevelBodies).
const (
	LogLevelCalls  = 2
	LogLevelBodies = 5
)

// Observe logs and measures (metrics may be nil) one call that started at start and ended with
// err; on success it logs resp at LogLevelBodies, which the caller has stripped of secrets
// (driver.StripSecrets).
func Observe(
	log logr.Logger,
	metrics *OperationMetrics,
	driverName, method string,
	start time.Time,
	resp any,
	err error,
) {
	elapsed := time.Since(start)
	code := status.Code(err)
	if metrics != nil {
		metrics.Duration.WithLabelValues(driverName, method, code.String()).Observe(elapsed.Seconds())
		if code != codes.OK {
			metrics.Errors.WithLabelValues(metrics.ErrorLabels(driverName, method, code)...).Inc()
		}
	}
	if err != nil {
		// The status message is the driver's; drivers must not put secrets in it (COSI spec).
		log.V(LogLevelCalls).Info("call failed", "method", method, "code", code.String(),
			"message", status.Convert(err).Message(), "duration", elapsed)
		return
	}
	log.V(LogLevelCalls).Info("call succeeded", "method", method, "duration", elapsed)
	log.V(LogLevelBodies).Info("response", "method", method, "response", resp)
}
