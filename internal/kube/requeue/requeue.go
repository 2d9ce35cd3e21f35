// Package requeue decides when a COSI reconcile runs again: the backoff of a failing object, what
// a Kubernetes API error of a reconcile becomes (a retry, an event), and how conflicts are
// retried.
package requeue

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/kube/lookup"
)

// log is where what cannot be an event goes.
var log = ctrllog.Log.WithName("requeue")

// MaxBackoff is the longest wait between two attempts of a failing reconcile.
const MaxBackoff = 5 * time.Minute

// RateLimiter is the backoff of the COSI reconcilers: per object, exponential from 5 ms to at
// most 5 minutes (controller-runtime's default waits up to 16 minutes), and 10 per second overall
// with bursts of 100. A failing driver call is retried at least every 5 minutes, for as long as it
// fails.
func RateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](baseBackoff, MaxBackoff),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// baseBackoff is the first wait of a failing object.
const baseBackoff = 5 * time.Millisecond

// NextBackoff is how long rl, a RateLimiter, makes req wait if its reconcile fails now: its
// exponential wait for the failures so far, within MaxBackoff. (The overall limit of 10 per
// second can add to it under load.)
func NextBackoff(rl workqueue.TypedRateLimiter[reconcile.Request], req reconcile.Request) time.Duration {
	n := rl.NumRequeues(req)
	if n >= 30 {
		return MaxBackoff
	}
	return min(baseBackoff<<n, MaxBackoff)
}

// Result turns a reconcile error into what controller-runtime should do: a conflict (another
// writer changed the object since it was read) is retried with the object's backoff, which starts
// at 5 ms, without being logged as an error; it is the expected cost of optimistic locking, not a
// failure (APIErrorEvent reports it, rate-limited).
//
// A write refused because the object's namespace is gone (lookup.NamespaceGone) is tried again
// every NamespaceGoneInterval, logged by APIErrorEvent.
func Result(err error) (reconcile.Result, error) {
	if apierrors.IsConflict(err) {
		// Requeue is the only way to ask for the rate-limited retry without an error; RequeueAfter
		// would skip the object's backoff.
		return reconcile.Result{Requeue: true}, nil //nolint:staticcheck // see above
	}
	if lookup.NamespaceGone(err) {
		return reconcile.Result{RequeueAfter: NamespaceGoneInterval}, nil
	}
	return reconcile.Result{}, err
}

// NamespaceGoneInterval is how often a reconcile whose writes are refused because the object's
// namespace is gone tries again. Nothing the components watch changes when an admin recreates the
// namespace (they have no access to namespaces), and a failure's backoff would have grown towards
// MaxBackoff while the namespace was gone; each attempt costs one refused request.
const NamespaceGoneInterval = 15 * time.Second

// APIErrorEvent records a failed Kubernetes API call of a reconcile as a Warning event on obj, with
// the reason of the operation it failed (KEP-1979 "Conditions": "Kubernetes API issues (e.g.,
// update conflicts, rate limiting) are reported as Events"). A conflict delays the object's work
// by a retry: it is reported as a Normal UpdateConflict event, at most once per object and
// conflictInterval, with the number of conflicts since the last report (see conflictLog).
// Objects that are gone are not reported.
func APIErrorEvent(rec events.EventRecorder, obj runtime.Object, reason string, err error) {
	if lookup.NamespaceGone(err) {
		// No event can be written in a namespace that is gone: the log says it.
		log.Info("the object's namespace is gone: its writes are refused until the namespace is recreated; "+
			"trying again", "object", objectName(obj), "interval", NamespaceGoneInterval, "error", err.Error())
		return
	}
	if err == nil || apierrors.IsNotFound(err) {
		return
	}
	if apierrors.IsConflict(err) {
		if n := conflicts.record(conflictKey(obj), time.Now()); n > 0 {
			rec.Eventf(obj, nil, corev1.EventTypeNormal, cosiapi.EventUpdateConflict, "KubernetesAPI",
				"update conflict, retrying (%d since the last report): %s", n, conditions.Truncate(err.Error()))
		}
		return
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return // not an API error: the caller records it (driver errors have their own events)
	}
	rec.Eventf(obj, nil, corev1.EventTypeWarning, reason, "KubernetesAPI", "Kubernetes API error: %s",
		conditions.Truncate(err.Error()))
}

// ResultWithEvent reports a failed Kubernetes API call of a reconcile of obj as an event (see
// APIErrorEvent) and hands the error to controller-runtime (see Result).
func ResultWithEvent(rec events.EventRecorder, obj runtime.Object, reason string, err error) (reconcile.Result, error) {
	APIErrorEvent(rec, obj, reason, err)
	return Result(err)
}

// conflictInterval is the shortest time between two reports of one object's update conflicts.
const conflictInterval = time.Minute

// conflicts counts the update conflicts of the objects this process reconciles.
var conflicts = &conflictLog{objects: map[string]*conflictCount{}}

// conflictLog rate-limits the reports of update conflicts per object: the first conflict of an
// object is reported at once; the next ones are counted, and the count goes into the report of
// its first conflict once conflictInterval has passed. Conflicts are folded into reports, not
// dropped; only the count after an object's last report is, when it has no conflict again.
type conflictLog struct {
	mu      sync.Mutex
	objects map[string]*conflictCount
}

type conflictCount struct {
	reported time.Time // when the last report was made
	since    int       // conflicts since then, not reported yet
}

// record counts a conflict of the object key at now, and returns how many to report now (0:
// none, the last report is too recent).
func (l *conflictLog) record(key string, now time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.objects[key]
	if c == nil {
		l.forgetQuiet(now)
		c = &conflictCount{}
		l.objects[key] = c
	}
	c.since++
	if !c.reported.IsZero() && now.Sub(c.reported) < conflictInterval {
		return 0
	}
	n := c.since
	c.reported, c.since = now, 0
	return n
}

// forgetQuiet bounds the log: objects not reported for ten intervals are forgotten.
func (l *conflictLog) forgetQuiet(now time.Time) {
	if len(l.objects) < 1024 {
		return
	}
	for key, c := range l.objects {
		if now.Sub(c.reported) > 10*conflictInterval {
			delete(l.objects, key)
		}
	}
}

// conflictKey identifies obj in the conflict log: its UID, or its kind, namespace and name.
func conflictKey(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return fmt.Sprintf("%T", obj)
	}
	if uid := m.GetUID(); uid != "" {
		return string(uid)
	}
	return fmt.Sprintf("%T/%s/%s", obj, m.GetNamespace(), m.GetName())
}

// objectName is obj's namespace/name for the log.
func objectName(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return fmt.Sprintf("%T", obj)
	}
	return m.GetNamespace() + "/" + m.GetName()
}
