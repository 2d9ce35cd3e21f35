package bench

import (
	"context"
	"errors"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/utils/ptr"
)

// The fit the 100,000 figures are extrapolated with: exact on points on a line, the mean when
// there is nothing to fit a slope to.
func TestLinearFit(t *testing.T) {
	f := linearFit([]float64{3000, 10000, 20000}, []float64{50 + 3000*0.01, 50 + 10000*0.01, 50 + 20000*0.01})
	if math.Abs(f.Intercept-50) > 1e-9 || math.Abs(f.Slope-0.01) > 1e-12 {
		t.Errorf("fit of points on y = 50 + 0.01x: %+v", f)
	}
	if got := f.At(100000); math.Abs(got-1050) > 1e-6 {
		t.Errorf("at 100,000: %v, want 1050", got)
	}
	// Least squares through (0,0), (1,1), (2,3): slope 1.5, intercept -1/6.
	f = linearFit([]float64{0, 1, 2}, []float64{0, 1, 3})
	if math.Abs(f.Slope-1.5) > 1e-12 || math.Abs(f.Intercept+1.0/6) > 1e-12 {
		t.Errorf("least squares of (0,0) (1,1) (2,3): %+v", f)
	}
	if f := linearFit([]float64{5, 5}, []float64{1, 3}); f.Slope != 0 || f.Intercept != 2 {
		t.Errorf("one size only: %+v, want flat at the mean 2", f)
	}
	if f := linearFit(nil, nil); f != (Fit{}) {
		t.Errorf("no points: %+v", f)
	}
}

// Bytes per object set are the growth over the memory before any object.
func TestBytesPer(t *testing.T) {
	if got := bytesPer(150, 50, 1000); got != 100*(1<<20)/1000.0 {
		t.Errorf("bytesPer(150, 50, 1000) = %v", got)
	}
	if got := bytesPer(150, 50, 0); got != 0 {
		t.Errorf("no objects: %v", got)
	}
}

// The writes of a catch-up are all writes; the unscheduled ones leave out the Secret checks,
// which come every Secret check interval whether or not anything restarted.
func TestWrites(t *testing.T) {
	all, unscheduled := Writes(map[string]float64{
		"PATCH secrets 200":               40,
		"PATCH bucketaccesses/status 200": 2,
		"POST configmaps 201":             1,
		"GET bucketaccesses 200":          100,
		"LIST secrets 200":                3,
		"PUT leases 200":                  4,
		"WATCH buckets 200":               1,
	})
	if all != 47 || unscheduled != 7 {
		t.Errorf("writes %v, unscheduled %v; want 47 and 7", all, unscheduled)
	}
}

func TestMutatingCalls(t *testing.T) {
	got := MutatingCalls(map[string]float64{
		"DriverGetInfo": 4, "DriverGetBucket": 30, "DriverCreateBucket": 1, "DriverRevokeBucketAccess": 2,
	})
	if got != 3 {
		t.Errorf("MutatingCalls = %v, want 3 (create and revoke; not GetInfo, not GetBucket)", got)
	}
}

