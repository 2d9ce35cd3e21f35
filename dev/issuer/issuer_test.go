package issuer_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-cosi/cosi/dev/issuer"
	"github.com/kube-cosi/cosi/dev/localenv"
)

// newFront returns a front, or skips the test saying why this machine cannot have one.
func newFront(t *testing.T) *issuer.Front {
	t.Helper()
	f, err := issuer.New()
	if errors.Is(err, issuer.ErrUnavailable) {
		t.Skipf("no ServiceAccount issuer the IAM service would fetch can be published here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// client trusts only the front's CA, as the IAM service trusts only its thumbprint.
func client(t *testing.T, f *issuer.Front) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(f.CA) {
		t.Fatal("the front's CA is no PEM certificate")
	}
	tlsConfig := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}
}

func getJSON(ctx context.Context, c *http.Client, url string, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	return resp.StatusCode, json.NewDecoder(resp.Body).Decode(out)
}

// TestFrontPublishesTheAPIServersIssuer starts a real API server with the front as its issuer and
// reads both documents through the front, anonymously: the discovery document names the front's
// URL as issuer and JWKS, and the JWKS holds the API server's key. Without the anonymous
// discovery binding the API server refuses, and the front passes the refusal on.
func TestFrontPublishesTheAPIServersIssuer(t *testing.T) {
	f := newFront(t)
	if !strings.HasPrefix(f.URL, "https://") || strings.Count(f.URL, ":") != 1 {
		t.Fatalf("issuer URL %q: want https:// and no port (an OIDC provider URL has none)", f.URL)
	}
	a, err := localenv.StartAPIServer(localenv.APIServerOptions{Issuer: f})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx := t.Context()
	c := client(t, f)

	var discovery struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	var jwks struct {
		Keys []struct {
			Kid string `json:"kid"`
			Kty string `json:"kty"`
		} `json:"keys"`
	}
	var codes [2]int
	if err := f.Serve(ctx, func(ctx context.Context) error {
		var err error
		if codes[0], err = getJSON(ctx, c, f.URL+issuer.DiscoveryPath, &discovery); err != nil {
			return err
		}
		codes[1], err = getJSON(ctx, c, f.URL+issuer.JWKSPath, &jwks)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if codes != [2]int{http.StatusOK, http.StatusOK} {
		t.Fatalf("discovery and JWKS answered %v, want 200 both", codes)
	}
	if discovery.Issuer != f.URL || discovery.JWKSURI != f.JWKSURI {
		t.Errorf("discovery document: issuer %q, jwks_uri %q; want %q and %q",
			discovery.Issuer, discovery.JWKSURI, f.URL, f.JWKSURI)
	}
	if len(jwks.Keys) == 0 || jwks.Keys[0].Kty == "" || jwks.Keys[0].Kid == "" {
		t.Errorf("JWKS: %+v, want the API server's signing key", jwks.Keys)
	}

	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: localenv.IssuerDiscoveryBinding}}
	if err := a.Client.Delete(ctx, binding); err != nil {
		t.Fatal(err)
	}
	if err := f.Serve(ctx, func(ctx context.Context) error {
		var err error
		codes[0], err = getJSON(ctx, c, f.URL+issuer.DiscoveryPath, &discovery)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if codes[0] == http.StatusOK {
		t.Errorf("discovery without the anonymous binding answered 200: the API server let an anonymous user in anyway")
	}
}

// TestServeTakesTurns holds one front's Serve open and tries another's meanwhile: it waits for
// the machine-wide lock until its context ends, whatever the machine's speed, and serves once the
// first is done.
func TestServeTakesTurns(t *testing.T) {
	first, second := newFront(t), newFront(t)
	ctx := t.Context()
	var served bool
	if err := first.Serve(ctx, func(ctx context.Context) error {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		err := second.Serve(short, func(context.Context) error { served = true; return nil })
		if err == nil || served {
			t.Errorf("a second front served while the first held the address (err %v)", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := second.Serve(ctx, func(context.Context) error { served = true; return nil }); err != nil || !served {
		t.Errorf("the second front after the first: served %v, err %v", served, err)
	}
}

// TestLoadKeepsTheIssuer loads a front from a directory twice, as two runs of make run do: the
// second has the first's URL, thumbprint and CA (the OIDC provider and the roles the driver made
// trust them), and its serving certificate is signed by that CA for the front's address. The
// directory's files are the owner's only.
func TestLoadKeepsTheIssuer(t *testing.T) {
	dir := t.TempDir()
	first, err := issuer.Load(dir)
	if errors.Is(err, issuer.ErrUnavailable) {
		t.Skipf("no ServiceAccount issuer the IAM service would fetch can be published here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	second, err := issuer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if first.URL != second.URL || first.JWKSURI != second.JWKSURI || first.Thumbprint != second.Thumbprint ||
		string(first.CA) != string(second.CA) {
		t.Errorf("a second Load: %s %s %s, want the first's %s %s %s", second.URL, second.JWKSURI, second.Thumbprint,
			first.URL, first.JWKSURI, first.Thumbprint)
	}
	if other := newFront(t); other.URL == first.URL || other.Thumbprint == first.Thumbprint {
		t.Errorf("New has Load's URL %s or thumbprint %s", other.URL, other.Thumbprint)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v, want the owner's only", e.Name(), info.Mode().Perm())
		}
	}
	// The front serves with a certificate of its CA, for its address.
	if err := second.Serve(t.Context(), func(ctx context.Context) error {
		_, err := getJSON(ctx, client(t, second), second.URL+issuer.DiscoveryPath, &map[string]any{})
		return err
	}); err != nil {
		t.Errorf("a client that trusts only the loaded CA: %v", err)
	}
}
