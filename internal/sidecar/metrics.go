package sidecar

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kube-cosi/cosi/internal/cmdutil/metricreg"
)

// Results of a Secret check (cosi_sidecar_secret_checks_total's result label).
const (
	secretCheckIntact    = "Intact"
	secretCheckRewritten = "Rewritten"
	secretCheckFailed    = "Failed"
	// secretCheckRotating: a Secret was lost while a rotation writes the Secrets; it is let go and
	// the rotation writes it.
	secretCheckRotating = "Rotating"
)

// Kinds of scheduled check (cosi_sidecar_scheduled_check_decisions_total's check label).
const (
	scheduledCheckSecrets    = "Secrets"    // an access's Secrets (BucketAccessReconciler.check)
	scheduledCheckBucketInfo = "BucketInfo" // a Bucket's information (BucketReconciler.refreshBucket)
	scheduledCheckUsage      = "Usage"      // a Bucket's usage (BucketReconciler.checkUsage)
)

var (
	secretChecksOnce   sync.Once
	secretCheckCounter *prometheus.CounterVec

	scheduledChecksOnce   sync.Once
	scheduledCheckCounter *prometheus.CounterVec
)

// secretCheckMetric is cosi_sidecar_secret_checks_total, registered once per process on
// controller-runtime's registry, with every result's series at zero for driverName so that rates
// and alerts see them before the first check.
func secretCheckMetric(driverName string) *prometheus.CounterVec {
	secretChecksOnce.Do(func() {
		secretCheckCounter = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cosi_sidecar_secret_checks_total",
			Help: "Periodic checks of the Secrets of provisioned BucketAccesses, by driver and result: Intact, " +
				"Rewritten (a Secret was missing, foreign or incomplete and was written again), Rotating (a Secret " +
				"was lost while a rotation writes the Secrets: the rotation writes it) or Failed.",
		}, []string{"driver_name", "result"})
		secretCheckCounter = metricreg.Register(ctrlmetrics.Registry, secretCheckCounter)
	})
	for _, r := range []string{secretCheckIntact, secretCheckRewritten, secretCheckRotating, secretCheckFailed} {
		secretCheckCounter.WithLabelValues(driverName, r)
	}
	return secretCheckCounter
}

// scheduledCheckMetric is cosi_sidecar_scheduled_check_decisions_total, registered once per
// process on controller-runtime's registry: what the rate limit of the scheduled checks decided
// (schedule.go), by driver, kind of check and decision. Its series are made for a driver and a kind
// by secretChecks.countDecisions, at zero.
func scheduledCheckMetric() *prometheus.CounterVec {
	scheduledChecksOnce.Do(func() {
		scheduledCheckCounter = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cosi_sidecar_scheduled_check_decisions_total",
			Help: "Reconciles of provisioned objects that asked whether their scheduled check (Secrets of a " +
				"BucketAccess, information of a Bucket) runs, by driver, check and decision: NotDue (checked " +
				"less than an interval ago; each Ran is followed by one, for the next check), Placed (due, it " +
				"took a place in the rate limit), Kept (woken before its place), Ran, Refused (its place " +
				"passed with others; it runs at its reservation).",
		}, []string{"driver_name", "check", "decision"})
		scheduledCheckCounter = metricreg.Register(ctrlmetrics.Registry, scheduledCheckCounter)
	})
	return scheduledCheckCounter
}
