// Package requeue decides when a COSI reconcile runs again: the backoff of a failing object, what
// a Kubernetes API error of a reconcile becomes (a retry, an event), and how conflicts are
// retried.
package requeue

import (
	"errors"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kube-cosi/cosi/internal/conditions"
)

// MaxBackoff is the longest wait between two attempts of a failing reconcile.
const MaxBackoff = 5 * time.Minute

// RateLimiter is the backoff of the COSI reconcilers: per object, exponential from 5 ms to at
// most 5 minutes (controller-runtime's default waits up to 16 minutes), and 10 per second overall
// with bursts of 100. A failing driver call is retried at least every 5 minutes, for as long as it
// fails.
func RateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, MaxBackoff),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// Result turns a reconcile error into what controller-runtime should do: a conflict (another
// writer changed the object since it was read) is retried with the object's backoff, which starts
// at 5 ms, without being logged as an error; it is the expected cost of optimistic locking, not a
// failure.
func Result(err error) (reconcile.Result, error) {
	if apierrors.IsConflict(err) {
		// Requeue is the only way to ask for the rate-limited retry without an error; RequeueAfter
		// would skip the object's backoff.
		return reconcile.Result{Requeue: true}, nil //nolint:staticcheck // see above
	}
	return reconcile.Result{}, err
}

// APIErrorEvent records a failed Kubernetes API call of a reconcile as a Warning event on obj, with
// the reason of the operation it failed (KEP-1979 "Conditions": "Kubernetes API issues ... are
// reported as Events"). Conflicts are not reported: optimistic locking makes them part of normal
// operation, and they are retried at once. Objects that are gone are not reported either.
func APIErrorEvent(rec events.EventRecorder, obj runtime.Object, reason string, err error) {
	if err == nil || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
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
