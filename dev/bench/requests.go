package bench

import (
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// request is one row of apiserver_request_total: what the API server counts per request.
type request struct {
	Verb        string `json:"verb"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
	Code        string `json:"code"`
}

func (r request) String() string {
	s := r.Verb + " " + r.Resource
	if r.Subresource != "" {
		s += "/" + r.Subresource
	}
	return s + " " + r.Code
}

// isWrite says whether the request changes something.
func (r request) isWrite() bool {
	switch r.Verb {
	case "POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY":
		return true
	}
	return false
}

// requestCounts counts requests by what the API server's metric labels them with.
type requestCounts map[request]float64

// apiRequests returns the API server's resource requests by verb, resource, subresource and code.
func apiRequests(m metrics) requestCounts {
	out := requestCounts{}
	f, ok := m["apiserver_request_total"]
	if !ok {
		return out
	}
	for _, metric := range f.GetMetric() {
		l := map[string]string{}
		for _, p := range metric.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		if l["resource"] == "" { // /metrics, /healthz, discovery
			continue
		}
		r := request{Verb: l["verb"], Resource: l["resource"], Subresource: l["subresource"], Code: l["code"]}
		out[r] += metric.GetCounter().GetValue()
	}
	return out
}

// minus returns c - o, dropping zeroes.
func (c requestCounts) minus(o requestCounts) requestCounts {
	out := requestCounts{}
	for r, v := range c {
		if d := v - o[r]; d != 0 {
			out[r] = d
		}
	}
	for r, v := range o {
		if _, ok := c[r]; !ok && v != 0 {
			out[r] = -v
		}
	}
	return out
}

// sum adds the counts for which keep is true.
func (c requestCounts) sum(keep func(request) bool) float64 {
	total := 0.0
	for r, v := range c {
		if keep(r) {
			total += v
		}
	}
	return total
}

// requestCounter counts the benchmark's own requests to the API server the way the API server's
// apiserver_request_total labels them, so that subtracting them from the API server's counts
// leaves the requests of everything else: COSI's processes (and the API server's own few periodic
// requests; see docs/benchmark.md). Every client of the benchmark goes through its wrap.
type requestCounter struct {
	mu sync.Mutex
	n  requestCounts
}

func newRequestCounter() *requestCounter { return &requestCounter{n: requestCounts{}} }

// wrap is a rest.Config's WrapTransport: it counts the requests sent through next.
func (c *requestCounter) wrap(next http.RoundTripper) http.RoundTripper {
	return &countingTransport{next: next, c: c}
}

// countingTransport is an http.RoundTripper that counts its requests in c. The API server counts
// a request when its handler returns: for a WATCH, when the watch ends, so a WATCH is counted
// when its response body is closed.
type countingTransport struct {
	next http.RoundTripper
	c    *requestCounter
}

// snapshot returns the counts so far.
func (c *requestCounter) snapshot() requestCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

func (c *requestCounter) add(r request) {
	c.mu.Lock()
	c.n[r]++
	c.mu.Unlock()
}

// RoundTrip implements http.RoundTripper.
func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c := t.c
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	r, ok := classify(req)
	if !ok {
		return resp, nil
	}
	r.Code = strconv.Itoa(resp.StatusCode)
	if r.Verb == "WATCH" && resp.StatusCode == http.StatusOK {
		resp.Body = &countOnClose{ReadCloser: resp.Body, done: func() { c.add(r) }}
		return resp, nil
	}
	c.add(r)
	return resp, nil
}

// countOnClose calls done once, when the body is closed.
type countOnClose struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *countOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.done)
	return err
}

// namespaceSubresources are the subresources of a Namespace, as the API server's request info
// resolver knows them: /api/v1/namespaces/NAME/status is not a resource "status" in namespace NAME.
var namespaceSubresources = []string{"status", "finalize"}

// classify returns a request's verb, resource and subresource as the API server's request info
// resolver derives them (k8s.io/apiserver/pkg/endpoints/request), and false for a non-resource
// request (/metrics, discovery).
func classify(req *http.Request) (request, bool) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return request{}, false
	}
	if parts[0] == "namespaces" && len(parts) > 2 && !slices.Contains(namespaceSubresources, parts[2]) {
		parts = parts[2:]
	}
	r := request{Resource: parts[0]}
	named := len(parts) > 1
	if len(parts) > 2 {
		r.Subresource = parts[2]
	}
	q := req.URL.Query()
	switch req.Method {
	case http.MethodGet:
		switch {
		case named:
			r.Verb = "GET"
		case q.Get("watch") == "true" || q.Get("watch") == "1":
			r.Verb = "WATCH"
		default:
			r.Verb = "LIST"
		}
	case http.MethodDelete:
		r.Verb = "DELETE"
		if !named {
			r.Verb = "DELETECOLLECTION"
		}
	case http.MethodPatch:
		r.Verb = "PATCH"
		if req.Header.Get("Content-Type") == "application/apply-patch+yaml" {
			r.Verb = "APPLY"
		}
	default:
		r.Verb = req.Method
	}
	return r, true
}
