package jsonwatch_test

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/cache/jsonwatch"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Run(m, func(_ context.Context, e *testenv.Env) error {
		env = e
		return nil
	})
}

func newCache(t *testing.T, opts cache.Options) cache.Cache {
	t.Helper()
	opts.Scheme = env.Scheme
	c, err := cache.New(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	for _, obj := range []client.Object{&cosiapi.BucketClaim{}, &cosiapi.Bucket{}, &cosiapi.BucketAccess{}} {
		if _, err := c.GetInformer(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
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

// A cache whose COSI informers decode with jsonwatch holds what controller-runtime's holds, after
// its start (the initial events of a watch list) and through creations, updates and deletions.
func TestCachesWhatControllerRuntimeCaches(t *testing.T) {
	ctx := context.Background()
	ns := unique("same")
	if err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	create := func(i int) {
		t.Helper()
		claim := &cosiapi.BucketClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("claim-%d", i),
				Labels: map[string]string{"team": "a"}, Annotations: map[string]string{"note": "x"}},
			Spec: cosiapi.BucketClaimSpec{BucketClassName: "gold", Protocols: []cosiapi.Protocol{cosiapi.ProtocolS3}},
		}
		if err := env.Client.Create(ctx, claim); err != nil {
			t.Fatal(err)
		}
		bucket := &cosiapi.Bucket{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bucket-%s-%d", ns, i)},
			Spec: cosiapi.BucketSpec{DriverName: "d.example.com", DeletionPolicy: cosiapi.DeletionPolicyDelete,
				Protocols: []cosiapi.Protocol{cosiapi.ProtocolS3}, Parameters: map[string]string{"tier": "hot"},
				BucketClaimRef: cosiapi.BucketClaimReference{Namespace: ns, Name: claim.Name}},
		}
		if err := env.Client.Create(ctx, bucket); err != nil {
			t.Fatal(err)
		}
		bucket.Status = cosiapi.BucketStatus{BucketID: fmt.Sprintf("id-%d", i),
			Protocols:  []cosiapi.Protocol{cosiapi.ProtocolS3},
			BucketInfo: map[string]string{"COSI_S3_ENDPOINT": "https://s3.example.com", "COSI_S3_REGION": "r"}}
		meta.SetStatusCondition(&bucket.Status.Conditions, metav1.Condition{Type: cosiapi.ConditionProvisioned,
			Status: metav1.ConditionTrue, Reason: "Provisioned", Message: "done"})
		if err := env.Client.Status().Update(ctx, bucket); err != nil {
			t.Fatal(err)
		}
		access := &cosiapi.BucketAccess{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("access-%d", i)},
			Spec: cosiapi.BucketAccessSpec{BucketAccessClassName: "rw", Protocol: cosiapi.ProtocolS3,
				BucketClaims: []cosiapi.BucketClaimAccess{{BucketClaimName: claim.Name,
					AccessModes:      cosiapi.BucketAccessModes{ObjectData: cosiapi.BucketAccessModeReadWrite},
					AccessSecretName: fmt.Sprintf("s-%d", i)}}},
		}
		if err := env.Client.Create(ctx, access); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		create(i)
	}
	// The requests of jsonwatch's informers: a watch list (the initial events, then a bookmark),
	// never a list, as controller-runtime's.
	var mu sync.Mutex
	var requests []string
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			requests = append(requests, req.URL.Path+"?"+req.URL.RawQuery)
			mu.Unlock()
			return rt.RoundTrip(req)
		})
	}
	var opts cache.Options
	if err := jsonwatch.Use(cfg, &opts); err != nil {
		t.Fatal(err)
	}
	theirs := newCache(t, cache.Options{})
	ours := newCache(t, opts)
	same := func() error {
		for _, l := range []client.ObjectList{&cosiapi.BucketClaimList{}, &cosiapi.BucketList{},
			&cosiapi.BucketAccessList{}} {
			a, b := l.DeepCopyObject().(client.ObjectList), l.DeepCopyObject().(client.ObjectList)
			if err := ours.List(ctx, a); err != nil {
				return err
			}
			if err := theirs.List(ctx, b); err != nil {
				return err
			}
			sortList(a)
			sortList(b)
			if meta.LenList(a) == 0 || !reflect.DeepEqual(a, b) {
				return fmt.Errorf("%T: %d items, controller-runtime's %d, or they differ: %s", l, meta.LenList(a),
					meta.LenList(b), firstDiff(a, b))
			}
		}
		return nil
	}
	eventually(t, same)
	mu.Lock()
	if len(requests) != 3 {
		t.Errorf("requests %q, want a watch of each kind", requests)
	}
	for _, r := range requests {
		if !strings.Contains(r, "watch=true") || !strings.Contains(r, "sendInitialEvents=true") {
			t.Errorf("request %s: want a watch list", r)
		}
	}
	mu.Unlock()
	for i := 20; i < 25; i++ {
		create(i)
	}
	claim := &cosiapi.BucketClaim{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "claim-3"}, claim); err != nil {
		t.Fatal(err)
	}
	claim.Annotations["note"] = "y"
	if err := env.Client.Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, &cosiapi.BucketAccess{ObjectMeta: metav1.ObjectMeta{Namespace: ns,
		Name: "access-4"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		got := &cosiapi.BucketClaim{}
		if err := ours.Get(ctx, client.ObjectKey{Namespace: ns, Name: "claim-3"}, got); err != nil {
			return err
		}
		if got.Annotations["note"] != "y" {
			return fmt.Errorf("claim-3 not updated")
		}
		var l cosiapi.BucketAccessList
		if err := ours.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(l.Items) != 24 {
			return fmt.Errorf("%d accesses, want 24", len(l.Items))
		}
		return same()
	})
}

