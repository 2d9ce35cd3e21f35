package sidecar

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestWakeDueQueuesEachCheckOnceAtItsTime: the schedule queues an object when its check or its
// place falls due, and once: not again before its reconcile asked for the check (dueAt), nor
// while a check that runs is not done (a failing check is retried with controller-runtime's
// backoff, not at every tick); a check done is queued an interval later, and an object forgotten
// never.
func TestWakeDueQueuesEachCheckOnceAtItsTime(t *testing.T) {
	const interval = time.Minute
	var c secretChecks
	c.wakeChecks(interval)
	woken := func(at time.Duration) []string {
		var names []string
		c.wakeDue(epoch.Add(at), func(key types.NamespacedName) { names = append(names, key.Name) })
		slices.Sort(names)
		return names
	}
	expect := func(at time.Duration, want ...string) {
		t.Helper()
		if got := woken(at); !slices.Equal(got, want) {
			t.Fatalf("at %v: woken %v, want %v", at, got, want)
		}
	}
	a, b, gone := types.UID("a"), types.UID("b"), types.UID("gone")
	c.doneAt(keyOf(a), a, epoch)
	c.doneAt(keyOf(b), b, epoch.Add(time.Second))
	c.doneAt(keyOf(gone), gone, epoch)
	c.forget(keyOf(gone), gone)

	expect(59 * time.Second)
	expect(60*time.Second, "name-of-a")
	expect(61*time.Second, "name-of-b") // a was queued already
	// a's reconcile: its check runs, and fails. Not queued again: the backoff retries it.
	if wait := c.dueAt(keyOf(a), a, interval, epoch.Add(61*time.Second)); wait > 0 {
		t.Fatalf("a: due in %v, want now", wait)
	}
	expect(70 * time.Second)
	// b's reconcile comes in the same instant as a's retry: one of them takes the only token
	// (minCheckRate: 10 a second, a burst of one), the other a place a tenth of a second later,
	// and is queued then, not before.
	if wait := c.dueAt(keyOf(a), a, interval, epoch.Add(71*time.Second)); wait > 0 {
		t.Fatalf("a, retried: due in %v, want now", wait)
	}
	wait := c.dueAt(keyOf(b), b, interval, epoch.Add(71*time.Second))
	if wait <= 0 || wait >= time.Second {
		t.Fatalf("b: due in %v, want a place within a second", wait)
	}
	expect(71*time.Second + wait/2)
	expect(71*time.Second+wait, "name-of-b")
	// a's retry succeeded: queued again an interval later. b, queued at its place and not asked
	// about since (its reconcile returned before: say, it is no longer provisioned), is not queued
	// again by the schedule, as no requeue would have.
	c.doneAt(keyOf(a), a, epoch.Add(72*time.Second))
	expect(131 * time.Second)
	expect(132*time.Second, "name-of-a")
	expect(300 * time.Second)
}

// TestWakeDueNotAfterAFinalError: a check that ran and never reported done (its reconcile ended
// with a final error, which controller-runtime does not retry: it waits for the object to change)
// is not queued again by the schedule.
func TestWakeDueNotAfterAFinalError(t *testing.T) {
	const interval = time.Minute
	var c secretChecks
	c.wakeChecks(interval)
	a := types.UID("a")
	c.doneAt(keyOf(a), a, epoch)
	if wait := c.dueAt(keyOf(a), a, interval, epoch.Add(interval)); wait > 0 {
		t.Fatalf("due in %v, want now", wait)
	}
	var woken []time.Duration
	for at := interval; at <= 3*interval; at += time.Second {
		c.wakeDue(epoch.Add(at), func(types.NamespacedName) { woken = append(woken, at) })
	}
	if len(woken) > 0 {
		t.Errorf("woken at %v, want never", woken)
	}
}

// TestWakeDueBeforeAnInterval: a schedule without an interval (checks off) queues nothing.
func TestWakeDueBeforeAnInterval(t *testing.T) {
	var c secretChecks
	c.wakeChecks(0)
	c.doneAt(keyOf("a"), "a", epoch)
	c.wakeDue(epoch.Add(1000*time.Hour), func(key types.NamespacedName) { t.Errorf("woken: %v", key) })
}
