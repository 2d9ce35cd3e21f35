// Package apiutil holds what the COSI controller and sidecar both do to API objects: conditions,
// finalizers, annotations and the predicate that keeps a reconciler from waking on its own writes.
package apiutil

import (
	"context"
	"maps"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
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

// Result turns a reconcile error into what controller-runtime should do: a conflict (another
// writer changed the object since it was read) is retried at once without being logged as an
// error; it is the expected cost of optimistic locking, not a failure.
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

// Scheme returns a scheme with the core Kubernetes types and the COSI types: what the controller,
// the sidecar and the tests read and write.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(cosiapi.AddToScheme(s))
	return s
}
