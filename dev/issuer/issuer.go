// Package issuer publishes a kube-apiserver's ServiceAccount token issuer where an object store's
// IAM service can fetch it: the OIDC discovery document and the JWKS (the API server's public
// signing keys), on https://<address>/<path>. The IAM service verifies every ServiceAccount token a
// workload exchanges (AssumeRoleWithWebIdentity) against these keys, so the tokens are the API
// server's own, with real signatures.
//
// Why not the API server's own address: the Versity IAM service, as AWS, accepts an OIDC provider
// only as https://host[/path] with no port (port 443), and refuses to fetch from loopback,
// private and link-local addresses (its guard against server-side request forgery), while a test
// API server listens on a free port of 127.0.0.1. The Front listens on a local address that guard
// accepts, port 443, and passes the two documents through from the API server's
// /.well-known/openid-configuration and /openid/v1/jwks, asked anonymously with the API server's
// CA, as the IAM service would ask a cluster's issuer: it is the load balancer or static site a
// cluster admin puts in front of the issuer (docs/install.md).
//
// Port 443 of an address is one per machine, and tests run in several processes at once: Serve
// holds it only while the IAM service may fetch (one token exchange), under a lock file that
// every process of the machine takes first. The documents carry the path, so a front serves only
// its own API server's issuer.
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

// ErrUnavailable is returned by New when this machine cannot publish an issuer the IAM service
// would fetch: no local address outside the ranges it refuses, or no permission to listen on
// Port. Tests that need a front skip, saying why.
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

	address string // ip:Port
	path    string
	cert    tls.Certificate

	mu          sync.Mutex
	backend     *http.Client
	backendHost string
}

// New prepares a front on this machine's first usable address (Address), with a fresh path and
// a fresh CA. It listens on nothing until Serve.
func New() (*Front, error) {
	ca, caKey, err := newCA(24 * time.Hour)
	if err != nil {
		return nil, err
	}
	return front("/cosi-"+strings.ToLower(rand.Text()[:12]), ca, caKey, 24*time.Hour)
}

// Load is New for a front that outlives its process (make run): its path and CA are kept in dir
// (made if missing, files of the owner only) and reused, so that the issuer's URL and thumbprint,
// which the object store's OIDC provider and every role the driver made trust, stay the same
// from one start to the next on the same address. The serving certificate is made anew for the
// current address.
func Load(dir string) (*Front, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("issuer: %w", err)
	}
	pathFile, caFile, keyFile := filepath.Join(dir, "path"), filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	path, pathErr := os.ReadFile(pathFile)
	caPEM, caErr := os.ReadFile(caFile)
	keyPEM, keyErr := os.ReadFile(keyFile)
	if pathErr == nil && caErr == nil && keyErr == nil {
		ca, caKey, err := parseCA(caPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("issuer: %s: %w (remove the directory to start with a new issuer)", dir, err)
		}
		return front(strings.TrimSpace(string(path)), ca, caKey, 365*24*time.Hour)
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
	f, err := front("/cosi-"+strings.ToLower(rand.Text()[:12]), ca, caKey, 365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		return nil, fmt.Errorf("issuer: %w", err)
	}
	for file, data := range map[string][]byte{
		pathFile: []byte(f.path + "\n"),
		caFile:   f.CA,
		keyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}),
	} {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			return nil, fmt.Errorf("issuer: %w", err)
		}
	}
	return f, nil
}

// front is a front on this machine's first usable address at path, serving a certificate signed
// by ca, valid for validity.
func front(path string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, validity time.Duration) (*Front, error) {
	ip, err := Address()
	if err != nil {
		return nil, err
	}
	address := net.JoinHostPort(ip.String(), fmt.Sprint(Port))
	if err := checkListen(address); err != nil {
		return nil, err
	}
	cert, err := serving(ip, ca, caKey, validity)
	if err != nil {
		return nil, err
	}
	sum := sha1.Sum(ca.Raw) //nolint:gosec // see the import
	host := ip.String()
	if ip.To4() == nil {
		host = "[" + host + "]"
	}
	url := "https://" + host + path
	return &Front{
		URL:        url,
		JWKSURI:    url + JWKSPath,
		Thumbprint: hex.EncodeToString(sum[:]),
		CA:         pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}),
		address:    address,
		path:       path,
		cert:       cert,
	}, nil
}

// Address returns the first address of this machine's interfaces that the Versity IAM service
// would fetch an issuer from: not loopback, private (RFC 1918, fc00::/7), link-local, multicast or
// unspecified. ErrUnavailable when there is none.
func Address() (net.IP, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("%w: listing the interfaces' addresses: %w", ErrUnavailable, err)
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip := n.IP
		if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
			ip.IsUnspecified() || ip.IsMulticast() {
			continue
		}
		return ip, nil
	}
	return nil, fmt.Errorf("%w: no local address outside loopback, private and link-local ranges "+
		"(the IAM service refuses to fetch an OIDC issuer from those)", ErrUnavailable)
}

// checkListen returns ErrUnavailable when this process may not listen on address. An address in
// use is fine: another front holds it for a moment (Serve waits).
func checkListen(address string) error {
	l, err := net.Listen("tcp", address)
	switch {
	case err == nil:
		return l.Close()
	case errors.Is(err, syscall.EADDRINUSE):
		return nil
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return fmt.Errorf("%w: listening on %s needs root or CAP_NET_BIND_SERVICE: %w", ErrUnavailable, address, err)
	}
	return fmt.Errorf("%w: listening on %s: %w", ErrUnavailable, address, err)
}

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

// Serve publishes the issuer while fn runs: it takes the machine-wide lock of the front's address
// (waiting while another front holds it, until ctx ends), listens on it, runs fn, and stops
// listening. fn is what makes the IAM service fetch the documents (a token exchange). Serve must
// not be called from inside fn: the lock is not reentrant.
func (f *Front) Serve(ctx context.Context, fn func(ctx context.Context) error) error {
	unlock, err := lock(ctx, filepath.Join(lockDir(), "cosi-issuer-"+strings.NewReplacer(":", "_", "[", "", "]", "").
		Replace(f.address)+".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	l, err := listen(ctx, f.address)
	if err != nil {
		return err
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

// lockDir is where the lock files are: /tmp, whatever a process's $TMPDIR, so that every
// process of the machine finds the same file.
func lockDir() string {
	if info, err := os.Stat("/tmp"); err == nil && info.IsDir() {
		return "/tmp"
	}
	return os.TempDir()
}

// listenAttempts bounds how long listen waits for the address: with the lock held, only a
// process that is not a front can hold it, and that one may never let go.
const listenAttempts = 100

// listen listens on address, waiting a while (up to listenAttempts tries, 100 ms apart) while it
// is in use.
func listen(ctx context.Context, address string) (net.Listener, error) {
	for range listenAttempts {
		l, err := net.Listen("tcp", address)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("issuer: %s in use: %w", address, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("issuer: %s stays in use by a process that is not an issuer front", address)
}

// lock takes an exclusive flock on path, polling until ctx ends. Locks of one process on two
// descriptors exclude each other too, so parallel tests take turns.
func lock(ctx context.Context, path string) (unlock func(), err error) {
	file, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("issuer: lock file: %w", err)
	}
	for {
		err := syscall.Flock(int(file.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(file.Fd()), syscall.LOCK_UN)
				_ = file.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = file.Close()
			return nil, fmt.Errorf("issuer: locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = file.Close()
			return nil, fmt.Errorf("issuer: waiting for %s: %w", path, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
