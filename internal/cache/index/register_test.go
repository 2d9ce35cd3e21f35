package index_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/cache/index"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Run(m, func(ctx context.Context, e *testenv.Env) error {
		env = e
		for _, ns := range []string{"index-a", "index-b"} {
			if err := env.CreateNamespace(ctx, ns); err != nil {
				return err
			}
		}
		return nil
	})
}

// startCache starts a cache of the API server with the indexes registered, and waits for it.
func startCache(t testing.TB, fields ...index.Field) cache.Cache {
	t.Helper()
	return startCacheWith(t, cache.Options{}, fields...)
}

// startCacheWith is startCache with opts (their Scheme set).
func startCacheWith(t testing.TB, opts cache.Options, fields ...index.Field) cache.Cache {
	t.Helper()
	opts.Scheme = env.Scheme
	c, err := cache.New(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	if err := index.Register(ctx, c, fields...); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	return c
}

// indexKeys returns the keys an index of an informer holds.
func indexKeys(t *testing.T, c cache.Cache, obj client.Object, name string) []string {
	t.Helper()
	inf, err := c.GetInformer(t.Context(), obj)
	if err != nil {
		t.Fatal(err)
	}
	keys := inf.(toolscache.SharedIndexInformer).GetIndexer().ListIndexFuncValues("field:" + name)
	slices.Sort(keys)
	return keys
}

// names returns the namespace/name of each item of a list.
func names(t *testing.T, list client.ObjectList) []string {
	t.Helper()
	items, err := apimeta.ExtractList(list)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range items {
		o := o.(client.Object)
		out = append(out, o.GetNamespace()+"/"+o.GetName())
	}
	slices.Sort(out)
	return out
}

// TestRegisterOneFormPerValue: the cluster-wide lookups COSI makes find the objects of every
// namespace, and each value is kept once, in the form those lookups use (controller-runtime's
// IndexField keeps every value of a namespaced object twice), and an empty value not at all.
func TestRegisterOneFormPerValue(t *testing.T) {
	ctx := t.Context()
	for _, ns := range []string{"index-a", "index-b"} {
		dynamic := objects.BucketClaim(ns, "dynamic", "bc", objects.S3)
		static := objects.BucketClaim(ns, "static", "", objects.S3)
		static.Spec.ExistingBucketName = "existing-" + ns
		access := objects.BucketAccess(ns, "access", "ac", objects.Grant("dynamic", "creds", objects.ReadWrite))
		for _, o := range []client.Object{dynamic, static, access} {
			if err := env.Client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
		}
	}
	c := startCache(t, index.ClaimsByClass, index.ClaimsByExistingBucket, index.AccessesByClaim,
		index.AccessesByClass)

	for _, tc := range []struct {
		list  client.ObjectList
		field index.Field
		value string
		want  []string
	}{
		{&cosiapi.BucketClaimList{}, index.ClaimsByClass, "bc", []string{"index-a/dynamic", "index-b/dynamic"}},
		{&cosiapi.BucketClaimList{}, index.ClaimsByExistingBucket, "existing-index-b", []string{"index-b/static"}},
		{&cosiapi.BucketAccessList{}, index.AccessesByClaim, index.ClaimKey("index-a", "dynamic"),
			[]string{"index-a/access"}},
		{&cosiapi.BucketAccessList{}, index.AccessesByClass, "ac", []string{"index-a/access", "index-b/access"}},
	} {
		testenv.Eventually(t, func() error {
			if err := tc.field.List(ctx, c, tc.list, "", tc.value); err != nil {
				return err
			}
			if got := names(t, tc.list); !slices.Equal(got, tc.want) {
				return fmt.Errorf("%s=%s: %v, want %v", tc.field.Name, tc.value, got, tc.want)
			}
			return nil
		})
	}

	for _, tc := range []struct {
		obj   client.Object
		field index.Field
		want  []string
	}{
		{&cosiapi.BucketClaim{}, index.ClaimsByClass, []string{"__all_namespaces/bc"}},
		{&cosiapi.BucketClaim{}, index.ClaimsByExistingBucket,
			[]string{"__all_namespaces/existing-index-a", "__all_namespaces/existing-index-b"}},
		// Under their hashes: the values are each claim's own (index.Field.HashBuckets).
		{&cosiapi.BucketAccess{}, index.AccessesByClaim, hashKeys("__all_namespaces/", index.AccessesByClaim,
			index.ClaimKey("index-a", "dynamic"), index.ClaimKey("index-b", "dynamic"))},
		{&cosiapi.BucketAccess{}, index.AccessesByClass, []string{"__all_namespaces/ac"}},
	} {
		if got := indexKeys(t, c, tc.obj, tc.field.Name); !slices.Equal(got, tc.want) {
			t.Errorf("index %s holds %v, want %v", tc.field.Name, got, tc.want)
		}
	}
}

// TestRegisterInNamespace: a field whose lookups name a namespace keeps each value under the
// object's namespace only, and a lookup finds that namespace's objects only.
func TestRegisterInNamespace(t *testing.T) {
	ctx := t.Context()
	byColour := index.Field{Object: &corev1.ConfigMap{}, Name: "data.colour", InNamespace: true,
		Extract: func(o client.Object) []string { return []string{o.(*corev1.ConfigMap).Data["colour"]} }}
	for _, ns := range []string{"index-a", "index-b"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "colour"},
			Data: map[string]string{"colour": "blue"}}
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cm) })
	}
	c := startCache(t, byColour)
	testenv.Eventually(t, func() error {
		var list corev1.ConfigMapList
		err := c.List(ctx, &list, client.InNamespace("index-b"), client.MatchingFields{byColour.Name: "blue"})
		if err != nil {
			return err
		}
		if got, want := names(t, &list), []string{"index-b/colour"}; !slices.Equal(got, want) {
			return fmt.Errorf("%v, want %v", got, want)
		}
		return nil
	})
	got, want := indexKeys(t, c, &corev1.ConfigMap{}, byColour.Name), []string{"index-a/blue", "index-b/blue"}
	if !slices.Equal(got, want) {
		t.Errorf("index holds %v, want %v", got, want)
	}
}

