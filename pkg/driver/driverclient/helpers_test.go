package driverclient_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// The server side of the client's tests: a driver served through the SDK (as package driver's
// tests serve it).

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

func newMemory(t *testing.T) *memory.Driver {
	t.Helper()
	d, err := memory.New(memory.Config{})
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
