package index_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/cache/index"
)

func TestExtract(t *testing.T) {
	access := &cosiapi.BucketAccess{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"},
		Spec: cosiapi.BucketAccessSpec{BucketAccessClassName: "ac", BucketClaims: []cosiapi.BucketClaimAccess{
			{BucketClaimName: "c1"}, {BucketClaimName: "c2"},
		}},
		Status: cosiapi.BucketAccessStatus{AccessedBuckets: []cosiapi.AccessedBucket{{BucketName: "b1"}, {BucketName: "b2"}}},
	}
	claim := &cosiapi.BucketClaim{Spec: cosiapi.BucketClaimSpec{BucketClassName: "bc", ExistingBucketName: "b"}}
	for _, tc := range []struct {
		field index.Field
		obj   client.Object
		want  []string
	}{
		{index.ClaimsByClass, claim, []string{"bc"}},
		{index.ClaimsByExistingBucket, claim, []string{"b"}},
		{index.AccessesByClaim, access, []string{"ns/c1", "ns/c2"}},
		{index.AccessesByClass, access, []string{"ac"}},
		{index.AccessesByBucket, access, []string{"b1", "b2"}},
		{index.AccessesByBucket, &cosiapi.BucketAccess{}, nil},
		{index.AccessesByUID, &cosiapi.BucketAccess{ObjectMeta: metav1.ObjectMeta{UID: "u1"}}, []string{"u1"}},
	} {
		got := tc.field.Extract(tc.obj)
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.field.Name, got, tc.want)
		}
	}
	if index.ClaimKey("ns", "c1") != "ns/c1" {
		t.Error("ClaimKey does not match the AccessesByClaim values")
	}
}

// TestHasAsExtract: each field's Has answers what Extract's values say, for the values of several
// accesses and values near them (another namespace, a prefix, a claim key with a name that has
// the namespace's characters, the empty value).
func TestHasAsExtract(t *testing.T) {
	accesses := []*cosiapi.BucketAccess{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"},
			Spec: cosiapi.BucketAccessSpec{BucketClaims: []cosiapi.BucketClaimAccess{
				{BucketClaimName: "c1"}, {BucketClaimName: "c2"}}},
			Status: cosiapi.BucketAccessStatus{AccessedBuckets: []cosiapi.AccessedBucket{
				{BucketName: "b1"}, {BucketName: "b2"}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns2", Name: "a"},
			Spec: cosiapi.BucketAccessSpec{BucketClaims: []cosiapi.BucketClaimAccess{{BucketClaimName: "ns"}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "a"},
			Spec: cosiapi.BucketAccessSpec{BucketClaims: []cosiapi.BucketClaimAccess{{BucketClaimName: "s-c1"}}}},
		{},
	}
	values := []string{"", "/", "ns", "ns/", "ns/c1", "ns/c2", "ns/c", "ns2/ns", "ns/ns", "n/s-c1", "ns/s-c1",
		"b1", "b2", "b", "ns/b1", "c1"}
	for _, f := range []index.Field{index.AccessesByClaim, index.AccessesByBucket} {
		if f.Has == nil {
			t.Errorf("%s: no Has", f.Name)
			continue
		}
		for _, ba := range accesses {
			for _, v := range values {
				if got, want := f.Has(ba, v), slices.Contains(f.Extract(ba), v); got != want {
					t.Errorf("%s: Has(%s/%s, %q) = %v, Extract says %v", f.Name, ba.Namespace, ba.Name, v, got, want)
				}
			}
		}
	}
}

// TestNamesAreUnique: two indexes of one kind with one name would fail to register.
func TestNamesAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range []index.Field{
		index.ClaimsByClass, index.ClaimsByExistingBucket, index.AccessesByClaim, index.AccessesByClass,
		index.AccessesByBucket, index.AccessesByUID,
	} {
		key := fmt.Sprintf("%T/%s", f.Object, f.Name)
		if seen[key] {
			t.Errorf("index %s of %T registered twice", f.Name, f.Object)
		}
		seen[key] = true
	}
}

// TestLookupsGoThroughFieldList: each value is indexed in one form (Register), so a cached lookup
// written as client.MatchingFields, with or without client.InNamespace, could silently find
// nothing; Field.List refuses the wrong form. No code outside this package writes one; the field
// selectors kubectl cosi sends to the API server are not index lookups.
func TestLookupsGoThroughFieldList(t *testing.T) {
	allowed := map[string]bool{"internal/kubectlcosi/report.go": true}
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || rel == "bin" || rel == filepath.Join("internal", "index")) {
			return filepath.SkipDir
		}
		if d.IsDir() || filepath.Ext(path) != ".go" || strings.HasSuffix(path, "_test.go") || allowed[rel] {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, sel := range []string{"MatchingFields{", "MatchingFieldsSelector{", "FieldSelector:"} {
			if bytes.Contains(src, []byte(sel)) {
				t.Errorf("%s: a cached lookup by a field selector (%s): use the index's Field.List", rel, sel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// listRecorder is a client.Reader that records the options of each List.
type listRecorder struct {
	client.Reader
	lists []client.ListOptions
}

func (r *listRecorder) List(_ context.Context, _ client.ObjectList, opts ...client.ListOption) error {
	var o client.ListOptions
	o.ApplyOptions(opts)
	r.lists = append(r.lists, o)
	return nil
}

// TestListRefusesTheOtherForm: a lookup made in the form its field does not keep would find
// nothing, or, with the namespace or a field given in the options (client.InNamespace, as the
// lookups were written before each value was kept in one form), would silently have them
// replaced: Field.List refuses each before the reader is asked.
func TestListRefusesTheOtherForm(t *testing.T) {
	here := index.Field{Object: &cosiapi.BucketAccess{}, Name: "here", InNamespace: true}
	for _, tc := range []struct {
		name      string
		field     index.Field
		namespace string
		opts      []client.ListOption
	}{
		{"a namespace for a cluster-wide field", index.AccessesByClass, "ns", nil},
		{"no namespace for a field in one namespace", here, "", nil},
		{"a namespace in the options", index.AccessesByClass, "", []client.ListOption{client.InNamespace("ns")}},
		{"another namespace in the options", here, "ns", []client.ListOption{client.InNamespace("other")}},
		{"a field in the options", index.AccessesByClass, "",
			[]client.ListOption{client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("a", "b")}}},
	} {
		r := &listRecorder{}
		err := tc.field.List(t.Context(), r, &cosiapi.BucketAccessList{}, tc.namespace, "v", tc.opts...)
		if err == nil || len(r.lists) != 0 {
			t.Errorf("%s: error %v, %d lists asked, want an error and none", tc.name, err, len(r.lists))
		}
	}

	r := &listRecorder{}
	labels := client.MatchingLabels{"team": "a"}
	if err := here.List(t.Context(), r, &cosiapi.BucketAccessList{}, "ns", "v", labels); err != nil {
		t.Fatal(err)
	}
	if err := index.AccessesByClass.List(t.Context(), r, &cosiapi.BucketAccessList{}, "", "v"); err != nil {
		t.Fatal(err)
	}
	if len(r.lists) != 2 || r.lists[0].Namespace != "ns" || r.lists[0].FieldSelector.String() != "here=v" ||
		r.lists[0].LabelSelector.String() != "team=a" || r.lists[1].Namespace != "" ||
		r.lists[1].FieldSelector.String() != index.AccessesByClass.Name+"=v" {
		t.Errorf("lists asked: %+v", r.lists)
	}
}