// A kind the cache selects keeps controller-runtime's ListerWatcher, which applies the selection:
// jsonwatch's would watch every object.
func TestSelectedKindsKeepTheirSelection(t *testing.T) {
	ctx := context.Background()
	for _, l := range []string{"in", "out"} {
		b := &cosiapi.Bucket{
			ObjectMeta: metav1.ObjectMeta{Name: unique("selected-" + l), Labels: map[string]string{"shard": l}},
			Spec: cosiapi.BucketSpec{DriverName: "d.example.com", DeletionPolicy: cosiapi.DeletionPolicyRetain,
				Protocols:      []cosiapi.Protocol{cosiapi.ProtocolS3},
				BucketClaimRef: cosiapi.BucketClaimReference{Namespace: "same", Name: "claim-" + l}},
		}
		if err := env.Client.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	opts := cache.Options{ByObject: map[client.Object]cache.ByObject{
		&cosiapi.Bucket{}: {Label: labels.SelectorFromSet(labels.Set{"shard": "in"})}}}
	if err := jsonwatch.Use(env.Config, &opts); err != nil {
		t.Fatal(err)
	}
	c := newCache(t, opts)
	var l cosiapi.BucketList
	if err := c.List(ctx, &l); err != nil {
		t.Fatal(err)
	}
	for _, b := range l.Items {
		if b.Labels["shard"] != "in" {
			t.Errorf("Bucket %s cached, not selected", b.Name)
		}
	}

	// Every kind selected: no informer of jsonwatch's; and one constructor only.
	for name, all := range map[string]cache.Options{
		"DefaultNamespaces":           {DefaultNamespaces: map[string]cache.Config{"same": {}}},
		"DefaultEnableWatchBookmarks": {DefaultEnableWatchBookmarks: ptr.To(false)},
	} {
		if err := jsonwatch.Use(env.Config, &all); err != nil || all.NewInformer != nil {
			t.Errorf("with %s: %v, constructor set %v", name, err, all.NewInformer != nil)
		}
	}
	if err := jsonwatch.Use(env.Config, &opts); err == nil {
		t.Error("a second constructor replaced the first")
	}
}

// A watch from a resource version the API server no longer has ends with the Status that makes a
// reflector list again (410 Expired), whether the API server answers with an ERROR event or an
// error.
func TestExpiredWatchIsGone(t *testing.T) {
	lw, err := jsonwatch.ListWatchFor(env.Config, &cosiapi.Bucket{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "1"})
	if err != nil {
		if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			t.Fatalf("watch from 1: %v, want 410", err)
		}
		return
	}
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		st, ok := ev.Object.(*metav1.Status)
		if ev.Type != watch.Error || !ok || st.Code != http.StatusGone {
			t.Fatalf("first event %s %#v, want ERROR 410", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("no event")
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

var seq atomic.Int64

// unique returns name with a suffix no other call of this process gives, so that the tests can
// run again (-count) against the same API server.
func unique(name string) string { return fmt.Sprintf("%s-%d", name, seq.Add(1)) }

func eventually(t *testing.T, f func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err = f(); err == nil {
			return
		}
	}
	t.Fatal(err)
}

// firstDiff shows the first items of two lists that differ.
func firstDiff(a, b client.ObjectList) string {
	ia, _ := meta.ExtractList(a)
	ib, _ := meta.ExtractList(b)
	for i := range min(len(ia), len(ib)) {
		if !reflect.DeepEqual(ia[i], ib[i]) {
			return fmt.Sprintf("\n%#v\ncontroller-runtime's:\n%#v", ia[i], ib[i])
		}
	}
	return fmt.Sprintf("lists: %#v / %#v", a, b)
}

// sortList orders a list's items by namespace and name (a cache lists them in any order).
func sortList(l client.ObjectList) {
	items, _ := meta.ExtractList(l)
	slices.SortFunc(items, func(a, b runtime.Object) int {
		ka, kb := client.ObjectKeyFromObject(a.(client.Object)), client.ObjectKeyFromObject(b.(client.Object))
		return strings.Compare(ka.String(), kb.String())
	})
	if err := meta.SetList(l, items); err != nil {
		panic(err)
	}
}
