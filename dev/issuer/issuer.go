// Package issuer publishes a kube-apiserver's ServiceAccount token issuer where an object store's
// IAM service can fetch it: the OIDC discovery document and the JWKS (the API server's public
// signing keys), on https://<address>/<path>. The IAM service verifies every ServiceAccount token a
// workload exchanges (AssumeRoleWithWebIdentity) against these keys, so the tokens are the API
// server's own, with real signatures.
//
// Why not the API server's own address: the Versity IAM service, as AWS, accepts an OIDC provider
// only as https://host[/path] with no port (port 443), and refuses to fetch from loopback,
// private and link-local addresses (its guard against server-side request forgery), while a test
// API server listens on a free port of 127.0.0.1. The Front listens on port 443 of an address
// that guard accepts, and passes the two documents through from the API server's
// /.well-known/openid-configuration and /openid/v1/jwks, asked anonymously with the API server's
// CA, as the IAM service would ask a cluster's issuer: it is the load balancer or static site a
// cluster admin puts in front of the issuer (docs/install.md).
//
// Where: by default on an address no other host can reach, in a network namespace of the front's
// own (private.go), so that make run and the tests listen on nothing beyond loopback and what the
// project makes and removes. Only when asked, with the address of one of this machine's
// interfaces (AddressEnv, cosi-local's --issuer-address), does it publish there, for every host
// that reaches that address; it never picks such an address itself.
//
// Each private front has an address of its own, so fronts of several processes serve at once.
// Port 443 of a public address is one per machine: Serve holds it only while the IAM service may
// fetch (one token exchange), under a lock (lock.go) that every front of the machine takes
// first. The documents carry the path, so a front serves only its own API server's issuer.
package issuer

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // the OIDC thumbprint is SHA-1 by definition (AWS IAM, Versity)
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
)

// Port is the port an OIDC provider URL implies: it has none, so https's.
const Port = 443

// AddressEnv names the variable that, when set, is the address of one of this machine's
// interfaces on which New publishes its front instead of a private one: for every host that
// reaches it. New says so on standard error.
const AddressEnv = "COSI_ISSUER_ADDRESS"

// ErrUnavailable is returned by New when this machine cannot publish an issuer the IAM service
// would fetch: no network namespace for a private front (not root), or no permission to listen
// on Port of the address asked for. Tests that need a front skip, saying why.
var ErrUnavailable = errors.New("issuer: cannot publish a ServiceAccount issuer here")

// The API server's issuer documents, as kube-apiserver serves them (ServiceAccountIssuerDiscovery).
const (
	DiscoveryPath = "/.well-known/openid-configuration"
	JWKSPath      = "/openid/v1/jwks"
)

// Front publishes one API server's issuer. Its fields are set by New.
type Front struct {
	// URL is the issuer: https://<address>/<path>. It is the API server's
	// --service-account-issuer (the iss of its tokens) and the OIDC provider's URL.
	URL string
	// JWKSURI is the API server's --service-account-jwks-uri: the JWKS under URL, served by the
	// front (the discovery document names it).
	JWKSURI string
	// Thumbprint is the hex SHA-1 of the front's CA certificate, the top of the chain it presents:
	// the OIDC provider's ThumbprintList entry that makes the IAM service trust it.
	Thumbprint string
	// CA is the front's CA certificate, PEM.
	CA []byte

	address string        // ip:Port
	private *privateNS    // nil when the front publishes on an interface of the machine
	turn    chan struct{} // a private front's Serve, one at a time
	path    string
	cert    tls.Certificate

	mu          sync.Mutex
	backend     *http.Client
	backendHost string
}

// New prepares a front with a fresh path and a fresh CA, private (on an address of a network
// namespace of its own), or on the address AddressEnv names. It listens on nothing until Serve.
func New() (*Front, error) {
	ca, caKey, err := newCA(24 * time.Hour)
	if err != nil {
		return nil, err
	}
	f, err := front(os.Getenv(AddressEnv), nil, "/cosi-"+strings.ToLower(rand.Text()[:12]), ca, caKey, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	if e := f.Exposure(); e != "" {
		fmt.Fprintf(os.Stderr, "issuer: %s (%s=%s)\n", e, AddressEnv, os.Getenv(AddressEnv))
	}
	return f, nil
}

// Load is New for a front that outlives its process (make run): its path, CA and private
// address are kept in dir (made if missing, files of the owner only) and reused, so that the
// issuer's URL and thumbprint, which the object store's OIDC provider and every role the driver
// made trust, stay the same from one start to the next (unless another front took the address
// meanwhile). public, when set, is the address of one of this machine's interfaces to publish
// on instead (cosi-local's --issuer-address). The serving certificate is made anew for the
// address.
func Load(dir, public string) (*Front, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("issuer: %w", err)
	}
	pathFile, caFile, keyFile := filepath.Join(dir, "path"), filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	addressFile := filepath.Join(dir, "address")
	var preferred net.IP
	if b, err := os.ReadFile(addressFile); err == nil {
		if ip := net.ParseIP(strings.TrimSpace(string(b))); ip != nil && privateAddress(ip) {
			preferred = ip
		}
	}
	f, err := loadFront(dir, public, preferred, pathFile, caFile, keyFile)
	if err != nil {
		return nil, err
	}
	if f.private != nil {
		if err := os.WriteFile(addressFile, []byte(f.private.ip.String()+"\n"), 0o600); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("issuer: %w", err)
		}
	}
	return f, nil
}

