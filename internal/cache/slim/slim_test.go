package slim_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime/debug"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/cache/slim"
)

var (
	uuidRE = regexp.MustCompile(`([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4})[0-9a-f]{8}`)
	nameRE = regexp.MustCompile(`"(claim|access|creds)-[0-9]+"`)
	// the names inside the grant record's JSON
	quotedNameRE = regexp.MustCompile(`\\"(access|creds)-[0-9]+\\"`)
)

// objectSet decodes the objects of one claim and access as the bench's API server served them
// (testdata: a BucketClaim, its Bucket, a BucketAccess and the sidecar's grant record), with the
// UIDs and names of set i, each decoded into strings of its own as an informer decodes them.
func objectSet(t testing.TB, i int) []client.Object {
	t.Helper()
	set, err := decodeSet(i)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func decodeSet(i int) ([]client.Object, error) {
	set := []client.Object{&cosiapi.BucketClaim{}, &cosiapi.Bucket{}, &cosiapi.BucketAccess{}, &corev1.ConfigMap{}}
	for n, file := range []string{"claim", "bucket", "access", "grant"} {
		data, err := os.ReadFile(filepath.Join("testdata", file+".json"))
		if err != nil {
			return nil, err
		}
		data = uuidRE.ReplaceAll(data, fmt.Appendf(nil, "${1}%08x", i))
		data = nameRE.ReplaceAll(data, fmt.Appendf(nil, `"${1}-%d"`, i))
		data = quotedNameRE.ReplaceAll(data, fmt.Appendf(nil, `\"${1}-%d\"`, i))
		if err := json.Unmarshal(data, set[n]); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
	}
	return set, nil
}

func TestShareKeepsEveryValue(t *testing.T) {
	for _, obj := range objectSet(t, 1) {
		obj.SetLabels(map[string]string{"team": "a", "tier": "gold"})
		obj.SetAnnotations(map[string]string{"note": "x"})
		before := obj.DeepCopyObject()
		slim.Share(obj)
		if !reflect.DeepEqual(before, obj) {
			t.Errorf("%T changed:\n%+v\nwant\n%+v", obj, obj, before)
		}
	}
}

// same says whether two strings share their bytes.
func same(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

// TestShareSharesRepeatedStrings: two object sets decoded apart share the strings they repeat
// after Share, not before, and keep the strings that are each object's own.
func TestShareSharesRepeatedStrings(t *testing.T) {
	// Package unique forgets a copy at a collection once nothing holds its handle: none may run
	// between the two sets' Share.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	a, b := objectSet(t, 1), objectSet(t, 2)
	pairs := func() [][2]string {
		ca, cb := a[0].(*cosiapi.BucketClaim), b[0].(*cosiapi.BucketClaim)
		ba, bb := a[1].(*cosiapi.Bucket), b[1].(*cosiapi.Bucket)
		xa, xb := a[2].(*cosiapi.BucketAccess), b[2].(*cosiapi.BucketAccess)
		ga, gb := a[3].(*corev1.ConfigMap), b[3].(*corev1.ConfigMap)
		return [][2]string{
			{ca.Namespace, cb.Namespace},
			{ca.Finalizers[0], cb.Finalizers[0]},
			{ca.Spec.BucketClassName, cb.Spec.BucketClassName},
			{string(ca.Spec.Protocols[0]), string(cb.Spec.Protocols[0])},
			{ca.Status.Conditions[1].Message, cb.Status.Conditions[1].Message},
			{ca.Status.Conditions[2].Reason, cb.Status.Conditions[2].Reason},
			{string(ca.Status.Conditions[2].Status), string(cb.Status.Conditions[2].Status)},
			{ba.Spec.DriverName, bb.Spec.DriverName},
			{string(ba.Spec.DeletionPolicy), string(bb.Spec.DeletionPolicy)},
			{ba.Spec.BucketClaimRef.Namespace, bb.Spec.BucketClaimRef.Namespace},
			{ba.Status.BucketInfo["COSI_S3_ENDPOINT_URL"], bb.Status.BucketInfo["COSI_S3_ENDPOINT_URL"]},
			{xa.Spec.BucketAccessClassName, xb.Spec.BucketAccessClassName},
			{string(xa.Spec.BucketClaims[0].AccessModes.ObjectData), string(xb.Spec.BucketClaims[0].AccessModes.ObjectData)},
			{xa.Status.DriverName, xb.Status.DriverName},
			{string(xa.Status.AuthenticationType), string(xb.Status.AuthenticationType)},
			{xa.Status.Conditions[0].Type, xb.Status.Conditions[0].Type},
			{ga.Namespace, gb.Namespace},
			{ga.Labels[cosiapi.LabelGrantDriver], gb.Labels[cosiapi.LabelGrantDriver]},
		}
	}
	for i, p := range pairs() {
		if p[0] != p[1] {
			t.Fatalf("pair %d: %q and %q: the test data differ", i, p[0], p[1])
		}
		if same(p[0], p[1]) {
			t.Fatalf("pair %d (%q) shared before Share: the test cannot tell", i, p[0])
		}
	}
	for _, o := range append(a, b...) {
		slim.Share(o)
	}
	for i, p := range pairs() {
		if !same(p[0], p[1]) {
			t.Errorf("pair %d (%q) not shared", i, p[0])
		}
	}
	if a[1].GetName() == b[1].GetName() {
		t.Fatal("the two sets have one Bucket name")
	}
	// Maps both sets repeat whole are one map.
	for i, m := range [][2]map[string]string{
		{a[0].GetAnnotations(), b[0].GetAnnotations()},
		{a[3].GetLabels(), b[3].GetLabels()},
	} {
		if len(m[0]) == 0 || reflect.ValueOf(m[0]).UnsafePointer() != reflect.ValueOf(m[1]).UnsafePointer() {
			t.Errorf("map %d (%v) not shared", i, m[0])
		}
	}
	// Within an object, a value equal to the name is the name's copy.
	for _, set := range [][]client.Object{a, b} {
		bucket, access := set[1].(*cosiapi.Bucket), set[2].(*cosiapi.BucketAccess)
		if !same(bucket.Status.BucketID, bucket.Name) || !same(bucket.Status.BucketInfo["COSI_S3_BUCKET_NAME"], bucket.Name) {
			t.Errorf("Bucket %s: bucketID and bucketInfo not the name's copy", bucket.Name)
		}
		ab := access.Status.AccessedBuckets[0]
		if !same(ab.BucketID, ab.BucketName) {
			t.Errorf("access %s: bucketID not bucketName's copy", access.Name)
		}
	}
}

// TestShareKeepsMapsApart: maps that would have one id if NUL were a separator still keep their
// own values, and maps beyond what is held for sharing keep theirs.
func TestShareKeepsMapsApart(t *testing.T) {
	var objs []client.Object
	var want []map[string]string
	for i := range 3000 {
		ann := map[string]string{"a": fmt.Sprint(i)}
		switch i {
		case 1:
			ann = map[string]string{"a": "\x00b\x00c"}
		case 2:
			ann = map[string]string{"a": "", "b": "c"}
		}
		obj := objectSet(t, 1)[0]
		obj.SetAnnotations(ann)
		want = append(want, maps.Clone(ann))
		objs = append(objs, obj)
	}
	for i, obj := range objs {
		slim.Share(obj)
		if got := obj.GetAnnotations(); !maps.Equal(got, want[i]) {
			t.Fatalf("object %d: annotations %q, want %q", i, got, want[i])
		}
	}
	for i, obj := range objs {
		if got := obj.GetAnnotations(); !maps.Equal(got, want[i]) {
			t.Fatalf("object %d, after the others: annotations %q, want %q", i, got, want[i])
		}
	}
}

func TestTransformDropsManagedFields(t *testing.T) {
	obj := objectSet(t, 1)[0]
	obj.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubectl"}})
	out, err := slim.Transform()(obj)
	if err != nil {
		t.Fatal(err)
	}
	if mf := out.(client.Object).GetManagedFields(); mf != nil {
		t.Errorf("managed fields kept: %v", mf)
	}
}

// TestTransformTwice: client-go may transform an object twice (a watch-list's initial objects go
// through the reflector's temporary store and then through its queue's Replace): the second
// pass changes nothing.
func TestTransformTwice(t *testing.T) {
	transform := slim.Transform()
	for _, obj := range objectSet(t, 1) {
		obj.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubectl"}})
		obj.SetLabels(map[string]string{"team": "a"})
		once, err := transform(obj)
		if err != nil {
			t.Fatal(err)
		}
		want := once.(client.Object).DeepCopyObject()
		twice, err := transform(once)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(want, twice) {
			t.Errorf("%T changed by a second transform:\n%+v\nwant\n%+v", twice, twice, want)
		}
	}
}

// TestShareClipsConditions: a decoder leaves room for a fourth condition after three; Share gives
// the conditions no spare room.
func TestShareClipsConditions(t *testing.T) {
	set := objectSet(t, 1)
	conds := func() [][]metav1.Condition {
		return [][]metav1.Condition{
			set[0].(*cosiapi.BucketClaim).Status.Conditions,
			set[1].(*cosiapi.Bucket).Status.Conditions,
			set[2].(*cosiapi.BucketAccess).Status.Conditions,
		}
	}
	if c := conds()[0]; cap(c) == len(c) {
		t.Fatalf("decoded conditions have no spare room (%d): the test cannot tell", cap(c))
	}
	for _, o := range set {
		slim.Share(o)
	}
	for i, c := range conds() {
		if len(c) != 3 || cap(c) != len(c) {
			t.Errorf("object %d: %d conditions with room for %d", i, len(c), cap(c))
		}
	}
}

// TestShareConcurrently: caches transform objects concurrently (an informer each) while readers
// copy the objects already cached and write their copies, as reconciles do. Objects of different
// tenants with equal maps (and maps whose ids collide) keep their own values throughout; run with
// -race, a write to a shared map or a table read without the lock fails it.
func TestShareConcurrently(t *testing.T) {
	pool := []map[string]string{
		{"team": "a"}, {"team": "b"}, {"a": "\x00b\x00c"}, {"a": "", "b": "c"},
		{cosiapi.AnnotationHasBucketAccessReferences: "true"},
	}
	transform := slim.Transform()
	const workers, perWorker = 4, 3000
	done := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range perWorker {
				want := pool[(w+i)%len(pool)]
				if i%7 == 0 { // a map of its own, to make the table fill and clear
					want = map[string]string{"n": fmt.Sprint(w, "-", i)}
				}
				in := &cosiapi.BucketClaim{ObjectMeta: metav1.ObjectMeta{
					Name: fmt.Sprint("c", w, "-", i), Namespace: fmt.Sprint("tenant-", w),
					Labels: maps.Clone(want), Annotations: maps.Clone(want),
				}}
				out, err := transform(in)
				if err != nil {
					done <- err
					return
				}
				cached := out.(*cosiapi.BucketClaim)
				// A reconcile's copy, changed as a reconcile changes it.
				cp := cached.DeepCopy()
				cp.Annotations["written-by"] = cp.Namespace
				cp.Labels["written-by"] = cp.Namespace
				if !maps.Equal(cached.Annotations, want) || !maps.Equal(cached.Labels, want) {
					done <- fmt.Errorf("claim %s/%s: annotations %q, labels %q, want %q",
						cached.Namespace, cached.Name, cached.Annotations, cached.Labels, want)
					return
				}
			}
			done <- nil
		}()
	}
	for range workers {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
