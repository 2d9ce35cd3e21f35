package predicates_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/predicates"
)

func TestSpecOrLifecycleChanged(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name   string
		mutate func(*cosiapi.Bucket)
		want   bool
	}{
		{"nothing", func(*cosiapi.Bucket) {}, false},
		{"status", func(b *cosiapi.Bucket) { b.Status.BucketID = "id" }, false},
		{"finalizers", func(b *cosiapi.Bucket) { b.Finalizers = nil }, false},
		{"generation", func(b *cosiapi.Bucket) { b.Generation++ }, true},
		{"annotation added", func(b *cosiapi.Bucket) { b.Annotations["k2"] = "v" }, true},
		{"annotation removed", func(b *cosiapi.Bucket) { delete(b.Annotations, "k") }, true},
		{"deletion", func(b *cosiapi.Bucket) { b.DeletionTimestamp = &now }, true},
	} {
		old := &cosiapi.Bucket{ObjectMeta: metav1.ObjectMeta{Generation: 1, Annotations: map[string]string{"k": "v"},
			Finalizers: []string{cosiapi.FinalizerProtection}}}
		n := old.DeepCopy()
		tc.mutate(n)
		if got := predicates.SpecOrLifecycleChanged.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: n}); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if predicates.SpecOrLifecycleChanged.Delete(event.DeleteEvent{Object: &cosiapi.Bucket{}}) {
		t.Error("deletes pass")
	}
	if !predicates.SpecOrLifecycleChanged.Create(event.CreateEvent{Object: &cosiapi.Bucket{}}) {
		t.Error("creates do not pass")
	}
}

func TestProtectionRemoved(t *testing.T) {
	with := &cosiapi.BucketAccess{
		ObjectMeta: metav1.ObjectMeta{Finalizers: []string{"other", cosiapi.FinalizerProtection}},
	}
	without := &cosiapi.BucketAccess{ObjectMeta: metav1.ObjectMeta{Finalizers: []string{"other"}}}
	for _, tc := range []struct {
		name     string
		old, new *cosiapi.BucketAccess
		want     bool
	}{
		{"removed", with, without, true},
		{"added", without, with, false},
		{"kept", with, with, false},
		{"never there", without, without, false},
	} {
		got := predicates.ProtectionRemoved.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new})
		if got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if predicates.ProtectionRemoved.Create(event.CreateEvent{Object: with}) ||
		predicates.ProtectionRemoved.Delete(event.DeleteEvent{Object: with}) ||
		predicates.ProtectionRemoved.Generic(event.GenericEvent{Object: with}) {
		t.Error("creates, deletes or generic events pass")
	}
}