func loadFront(dir, public string, preferred net.IP, pathFile, caFile, keyFile string) (*Front, error) {
	path, pathErr := os.ReadFile(pathFile)
	caPEM, caErr := os.ReadFile(caFile)
	keyPEM, keyErr := os.ReadFile(keyFile)
	if pathErr == nil && caErr == nil && keyErr == nil {
		ca, caKey, err := parseCA(caPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("issuer: %s: %w (remove the directory to start with a new issuer)", dir, err)
		}
		return front(public, preferred, strings.TrimSpace(string(path)), ca, caKey, 365*24*time.Hour)
	}
	for _, err := range []error{pathErr, caErr, keyErr} {
		if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("issuer: %w", err)
		}
	}
	ca, caKey, err := newCA(10 * 365 * 24 * time.Hour)
	if err != nil {
		return nil, err
	}
	f, err := front(public, preferred, "/cosi-"+strings.ToLower(rand.Text()[:12]), ca, caKey, 365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("issuer: %w", err)
	}
	for file, data := range map[string][]byte{
		pathFile: []byte(f.path + "\n"),
		caFile:   f.CA,
		keyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}),
	} {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("issuer: %w", err)
		}
	}
	return f, nil
}

// front is a front at path, serving a certificate signed by ca, valid for validity: on public
// when set, else private (on preferred if it is free).
func front(
	public string, preferred net.IP, path string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, validity time.Duration,
) (*Front, error) {
	f := &Front{path: path, turn: make(chan struct{}, 1)}
	var ip net.IP
	if public != "" {
		var err error
		if ip, err = publicAddress(public); err != nil {
			return nil, err
		}
		f.address = net.JoinHostPort(ip.String(), fmt.Sprint(Port))
		if err := checkListen(f.address); err != nil {
			return nil, err
		}
	} else {
		p, err := newPrivate(preferred)
		if err != nil {
			return nil, err
		}
		f.private, ip = p, p.ip
		f.address = net.JoinHostPort(ip.String(), fmt.Sprint(Port))
	}
	cert, err := serving(ip, ca, caKey, validity)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	sum := sha1.Sum(ca.Raw) //nolint:gosec // see the import
	host := ip.String()
	if ip.To4() == nil {
		host = "[" + host + "]"
	}
	f.URL = "https://" + host + path
	f.JWKSURI = f.URL + JWKSPath
	f.Thumbprint = hex.EncodeToString(sum[:])
	f.CA = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	f.cert = cert
	return f, nil
}

// Exposure says what a front publishes beyond this machine, for its user to read: empty for a
// private front, which nothing but this machine reaches.
func (f *Front) Exposure() string {
	if f.private != nil {
		return ""
	}
	return fmt.Sprintf("publishing the API server's ServiceAccount issuer (its discovery document and public "+
		"signing keys, anonymously, over TLS) on %s while it serves, for every host that reaches that address", f.address)
}

// AllowFrom lets clients of network (CIDR) reach a private front: its namespace answers only
// this machine's end of its link, and the Pods of a test node (dev/cluster) come from their Pod
// network. A public front answers everyone already.
func (f *Front) AllowFrom(network string) error {
	if f.private == nil {
		return nil
	}
	return f.private.allowFrom(network)
}

// Close removes a private front's namespace and frees its address. The front must not serve.
func (f *Front) Close() error {
	if f.private == nil {
		return nil
	}
	return f.private.Close()
}

// publicAddress checks that s is an address of one of this machine's interfaces.
func publicAddress(s string) (net.IP, error) {
	ip := net.ParseIP(s)
	if ip == nil {
		return nil, fmt.Errorf("issuer: %q (%s, --issuer-address) is no IP address", s, AddressEnv)
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("%w: listing the interfaces' addresses: %w", ErrUnavailable, err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return ip, nil
		}
	}
	return nil, fmt.Errorf("issuer: %s (%s, --issuer-address) is not an address of this machine's interfaces", s,
		AddressEnv)
}

