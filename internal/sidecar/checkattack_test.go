package sidecar

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestSecretChecksRebuildKeepsReservations: a backlog was refused after a hold-up and waits in
// running's reservations; grants (a tenant asking for refreshes, rotations) check the earliest
// reservations before their time, enough of them for places and running to be rebuilt. The
// reservations kept are later than the rebuilt running's debt: the checks refused after the
// rebuild must not take the same times, or more than limit × (W + H) + running's burst run in a
// window W while the workers reach every check on time (H a tick).
func TestSecretChecksRebuildKeepsReservations(t *testing.T) {
	const interval, tick = time.Minute, 10 * time.Millisecond
	const backlog, later = 1200, 300
	const limit = checkRateFactor * (backlog + later) / 60 // 50/s
	var c secretChecks
	all := uids(backlog + later)
	mine, others := all[:backlog], all[backlog:]
	for _, uid := range mine {
		c.doneAt(keyOf(uid), uid, epoch.Add(-interval))
	}
	// The others fall due 1 s after the sidecar resumed.
	resumed := epoch.Add(30 * time.Second)
	for _, uid := range others {
		c.doneAt(keyOf(uid), uid, resumed.Add(time.Second-interval))
	}
	for _, uid := range mine {
		if c.dueAt(keyOf(uid), uid, interval, epoch) <= 0 {
			c.doneAt(keyOf(uid), uid, epoch)
		}
	}
	// Held up until every place passed: all but running's burst are refused, in order.
	type reservation struct {
		uid types.UID
		at  time.Time
	}
	var refused []reservation
	resume(&c, mine, interval, resumed, func(uid types.UID, at time.Time) {
		refused = append(refused, reservation{uid, at})
	})
	// Grants check the earliest 700 refused before their time.
	const granted = 700
	if len(refused) < granted+100 {
		t.Fatalf("%d refused after the hold-up, want most of %d", len(refused), backlog)
	}
	for _, r := range refused[:granted] {
		c.doneAt(keyOf(r.uid), r.uid, resumed)
	}
	w := &busyWorkers{c: &c, interval: interval, next: every(tick), due: map[types.UID]time.Time{},
		attempts: map[types.UID]int{}, reached: map[time.Time]int{}}
	for _, r := range refused[granted:] {
		w.due[r.uid] = epoch
		w.queue(r.uid, r.at)
	}
	for _, uid := range others {
		w.due[uid] = resumed.Add(time.Second)
		w.queue(uid, resumed.Add(time.Second))
	}
	w.run(resumed, epoch.Add(interval))
	for _, window := range []time.Duration{time.Second, 5 * time.Second} {
		want := int(float64(limit)*(window+tick).Seconds()) + c.running.Burst()
		if most := w.maxIn(window); most > want {
			t.Errorf("%d checks ran in %v, want at most %d (%d/s for %v + %v, and %d)",
				most, window, want, limit, window, tick, c.running.Burst())
		}
	}
	if w.maxAttempts > 2 {
		t.Errorf("a check was reconciled %d times without running, want at most 2", w.maxAttempts)
	}
	t.Logf("%d checks ran; at most %d in a second, %d reconciles without running, %v late",
		len(w.ran), w.maxIn(time.Second), w.maxAttempts, w.maxLate)
}

// TestSecretChecksStaleClock: two workers reach the queue together, and one's clock reading is
// 50 ms older than the other's when it asks (it read the time, then waited for the lock, or was
// descheduled: dueAt's calls do not come in the order of their times). A backlog of every check
// still runs at most limit × (W + the staleness + a tick) + running's burst in any window W: a
// call whose time is earlier than the last does not give the limiters back the time between.
func TestSecretChecksStaleClock(t *testing.T) {
	const n, interval, tick, stale = 1200, time.Minute, 10 * time.Millisecond, 50 * time.Millisecond
	const limit = checkRateFactor * n / 60 // 40/s
	var c secretChecks
	all := uids(n)
	last := make([]time.Time, n)
	for i := range last {
		last[i] = epoch.Add(-interval)
	}
	w := newBusyWorkers(&c, interval, all, last, every(tick))
	calls := 0
	w.clock = func(now time.Time) time.Time {
		calls++
		if calls%2 == 0 {
			return now.Add(-stale)
		}
		return now
	}
	w.run(epoch, epoch.Add(interval))
	want := int(float64(limit)*(time.Second+stale+tick).Seconds()) + c.running.Burst()
	if most := w.maxIn(time.Second); most > want {
		t.Errorf("%d checks ran in one second, want at most %d (%d/s for 1 s + %v + %v, and %d)",
			most, want, limit, stale, tick, c.running.Burst())
	}
	t.Logf("%d checks ran; at most %d in a second, %d reconciles without running, %v late",
		len(w.ran), w.maxIn(time.Second), w.maxAttempts, w.maxLate)
}

