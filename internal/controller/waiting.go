package controller

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// waiting holds the objects of one kind that wait for a sidecar to act on them, each with when
// to look again (driverWatch). At that time it asks still, from the cache, whether the object
// still waits and whether a reconcile would change anything, and reconciles only those: an
// object a sidecar picked up in the meantime costs nothing. A RequeueAfter could not do that:
// controller-runtime cannot take one back.
//
// It holds only the objects that wait: the ones handed to a sidecar within the grace period and
// the ones no sidecar serves. An object leaves when its reconcile finds it no longer waits, when
// it is gone, or when still says so. Its loop runs while the controller does, so only on the
// leader; a controller that starts reconciles every object once, and each that waits is added
// then.
type waiting struct {
	// still reports whether the object key still waits: whether to reconcile it now (its
	// WaitingForDriver condition would change), and if not, when to look again (0: never).
	still func(ctx context.Context, key types.NamespacedName) (reconcile bool, again time.Duration)

	mu  sync.Mutex
	due map[types.NamespacedName]*dueEntry
	// order is due's entries, earliest first.
	order dueHeap
	// kick wakes the loop when an earlier time is added.
	kick chan struct{}
}

func newWaiting(
	still func(ctx context.Context, key types.NamespacedName) (bool, time.Duration),
) *waiting {
	return &waiting{still: still, due: map[types.NamespacedName]*dueEntry{}, kick: make(chan struct{}, 1)}
}

// add looks at key again after d, or sooner if it was to be looked at sooner already: a look
// that comes early finds the object younger than the grace period and sets the right time.
func (w *waiting) add(key types.NamespacedName, d time.Duration) {
	if w == nil {
		return
	}
	at := time.Now().Add(d)
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.due[key]
	switch {
	case ok && !e.at.After(at):
		return
	case ok:
		e.at = at
		heap.Fix(&w.order, e.index)
	default:
		e = &dueEntry{key: key, at: at}
		w.due[key] = e
		heap.Push(&w.order, e)
	}
	if w.order[0] == e {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// remove forgets key: it no longer waits for a sidecar, or it is gone.
func (w *waiting) remove(key types.NamespacedName) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if e, ok := w.due[key]; ok {
		heap.Remove(&w.order, e.index)
		delete(w.due, key)
		w.shrink()
	}
}

// shrink gives the memory of a burst back once nothing waits: neither a map nor a slice shrinks
// by itself.
func (w *waiting) shrink() {
	if len(w.due) == 0 {
		w.due, w.order = map[types.NamespacedName]*dueEntry{}, nil
	}
}

// len returns how many objects wait, and how many looks are due (the same, or a leak).
func (w *waiting) len() (int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.due), len(w.order)
}

// next removes and returns the keys due at now, and returns when the next one is due (zero:
// none).
func (w *waiting) next(now time.Time) ([]types.NamespacedName, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var keys []types.NamespacedName
	for len(w.order) > 0 {
		e := w.order[0]
		if e.at.After(now) {
			return keys, e.at
		}
		heap.Pop(&w.order)
		delete(w.due, e.key)
		keys = append(keys, e.key)
	}
	w.shrink()
	return keys, time.Time{}
}

// source is the controller's source of the reconciles that the waits call for: it runs the loop
// while the controller runs.
func (w *waiting) source() source.Source {
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go w.run(ctx, q)
		return nil
	})
}

// run looks at each object when it is due, until ctx is done.
func (w *waiting) run(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	for {
		keys, next := w.next(time.Now())
		for _, key := range keys {
			if ctx.Err() != nil {
				return
			}
			switch now, again := w.still(ctx, key); {
			case now:
				q.Add(reconcile.Request{NamespacedName: key}) // its reconcile adds it again if need be
			case again > 0:
				w.add(key, again)
			}
		}
		if len(keys) > 0 {
			continue // still may have added keys due now
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = time.Until(next)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-w.kick:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// dueEntry is one look at an object.
type dueEntry struct {
	key   types.NamespacedName
	at    time.Time
	index int // in the heap
}

// dueHeap orders looks by time (container/heap).
type dueHeap []*dueEntry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *dueHeap) Push(x any) {
	e := x.(*dueEntry)
	e.index = len(*h)
	*h = append(*h, e)
}

func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
