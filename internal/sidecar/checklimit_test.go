package sidecar

import (
	"container/heap"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// busyWorkers drives a secretChecks as a sidecar's workers do, with explicit times: a reconcile's
// requeue (dueAt's wait) puts the object in the work queue at its time; the workers reach the queue
// only at the moments next gives (in between they are granting, or the sidecar is held up), and
// then reconcile every object in it, in the order they were queued. A reconcile calls dueAt; when
// it returns zero the check runs, doneAt records it and dueAt again gives the next one's time, as
// BucketAccessReconciler.check does.
type busyWorkers struct {
	c        *secretChecks
	interval time.Duration
	next     func(now time.Time) time.Time // the next moment the workers reach the queue, after now
	queued   queuedChecks
	seq      int
	due      map[types.UID]time.Time // when each object's check fell due
	attempts map[types.UID]int       // dueAt calls that returned > 0 since it fell due
	ran      []time.Time             // when the checks ran
	calls    int                     // dueAt calls
	// reached, per moment the workers reach the queue, how many checks ran then.
	reached     map[time.Time]int
	maxAttempts int
	maxLate     time.Duration
	// clock, when set, is the time a reconcile at now reads (a stale reading: dueAt's calls do not
	// come in the order of their times).
	clock func(now time.Time) time.Time
}

type queuedCheck struct {
	at  time.Time
	seq int
	uid types.UID
}

type queuedChecks []queuedCheck

func (q queuedChecks) Len() int { return len(q) }
func (q queuedChecks) Less(i, j int) bool {
	return q[i].at.Before(q[j].at) || q[i].at.Equal(q[j].at) && q[i].seq < q[j].seq
}
func (q queuedChecks) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queuedChecks) Push(x any)   { *q = append(*q, x.(queuedCheck)) }
func (q *queuedChecks) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// newBusyWorkers: the objects were last checked at last[i]; each is queued at its due time.
func newBusyWorkers(c *secretChecks, interval time.Duration, all []types.UID, last []time.Time,
	next func(time.Time) time.Time) *busyWorkers {
	w := &busyWorkers{c: c, interval: interval, next: next, due: map[types.UID]time.Time{},
		attempts: map[types.UID]int{}, reached: map[time.Time]int{}}
	for i, uid := range all {
		c.doneAt(keyOf(uid), uid, last[i])
		w.due[uid] = last[i].Add(interval)
		w.queue(uid, last[i].Add(interval))
	}
	return w
}

func (w *busyWorkers) queue(uid types.UID, at time.Time) {
	w.seq++
	heap.Push(&w.queued, queuedCheck{at: at, seq: w.seq, uid: uid})
}

// run reaches the queue at the moments next gives, from start until end.
func (w *busyWorkers) run(start, end time.Time) {
	for now := start; now.Before(end); now = w.next(now) {
		for w.queued.Len() > 0 && !w.queued[0].at.After(now) {
			uid := heap.Pop(&w.queued).(queuedCheck).uid
			read := now
			if w.clock != nil {
				read = w.clock(now)
			}
			wait := w.c.dueAt(keyOf(uid), uid, w.interval, read)
			w.calls++
			if wait > 0 {
				if !now.Before(w.due[uid]) {
					w.attempts[uid]++
					w.maxAttempts = max(w.maxAttempts, w.attempts[uid])
				}
				w.queue(uid, now.Add(wait))
				continue
			}
			w.maxLate = max(w.maxLate, now.Sub(w.due[uid]))
			w.ran = append(w.ran, now)
			w.reached[now]++
			delete(w.attempts, uid)
			w.c.doneAt(keyOf(uid), uid, now)
			w.due[uid] = now.Add(w.interval)
			w.queue(uid, now.Add(w.c.dueAt(keyOf(uid), uid, w.interval, now)))
			w.calls++
		}
	}
}

