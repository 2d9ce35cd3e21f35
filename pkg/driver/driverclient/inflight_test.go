package driverclient_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// How many driver calls the client lets be in flight per bucket (docs/sidecar.md): the v1alpha1
// spec makes its callers ensure "no more than one call in-flight per Bucket"; KEP-1979 says
// nothing, so for a v1alpha2 driver the client applies it where it costs no throughput.

// gate is a driver (either protocol) whose calls wait until the test lets them go. It records which
// calls reached it and how many were in flight at once on each bucket.
type gate struct {
	entered chan string // each call's description, when it reaches the driver

	mu       sync.Mutex
	inFlight map[string]int
	most     map[string]int
	releases map[string]chan struct{} // by description
}

func newGate() *gate {
	return &gate{
		entered:  make(chan string, 100),
		inFlight: map[string]int{}, most: map[string]int{}, releases: map[string]chan struct{}{},
	}
}

// releaseOf returns the channel on which the call described so is let go.
func (g *gate) releaseOf(what string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.releases[what] == nil {
		g.releases[what] = make(chan struct{}, 1)
	}
	return g.releases[what]
}

// let lets the call described so answer.
func (g *gate) let(what string) { g.releaseOf(what) <- struct{}{} }

// call is one call reaching the driver: it waits for a release (or its context's end).
func (g *gate) call(ctx context.Context, what string, buckets ...string) error {
	g.mu.Lock()
	for _, b := range buckets {
		g.inFlight[b]++
		g.most[b] = max(g.most[b], g.inFlight[b])
	}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, b := range buckets {
			g.inFlight[b]--
		}
	}()
	g.entered <- what
	select {
	case <-g.releaseOf(what):
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// mostInFlight returns the most calls that were in flight at once on bucket.
func (g *gate) mostInFlight(bucket string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.most[bucket]
}

// wait returns the description of the next call that reaches the driver.
func (g *gate) wait(t *testing.T) string {
	t.Helper()
	select {
	case what := <-g.entered:
		return what
	case <-t.Context().Done():
		t.Fatal("no call reached the driver")
		return ""
	}
}

// none fails the test if a call reached the driver that the test did not wait for.
func (g *gate) none(t *testing.T) {
	t.Helper()
	select {
	case what := <-g.entered:
		t.Errorf("%s reached the driver while another call was in flight on its bucket", what)
	default:
	}
}

// gateV1 serves the gate as a v1alpha1 driver.
type gateV1 struct {
	v1.UnimplementedIdentityServer
	v1.UnimplementedProvisionerServer
	*gate
}

func (g gateV1) DriverGetInfo(context.Context, *v1.DriverGetInfoRequest) (*v1.DriverGetInfoResponse, error) {
	return &v1.DriverGetInfoResponse{Name: "gate.example.com"}, nil
}

func (g gateV1) DriverCreateBucket(
	ctx context.Context,
	req *v1.DriverCreateBucketRequest,
) (*v1.DriverCreateBucketResponse, error) {
	if err := g.call(ctx, "create "+req.GetName(), req.GetName()); err != nil {
		return nil, err
	}
	return &v1.DriverCreateBucketResponse{BucketId: req.GetName()}, nil
}

func (g gateV1) DriverDeleteBucket(
	ctx context.Context,
	req *v1.DriverDeleteBucketRequest,
) (*v1.DriverDeleteBucketResponse, error) {
	if err := g.call(ctx, "delete "+req.GetBucketId(), req.GetBucketId()); err != nil {
		return nil, err
	}
	return &v1.DriverDeleteBucketResponse{}, nil
}

func (g gateV1) DriverGrantBucketAccess(
	ctx context.Context,
	req *v1.DriverGrantBucketAccessRequest,
) (*v1.DriverGrantBucketAccessResponse, error) {
	if err := g.call(ctx, fmt.Sprintf("grant %s on %s", req.GetName(), req.GetBucketId()), req.GetBucketId()); err != nil {
		return nil, err
	}
	return &v1.DriverGrantBucketAccessResponse{AccountId: req.GetName(), Credentials: map[string]*v1.CredentialDetails{
		"s3": {Secrets: map[string]string{
			"accessKeyID": "AKID", "accessSecretKey": "secret", "endpoint": "https://s3.example.com", "region": "r1",
		}},
	}}, nil
}

func (g gateV1) DriverRevokeBucketAccess(
	ctx context.Context,
	req *v1.DriverRevokeBucketAccessRequest,
) (*v1.DriverRevokeBucketAccessResponse, error) {
	what := fmt.Sprintf("revoke %s on %s", req.GetAccountId(), req.GetBucketId())
	if err := g.call(ctx, what, req.GetBucketId()); err != nil {
		return nil, err
	}
	return &v1.DriverRevokeBucketAccessResponse{}, nil
}

// gateV2 serves the gate as a v1alpha2 driver.
type gateV2 struct {
	cosiproto.UnimplementedIdentityServer
	cosiproto.UnimplementedProvisionerServer
	*gate
}

func (g gateV2) DriverGetInfo(
	context.Context,
	*cosiproto.DriverGetInfoRequest,
) (*cosiproto.DriverGetInfoResponse, error) {
	return &cosiproto.DriverGetInfoResponse{
		Name: "gate.example.com", SupportedProtocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3},
	}, nil
}

