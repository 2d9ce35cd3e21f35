package issuer_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
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
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
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

// TestServeTakesTurns holds one public front's Serve open and tries another's on the same
// address meanwhile: it waits for the machine-wide lock until its context ends, whatever the
// machine's speed, and serves once the first is done. The address is loopback: the test
// publishes nothing beyond this machine.
func TestServeTakesTurns(t *testing.T) {
	t.Setenv(issuer.AddressEnv, "127.0.0.1")
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

// TestFrontIsPrivate makes two fronts as the tests and make run do (no address asked): each is
// on an address of a documentation range that is none of this network namespace's, nothing of
// this namespace listens on it while it serves (its socket is in the front's own namespace),
// this machine reaches it from its end of the link but not from another address (as another
// host's packets would come), both serve at once, and once closed its link is gone.
func TestFrontIsPrivate(t *testing.T) {
	t.Setenv(issuer.AddressEnv, "")
	first, second := newFront(t), newFront(t)
	var hosts []string
	for _, f := range []*issuer.Front{first, second} {
		host := strings.SplitN(f.URL, "/", 4)[2]
		ip := net.ParseIP(host)
		if ip == nil || !documentation(ip) {
			t.Fatalf("issuer URL %s: want an address of 198.51.100.0/24 or 203.0.113.0/24", f.URL)
		}
		if local(t)[host] {
			t.Errorf("issuer %s: an address of this network namespace's interfaces, which other hosts may reach", f.URL)
		}
		hosts = append(hosts, host)
	}
	if hosts[0] == hosts[1] {
		t.Fatalf("two fronts on one address %s", hosts[0])
	}
	ctx := t.Context()
	if err := first.Serve(ctx, func(ctx context.Context) error {
		return second.Serve(ctx, func(ctx context.Context) error {
			for _, f := range []*issuer.Front{first, second} {
				// No backend yet: the front answers 503, over TLS with its CA, from this namespace.
				if code, err := getJSON(ctx, client(t, f), f.URL+issuer.DiscoveryPath, nil); err != nil ||
					code != http.StatusServiceUnavailable {
					t.Errorf("%s from this machine: %d, %v; want 503 (no API server behind it yet)", f.URL, code, err)
				}
			}
			// What another host's packets would be, were they routed here: from an address that is
			// not this machine's end of the link. The namespace has no route to answer them.
			if foreign := foreignSource(t, peerOf(hosts[0])); foreign != nil {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: foreign}, Timeout: time.Second}
				if c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(hosts[0], "443")); err == nil {
					_ = c.Close()
					t.Errorf("%s answered a connection from %s, an address other than its link's", hosts[0], foreign)
				}
			}
			for _, l := range tcpListeners(t) {
				if l == hosts[0]+":443" || l == hosts[1]+":443" {
					t.Errorf("%s is listened on in this machine's network namespace", l)
				}
			}
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	// The kernel removes a namespace (and its veth) a moment after its last reference goes.
	deadline := time.Now().Add(10 * time.Second)
	for peer := peerOf(hosts[0]); local(t)[peer]; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the link with %s stays after Close", peer)
		}
	}
}

