// Command ref-driver is a no-op COSI driver for the reference implementation's protocol
// (sigs.k8s.io.cosi.v1alpha2, the proto module of kubernetes-sigs/container-object-storage-interface),
// for cosi-bench's side-by-side mode (docs/benchmark.md): the counterpart of cosi-driver-memory, so
// that the reference's controller and sidecar are measured, not a backend. It keeps its buckets and
// accounts in memory, answers every call at once, and makes up an endpoint and keys.
//
// It is this project's code, built outside the repository against the reference's proto module
// (hack/reference/build.sh puts the two together in a Go workspace): the reference's code is never
// part of this repository.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	refproto "sigs.k8s.io/container-object-storage-interface/proto"
)

// endpointEnv names the variable that holds the driver's socket, as the reference's sidecar reads it.
const endpointEnv = "COSI_ENDPOINT"

func main() {
	endpoint := flag.String("endpoint", os.Getenv(endpointEnv),
		"unix:///path/to/driver.sock to serve on (default $"+endpointEnv+")")
	name := flag.String("name", "noop.cosi.bench", "driver name (RFC 1035 labels separated by dots)")
	flag.Parse()
	if err := run(*endpoint, *name); err != nil {
		log.Fatal(err)
	}
}

func run(endpoint, name string) error {
	path, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok || path == "" {
		return fmt.Errorf("endpoint %q: want unix:///path/to/driver.sock", endpoint)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	d := newDriver(name)
	refproto.RegisterIdentityServer(srv, d)
	refproto.RegisterProvisionerServer(srv, d)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	log.Printf("driver %s serving on %s", name, endpoint)
	err = srv.Serve(lis)
	buckets, accounts, calls := d.counts()
	log.Printf("stopped: %d buckets and %d accounts held; calls %v", buckets, accounts, calls)
	return err
}

// driver serves the reference protocol's Identity and Provisioner services from memory.
type driver struct {
	refproto.UnimplementedIdentityServer
	refproto.UnimplementedProvisionerServer
	name string

	mu       sync.Mutex
	buckets  map[string]bool   // bucket IDs
	accounts map[string]string // account ID → secret key
	calls    map[string]int    // calls served, by method
}

func newDriver(name string) *driver {
	return &driver{name: name, buckets: map[string]bool{}, accounts: map[string]string{}, calls: map[string]int{}}
}

// endpoint and region are what every bucket reports: nothing listens there.
const (
	endpoint = "https://s3.noop.invalid"
	region   = "noop"
)

func (d *driver) DriverGetInfo(context.Context, *refproto.DriverGetInfoRequest) (
	*refproto.DriverGetInfoResponse, error) {
	return &refproto.DriverGetInfoResponse{
		Name:               d.name,
		SupportedProtocols: []*refproto.ObjectProtocol{{Type: refproto.ObjectProtocol_S3}},
	}, nil
}

func (d *driver) DriverCreateBucket(_ context.Context, req *refproto.DriverCreateBucketRequest) (
	*refproto.DriverCreateBucketResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	for _, p := range req.GetProtocols() {
		if p.GetType() != refproto.ObjectProtocol_S3 {
			return nil, status.Errorf(codes.InvalidArgument, "protocol %v is not supported", p.GetType())
		}
	}
	d.mu.Lock()
	d.buckets[req.GetName()] = true
	d.calls["DriverCreateBucket"]++
	d.mu.Unlock()
	return &refproto.DriverCreateBucketResponse{
		BucketId:  req.GetName(),
		Protocols: &refproto.ObjectProtocolAndBucketInfo{S3: bucketInfo(req.GetName())},
	}, nil
}

func (d *driver) DriverGetExistingBucket(_ context.Context, req *refproto.DriverGetExistingBucketRequest) (
	*refproto.DriverGetExistingBucketResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls["DriverGetExistingBucket"]++
	if !d.buckets[req.GetExistingBucketId()] {
		return nil, status.Errorf(codes.NotFound, "bucket %q does not exist", req.GetExistingBucketId())
	}
	return &refproto.DriverGetExistingBucketResponse{
		BucketId:  req.GetExistingBucketId(),
		Protocols: &refproto.ObjectProtocolAndBucketInfo{S3: bucketInfo(req.GetExistingBucketId())},
	}, nil
}

func (d *driver) DriverDeleteBucket(_ context.Context, req *refproto.DriverDeleteBucketRequest) (
	*refproto.DriverDeleteBucketResponse, error) {
	d.mu.Lock()
	delete(d.buckets, req.GetBucketId())
	d.calls["DriverDeleteBucket"]++
	d.mu.Unlock()
	return &refproto.DriverDeleteBucketResponse{}, nil
}

func (d *driver) DriverGrantBucketAccess(_ context.Context, req *refproto.DriverGrantBucketAccessRequest) (
	*refproto.DriverGrantBucketAccessResponse, error) {
	if req.GetAccountName() == "" || len(req.GetBuckets()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "account name and buckets are required")
	}
	if req.GetProtocol().GetType() != refproto.ObjectProtocol_S3 {
		return nil, status.Errorf(codes.InvalidArgument, "protocol %v is not supported", req.GetProtocol().GetType())
	}
	resp := &refproto.DriverGrantBucketAccessResponse{AccountId: req.GetAccountName()}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls["DriverGrantBucketAccess"]++
	for _, b := range req.GetBuckets() {
		if !d.buckets[b.GetBucketId()] {
			return nil, status.Errorf(codes.NotFound, "bucket %q does not exist", b.GetBucketId())
		}
		resp.Buckets = append(resp.Buckets, &refproto.DriverGrantBucketAccessResponse_BucketInfo{
			BucketId:   b.GetBucketId(),
			BucketInfo: &refproto.ObjectProtocolAndBucketInfo{S3: bucketInfo(b.GetBucketId())},
		})
	}
	secret, ok := d.accounts[resp.GetAccountId()]
	if !ok {
		secret = randomKey()
		d.accounts[resp.GetAccountId()] = secret
	}
	if req.GetAuthenticationType().GetType() == refproto.AuthenticationType_KEY {
		resp.Credentials = &refproto.CredentialInfo{
			S3: &refproto.S3CredentialInfo{AccessKeyId: resp.GetAccountId(), AccessSecretKey: secret},
		}
	} else {
		resp.Credentials = &refproto.CredentialInfo{S3: &refproto.S3CredentialInfo{}}
	}
	return resp, nil
}

func (d *driver) DriverRevokeBucketAccess(_ context.Context, req *refproto.DriverRevokeBucketAccessRequest) (
	*refproto.DriverRevokeBucketAccessResponse, error) {
	d.mu.Lock()
	delete(d.accounts, req.GetAccountId())
	d.calls["DriverRevokeBucketAccess"]++
	d.mu.Unlock()
	return &refproto.DriverRevokeBucketAccessResponse{}, nil
}

// counts returns the buckets and accounts held and the calls served.
func (d *driver) counts() (buckets, accounts int, calls map[string]int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	calls = map[string]int{}
	for k, v := range d.calls {
		calls[k] = v
	}
	return len(d.buckets), len(d.accounts), calls
}

func bucketInfo(id string) *refproto.S3BucketInfo {
	return &refproto.S3BucketInfo{
		BucketId:        id,
		Endpoint:        endpoint,
		Region:          region,
		AddressingStyle: &refproto.S3AddressingStyle{Style: refproto.S3AddressingStyle_PATH},
	}
}

func randomKey() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
