package sidecar

import (
	"fmt"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// BenchmarkSecretChecksMemory: the heap that the schedule of 100,000 checked objects takes, per
// object (the sidecar keeps one for its accesses and one for its Buckets). The names' and UIDs'
// strings are not counted: the schedule shares them with the objects of the cache.
func BenchmarkSecretChecksMemory(b *testing.B) {
	const n = 100000
	keys, uids := make([]types.NamespacedName, n), make([]types.UID, n)
	for i := range n {
		keys[i] = types.NamespacedName{Namespace: fmt.Sprintf("ns-%d", i%100), Name: fmt.Sprintf("access-%d", i)}
		uids[i] = types.UID(fmt.Sprintf("0b7e3c9a-5d1f-4e2b-9c8d-%012d", i))
	}
	var perObject float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		c := &secretChecks{}
		for i := range n {
			c.doneAt(keys[i], uids[i], epoch)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perObject = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(c)
	}
	b.ReportMetric(perObject, "B/object")
}
