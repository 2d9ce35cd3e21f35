package sidecar

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Scheduled checks: each provisioned access's Secrets are checked (a PATCH per Secret), and each
// provisioned Bucket's information is asked of the driver again, once per interval
// (--secret-check-interval). Their total is one per object per interval, N/interval per second,
// but they fall due together when they could not run: checks that came due while every worker was
// granting wait in the work queue behind the grants and then run back to back (hundreds of PATCH
// per second after provisioning 20,000 accesses; docs/benchmark.md, "Scale"). A token bucket
// spreads them: they run at most checkRateFactor times their average rate, and a check that finds
// no token keeps its place (a reservation) and runs at its time. Places that pass together while
// the sidecar is held up do not run together: a second token bucket, running, counts the checks
// that run, and a check whose place passed when running has no token left reserves running's next
// one, after the checks refused already, and then runs at that time without asking again.
//
// What that bounds, whenever the workers reach the checks (a busy sidecar's workers grant, then
// reach the checks queued meanwhile together, in clumps; TestSecretChecksClumped,
// TestSecretChecksHeldUpTwice):
//   - reconciles: a check that falls due takes a place (one reconcile), is refused once at most (a
//     second), and runs at the next. Refused checks used to take new places in places, after every
//     place given, and were refused again when their places passed in the next clump: with clumps
//     more than running's burst apart (0.2 s) most checks were refused again and again, and ran
//     minutes late.
//   - lateness: a backlog of every check drains in interval/checkRateFactor; a hold-up adds its
//     length (running's tokens that passed meanwhile are lost), and that is all.
//   - bursts: every check that runs took one of running's tokens, when it ran or when it was
//     refused. A check runs at most H after its token's time, H the longest the workers did not
//     reach it (a clump's gap, a hold-up), so the checks that run in any window of length W are at
//     most limit × (W + H) + running's burst. After a hold-up of H, the checks whose reservations
//     passed during it run at once (at most limit × H + the burst), once: the tokens they use were
//     taken before, so what follows is at most limit × W + the burst again. A limiter that refused
//     them again could bound that burst to running's but not the reconciles: that is the runaway
//     above. Refusing a late reservation once more (a third reconcile) halves the catch-up of a
//     draining work queue in simulation, but a late check then takes two tokens: with clumps
//     further apart than the lateness tolerated, running serves N/interval, what falls due, and a
//     backlog no longer drains. Bounded reconciles and lateness are worth more than spreading a
//     hold-up's catch-up, which is the work the hold-up delayed, no more.
//
// Grants, the Secrets of new grants, rotations and refreshes that someone asked for are not
// limited: only the scheduled checks are.

const (
	// checkRateFactor is how much faster than their average rate (N/interval) checks may run. In
	// steady state they use 1/checkRateFactor of it and rarely wait; a backlog of all N checks
	// drains in interval/checkRateFactor, so no check runs later than that after its due time.
	checkRateFactor = 2
	// minCheckRate is the rate below which checks are never held back (checks per second): a
	// handful of checks is no burst, and a sidecar that has just started, and so knows few
	// objects yet, does not hold back the first checks of the many it is about to learn about.
	minCheckRate = 10
	// checkBurstPerSecond: the bucket holds a tenth of a second's checks (at least one).
	checkBurstPerSecond = 10
)

