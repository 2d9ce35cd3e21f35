package sidecar

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// wakeSchedule is a schedule of n objects checked over the last interval, evenly, as a sidecar's
// steady state has them; their names are as long as real ones.
func wakeSchedule(n int, interval time.Duration) (*secretChecks, []types.NamespacedName, []types.UID) {
	c := &secretChecks{}
	c.wakeChecks(interval)
	keys, ids := make([]types.NamespacedName, n), make([]types.UID, n)
	for i := range n {
		keys[i] = types.NamespacedName{Namespace: fmt.Sprintf("ns-%d", i%100), Name: fmt.Sprintf("access-%d", i)}
		ids[i] = types.UID(fmt.Sprintf("0b7e3c9a-5d1f-4e2b-9c8d-%012d", i))
		c.doneAt(keys[i], ids[i], epoch.Add(-interval+time.Duration(i)*interval/time.Duration(n)))
	}
	return c, keys, ids
}

// BenchmarkWakeDueLock: how long one wakeDue holds the schedule's lock with 100,000 objects, at a
// tick at which none is due (the ticks between checks; a tick at which some are due holds it as
// long, plus their appends). A reconcile worker that calls dueAt (every scheduled check, every
// Bucket refresh) or done meanwhile waits for it. Reported per tick: ms/tick, and the share of a
// second the lock is held at the tick of a 10-minute interval (one a second).
func BenchmarkWakeDueLock(b *testing.B) {
	const n = 100000
	const interval = 10 * time.Minute
	c, _, _ := wakeSchedule(n, interval)
	var woken int
	for b.Loop() {
		c.wakeDue(epoch.Add(-time.Second), func(types.NamespacedName) { woken++ })
	}
	if woken != 0 {
		b.Fatalf("%d woken, want none", woken)
	}
	perTick := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(perTick)/float64(time.Millisecond), "ms/tick")
	b.ReportMetric(100*float64(perTick)/float64(c.wakeTick()), "%locked")
}

// BenchmarkDueAtBesideWakeDue: the longest a dueAt call waits while the wake loop ticks beside it
// (100,000 objects; the tick of a 10-minute interval, one a second, and of a 1-minute one, 0.6 s;
// ticks made back to back here, to see the worst wait a worker meets).
func BenchmarkDueAtBesideWakeDue(b *testing.B) {
	const n = 100000
	const interval = 10 * time.Minute
	c, keys, ids := wakeSchedule(n, interval)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			c.wakeDue(epoch.Add(-time.Second), func(types.NamespacedName) {})
		}
	}()
	var worst time.Duration
	i := 0
	for b.Loop() {
		start := time.Now()
		c.dueAt(keys[i%n], ids[i%n], interval, epoch)
		if d := time.Since(start); d > worst {
			worst = d
		}
		i++
	}
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(worst)/float64(time.Millisecond), "ms-worst-dueAt")
}
