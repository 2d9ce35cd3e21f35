package calls

import (
	"errors"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

// OperationBuckets are the histogram buckets, in seconds, of KEP-1979's operation duration metrics.
var OperationBuckets = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300, 600}

// OperationMetrics measure gRPC operations, with the bounded labels driver_name, method_name and
// grpc_status_code. The same shape serves the driver side (subsystem "driver") and the sidecar's
// client side (subsystem "sidecar": cosi_sidecar_operation_duration_seconds and
// cosi_sidecar_operation_errors_total, as KEP-1979 names them).
//
// KEP-1979 names exactly driver_name and method_name for cosi_sidecar_operation_errors_total: the
// sidecar's counter has those two (the code is in the duration histogram); the driver side keeps
// the code, which the KEP does not constrain.
type OperationMetrics struct {
	Duration *prometheus.HistogramVec
	Errors   *prometheus.CounterVec
	// errorsByCode: the errors counter has the grpc_status_code label.
	errorsByCode bool
}

// ErrorLabels are the label values of the errors counter for a call that failed with code.
func (m *OperationMetrics) ErrorLabels(driverName, method string, code codes.Code) []string {
	if m.errorsByCode {
		return []string{driverName, method, code.String()}
	}
	return []string{driverName, method}
}

// NewOperationMetrics registers the metrics of subsystem "driver" or "sidecar" with reg (nil: none).
func NewOperationMetrics(reg prometheus.Registerer, subsystem string) (*OperationMetrics, error) {
	ErrorLabels, errorHelp := []string{
		"driver_name",
		"method_name",
	}, "COSI driver gRPC operations that returned an error, by driver and method."
	byCode := subsystem != "sidecar"
	if byCode {
		ErrorLabels = append(ErrorLabels, "grpc_status_code")
		errorHelp = "COSI driver gRPC operations that returned an error, by driver, method and gRPC status code."
	}
	m := &OperationMetrics{
		errorsByCode: byCode,
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "cosi",
			Subsystem: subsystem,
			Name:      "operation_duration_seconds",
			Help:      "Duration of COSI driver gRPC operations, from end to end, by driver, method and gRPC status code.",
			Buckets:   OperationBuckets,
		}, []string{"driver_name", "method_name", "grpc_status_code"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "cosi",
			Subsystem: subsystem,
			Name:      "operation_errors_total",
			Help:      errorHelp,
		}, ErrorLabels),
	}
	var err error
	m.Duration, err = Register(reg, m.Duration)
	if err != nil {
		return nil, err
	}
	m.Errors, err = Register(reg, m.Errors)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Register registers c, or returns the identical collector already registered, so that several
// servers or clients in one process (tests, multi-driver tools) share the metrics.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
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

// MethodName turns "/cosi.v1alpha2.Provisioner/DriverCreateBucket" into "DriverCreateBucket".
func MethodName(fullMethod string) string {
	return fullMethod[strings.LastIndex(fullMethod, "/")+1:]
}
