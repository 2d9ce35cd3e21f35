package chaos

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

// provisionerMethods are the driver calls that faults hit. DriverGetInfo is spared: it is the
// sidecar's start-up probe, and a sidecar that cannot start is not what the suite looks at.
var provisionerMethods = []string{
	"DriverGenerateBucketId", "DriverCreateBucket", "DriverGetBucket", "DriverDeleteBucket",
	"DriverGenerateBucketAccessId", "DriverGrantBucketAccess", "DriverRevokeBucketAccess",
	"DriverRotateBucketAccessCredentials", "DriverRetireBucketAccessCredentials",
}

// v1alpha1Methods are the driver calls of the COSI v1alpha1 protocol that faults hit (its
// DriverGetInfo spared, as above): the sidecar's adapter makes them for the v1alpha2 calls, and
// answers the others itself (docs/v1alpha1-drivers.md).
var v1alpha1Methods = []string{
	"DriverCreateBucket", "DriverDeleteBucket", "DriverGrantBucketAccess", "DriverRevokeBucketAccess",
}

// methods are the driver calls of the run's driver that faults hit.
func (r *run) methods() []string {
	if r.v1alpha1() {
		return v1alpha1Methods
	}
	return provisionerMethods
}

// retryableCodes are the codes KEP-1979 (and the sidecar) treat as "may still be in flight,
// retry".
var retryableCodes = []string{"Unavailable", "DeadlineExceeded", "Aborted", "ResourceExhausted", "Canceled"}

// faultSpecs are the driver's faults: every provisioner call fails with ErrorRate, spread over the
// retryable codes, half before and half after the driver acted; SlowRate of them are held beyond
// the sidecar's timeout, LateRate also, and then carried out.
func (r *run) faultSpecs() []string {
	var specs []string
	f := r.cfg.Faults
	delay := r.cfg.DriverTimeout + time.Second
	for _, m := range r.methods() {
		if f.SlowRate > 0 {
			specs = append(specs, fmt.Sprintf("%s=OK:%g+delay=%s", m, f.SlowRate, delay))
		}
		if f.LateRate > 0 {
			specs = append(specs, fmt.Sprintf("%s=OK:%g+delay=%s+late", m, f.LateRate, delay))
		}
	}
	if f.ErrorRate > 0 {
		// The rotation's calls come late and few in a small run (a few dozen, some of them while
		// the driver is down): the first of each after the faults are set fails, so that every
		// run injects an error into them, however its calls interleave. A v1alpha1 driver has
		// none.
		for _, m := range rotationMethods {
			if !r.v1alpha1() {
				specs = append(specs, m+"=Unavailable:x1")
			}
		}
		// Faults are tried in turn, each with its rate: 2 x len(codes) of them make ErrorRate.
		n := float64(2 * len(retryableCodes))
		rate := 1 - math.Pow(1-f.ErrorRate, 1/n)
		for _, m := range r.methods() {
			for _, code := range retryableCodes {
				specs = append(specs, fmt.Sprintf("%s=%s:%g", m, code, rate),
					fmt.Sprintf("%s=%s:%g+after", m, code, rate))
			}
		}
	}
	return specs
}

// setFaults turns the driver's faults on or off (a restarted driver starts without any).
func (r *run) setFaults(ctx context.Context, on bool) error {
	s := memory.FaultSettings{}
	if on {
		s.Faults = r.faultSpecs()
	}
	return r.control.SetFaults(ctx, s)
}

