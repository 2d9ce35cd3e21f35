package v1alpha1drivers

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/store/versity"
	"github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/drivers/v1alpha1s3"
)

// ServeS3 starts Versity (the repository's bin/versitygw) and the reference v1alpha1 driver named
// name on it, serves the driver on a Unix socket until the test ends, and returns the endpoint.
// With wrap, what wrap returns is served instead (a class of drivers over the real store); without
// it, the driver is served as it is, by v1alpha1s3.Serve.
func ServeS3(t testing.TB, name string, wrap func(*v1alpha1s3.Driver) Server) string {
	t.Helper()
	endpoint, _ := ServeS3Store(t, name, wrap)
	return endpoint
}

// ServeS3Store is ServeS3, and returns the store too: a test checks there, as its admin, what the
// driver did.
func ServeS3Store(t testing.TB, name string, wrap func(*v1alpha1s3.Driver) Server) (string, *versity.Store) {
	t.Helper()
	root, err := localenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	store, err := versity.Start(
		t.Context(),
		versity.Options{Binary: filepath.Join(root, "bin", "versitygw"), Dir: t.TempDir()},
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Stop() })
	creds := credentials.NewStaticCredentialsProvider(store.RootAccessKey, store.RootSecretKey, "")
	httpClient := &http.Client{Timeout: 30 * time.Second}
	d, err := s3.New(
		s3.Config{Name: name, Endpoint: store.S3Endpoint, Region: "us-east-1", Credentials: creds,
			Accounts: s3.NewIAMAccounts(store.IAMEndpoint, creds, httpClient), HTTPClient: httpClient, Logger: logr.Discard()},
	)
	if err != nil {
		t.Fatal(err)
	}
	// A Unix socket path is limited to 108 bytes: t.TempDir() can be longer.
	dir, err := os.MkdirTemp("", "v1a1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	endpoint := "unix://" + filepath.Join(dir, "driver.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	if wrap == nil {
		go func() { done <- v1alpha1s3.Serve(ctx, endpoint, v1alpha1s3.New(d)) }()
	} else {
		lis, err := net.Listen("unix", filepath.Join(dir, "driver.sock"))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		w := wrap(v1alpha1s3.New(d))
		v1.RegisterIdentityServer(srv, w)
		v1.RegisterProvisionerServer(srv, w)
		go func() {
			<-ctx.Done()
			srv.GracefulStop()
		}()
		go func() { done <- srv.Serve(lis) }()
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serving the v1alpha1 driver: %v", err)
		}
	})
	return endpoint, store
}