// waiting returns how many checks that fell due before t have not run yet, and the most attempts
// any of them made.
func (w *busyWorkers) waiting(t time.Time) (n, attempts int) {
	for uid, due := range w.due {
		if due.Before(t) {
			n++
			attempts = max(attempts, w.attempts[uid])
		}
	}
	return n, attempts
}

// maxIn returns the most checks that ran in any window of length d.
func (w *busyWorkers) maxIn(d time.Duration) int {
	ran := slices.SortedFunc(slices.Values(w.ran), time.Time.Compare)
	most := 0
	for i := range ran {
		j, _ := slices.BinarySearchFunc(ran, ran[i].Add(d), time.Time.Compare)
		most = max(most, j-i)
	}
	return most
}

// every returns a next for workers that reach the queue every gap.
func every(gap time.Duration) func(time.Time) time.Time {
	return func(now time.Time) time.Time { return now.Add(gap) }
}

// TestSecretChecksClumped: a busy sidecar's workers reach the checks whose places passed in clumps
// (all workers granting, then reaching the queued checks together), 0.1 to 2 s apart, while a
// third of the objects' checks fell due together (a backlog) and the others come due spread over
// the default interval, as after heavy provisioning. Whatever the clumping:
//   - a check costs at most 3 reconciles that do not run it (its place, one refusal, and one
//     spare) before it runs: refused checks do not take new places again and again;
//   - every check runs within interval/checkRateFactor, plus the gap, of its due time;
//   - the checks that run in any second are at most the limit for a second and the gap, plus
//     running's burst: a clump runs what came due since the last one, no more.
func TestSecretChecksClumped(t *testing.T) {
	const interval = DefaultSecretCheckInterval
	for _, n := range []int{20000, 60000} {
		for _, gap := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, time.Second,
			2 * time.Second} {
			t.Run(fmt.Sprintf("%d/%v", n, gap), func(t *testing.T) {
				t.Parallel()
				limit := float64(checkRateFactor*n) / interval.Seconds()
				all := uids(n)
				last := make([]time.Time, n)
				for i := range all {
					if i%3 == 0 {
						last[i] = epoch.Add(-interval) // the backlog: due at epoch
					} else {
						last[i] = epoch.Add(-interval + time.Duration(i)*interval/time.Duration(n))
					}
				}
				var c secretChecks
				w := newBusyWorkers(&c, interval, all, last, every(gap))
				end := epoch.Add(interval)
				w.run(epoch, end)

				if w.maxAttempts > 3 {
					t.Errorf("a check was reconciled %d times without running, want at most 3", w.maxAttempts)
				}
				bound := interval/checkRateFactor + gap
				if w.maxLate > bound {
					t.Errorf("a check ran %v after it fell due, want at most %v", w.maxLate, bound)
				}
				if late, attempts := w.waiting(end.Add(-bound)); late > 0 {
					t.Errorf("%d checks due before %v have not run at %v (up to %d reconciles each)",
						late, end.Add(-bound).Sub(epoch), end.Sub(epoch), attempts)
				}
				want := int(limit*(time.Second+gap).Seconds()) + c.running.Burst()
				if most := w.maxIn(time.Second); most > want {
					t.Errorf("%d checks ran in one second, want at most %d (%.0f/s for 1 s + %v, and %d)",
						most, want, limit, gap, c.running.Burst())
				}
				if c.decisions[checkRan] != len(w.ran) || sum(c.decisions[:]) != w.calls {
					t.Errorf("decisions counted %v (NotDue, Placed, Kept, Ran, Refused), want %d Ran of %d",
						c.decisions, len(w.ran), w.calls)
				}
				t.Logf("%d checks ran; at most %d reconciles without running, %v late, %d in a second",
					len(w.ran), w.maxAttempts, w.maxLate, w.maxIn(time.Second))
			})
		}
	}
}