// monkey injects the process faults until ctx ends: kills, kills inside driver calls, crashes of
// etcd and the API server, one at a time, at random moments.
func (r *run) monkey(ctx context.Context) error {
	f := r.cfg.Faults
	type action struct {
		weight int
		do     func(context.Context, *rand.Rand) error
		// landed reports whether the action has been injected as often as a run must (nil: it
		// always lands); a kill inside a call may find no call to hold.
		landed func() bool
		// late retries an action that did not land after the others of the first round: the calls
		// it waits for (rotations) come once the workload has provisioned accesses.
		late bool
		// early comes first in the first round: the calls it waits for come while the workload
		// creates its objects.
		early bool
	}
	var actions []action
	if f.Kills {
		for _, c := range []*localenv.Component{r.env.Controller, r.env.Sidecar, r.env.Driver} {
			actions = append(actions, action{weight: 2, do: func(ctx context.Context, rng *rand.Rand) error {
				return r.kill(ctx, c, "", downtime(rng))
			}})
		}
	}
	if f.Pauses {
		// Inside a call of any method, the driver and the sidecar in turn, twice in the first round;
		// and inside each of the rotation's calls, which come only when a rotation runs.
		actions = append(actions, action{weight: pauseWeight, do: func(ctx context.Context, rng *rand.Rand) error {
			return r.killInsideCall(ctx, rng, "", false)
		}, landed: func() bool { return r.pauseKills >= 2 }})
		for _, m := range rotationMethods {
			if r.v1alpha1() {
				break // a v1alpha1 driver cannot rotate
			}
			actions = append(actions, action{weight: 1, do: func(ctx context.Context, rng *rand.Rand) error {
				return r.killInsideCall(ctx, rng, m, false)
			}, landed: func() bool { return r.insideKills[m] > 0 }, late: true})
		}
		if r.v1alpha1() {
			// The crash issue 41 asks about, a kind of its own so that every run has it: the sidecar
			// killed while a DriverGrantBucketAccess is held after the driver made its account,
			// between the driver's answer and the sidecar's record of the account's ID.
			actions = append(actions, action{weight: lostAnswerWeight, do: func(ctx context.Context, rng *rand.Rand) error {
				return r.killInsideCall(ctx, rng, "DriverGrantBucketAccess", true)
			}, landed: func() bool { return r.lostAnswerKills > 0 }, early: true})
		}
	}
	if f.ControlPlane {
		for _, name := range []string{localenv.Etcd, localenv.KubeAPIServer} {
			actions = append(actions, action{weight: 1, do: func(ctx context.Context, rng *rand.Rand) error {
				r.count("crash " + name)
				r.timeline.addf(nil, "crash (kill -9) %s", name)
				r.logf("crash %s", name)
				return r.env.Crash(ctx, name, downtime(rng))
			}})
		}
	}
	if len(actions) == 0 {
		close(r.firstRound)
		<-ctx.Done()
		return nil
	}
	total := 0
	for _, a := range actions {
		total += a.weight
	}
	rng := r.rng(1)
	// Every kind once first (kills inside a call of any method twice: the driver, then the
	// sidecar), in a random order, so that even a short run injects each; then at random by weight.
	var first []int
	for i, a := range actions {
		first = append(first, i)
		if a.weight == pauseWeight {
			first = append(first, i)
		}
	}
	rng.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	slices.SortStableFunc(first, func(i, j int) int {
		switch {
		case actions[i].early == actions[j].early:
			return 0
		case actions[i].early:
			return -1
		}
		return 1
	})
	for {
		wait := time.Duration((0.5 + rng.Float64()) * float64(f.Interval))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		if err := r.restartExited(ctx, true); err != nil {
			return err
		}
		next := 0
		if len(first) > 0 {
			next, first = first[0], first[1:]
		} else {
			pick := rng.IntN(total)
			for next = range actions {
				if pick -= actions[next].weight; pick < 0 {
					break
				}
			}
		}
		// An action in progress finishes when the workload ends: it brings back what it killed.
		err := actions[next].do(context.WithoutCancel(ctx), rng)
		switch a := actions[next]; {
		case !errors.Is(err, errNotLanded):
			if err != nil {
				return err
			}
		// Not injected (no call of the method came to hold): a kind not injected yet is tried
		// again, so that a short run still injects every kind.
		case a.landed == nil || a.landed():
		case a.late:
			first = append(first, next)
		default:
			first = append([]int{next}, first...)
		}
		if len(first) == 0 && !r.firstRoundDone {
			r.firstRoundDone = true
			close(r.firstRound)
		}
	}
}

// pauseWeight is the weight of kills inside a call of any method among the process faults (a kill
// of one process weighs 2, a crash of etcd or the API server 1, a kill inside a rotation's call 1).
const pauseWeight = 5

// lostAnswerWeight is the weight of the sidecar's kill inside a DriverGrantBucketAccess after the
// driver acted, with a v1alpha1 driver: a kill inside a call of any method lands there about once in
// eight (four methods, before or after the driver acted, and the driver killed as often).
const lostAnswerWeight = 3

// rotationMethods are the calls of a credential rotation.
var rotationMethods = []string{"DriverRotateBucketAccessCredentials", "DriverRetireBucketAccessCredentials"}

// downtime is how long a killed process stays down.
func downtime(rng *rand.Rand) time.Duration {
	return time.Duration(rng.IntN(1500)) * time.Millisecond
}

// kill kills c with SIGKILL, waits down and starts it again; a restarted driver gets its faults
// back.
func (r *run) kill(ctx context.Context, c *localenv.Component, where string, down time.Duration) error {
	what := "kill -9 " + c.Name + where
	r.count(what)
	r.timeline.add(what)
	c.Kill()
	sleep(ctx, down)
	if err := c.Start(ctx); err != nil {
		return fmt.Errorf("restarting %s: %w", c.Name, err)
	}
	if c == r.env.Driver {
		return r.setFaults(ctx, true)
	}
	return nil
}

