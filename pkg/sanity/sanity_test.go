package sanity_test

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	"github.com/kube-cosi/cosi/pkg/sanity"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// logBuffer collects a driver's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.buf.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: driver.LogLevelBodies})
}

func (l *logBuffer) bytes() ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.buf.Bytes()), nil
}

// server is what a test serves: the memory driver, or a broken wrapper of it.
type server interface {
	cosiproto.IdentityServer
	cosiproto.ProvisionerServer
}

// serve serves srv through the SDK on a socket in a temporary directory until the test ends.
func serve(t *testing.T, srv server, log logr.Logger) string {
	t.Helper()
	endpoint := "unix://" + filepath.Join(t.TempDir(), "driver.sock")
	ctx, cancel := context.WithCancel(context.Background())
	s, err := driver.NewServer(ctx, driver.Options{
		Endpoint: endpoint, Identity: srv, Provisioner: srv, Logger: log, Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return endpoint
}

func newMemory(t *testing.T, cfg memory.Config) *memory.Driver {
	t.Helper()
	d, err := memory.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// memoryConfig is the suite configuration for the memory driver: its parameters and its backend.
func memoryConfig(endpoint string, d *memory.Driver, logs *logBuffer) sanity.Config {
	b := d.Backend()
	return sanity.Config{
		Endpoint:                     endpoint,
		BucketParameters:             map[string]string{memory.ParamVersioning: "false"},
		InvalidBucketParameters:      map[string]string{memory.ParamVersioning: "maybe"},
		IncompatibleBucketParameters: map[string]string{memory.ParamVersioning: "true"},
		AccessParameters:             map[string]string{memory.ParamSASExpiry: "1h"},
		InvalidAccessParameters:      map[string]string{memory.ParamSASExpiry: "soon"},
		DriverLogs:                   logs.bytes,
		Probe: sanity.Probe{
			BucketExists: func(_ context.Context, id string) (bool, error) { return b.BucketExists(id), nil },
			Accounts:     func(context.Context) ([]string, error) { return b.Accounts(), nil },
			Allowed: func(_ context.Context, c sanity.AccessCheck) (bool, error) {
				return b.Allowed(c.Credentials, c.BucketID, memory.Category(c.Category), c.Write), nil
			},
		},
	}
}

// run runs the suite and returns the results by case name.
func run(t *testing.T, cfg sanity.Config) map[string]sanity.Result {
	t.Helper()
	results, err := sanity.Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]sanity.Result{}
	for _, r := range results {
		byName[r.Name] = r
	}
	return byName
}

func failedOrSkipped(results map[string]sanity.Result, status sanity.Status) []string {
	var names []string
	for name, r := range results {
		if r.Status == status {
			names = append(names, name+": "+r.Message)
		}
	}
	slices.Sort(names)
	return names
}

func TestMemoryDriverPassesEveryCase(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cfg         memory.Config
		wantSkipped []string
	}{
		{
			name: "all protocols, multi-bucket, ServiceAccount",
			cfg:  memory.Config{},
			// Only cases that need a protocol the driver lacks.
			wantSkipped: []string{
				"DriverCreateBucket/rejects a protocol the driver does not advertise with InvalidArgument: " +
					"the driver supports every protocol",
				"DriverGrantBucketAccess/rejects a protocol the driver does not advertise with InvalidArgument: " +
					"the driver supports every protocol",
			},
		},
		{
			name: "S3 only, single bucket, no ServiceAccount",
			cfg: memory.Config{
				Protocols:          []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3},
				SingleBucketAccess: true, NoServiceAccountAuth: true,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			d := newMemory(t, tc.cfg)
			results := run(t, memoryConfig(serve(t, d, logs.logger()), d, &logs))

			if len(results) != len(sanity.Cases()) {
				t.Errorf("%d results for %d cases", len(results), len(sanity.Cases()))
			}
			if failed := failedOrSkipped(results, sanity.Failed); len(failed) > 0 {
				t.Errorf("failed cases:\n%s", strings.Join(failed, "\n"))
			}
			if skipped := failedOrSkipped(results, sanity.Skipped); !slices.Equal(skipped, tc.wantSkipped) {
				t.Errorf("skipped cases:\n%s\nwant:\n%s", strings.Join(skipped, "\n"), strings.Join(tc.wantSkipped, "\n"))
			}
			// The log-leak case is only meaningful if the driver logged its responses.
			if logged, _ := logs.bytes(); !bytes.Contains(logged, []byte("***stripped***")) {
				t.Errorf("the driver's log has no stripped secret: the log-leak case saw no response bodies")
			}
			// Every case cleaned up after itself.
			if b := d.Backend(); len(b.Buckets()) > 0 || len(b.Accounts()) > 0 {
				t.Errorf("left behind: buckets %v, accounts %v", b.Buckets(), b.Accounts())
			}
		})
	}
}

