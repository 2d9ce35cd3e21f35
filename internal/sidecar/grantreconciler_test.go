package sidecar

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// TestAccessGoing: the GrantReconciler wakes for the access changes that can leave a grant with
// no access (the removal of a finalizer, the deletion), not for the others, among them the
// controller's adding the protection finalizer to every new access, and the start of a deletion
// that finalizers hold (the access is still there; its own deletion revokes it).
func TestAccessGoing(t *testing.T) {
	access := func(deleting bool, finalizers ...string) *cosiapi.BucketAccess {
		ba := &cosiapi.BucketAccess{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", Finalizers: finalizers}}
		if deleting {
			ba.DeletionTimestamp = &metav1.Time{}
		}
		return ba
	}
	const other = "example.com/other"
	for _, c := range []struct {
		name     string
		old, new *cosiapi.BucketAccess
		want     bool
	}{
		{"finalizer added", access(false), access(false, cosiapi.FinalizerProtection), false},
		{"second finalizer added", access(false, other), access(false, other, cosiapi.FinalizerProtection), false},
		{"status or labels changed", access(false, other), access(false, other), false},
		{"finalizer removed", access(false, cosiapi.FinalizerProtection), access(false), true},
		{"finalizer replaced", access(false, cosiapi.FinalizerProtection), access(false, other), true},
		{"one of two finalizers removed", access(true, other, cosiapi.FinalizerProtection), access(true, other), true},
		{"deletion started", access(false, cosiapi.FinalizerProtection), access(true, cosiapi.FinalizerProtection), false},
	} {
		if got := accessGoing.Update(event.UpdateEvent{ObjectOld: c.old, ObjectNew: c.new}); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if !accessGoing.Delete(event.DeleteEvent{Object: access(true)}) {
		t.Error("deletion: false, want true")
	}
	if accessGoing.Create(event.CreateEvent{Object: access(false)}) {
		t.Error("creation: true, want false")
	}
}