// killInsideCall holds a call of method (a random one when empty) inside the driver, before or
// after it acts, and kills the driver or the sidecar while it is held: the crash lands between the
// two phases of a create or a grant, between a driver's action and its answer, or between the
// steps of a rotation. lostAnswer holds the call after the driver acted and kills the sidecar: its
// answer is lost.
func (r *run) killInsideCall(ctx context.Context, rng *rand.Rand, method string, lostAnswer bool) error {
	if method == "" {
		methods := r.methods()
		method = methods[rng.IntN(len(methods))]
	}
	if method == "DriverGetBucket" {
		method = "DriverCreateBucket" // rare (static claims only): the kill would seldom land
	}
	afterAct := rng.IntN(2) == 0
	// The driver and the sidecar in turn, so that a short run kills each inside a call.
	victim := r.env.Driver
	if r.pauseKills%2 == 1 {
		victim = r.env.Sidecar
	}
	if lostAnswer {
		afterAct, victim = true, r.env.Sidecar
	}
	down := downtime(rng)
	if err := r.control.Pause(ctx, method, afterAct); err != nil {
		return nil //nolint:nilerr // the driver is down (a crash of the API server took long): skip
	}
	// A rotation's calls come only when a rotation runs (every 15 s for the periodic class, more
	// seldom when faults fail them): wait longer than one period for one.
	wait := 5 * time.Second
	if slices.Contains(rotationMethods, method) {
		wait = rotationHoldWait
	}
	held, ok, err := r.control.WaitPaused(ctx, wait)
	if err != nil || !ok {
		_ = r.control.Release(ctx)
		r.timeline.addf(nil, "holding %s: no call came within %s", method, wait)
		return errNotLanded
	}
	if lostAnswer {
		r.lostAnswerKills++
	} else {
		r.pauseKills++
	}
	if r.insideKills == nil {
		r.insideKills = map[string]int{}
	}
	r.insideKills[method]++
	when := "before"
	if afterAct {
		when = "after"
	}
	where := fmt.Sprintf(" inside %s (%s the driver acted)", method, when)
	r.timeline.addf([]string{held.Subject}, "holding %s %s %s the driver acted; kill -9 %s",
		method, held.Subject, when, victim.Name)
	if victim == r.env.Sidecar {
		what := "kill -9 " + victim.Name + where
		r.count(what)
		victim.Kill()
		// The held call's caller is gone; let the driver finish it.
		if err := r.control.Release(ctx); err != nil {
			return err
		}
		sleep(ctx, down)
		if err := victim.Start(ctx); err != nil {
			return fmt.Errorf("restarting %s: %w", victim.Name, err)
		}
		return nil
	}
	what := "kill -9 " + victim.Name + where
	r.count(what)
	r.timeline.add(what)
	victim.Kill()
	// Held outside the driver (the proxy), the call must die with it.
	if err := r.control.Abort(ctx); err != nil {
		return err
	}
	sleep(ctx, down)
	if err := victim.Start(ctx); err != nil {
		return fmt.Errorf("restarting %s: %w", victim.Name, err)
	}
	return r.setFaults(ctx, true)
}

// rotationHoldWait is how long a kill inside a rotation's call waits for one to hold.
const rotationHoldWait = 20 * time.Second

// errNotLanded is a kill inside a call that found no call to hold: nothing was injected.
var errNotLanded = errors.New("no call to hold")

func (r *run) count(what string) {
	r.ledger.mu.Lock()
	defer r.ledger.mu.Unlock()
	r.res.Faults[what]++
}

// restartExited starts again a COSI process that exited by itself (not killed by the monkey,
// which starts what it kills): a finding the report shows, not a reason to stop the run. It also
// restarts kube-controller-manager, which exits when the API server goes away while it starts.
func (r *run) restartExited(ctx context.Context, faults bool) error {
	if restarted, err := r.env.RestartControllerManager(ctx); err != nil {
		return err
	} else if restarted {
		r.count("kube-controller-manager restarted (exited after an API server crash)")
		r.timeline.add("kube-controller-manager had exited; starting it")
	}
	for _, c := range []*localenv.Component{r.env.Driver, r.env.Sidecar, r.env.Controller} {
		if c.Exited() {
			r.count("exited by itself: " + c.Name)
			r.timeline.addf(nil, "%s had exited by itself (see %s); starting it", c.Name, c.Log)
			r.logf("%s exited by itself; see %s", c.Name, c.Log)
			if err := c.Start(ctx); err != nil {
				return fmt.Errorf("restarting %s: %w", c.Name, err)
			}
			if c == r.env.Driver {
				if err := r.setFaults(ctx, faults); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// calm ends the faults: no driver faults, nothing held, every process up.
func (r *run) calm(ctx context.Context) error {
	if err := r.restartExited(ctx, false); err != nil {
		return err
	}
	if err := r.control.Release(ctx); err != nil {
		return err
	}
	return r.setFaults(ctx, false)
}
