package slim_test

import (
	"context"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/cache/index"
	"github.com/kube-cosi/cosi/internal/cache/jsonwatch"
	"github.com/kube-cosi/cosi/internal/cache/slim"
	"github.com/kube-cosi/cosi/internal/controller"
	"github.com/kube-cosi/cosi/internal/sidecar"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Run(m, func(_ context.Context, e *testenv.Env) error {
		env = e
		return nil
	})
}

// memorySets is how many object sets BenchmarkCacheMemory caches.
const memorySets = 1000

var createSets = sync.OnceValue(func() error {
	ctx := context.Background()
	for _, ns := range []string{"scale", "cosi-system"} {
		if err := env.CreateNamespace(ctx, ns); err != nil {
			return err
		}
	}
	for i := range memorySets {
		set, err := decodeSet(i)
		if err != nil {
			return err
		}
		for _, obj := range set {
			status := statusOf(obj)
			obj.SetResourceVersion("")
			obj.SetUID("")
			if err := env.Client.Create(ctx, obj); err != nil {
				return err
			}
			if status != nil {
				status(obj)
				if err := env.Client.Status().Update(ctx, obj); err != nil {
					return err
				}
			}
		}
	}
	return nil
})

// statusOf returns what puts back the status of obj, which a create drops, or nil.
func statusOf(obj client.Object) func(client.Object) {
	switch o := obj.(type) {
	case *cosiapi.BucketClaim:
		s := o.Status
		return func(obj client.Object) { obj.(*cosiapi.BucketClaim).Status = s }
	case *cosiapi.Bucket:
		s := o.Status
		return func(obj client.Object) { obj.(*cosiapi.Bucket).Status = s }
	case *cosiapi.BucketAccess:
		s := o.Status
		return func(obj client.Object) { obj.(*cosiapi.BucketAccess).Status = s }
	}
	return nil
}

// BenchmarkCacheMemory measures the Go heap a controller-runtime cache of a real API server takes
// per object set (a claim, its Bucket, an access and its grant record, as the bench provisions
// them) with every index of the controller and the sidecar: as controller-runtime indexes and
// keeps objects by default (IndexField, managed fields dropped), and as COSI's caches do
// (index.Register, slim.Transform). One cache holds the objects of both processes; each
// process holds its share.
//
//	go test -run '^$' -bench CacheMemory -benchtime 3x ./internal/cache/slim
func BenchmarkCacheMemory(b *testing.B) {
	if err := createSets(); err != nil {
		b.Fatal(err)
	}
	fields := []index.Field{index.ClaimsByClass, index.ClaimsByExistingBucket, index.AccessesByClaim,
		index.AccessesByClass, index.AccessesByBucket, index.AccessesByUID, sidecar.GrantsByBucket}
	strip := func() cache.Options { return cache.Options{DefaultTransform: cache.TransformStripManagedFields()} }
	share := func() cache.Options { return cache.Options{DefaultTransform: slim.Transform()} }
	// The grant records of testdata/grant.json.
	sidecarOptions := func() cache.Options { return sidecar.CacheOptions("cosi-system", "bench.memory.cosi.io") }
	twoForms := func(ctx context.Context, c cache.Cache) error {
		for _, f := range fields {
			if err := c.IndexField(ctx, f.Object, f.Name, f.Extract); err != nil {
				return err
			}
		}
		return nil
	}
	oneForm := func(ctx context.Context, c cache.Cache) error { return index.Register(ctx, c, fields...) }
	all := []client.ObjectList{&cosiapi.BucketClaimList{}, &cosiapi.BucketList{}, &cosiapi.BucketAccessList{},
		&corev1.ConfigMapList{}}
	// Each process's own cache: its kinds, the indexes it registers at its start (controller.setup,
	// sidecar.setup; the sidecar's UID index is lazy, index.Lazy) and its transform. "cosi" is
	// one cache with every index, as measured before the per-process figures.
	controllerCache := func(ctx context.Context, c cache.Cache) error {
		return index.Register(ctx, c, index.ClaimsByClass, index.ClaimsByExistingBucket, index.AccessesByClaim,
			index.AccessesByClass, index.AccessesByBucket)
	}
	sidecarCache := func(ctx context.Context, c cache.Cache) error {
		return index.Register(ctx, c, sidecar.GrantsByBucket, index.AccessesByBucket)
	}
	noIndex := func(context.Context, cache.Cache) error { return nil }
	accessIndex := func(ctx context.Context, c cache.Cache) error {
		return index.Register(ctx, c, index.AccessesByBucket)
	}
	grantIndex := func(ctx context.Context, c cache.Cache) error {
		return index.Register(ctx, c, sidecar.GrantsByBucket)
	}
	for _, tc := range []struct {
		name      string
		transform func() cache.Options
		register  func(ctx context.Context, c cache.Cache) error
		lists     []client.ObjectList
	}{
		{"controller-runtime", strip, twoForms, all},
		{"one-form-indexes", strip, oneForm, all},
		{"shared-strings", share, twoForms, all},
		{"cosi", share, oneForm, all},
		{"controller", controller.CacheOptions, controllerCache, all[:3]},
		{"sidecar", sidecarOptions, sidecarCache, all[1:]},
		// The sidecar's kinds one at a time, with the indexes on that kind; its grant records also
		// whole, as the cache held them before it kept only what it reads of them.
		{"sidecar-buckets", share, noIndex, all[1:2]},
		{"sidecar-accesses", share, accessIndex, all[2:3]},
		{"sidecar-grants", sidecarOptions, grantIndex, all[3:]},
		{"sidecar-grants-whole", share, grantIndex, all[3:]},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var total float64
			for b.Loop() {
				total += cachedBytes(b, tc.transform(), tc.register, tc.lists)
			}
			b.ReportMetric(total/float64(b.N)/memorySets, "B/set")
		})
	}
}

