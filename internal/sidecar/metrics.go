package sidecar

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Results of a Secret check (cosi_sidecar_secret_checks_total's result label).
const (
	secretCheckIntact    = "Intact"
	secretCheckRewritten = "Rewritten"
	secretCheckFailed    = "Failed"
)

var (
	secretChecksOnce   sync.Once
	secretCheckCounter *prometheus.CounterVec
)

// secretCheckMetric is cosi_sidecar_secret_checks_total, registered once per process on
// controller-runtime's registry, with every result's series at zero for driverName so that rates
// and alerts see them before the first check.
func secretCheckMetric(driverName string) *prometheus.CounterVec {
	secretChecksOnce.Do(func() {
		secretCheckCounter = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cosi_sidecar_secret_checks_total",
			Help: "Periodic checks of the Secrets of provisioned BucketAccesses, by driver and result: Intact, " +
				"Rewritten (a Secret was missing, foreign or incomplete and was written again) or Failed.",
		}, []string{"driver_name", "result"})
		if err := ctrlmetrics.Registry.Register(secretCheckCounter); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				panic(err)
			}
		}
	})
	for _, r := range []string{secretCheckIntact, secretCheckRewritten, secretCheckFailed} {
		secretCheckCounter.WithLabelValues(driverName, r)
	}
	return secretCheckCounter
}
