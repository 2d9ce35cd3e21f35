package index_test

import (
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/index"
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
