package sidecar

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/cache/slim"
)

// randomRecord is a grant record with every field the cache reads set at random.
func randomRecord(r *rand.Rand, i int) grantRecord {
	uid := types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))
	g := grantRecord{
		Namespace: fmt.Sprintf("ns-%d", r.IntN(3)), Name: fmt.Sprintf("access-%d", i), UID: uid,
		AccountID: "ba-" + string(uid), Protocol: cosiapi.ProtocolS3, AuthenticationType: "Key",
		Parameters: map[string]string{"p": "v"}, SecretNames: []string{"creds"},
	}
	at := func() *metav1.Time { return ptr.To(metav1.NewTime(time.Unix(1_700_000_000+r.Int64N(1e6), 0))) }
	for b := range r.IntN(3) {
		name := fmt.Sprintf("bucket-%d-%d", i, b)
		g.BucketIDs = append(g.BucketIDs, "id-"+name)
		g.BucketNames = append(g.BucketNames, name)
		if r.IntN(3) > 0 {
			if g.BucketInfo == nil {
				g.BucketInfo = map[string]map[string]string{}
			}
			g.BucketInfo[name] = map[string]string{"COSI_S3_BUCKET_NAME": name, "COSI_S3_ENDPOINT_URL": "https://s3"}
		}
	}
	if r.IntN(2) == 0 {
		g.CredentialID, g.PeriodFrom = fmt.Sprintf("cred-%d", r.IntN(100)), at()
	}
	if r.IntN(3) == 0 {
		g.Expiry, g.ExpiryFrom = at(), at()
	}
	if r.IntN(3) == 0 {
		g.RotateToken, g.RefreshToken = "rotate-1", "refresh-1"
	}
	if r.IntN(4) == 0 {
		g.Rotation = &rotation{From: "cred-1", To: "cred-2"}
		if r.IntN(2) == 0 {
			g.Rotation.Written = at()
		}
	}
	return g
}

func recordConfigMap(t *testing.T, g grantRecord) *corev1.ConfigMap {
	t.Helper()
	value, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "cosi-system", Name: grantRecordName(g.UID)},
		Data:       map[string]string{grantDataKey: string(value)},
	}
}

// TestCachedGrantKeepsWhatTheCacheReads: what the sidecar's cache keeps of a record, after the
// cache's transform, is what the cache read of the whole record (a cache without the transform):
// every field the decisions made on the cache read, the same Buckets' information changed or not.
// The record itself is gone from the cached copy, and given to the transform again the copy stays.
func TestCachedGrantKeepsWhatTheCacheReads(t *testing.T) {
	transform := slim.Transform(compactGrantRecord)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		g := randomRecord(r, i)
		whole := recordConfigMap(t, g)
		out, err := transform(whole.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		cm := out.(*corev1.ConfigMap)
		if _, ok := cm.Data[grantDataKey]; ok || len(cm.Data) != 1 {
			t.Fatalf("record %d: the cached copy holds %v, want only %s", i, slices.Sorted(maps.Keys(cm.Data)), cachedGrantKey)
		}
		want, err := cachedGrantOf(whole)
		if err != nil {
			t.Fatal(err)
		}
		got, err := cachedGrantOf(cm)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("record %d: cached\n%+v\nwant\n%+v", i, got, want)
		}
		if got.UID != g.UID || got.Namespace != g.Namespace || got.Name != g.Name || got.AccountID != g.AccountID ||
			!reflect.DeepEqual(got.BucketNames, g.BucketNames) || !reflect.DeepEqual(got.rotationState, g.rotationState) {
			t.Fatalf("record %d: cached\n%+v\nfrom\n%+v", i, got, g)
		}
		again, err := transform(cm.DeepCopy())
		if err != nil || !reflect.DeepEqual(again, cm) {
			t.Fatalf("record %d: the transform changed its own copy: %+v, %v", i, again, err)
		}
		for _, name := range append(g.BucketNames, "another") {
			recorded := g.BucketInfo[name]
			changed := maps.Clone(recorded)
			if changed == nil {
				changed = map[string]string{}
			}
			changed["COSI_S3_ENDPOINT_URL"] = "https://elsewhere"
			for _, info := range []map[string]string{recorded, maps.Clone(recorded), nil, {}, changed} {
				if have, want := got.bucketInfoChanged(name, info), !maps.Equal(info, recorded); have != want {
					t.Fatalf("record %d, Bucket %s: info %v changed = %v, want %v", i, name, info, have, want)
				}
			}
		}
	}
}

// TestBucketInfoDigestSeparatesEntries: maps whose keys and values concatenate alike differ.
func TestBucketInfoDigestSeparatesEntries(t *testing.T) {
	infos := []map[string]string{
		nil, {"a": ""}, {"a": "b"}, {"ab": ""}, {"a": "bc"}, {"ab": "c"}, {"a": "b", "c": "d"}, {"a": "bc", "": "d"},
		{"a": "1:b"}, {"a:1": "b"}, {"1:a": "b"},
	}
	for i := range 2000 { // and enough others that a short digest would collide
		infos = append(infos, map[string]string{"COSI_S3_BUCKET_NAME": fmt.Sprint("bucket-", i)})
	}
	seen := map[string]int{}
	for i, m := range infos {
		d := bucketInfoDigest(m)
		if j, ok := seen[d]; ok {
			t.Errorf("%v and %v have one digest", infos[j], m)
		}
		seen[d] = i
	}
}

// TestCachedGrantOfNoRecord: a ConfigMap that holds no readable record of its access is no record
// in the cache, with the transform as without it.
func TestCachedGrantOfNoRecord(t *testing.T) {
	transform := slim.Transform(compactGrantRecord)
	other := randomRecord(rand.New(rand.NewPCG(3, 4)), 1)
	otherValue, err := json.Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	name := grantRecordName("00000000-0000-4000-8000-000000000002")
	for _, data := range []map[string]string{
		nil,
		{},
		{grantDataKey: "{"},
		{grantDataKey: string(otherValue)}, // another access's record under this access's name
		{"other": "x"},
	} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "cosi-system", Name: name}, Data: data}
		if _, err := cachedGrantOf(cm); err == nil {
			t.Errorf("data %v: a record without the transform", data)
		}
		out, err := transform(cm.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cachedGrantOf(out.(*corev1.ConfigMap)); err == nil {
			t.Errorf("data %v: a record after the transform: %v", data, out.(*corev1.ConfigMap).Data)
		}
	}
}

// TestBucketsOfTheCachedRecord: the removal of a grant record, which the cache shows as its own
// copy, wakes the record's Buckets (a deleting Bucket waits for its grants).
func TestBucketsOfTheCachedRecord(t *testing.T) {
	g := randomRecord(rand.New(rand.NewPCG(5, 6)), 7)
	g.BucketNames = []string{"bucket-a", "bucket-b"}
	out, err := slim.Transform(compactGrantRecord)(recordConfigMap(t, g))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, req := range bucketsOfRecord(t.Context(), out.(*corev1.ConfigMap)) {
		got = append(got, req.Name)
	}
	if !reflect.DeepEqual(got, g.BucketNames) {
		t.Errorf("Buckets woken: %v, want %v", got, g.BucketNames)
	}
}