func (g gateV2) DriverDeleteBucket(
	ctx context.Context,
	req *cosiproto.DriverDeleteBucketRequest,
) (*cosiproto.DriverDeleteBucketResponse, error) {
	if err := g.call(ctx, "delete "+req.GetBucketId(), req.GetBucketId()); err != nil {
		return nil, err
	}
	return &cosiproto.DriverDeleteBucketResponse{}, nil
}

func (g gateV2) DriverGrantBucketAccess(
	ctx context.Context,
	req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	var ids []string
	for _, b := range req.GetBuckets() {
		ids = append(ids, b.GetBucketId())
	}
	if err := g.call(ctx, fmt.Sprintf("grant %s on %v", req.GetAccountId(), ids), ids...); err != nil {
		return nil, err
	}
	return &cosiproto.DriverGrantBucketAccessResponse{}, nil
}

// serveGate serves srv's services on a Unix socket and returns the sidecar's client, probed.
func serveGate(t *testing.T, register func(*grpc.Server)) *driverclient.Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "gate.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	c := connect(t, "unix://"+sock, driverclient.Options{Logger: logr.Discard()})
	if _, err := c.Probe(t.Context()); err != nil {
		t.Fatal(err)
	}
	return c
}

// async runs call in the background; its error is sent on the returned channel.
func async(call func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- call() }()
	return done
}

// briefly is a context for a call that must give up waiting: it ends while the call it waits for is
// held in the driver, whatever the machine's speed, so the test does not time anything.
func briefly(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func grantV2(account string, buckets ...string) *cosiproto.DriverGrantBucketAccessRequest {
	req := &cosiproto.DriverGrantBucketAccessRequest{
		AccountId: account, Protocol: cosiproto.ObjectProtocol_S3, AuthenticationType: cosiproto.AuthenticationType_KEY,
	}
	for _, b := range buckets {
		req.Buckets = append(req.Buckets, &cosiproto.AccessedBucket{
			BucketId: b, AccessModes: &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE},
		})
	}
	return req
}

func revokeV2(account, bucket string) *cosiproto.DriverRevokeBucketAccessRequest {
	return &cosiproto.DriverRevokeBucketAccessRequest{
		AccountId: account, Buckets: []*cosiproto.DriverRevokeBucketAccessRequest_Bucket{{BucketId: bucket}},
		Protocol: cosiproto.ObjectProtocol_S3, AuthenticationType: cosiproto.AuthenticationType_KEY,
	}
}

