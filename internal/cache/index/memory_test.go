package index

import (
	"fmt"
	"runtime"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// BenchmarkIndexMemory: the heap that AccessesByBucket takes in client-go's indexer (an informer's
// store) per access at 100,000 accesses of one Bucket each, each value in a set of its own
// ("per-value") and under its hash (OwnValueBuckets, "hashed"): the heap of a store with the
// index, less that of one without it.
//
//	go test -run '^$' -bench IndexMemory -benchtime 3x ./internal/cache/index
func BenchmarkIndexMemory(b *testing.B) {
	const n = 100000
	accesses := make([]*cosiapi.BucketAccess, n)
	for i := range accesses {
		accesses[i] = &cosiapi.BucketAccess{
			ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("tenant-%d", i%100), Name: fmt.Sprintf("access-%d", i)},
			Status: cosiapi.BucketAccessStatus{AccessedBuckets: []cosiapi.AccessedBucket{
				{BucketName: fmt.Sprintf("bc-0b7e3c9a-5d1f-4e2b-9c8d-%012d", i)},
			}},
		}
	}
	perValue := AccessesByBucket
	perValue.HashBuckets = 0
	heap := func(indexers toolscache.Indexers) float64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		store := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, indexers)
		for _, a := range accesses {
			if err := store.Add(a); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(store)
		return float64(after.HeapAlloc) - float64(before.HeapAlloc)
	}
	for _, tc := range []struct {
		name  string
		field Field
	}{{"per-value", perValue}, {"hashed", AccessesByBucket}} {
		b.Run(tc.name, func(b *testing.B) {
			var perAccess float64
			for b.Loop() {
				with := heap(toolscache.Indexers{fieldIndexName(tc.field.Name): tc.field.indexFunc})
				without := heap(toolscache.Indexers{})
				perAccess = (with - without) / n
			}
			b.ReportMetric(perAccess, "B/access")
		})
	}
}

// BenchmarkHashedLookupFilter: what a hashed lookup of a claim costs per object of the hash it
// goes through, for an access naming 64 claims (the most a tenant's access may name): its values
// built by Extract, or asked of Has.
//
//	go test -run '^$' -bench HashedLookupFilter ./internal/cache/index
func BenchmarkHashedLookupFilter(b *testing.B) {
	ba := &cosiapi.BucketAccess{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-hostile", Name: "many"}}
	for i := range 64 {
		ba.Spec.BucketClaims = append(ba.Spec.BucketClaims,
			cosiapi.BucketClaimAccess{BucketClaimName: fmt.Sprintf("made-up-claim-%d", i)})
	}
	value := ClaimKey("tenant-victim", "claim")
	extract := AccessesByClaim
	extract.Has = nil
	for _, tc := range []struct {
		name  string
		field Field
	}{{"extract", extract}, {"has", AccessesByClaim}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if tc.field.has(ba, value) {
					b.Fatal("found")
				}
			}
		})
	}
}
