// Package testenv is what the tests that touch Kubernetes share: a real kube-apiserver and etcd
// (dev/localenv's, from the binaries make kube-binaries builds) with the COSI CRDs, a
// TestMain (Run) that starts it once per test package, and waits (Eventually, Never, Condition,
// Gone). Tests use it instead of a fake client: CEL validation, subresources, finalizers and
// conflicts only exist in a real API server. Only _test.go files import it; it is the one package
// of the harness that imports testing.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kube-cosi/cosi/dev/localenv"
)

// AdmissionPlugins are enabled in the test API server in addition to its defaults: plugins that
// production clusters enable and that change what COSI may write. OwnerReferencesPermissionEnforcement
// (OpenShift's default) refuses an owner reference with blockOwnerDeletion unless the writer may
// update the owner's finalizers.
var AdmissionPlugins = []string{"OwnerReferencesPermissionEnforcement"}

// Env is a running API server with the COSI CRDs installed (see localenv.APIServer), and what
// Run's setup started with it.
type Env struct {
	*localenv.APIServer

	background []background
	cleanups   []func() error
}

type background struct {
	name string
	done chan error
}

// Start starts etcd and kube-apiserver with AdmissionPlugins and installs the CRDs. The binaries
// are taken from $KUBEBUILDER_ASSETS when set, else from the repository's bin/. It fails, rather
// than skipping, when they are missing.
func Start() (*Env, error) {
	// The components under test log to the logger they are given; controller-runtime's global
	// one, which a few of its paths use, would otherwise print a stack trace saying it was never
	// set, in the middle of the tests' output.
	ctrllog.SetLogger(logr.Discard())
	a, err := localenv.StartAPIServer(localenv.APIServerOptions{AdmissionPlugins: AdmissionPlugins})
	if err != nil {
		return nil, err
	}
	return &Env{APIServer: a}, nil
}

// Run is a test package's TestMain: it starts the API server (Start), calls setup with a context
// that ends when the tests are done, runs the tests, stops what setup started (Go, Cleanup),
// stops the API server, and exits with the tests' code, or 1 when anything else failed.
//
//	func TestMain(m *testing.M) {
//		testenv.Run(m, func(ctx context.Context, e *testenv.Env) error {
//			env = e
//			return env.CreateNamespace(ctx, testNamespace)
//		})
//	}
func Run(m *testing.M, setup func(ctx context.Context, e *Env) error) {
	os.Exit(run(m, setup))
}

func run(m *testing.M, setup func(ctx context.Context, e *Env) error) int {
	e, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	code := 1
	if err := setup(ctx, e); err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
	} else {
		code = m.Run()
	}
	cancel()
	if err := errors.Join(e.stopBackground(), e.APIServer.Stop()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	return code
}

// Go runs f (a component: controller, sidecar, driver) in the background with setup's context.
// Run waits for it after the tests; an error other than the context's end fails the package.
func (e *Env) Go(ctx context.Context, name string, f func(ctx context.Context) error) {
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	e.background = append(e.background, background{name: name, done: done})
}

// Cleanup registers f to run after the tests, once the background components stopped (last
// registered first).
func (e *Env) Cleanup(f func() error) { e.cleanups = append(e.cleanups, f) }

func (e *Env) stopBackground() error {
	var errs []error
	for _, b := range e.background {
		if err := <-b.done; err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("%s: %w", b.name, err))
		}
	}
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		errs = append(errs, e.cleanups[i]())
	}
	return errors.Join(errs...)
}

// RunSystem is TestMain for the tests of the whole system as processes: it starts a
// localenv.Env with opts in a temporary directory (binaries from the repository's bin/ unless
// opts says otherwise), calls setup, runs the tests and stops the environment. It removes the
// directory when everything passed, and otherwise keeps it and says where the logs are.
func RunSystem(m *testing.M, opts localenv.Options, setup func(ctx context.Context, e *localenv.Env) error) {
	os.Exit(runSystem(m, opts, setup))
}

func runSystem(m *testing.M, opts localenv.Options, setup func(ctx context.Context, e *localenv.Env) error) int {
	var err error
	if opts.RepoRoot == "" {
		if opts.RepoRoot, err = localenv.RepoRoot(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if opts.BinDir == "" {
		opts.BinDir = filepath.Join(opts.RepoRoot, "bin")
	}
	if opts.Dir, err = os.MkdirTemp("", "cosi-system"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, err := localenv.Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the environment (make build versitygw kube-binaries builds what it needs):", err)
		fmt.Fprintln(os.Stderr, "logs kept in", filepath.Join(opts.Dir, "log"))
		return 1
	}
	code := 1
	if err := setup(ctx, env); err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
	} else {
		code = m.Run()
	}
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping:", err)
		code = 1
	}
	if code == 0 {
		_ = os.RemoveAll(opts.Dir)
	} else {
		fmt.Fprintln(os.Stderr, "logs kept in", filepath.Join(opts.Dir, "log"))
	}
	return code
}
