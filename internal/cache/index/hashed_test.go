package index_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/cache/index"
)

// TestHashedAsPerValue: a field kept under the hashes of its values (HashBuckets 2, so that values
// share hashes, and two values of one object often do) finds what the same field kept one set per
// value finds, object for object, in either form, with the label selector passed through, under
// random creations, changes of values (several per object, repeated, empty) and deletions: for
// every value looked up, the empty one included, and with a limit on the number of objects.
func TestHashedAsPerValue(t *testing.T) {
	ctx := t.Context()
	values := func(o client.Object) []string {
		d := o.(*corev1.ConfigMap).Data
		return []string{d["v0"], d["v1"], d["v2"]}
	}
	hashed := index.Field{Object: &corev1.ConfigMap{}, Name: "data.equiv.hashed", Extract: values, HashBuckets: 2}
	hashedHere := index.Field{Object: &corev1.ConfigMap{}, Name: "data.equiv.hashed.here", InNamespace: true,
		Extract: values, HashBuckets: 2}
	plain := index.Field{Object: &corev1.ConfigMap{}, Name: "data.equiv", Extract: values}
	plainHere := index.Field{Object: &corev1.ConfigMap{}, Name: "data.equiv.here", InNamespace: true,
		Extract: values}
	c := startCache(t, hashed, hashedHere, plain, plainHere)
	label := client.MatchingLabels{"test": "equiv"}
	pool := []string{"a", "b", "c", "d", "e", ""}
	rng := rand.New(rand.NewPCG(1, 2))
	model := map[string][]string{} // namespace/name: values

	// want is what a per-value index finds: the objects with the value, none for an empty value
	// (not indexed).
	want := func(namespace, value string) []string {
		var out []string
		for key, vs := range model {
			if value != "" && slices.Contains(vs, value) && (namespace == "" || strings.HasPrefix(key, namespace+"/")) {
				out = append(out, key)
			}
		}
		slices.Sort(out)
		return out
	}
	// Each hashed lookup is made three ways: from the informer's indexer (the cache itself, as
	// WithInformers gives it to a manager's client) and through the cached List (a reader that is
	// only a reader), which a cache of several namespaces falls back to.
	cached, err := client.New(env.Config, client.Options{Scheme: env.Scheme, Cache: &client.CacheOptions{Reader: c}})
	if err != nil {
		t.Fatal(err)
	}
	readers := []struct {
		name string
		r    client.Reader
	}{
		{"cache", c},
		{"client with informers", index.WithInformers(cached, c)},
		{"cached List", struct{ client.Reader }{c}},
	}
	var reader client.Reader
	var checkWith func() error
	lookup := func(f index.Field, namespace, value string, opts ...client.ListOption) (*corev1.ConfigMapList, error) {
		var list corev1.ConfigMapList
		err := f.List(ctx, reader, &list, namespace, value, append([]client.ListOption{label}, opts...)...)
		slices.SortFunc(list.Items, func(a, b corev1.ConfigMap) int {
			return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
		})
		return &list, err
	}
	check := func() error {
		for _, rd := range readers {
			reader = rd.r
			if err := checkWith(); err != nil {
				return fmt.Errorf("%s: %w", rd.name, err)
			}
		}
		return nil
	}
	checkWith = func() error {
		for _, v := range pool {
			for _, form := range []struct {
				hashed, plain index.Field
				ns            string
			}{{hashed, plain, ""}, {hashedHere, plainHere, "index-a"}, {hashedHere, plainHere, "index-b"}} {
				h, err := lookup(form.hashed, form.ns, v)
				if err != nil {
					return err
				}
				p, err := lookup(form.plain, form.ns, v)
				if err != nil {
					return err
				}
				if got, w := names(t, h), want(form.ns, v); !slices.Equal(got, w) {
					return fmt.Errorf("hashed %q in %q: %v, want %v", v, form.ns, got, w)
				}
				if got, w := names(t, p), want(form.ns, v); !slices.Equal(got, w) {
					return fmt.Errorf("per-value %q in %q: %v, want %v", v, form.ns, got, w)
				}
				// The same objects, field for field (the cache's copies carry their kind; the
				// hashed lookup's copies are made from the cache's objects, which do not).
				for i := range h.Items {
					h.Items[i].TypeMeta, p.Items[i].TypeMeta = metav1.TypeMeta{}, metav1.TypeMeta{}
				}
				if !reflect.DeepEqual(h.Items, p.Items) {
					return fmt.Errorf("%q in %q: hashed and per-value objects differ", v, form.ns)
				}
				// With a limit: as many as a per-value lookup finds.
				h, err = lookup(form.hashed, form.ns, v, client.Limit(1))
				if err != nil {
					return err
				}
				p, err = lookup(form.plain, form.ns, v, client.Limit(1))
				if err != nil {
					return err
				}
				if len(h.Items) != len(p.Items) {
					return fmt.Errorf("%q in %q limited to 1: hashed %v, per-value %v", v, form.ns, names(t, h), names(t, p))
				}
			}
		}
		return nil
	}

	// Objects without the label, with every value: a lookup that lost the label selector finds them.
	for _, ns := range []string{"index-a", "index-b"} {
		decoy := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "equiv-unlabelled"},
			Data: map[string]string{"v0": "a", "v1": "b", "v2": "c"}}
		if err := env.Client.Create(ctx, decoy); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), decoy) })
	}

	random := func() map[string]string {
		d := map[string]string{}
		for _, k := range []string{"v0", "v1", "v2"} {
			if rng.IntN(4) > 0 {
				d[k] = pool[rng.IntN(len(pool))]
			}
		}
		return d
	}
	for round := range 6 {
		for range 8 {
			ns := []string{"index-a", "index-b"}[rng.IntN(2)]
			name := fmt.Sprintf("equiv-%d", rng.IntN(5))
			key := ns + "/" + name
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
				Labels: map[string]string{"test": "equiv"}}, Data: random()}
			var err error
			switch _, exists := model[key]; {
			case !exists:
				err = env.Client.Create(ctx, cm)
				t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cm) })
				model[key] = values(cm)
			case rng.IntN(3) == 0:
				err = env.Client.Delete(ctx, cm)
				delete(model, key)
			default:
				err = env.Client.Update(ctx, cm)
				model[key] = values(cm)
			}
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		testenv.Eventually(t, check)
	}
}

