package index_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/cache/index"
)

// attackValues is the Extract of the attack tests' fields: a ConfigMap's data v0.
func attackValues(o client.Object) []string { return []string{o.(*corev1.ConfigMap).Data["v0"]} }

// TestHashedBeforeTheCacheStarts: a lookup from a cache that is not started yet is an error from
// a per-value index and from the cached List (cache.ErrCacheNotStarted), not an empty answer: the
// objects are there, the cache has not read them. A hashed lookup from the informer's indexer
// must not answer "none" either (holders would then let a claim in use be deleted).
func TestHashedBeforeTheCacheStarts(t *testing.T) {
	ctx := t.Context()
	hashed := index.Field{Object: &corev1.ConfigMap{}, Name: "data.attack.notstarted.hashed", HashBuckets: 2,
		Extract: attackValues}
	plain := index.Field{Object: &corev1.ConfigMap{}, Name: "data.attack.notstarted", Extract: attackValues}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "index-a", Name: "attack-notstarted"},
		Data: map[string]string{"v0": "a"}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cm) })

	c, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := index.Register(ctx, c, hashed, plain); err != nil {
		t.Fatal(err)
	}
	cached, err := client.New(env.Config, client.Options{Scheme: env.Scheme, Cache: &client.CacheOptions{Reader: c}})
	if err != nil {
		t.Fatal(err)
	}
	var notStarted *cache.ErrCacheNotStarted
	var list corev1.ConfigMapList
	if err := plain.List(ctx, c, &list, "", "a"); !errors.As(err, &notStarted) {
		t.Fatalf("per-value lookup before the cache started: %v (found %v), want ErrCacheNotStarted", err, names(t, &list))
	}
	for _, r := range []struct {
		name string
		r    client.Reader
	}{
		{"cached List", struct{ client.Reader }{c}},
		{"cache", c},
		{"client with informers", index.WithInformers(cached, c)},
	} {
		var list corev1.ConfigMapList
		err := hashed.List(ctx, r.r, &list, "", "a")
		if !errors.As(err, &notStarted) {
			t.Errorf("%s: hashed lookup before the cache started: err %v, found %v; want ErrCacheNotStarted",
				r.name, err, names(t, &list))
		}
	}
}

// TestHashedContinue: the cache refuses a list with a continue token (it cannot page), so a
// per-value lookup with one is an error; a hashed lookup must not silently answer instead.
func TestHashedContinue(t *testing.T) {
	ctx := t.Context()
	hashed := index.Field{Object: &corev1.ConfigMap{}, Name: "data.attack.continue.hashed", HashBuckets: 2,
		Extract: attackValues}
	plain := index.Field{Object: &corev1.ConfigMap{}, Name: "data.attack.continue", Extract: attackValues}
	c := startCache(t, hashed, plain)
	var list corev1.ConfigMapList
	if err := plain.List(ctx, c, &list, "", "a", client.Continue("x")); err == nil {
		t.Fatal("per-value lookup with a continue token: no error")
	}
	for _, r := range []struct {
		name string
		r    client.Reader
	}{{"cached List", struct{ client.Reader }{c}}, {"cache", c}} {
		if err := hashed.List(ctx, r.r, &list, "", "a", client.Continue("x")); err == nil {
			t.Errorf("%s: hashed lookup with a continue token: no error (a per-value lookup has one)", r.name)
		}
	}
}

// TestHashedConcurrentAliasing: lookups from the indexer run concurrently with changes of the
// objects and with writes to the objects they return (go test -race); a returned object written
// to does not change what the next lookup finds.
func TestHashedConcurrentAliasing(t *testing.T) {
	ctx := t.Context()
	hashed := index.Field{Object: &corev1.ConfigMap{}, Name: "data.attack.race.hashed", InNamespace: true,
		HashBuckets: 1, Extract: attackValues}
	c := startCache(t, hashed)
	var cms []*corev1.ConfigMap
	for i := range 4 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "index-b", Name: fmt.Sprintf("attack-race-%d", i),
			Labels: map[string]string{"test": "race"}}, Data: map[string]string{"v0": "a"}}
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cm) })
		cms = append(cms, cm)
	}
	testenv.Eventually(t, func() error {
		var list corev1.ConfigMapList
		if err := hashed.List(ctx, c, &list, "index-b", "a"); err != nil {
			return err
		}
		if len(list.Items) != 4 {
			return fmt.Errorf("found %v", names(t, &list))
		}
		return nil
	})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 8)
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				var list corev1.ConfigMapList
				if err := hashed.List(ctx, c, &list, "index-b", "a", client.MatchingLabels{"test": "race"}); err != nil {
					errs <- err
					return
				}
				for i := range list.Items {
					list.Items[i].Data["v0"] = "mutated"
					list.Items[i].Labels["test"] = "mutated"
				}
			}
		})
	}
	for round := range 10 {
		for _, cm := range cms {
			cm.Data["round"] = fmt.Sprint(round)
			if err := env.Client.Update(ctx, cm); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var list corev1.ConfigMapList
	if err := hashed.List(ctx, c, &list, "index-b", "a", client.MatchingLabels{"test": "race"}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 4 {
		t.Errorf("after writes to returned objects: found %v, want the 4 objects", names(t, &list))
	}
}

// TestHashedInACacheOfNamespacesOneFailing: in a cache of several namespaces whose informer of
// one namespace cannot list (here a field selector the API server refuses; in a cluster, RBAC
// missing in that namespace), a lookup in another namespace is answered by the cached List from
// that namespace's informer alone. A hashed lookup must answer it too, not wait on the informers
// of every namespace (GetInformer of a cache of namespaces waits for each to sync) until its
// context ends.
func TestHashedInACacheOfNamespacesOneFailing(t *testing.T) {
	ctx := t.Context()
	f := index.Field{Object: &corev1.ConfigMap{}, Name: "data.attack.failing.hashed", InNamespace: true,
		HashBuckets: 2, Extract: attackValues}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "index-a", Name: "attack-failing"},
		Data: map[string]string{"v0": "a"}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cm) })
	c, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme, ByObject: map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{
			"index-a": {},
			"index-b": {FieldSelector: fields.OneTermEqualSelector("data.unsupported", "x")},
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	if err := index.Register(cctx, c, f); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Start(cctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Log(err)
		}
	})
	cached, err := client.New(env.Config, client.Options{Scheme: env.Scheme, Cache: &client.CacheOptions{Reader: c}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"index-a/attack-failing"}
	// The cached List answers from index-a's informer once it has synced.
	testenv.Eventually(t, func() error {
		var list corev1.ConfigMapList
		if err := f.List(ctx, struct{ client.Reader }{c}, &list, "index-a", "a"); err != nil {
			return err
		}
		if got := names(t, &list); !slices.Equal(got, want) {
			return fmt.Errorf("cached List found %v, want %v", got, want)
		}
		return nil
	})
	lctx, lcancel := context.WithTimeout(ctx, 15*time.Second)
	defer lcancel()
	var list corev1.ConfigMapList
	err = f.List(lctx, index.WithInformers(cached, c), &list, "index-a", "a")
	if got := names(t, &list); err != nil || !slices.Equal(got, want) {
		t.Errorf("client with informers: lookup in index-a: %v, err %v; want %v (as the cached List)", got, err, want)
	}
}