// TestBusyAddressReportedAtOnce has a process that is no front (this test's listener) on port 443
// of a public front's address: New says so at once, and so does Serve of a front made before.
func TestBusyAddressReportedAtOnce(t *testing.T) {
	t.Setenv(issuer.AddressEnv, "127.0.0.1")
	f := newFront(t)
	l, err := net.Listen("tcp", "127.0.0.1:443")
	if err != nil {
		t.Skipf("cannot hold 127.0.0.1:443 for the test: %v", err)
	}
	defer func() { _ = l.Close() }()
	start := time.Now()
	if _, err := issuer.New(); err == nil || !strings.Contains(err.Error(), "not an issuer front") {
		t.Errorf("New with 127.0.0.1:443 in use: %v, want an error saying a process that is no front holds it", err)
	}
	err = f.Serve(t.Context(), func(context.Context) error {
		t.Error("served on an address in use")
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "not an issuer front") {
		t.Errorf("Serve with 127.0.0.1:443 in use: %v, want an error saying a process that is no front holds it", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the address in use was reported after %v, want at once", took)
	}
}

// TestLockDiesWithItsProcess has another process hold a public front's lock (serving on
// loopback) and kills it with SIGKILL: the lock is free at once, with nothing left to remove.
func TestLockDiesWithItsProcess(t *testing.T) {
	if os.Getenv("ISSUER_TEST_HOLD") != "" {
		f, err := issuer.New()
		if err != nil {
			t.Fatal(err)
		}
		_ = f.Serve(context.Background(), func(context.Context) error {
			fmt.Println("serving")
			select {}
		})
		return
	}
	t.Setenv(issuer.AddressEnv, "127.0.0.1")
	f := newFront(t)
	holder := exec.Command(os.Args[0], "-test.run=^TestLockDiesWithItsProcess$")
	holder.Env = append(os.Environ(), "ISSUER_TEST_HOLD=1")
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "serving\n" {
		t.Fatalf("the holder: %q, %v", line, err)
	}
	short, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := f.Serve(short, func(context.Context) error { return nil }); err == nil {
		t.Fatal("served while another process held the address")
	}
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	short, cancel = context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := f.Serve(short, func(context.Context) error { return nil }); err != nil {
		t.Errorf("after the holder was killed: %v", err)
	}
}

// TestPublicFrontSaysWhatItExposes: a front on an address asked for says what it publishes and
// where; a private one has nothing to say.
func TestPublicFrontSaysWhatItExposes(t *testing.T) {
	t.Setenv(issuer.AddressEnv, "127.0.0.1")
	if e := newFront(t).Exposure(); !strings.Contains(e, "127.0.0.1:443") || !strings.Contains(e, "every host") {
		t.Errorf("a public front's exposure: %q", e)
	}
	t.Setenv(issuer.AddressEnv, "192.0.2.254") // not this machine's
	if _, err := issuer.New(); err == nil {
		t.Error("New on an address of no interface of this machine's succeeded")
	}
	t.Setenv(issuer.AddressEnv, "")
	if e := newFront(t).Exposure(); e != "" {
		t.Errorf("a private front's exposure: %q, want none", e)
	}
}

// documentation tells whether ip is of the ranges a private front takes its address from.
func documentation(ip net.IP) bool {
	for _, n := range []string{"198.51.100.0/24", "203.0.113.0/24"} {
		if _, ipnet, _ := net.ParseCIDR(n); ipnet.Contains(ip) {
			return true
		}
	}
	return false
}

// peerOf is the host's end of a private front's link (the front's address + 1).
func peerOf(host string) string {
	ip := net.ParseIP(host).To4()
	return net.IPv4(ip[0], ip[1], ip[2], ip[3]+1).String()
}

// foreignSource is an IPv4 address of this machine's that is neither loopback nor peer, to send
// from as another host would; nil when there is none.
func foreignSource(t *testing.T, peer string) net.IP {
	t.Helper()
	for a := range local(t) {
		if ip := net.ParseIP(a); ip.To4() != nil && !ip.IsLoopback() && a != peer && !documentation(ip) {
			return ip
		}
	}
	return nil
}

// local are the addresses of this network namespace's interfaces.
func local(t *testing.T) map[string]bool {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			m[n.IP.String()] = true
		}
	}
	return m
}

// tcpListeners lists ip:port of the IPv4 TCP sockets listening in this network namespace.
func tcpListeners(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "0A" {
			continue
		}
		hexIP, hexPort, _ := strings.Cut(f[1], ":")
		raw, err := hex.DecodeString(hexIP)
		if err != nil || len(raw) != 4 {
			continue
		}
		port, _ := strconv.ParseUint(hexPort, 16, 16)
		out = append(out, fmt.Sprintf("%d.%d.%d.%d:%d", raw[3], raw[2], raw[1], raw[0], port))
	}
	return out
}

// TestLoadKeepsTheIssuer loads a front from a directory twice, as two runs of make run do: the
// second has the first's URL, thumbprint and CA (the OIDC provider and the roles the driver made
// trust them), and its serving certificate is signed by that CA for the front's address. The
// directory's files are the owner's only.
func TestLoadKeepsTheIssuer(t *testing.T) {
	t.Setenv(issuer.AddressEnv, "")
	dir := t.TempDir()
	first, err := issuer.Load(dir, "")
	if errors.Is(err, issuer.ErrUnavailable) {
		t.Skipf("no ServiceAccount issuer the IAM service would fetch can be published here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	// make run closes its front when it stops; the next run gets the same address.
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second, err := issuer.Load(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Close() })
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
