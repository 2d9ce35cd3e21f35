package driver

import (
	"errors"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

// OperationBuckets are the histogram buckets, in seconds, of KEP-1979's operation duration metrics.
var OperationBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300, 600}

// operationMetrics measure gRPC operations, with the bounded labels driver_name, method_name and
// grpc_status_code. The same shape serves the driver side (subsystem "driver") and the sidecar's
// client side (subsystem "sidecar": cosi_sidecar_operation_duration_seconds and
// cosi_sidecar_operation_errors_total, as KEP-1979 names them).
//
// KEP-1979 names exactly driver_name and method_name for cosi_sidecar_operation_errors_total: the
// sidecar's counter has those two (the code is in the duration histogram); the driver side keeps
// the code, which the KEP does not constrain.
type operationMetrics struct {
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
	// errorsByCode: the errors counter has the grpc_status_code label.
	errorsByCode bool
}

func (m *operationMetrics) errorLabels(driverName, method string, code codes.Code) []string {
	if m.errorsByCode {
		return []string{driverName, method, code.String()}
	}
	return []string{driverName, method}
}

func newOperationMetrics(reg prometheus.Registerer, subsystem string) (*operationMetrics, error) {
	errorLabels, errorHelp := []string{
		"driver_name",
		"method_name",
	}, "COSI driver gRPC operations that returned an error, by driver and method."
	byCode := subsystem != "sidecar"
	if byCode {
		errorLabels = append(errorLabels, "grpc_status_code")
		errorHelp = "COSI driver gRPC operations that returned an error, by driver, method and gRPC status code."
	}
	m := &operationMetrics{
		errorsByCode: byCode,
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "cosi",
			Subsystem: subsystem,
			Name:      "operation_duration_seconds",
			Help:      "Duration of COSI driver gRPC operations, from end to end, by driver, method and gRPC status code.",
			Buckets:   OperationBuckets,
		}, []string{"driver_name", "method_name", "grpc_status_code"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "cosi",
			Subsystem: subsystem,
			Name:      "operation_errors_total",
			Help:      errorHelp,
		}, errorLabels),
	}
	var err error
	m.duration, err = register(reg, m.duration)
	if err != nil {
		return nil, err
	}
	m.errors, err = register(reg, m.errors)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the identical collector already registered, so that several
// servers or clients in one process (tests, multi-driver tools) share the metrics.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) {
			if existing, ok := already.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

// methodName turns "/cosi.v1alpha2.Provisioner/DriverCreateBucket" into "DriverCreateBucket".
func methodName(fullMethod string) string {
	return fullMethod[strings.LastIndex(fullMethod, "/")+1:]
}
