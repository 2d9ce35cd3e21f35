package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// The plan is the workload, drawn from the seed before anything runs: for every namespace, its
// claims and accesses and what becomes of each. Running it with the same seed does the same
// things, in the same order within each namespace (the interleavings across namespaces and with
// the faults follow the machine's timing).

// deletion orders of an access relative to the claims it reaches.
type order int

const (
	// before: the access is deleted, then its claims.
	before order = iota
	// with: the access and its claims are deleted at once.
	with
	// after: the claims are deleted first (they wait, blocked), then the access.
	after
)

func (o order) String() string { return [...]string{"before", "with", "after"}[o] }

type claimPlan struct {
	name string
	// retain chooses the Retain class; static imports an existing bucket (always Retain).
	retain, static bool
	// staticID is the backend bucket a static claim imports; bucketName its Bucket object.
	staticID, bucketName string
	// keep leaves the claim at the end; otherwise it is deleted (or its namespace is).
	keep bool
	// releaseBucket has the admin delete the retained Bucket object once the claim is gone: the
	// backend bucket must stay.
	releaseBucket bool
}

type accessPlan struct {
	name string
	// claims are indices into the namespace's claims: one, or two for a multi-bucket access.
	claims []int
	keep   bool
	order  order
	// periodic puts the access in the class that rotates its credentials periodically.
	periodic bool
	// rotations and refreshes are when the admin asks for a rotation of the access's credentials
	// (a new value of the annotation) and for a Secret refresh: for a kept access, that long after
	// it was provisioned, while the faults run; for a deleted one, just before its deletion starts
	// (a rotation then ends with the access, half-way).
	rotations, refreshes []time.Duration
}

type namespacePlan struct {
	index  int
	name   string
	claims []claimPlan
	access []accessPlan
	// early deletes without waiting for anything to be provisioned (after earlyAfter).
	early      bool
	earlyAfter time.Duration
	// deleteWhole deletes the namespace instead of its objects one by one.
	deleteWhole bool
	// gap is the pause between the steps of the deletion.
	gap time.Duration
	// midRotation is the pause between the rotations asked of the accesses to be deleted and the
	// deletion: shorter than the rotation's grace period, so that most are deleted half-way.
	midRotation time.Duration
}

type plan struct{ namespaces []namespacePlan }

func newPlan(cfg Config) plan {
	var p plan
	for i := 0; i*cfg.PerNamespace < cfg.Claims; i++ {
		n := min(cfg.PerNamespace, cfg.Claims-i*cfg.PerNamespace)
		ns := newNamespacePlan(seeded(cfg.Seed, uint64(1000+i)), i, n)
		// A stream of its own: the rotations leave the rest of the plan of a seed as it was.
		planRotations(seeded(cfg.Seed, uint64(2000+i)), &ns)
		if cfg.Driver == DriverV1alpha1 {
			fitV1alpha1(&ns)
		}
		p.namespaces = append(p.namespaces, ns)
	}
	if cfg.Driver == DriverV1alpha1 {
		return p
	}
	// Periodic rotation runs to the end in every run, however small: two kept accesses at least
	// rotate periodically.
	periodic := 0
	for i := range p.namespaces {
		for j := range p.namespaces[i].access {
			a := &p.namespaces[i].access[j]
			if a.keep && (a.periodic || periodic < minPeriodicKept) {
				if !a.periodic {
					a.periodic = true
				}
				periodic++
			}
		}
	}
	return p
}

// fitV1alpha1 fits a namespace's plan to what a COSI v1alpha1 driver can do behind the sidecar's
// adapter (docs/v1alpha1-drivers.md, "Refused, with a final condition"): one bucket per access
// (several are OUT_OF_RANGE), and no rotation (UNIMPLEMENTED), periodic or asked. The plan is drawn
// as for the other drivers first, so that a seed's plan is theirs less what v1alpha1 cannot do: an
// access keeps its first claim, and is kept or deleted as planned (kept only if that claim is).
// Secret refreshes stay: a refresh grants again, and the driver names another account for it.
func fitV1alpha1(ns *namespacePlan) {
	for i := range ns.access {
		a := &ns.access[i]
		a.claims = a.claims[:1]
		a.periodic, a.rotations = false, nil
	}
}

// minPeriodicKept is the least number of kept accesses of the class with periodic rotation.
const minPeriodicKept = 2

// planRotations chooses the accesses of the class with periodic rotation (20%; newPlan adds
// kept ones where there are too few), and the rotations
// and Secret refreshes the admin asks for: one or two rotations of 40% of the kept accesses and a
// refresh of 25%, 0-8 s after they are provisioned; a rotation of 20% of the other accesses and a
// refresh of 5%, just before their deletion.
func planRotations(rng *rand.Rand, ns *namespacePlan) {
	ns.midRotation = time.Duration(rng.IntN(2500)) * time.Millisecond
	moment := func() time.Duration { return time.Duration(rng.IntN(8000)) * time.Millisecond }
	for i := range ns.access {
		a := &ns.access[i]
		a.periodic = rng.Float64() < 0.2
		rotate, refresh := 0.2, 0.05
		if a.keep {
			rotate, refresh = 0.4, 0.25
		}
		if rng.Float64() < rotate {
			a.rotations = append(a.rotations, moment())
			if a.keep && rng.IntN(2) == 0 {
				a.rotations = append(a.rotations, moment())
			}
			slices.Sort(a.rotations)
		}
		if rng.Float64() < refresh {
			a.refreshes = append(a.refreshes, moment())
		}
	}
}

func newNamespacePlan(rng *rand.Rand, index, claims int) namespacePlan {
	ns := namespacePlan{
		index:       index,
		name:        fmt.Sprintf("chaos-%d", index),
		early:       rng.Float64() < 0.25,
		earlyAfter:  time.Duration(rng.IntN(1500)) * time.Millisecond,
		deleteWhole: rng.Float64() < 0.15,
		gap:         time.Duration(rng.IntN(1000)) * time.Millisecond,
	}
	for i := range claims {
		c := claimPlan{name: fmt.Sprintf("claim-%d", i), retain: rng.Float64() < 0.4}
		if rng.Float64() < 0.15 {
			c.static, c.retain = true, true
			c.staticID = fmt.Sprintf("imported-%d-%d", index, i)
			c.bucketName = fmt.Sprintf("chaos-%d-import-%d", index, i)
		}
		c.keep = !ns.deleteWhole && rng.Float64() < 0.25
		c.releaseBucket = c.retain && !c.keep && rng.Float64() < 0.3
		ns.claims = append(ns.claims, c)
	}
	for i := range claims {
		// About one access per claim: none, one or two, some of them across two claims.
		for range rng.IntN(3) {
			a := accessPlan{name: fmt.Sprintf("access-%d", len(ns.access)), claims: []int{i}}
			if claims > 1 && rng.Float64() < 0.2 {
				other := rng.IntN(claims - 1)
				if other >= i {
					other++
				}
				a.claims = append(a.claims, other)
			}
			claimsKept := true
			for _, c := range a.claims {
				claimsKept = claimsKept && ns.claims[c].keep
			}
			// An access to a claim that goes goes too: a kept access would block its claim's
			// deletion for ever, as it should.
			a.keep = claimsKept && rng.Float64() < 0.6
			a.order = order(rng.IntN(3))
			ns.access = append(ns.access, a)
		}
	}
	return ns
}

func (p plan) claims() int {
	n := 0
	for _, ns := range p.namespaces {
		n += len(ns.claims)
	}
	return n
}

func (p plan) accesses() int {
	n := 0
	for _, ns := range p.namespaces {
		n += len(ns.access)
	}
	return n
}
