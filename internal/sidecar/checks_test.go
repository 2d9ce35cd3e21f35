package sidecar

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

var epoch = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

// keyOf is the name of the object whose UID the tests give (one name per UID).
func keyOf(uid types.UID) types.NamespacedName {
	return types.NamespacedName{Namespace: "tenant", Name: "name-of-" + string(uid)}
}

func uids(n int) []types.UID {
	out := make([]types.UID, n)
	for i := range out {
		out[i] = types.UID(fmt.Sprintf("uid-%d", i))
	}
	return out
}

// TestSecretChecksBacklog: checks that all fall due at once (a backlog) run at
// checkRateFactor × N/interval, a burst of a tenth of a second's first; each keeps its place until
// its time, then runs without waiting again; none waits longer than interval/checkRateFactor.
func TestSecretChecksBacklog(t *testing.T) {
	const n, interval = 1200, time.Minute
	const limit, burst = checkRateFactor * n / 60, checkRateFactor * n / 60 / checkBurstPerSecond // 40/s, 4
	var c secretChecks
	all := uids(n)
	for _, uid := range all {
		c.doneAt(keyOf(uid), uid, epoch.Add(-interval))
	}
	slots := make([]time.Time, n)
	now := 0
	for i, uid := range all {
		wait := c.dueAt(keyOf(uid), uid, interval, epoch)
		if wait <= 0 {
			now++
		}
		slots[i] = epoch.Add(max(wait, 0))
	}
	if now != burst {
		t.Errorf("%d checks run at once, want the burst, %d", now, burst)
	}
	if last := slices.MaxFunc(slots, time.Time.Compare); last.Sub(epoch) > interval/checkRateFactor {
		t.Errorf("the last check waits %v, want at most interval/%d", last.Sub(epoch), checkRateFactor)
	}
	sorted := slices.SortedFunc(slices.Values(slots), time.Time.Compare)
	for i := range sorted {
		j, _ := slices.BinarySearchFunc(sorted, sorted[i].Add(time.Second), time.Time.Compare)
		if j-i > limit+burst {
			t.Fatalf("%d checks in the second from %v, want at most %d", j-i, sorted[i].Sub(epoch), limit+burst)
		}
	}
	for i, uid := range all {
		if slots[i].Equal(epoch) {
			continue
		}
		// Woken early (an event): the place is kept.
		if wait := c.dueAt(keyOf(uid), uid, interval, slots[i].Add(-time.Millisecond)); wait != time.Millisecond {
			t.Fatalf("%s woken 1 ms before its time: wait %v, want 1ms", uid, wait)
		}
		if wait := c.dueAt(keyOf(uid), uid, interval, slots[i]); wait > 0 {
			t.Fatalf("%s at its time: wait %v, want none", uid, wait)
		}
		c.doneAt(keyOf(uid), uid, slots[i])
		if wait := c.dueAt(keyOf(uid), uid, interval, slots[i]); wait != interval {
			t.Fatalf("%s just checked: next in %v, want %v", uid, wait, interval)
		}
	}
}

// TestSecretChecksSteady: checks spread over the interval, as a start spreads them, never wait
// for the limit, so that each access is checked exactly once per interval, for three intervals.
func TestSecretChecksSteady(t *testing.T) {
	const n, interval = 600, time.Minute
	var c secretChecks
	all := uids(n)
	next := map[types.UID]time.Time{}
	for i, uid := range all {
		at := epoch.Add(time.Duration(i) * interval / n)
		c.doneAt(keyOf(uid), uid, at.Add(-interval))
		next[uid] = at
	}
	for round := range 3 {
		for _, uid := range all {
			at := next[uid]
			if wait := c.dueAt(keyOf(uid), uid, interval, at); wait > 0 {
				t.Fatalf("round %d: %s waits %v at its due time", round, uid, wait)
			}
			c.doneAt(keyOf(uid), uid, at)
			next[uid] = at.Add(interval)
		}
	}
}

