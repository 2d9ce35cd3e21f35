package controller

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/cmdutil/metricreg"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/pkg/driver"
)

// Operation and status label values of the controller's metrics.
const (
	operationCreate = "Create"
	operationDelete = "Delete"

	statusSucceeded = "Succeeded"
	statusCanceled  = "Canceled"
	statusUnknown   = "Unknown"
)

// metrics are KEP-1979's controller metrics: cosi_operation_total_seconds, from creation to
// Provisioned and from the deletion timestamp to the finalizer's removal, and
// cosi_operation_count. They are observed where the transition happens: in the patch that makes
// a claim Provisioned, in the watch event that shows a Bucket or BucketAccess becoming
// Provisioned or going away, and in the patch that removes a finalizer.
type metrics struct {
	duration *prometheus.HistogramVec
	count    *prometheus.CounterVec
}

var (
	metricsOnce   sync.Once
	sharedMetrics *metrics
)

// newMetrics returns the controller metrics, registered once on controller-runtime's registry.
func newMetrics() *metrics {
	metricsOnce.Do(func() {
		m := &metrics{
			duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
				Name: "cosi_operation_total_seconds",
				Help: "End-to-end duration of COSI operations: creation to Provisioned, " +
					"deletion timestamp to finalizer removal.",
				Buckets: driver.OperationBuckets,
			}, []string{"driver_name", "resource_kind", "operation"}),
			count: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "cosi_operation_count",
				Help: "End-to-end COSI operations, by driver, kind, operation and outcome.",
			}, []string{"driver_name", "resource_kind", "operation", "status"}),
		}
		m.duration = metricreg.Register(ctrlmetrics.Registry, m.duration)
		m.count = metricreg.Register(ctrlmetrics.Registry, m.count)
		sharedMetrics = m
	})
	return sharedMetrics
}

// created records a create that finished: the object became Provisioned.
func (m *metrics) created(driverName, kind string, since time.Time) {
	m.duration.WithLabelValues(driverName, kind, operationCreate).Observe(time.Since(since).Seconds())
	m.count.WithLabelValues(driverName, kind, operationCreate, statusSucceeded).Inc()
}

// createOutcome is how a create ended, seen when its object is deleted: "" when it succeeded
// (counted then), statusCanceled when the object went before the driver did anything, and
// statusUnknown when the driver was called but never reported success: the backend may hold part
// of it (KEP-1979's "Unknown" status of cosi_operation_count).
func createOutcome(provisioned, driverCalled bool) string {
	switch {
	case provisioned:
		return ""
	case driverCalled:
		return statusUnknown
	}
	return statusCanceled
}

// driverCalled reports whether a driver call was recorded in the conditions (ProvisionFailed is
// True or False only after one).
func driverCalled(obj conditions.Getter) bool {
	return conditions.IsKnown(obj, cosiapi.ConditionProvisionFailed)
}

// deleted records a delete that finished, and the outcome of its create if it did not succeed.
func (m *metrics) deleted(driverName, kind string, since time.Time, create string) {
	if create != "" {
		m.count.WithLabelValues(driverName, kind, operationCreate, create).Inc()
	}
	m.duration.WithLabelValues(driverName, kind, operationDelete).Observe(time.Since(since).Seconds())
	m.count.WithLabelValues(driverName, kind, operationDelete, statusSucceeded).Inc()
}