// secretChecks schedules the checks of provisioned objects: each object is checked once per
// interval, the first checks after a start are spread over the interval, so that a restarted
// sidecar does not check every Secret of the cluster at once, and checks that fall due together
// are spread at checkRateFactor × N/interval.
type secretChecks struct {
	mu sync.Mutex
	// objects are the objects whose checks are scheduled, by name: the UID of the object seen under
	// the name, and when it was last checked. A name seen with another UID holds a new object (the
	// old one was deleted and its deletion not seen): the old one's schedule goes. An object gone
	// without the sidecar seeing its deletion (a tenant removed an access's finalizers and deleted
	// it) is forgotten when its reconcile finds no object under the name (gone): otherwise it would
	// stay for good, and raise the rate. One map by name, not one by UID and two pairing names and
	// UIDs: two fifths of the memory (BenchmarkSecretChecksMemory), which counts at 100,000 accesses.
	objects map[types.NamespacedName]checkedObject
	// epoch is the time the objects' times count from (the first time given): a time.Duration
	// takes 8 bytes where a time.Time takes 24, and epoch keeps the monotonic clock's reading.
	epoch time.Time
	// slots are the times of the checks that came due when no token was left: their places in
	// places, or, for the checks refused by running, their reservations of running.
	slots map[types.NamespacedName]checkSlot
	// places gives each check that falls due its time; running limits the checks that run: places
	// that passed together, while the sidecar was held up (a busy machine, a long reconcile, workers
	// reaching the queue in clumps), do not all run at once: those beyond running's burst reserve
	// running's next tokens and run then.
	places, running *rate.Limiter
	// dropped counts the places and reservations given up (their objects were forgotten, or checked
	// before their time) since places was last rebuilt, droppedReserved the reservations among
	// them. They stay spent: when they outnumber the slots kept, places (and running, if
	// reservations were dropped) are rebuilt with the slots kept only, so that the checks of
	// accesses a tenant created and deleted together do not delay the others' (with the rate
	// fallen with them, their places would take longer than interval/checkRateFactor to pass).
	dropped, droppedReserved int
	// latest is the latest time dueAt was asked at; an earlier one is taken as it. placedUntil and
	// reservedUntil are the latest place and reservation of running given (dropped ones too, until
	// a rebuild).
	latest, placedUntil, reservedUntil time.Time
	// interval is the checks' interval (wakeChecks; the last dueAt's), which wakeDue counts with.
	interval time.Duration
	// woken are the objects wakeDue queued whose reconcile has not asked for their check since
	// (dueAt), and those whose check runs (dueAt said so) and is not done yet: each is queued once
	// per time it falls due, as a requeue would. An object whose reconcile does not ask (it is no
	// longer provisioned), or whose check failed, is not queued again by the schedule:
	// controller-runtime retries a failure with backoff, and a final one (a driver code retrying
	// cannot fix) waits for the object to change, as every final error does (result).
	woken map[types.NamespacedName]struct{}
	// decisions counts dueAt's answers, by decision; counters, when set (countDecisions), count
	// them too, as cosi_sidecar_scheduled_check_decisions_total.
	decisions [checkDecisions]int
	counters  [checkDecisions]prometheus.Counter
}

// checkedObject is an object whose checks are scheduled: its UID, and when it was last checked
// (since secretChecks.epoch).
type checkedObject struct {
	uid  types.UID
	last time.Duration
}

// checkSlot is the time a check runs at, after it came due without a token: its place, or its
// reservation of running (reserved) once refused.
type checkSlot struct {
	at       time.Time
	reserved bool
}

// checkDecision is what dueAt decided (cosi_sidecar_scheduled_check_decisions_total's decision).
type checkDecision int

const (
	checkNotDue  checkDecision = iota // not due yet (checked less than an interval ago)
	checkPlaced                       // due, no token: it took a place and waits for it
	checkKept                         // woken before its place or reservation (an event): kept
	checkRan                          // runs now
	checkRefused                      // its place passed but running had no token: reserved one
	checkDecisions
)

// checkDecisionNames are the decisions' label values.
var checkDecisionNames = [checkDecisions]string{"NotDue", "Placed", "Kept", "Ran", "Refused"}

// countDecisions counts dueAt's decisions on vec's series for the driver and the kind of check
// (scheduledCheckMetric).
func (c *secretChecks) countDecisions(vec *prometheus.CounterVec, driverName, check string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for d, name := range checkDecisionNames {
		c.counters[d] = vec.WithLabelValues(driverName, check, name)
	}
}

// gone forgets the object last seen under the name (its reconcile found none).
func (c *secretChecks) gone(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetLocked(key)
}

// due returns how long until the check of the object (its name and UID) runs; zero or less means
// now, and the check must then be made (it took its place in the rate limit).
func (c *secretChecks) due(key types.NamespacedName, uid types.UID, interval time.Duration) time.Duration {
	return c.dueAt(key, uid, interval, time.Now())
}

func (c *secretChecks) dueAt(
	key types.NamespacedName, uid types.UID, interval time.Duration, now time.Time,
) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	// The limiters take the times in order: a time earlier than the last (a worker read the clock,
	// then waited for the lock) would give them back the time between, as tokens.
	if now.Before(c.latest) {
		now = c.latest
	}
	c.latest = now
	c.interval = interval
	delete(c.woken, key)
	wait, decision := c.decide(key, uid, interval, now)
	if wait <= 0 {
		// It runs now: its reconcile reports it done, or fails and controller-runtime retries it
		// with backoff. Not woken meanwhile.
		c.woken[key] = struct{}{}
	}
	c.decisions[decision]++
	if c.counters[decision] != nil {
		c.counters[decision].Inc()
	}
	return wait
}