// TestSecretChecksFirstAfterStart: an access not seen since the start is checked at a random
// moment of the next interval, not at once.
func TestSecretChecksFirstAfterStart(t *testing.T) {
	const interval = time.Minute
	var c secretChecks
	for _, uid := range uids(1000) {
		if wait := c.dueAt(keyOf(uid), uid, interval, epoch); wait <= 0 || wait > interval {
			t.Fatalf("%s: first check in %v, want within (0, %v]", uid, wait, interval)
		}
	}
}

// TestSecretChecksForget: a deleted access's place is given up; the rate follows the accesses
// left.
func TestSecretChecksForget(t *testing.T) {
	const interval = time.Minute
	var c secretChecks
	all := uids(1200)
	for _, uid := range all {
		c.doneAt(keyOf(uid), uid, epoch.Add(-interval))
	}
	for _, uid := range all {
		c.dueAt(keyOf(uid), uid, interval, epoch)
	}
	for _, uid := range all {
		c.forget(keyOf(uid), uid)
	}
	if len(c.objects) != 0 || len(c.slots) != 0 {
		t.Errorf("%d checks and %d places left after every access was forgotten", len(c.objects), len(c.slots))
	}
}

// TestSecretChecksHeldUp: when the sidecar is held up for 10 s while a backlog is spread, the
// places that passed meanwhile do not run together: at most running's burst runs at once, the
// others reserve running's next tokens, and every check still runs, at most
// checkRateFactor × N/interval per second (plus the burst) in any second.
func TestSecretChecksHeldUp(t *testing.T) {
	const n, interval, held = 1200, time.Minute, 10 * time.Second
	const limit, burst = checkRateFactor * n / 60, checkRateFactor * n / 60 / checkBurstPerSecond // 40/s, 4
	const runningBurst = 2*burst + 1
	var c secretChecks
	all := uids(n)
	for _, uid := range all {
		c.doneAt(keyOf(uid), uid, epoch.Add(-interval))
	}
	next := map[types.UID]time.Time{}
	var ran []time.Time
	for _, uid := range all {
		if wait := c.dueAt(keyOf(uid), uid, interval, epoch); wait > 0 {
			next[uid] = epoch.Add(wait)
		} else {
			ran = append(ran, epoch)
		}
	}
	// Held up: every place before epoch+held is reached then, at once.
	resumed := epoch.Add(held)
	atOnce := 0
	for _, uid := range all {
		if at, ok := next[uid]; ok && at.Before(resumed) {
			if wait := c.dueAt(keyOf(uid), uid, interval, resumed); wait > 0 {
				next[uid] = resumed.Add(wait)
			} else {
				atOnce++
				ran = append(ran, resumed)
				delete(next, uid)
			}
		}
	}
	if atOnce > runningBurst {
		t.Errorf("%d checks ran at once after the sidecar was held up, want at most %d", atOnce, runningBurst)
	}
	// Then on time: each check is reconciled at its place, in order, until all ran.
	for len(next) > 0 {
		uid := all[0]
		for u, at := range next {
			if at.Before(next[uid]) || next[uid].IsZero() {
				uid = u
			}
		}
		at := next[uid]
		if wait := c.dueAt(keyOf(uid), uid, interval, at); wait > 0 {
			next[uid] = at.Add(wait)
			continue
		}
		ran = append(ran, at)
		delete(next, uid)
	}
	if len(ran) != n {
		t.Fatalf("%d checks ran, want %d", len(ran), n)
	}
	slices.SortFunc(ran, time.Time.Compare)
	for i := range ran {
		j, _ := slices.BinarySearchFunc(ran, ran[i].Add(time.Second), time.Time.Compare)
		if j-i > limit+runningBurst {
			t.Fatalf("%d checks in the second from %v, want at most %d", j-i, ran[i].Sub(epoch), limit+runningBurst)
		}
	}
	if last := ran[len(ran)-1].Sub(epoch); last > interval/checkRateFactor+held {
		t.Errorf("the last check ran %v after it was due, want at most interval/%d + %v", last, checkRateFactor, held)
	}
}