// A v1alpha1 driver: while one call is in flight on a bucket, no other call on that bucket reaches
// the driver; a call whose deadline passes while it waits fails DEADLINE_EXCEEDED without reaching
// it; calls on other buckets go on; the waiting call goes once the first answers.
func TestOneCallInFlightPerBucketV1alpha1(t *testing.T) {
	g := gateV1{gate: newGate()}
	c := serveGate(t, func(srv *grpc.Server) {
		v1.RegisterIdentityServer(srv, g)
		v1.RegisterProvisionerServer(srv, g)
	})
	if c.Protocol() != driverclient.ProtocolV1alpha1 {
		t.Fatalf("protocol %q", c.Protocol())
	}
	ctx := t.Context()
	grant := async(func() error { _, err := c.DriverGrantBucketAccess(ctx, grantV2("ba-1", "b1")); return err })
	if what := g.wait(t); what != "grant ba-1 on b1" {
		t.Fatalf("%s reached the driver, want the grant", what)
	}
	// Another bucket is not held up.
	other := async(func() error {
		_, err := c.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: "b2"})
		return err
	})
	if what := g.wait(t); what != "create b2" {
		t.Fatalf("%s reached the driver, want the creation of b2", what)
	}
	// Calls on b1 wait: those that give up never reach the driver.
	for name, call := range map[string]func(context.Context) error{
		"revoke of another account": func(ctx context.Context) error {
			_, err := c.DriverRevokeBucketAccess(ctx, revokeV2("ba-2", "b1"))
			return err
		},
		"grant of another account": func(ctx context.Context) error {
			_, err := c.DriverGrantBucketAccess(ctx, grantV2("ba-3", "b1"))
			return err
		},
		"deletion": func(ctx context.Context) error {
			_, err := c.DriverDeleteBucket(ctx, &cosiproto.DriverDeleteBucketRequest{BucketId: "b1"})
			return err
		},
	} {
		if err := call(briefly(t)); status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("%s on b1 while a grant is in flight, its deadline passed: %v, want DEADLINE_EXCEEDED", name, err)
		}
		g.none(t)
	}
	deletion := async(func() error {
		_, err := c.DriverDeleteBucket(ctx, &cosiproto.DriverDeleteBucketRequest{BucketId: "b1"})
		return err
	})
	g.let("grant ba-1 on b1")
	g.let("create b2")
	for _, done := range []<-chan error{grant, other} {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	if what := g.wait(t); what != "delete b1" {
		t.Fatalf("%s reached the driver, want the deletion that waited", what)
	}
	g.let("delete b1")
	if err := <-deletion; err != nil {
		t.Error(err)
	}
	if n := g.mostInFlight("b1"); n != 1 {
		t.Errorf("%d calls were in flight at once on b1, want 1", n)
	}
}

// A v1alpha2 driver: grants of different accounts on one bucket may be in flight together (a
// bucket with many accesses is not granted one at a time), but not two calls for one account, and
// a bucket's own calls (create, get, delete) wait for every call on it.
func TestOneCallInFlightPerBucketV1alpha2(t *testing.T) {
	g := gateV2{gate: newGate()}
	c := serveGate(t, func(srv *grpc.Server) {
		cosiproto.RegisterIdentityServer(srv, g)
		cosiproto.RegisterProvisionerServer(srv, g)
	})
	if c.Protocol() != driverclient.ProtocolV1alpha2 {
		t.Fatalf("protocol %q", c.Protocol())
	}
	ctx := t.Context()
	var grants []<-chan error
	for _, account := range []string{"ba-1", "ba-2"} {
		grants = append(grants, async(func() error {
			_, err := c.DriverGrantBucketAccess(ctx, grantV2(account, "b1"))
			return err
		}))
		if what := g.wait(t); what != "grant "+account+" on [b1]" {
			t.Fatalf("%s reached the driver, want the grant of %s", what, account)
		}
	}
	for name, call := range map[string]func(context.Context) error{
		"deletion of b1": func(ctx context.Context) error {
			_, err := c.DriverDeleteBucket(ctx, &cosiproto.DriverDeleteBucketRequest{BucketId: "b1"})
			return err
		},
		"second grant of ba-1 (to b2 and b1)": func(ctx context.Context) error {
			_, err := c.DriverGrantBucketAccess(ctx, grantV2("ba-1", "b2", "b1"))
			return err
		},
	} {
		if err := call(briefly(t)); status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("%s while grants on b1 are in flight, its deadline passed: %v, want DEADLINE_EXCEEDED", name, err)
		}
		g.none(t)
	}
	g.let("grant ba-1 on [b1]")
	g.let("grant ba-2 on [b1]")
	for _, done := range grants {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	if n := g.mostInFlight("b1"); n != 2 {
		t.Errorf("%d calls were in flight at once on b1, want the 2 grants", n)
	}
}
