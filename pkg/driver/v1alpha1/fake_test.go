package v1alpha1_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// The values the fake puts in every credential it grants: a test greps logs and answers for them.
const (
	fakeKeyID  = "AKIDFAKE7f3c"
	fakeSecret = "fake-secret-9d1e2b7a"
)

// fakeV1 is a FAKE v1alpha1 driver: a scripted gRPC server, not a driver. It exists because the
// answers these tests need (ALREADY_EXISTS on a repeated call, IDs other than the names given,
// failed revocations, credentials for another protocol) come from real drivers that cannot run
// here; the reference v1alpha1 driver (drivers/v1alpha1s3) never gives them. Unscripted, it
// answers as a correct driver does. It keeps what exists in its "backend" (buckets and accounts,
// by the IDs it returned), so a test can tell whether anything outlived the calls that made it.
type fakeV1 struct {
	v1.UnimplementedIdentityServer
	v1.UnimplementedProvisionerServer

	// Scripts: when set, each answers call n (from 1) of its method instead of the default; an
	// answer of (nil, nil) falls back to the default. They run with mu held: they may change
	// buckets and accounts directly, and must not call the fake.
	info   func(n int) error
	create func(n int, req *v1.DriverCreateBucketRequest) (*v1.DriverCreateBucketResponse, error)
	del    func(n int, req *v1.DriverDeleteBucketRequest) error
	grant  func(n int, req *v1.DriverGrantBucketAccessRequest) (*v1.DriverGrantBucketAccessResponse, error)
	revoke func(n int, req *v1.DriverRevokeBucketAccessRequest) error

	mu       sync.Mutex
	calls    map[string]int
	buckets  map[string]bool
	accounts map[string]bool
	// params are the parameters each call received, by method, in order.
	params map[string][]map[string]string
}

func newFake() *fakeV1 {
	return &fakeV1{
		calls:    map[string]int{},
		buckets:  map[string]bool{},
		accounts: map[string]bool{},
		params:   map[string][]map[string]string{},
	}
}

func (f *fakeV1) count(method string, params map[string]string) int {
	f.calls[method]++
	f.params[method] = append(f.params[method], maps.Clone(params))
	return f.calls[method]
}

func (f *fakeV1) DriverGetInfo(context.Context, *v1.DriverGetInfoRequest) (*v1.DriverGetInfoResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.count("DriverGetInfo", nil)
	if f.info != nil {
		if err := f.info(n); err != nil {
			return nil, err
		}
	}
	return &v1.DriverGetInfoResponse{Name: "fake.v1alpha1.example.com"}, nil
}

func (f *fakeV1) DriverCreateBucket(
	_ context.Context,
	req *v1.DriverCreateBucketRequest,
) (*v1.DriverCreateBucketResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.count("DriverCreateBucket", req.GetParameters())
	if f.create != nil {
		if resp, err := f.create(n, req); resp != nil || err != nil {
			return resp, err
		}
	}
	f.buckets[req.GetName()] = true
	return &v1.DriverCreateBucketResponse{BucketId: req.GetName()}, nil
}

func (f *fakeV1) DriverDeleteBucket(
	_ context.Context,
	req *v1.DriverDeleteBucketRequest,
) (*v1.DriverDeleteBucketResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.count("DriverDeleteBucket", req.GetDeleteContext())
	if f.del != nil {
		if err := f.del(n, req); err != nil {
			return nil, err
		}
	}
	if !f.buckets[req.GetBucketId()] {
		return nil, status.Error(codes.NotFound, "no such bucket")
	}
	delete(f.buckets, req.GetBucketId())
	return &v1.DriverDeleteBucketResponse{}, nil
}

func (f *fakeV1) DriverGrantBucketAccess(
	_ context.Context,
	req *v1.DriverGrantBucketAccessRequest,
) (*v1.DriverGrantBucketAccessResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.count("DriverGrantBucketAccess", req.GetParameters())
	if f.grant != nil {
		if resp, err := f.grant(n, req); resp != nil || err != nil {
			return resp, err
		}
	}
	f.accounts[req.GetName()] = true
	return &v1.DriverGrantBucketAccessResponse{AccountId: req.GetName(), Credentials: s3Credentials()}, nil
}

