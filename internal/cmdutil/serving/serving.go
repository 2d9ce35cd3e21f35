// Package serving is how cosi-controller and cosi-sidecar serve /metrics and the health probes
// (/healthz, /readyz): on loopback unless told otherwise, so that a component started with its
// defaults exposes nothing to the network, and /metrics, when asked, over HTTPS to authorized
// clients only.
package serving

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

const (
	// DefaultMetricsAddress and DefaultHealthAddress are where /metrics and the probes are
	// served when no address is given: loopback, reachable from the Pod (or machine) itself only.
	// A Deployment whose probes the kubelet sends to the Pod's address, or whose metrics
	// Prometheus scrapes, sets its addresses explicitly (the charts and config/ do).
	DefaultMetricsAddress = "127.0.0.1:8080"
	// DefaultHealthAddress is where the probes are served by default (see DefaultMetricsAddress).
	DefaultHealthAddress = "127.0.0.1:8081"
)

// DriverMetricsPath is where the sidecar's metrics server relays the driver's own /metrics
// (RelayMetrics), behind the same authentication as its /metrics.
const DriverMetricsPath = "/metrics/driver"

// RelayMetrics returns the handler of DriverMetricsPath: it gets target, the driver's /metrics on
// the Pod's loopback (the containers of a Pod share it), and answers with what it got. A driver's
// metrics server is plain HTTP with no authentication, so the charts bind it to loopback and
// Prometheus reads it through the sidecar's, with the sidecar's authentication. target must be
// http:// on a loopback address: the relay is no way into anything else.
func RelayMetrics(target string) (http.Handler, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("the driver's metrics URL: %w", err)
	}
	ip := net.ParseIP(u.Hostname())
	if u.Scheme != "http" || (u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback())) || u.Port() == "" ||
		u.User != nil {
		return nil, fmt.Errorf("the driver's metrics URL %q: want http://127.0.0.1:<port>/<path>, on the Pod's loopback",
			target)
	}
	// No proxy from the environment: the driver is in the Pod.
	c := &http.Client{
		Transport: &http.Transport{Proxy: nil}, Timeout: 10 * time.Second,
		// A redirect is answered as it is, never followed: it could lead off loopback.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, u.String(), nil)
		if err != nil {
			http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
			return
		}
		if accept := r.Header.Get("Accept"); accept != "" {
			req.Header.Set("Accept", accept) // Prometheus asks for a format
		}
		resp, err := c.Do(req)
		if err != nil {
			http.Error(w, "the driver's metrics: "+err.Error(), http.StatusBadGateway)
			return
		}
		defer func() { _ = resp.Body.Close() }()
		if ct := resp.Header.Get("Content-Type"); ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}), nil
}

// Metrics are the options of the metrics server at addr ("" is DefaultMetricsAddress, "0"
// disables it). With secure, it serves HTTPS (controller-runtime's self-signed certificate) and
// answers only the clients Authorized lets through.
func Metrics(addr string, secure bool) metricsserver.Options {
	if addr == "" {
		addr = DefaultMetricsAddress
	}
	o := metricsserver.Options{BindAddress: addr}
	if secure {
		o.SecureServing = true
		o.FilterProvider = Authorized
	}
	return o
}

// PprofFlag is the flag of the Go profiling endpoints (/debug/pprof), off by default: a profile
// names no object or Secret, but it shows the process's code paths and costs CPU while taken.
const PprofFlag = "pprof-bind-address"

// PprofUsage is PprofFlag's help text.
const PprofUsage = `address of the Go profiles at /debug/pprof/ ("" or "0": off, the default), e.g. 127.0.0.1:6060; ` +
	`see docs/benchmark.md, "Profiles"`

// Health is the address of the health probes: addr, or DefaultHealthAddress when empty ("0"
// disables them).
func Health(addr string) string {
	if addr == "" {
		return DefaultHealthAddress
	}
	return addr
}

