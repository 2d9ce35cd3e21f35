package driver_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// countingDriver counts the DriverCreateBucket calls that reach the driver.
type countingDriver struct {
	*memory.Driver
	creates atomic.Int32
}

func (d *countingDriver) DriverCreateBucket(
	ctx context.Context,
	req *cosiproto.DriverCreateBucketRequest,
) (*cosiproto.DriverCreateBucketResponse, error) {
	d.creates.Add(1)
	return d.Driver.DriverCreateBucket(ctx, req)
}

type testServer struct {
	endpoint string
	socket   string
	registry *prometheus.Registry
	faults   *memory.Faults
	stop     func() error
}

// startServer serves d through the SDK on a socket in a temporary directory.
func startServer(t *testing.T, d interface {
	cosiproto.IdentityServer
	cosiproto.ProvisionerServer
}) *testServer {
	t.Helper()
	ts := &testServer{
		socket:   filepath.Join(t.TempDir(), "driver.sock"),
		registry: prometheus.NewRegistry(),
		faults:   &memory.Faults{},
	}
	ts.endpoint = "unix://" + ts.socket
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := driver.NewServer(ctx, driver.Options{
		Endpoint: ts.endpoint, Identity: d, Provisioner: d, Registerer: ts.registry,
		Interceptors: []grpc.UnaryServerInterceptor{ts.faults.Interceptor()},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	var stopped bool
	ts.stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { _ = ts.stop() })
	return ts
}

func newMemory(t *testing.T, cfg memory.Config) *memory.Driver {
	t.Helper()
	d, err := memory.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func connect(t *testing.T, endpoint string, opts driverclient.Options) *driverclient.Client {
	t.Helper()
	c, err := driverclient.New(endpoint, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestServerValidatesBeforeTheDriver(t *testing.T) {
	d := &countingDriver{Driver: newMemory(t, memory.Config{})}
	ts := startServer(t, d)
	c := connect(t, ts.endpoint, driverclient.Options{})

	_, err := c.DriverCreateBucket(t.Context(), &cosiproto.DriverCreateBucketRequest{})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "bucket_id is required") {
		t.Fatalf("DriverCreateBucket without bucket_id: %v, want InvalidArgument naming bucket_id", err)
	}
	if n := d.creates.Load(); n != 0 {
		t.Errorf("the driver saw %d invalid requests, want 0", n)
	}
	if _, err := c.DriverCreateBucket(t.Context(), &cosiproto.DriverCreateBucketRequest{BucketId: "b"}); err != nil {
		t.Fatal(err)
	}
	if n := d.creates.Load(); n != 1 {
		t.Errorf("the driver saw %d valid requests, want 1", n)
	}

	// Metrics: per method and code, with the driver's name.
	const metric = "cosi_driver_operation_duration_seconds"
	if n := testutil.CollectAndCount(ts.registry, metric); n != 2 {
		t.Errorf("%s has %d series, want 2 (OK and InvalidArgument)", metric, n)
	}
	// The Prometheus text format has one sample per line.
	//nolint:lll
	errs := `
# HELP cosi_driver_operation_errors_total COSI driver gRPC operations that returned an error, by driver, method and gRPC status code.
# TYPE cosi_driver_operation_errors_total counter
cosi_driver_operation_errors_total{driver_name="memory.cosi.kube-cosi.io",grpc_status_code="InvalidArgument",method_name="DriverCreateBucket"} 1
`
	if err := testutil.GatherAndCompare(
		ts.registry,
		strings.NewReader(errs),
		"cosi_driver_operation_errors_total",
	); err != nil {
		t.Error(err)
	}
}

func TestServerStopsGracefully(t *testing.T) {
	ts := startServer(t, newMemory(t, memory.Config{}))
	ts.faults.Set(300 * time.Millisecond)
	c := connect(t, ts.endpoint, driverclient.Options{})

	result := make(chan error, 1)
	go func() {
		_, err := c.DriverCreateBucket(context.Background(), &cosiproto.DriverCreateBucketRequest{BucketId: "in-flight"})
		result <- err
	}()
	time.Sleep(100 * time.Millisecond) // the call is in flight
	if err := ts.stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if err := <-result; err != nil {
		t.Errorf("the call in flight during the stop failed: %v", err)
	}
	if _, err := os.Stat(ts.socket); !os.IsNotExist(err) {
		t.Errorf("the socket remains after the stop: %v", err)
	}
}

func TestServerFailsFast(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "driver.sock")
	_, err := driver.NewServer(t.Context(), driver.Options{
		Endpoint:    "unix://" + socket,
		Identity:    newMemory(t, memory.Config{Name: "not_a_domain"}),
		Provisioner: newMemory(t, memory.Config{}),
		Registerer:  prometheus.NewRegistry(),
	})
	if err == nil || !strings.Contains(err.Error(), "domain name notation") {
		t.Fatalf("NewServer with an invalid driver name: %v", err)
	}
	if _, err := os.Stat(socket); !os.IsNotExist(err) {
		t.Errorf("a socket was created for a misconfigured driver")
	}

	t.Setenv(driver.EndpointEnv, "")
	d := newMemory(t, memory.Config{})
	if _, err := driver.NewServer(
		t.Context(),
		driver.Options{Identity: d, Provisioner: d},
	); err == nil ||
		!strings.Contains(err.Error(), driver.EndpointEnv) {
		t.Errorf("NewServer without an endpoint: %v, want an error naming %s", err, driver.EndpointEnv)
	}
}

func TestServerUsesCOSIEndpoint(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "env.sock")
	t.Setenv(driver.EndpointEnv, "unix://"+socket)
	d := newMemory(t, memory.Config{})
	srv, err := driver.NewServer(
		t.Context(),
		driver.Options{Identity: d, Provisioner: d, Registerer: prometheus.NewRegistry(), Logger: logr.Discard()},
	)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(socket); err != nil {
		t.Errorf("no socket at $%s: %v", driver.EndpointEnv, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := srv.Serve(ctx); err != nil {
		t.Error(err)
	}
}
