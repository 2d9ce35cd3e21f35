package sidecar

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestSecretChecksNameModel: the schedule kept by name follows what its callers can do, in any
// order, against a model of it: a tenant deletes an access and creates it again under its name
// (a new UID) without the sidecar seeing the deletion, a stale copy reconciles the old UID once
// more, the old UID's deletion is seen after the new one exists, a reconcile finds the name
// empty (gone). After each step the schedule holds one object per name, the UID of the latest
// due or done under it, and no place of a name it forgot; a check done at t is not due before
// t + interval and is due at its exact time. Times are the monotonic clock's (time.Now), times
// before the first one given (a first sighting's random last check) included, and intervals up
// to 10,000 h, so that the times kept as durations since the first one are exercised on both
// sides of it.
func TestSecretChecksNameModel(t *testing.T) {
	intervals := []time.Duration{time.Second, time.Minute, 10000 * time.Hour}
	for seed := range uint64(60) {
		interval := intervals[seed%uint64(len(intervals))]
		r := rand.New(rand.NewPCG(seed, 1979))
		var c secretChecks
		type entry struct {
			uid  types.UID
			last time.Time // when done, or the first sighting's, if known
		}
		model := map[types.NamespacedName]entry{}
		keys := 1 + r.IntN(50)
		gen := make([]int, keys)
		now := time.Now()
		latest := now
		for step := range 2000 {
			k := r.IntN(keys)
			key := types.NamespacedName{Namespace: "tenant", Name: fmt.Sprint(k)}
			g := gen[k]
			if g > 0 && r.IntN(8) == 0 {
				g-- // a stale copy: the object deleted meanwhile
			}
			uid := types.UID(fmt.Sprintf("%d-%d", k, g))
			switch r.IntN(8) {
			case 0:
				now = now.Add(time.Duration(r.Int64N(int64(interval))))
			case 1:
				now = now.Add(-time.Duration(r.Int64N(int64(interval / 10)))) // read before the lock
			default:
				now = now.Add(time.Duration(r.Int64N(int64(interval / 100))))
			}
			var op string
			switch n := r.IntN(20); {
			case n < 10:
				op = "due"
				at := now
				if at.Before(latest) {
					at = latest // dueAt takes the latest time asked
				}
				latest = at
				e, ok := model[key]
				wait := c.dueAt(key, uid, interval, at)
				switch {
				case !ok || e.uid != uid:
					if wait <= 0 || wait > interval {
						t.Fatalf("seed %d step %d: first sighting of %s due in %v, want within (0, %v]",
							seed, step, uid, wait, interval)
					}
					model[key] = entry{uid: uid, last: at.Add(wait - interval)}
				case at.Before(e.last.Add(interval)):
					if want := e.last.Add(interval).Sub(at); wait != want {
						t.Fatalf("seed %d step %d: %s checked at %v due in %v, want %v",
							seed, step, uid, e.last.Sub(at), wait, want)
					}
				}
			case n < 15:
				op = "done"
				c.doneAt(key, uid, now)
				model[key] = entry{uid: uid, last: now}
			case n < 16:
				op = "forget"
				c.forget(key, uid)
				if model[key].uid == uid {
					delete(model, key)
				}
			case n < 17:
				op = "gone"
				c.gone(key)
				delete(model, key)
			default:
				op = "recreate"
				gen[k]++
			}
			if len(c.objects) != len(model) {
				t.Fatalf("seed %d step %d, %s %s: %d objects scheduled, want %d", seed, step, op, uid,
					len(c.objects), len(model))
			}
			for key, e := range model {
				if o, ok := c.objects[key]; !ok || o.uid != e.uid {
					t.Fatalf("seed %d step %d, %s %s: %v holds %+v, want %s", seed, step, op, uid, key, o, e.uid)
				}
			}
			for key := range c.slots {
				if _, ok := c.objects[key]; !ok {
					t.Fatalf("seed %d step %d, %s %s: %v keeps a place, not scheduled", seed, step, op, uid, key)
				}
			}
		}
	}
}