// TestRegisterFollowsChanges: a value that changes moves the object to the new value's key, in
// either form, and a deleted object leaves no key behind (client-go removes the keys the old
// object had: nothing in Register may compute them differently).
func TestRegisterFollowsChanges(t *testing.T) {
	ctx := t.Context()
	shade := func(o client.Object) []string { return []string{o.(*corev1.ConfigMap).Data["shade"]} }
	byShade := index.Field{Object: &corev1.ConfigMap{}, Name: "data.shade", Extract: shade}
	byShadeHere := index.Field{Object: &corev1.ConfigMap{}, Name: "data.shade.here", InNamespace: true,
		Extract: shade}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "index-a", Name: "shade"},
		Data: map[string]string{"shade": "red"}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cm) })
	c := startCache(t, byShade, byShadeHere)

	// lookups returns what each form finds for each shade.
	lookups := func() (map[string][]string, error) {
		out := map[string][]string{}
		for _, v := range []string{"red", "green"} {
			for _, l := range []struct {
				f  index.Field
				ns string
			}{{byShade, ""}, {byShadeHere, "index-a"}} {
				var list corev1.ConfigMapList
				if err := l.f.List(ctx, c, &list, l.ns, v); err != nil {
					return nil, err
				}
				out[l.f.Name+"="+v] = names(t, &list)
			}
		}
		return out, nil
	}
	expect := func(red, green []string) {
		t.Helper()
		want := map[string][]string{"data.shade=red": red, "data.shade.here=red": red,
			"data.shade=green": green, "data.shade.here=green": green}
		testenv.Eventually(t, func() error {
			got, err := lookups()
			if err != nil {
				return err
			}
			for k, w := range want {
				if !slices.Equal(got[k], w) {
					return fmt.Errorf("%s: %v, want %v", k, got[k], w)
				}
			}
			return nil
		})
	}
	keys := func(wantAll, wantHere []string) {
		t.Helper()
		if got := indexKeys(t, c, &corev1.ConfigMap{}, byShade.Name); !slices.Equal(got, wantAll) {
			t.Errorf("index %s holds %v, want %v", byShade.Name, got, wantAll)
		}
		if got := indexKeys(t, c, &corev1.ConfigMap{}, byShadeHere.Name); !slices.Equal(got, wantHere) {
			t.Errorf("index %s holds %v, want %v", byShadeHere.Name, got, wantHere)
		}
	}
	expect([]string{"index-a/shade"}, nil)
	keys([]string{"__all_namespaces/red"}, []string{"index-a/red"})

	cm.Data["shade"] = "green"
	if err := env.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	expect(nil, []string{"index-a/shade"})
	keys([]string{"__all_namespaces/green"}, []string{"index-a/green"})

	cm.Data["shade"] = ""
	if err := env.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	expect(nil, nil)
	keys(nil, nil)

	cm.Data["shade"] = "red"
	if err := env.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	expect([]string{"index-a/shade"}, nil)
	if err := env.Client.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	expect(nil, nil)
	keys(nil, nil)
}

