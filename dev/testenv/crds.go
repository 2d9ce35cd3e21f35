package testenv

import (
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var crdListGVK = schema.GroupVersionKind{
	Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinitionList",
}

// RemoveCRDs deletes every CRD of group and waits until they are gone, for tests that install
// other CRDs of the same group (another version, or a chart's own).
//
// Each CRD's instances are listed first, until that succeeds: a CRD deleted while the API server
// is still initializing its storage ("storage is (re)initializing") is left Terminating with
// InstanceDeletionFailed, and the API server's finalizer retries it only after minutes.
func (e *Env) RemoveCRDs(t testing.TB, group string) {
	t.Helper()
	crds := &unstructured.UnstructuredList{}
	crds.SetGroupVersionKind(crdListGVK)
	if err := e.Client.List(t.Context(), crds); err != nil {
		t.Fatal(err)
	}
	for i := range crds.Items {
		crd := &crds.Items[i]
		if g, _, _ := unstructured.NestedString(crd.Object, "spec", "group"); g != group {
			continue
		}
		kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		if kind != "" && len(versions) > 0 {
			version, _, _ := unstructured.NestedString(versions[0].(map[string]any), "name")
			instances := &unstructured.UnstructuredList{}
			instances.SetGroupVersionKind(schema.GroupVersionKind{Group: group, Version: version, Kind: kind + "List"})
			Eventually(t, func() error { return e.Client.List(t.Context(), instances) })
		}
		if err := client.IgnoreNotFound(e.Client.Delete(t.Context(), crd)); err != nil {
			t.Fatal(err)
		}
	}
	Eventually(t, func() error {
		for i := range crds.Items {
			crd := crds.Items[i].DeepCopy()
			err := e.Client.Get(t.Context(), client.ObjectKeyFromObject(crd), crd)
			switch {
			case err == nil:
				return fmt.Errorf("CRD %s is still there (finalizers %v, status %v)",
					crd.GetName(), crd.GetFinalizers(), crd.Object["status"])
			case !apierrors.IsNotFound(err):
				return err
			}
		}
		return nil
	})
}