// TestSecretChecksLimitRaisedInDebt: a backlog was refused after a hold-up and waits in running's
// reservations when as many accesses again are provisioned (they are not due for an interval):
// the limit doubles. running's debt, counted in tokens, is then paid in half the time, but the
// reservations keep their times: the checks refused meanwhile must not run beside them at the new
// limit, or more than the limit × (W + H) + running's burst run in a window W.
func TestSecretChecksLimitRaisedInDebt(t *testing.T) {
	const interval, tick = time.Minute, 10 * time.Millisecond
	const backlog, later, added = 1200, 300, 1500
	const limit = checkRateFactor * (backlog + later + added) / 60 // 100/s once added
	var c secretChecks
	all := uids(backlog + later + added)
	mine, others, fresh := all[:backlog], all[backlog:backlog+later], all[backlog+later:]
	for _, uid := range mine {
		c.doneAt(keyOf(uid), uid, epoch.Add(-interval))
	}
	resumed := epoch.Add(30 * time.Second)
	othersDue := resumed.Add(15 * time.Second)
	for _, uid := range others {
		c.doneAt(keyOf(uid), uid, othersDue.Add(-interval))
	}
	for _, uid := range mine {
		if c.dueAt(keyOf(uid), uid, interval, epoch) <= 0 {
			c.doneAt(keyOf(uid), uid, epoch)
		}
	}
	w := &busyWorkers{c: &c, interval: interval, next: every(tick), due: map[types.UID]time.Time{},
		attempts: map[types.UID]int{}, reached: map[time.Time]int{}}
	resume(&c, mine, interval, resumed, func(uid types.UID, at time.Time) {
		w.due[uid] = epoch
		w.queue(uid, at)
	})
	for _, uid := range fresh { // provisioned: checked an interval from now
		c.doneAt(keyOf(uid), uid, resumed)
	}
	for _, uid := range others {
		w.due[uid] = othersDue
		w.queue(uid, othersDue)
	}
	w.run(resumed, resumed.Add(interval/2))
	for _, window := range []time.Duration{time.Second, 3 * time.Second} {
		want := int(float64(limit)*(window+tick).Seconds()) + c.running.Burst()
		if most := w.maxIn(window); most > want {
			t.Errorf("%d checks ran in %v, want at most %d (%d/s for %v + %v, and %d)",
				most, window, want, limit, window, tick, c.running.Burst())
		}
	}
	t.Logf("%d checks ran; at most %d in a second, %d reconciles without running, %v late",
		len(w.ran), w.maxIn(time.Second), w.maxAttempts, w.maxLate)
}

// TestSecretChecksChurn: while a backlog refused after a hold-up waits in running's reservations,
// a tenant creates 3,000 accesses and deletes them again, every 100 ms (the limit swings between
// 40/s and 140/s). The backlog still runs within interval/checkRateFactor plus the hold-up of its
// due time, after at most 2 reconciles that do not run it, and at most the highest limit × (W + a
// tick) + its running burst run in a window W.
func TestSecretChecksChurn(t *testing.T) {
	const n, churn, interval, tick, held = 1200, 3000, time.Minute, 10 * time.Millisecond, 10 * time.Second
	const highest = checkRateFactor * (n + churn) / 60 // 140/s
	var c secretChecks
	all := uids(n)
	last := make([]time.Time, n)
	for i := range last {
		last[i] = epoch.Add(-interval + time.Duration(i%2)*interval/2) // half due at epoch, half later
	}
	resumed := epoch.Add(held)
	w := newBusyWorkers(&c, interval, all, last, every(tick))
	for _, uid := range all[:n/2] { // the first half took places before the sidecar was held up
		c.dueAt(keyOf(uid), uid, interval, epoch)
	}
	tenant := make([]types.UID, churn)
	for i := range tenant {
		tenant[i] = types.UID(fmt.Sprintf("tenant-%d", i))
	}
	for at, i := epoch, 0; at.Before(epoch.Add(interval)); at, i = at.Add(100*time.Millisecond), i+1 {
		if !at.Before(resumed) {
			w.run(at, at.Add(100*time.Millisecond))
		}
		for _, uid := range tenant {
			if i%2 == 0 {
				c.doneAt(keyOf(uid), uid, at)
			} else {
				c.gone(keyOf(uid))
			}
		}
	}
	if w.maxAttempts > 2 {
		t.Errorf("a check was reconciled %d times without running, want at most 2", w.maxAttempts)
	}
	if bound := interval/checkRateFactor + held + tick; w.maxLate > bound {
		t.Errorf("a check ran %v after it fell due, want at most %v", w.maxLate, bound)
	}
	if late, attempts := w.waiting(epoch.Add(interval - interval/checkRateFactor - held)); late > 0 {
		t.Errorf("%d checks due before %v have not run at %v (up to %d reconciles each)",
			late, interval/checkRateFactor, interval, attempts)
	}
	burst := 2*(highest/checkBurstPerSecond) + 1
	want := int(float64(highest)*(time.Second+tick).Seconds()) + burst
	if most := w.maxIn(time.Second); most > want {
		t.Errorf("%d checks ran in a second, want at most %d", most, want)
	}
	t.Logf("%d checks ran; at most %d in a second, %d reconciles without running, %v late",
		len(w.ran), w.maxIn(time.Second), w.maxAttempts, w.maxLate)
}