// TestSkipsWithoutProbe checks that cases needing the backend's view are skipped, not passed,
// when no probe, parameters or logs are given.
func TestSkipsWithoutProbe(t *testing.T) {
	d := newMemory(t, memory.Config{})
	results := run(t, sanity.Config{Endpoint: serve(t, d, logr.Discard())})
	if failed := failedOrSkipped(results, sanity.Failed); len(failed) > 0 {
		t.Errorf("failed cases:\n%s", strings.Join(failed, "\n"))
	}
	for _, name := range []string{
		"DriverGenerateBucketId/creates nothing in the backend",
		"DriverCreateBucket/creates the bucket in the backend",
		"DriverDeleteBucket/deletes the bucket in the backend",
		"DriverGenerateBucketAccessId/creates no account in the backend",
		"DriverGrantBucketAccess/creates one backend account however often it is called",
		"DriverGrantBucketAccess/enforces each granted access mode",
		"DriverRevokeBucketAccess/revokes the credentials",
		"DriverCreateBucket/rejects invalid parameters with InvalidArgument",
		"DriverCreateBucket/returns AlreadyExists for an existing bucket with incompatible parameters",
		"Secrets/the driver logs no credential",
		"DriverRotateBucketAccessCredentials/returns a new working credential; the old one keeps working",
		"DriverRetireBucketAccessCredentials/refuses the retired credential and keeps the new one",
	} {
		if r := results[name]; r.Status != sanity.Skipped || r.Message == "" {
			t.Errorf("%s: %s (%q), want skipped with a reason", name, r.Status, r.Message)
		}
	}
}

// Broken drivers: each wraps the memory driver with one fault.

type nonIdempotentCreate struct{ *memory.Driver }

func (d nonIdempotentCreate) DriverCreateBucket(
	ctx context.Context,
	req *cosiproto.DriverCreateBucketRequest,
) (*cosiproto.DriverCreateBucketResponse, error) {
	if d.Backend().BucketExists(req.GetBucketId()) {
		return nil, status.Error(codes.AlreadyExists, "bucket exists")
	}
	return d.Driver.DriverCreateBucket(ctx, req)
}

type wrongNotFoundCode struct{ *memory.Driver }

func (d wrongNotFoundCode) DriverGetBucket(
	ctx context.Context,
	req *cosiproto.DriverGetBucketRequest,
) (*cosiproto.DriverGetBucketResponse, error) {
	resp, err := d.Driver.DriverGetBucket(ctx, req)
	if status.Code(err) == codes.NotFound {
		return nil, status.Error(codes.Internal, "lookup failed")
	}
	return resp, err
}

type leakySecretLog struct {
	*memory.Driver
	log logr.Logger
}

func (d leakySecretLog) DriverGrantBucketAccess(
	ctx context.Context,
	req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, req)
	if err == nil {
		d.log.Info("granted", "credentials", resp.GetCredentials().String()) // the bug: no StripSecrets
	}
	return resp, err
}

type eagerGenerate struct{ *memory.Driver }

func (d eagerGenerate) DriverGenerateBucketId(
	ctx context.Context,
	req *cosiproto.DriverGenerateBucketIdRequest,
) (*cosiproto.DriverGenerateBucketIdResponse, error) {
	resp, err := d.Driver.DriverGenerateBucketId(ctx, req)
	if err == nil {
		_, err = d.Driver.DriverCreateBucket(
			ctx,
			&cosiproto.DriverCreateBucketRequest{
				BucketId:   resp.GetBucketId(),
				Protocols:  req.GetProtocols(),
				Parameters: req.GetParameters(),
			},
		)
	}
	return resp, err
}