// TestSecretChecksHeldUpTwice: a backlog of every check is being spread when the sidecar is held up
// for 10 s, then again for 10 s once the checks refused after the first hold-up wait for their
// time. After a hold-up, the checks whose times passed during it run at once: at most the limit ×
// the hold-up plus running's burst, and only then: in any other second at most the limit and the
// burst run. Every check runs after at most 3 reconciles that do not run it, within
// interval/checkRateFactor plus the hold-ups of its due time.
func TestSecretChecksHeldUpTwice(t *testing.T) {
	const n, interval, held = 1200, time.Minute, 10 * time.Second
	const limit = checkRateFactor * n / 60 // 40/s
	holdUps := []time.Time{epoch.Add(10 * time.Second), epoch.Add(30 * time.Second)}
	resumed := []time.Time{holdUps[0].Add(held), holdUps[1].Add(held)}
	const tick = 10 * time.Millisecond
	next := func(now time.Time) time.Time {
		for i, at := range holdUps {
			if !now.Before(at) && now.Before(resumed[i]) {
				return resumed[i]
			}
		}
		return now.Add(tick)
	}
	all := uids(n)
	last := make([]time.Time, n)
	for i := range last {
		last[i] = epoch.Add(-interval)
	}
	var c secretChecks
	w := newBusyWorkers(&c, interval, all, last, next)
	end := epoch.Add(interval)
	w.run(epoch, end)
	burst := c.running.Burst()

	if w.maxAttempts > 3 {
		t.Errorf("a check was reconciled %d times without running, want at most 3", w.maxAttempts)
	}
	bound := interval/checkRateFactor + 2*held + tick
	if w.maxLate > bound {
		t.Errorf("a check ran %v after it fell due, want at most %v", w.maxLate, bound)
	}
	if late, attempts := w.waiting(epoch.Add(time.Nanosecond)); late > 0 {
		t.Errorf("%d of the backlog's checks have not run at %v (up to %d reconciles each)",
			late, end.Sub(epoch), attempts)
	}
	for _, at := range resumed {
		if w.reached[at] > limit*int(held/time.Second)+burst {
			t.Errorf("%d checks ran at once %v after the start, when the sidecar resumed, want at most %d",
				w.reached[at], at.Sub(epoch), limit*int(held/time.Second)+burst)
		}
	}
	// Any second that does not start with a resumption: the limit, a tick's worth and the burst.
	var others []time.Time
	for _, at := range w.ran {
		if !slices.ContainsFunc(resumed, at.Equal) {
			others = append(others, at)
		}
	}
	w.ran = others
	if most, want := w.maxIn(time.Second), limit+1+burst; most > want {
		t.Errorf("%d checks ran in one second besides the resumptions, want at most %d", most, want)
	}
	t.Logf("at the resumptions %d and %d ran; at most %d reconciles without running, %v late",
		w.reached[resumed[0]], w.reached[resumed[1]], w.maxAttempts, w.maxLate)
}

// TestSecretChecksDeletedRefused: a tenant's accesses that all fell due together are refused
// (their places passed while the sidecar was held up) and wait for their time, then are deleted.
// The time they held does not delay the other tenants' checks: one that falls due afterwards
// still runs within interval/checkRateFactor.
func TestSecretChecksDeletedRefused(t *testing.T) {
	const interval = time.Minute
	var c secretChecks
	mine, others := dueTogether(&c, interval, 40*time.Second)
	// Held up until every place passed: all but running's burst are refused.
	resumed := epoch.Add(35 * time.Second)
	refused := 0
	for _, uid := range mine {
		if c.dueAt(keyOf(uid), uid, interval, resumed) > 0 {
			refused++
		}
	}
	if refused < 500 {
		t.Fatalf("%d of 600 checks refused after the hold-up, want most", refused)
	}
	for _, uid := range mine {
		c.forget(keyOf(uid), uid)
	}
	for _, uid := range others {
		if wait := c.dueAt(keyOf(uid), uid, interval, epoch.Add(40*time.Second)); wait > interval/checkRateFactor {
			t.Errorf("%s, due now, runs in %v, want at most %v", uid, wait, interval/checkRateFactor)
		}
	}
}

func sum(counts []int) int {
	total := 0
	for _, n := range counts {
		total += n
	}
	return total
}