// TestLazyRegistersAtFirstLookup: a lazy index holds nothing until its first lookup, which finds
// the objects the cache held before it; later objects are indexed as they come.
func TestLazyRegistersAtFirstLookup(t *testing.T) {
	ctx := t.Context()
	before := objects.BucketAccess("index-a", "lazy-before", "ac", objects.Grant("c", "creds", objects.ReadWrite))
	if err := env.Client.Create(ctx, before); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), before) })
	c := startCache(t, index.AccessesByClass)
	testenv.Eventually(t, func() error {
		var list cosiapi.BucketAccessList
		if err := index.AccessesByClass.List(ctx, c, &list, "", "ac"); err != nil {
			return err
		}
		if !slices.Contains(names(t, &list), "index-a/lazy-before") {
			return fmt.Errorf("the cache does not hold the access yet")
		}
		return nil
	})
	if got := indexKeys(t, c, &cosiapi.BucketAccess{}, index.AccessesByUID.Name); len(got) != 0 {
		t.Fatalf("the lazy index holds %v before its first lookup", got)
	}
	lazy := index.NewLazy(c, index.AccessesByUID)
	var list cosiapi.BucketAccessList
	if err := lazy.List(ctx, c, &list, "", string(before.UID)); err != nil {
		t.Fatal(err)
	}
	if got := names(t, &list); !slices.Equal(got, []string{"index-a/lazy-before"}) {
		t.Errorf("first lookup: %v", got)
	}
	after := objects.BucketAccess("index-b", "lazy-after", "ac", objects.Grant("c", "creds", objects.ReadWrite))
	if err := env.Client.Create(ctx, after); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), after) })
	testenv.Eventually(t, func() error {
		var list cosiapi.BucketAccessList
		if err := lazy.List(ctx, c, &list, "", string(after.UID)); err != nil {
			return err
		}
		if got := names(t, &list); !slices.Equal(got, []string{"index-b/lazy-after"}) {
			return fmt.Errorf("later lookup: %v", got)
		}
		return nil
	})
	if err := lazy.List(ctx, c, &list, "index-a", string(before.UID)); err == nil {
		t.Error("a lazy index looked up in the other form")
	}
}

// hashKeys are the index keys of values under the field's hash, with the prefix (a namespace).
func hashKeys(prefix string, f index.Field, values ...string) []string {
	var keys []string
	for _, v := range values {
		if k := prefix + index.Hashed(f, v); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// TestHashedFindsItsOwnValues: a field whose values are kept under their hashes, here all under
// one (HashBuckets 1), finds the objects whose value it is and no other, in either form, as their
// values change; its index holds one key per hash, not per value; and what a lookup returns are
// copies, not the cache's objects.
func TestHashedFindsItsOwnValues(t *testing.T) {
	ctx := t.Context()
	tint := func(o client.Object) []string {
		cm := o.(*corev1.ConfigMap)
		return []string{cm.Data["tint"], cm.Data["second"]}
	}
	byTint := index.Field{Object: &corev1.ConfigMap{}, Name: "data.tint", Extract: tint, HashBuckets: 1}
	byTintHere := index.Field{Object: &corev1.ConfigMap{}, Name: "data.tint.here", InNamespace: true,
		Extract: tint, HashBuckets: 1}
	tints := map[string]map[string]string{
		"index-a/one": {"tint": "teal"}, "index-a/two": {"tint": "rose", "second": "teal"},
		"index-b/one": {"tint": "rose"}, "index-b/two": {"tint": "ochre"},
	}
	for key, data := range tints {
		ns, name, _ := strings.Cut(key, "/")
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tint-" + name,
			Labels: map[string]string{"test": "tint"}}, Data: data}
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cm) })
	}
	c := startCache(t, byTint, byTintHere)
	expect := func(f index.Field, namespace, value string, want ...string) {
		t.Helper()
		testenv.Eventually(t, func() error {
			var list corev1.ConfigMapList
			if err := f.List(ctx, c, &list, namespace, value, client.MatchingLabels{"test": "tint"}); err != nil {
				return err
			}
			if got := names(t, &list); !slices.Equal(got, want) {
				return fmt.Errorf("%s=%s in %q: %v, want %v", f.Name, value, namespace, got, want)
			}
			return nil
		})
	}
	expect(byTint, "", "teal", "index-a/tint-one", "index-a/tint-two")
	expect(byTint, "", "rose", "index-a/tint-two", "index-b/tint-one")
	expect(byTint, "", "ochre", "index-b/tint-two")
	expect(byTint, "", "mauve")
	expect(byTintHere, "index-b", "rose", "index-b/tint-one")
	expect(byTintHere, "index-a", "ochre")
	for name, want := range map[string][]string{
		byTint.Name: {"__all_namespaces/#0"}, byTintHere.Name: {"index-a/#0", "index-b/#0"},
	} {
		if got := indexKeys(t, c, &corev1.ConfigMap{}, name); !slices.Equal(got, want) {
			t.Errorf("index %s holds %v, want %v", name, got, want)
		}
	}

	// A value that changes: found under the new value only.
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "index-b", Name: "tint-two"}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["tint"] = "teal"
	if err := env.Client.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	expect(byTint, "", "teal", "index-a/tint-one", "index-a/tint-two", "index-b/tint-two")
	expect(byTint, "", "ochre")

	// The objects returned are copies: writing to one changes neither the cache nor the next lookup.
	var list corev1.ConfigMapList
	if err := byTint.List(ctx, c, &list, "", "ochre"); err != nil {
		t.Fatal(err)
	}
	if err := byTint.List(ctx, c, &list, "", "teal"); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		list.Items[i].Data["tint"] = "ochre"
		list.Items[i].Labels["test"] = "written"
	}
	expect(byTint, "", "teal", "index-a/tint-one", "index-a/tint-two", "index-b/tint-two")
	expect(byTint, "", "ochre")
}
