package bench

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// The benchmark's own requests are counted with the labels the API server gives them, or
// subtracting them from the API server's counts would leave wrong figures for COSI.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		method, url, contentType string
		want                     request
		resource                 bool
	}{
		{"GET", "/metrics", "", request{}, false},
		{"GET", "/apis/objectstorage.k8s.io/v1alpha2", "", request{}, false},
		{"POST", "/apis/objectstorage.k8s.io/v1alpha2/namespaces/ns/bucketclaims", "",
			request{Verb: "POST", Resource: "bucketclaims"}, true},
		{"GET", "/apis/objectstorage.k8s.io/v1alpha2/namespaces/ns/bucketclaims/c", "",
			request{Verb: "GET", Resource: "bucketclaims"}, true},
		{"PUT", "/apis/objectstorage.k8s.io/v1alpha2/namespaces/ns/bucketclaims/c/status", "",
			request{Verb: "PUT", Resource: "bucketclaims", Subresource: "status"}, true},
		{"GET", "/apis/objectstorage.k8s.io/v1alpha2/bucketaccesses?watch=true", "",
			request{Verb: "WATCH", Resource: "bucketaccesses"}, true},
		{"GET", "/apis/objectstorage.k8s.io/v1alpha2/buckets?limit=500", "",
			request{Verb: "LIST", Resource: "buckets"}, true},
		{"DELETE", "/apis/objectstorage.k8s.io/v1alpha2/namespaces/ns/bucketaccesses", "",
			request{Verb: "DELETECOLLECTION", Resource: "bucketaccesses"}, true},
		{"DELETE", "/apis/objectstorage.k8s.io/v1alpha2/namespaces/ns/bucketaccesses/a", "",
			request{Verb: "DELETE", Resource: "bucketaccesses"}, true},
		{"PATCH", "/api/v1/namespaces/ns/secrets/s", "application/merge-patch+json",
			request{Verb: "PATCH", Resource: "secrets"}, true},
		{"PATCH", "/api/v1/namespaces/ns/secrets/s", "application/apply-patch+yaml",
			request{Verb: "APPLY", Resource: "secrets"}, true},
		{"POST", "/api/v1/namespaces", "", request{Verb: "POST", Resource: "namespaces"}, true},
		{"GET", "/api/v1/namespaces/ns", "", request{Verb: "GET", Resource: "namespaces"}, true},
		{"PUT", "/api/v1/namespaces/ns/finalize", "",
			request{Verb: "PUT", Resource: "namespaces", Subresource: "finalize"}, true},
		{"GET", "/api/v1/namespaces/ns/configmaps", "", request{Verb: "LIST", Resource: "configmaps"}, true},
	} {
		req := httptest.NewRequest(tc.method, tc.url, nil)
		if tc.contentType != "" {
			req.Header.Set("Content-Type", tc.contentType)
		}
		got, ok := classify(req)
		if ok != tc.resource || got != tc.want {
			t.Errorf("%s %s: got %+v, %v; want %+v, %v", tc.method, tc.url, got, ok, tc.want, tc.resource)
		}
	}
}

// A WATCH is counted when it ends, as the API server counts it; every other request when its
// response arrives.
func TestRequestCounter(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPatch {
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	c := newRequestCounter()
	hc := &http.Client{Transport: c.wrap(http.DefaultTransport)}
	resp, err := hc.Get(srv.URL + "/api/v1/namespaces/ns/configmaps?watch=1")
	if err != nil {
		t.Fatal(err)
	}
	if n := c.snapshot()[request{Verb: "WATCH", Resource: "configmaps", Code: "200"}]; n != 0 {
		t.Errorf("an open WATCH is counted: %v", n)
	}
	resp.Body.Close()
	resp.Body.Close()
	req, _ := http.NewRequest(http.MethodPatch, srv.URL+"/api/v1/namespaces/ns/secrets/s", nil)
	if resp, err = hc.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := requestCounts{
		{Verb: "WATCH", Resource: "configmaps", Code: "200"}: 1,
		{Verb: "PATCH", Resource: "secrets", Code: "404"}:    1,
	}
	if got := c.snapshot(); len(got.minus(want)) != 0 {
		t.Errorf("counted %v, want %v", got, want)
	}
}
