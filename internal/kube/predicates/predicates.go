// Package predicates filters the events that wake the COSI reconcilers, so that they wake for
// what they must act on and not for their own writes.
package predicates

import (
	"maps"

	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

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