// TestSecretChecksLimitFallsWithPlaces: a backlog of every check took places, the earliest a
// tenant's, who deletes its accesses at once (fewer than the places kept, so places is not
// rebuilt): the limit falls by a third. A check that falls due a second later still runs within
// interval/checkRateFactor of its due time: the places given at the higher limit do not hold it
// for their count at the lower one.
func TestSecretChecksLimitFallsWithPlaces(t *testing.T) {
	const interval = time.Minute
	var c secretChecks
	all := uids(1500)
	mine, others, later := all[:490], all[490:1499], all[1499]
	for _, uid := range all[:1499] {
		c.doneAt(keyOf(uid), uid, epoch.Add(-interval))
	}
	c.doneAt(keyOf(later), later, epoch.Add(time.Second-interval))
	for _, uid := range append(mine, others...) {
		c.dueAt(keyOf(uid), uid, interval, epoch)
	}
	for _, uid := range mine {
		c.forget(keyOf(uid), uid)
	}
	wait := c.dueAt(keyOf(later), later, interval, epoch.Add(time.Second))
	for at := epoch.Add(time.Second); wait > 0; {
		at = at.Add(wait)
		wait = c.dueAt(keyOf(later), later, interval, at)
		if wait <= 0 && at.Sub(epoch.Add(time.Second)) > interval/checkRateFactor {
			t.Errorf("a check due at 1 s ran %v later, want at most %v", at.Sub(epoch.Add(time.Second)),
				interval/checkRateFactor)
		}
	}
}

// TestSecretChecksEdgeIntervals: one object, or a few, checked every millisecond, 100 ms or 10,000
// hours, with the workers reaching each at its time: every check runs at its due time.
func TestSecretChecksEdgeIntervals(t *testing.T) {
	for _, interval := range []time.Duration{time.Millisecond, 100 * time.Millisecond, 10000 * time.Hour} {
		for _, n := range []int{1, 3} {
			t.Run(fmt.Sprintf("%v/%d", interval, n), func(t *testing.T) {
				var c secretChecks
				all := uids(n)
				last := make([]time.Time, n)
				for i := range last {
					last[i] = epoch.Add(-interval + time.Duration(i)*interval/time.Duration(n))
				}
				var w *busyWorkers
				w = newBusyWorkers(&c, interval, all, last, func(time.Time) time.Time {
					return w.queued[0].at // the next check queued, on time
				})
				w.run(epoch, epoch.Add(20*interval))
				if w.maxLate > 0 || w.maxAttempts > 0 {
					t.Errorf("a check ran %v late, after %d reconciles", w.maxLate, w.maxAttempts)
				}
				if len(w.ran) < 19*n {
					t.Errorf("%d checks ran in 20 intervals, want at least %d", len(w.ran), 19*n)
				}
			})
		}
	}
}

// resume asks at resumed for the checks of uids that hold a place: those given a token run (done
// at resumed), and refused gets each refused one with the time of its reservation.
func resume(c *secretChecks, uids []types.UID, interval time.Duration, resumed time.Time,
	refused func(uid types.UID, at time.Time),
) {
	for _, uid := range uids {
		if _, ok := c.slots[keyOf(uid)]; !ok {
			continue
		}
		wait := c.dueAt(keyOf(uid), uid, interval, resumed)
		if wait <= 0 {
			c.doneAt(keyOf(uid), uid, resumed)
			continue
		}
		refused(uid, resumed.Add(wait))
	}
}
