package cel

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/patch"
)

// TestBrownfieldFinalizerWithEmptyParameters: docs/api.md promises that a Bucket with
// existingBucketID and deletionPolicy Delete stored before the CRD refused them still takes
// COSI's finalizer and its removal (validation ratcheting: the spec is left alone). An admin's
// static Bucket often says parameters: {} (or protocols: []). The Go type drops the empty map
// (omitempty), so a finalizer write sent as an update (patch.Locked) removes it from spec: the spec
// changed, ratcheting no longer covers the spec's rules, and the write is refused. The sidecar
// then never adds its finalizer (AddFinalizer fails before provisioning), and a Bucket whose
// finalizer it holds stays Terminating: RemoveFinalizer is refused the same way.
//
// Not parallel: it takes the rule out of the installed CRD for a moment (setRule).
func TestBrownfieldFinalizerWithEmptyParameters(t *testing.T) {
	brownfield := func(finalizer bool) *unstructured.Unstructured {
		b := newBucket(uniqueName("brownfield-empty"))
		static(b)
		b.Spec.DeletionPolicy = cosiapi.DeletionPolicyDelete
		b.Spec.Parameters = nil
		if finalizer {
			b.Finalizers = []string{cosiapi.FinalizerProtection}
		}
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(b)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: content}
		u.SetAPIVersion(cosiapi.SchemeGroupVersion.String())
		u.SetKind("Bucket")
		if err := unstructured.SetNestedMap(u.Object, map[string]any{}, "spec", "parameters"); err != nil {
			t.Fatal(err)
		}
		return u
	}
	refusedNow := func() bool {
		err := env.Client.Create(t.Context(), brownfield(false), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), brownfieldRuleMessage)
	}
	fresh, held := brownfield(false), brownfield(true)
	beforeTheRule(t, refusedNow, func() {
		for _, u := range []*unstructured.Unstructured{fresh, held} {
			if err := env.Client.Create(t.Context(), u); err != nil {
				t.Fatal(err)
			}
			if p, _, _ := unstructured.NestedMap(u.Object, "spec", "parameters"); p == nil {
				t.Fatalf("spec.parameters: {} was not stored: %v", u.Object["spec"])
			}
		}
	})
	t.Cleanup(func() {
		noFinalizers := []byte(`{"metadata":{"finalizers":null}}`)
		_ = env.Client.Patch(t.Context(), held, client.RawPatch(types.MergePatchType, noFinalizers))
	})

	t.Run("the sidecar adds its finalizer", func(t *testing.T) {
		b := &cosiapi.Bucket{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Name: fresh.GetName()}, b); err != nil {
			t.Fatal(err)
		}
		if err := patch.AddFinalizer(t.Context(), env.Client, b); err != nil {
			t.Errorf("COSI's finalizer refused on a brownfield Bucket with parameters: {}: %v", err)
		}
	})
	t.Run("the sidecar removes its finalizer once deprovisioned", func(t *testing.T) {
		b := &cosiapi.Bucket{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Name: held.GetName()}, b); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Delete(t.Context(), b); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Name: held.GetName()}, b); err != nil {
			t.Fatal(err)
		}
		if err := patch.RemoveFinalizer(t.Context(), env.Client, b); err != nil {
			t.Errorf("COSI's finalizer cannot be removed from a deleted brownfield Bucket with parameters: {}"+
				" (it stays Terminating): %v", err)
		}
	})
}