// Authorized is a metrics filter (metricsserver.Options.FilterProvider) that lets a request
// through only when its bearer token is one the API server authenticates (a TokenReview) and the
// token's user may get the request's path as a non-resource URL (a SubjectAccessReview: RBAC
// `nonResourceURLs: ["/metrics"], verbs: ["get"]`), as kube-controller-manager and controller-runtime's
// filters.WithAuthenticationAndAuthorization do. That filter would bring k8s.io/apiserver (its
// authenticator and authorizer factories, OpenTelemetry, CEL: 12 MB more per binary) for these
// two calls. The component's ServiceAccount needs create on tokenreviews and
// subjectaccessreviews: Kubernetes' ClusterRole system:auth-delegator, which the charts and
// config/ bind only where they turn this on (the generated roles, the sidecar's KEP-1979 minimum
// among them, do not grant it). The reviews go through a client of their own, limited to 5 queries per
// second, so that requests with made-up tokens cannot use up the reconcilers' rate; an allowed
// token is remembered for a minute (Prometheus sends the same one every scrape).
func Authorized(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst, c.RateLimiter = 5, 10, nil
	cs, err := kubernetes.NewForConfigAndClient(c, httpClient)
	if err != nil {
		return nil, fmt.Errorf("a client for the metrics' authorization: %w", err)
	}
	a := &authorizer{reviews: cs, allowed: map[[sha256.Size]byte]time.Time{}}
	return func(log logr.Logger, h http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			code, err := a.authorize(r)
			if err != nil {
				log.Error(err, "authorizing a metrics request", "path", r.URL.Path)
			}
			if code != http.StatusOK {
				http.Error(w, http.StatusText(code), code)
				return
			}
			h.ServeHTTP(w, r)
		}), nil
	}, nil
}

// allowedTTL is how long an allowed token and path are remembered; maxAllowed bounds how many.
const (
	allowedTTL = time.Minute
	maxAllowed = 256
)

type authorizer struct {
	reviews kubernetes.Interface
	mu      sync.Mutex
	allowed map[[sha256.Size]byte]time.Time // sha256(token, path) -> until
}

// authorize returns the HTTP status of r: 200 when it may go on, 401 without a token the API
// server authenticates, 403 when its user may not get the path, 405 for a method other than GET
// or HEAD, 500 when the API server did not answer (with the error, which never holds the token).
func (a *authorizer) authorize(r *http.Request) (int, error) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return http.StatusMethodNotAllowed, nil
	}
	token := bearerToken(r.Header.Get("Authorization"))
	if token == "" {
		return http.StatusUnauthorized, nil
	}
	key := sha256.Sum256([]byte(token + "\x00" + r.URL.Path))
	if a.remembered(key) {
		return http.StatusOK, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	tr, err := a.reviews.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return http.StatusInternalServerError, fmt.Errorf("TokenReview: %w", err)
	}
	if !tr.Status.Authenticated {
		return http.StatusUnauthorized, nil
	}
	u := tr.Status.User
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := a.reviews.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: r.URL.Path, Verb: "get"},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return http.StatusInternalServerError, fmt.Errorf("SubjectAccessReview: %w", err)
	}
	if !sar.Status.Allowed {
		return http.StatusForbidden, nil
	}
	a.remember(key)
	return http.StatusOK, nil
}

func (a *authorizer) remembered(key [sha256.Size]byte) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	until, ok := a.allowed[key]
	if ok && time.Now().After(until) {
		delete(a.allowed, key)
		return false
	}
	return ok
}

func (a *authorizer) remember(key [sha256.Size]byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.allowed) >= maxAllowed {
		clear(a.allowed)
	}
	a.allowed[key] = time.Now().Add(allowedTTL)
}

// bearerToken is the token of an Authorization header "Bearer <token>" (the scheme in any case).
func bearerToken(header string) string {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}