// checkListen returns ErrUnavailable when this process may not listen on address, and an error
// at once when a process that is no front listens there. An address in use by a front (which
// holds its lock) is fine: Serve waits for it.
func checkListen(address string) error {
	l, err := net.Listen("tcp", address)
	switch {
	case err == nil:
		return l.Close()
	case isAddrInUse(err):
		held, lockErr := tryLock(lockName(address))
		if lockErr != nil {
			return nil // a front serves there for a moment
		}
		_ = held.Close()
		return inUse(address, err)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return fmt.Errorf("%w: listening on %s needs root or CAP_NET_BIND_SERVICE: %w", ErrUnavailable, address, err)
	}
	return fmt.Errorf("%w: listening on %s: %w", ErrUnavailable, address, err)
}

// inUse is the error for a process that is no front listening on address.
func inUse(address string, err error) error {
	return fmt.Errorf("issuer: %s is in use by a process that is not an issuer front "+
		"(ss -ltnp 'sport = :%d' names it): %w", address, Port, err)
}

func isAddrInUse(err error) bool { return errors.Is(err, syscall.EADDRINUSE) }

// newCA makes a CA valid for validity. The front presents it after its serving certificate, so
// that the CA is the top of its chain: the certificate the IAM service's thumbprint pins.
func newCA(validity time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cosi test issuer CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, err
	}
	return ca, caKey, nil
}

// parseCA reads a CA newCA made and Load saved.
func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("the CA certificate or key is not PEM")
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	if !key.PublicKey.Equal(ca.PublicKey) {
		return nil, nil, errors.New("the CA key does not match its certificate")
	}
	if time.Now().After(ca.NotAfter) {
		return nil, nil, fmt.Errorf("the CA expired on %s", ca.NotAfter.Format(time.DateOnly))
	}
	return ca, key, nil
}

// serving makes a serving certificate for ip signed by ca, valid for validity, and returns it
// with ca after it.
func serving(
	ip net.IP, ca *x509.Certificate, caKey *ecdsa.PrivateKey, validity time.Duration,
) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: ip.String()},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity),
		IPAddresses: []net.IP{ip}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if leaf.NotAfter.After(ca.NotAfter) {
		leaf.NotAfter = ca.NotAfter
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{leafDER, ca.Raw}, PrivateKey: key}, nil
}

// SetBackend names the API server whose documents the front serves: cfg's host, verified with
// cfg's CA, asked anonymously (cfg's credentials are not used), as the IAM service asks.
func (f *Front) SetBackend(cfg *rest.Config) error {
	rt, err := rest.TransportFor(rest.AnonymousClientConfig(cfg))
	if err != nil {
		return fmt.Errorf("issuer: a client for the API server: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backend = &http.Client{Transport: rt, Timeout: 10 * time.Second}
	f.backendHost = strings.TrimSuffix(cfg.Host, "/")
	return nil
}

// ServeHTTP passes the issuer's two documents through from the API server.
func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var target string
	switch r.URL.Path {
	case f.path + DiscoveryPath:
		target = DiscoveryPath
	case f.path + JWKSPath:
		target = JWKSPath
	default:
		http.NotFound(w, r)
		return
	}
	f.mu.Lock()
	backend, host := f.backend, f.backendHost
	f.mu.Unlock()
	if backend == nil {
		http.Error(w, "no API server behind this issuer yet", http.StatusServiceUnavailable)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, host+target, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	resp, err := backend.Do(req)
	if err != nil {
		http.Error(w, "asking the API server: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// Serve publishes the issuer while fn runs: it takes its turn (a public front: the machine-wide
// lock of its address, waiting while another front holds it, until ctx ends), listens, runs fn,
// and stops listening. fn is what makes the IAM service fetch the documents (a token exchange).
// A process that is no front and listens on the address is reported at once. Serve must not be
// called from inside fn: the turn is not reentrant.
func (f *Front) Serve(ctx context.Context, fn func(ctx context.Context) error) error {
	release, err := f.take(ctx)
	if err != nil {
		return err
	}
	defer release()
	var l net.Listener
	if f.private != nil {
		l, err = f.private.listen(f.address)
	} else {
		l, err = net.Listen("tcp", f.address)
	}
	if isAddrInUse(err) {
		return inUse(f.address, err)
	}
	if err != nil {
		return fmt.Errorf("issuer: %w", err)
	}
	srv := &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{f.cert}, MinVersion: tls.VersionTLS12}))
	}()
	fnErr := fn(ctx)
	closeErr := srv.Close()
	<-done
	return errors.Join(fnErr, closeErr)
}

// take waits for the front's turn to serve: its own for a private front (its address is its
// own), the machine's lock of the address for a public one.
func (f *Front) take(ctx context.Context) (release func(), err error) {
	if f.private != nil {
		select {
		case f.turn <- struct{}{}:
			return func() { <-f.turn }, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("issuer: waiting for the front's other Serve: %w", ctx.Err())
		}
	}
	l, err := lock(ctx, lockName(f.address))
	if err != nil {
		return nil, err
	}
	return func() { _ = l.Close() }, nil
}
