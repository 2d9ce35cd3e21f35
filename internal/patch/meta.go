package patch

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// Locked patches what mutate changes in obj's metadata or spec, with optimistic locking so that a
// concurrent change of a list (finalizers) is not overwritten. It does nothing when mutate reports
// no change.
func Locked(ctx context.Context, c client.Client, obj client.Object, mutate func() bool) error {
	orig, _ := obj.DeepCopyObject().(client.Object)
	if !mutate() {
		return nil
	}
	return c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}

// AddFinalizer adds the protection finalizer.
func AddFinalizer(ctx context.Context, c client.Client, obj client.Object) error {
	return Locked(ctx, c, obj, func() bool { return controllerutil.AddFinalizer(obj, cosiapi.FinalizerProtection) })
}

// RemoveFinalizer removes the protection finalizer; an object already gone is fine.
func RemoveFinalizer(ctx context.Context, c client.Client, obj client.Object) error {
	return client.IgnoreNotFound(Locked(ctx, c, obj, func() bool {
		return controllerutil.RemoveFinalizer(obj, cosiapi.FinalizerProtection)
	}))
}

// annotations patches what mutate changes in obj's annotations. A JSON merge patch of a map
// touches only the keys it names, so no optimistic lock is needed: concurrent writers of other
// annotations (the controller and the sidecar each set their own) do not conflict.
func annotations(ctx context.Context, c client.Client, obj client.Object, mutate func() bool) error {
	orig, _ := obj.DeepCopyObject().(client.Object)
	if !mutate() {
		return nil
	}
	return c.Patch(ctx, obj, client.MergeFrom(orig))
}

// SetAnnotation sets an annotation to "true".
func SetAnnotation(ctx context.Context, c client.Client, obj client.Object, key string) error {
	return annotations(ctx, c, obj, func() bool {
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
	return annotations(ctx, c, obj, func() bool {
		a := obj.GetAnnotations()
		if _, ok := a[key]; !ok {
			return false
		}
		delete(a, key)
		obj.SetAnnotations(a)
		return true
	})
}
