package patch_test

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/kube/patch"
)

// TestFinalizerWriteLeavesSpecAlone: adding the finalizer changes nothing else. A claim created
// with protocols: [] (valid: no minItems) is read into the Go type, which drops the empty list
// (omitempty); an update sends the spec without it, so the API server changes the spec and bumps
// metadata.generation, which a merge patch of the finalizer never did.
func TestFinalizerWriteLeavesSpecAlone(t *testing.T) {
	name := fmt.Sprintf("claim-%d", counter.Add(1))
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": cosiapi.SchemeGroupVersion.String(), "kind": "BucketClaim",
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec":     map[string]any{"bucketClassName": "class", "protocols": []any{}},
	}}
	if err := env.Client.Create(t.Context(), u); err != nil {
		t.Fatal(err)
	}
	claim := &cosiapi.BucketClaim{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(u), claim); err != nil {
		t.Fatal(err)
	}
	gen := claim.Generation
	if err := patch.AddFinalizer(t.Context(), env.Client, claim); err != nil {
		t.Fatal(err)
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(u.GroupVersionKind())
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(u), got); err != nil {
		t.Fatal(err)
	}
	_, kept, _ := unstructured.NestedSlice(got.Object, "spec", "protocols")
	if got.GetGeneration() != gen || !kept {
		t.Errorf("adding the finalizer changed the spec: generation %d -> %d, spec %v", gen, got.GetGeneration(),
			got.Object["spec"])
	}
}

var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// TestWritesKeepFieldsTheTypesDoNotKnow: the CRDs are upgraded before the components (docs/
// install.md: "Upgrade COSI before the drivers"), so a sidecar or controller of this version runs
// against objects with fields a newer version added. A merge patch left them alone; an update
// sends the object as the Go types know it, and the API server drops the rest. Here the
// BucketClaim CRD gets one more field in spec and in status, as a newer version would add.
func TestWritesKeepFieldsTheTypesDoNotKnow(t *testing.T) {
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(crdGVK)
	key := client.ObjectKey{Name: "bucketclaims.objectstorage.k8s.io"}
	if err := env.Client.Get(t.Context(), key, crd); err != nil {
		t.Fatal(err)
	}
	orig := crd.DeepCopy()
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	v := versions[0].(map[string]any)
	for _, part := range []string{"spec", "status"} {
		if err := unstructured.SetNestedField(v, map[string]any{"type": "string"},
			"schema", "openAPIV3Schema", "properties", part, "properties", "futureField"); err != nil {
			t.Fatal(err)
		}
	}
	if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Update(t.Context(), crd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(crdGVK)
		if err := env.Client.Get(context.Background(), key, cur); err == nil {
			spec, _, _ := unstructured.NestedMap(orig.Object, "spec")
			_ = unstructured.SetNestedMap(cur.Object, spec, "spec")
			_ = env.Client.Update(context.Background(), cur)
		}
	})

	claim := newClaim(t)
	gvk := schema.GroupVersionKind{Group: cosiapi.GroupName, Version: "v1alpha2", Kind: "BucketClaim"}
	// The newer version's writers set the fields (once the API server serves the new schema).
	testenv.Eventually(t, func() error {
		for _, sub := range []string{"", "status"} {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gvk)
			u.SetNamespace(claim.Namespace)
			u.SetName(claim.Name)
			part := "spec"
			if sub != "" {
				part = sub
			}
			p := client.RawPatch("application/merge-patch+json",
				[]byte(fmt.Sprintf(`{%q:{"futureField":"set by a newer version"}}`, part)))
			var err error
			if sub == "" {
				err = env.Client.Patch(t.Context(), u, p)
			} else {
				err = env.Client.Status().Patch(t.Context(), u, p)
			}
			if err != nil {
				return err
			}
			if got, _, _ := unstructured.NestedString(u.Object, part, "futureField"); got == "" {
				return fmt.Errorf("%s.futureField not served yet", part)
			}
		}
		return nil
	})
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(claim), claim); err != nil {
		t.Fatal(err)
	}
	// This version's writers: its status, then its finalizer.
	s := patch.NewStatus(env.Client, claim, all...)
	conditions.MarkTrue(claim, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioned, "")
	if err := s.Patch(t.Context(), patch.OptimisticLock); err != nil {
		t.Fatal(err)
	}
	if err := patch.AddFinalizer(t.Context(), env.Client, claim); err != nil {
		t.Fatal(err)
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(gvk)
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(claim), got); err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{"spec", "status"} {
		if f, _, _ := unstructured.NestedString(got.Object, part, "futureField"); f == "" {
			t.Errorf("%s.futureField, set by a newer version, was dropped by this version's write: %v", part,
				got.Object[part])
		}
	}
}
