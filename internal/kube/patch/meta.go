package patch

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/lookup"
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
	_, err := FinalizerRemoved(ctx, c, obj)
	return err
}

// FinalizerRemoved removes the protection finalizer and reports whether this call removed it.
// It did not when obj is gone already: a reconcile from a cache that has not seen the deletion
// yet finds the finalizer on its stale copy, and the patch, locked to that copy's version, finds
// no object. What follows a removal (counting a deletion) is done once, on true. A refusal because
// obj's namespace is gone is an error (lookup.NamespaceGone): obj is still there.
func FinalizerRemoved(ctx context.Context, c client.Client, obj client.Object) (bool, error) {
	removed := false
	err := Locked(ctx, c, obj, func() bool {
		removed = controllerutil.RemoveFinalizer(obj, cosiapi.FinalizerProtection)
		return removed
	})
	if err != nil {
		return false, lookup.IgnoreGone(err)
	}
	return removed, nil
}

// Annotation sets (value non-empty) or removes one annotation, with a merge patch that names that
// key only: concurrent writers of other annotations (the controller and the sidecar each set their
// own) neither conflict nor lose theirs, so no optimistic lock is needed. A merge patch computed
// from a copy would not do: removing the copy's last annotation would remove them all.
func Annotation(ctx context.Context, c client.Client, obj client.Object, key, value string) error {
	var v any
	if value != "" {
		v = value
	}
	p, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: v}}})
	if err != nil {
		return fmt.Errorf("annotation %s: %w", key, err)
	}
	return c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, p))
}

// SetAnnotation sets an annotation to "true", unless obj has it.
func SetAnnotation(ctx context.Context, c client.Client, obj client.Object, key string) error {
	if _, ok := obj.GetAnnotations()[key]; ok {
		return nil
	}
	return Annotation(ctx, c, obj, key, "true")
}

// RemoveAnnotation removes an annotation, if obj has it.
func RemoveAnnotation(ctx context.Context, c client.Client, obj client.Object, key string) error {
	if _, ok := obj.GetAnnotations()[key]; !ok {
		return nil
	}
	return Annotation(ctx, c, obj, key, "")
}