// decide is dueAt's answer, and which decision it is.
func (c *secretChecks) decide(
	key types.NamespacedName, uid types.UID, interval time.Duration, now time.Time,
) (time.Duration, checkDecision) {
	o, ok := c.object(key, uid)
	if !ok {
		// Not seen since the start: as if checked at a random moment of the last interval.
		o = checkedObject{uid: uid, last: c.since(now.Add(-rand.N(interval)))}
		c.objects[key] = o
	}
	if wait := c.epoch.Add(o.last).Add(interval).Sub(now); wait > 0 {
		return wait, checkNotDue
	}
	c.setLimit(interval, now)
	slot, ok := c.slots[key]
	if ok && slot.at.After(now) {
		return slot.at.Sub(now), checkKept // woken before its time (an event): the place is kept
	}
	delete(c.slots, key)
	if ok && slot.reserved {
		return 0, checkRan // its token of running was taken when it was refused
	}
	if !ok {
		if wait := c.places.ReserveN(now, 1).DelayFrom(now); wait > 0 {
			c.slots[key] = checkSlot{at: now.Add(wait)}
			c.placedUntil = maxTime(c.placedUntil, now.Add(wait))
			return wait, checkPlaced
		}
	}
	// Its place passed: it runs if running has a token; if not (places passed together), it
	// reserves running's next one, after the checks refused already, and runs then.
	wait := c.running.ReserveN(now, 1).DelayFrom(now)
	if wait <= 0 {
		return 0, checkRan
	}
	c.slots[key] = checkSlot{at: now.Add(wait), reserved: true}
	c.reservedUntil = maxTime(c.reservedUntil, now.Add(wait))
	return wait, checkRefused
}

// setLimit sets the rate to checkRateFactor × the objects known / interval, at least minCheckRate.
func (c *secretChecks) setLimit(interval time.Duration, now time.Time) {
	limit := rate.Limit(max(checkRateFactor*float64(len(c.objects))/interval.Seconds(), minCheckRate))
	burst := max(1, int(limit/checkBurstPerSecond))
	// running's burst is larger, so that a check run a little late does not cost the next one
	// its place.
	runningBurst := 2*burst + 1
	if c.places == nil {
		c.places, c.running = rate.NewLimiter(limit, burst), rate.NewLimiter(limit, runningBurst)
		return
	}
	if c.places.Limit() != limit {
		c.places.SetLimitAt(now, limit)
		c.places.SetBurstAt(now, burst)
		c.running.SetLimitAt(now, limit)
		c.running.SetBurstAt(now, runningBurst)
		// The limiters' debts are counted in tokens, their places and reservations in times: at a
		// higher limit a debt would be paid before they pass, and the checks placed or refused next
		// would run beside them; at a lower one long after, and they would wait for nothing (longer
		// than interval/checkRateFactor). Each debt ends at the latest place or reservation.
		if c.placedUntil.After(now) {
			c.places = reservedThrough(limit, burst, 0, c.placedUntil, now)
		}
		if c.reservedUntil.After(now) {
			c.running = reservedThrough(limit, runningBurst, 0, c.reservedUntil, now)
		}
	}
	if c.dropped > burst && c.dropped > len(c.slots)/2 {
		c.places = rate.NewLimiter(limit, burst)
		kept, latest := 0, now
		for _, slot := range c.slots {
			switch {
			case !slot.at.After(now):
			case !slot.reserved:
				c.places.ReserveN(now, 1)
			default:
				kept++
				if slot.at.After(latest) {
					latest = slot.at
				}
			}
		}
		// The places kept are counted from now: those placed next may pass beside them, and running
		// then refuses them.
		c.placedUntil = now
		if tokens := c.places.TokensAt(now); tokens < 0 {
			c.placedUntil = now.Add(time.Duration(-tokens / float64(limit) * float64(time.Second)))
		}
		if c.droppedReserved > 0 {
			c.running = reservedThrough(limit, runningBurst, kept, latest, now)
			c.reservedUntil = latest
		}
		c.dropped, c.droppedReserved = 0, 0
	}
}