// BenchmarkCacheSyncCPU measures the CPU this process spends (user and system, getrusage) per
// object set for a cache of the controller's kinds to hold every object set, as after a restart:
// with controller-runtime's informers (client-go's decoding) and with jsonwatch's. The API server's
// CPU, another process, is not counted.
//
//	go test -run '^$' -bench CacheSyncCPU -benchtime 5x ./internal/cache/slim
func BenchmarkCacheSyncCPU(b *testing.B) {
	if err := createSets(); err != nil {
		b.Fatal(err)
	}
	lists := []client.ObjectList{&cosiapi.BucketClaimList{}, &cosiapi.BucketList{}, &cosiapi.BucketAccessList{}}
	register := func(context.Context, cache.Cache) error { return nil }
	for _, tc := range []struct {
		name      string
		jsonwatch bool
	}{{"client-go", false}, {"jsonwatch", true}} {
		b.Run(tc.name, func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				opts := controller.CacheOptions()
				if tc.jsonwatch {
					if err := jsonwatch.Use(env.Config, &opts); err != nil {
						b.Fatal(err)
					}
				}
				before := processCPU(b)
				cachedBytes(b, opts, register, lists)
				cpu += processCPU(b) - before
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N)/memorySets, "CPU-µs/set")
		})
	}
}

// processCPU is the CPU time this process used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cachedBytes starts a cache of the lists' kinds, waits until it holds every object, and returns
// the Go heap it added, measured after collections.
func cachedBytes(
	b *testing.B, opts cache.Options, register func(ctx context.Context, c cache.Cache) error,
	lists []client.ObjectList,
) float64 {
	b.Helper()
	opts.Scheme = env.Scheme
	before := heapInUse()
	c, err := cache.New(env.Config, opts)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := register(ctx, c); err != nil {
		b.Fatal(err)
	}
	for _, l := range lists {
		if _, err := c.GetInformer(ctx, exampleOf(l)); err != nil {
			b.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		b.Fatal("cache did not sync")
	}
	for _, l := range lists {
		l := l.DeepCopyObject().(client.ObjectList) // the lists given stay empty
		if err := c.List(ctx, l); err != nil {
			b.Fatal(err)
		}
		if n := meta.LenList(l); n < memorySets {
			b.Fatalf("%T: %d items, want %d", l, n, memorySets)
		}
	}
	after := heapInUse() // the lists' copies are garbage by now

	runtime.KeepAlive(c)
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return after - before
}

func exampleOf(l client.ObjectList) client.Object {
	switch l.(type) {
	case *cosiapi.BucketClaimList:
		return &cosiapi.BucketClaim{}
	case *cosiapi.BucketList:
		return &cosiapi.Bucket{}
	case *cosiapi.BucketAccessList:
		return &cosiapi.BucketAccess{}
	}
	return &corev1.ConfigMap{}
}

// heapInUse returns the bytes of live heap after two collections.
func heapInUse() float64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc)
}