type revokeKeepsKey struct{ *memory.Driver }

func (revokeKeepsKey) DriverRevokeBucketAccess(
	context.Context,
	*cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	return &cosiproto.DriverRevokeBucketAccessResponse{}, nil
}

type readOnlyWrites struct{ *memory.Driver }

func (d readOnlyWrites) DriverGrantBucketAccess(
	ctx context.Context,
	req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	for _, b := range req.GetBuckets() {
		m := b.GetAccessModes()
		if m.GetObjectData() == cosiproto.AccessMode_READ_ONLY {
			m.ObjectData = cosiproto.AccessMode_READ_WRITE // the bug: grants more than asked
		}
	}
	return d.Driver.DriverGrantBucketAccess(ctx, req)
}

type wrongMultiBucketCode struct{ *memory.Driver }

func (d wrongMultiBucketCode) DriverGrantBucketAccess(
	ctx context.Context,
	req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	if len(req.GetBuckets()) > 1 {
		return nil, status.Error(codes.InvalidArgument, "one bucket at a time")
	}
	return d.Driver.DriverGrantBucketAccess(ctx, req)
}

type detailedErrors struct{ *memory.Driver }

func (d detailedErrors) DriverGetBucket(
	ctx context.Context,
	req *cosiproto.DriverGetBucketRequest,
) (*cosiproto.DriverGetBucketResponse, error) {
	resp, err := d.Driver.DriverGetBucket(ctx, req)
	if err != nil {
		st, _ := status.Convert(err).WithDetails(&cosiproto.DriverGetBucketRequest{BucketId: "detail"})
		return nil, st.Err()
	}
	return resp, nil
}

type retireKeepsKey struct{ *memory.Driver }

func (retireKeepsKey) DriverRetireBucketAccessCredentials(
	context.Context,
	*cosiproto.DriverRetireBucketAccessCredentialsRequest,
) (*cosiproto.DriverRetireBucketAccessCredentialsResponse, error) {
	return &cosiproto.DriverRetireBucketAccessCredentialsResponse{}, nil
}

type rotateRevokesOld struct{ *memory.Driver }

func (d rotateRevokesOld) DriverRotateBucketAccessCredentials(
	ctx context.Context,
	req *cosiproto.DriverRotateBucketAccessCredentialsRequest,
) (*cosiproto.DriverRotateBucketAccessCredentialsResponse, error) {
	resp, err := d.Driver.DriverRotateBucketAccessCredentials(ctx, req)
	if err == nil { // the bug: the old key stops working at once
		_, err = d.Driver.DriverRetireBucketAccessCredentials(ctx, &cosiproto.DriverRetireBucketAccessCredentialsRequest{
			AccountId: req.GetAccountId(), CredentialId: req.GetCredentialId(),
		})
	}
	return resp, err
}

// rotateTwiceTwoKeys issues a new key on every call: a repeated call rotates from the key the
// first one issued, which keeps working.
type rotateTwiceTwoKeys struct {
	*memory.Driver
	issued map[string]string
}

func (d rotateTwiceTwoKeys) DriverRotateBucketAccessCredentials(
	ctx context.Context,
	req *cosiproto.DriverRotateBucketAccessCredentialsRequest,
) (*cosiproto.DriverRotateBucketAccessCredentialsResponse, error) {
	key := req.GetAccountId() + "/" + req.GetCredentialId()
	if last, ok := d.issued[key]; ok {
		req = proto.Clone(req).(*cosiproto.DriverRotateBucketAccessCredentialsRequest)
		req.CredentialId = last
	}
	resp, err := d.Driver.DriverRotateBucketAccessCredentials(ctx, req)
	if err == nil {
		d.issued[key] = resp.GetCredentialId()
	}
	return resp, err
}

// noRotation is a driver that does not rotate credentials.
type noRotation struct{ *memory.Driver }

func (noRotation) DriverRotateBucketAccessCredentials(
	context.Context, *cosiproto.DriverRotateBucketAccessCredentialsRequest,
) (*cosiproto.DriverRotateBucketAccessCredentialsResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method DriverRotateBucketAccessCredentials not implemented")
}

