package sanity_test

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"

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
	return funcr.New(
		func(prefix, args string) { l.write(prefix + " " + args) },
		funcr.Options{Verbosity: driver.LogLevelBodies},
	)
}

func (l *logBuffer) write(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.WriteString(line + "\n")
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
		IncompatibleAccessParameters: map[string]string{memory.ParamSASExpiry: "2h"},
		DriverLogs:                   logs.bytes,
		Probe: sanity.Probe{
			BucketExists: func(_ context.Context, id string) (bool, error) { return b.BucketExists(id), nil },
			Accounts:     func(context.Context) ([]string, error) { return b.Accounts(), nil },
			Allowed: func(_ context.Context, c sanity.AccessCheck) (bool, error) {
				if sa := c.ServiceAccount; sa != nil {
					return b.AllowedServiceAccount(sa.GetNamespace(), sa.GetName(), c.BucketID, memory.Category(c.Category),
						c.Write), nil
				}
				return b.Allowed(c.Credentials, c.BucketID, memory.Category(c.Category), c.Write), nil
			},
			AccountOf: func(_ context.Context, creds *cosiproto.CredentialInfo) (string, error) {
				return b.AccountOf(creds), nil
			},
			Put: func(_ context.Context, c sanity.AccessCheck, key string) (bool, error) {
				if sa := c.ServiceAccount; sa != nil {
					return b.PutServiceAccount(sa.GetNamespace(), sa.GetName(), c.BucketID, key), nil
				}
				return b.Put(c.Credentials, c.BucketID, key), nil
			},
			Objects: func(_ context.Context, id string) ([]string, error) { return b.Objects(id), nil },
			Empty: func(_ context.Context, id string) error {
				b.Empty(id)
				return nil
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
			name: "all protocols, multi-bucket, ServiceAccount, usage",
			cfg:  memory.Config{Usage: true},
			// Only cases that need a protocol the driver lacks, and the one of drivers without usage.
			wantSkipped: []string{
				"DriverCreateBucket/rejects a protocol the driver does not advertise with InvalidArgument: " +
					"the driver supports every protocol",
				"DriverGetBucketUsage/answers Unimplemented unless BUCKET_USAGE is advertised: " +
					"the driver advertises BUCKET_USAGE",
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
			wantSkipped: []string{
				"DriverGetBucketUsage/a new bucket holds nothing: " +
					"the driver does not advertise BUCKET_USAGE (DriverGetBucketUsage)",
				"DriverGetBucketUsage/counts the objects written: " +
					"the driver does not advertise BUCKET_USAGE (DriverGetBucketUsage)",
				"DriverGetBucketUsage/returns NotFound for a missing bucket: " +
					"the driver does not advertise BUCKET_USAGE (DriverGetBucketUsage)",
				"DriverGrantBucketAccess/gives each bucket of a multi-bucket grant its own access modes: " +
					"the driver cannot give several buckets one credential (OutOfRange)",
				"DriverGrantBucketAccess/maps only the granted ServiceAccount: " +
					"the driver does not support ServiceAccount authentication (InvalidArgument)",
				"DriverGrantBucketAccess/serves ServiceAccount grants through the ServiceAccount, not a key: " +
					"the driver does not support ServiceAccount authentication (InvalidArgument)",
				"DriverRevokeBucketAccess/ends a ServiceAccount's access: " +
					"the driver does not support ServiceAccount authentication (InvalidArgument)",
				"DriverRevokeBucketAccess/revokes every bucket of a multi-bucket access: " +
					"the driver cannot give several buckets one credential (OutOfRange)",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			d := newMemory(t, tc.cfg)
			results := run(t, memoryConfig(serve(t, d, logs.logger()), d, &logs))

			if want := len(sanity.Cases()) + len(sanity.Properties()); len(results) != want {
				t.Errorf("%d results for %d cases and properties", len(results), want)
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
// when no probe, parameters or logs are given, and that Case.Needs names exactly those.
func TestSkipsWithoutProbe(t *testing.T) {
	d := newMemory(t, memory.Config{})
	results := run(t, sanity.Config{Endpoint: serve(t, d, logr.Discard())})
	if failed := failedOrSkipped(results, sanity.Failed); len(failed) > 0 {
		t.Errorf("failed cases:\n%s", strings.Join(failed, "\n"))
	}
	for _, c := range sanity.Cases() {
		r := results[c.Name]
		needsConfig := slices.ContainsFunc(c.Needs(), func(n string) bool {
			return n != sanity.NeedProbeAccountOf && n != sanity.NeedMultiBucket && n != sanity.NeedServiceAccount
		})
		// The probe is only consulted when a repeat grant returns other credentials.
		if c.Name == "DriverGrantBucketAccess/is idempotent for the same account_id" {
			needsConfig = false
		}
		switch {
		case needsConfig && (r.Status != sanity.Skipped || r.Message == ""):
			t.Errorf("%s: %s (%q), want skipped with a reason: it needs %v", c.Name, r.Status, r.Message, c.Needs())
		case !needsConfig && r.Status == sanity.Skipped:
			t.Errorf("%s: skipped (%s), but Needs lists nothing that was missing", c.Name, r.Message)
		case len(c.Needs()) > 0 && c.Blind() == "":
			t.Errorf("%s: needs %v but does not say what it cannot see without them", c.Name, c.Needs())
		}
	}
}
