// Package apiutil holds what the COSI controller and sidecar both do to API objects: conditions,
// finalizers, annotations and the predicate that keeps a reconciler from waking on its own writes.
package apiutil

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// maxMessage bounds condition and event messages; driver messages can be long.
const maxMessage = 1024

// Truncate bounds a condition or event message.
func Truncate(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	return s[:maxMessage-3] + "..."
}

// SetCondition sets a condition, recording the generation it was computed for.
func SetCondition(conds *[]metav1.Condition, generation int64, typ string, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(conds, metav1.Condition{
		Type: typ, Status: s, Reason: reason, Message: Truncate(msg), ObservedGeneration: generation,
	})
}

// ConditionsChanged reports whether two condition lists differ in anything but transition times.
func ConditionsChanged(before, after []metav1.Condition) bool {
	return !slices.EqualFunc(before, after, func(a, b metav1.Condition) bool {
		return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message && a.ObservedGeneration == b.ObservedGeneration
	})
}

// IsTrue reports whether the condition typ is True.
func IsTrue(conds []metav1.Condition, typ string) bool {
	return meta.IsStatusConditionTrue(conds, typ)
}

// PatchMeta patches what mutate changes in obj's metadata or spec, with optimistic locking so that a
// concurrent change of a list (finalizers) is not overwritten. It does nothing when mutate reports
// no change.
func PatchMeta(ctx context.Context, c client.Client, obj client.Object, mutate func() bool) error {
	orig, _ := obj.DeepCopyObject().(client.Object)
	if !mutate() {
		return nil
	}
	return c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}

// AddFinalizer adds the protection finalizer.
func AddFinalizer(ctx context.Context, c client.Client, obj client.Object) error {
	return PatchMeta(ctx, c, obj, func() bool { return controllerutil.AddFinalizer(obj, cosiapi.FinalizerProtection) })
}

// RemoveFinalizer removes the protection finalizer; an object already gone is fine.
func RemoveFinalizer(ctx context.Context, c client.Client, obj client.Object) error {
	return client.IgnoreNotFound(PatchMeta(ctx, c, obj, func() bool { return controllerutil.RemoveFinalizer(obj, cosiapi.FinalizerProtection) }))
}

// patchAnnotations patches what mutate changes in obj's annotations. A JSON merge patch of a map
// touches only the keys it names, so no optimistic lock is needed: concurrent writers of other
// annotations (the controller and the sidecar each set their own) do not conflict.
func patchAnnotations(ctx context.Context, c client.Client, obj client.Object, mutate func() bool) error {
	orig, _ := obj.DeepCopyObject().(client.Object)
	if !mutate() {
		return nil
	}
	return c.Patch(ctx, obj, client.MergeFrom(orig))
}

// SetAnnotation sets an annotation to "true".
func SetAnnotation(ctx context.Context, c client.Client, obj client.Object, key string) error {
	return patchAnnotations(ctx, c, obj, func() bool {
		a := obj.GetAnnotations()
		if _, ok := a[key]; ok {
			return false
		}
		if a == nil {
			a = map[string]string{}
		}
		a[key] = "true"
		obj.SetAnnotations(a)
		return true
	})
}

// RemoveAnnotation removes an annotation.
func RemoveAnnotation(ctx context.Context, c client.Client, obj client.Object, key string) error {
	return patchAnnotations(ctx, c, obj, func() bool {
		a := obj.GetAnnotations()
		if _, ok := a[key]; !ok {
			return false
		}
		delete(a, key)
		obj.SetAnnotations(a)
		return true
	})
}

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

// MaxBackoff is the longest wait between two attempts of a failing reconcile.
const MaxBackoff = 5 * time.Minute

// Result turns a reconcile error into what controller-runtime should do: a conflict (another
// writer changed the object since it was read) is retried with the object's backoff, which starts
// at 5 ms, without being logged as an error; it is the expected cost of optimistic locking, not a
// failure.
func Result(err error) (reconcile.Result, error) {
	if apierrors.IsConflict(err) {
		return reconcile.Result{Requeue: true}, nil
	}
	return reconcile.Result{}, err
}

// SpecOrLifecycleChanged passes updates that change what a reconciler must do: the spec
// (generation), annotations (the signals between controller and sidecar) or the deletion
// timestamp. It drops updates of status and finalizers only, which the reconcilers make
// themselves, so their own writes do not wake them up again. Annotations and finalizers do not
// bump the generation, so GenerationChangedPredicate alone would miss the signals.
var SpecOrLifecycleChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld, e.ObjectNew
		return o.GetGeneration() != n.GetGeneration() ||
			!maps.Equal(o.GetAnnotations(), n.GetAnnotations()) ||
			!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp())
	},
	DeleteFunc: func(event.DeleteEvent) bool { return false },
}

// ProtectionRemoved passes updates that remove COSI's protection finalizer, which someone other
// than COSI may have done: the reconciler puts it back. COSI's own removal happens on deleting
// objects, where the reconcilers have nothing left to do.
var ProtectionRemoved = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return controllerutil.ContainsFinalizer(e.ObjectOld, cosiapi.FinalizerProtection) &&
			!controllerutil.ContainsFinalizer(e.ObjectNew, cosiapi.FinalizerProtection)
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// InitConditions adds each condition type that is missing as Unknown (ReasonPending): every COSI
// condition starts Unknown (KEP-1979 "Conditions").
func InitConditions(conds *[]metav1.Condition, generation int64, types ...string) {
	for _, typ := range types {
		if meta.FindStatusCondition(*conds, typ) == nil {
			SetCondition(conds, generation, typ, metav1.ConditionUnknown, cosiapi.ReasonPending, "")
		}
	}
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
	rec.Eventf(obj, nil, corev1.EventTypeWarning, reason, "KubernetesAPI", "Kubernetes API error: %s", Truncate(err.Error()))
}

// ResultWithEvent reports a failed Kubernetes API call of a reconcile of obj as an event (see
// APIErrorEvent) and hands the error to controller-runtime (see Result).
func ResultWithEvent(rec events.EventRecorder, obj runtime.Object, reason string, err error) (reconcile.Result, error) {
	APIErrorEvent(rec, obj, reason, err)
	return Result(err)
}

// ConfirmGone reports whether the object at key is gone: not found, or replaced by another object
// of the same name (same reports false for it). The cache answers "it exists"; "gone" is confirmed
// by the live reader, because the cache may not have an object created a moment ago. Decisions
// that delete or revoke are made on it.
func ConfirmGone(ctx context.Context, cache, live client.Reader, key client.ObjectKey, obj client.Object, same func() bool) (bool, error) {
	for _, reader := range []client.Reader{cache, live} {
		err := reader.Get(ctx, key, obj)
		if client.IgnoreNotFound(err) != nil {
			return false, err
		}
		if err == nil && same() {
			return false, nil
		}
	}
	return true, nil
}

// Scheme returns a scheme with the core Kubernetes types and the COSI types: what the controller,
// the sidecar and the tests read and write.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(cosiapi.AddToScheme(s))
	return s
}