// Caught up: every reconciler at its count (more is fine: an object changed meanwhile) and
// nothing queued.
func TestCaughtUp(t *testing.T) {
	want := map[string]float64{"controller bucketclaim": 10, "sidecar sidecar-grant": 10}
	for _, tc := range []struct {
		name       string
		reconciled map[string]float64
		queued     float64
		ok         bool
	}{
		{"all done", map[string]float64{"controller bucketclaim": 10, "sidecar sidecar-grant": 11}, 0, true},
		{"one short", map[string]float64{"controller bucketclaim": 10, "sidecar sidecar-grant": 9}, 0, false},
		{"one absent", map[string]float64{"controller bucketclaim": 10}, 0, false},
		{"queue not empty", map[string]float64{"controller bucketclaim": 10, "sidecar sidecar-grant": 10}, 1, false},
	} {
		if got := caughtUp(tc.reconciled, want, tc.queued); got != tc.ok {
			t.Errorf("%s: caughtUp = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

// The fits are per figure, over the sizes, in the order of scaleSeries.
func TestScaleFits(t *testing.T) {
	sizes := []ScaleResult{
		{N: 1000, ControllerRSS: 60, CaughtUpSec: 2},
		{N: 3000, ControllerRSS: 80, CaughtUpSec: 6},
	}
	fits := ScaleFits(sizes)
	for j, s := range scaleSeries {
		switch s.name {
		case "controller RSS, steady":
			if f := fits[j]; math.Abs(f.Slope-0.01) > 1e-12 || math.Abs(f.At(100000)-1050) > 1e-6 {
				t.Errorf("controller RSS fit %+v", f)
			}
		case "restart → caught up":
			if f := fits[j]; math.Abs(f.At(100000)-200) > 1e-6 {
				t.Errorf("caught-up fit %+v, at 100,000 %v", f, f.At(100000))
			}
		}
	}
}

// The catch-up's CPU: controller and sidecar are stopped when the reading before is taken, so
// their new processes count from zero; the others count from the reading before.
func TestCPUDelta(t *testing.T) {
	got := cpuDelta(map[string]float64{"kube-apiserver": 100, "etcd": 7},
		map[string]float64{"kube-apiserver": 130, "etcd": 8, "cosi-controller": 3, "cosi-sidecar": 4})
	want := map[string]float64{"kube-apiserver": 30, "etcd": 1, "cosi-controller": 3, "cosi-sidecar": 4}
	if !maps.Equal(got, want) {
		t.Errorf("cpuDelta = %v, want %v", got, want)
	}
}

// A run that broke says at which size, and shows and fits only the sizes measured in full.
func TestPrintScaleBroke(t *testing.T) {
	run := ScaleRun{
		Sizes:      []ScaleResult{{N: 40000, ControllerRSS: 683}, {N: 60000, ControllerRSS: 1073}},
		BrokeAt:    80000,
		BrokeError: "context canceled",
	}
	var out strings.Builder
	printScale(&out, 0, run)
	if !strings.Contains(out.String(), "Not reached: N=80000 (context canceled)") {
		t.Errorf("no break in:\n%s", out.String())
	}
	if strings.Count(out.String(), "80000") != 1 {
		t.Errorf("the size not reached is shown as measured:\n%s", out.String())
	}
}

// A size that could not be reached is where the run stopped, not a size measured: the
// 40,000/60,000/80,000 run interrupted at 80,000 had its zero row fitted.
func TestReachStopsAtTheBreak(t *testing.T) {
	var run ScaleRun
	var calls []int
	err := run.reach([]int{10, 20, 30, 40}, func(from, n int) (ScaleResult, error) {
		calls = append(calls, from)
		if n == 30 {
			return ScaleResult{N: n}, context.Canceled
		}
		return ScaleResult{N: n, ControllerRSS: float64(n)}, nil
	}, func(ScaleRun) {})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v", err)
	}
	if len(run.Sizes) != 2 || run.Sizes[1].N != 20 || run.BrokeAt != 30 || run.BrokeError != "context canceled" {
		t.Errorf("run %+v", run)
	}
	if !slices.Equal(calls, []int{0, 10, 20}) {
		t.Errorf("measured from %v", calls)
	}
}

// The quiet period's scheduled-check decisions: first places, refusals and runs, and what a check
// that ran cost in reconciles.
func TestPrintScaleCheckDecisions(t *testing.T) {
	run := ScaleRun{Sizes: []ScaleResult{{N: 40000, QuietCheckDecisions: map[string]float64{
		"Placed": 800, "Refused": 150, "Kept": 50, "Ran": 1000, "NotDue": 9000,
	}}}}
	var out strings.Builder
	printScale(&out, 0, run)
	if !strings.Contains(out.String(), "800 / 150 / 1000 (2.00)") {
		t.Errorf("no decisions in:\n%s", out.String())
	}
}

func TestCheckDecisions(t *testing.T) {
	series := func(decision string, v float64) *dto.Metric {
		return &dto.Metric{
			Label: []*dto.LabelPair{
				{Name: ptr.To("driver_name"), Value: ptr.To("d")}, {Name: ptr.To("check"), Value: ptr.To("Secrets")},
				{Name: ptr.To("decision"), Value: ptr.To(decision)},
			},
			Counter: &dto.Counter{Value: ptr.To(v)},
		}
	}
	family := func(ms ...*dto.Metric) metrics {
		return metrics{scheduledCheckDecisions: &dto.MetricFamily{Metric: ms}}
	}
	got := checkDecisions(family(series("Ran", 5), series("Placed", 2)), family(series("Ran", 12), series("Placed", 2),
		series("Refused", 3)))
	if want := map[string]float64{"Ran": 7, "Refused": 3}; !maps.Equal(got, want) {
		t.Errorf("decisions %v, want %v", got, want)
	}
}

// The compared restarts: each build's median, and the second's over the first's.
func TestPrintCompared(t *testing.T) {
	restart := func(dir string, s, ctl float64) RestartFigures {
		return RestartFigures{BinDir: dir, CaughtUpSec: s,
			CPU:                map[string]float64{"cosi-controller": ctl, "cosi-sidecar": 2 * ctl, "kube-apiserver": 10},
			ControllerLiveHeap: 10 * ctl}
	}
	var b strings.Builder
	printCompared(&b, ScaleResult{N: 10000, Compared: []RestartFigures{
		restart("old", 40, 8), restart("new", 30, 4), restart("old", 44, 10), restart("new", 20, 6),
		restart("old", 42, 12), restart("new", 25, 5),
	}})
	out := b.String()
	for _, want := range []string{
		"N=10000: restarts alternated",            // the heading
		"median old 42.0 10.0 20.0 10.0 100 0.00", // medians of 40/44/42, 8/10/12, 16/20/24, 10, 80/100/120, 0
		"median new 25.0 5.00 10.0 10.0 50.0 0.00",
		"ratio, second / first  0.60  0.50  0.50  1.00 0.50 -",
	} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	b.Reset()
	printCompared(&b, ScaleResult{N: 1})
	if b.Len() != 0 {
		t.Errorf("no compared restarts printed %q", b.String())
	}
}

func TestHeapAlloc(t *testing.T) {
	profile := "heap profile: 3: 4096 [9: 8192] @ heap/1048576\n1: 1024 [1: 1024] @ 0x1\n\n" +
		"# runtime.MemStats\n# Alloc = 1\n# HeapAlloc = 3145728\n# Sys = 9\n"
	if got, err := heapAlloc(strings.NewReader(profile)); err != nil || got != 3 {
		t.Errorf("heapAlloc: %v, %v; want 3 MiB", got, err)
	}
	if _, err := heapAlloc(strings.NewReader("heap profile: 0: 0 [0: 0] @ heap/1\n")); err == nil {
		t.Error("a profile without HeapAlloc: no error")
	}
}
