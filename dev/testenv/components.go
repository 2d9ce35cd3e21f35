package testenv

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"k8s.io/client-go/rest"

	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Driver is what ServeDriver serves: a driver's identity and provisioner services (the memory
// driver implements both).
type Driver interface {
	cosiproto.IdentityServer
	cosiproto.ProvisionerServer
}

// ServeDriver serves d on endpoint (unix://...) through the SDK's server until the test ends,
// with interceptors after the SDK's own (fault injection, call counts) and its metrics on a
// registry of its own.
func ServeDriver(t testing.TB, endpoint string, d Driver, interceptors ...grpc.UnaryServerInterceptor) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := driver.NewServer(ctx, driver.Options{
		Endpoint: endpoint, Identity: d, Provisioner: d, Registerer: prometheus.NewRegistry(), Interceptors: interceptors,
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// SidecarOptions are the sidecar's options in the tests: the driver at endpoint, short timeouts,
// no metrics or health endpoints, and Secrets checked every second.
func SidecarOptions(endpoint string) sidecar.Options {
	return sidecar.Options{
		DriverEndpoint: endpoint, DriverTimeout: 10 * time.Second, DriverStartTimeout: 30 * time.Second,
		Workers: 4, MetricsAddress: "0", HealthAddress: "0", SkipNameValidation: true, SecretCheckInterval: time.Second,
	}
}

// StartSidecar runs a sidecar that connects with cfg until stop is called or the test ends (as a
// crash would, between two reconciles). stop reports the sidecar's error, other than its
// context's end, to t. When the test fails, the sidecar's last log lines are in its output.
func StartSidecar(t testing.TB, cfg *rest.Config, opts sidecar.Options) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := newTail(sidecarLogLines)
	t.Cleanup(func() { log.report(t, "sidecar") }) // after stop: cleanups run last first
	go func() { done <- sidecar.Run(ctx, cfg, opts, log.logger()) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("sidecar: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// sidecarLogLines is how many of its last log lines a sidecar leaves for a failed test.
const sidecarLogLines = 300

// tail keeps a component's last log lines (at verbosity 2: the driver's calls and their codes,
// the reconciles' errors, the events), for a failed test to show.
type tail struct {
	mu    sync.Mutex
	lines []string
	max   int
}

func newTail(n int) *tail { return &tail{max: n} }

func (l *tail) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.lines) == l.max {
			l.lines = slices.Delete(l.lines, 0, 1)
		}
		l.lines = append(l.lines, time.Now().UTC().Format("15:04:05.000")+" "+prefix+" "+args)
	}, funcr.Options{Verbosity: 2})
}

// report shows the lines kept when t failed.
func (l *tail) report(t testing.TB, name string) {
	if !t.Failed() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Logf("the %s's last %d log lines:\n%s", name, len(l.lines), strings.Join(l.lines, "\n"))
}
