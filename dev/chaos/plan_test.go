package chaos

import (
	"maps"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

// The same seed draws the same plan; another seed another one.
func TestPlanSeeded(t *testing.T) {
	cfg := DefaultConfig(200)
	a, b := newPlan(cfg), newPlan(cfg)
	if !reflect.DeepEqual(a, b) {
		t.Error("two plans of one seed differ")
	}
	cfg.Seed++
	if reflect.DeepEqual(a, newPlan(cfg)) {
		t.Error("two seeds drew the same plan")
	}
}

// At CI size the plan holds every case the workload promises, and no kept access reaches a claim
// that is deleted (its deletion would wait for ever, rightly).
func TestPlanCoversTheWorkload(t *testing.T) {
	p := newPlan(DefaultConfig(200))
	if p.claims() != 200 {
		t.Errorf("%d claims, want 200", p.claims())
	}
	seen := map[string]int{}
	for _, ns := range p.namespaces {
		if ns.deleteWhole {
			seen["namespace deleted whole"]++
		}
		if ns.early {
			seen["deleted before provisioned"]++
		}
		for _, c := range ns.claims {
			switch {
			case c.static:
				seen["static"]++
			case c.retain:
				seen["Retain"]++
			default:
				seen["Delete"]++
			}
			if c.keep {
				seen["claim kept"]++
			}
			if c.releaseBucket {
				seen["retained Bucket released"]++
			}
		}
		for _, a := range ns.access {
			if len(a.claims) > 1 {
				seen["multi-bucket"]++
			}
			if a.periodic {
				seen["periodic rotation"]++
				if a.keep {
					seen["kept access rotating periodically"]++
				}
			}
			switch {
			case a.keep && len(a.rotations) == 2:
				seen["kept access rotated twice"]++
			case a.keep && len(a.rotations) == 1:
				seen["kept access rotated once"]++
			case len(a.rotations) > 0:
				seen["access rotated before its deletion"]++
			}
			if len(a.refreshes) > 0 && a.keep {
				seen["kept access refreshed"]++
			} else if len(a.refreshes) > 0 {
				seen["access refreshed before its deletion"]++
			}
			if a.keep {
				seen["access kept"]++
				for _, c := range a.claims {
					if !ns.claims[c].keep {
						t.Errorf("%s/%s is kept but reaches %s, which is deleted", ns.name, a.name, ns.claims[c].name)
					}
				}
				continue
			}
			seen["access deleted "+a.order.String()]++
		}
	}
	for _, want := range []string{
		"namespace deleted whole", "deleted before provisioned", "static", "Retain", "Delete", "claim kept",
		"retained Bucket released", "multi-bucket", "access kept", "access deleted before", "access deleted with",
		"access deleted after", "periodic rotation", "kept access rotated twice", "kept access rotated once",
		"access rotated before its deletion", "kept access refreshed", "access refreshed before its deletion",
		"kept access rotating periodically",
	} {
		if seen[want] == 0 {
			t.Errorf("no %s in the plan: %v", want, seen)
		}
	}
}

// The driver's faults make the configured error rate, and each parses.
func TestFaultSpecs(t *testing.T) {
	r := &run{cfg: DefaultConfig(1)}
	r.cfg.Faults.LateRate = 0.01
	perMethod := map[string]float64{}
	slow, firsts := 0, 0
	for _, spec := range r.faultSpecs() {
		f, err := memory.ParseFault(spec)
		if err != nil {
			t.Fatal(err)
		}
		if f.Delay > 0 {
			slow++
			if f.Delay <= r.cfg.DriverTimeout {
				t.Errorf("%s: not beyond the driver timeout %v", spec, r.cfg.DriverTimeout)
			}
			continue
		}
		if f.Count > 0 {
			// The first call of a rotation's method fails, then the rates apply.
			if !slices.Contains(rotationMethods, f.Method) || f.Count != 1 {
				t.Errorf("%s: a counted fault of a method other than the rotation's", spec)
			}
			firsts++
			continue
		}
		// Faults are tried in turn: the chance that none hits is the product.
		if _, ok := perMethod[f.Method]; !ok {
			perMethod[f.Method] = 1
		}
		perMethod[f.Method] *= 1 - f.Rate
	}
	for _, m := range []string{"DriverRotateBucketAccessCredentials", "DriverRetireBucketAccessCredentials"} {
		if _, ok := perMethod[m]; !ok {
			t.Errorf("no faults for %s", m)
		}
	}
	if len(perMethod) != len(provisionerMethods) || slow != 2*len(provisionerMethods) ||
		firsts != len(rotationMethods) {
		t.Errorf("faults for %d methods, %d slow ones, %d first calls", len(perMethod), slow, firsts)
	}
	for m, none := range perMethod {
		if got := 1 - none; math.Abs(got-r.cfg.Faults.ErrorRate) > 1e-9 {
			t.Errorf("%s fails at %v, want %v", m, got, r.cfg.Faults.ErrorRate)
		}
	}
	if r.cfg.DriverTimeout != 2*time.Second {
		t.Errorf("default driver timeout %v", r.cfg.DriverTimeout)
	}
}

// With a v1alpha1 driver the plan is the other drivers' less what v1alpha1 cannot do: every access
// reaches one claim, and none rotates; refreshes, kept and deleted accesses stay.
func TestPlanV1alpha1(t *testing.T) {
	cfg := DefaultConfig(200)
	full := newPlan(cfg)
	cfg.Driver = DriverV1alpha1
	p := newPlan(cfg)
	if !reflect.DeepEqual(p, newPlan(cfg)) {
		t.Error("two v1alpha1 plans of one seed differ")
	}
	seen := map[string]int{}
	for i, ns := range p.namespaces {
		if !reflect.DeepEqual(ns.claims, full.namespaces[i].claims) || len(ns.access) != len(full.namespaces[i].access) {
			t.Errorf("%s: its claims or its number of accesses differ from the other drivers' plan", ns.name)
		}
		for j, a := range ns.access {
			if len(a.claims) != 1 || a.claims[0] != full.namespaces[i].access[j].claims[0] {
				t.Errorf("%s/%s reaches %v; want its first claim only", ns.name, a.name, a.claims)
			}
			if a.periodic || len(a.rotations) > 0 {
				t.Errorf("%s/%s rotates", ns.name, a.name)
			}
			if a.keep && !ns.claims[a.claims[0]].keep {
				t.Errorf("%s/%s is kept but reaches %s, which is deleted", ns.name, a.name, ns.claims[a.claims[0]].name)
			}
			switch {
			case a.keep:
				seen["access kept"]++
			default:
				seen["access deleted "+a.order.String()]++
			}
			if len(a.refreshes) > 0 {
				seen["access refreshed"]++
			}
		}
	}
	for _, want := range []string{"access kept", "access deleted before", "access deleted with", "access deleted after",
		"access refreshed"} {
		if seen[want] == 0 {
			t.Errorf("no %s in the plan: %v", want, seen)
		}
	}
}

// With a v1alpha1 driver the faults hit its four calls, none of the rotation's.
func TestFaultSpecsV1alpha1(t *testing.T) {
	r := &run{cfg: DefaultConfig(1)}
	r.cfg.Driver = DriverV1alpha1
	methods := map[string]bool{}
	for _, spec := range r.faultSpecs() {
		f, err := memory.ParseFault(spec)
		if err != nil {
			t.Fatal(err)
		}
		methods[f.Method] = true
	}
	if got := slices.Sorted(maps.Keys(methods)); !slices.Equal(got, slices.Sorted(slices.Values(v1alpha1Methods))) {
		t.Errorf("faults for %v, want %v", got, v1alpha1Methods)
	}
}
