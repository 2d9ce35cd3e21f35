package metricreg_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kube-cosi/cosi/internal/cmdutil/metricreg"
)

func newCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cosi_test_total", Help: "A test counter."},
		[]string{"driver_name"})
}

// A collector registered a second time counts on the first: what the second counts reaches the
// registry (before, the second was kept, unregistered, and its counts were lost).
func TestRegisterReturnsTheRegisteredCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	first := metricreg.Register(reg, newCounter())
	second := metricreg.Register(reg, newCounter())
	if second != first {
		t.Fatal("the second registration returned its own, unregistered collector")
	}
	second.WithLabelValues("d").Inc()
	if n, err := testutil.GatherAndCount(reg, "cosi_test_total"); err != nil || n != 1 {
		t.Fatalf("registry has %d series (%v), want the one counted", n, err)
	}
	if v := testutil.ToFloat64(first.WithLabelValues("d")); v != 1 {
		t.Fatalf("counted %v, want 1", v)
	}
}

// A name registered with other labels is a programming error: it panics.
func TestRegisterPanicsOnAConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	metricreg.Register(reg, newCounter())
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a name registered with other labels")
		}
	}()
	metricreg.Register(reg, prometheus.NewCounterVec(
		prometheus.CounterOpts{Name: "cosi_test_total", Help: "A test counter."}, []string{"other"}))
}
