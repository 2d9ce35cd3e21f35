package serving_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kube-cosi/cosi/dev/process"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/cmdutil/serving"
)

var env *testenv.Env

const ns = "serving-test"

func TestMain(m *testing.M) {
	testenv.Run(m, func(ctx context.Context, e *testenv.Env) error {
		env = e
		return env.CreateNamespace(ctx, ns)
	})
}

// Without addresses, /metrics and the probes are on loopback; "0" still turns them off.
func TestDefaultsAreLoopback(t *testing.T) {
	for what, addr := range map[string]string{
		"metrics": serving.Metrics("", false).BindAddress, "secure metrics": serving.Metrics("", true).BindAddress,
		"health": serving.Health(""),
	} {
		host, _, err := net.SplitHostPort(addr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			t.Errorf("%s: default address %q is not loopback", what, addr)
		}
	}
	if got := serving.Metrics("0", true).BindAddress; got != "0" {
		t.Errorf("metrics \"0\": %q", got)
	}
	if got := serving.Health("0"); got != "0" {
		t.Errorf("health \"0\": %q", got)
	}
	if o := serving.Metrics(":8443", false); o.SecureServing || o.FilterProvider != nil {
		t.Error("plain metrics are served over HTTPS or filtered")
	}
}

// With --metrics-secure, a component whose ServiceAccount is bound to system:auth-delegator (and
// nothing else) serves /metrics over HTTPS to a token allowed to get /metrics (Prometheus's), and
// refuses a request without a token, with a token the API server does not know, with a token of
// someone who may not (a tenant's), and in clear text.
func TestSecureMetricsOnlyToAuthorizedTokens(t *testing.T) {
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	token := func(sa string) string {
		t.Helper()
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx,
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cs.CoreV1().ServiceAccounts(ns).Delete(context.Background(), sa, metav1.DeleteOptions{})
		})
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	bind := func(name, role, sa string) {
		t.Helper()
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	// What docs/install.md tells admins to bind Prometheus to (charts/cosi's cosi-metrics-reader).
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "serving-test-metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics", serving.DriverMetricsPath},
			Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoles().Delete(context.Background(), "serving-test-metrics-reader", metav1.DeleteOptions{})
	})
	bind("serving-test-component", "system:auth-delegator", "component")
	bind("serving-test-prometheus", "serving-test-metrics-reader", "prometheus")
	component, prometheus, tenant := token("component"), token("prometheus"), token("tenant")

	addr, err := process.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: env.Config.Host, BearerToken: component,
		TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData}}
	// The driver's plain /metrics on loopback, which the component relays (the sidecar does).
	driver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "cosi_test_driver_metric 1\n")
	}))
	t.Cleanup(driver.Close)
	relay, err := serving.RelayMetrics(driver.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics := serving.Metrics(addr, true)
	metrics.ExtraHandlers = map[string]http.Handler{serving.DriverMetricsPath: relay}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Metrics: metrics, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	mgrCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	// A self-signed certificate: the client checks who it talks to by its token's answer only.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the metrics' self-signed certificate
	}}
	get := func(scheme, method, token string, path ...string) (int, string) {
		t.Helper()
		p := "/metrics"
		if len(path) > 0 {
			p = path[0]
		}
		req, err := http.NewRequestWithContext(ctx, method, scheme+"://"+addr+p, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	testenv.Eventually(t, func() error { // the metrics server answers
		if code, msg := get("https", http.MethodGet, ""); code == 0 {
			return errors.New(msg)
		}
		return nil
	})
	for _, c := range []struct {
		what, scheme, method, token string
		want                        int
	}{
		{"no token", "https", http.MethodGet, "", http.StatusUnauthorized},
		{"an unknown token", "https", http.MethodGet, "not-a-token", http.StatusUnauthorized},
		{"a tenant's token", "https", http.MethodGet, tenant, http.StatusForbidden},
		{"the component's own token, which may review but not read", "https", http.MethodGet, component,
			http.StatusForbidden},
		{"Prometheus's token, POST", "https", http.MethodPost, prometheus, http.StatusMethodNotAllowed},
		{"Prometheus's token", "https", http.MethodGet, prometheus, http.StatusOK},
		{"Prometheus's token again (remembered)", "https", http.MethodGet, prometheus, http.StatusOK},
	} {
		code, body := get(c.scheme, c.method, c.token)
		if code != c.want {
			t.Errorf("%s: %d %.200s, want %d", c.what, code, body, c.want)
		}
		if code == http.StatusOK && !strings.Contains(body, "controller_runtime_") && !strings.Contains(body, "go_") {
			t.Errorf("%s: no metrics in %.200s", c.what, body)
		}
	}
	if code, _ := get("http", http.MethodGet, prometheus); code == http.StatusOK {
		t.Error("the metrics are served in clear text")
	}
	// The driver's metrics, relayed, behind the same checks.
	for _, c := range []struct {
		what, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a tenant's token", tenant, http.StatusForbidden},
		{"Prometheus's token", prometheus, http.StatusOK},
	} {
		code, body := get("https", http.MethodGet, c.token, serving.DriverMetricsPath)
		if code != c.want {
			t.Errorf("the driver's metrics, %s: %d %.200s, want %d", c.what, code, body, c.want)
		}
		if code == http.StatusOK && !strings.Contains(body, "cosi_test_driver_metric 1") {
			t.Errorf("the driver's metrics, %s: %.200s, not the driver's", c.what, body)
		}
	}
}

// RelayMetrics relays only from the Pod's loopback, over plain HTTP with a port: no other host,
// whatever the flag says.
func TestRelayMetricsOnlyFromLoopback(t *testing.T) {
	for _, target := range []string{
		"http://10.0.0.1:8082/metrics", "http://example.com:8082/metrics", "https://127.0.0.1:8082/metrics",
		"http://127.0.0.1/metrics", "http://user:pass@127.0.0.1:8082/metrics", "127.0.0.1:8082",
	} {
		if _, err := serving.RelayMetrics(target); err == nil {
			t.Errorf("RelayMetrics(%q) accepted", target)
		}
	}
	for _, target := range []string{"http://127.0.0.1:8082/metrics", "http://[::1]:8082/metrics",
		"http://localhost:8082/metrics"} {
		if _, err := serving.RelayMetrics(target); err != nil {
			t.Errorf("RelayMetrics(%q): %v", target, err)
		}
	}
}