// TestHashedNotFromTheAPIServer: a lookup through a reader that is not a cache (an uncached
// client, an APIReader) sends the hash as a field selector to the API server, which refuses it;
// one into a list the cache holds in another form (unstructured, metadata only) goes to an
// informer without the index: an error, not a wrong answer.
func TestHashedNotFromTheAPIServer(t *testing.T) {
	f := index.Field{Object: &corev1.ConfigMap{}, Name: "data.other.hashed", HashBuckets: 2,
		Extract: func(o client.Object) []string { return []string{o.(*corev1.ConfigMap).Data["v0"]} }}
	var list corev1.ConfigMapList
	if err := f.List(t.Context(), env.Client, &list, "", "a"); err == nil {
		t.Errorf("a hashed lookup from the API server found %v, want an error", names(t, &list))
	}
	c := startCache(t, f)
	u := &unstructured.UnstructuredList{}
	u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	m := &metav1.PartialObjectMetadataList{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	for _, l := range []client.ObjectList{u, m} {
		if err := f.List(t.Context(), c, l, "", "a"); err == nil {
			t.Errorf("a hashed lookup into a %T found %v, want an error", l, names(t, l))
		}
	}
}

// TestHashedInACacheOfNamespaces: a cache of some namespaces only (the sidecar's of ConfigMaps:
// the grant namespace) has no one informer whose indexer a lookup could read: it is made through
// the cached List, and finds the same objects.
func TestHashedInACacheOfNamespaces(t *testing.T) {
	ctx := t.Context()
	f := index.Field{Object: &corev1.ConfigMap{}, Name: "data.namespaces.hashed", InNamespace: true, HashBuckets: 2,
		Extract: func(o client.Object) []string { return []string{o.(*corev1.ConfigMap).Data["v0"]} }}
	for i, v := range []string{"a", "b", "a"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "index-a", Name: fmt.Sprintf("namespaces-%d", i)},
			Data: map[string]string{"v0": v}}
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cm) })
	}
	c := startCacheWith(t, cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{"index-a": {}}},
	}}, f)
	inf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := inf.(interface{ GetIndexer() toolscache.Indexer }); ok {
		t.Fatal("a cache of namespaces has one indexer: this test no longer covers the cached List")
	}
	cached, err := client.New(env.Config, client.Options{Scheme: env.Scheme, Cache: &client.CacheOptions{Reader: c}})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		var list corev1.ConfigMapList
		if err := f.List(ctx, index.WithInformers(cached, c), &list, "index-a", "a"); err != nil {
			return err
		}
		if got, want := names(t, &list), []string{"index-a/namespaces-0", "index-a/namespaces-2"}; !slices.Equal(got, want) {
			return fmt.Errorf("found %v, want %v", got, want)
		}
		return nil
	})
}

// BenchmarkHashedLookup: a hashed lookup that goes through 8 objects of its hash (as at 30,000
// accesses under 4,096 hashes), from the informer's indexer and through the cached List, which
// copies each object of the hash into a new list.
//
//	go test -run '^$' -bench HashedLookup$ ./internal/cache/index
func BenchmarkHashedLookup(b *testing.B) {
	const objects, buckets = 256, 32
	f := index.Field{Object: &corev1.ConfigMap{}, Name: "data.bench.hashed", InNamespace: true, HashBuckets: buckets,
		Extract: func(o client.Object) []string { return []string{o.(*corev1.ConfigMap).Data["v0"]} }}
	ctx := b.Context()
	for i := range objects {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "index-b", Name: fmt.Sprintf("bench-%d", i)},
			Data: map[string]string{"v0": fmt.Sprintf("value-%d", i)}}
		if err := env.Client.Create(ctx, cm); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = env.Client.Delete(context.Background(), cm) })
	}
	c := startCache(b, f)
	for _, r := range []struct {
		name string
		r    client.Reader
	}{{"indexer", c}, {"cached-list", struct{ client.Reader }{c}}} {
		b.Run(r.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				var list corev1.ConfigMapList
				if err := f.List(ctx, r.r, &list, "index-b", fmt.Sprintf("value-%d", i%objects)); err != nil {
					b.Fatal(err)
				}
				if len(list.Items) != 1 {
					b.Fatalf("found %d objects, want 1", len(list.Items))
				}
				i++
			}
		})
	}
}