func (f *fakeV1) DriverRevokeBucketAccess(
	_ context.Context,
	req *v1.DriverRevokeBucketAccessRequest,
) (*v1.DriverRevokeBucketAccessResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.count("DriverRevokeBucketAccess", req.GetRevokeAccessContext())
	if f.revoke != nil {
		if err := f.revoke(n, req); err != nil {
			return nil, err
		}
	}
	if !f.accounts[req.GetAccountId()] {
		return nil, status.Error(codes.NotFound, "no such account")
	}
	delete(f.accounts, req.GetAccountId())
	return &v1.DriverRevokeBucketAccessResponse{}, nil
}

// state returns what exists in the fake's backend and how often each method was called.
func (f *fakeV1) state() (buckets, accounts []string, calls map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.buckets)), slices.Sorted(maps.Keys(f.accounts)), maps.Clone(f.calls)
}

// paramsOf returns the parameters each call of method received, in order.
func (f *fakeV1) paramsOf(method string) []map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.params[method])
}

// s3Credentials are a complete S3 grant, under the upstream v1alpha1 sidecar's keys.
func s3Credentials() map[string]*v1.CredentialDetails {
	return map[string]*v1.CredentialDetails{v1alpha1.CredentialsS3: {Secrets: map[string]string{
		v1alpha1.S3AccessKeyID:     fakeKeyID,
		v1alpha1.S3AccessSecretKey: fakeSecret,
		v1alpha1.S3Endpoint:        "https://s3.fake.example.com",
		v1alpha1.S3Region:          "fake-1",
	}}}
}

// syncBuffer is a log sink's buffer that the test reads while the client may still write.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) line(prefix, args string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Fprintln(&b.buf, prefix, args)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// serveFake serves f on a Unix socket in a temporary directory and returns the sidecar's
// production client for it, probed (which detects v1alpha1 and puts the adapter in place), and
// the client's log, written at every verbosity the client has.
func serveFake(t *testing.T, f *fakeV1) (*driverclient.Client, *syncBuffer) {
	t.Helper()
	return serveFakeWith(t, f, v1alpha1.Options{})
}

// serveFakeWith is serveFake with an adapter configured by opts, as the sidecar's flags do.
func serveFakeWith(t *testing.T, f *fakeV1, opts v1alpha1.Options) (*driverclient.Client, *syncBuffer) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "fake.sock")
	srv := grpc.NewServer()
	v1.RegisterIdentityServer(srv, f)
	v1.RegisterProvisionerServer(srv, f)
	serve(t, srv, sock)
	c, logs := probeWith(t, sock, opts)
	if c.Protocol() != driverclient.ProtocolV1alpha1 {
		t.Fatalf("Probe settled on %q, want %q", c.Protocol(), driverclient.ProtocolV1alpha1)
	}
	return c, logs
}

// serve serves srv on the Unix socket sock until the test ends.
func serve(t *testing.T, srv *grpc.Server, sock string) {
	t.Helper()
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
}

// probe returns the sidecar's production client for the driver on sock, probed, and its log.
func probe(t *testing.T, sock string) (*driverclient.Client, *syncBuffer) {
	t.Helper()
	return probeWith(t, sock, v1alpha1.Options{})
}

// probeWith is probe with the adapter's options.
func probeWith(t *testing.T, sock string, opts v1alpha1.Options) (*driverclient.Client, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	log := funcr.New(logs.line, funcr.Options{Verbosity: 10})
	c, err := driverclient.New("unix://"+sock,
		driverclient.Options{Logger: log, CallTimeout: 5 * time.Second, V1alpha1: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := c.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	return c, logs
}

// finalForGrant mirrors the sidecar's classifier (internal/sidecar, rpcError.retryable) for create
// and grant: these codes stop retrying until the object changes; every other one is retried.
func finalForGrant(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.AlreadyExists, codes.OutOfRange, codes.Unimplemented:
		return true
	}
	return false
}

// createRequest asks for bucket bc-1.
func createRequest() *cosiproto.DriverCreateBucketRequest {
	return &cosiproto.DriverCreateBucketRequest{
		BucketId:   "bc-1",
		Protocols:  []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3},
		Parameters: map[string]string{"tier": "gold"},
	}
}

// grantRequest asks for an account on bucket bc-1.
func grantRequest(accountID string, modes *cosiproto.AccessModes) *cosiproto.DriverGrantBucketAccessRequest {
	return &cosiproto.DriverGrantBucketAccessRequest{
		AccountId:          accountID,
		Buckets:            []*cosiproto.AccessedBucket{{BucketId: "bc-1", AccessModes: modes}},
		Protocol:           cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
		Parameters:         map[string]string{"policy": "rw"},
	}
}

var readWrite = &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}
