package driver_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

const panicSecret = "s3cr3t-from-the-request"

// panickingDriver panics the way drivers do when a backend answers something unexpected: with
// a value made from the request, and with a nil dereference.
type panickingDriver struct {
	*memory.Driver
}

func (panickingDriver) DriverCreateBucket(
	_ context.Context,
	req *cosiproto.DriverCreateBucketRequest,
) (*cosiproto.DriverCreateBucketResponse, error) {
	panic("cannot create with " + req.GetParameters()["password"])
}

// requestError claims to be a runtime error (it has the RuntimeError method, as anyone's type
// may) and carries the request's data in its message.
type requestError struct{ msg string }

func (e requestError) Error() string { return e.msg }
func (requestError) RuntimeError()   {}

func (panickingDriver) DriverGetBucket(
	_ context.Context,
	req *cosiproto.DriverGetBucketRequest,
) (*cosiproto.DriverGetBucketResponse, error) {
	panic(requestError{"cannot get with " + req.GetParameters()["password"]})
}

func (panickingDriver) DriverDeleteBucket(
	context.Context,
	*cosiproto.DriverDeleteBucketRequest,
) (*cosiproto.DriverDeleteBucketResponse, error) {
	var user *struct{ Path *string }
	_ = *user.Path // a store that answered without the user
	return &cosiproto.DriverDeleteBucketResponse{}, nil
}

// TestServerRecoversFromPanics checks that a panicking call fails with Internal, that the server
// goes on serving, and that the log says where it panicked without what the request held.
func TestServerRecoversFromPanics(t *testing.T) {
	var mu sync.Mutex
	var logs bytes.Buffer
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: driver.LogLevelBodies})

	d := panickingDriver{newMemory(t, memory.Config{})}
	endpoint := "unix://" + filepath.Join(t.TempDir(), "driver.sock")
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := driver.NewServer(
		ctx,
		driver.Options{Endpoint: endpoint, Identity: d, Provisioner: d, Logger: log, Registerer: prometheus.NewRegistry()},
	)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	p := cosiproto.NewProvisionerClient(conn)

	_, err = p.DriverCreateBucket(
		t.Context(),
		&cosiproto.DriverCreateBucketRequest{BucketId: "b1", Parameters: map[string]string{"password": panicSecret}},
	)
	if status.Code(err) != codes.Internal {
		t.Errorf("a panicking DriverCreateBucket: %v, want Internal", err)
	}
	_, err = p.DriverGetBucket(t.Context(), &cosiproto.DriverGetBucketRequest{
		BucketId: "b1", Parameters: map[string]string{"password": panicSecret},
	})
	if status.Code(err) != codes.Internal {
		t.Errorf("a DriverGetBucket panicking with a runtime.Error of its own: %v, want Internal", err)
	}
	_, err = p.DriverDeleteBucket(t.Context(), &cosiproto.DriverDeleteBucketRequest{BucketId: "b1"})
	if status.Code(err) != codes.Internal {
		t.Errorf("a DriverDeleteBucket with a nil dereference: %v, want Internal", err)
	}
	if _, err := cosiproto.NewIdentityClient(conn).
		DriverGetInfo(t.Context(), &cosiproto.DriverGetInfoRequest{}); err != nil {
		t.Errorf("the server after two panics: %v", err)
	}

	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if !strings.Contains(out, "driver panicked") || !strings.Contains(out, "DriverDeleteBucket") ||
		!strings.Contains(out, "nil pointer dereference") {
		t.Errorf("the log does not say which call panicked and why:\n%s", out)
	}
	// The request is logged at this verbosity with secrets stripped; the panic value, made from
	// the request, must not be.
	if strings.Contains(out, "cannot create with") || strings.Contains(out, "cannot get with") {
		t.Errorf("the log holds the panic value, made from the request:\n%s", out)
	}
}
