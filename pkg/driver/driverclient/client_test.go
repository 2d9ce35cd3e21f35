package driverclient_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

func TestProbeWaitsForTheDriver(t *testing.T) {
	dir := t.TempDir()
	endpoint := "unix://" + filepath.Join(dir, "late.sock")
	c := connect(t, endpoint, driverclient.Options{})

	probed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		info, err := c.Probe(ctx)
		if err == nil && info.GetName() != memory.DefaultName {
			err = fmt.Errorf("Probe returned name %q", info.GetName())
		}
		probed <- err
	}()
	time.Sleep(300 * time.Millisecond) // the driver starts after the sidecar
	d := newMemory(t)
	srv, err := driver.NewServer(
		t.Context(),
		driver.Options{Endpoint: endpoint, Identity: d, Provisioner: d, Registerer: prometheus.NewRegistry()},
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = srv.Serve(ctx) }()
	defer cancel()

	if err := <-probed; err != nil {
		t.Fatal(err)
	}
	if c.DriverName() != memory.DefaultName {
		t.Errorf("DriverName() = %q after Probe", c.DriverName())
	}
}

func TestProbeGivesUp(t *testing.T) {
	c := connect(t, "unix://"+filepath.Join(t.TempDir(), "never.sock"), driverclient.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	if _, err := c.Probe(ctx); err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("Probe without a driver: %v", err)
	}
}

func TestClientCallTimeoutAndMetrics(t *testing.T) {
	ts := startServer(t, newMemory(t))
	registry := prometheus.NewRegistry()
	c := connect(t, ts.endpoint, driverclient.Options{CallTimeout: 200 * time.Millisecond, Registerer: registry})
	if _, err := c.Probe(t.Context()); err != nil {
		t.Fatal(err)
	}
	ts.faults.Set(5 * time.Second)
	// The caller's context has a longer deadline, as the sidecar's reconciles do (two minutes):
	// the call timeout still bounds the call. Without it, the call would succeed after 5 s.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := c.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: "slow"})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a call slower than the call timeout: %v, want DeadlineExceeded", err)
	}
	// KEP-1979 names exactly two labels for the errors counter.
	want := `
# HELP cosi_sidecar_operation_errors_total COSI driver gRPC operations that returned an error, by driver and method.
# TYPE cosi_sidecar_operation_errors_total counter
cosi_sidecar_operation_errors_total{driver_name="memory.cosi.kube-cosi.io",method_name="DriverCreateBucket"} 1
`
	if err := testutil.GatherAndCompare(
		registry,
		strings.NewReader(want),
		"cosi_sidecar_operation_errors_total",
	); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(registry, "cosi_sidecar_operation_duration_seconds"); n != 2 {
		t.Errorf(
			"cosi_sidecar_operation_duration_seconds has %d series, "+
				"want 2 (DriverGetInfo OK, DriverCreateBucket DeadlineExceeded)",
			n,
		)
	}
}

// TestClientLogsWithTheCallersLogger: a call whose context carries a logger (a reconcile's, with
// the object's name) is logged with it; other calls with the client's logger.
func TestClientLogsWithTheCallersLogger(t *testing.T) {
	var mu sync.Mutex
	lines := map[string][]string{}
	capture := func(name string) logr.Logger {
		return funcr.New(func(_, args string) {
			mu.Lock()
			defer mu.Unlock()
			lines[name] = append(lines[name], args)
		}, funcr.Options{Verbosity: driver.LogLevelCalls})
	}
	ts := startServer(t, newMemory(t))
	c := connect(t, ts.endpoint, driverclient.Options{Logger: capture("client")})
	if _, err := c.Probe(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx := logr.NewContext(t.Context(), capture("reconcile").WithValues("bucket", "b-1"))
	if _, err := c.DriverGenerateBucketId(ctx, &cosiproto.DriverGenerateBucketIdRequest{Name: "b-1"}); err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	got := lines["reconcile"]
	if len(got) != 1 || !strings.Contains(got[0], `"bucket"="b-1"`) ||
		!strings.Contains(got[0], "DriverGenerateBucketId") {
		t.Errorf("the reconcile's logger got %q, want one line of DriverGenerateBucketId naming the bucket", got)
	}
	// Probe's lines: its DriverGetInfo calls (protocol detection, then the call itself) and the
	// protocol it settled on.
	got = lines["client"]
	if len(got) == 0 {
		t.Errorf("the client's logger got nothing, want Probe's lines")
	}
	for _, line := range got {
		if !strings.Contains(line, "DriverGetInfo") && !strings.Contains(line, `"driver protocol"`) {
			t.Errorf("the client's logger got %q, want only Probe's lines", line)
		}
	}
}

// TestContextLoggerNeverSeesSecrets checks that a driver call logged with the caller's logger (a
// reconcile's, at the verbosity that logs bodies) strips the credentials of a grant's answer, as
// the client's own logger does.
func TestContextLoggerNeverSeesSecrets(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{Verbosity: driver.LogLevelBodies})
	ts := startServer(t, newMemory(t))
	c := connect(t, ts.endpoint, driverclient.Options{})
	if _, err := c.Probe(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx := logr.NewContext(t.Context(), log)
	s3 := []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}
	bucket, err := c.DriverGenerateBucketId(ctx, &cosiproto.DriverGenerateBucketIdRequest{Name: "b-1", Protocols: s3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{
		BucketId: bucket.GetBucketId(), Protocols: s3,
	}); err != nil {
		t.Fatal(err)
	}
	buckets := []*cosiproto.AccessedBucket{{
		BucketId:    bucket.GetBucketId(),
		AccessModes: &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE},
	}}
	account, err := c.DriverGenerateBucketAccessId(ctx, &cosiproto.DriverGenerateBucketAccessIdRequest{
		AccountName: "a-1", Buckets: buckets, Protocol: cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
	})
	if err != nil {
		t.Fatal(err)
	}
	grant, err := c.DriverGrantBucketAccess(ctx, &cosiproto.DriverGrantBucketAccessRequest{
		AccountId: account.GetAccountId(), Buckets: buckets, Protocol: cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
	})
	if err != nil {
		t.Fatal(err)
	}
	secret := grant.GetCredentials().GetS3().GetAccessSecretKey()
	if secret == "" {
		t.Fatal("the memory driver granted no secret key; the test would prove nothing")
	}

	mu.Lock()
	defer mu.Unlock()
	all := strings.Join(lines, "\n")
	keyID := grant.GetCredentials().GetS3().GetAccessKeyId()
	if !strings.Contains(all, "DriverGrantBucketAccess") || !strings.Contains(all, keyID) {
		t.Fatalf("the caller's logger did not get the grant's answer at LogLevelBodies; "+
			"the test would prove nothing:\n%s", all)
	}
	if strings.Contains(all, secret) {
		t.Errorf("the caller's logger got the secret key of a grant's answer:\n%s", all)
	}
}