func (noRotation) DriverRetireBucketAccessCredentials(
	context.Context, *cosiproto.DriverRetireBucketAccessCredentialsRequest,
) (*cosiproto.DriverRetireBucketAccessCredentialsResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method DriverRetireBucketAccessCredentials not implemented")
}

// TestRotationIsOptional checks that a driver without rotation skips the rotation cases, with the
// reason, and fails none.
func TestRotationIsOptional(t *testing.T) {
	var logs logBuffer
	d := newMemory(t, memory.Config{})
	cfg := memoryConfig(serve(t, noRotation{d}, logs.logger()), d, &logs)
	cfg.Run = regexp.MustCompile("^DriverR(otate|etire)BucketAccessCredentials/")
	results := run(t, cfg)
	if len(results) == 0 {
		t.Fatal("no rotation case ran")
	}
	for name, r := range results {
		if r.Status != sanity.Skipped || !strings.Contains(r.Message, "Unimplemented") {
			t.Errorf("%s: %s (%q), want skipped because the driver answers Unimplemented", name, r.Status, r.Message)
		}
	}
}

// TestBrokenDriversFail proves that each case catches the fault it is about.
func TestBrokenDriversFail(t *testing.T) {
	for _, tc := range []struct {
		name     string
		wrap     func(*memory.Driver, logr.Logger) server
		wantFail string
	}{
		{"non-idempotent create", func(d *memory.Driver, _ logr.Logger) server { return nonIdempotentCreate{d} },
			"DriverCreateBucket/is idempotent for the same bucket_id"},
		{"wrong error code", func(d *memory.Driver, _ logr.Logger) server { return wrongNotFoundCode{d} },
			"DriverGetBucket/returns NotFound for a missing bucket"},
		{"secret in a log line", func(d *memory.Driver, log logr.Logger) server { return leakySecretLog{d, log} },
			"Secrets/the driver logs no credential"},
		{"phase 1 creates the bucket", func(d *memory.Driver, _ logr.Logger) server { return eagerGenerate{d} },
			"DriverGenerateBucketId/creates nothing in the backend"},
		{"revoke keeps the key", func(d *memory.Driver, _ logr.Logger) server { return revokeKeepsKey{d} },
			"DriverRevokeBucketAccess/revokes the credentials"},
		{"read-only grants writes", func(d *memory.Driver, _ logr.Logger) server { return readOnlyWrites{d} },
			"DriverGrantBucketAccess/enforces each granted access mode"},
		{"multi-bucket refused with the wrong code",
			func(d *memory.Driver, _ logr.Logger) server { return wrongMultiBucketCode{d} },
			"DriverGrantBucketAccess/gives multiple buckets one credential, or returns OutOfRange"},
		{"retire keeps the key", func(d *memory.Driver, _ logr.Logger) server { return retireKeepsKey{d} },
			"DriverRetireBucketAccessCredentials/refuses the retired credential and keeps the new one"},
		{"rotate revokes the old key", func(d *memory.Driver, _ logr.Logger) server { return rotateRevokesOld{d} },
			"DriverRotateBucketAccessCredentials/returns a new working credential; the old one keeps working"},
		{"repeated rotate leaves two new keys",
			func(d *memory.Driver, _ logr.Logger) server { return rotateTwiceTwoKeys{d, map[string]string{}} },
			"DriverRotateBucketAccessCredentials/is idempotent for the same credential_id"},
		{"errors with status details", func(d *memory.Driver, _ logr.Logger) server { return detailedErrors{d} },
			"Errors/carry a readable message and no status details"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			d := newMemory(t, memory.Config{})
			cfg := memoryConfig(serve(t, tc.wrap(d, logs.logger()), logs.logger()), d, &logs)
			cfg.Run = regexp.MustCompile("^" + regexp.QuoteMeta(tc.wantFail) + "$")
			r, ok := run(t, cfg)[tc.wantFail]
			if !ok {
				t.Fatalf("case %q did not run", tc.wantFail)
			}
			if r.Status != sanity.Failed {
				t.Errorf("case %q: %s, want failed", tc.wantFail, r.Status)
			}
			t.Logf("failed as expected: %s", r.Message)
		})
	}
}
