package sidecar_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/kube-cosi/cosi/internal/sidecar"
)

// Every driver call runs inside a reconcile, whose deadline is two minutes (and the shutdown waits
// that long for it): a longer --driver-timeout would be cut there without a word. The sidecar
// refuses it at start-up, before it connects to the driver, naming the flag and the limit.
func TestDriverTimeoutAboveTheReconcileDeadlineIsRefused(t *testing.T) {
	t.Parallel()
	run := func(d time.Duration) error {
		opts := sidecarOptions("unix://" + filepath.Join(t.TempDir(), "missing.sock"))
		opts.DriverTimeout = d
		opts.DriverStartTimeout = 300 * time.Millisecond
		return sidecar.Run(t.Context(), sidecarConfig, opts, logr.Discard())
	}
	for _, d := range []time.Duration{2*time.Minute + time.Second, 10 * time.Minute, -time.Second} {
		if err := run(d); err == nil || !strings.Contains(err.Error(), "--driver-timeout") ||
			!strings.Contains(err.Error(), "2m0s") {
			t.Errorf("--driver-timeout=%v: %v, want a refusal naming the flag and the limit", d, err)
		}
	}
	// Up to the limit (and 0, the default of one minute), the sidecar starts as usual: it waits
	// for the driver, which is missing here.
	for _, d := range []time.Duration{0, time.Minute, 2 * time.Minute} {
		if err := run(d); err == nil || !strings.Contains(err.Error(), "did not answer") {
			t.Errorf("--driver-timeout=%v: %v, want the missing driver's error", d, err)
		}
	}
}
