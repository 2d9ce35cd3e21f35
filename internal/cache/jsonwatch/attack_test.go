package jsonwatch_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/cache/jsonwatch"
	"github.com/kube-cosi/cosi/internal/kube/scheme"
)

// controller-runtime keeps one cache per kind for ByObject (delegatingByGVKCache routes by GVK):
// an entry keyed by an unstructured or metadata-only object of a COSI kind selects that kind's
// typed informers too. Use must keep their selection.
func TestSelectionKeyedByGVKKept(t *testing.T) {
	ctx := context.Background()
	in := unique("gvksel-in")
	for _, l := range []string{"in", "out"} {
		name := in
		if l == "out" {
			name = unique("gvksel-out")
		}
		b := &cosiapi.Bucket{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"gvkshard": l}},
			Spec: cosiapi.BucketSpec{DriverName: "d.example.com", DeletionPolicy: cosiapi.DeletionPolicyRetain,
				Protocols:      []cosiapi.Protocol{cosiapi.ProtocolS3},
				BucketClaimRef: cosiapi.BucketClaimReference{Namespace: "same", Name: "claim-" + l}},
		}
		if err := env.Client.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	gvk := cosiapi.SchemeGroupVersion.WithKind("Bucket")
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	p := &metav1.PartialObjectMetadata{}
	p.SetGroupVersionKind(gvk)
	for name, key := range map[string]client.Object{"unstructured": u, "metadata": p} {
		t.Run(name, func(t *testing.T) {
			opts := cache.Options{ByObject: map[client.Object]cache.ByObject{
				key: {Label: labels.SelectorFromSet(labels.Set{"gvkshard": "in"})}}}
			if err := jsonwatch.Use(env.Config, &opts); err != nil {
				t.Fatal(err)
			}
			c := newCache(t, opts)
			var l cosiapi.BucketList
			if err := c.List(ctx, &l); err != nil {
				t.Fatal(err)
			}
			found := false
			for _, b := range l.Items {
				if b.Labels["gvkshard"] != "in" {
					t.Errorf("Bucket %s cached, not selected by the %s entry", b.Name, name)
				}
				found = found || b.Name == in
			}
			if !found {
				t.Error("the selected Bucket is not cached")
			}
		})
	}
}

// The list a reflector falls back to (and the consistency detector's) holds what client-go's
// decoding (controller-runtime's ListWatch: Do().Into with its serializer) gives.
func TestListDecodesAsClientGo(t *testing.T) {
	ctx := context.Background()
	if err := env.Client.Create(ctx, &cosiapi.Bucket{
		ObjectMeta: metav1.ObjectMeta{Name: unique("listed"), Labels: map[string]string{"a": "b"}},
		Spec: cosiapi.BucketSpec{DriverName: "d.example.com", DeletionPolicy: cosiapi.DeletionPolicyRetain,
			Protocols:      []cosiapi.Protocol{cosiapi.ProtocolS3},
			BucketClaimRef: cosiapi.BucketClaimReference{Namespace: "same", Name: "c"}},
	}); err != nil {
		t.Fatal(err)
	}
	lw, err := jsonwatch.ListWatchFor(env.Config, &cosiapi.Bucket{})
	if err != nil {
		t.Fatal(err)
	}
	ours, err := lw.ListWithContext(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	httpClient, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	codecs := serializer.NewCodecFactory(scheme.New())
	rc, err := apiutil.RESTClientForGVK(cosiapi.SchemeGroupVersion.WithKind("Bucket"), false, false, env.Config,
		codecs, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	theirs := &cosiapi.BucketList{}
	if err := rc.Get().Resource("buckets").VersionedParams(&metav1.ListOptions{
		ResourceVersion: ours.(*cosiapi.BucketList).ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact,
	}, runtime.NewParameterCodec(scheme.New())).Do(ctx).Into(theirs); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ours, theirs) {
		t.Errorf("list %s", firstDiff(ours.(client.ObjectList), theirs))
	}
}

// A watch whose connection ends before its response (a probable EOF) is sent again, as client-go's
// Request.Watch does (rest/request.go, isErrRetryableFunc): it does not end in an error that makes
// the reflector list (re-stream) every object again.
func TestWatchRetriesAConnectionEndedBeforeItsResponse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	watchers := map[string]func(cfg *rest.Config) (watch.Interface, error){
		"jsonwatch": func(cfg *rest.Config) (watch.Interface, error) {
			lw, err := jsonwatch.ListWatchFor(cfg, &cosiapi.Bucket{})
			if err != nil {
				return nil, err
			}
			return lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: "4"})
		},
		// controller-runtime's: rest.Request.Watch.
		"client-go": func(cfg *rest.Config) (watch.Interface, error) {
			httpClient, err := rest.HTTPClientFor(cfg)
			if err != nil {
				return nil, err
			}
			rc, err := apiutil.RESTClientForGVK(cosiapi.SchemeGroupVersion.WithKind("Bucket"), false, false, cfg,
				serializer.NewCodecFactory(scheme.New()), httpClient)
			if err != nil {
				return nil, err
			}
			return rc.Get().Resource("buckets").VersionedParams(&metav1.ListOptions{ResourceVersion: "4", Watch: true},
				runtime.NewParameterCodec(scheme.New())).Watch(ctx)
		},
	}
	for name, start := range watchers {
		t.Run(name, func(t *testing.T) {
			var requests atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if requests.Add(1) == 1 {
					conn, _, err := w.(http.Hijacker).Hijack()
					if err == nil {
						_ = conn.Close()
					}
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"type":"ADDED","object":{"kind":"Bucket",`+
					`"apiVersion":"objectstorage.k8s.io/v1alpha2","metadata":{"name":"b","resourceVersion":"5"}}}`+"\n")
			}))
			defer srv.Close()
			w, err := start(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatalf("watch: %v", err)
			}
			defer w.Stop()
			ev, ok := <-w.ResultChan()
			if !ok || ev.Type != watch.Added || ev.Object.(*cosiapi.Bucket).Name != "b" {
				t.Fatalf("event %v %#v", ev.Type, ev.Object)
			}
			if n := requests.Load(); n != 2 {
				t.Errorf("%d requests, want 2", n)
			}
		})
	}
}