// reservedThrough is a limiter (running, or places) rebuilt at now: empty (it was in debt when the
// places or reservations were given), and in debt by the kept ones and through the latest of them.
// Their times do not move (their objects are queued for them): were running in debt by their count
// only, the reservations given after the rebuild would take the times of those dropped before
// them, and the checks at those times would run at twice the limit.
func reservedThrough(limit rate.Limit, burst, kept int, latest, now time.Time) *rate.Limiter {
	debt := max(kept, int(math.Ceil(float64(limit)*latest.Sub(now).Seconds())))
	lim := rate.NewLimiter(limit, max(burst, debt))
	lim.ReserveN(now, lim.Burst())
	if debt > 0 {
		lim.ReserveN(now, debt)
	}
	lim.SetBurstAt(now, burst)
	return lim
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// done records that the object (its name and UID) was checked (or its Secrets written) now.
func (c *secretChecks) done(key types.NamespacedName, uid types.UID) { c.doneAt(key, uid, time.Now()) }

func (c *secretChecks) doneAt(key types.NamespacedName, uid types.UID, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	c.object(key, uid) // another UID's schedule goes
	c.objects[key] = checkedObject{uid: uid, last: c.since(now)}
	delete(c.woken, key)
	c.dropSlot(key)
}

// scheduled reports whether the object (its name and UID) has its checks scheduled.
func (c *secretChecks) scheduled(key types.NamespacedName, uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.objects[key]
	return ok && o.uid == uid
}

// object returns the schedule of the object under key if it is uid's; another UID's is
// forgotten (the name holds a new object: the old one is gone).
func (c *secretChecks) object(key types.NamespacedName, uid types.UID) (checkedObject, bool) {
	o, ok := c.objects[key]
	if ok && o.uid != uid {
		c.forgetLocked(key)
		return checkedObject{}, false
	}
	return o, ok
}

// since is t as a duration since epoch; the first time given is the epoch.
func (c *secretChecks) since(t time.Time) time.Duration {
	if c.epoch.IsZero() {
		c.epoch = t
	}
	return t.Sub(c.epoch)
}

// dropSlot gives up the place of the object under key, if it has one.
func (c *secretChecks) dropSlot(key types.NamespacedName) {
	if slot, ok := c.slots[key]; ok {
		delete(c.slots, key)
		c.dropped++
		if slot.reserved {
			c.droppedReserved++
		}
	}
}

// forget forgets the object (its name and UID; being deleted): not a new object under its name.
func (c *secretChecks) forget(key types.NamespacedName, uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if o, ok := c.objects[key]; ok && o.uid == uid {
		c.forgetLocked(key)
	}
}

func (c *secretChecks) forgetLocked(key types.NamespacedName) {
	delete(c.objects, key)
	delete(c.woken, key)
	c.dropSlot(key)
}

func (c *secretChecks) init() {
	if c.objects == nil {
		c.objects = map[types.NamespacedName]checkedObject{}
		c.slots = map[types.NamespacedName]checkSlot{}
		c.woken = map[types.NamespacedName]struct{}{}
	}
}

// Waking the checks that fall due. A reconcile that finds an object's check not due yet does not
// ask controller-runtime to requeue the object at its time: a delayed work-queue entry per object
// (about 130 bytes, and two objects per access: the access and its Bucket) held until then, which
// at 100,000 accesses is 26 MB of the sidecar's heap. One loop per schedule (wakeChecks) queues the
// objects whose time passed instead, from the schedule that holds their times anyway.

// maxWakeTick is the longest a check waits after its time for wakeChecks to queue it; a schedule
// with a short interval is looked at every interval/wakeTicksPerInterval, at least every
// minWakeTick.
const (
	maxWakeTick          = time.Second
	minWakeTick          = 10 * time.Millisecond
	wakeTicksPerInterval = 100
)

// wakeDue calls wake for each object whose check, its place or its reservation is due at now,
// and that it did not queue for it already.
func (c *secretChecks) wakeDue(now time.Time, wake func(types.NamespacedName)) {
	c.mu.Lock()
	var keys []types.NamespacedName
	if c.interval <= 0 {
		c.mu.Unlock()
		return
	}
	for key, o := range c.objects {
		if _, ok := c.woken[key]; ok {
			continue
		}
		at := c.epoch.Add(o.last).Add(c.interval)
		if slot, ok := c.slots[key]; ok {
			at = slot.at
		}
		if !at.After(now) {
			c.woken[key] = struct{}{}
			keys = append(keys, key)
		}
	}
	c.mu.Unlock()
	for _, key := range keys {
		wake(key)
	}
}

// wakeTick is how often wakeChecks looks at the schedule.
func (c *secretChecks) wakeTick() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return min(maxWakeTick, max(minWakeTick, c.interval/wakeTicksPerInterval))
}

// wakeChecks is the source that queues the objects whose checks fall due, every wakeTick, from
// when the controller starts (its leader's) until ctx ends.
func (c *secretChecks) wakeChecks(interval time.Duration) source.Source {
	c.mu.Lock()
	c.init()
	c.interval = interval
	c.mu.Unlock()
	return source.Func(func(ctx context.Context, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go func() {
			timer := time.NewTimer(c.wakeTick())
			defer timer.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
				c.wakeDue(time.Now(), func(key types.NamespacedName) {
					queue.Add(reconcile.Request{NamespacedName: key})
				})
				timer.Reset(c.wakeTick())
			}
		}()
		return nil
	})
}
