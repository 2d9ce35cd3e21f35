package scheme_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kube-cosi/cosi/internal/kube/scheme"
)

// countingMapper counts the mappings asked of a real DefaultRESTMapper.
type countingMapper struct {
	*meta.DefaultRESTMapper
	asked int
}

func (c *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	c.asked++
	return c.DefaultRESTMapper.RESTMapping(gk, versions...)
}

func (c *countingMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	c.asked++
	return c.DefaultRESTMapper.RESTMappings(gk, versions...)
}

// TestMemoized: a kind's mapping is asked of the mapper once and answered the same after; a kind
// not found is asked again, so one added later is found.
func TestMemoized(t *testing.T) {
	gv := schema.GroupVersion{Group: "objectstorage.k8s.io", Version: "v1alpha2"}
	delegate := &countingMapper{DefaultRESTMapper: meta.NewDefaultRESTMapper([]schema.GroupVersion{gv})}
	delegate.Add(gv.WithKind("Bucket"), meta.RESTScopeRoot)
	m := scheme.Memoized(delegate)

	bucket := schema.GroupKind{Group: gv.Group, Kind: "Bucket"}
	for range 3 {
		mapping, err := m.RESTMapping(bucket, gv.Version)
		if err != nil {
			t.Fatal(err)
		}
		if mapping.Resource.Resource != "buckets" || mapping.Scope.Name() != meta.RESTScopeNameRoot {
			t.Fatalf("mapping of Bucket: %+v", mapping)
		}
		mappings, err := m.RESTMappings(bucket)
		if err != nil || len(mappings) != 1 || mappings[0].Resource.Resource != "buckets" {
			t.Fatalf("mappings of Bucket: %v, %v", mappings, err)
		}
		mappings[0] = nil // a caller's change of its slice is its own
	}
	if delegate.asked != 2 {
		t.Errorf("the mapper was asked %d times for Bucket's mapping and mappings, want 2", delegate.asked)
	}

	claim := schema.GroupKind{Group: gv.Group, Kind: "BucketClaim"}
	if _, err := m.RESTMapping(claim); !meta.IsNoMatchError(err) {
		t.Fatalf("mapping of an unknown kind: %v, want no match", err)
	}
	delegate.Add(gv.WithKind("BucketClaim"), meta.RESTScopeNamespace)
	mapping, err := m.RESTMapping(claim)
	if err != nil || mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		t.Fatalf("mapping of a kind added later: %+v, %v", mapping, err)
	}
}
