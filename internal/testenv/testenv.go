// Package testenv starts a real kube-apiserver and etcd, built by this project from the Go module
// proxy (make kube-binaries), with the COSI CRDs installed. Tests that touch Kubernetes use it
// instead of a fake client: CEL validation, subresources, finalizers and conflicts only exist in a
// real API server.
//
// Start one Env per test package, in TestMain, and share it; it takes a few seconds to start.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kube-cosi/cosi/internal/scheme"
)

// Env is a running API server with the COSI CRDs installed.
type Env struct {
	// Config connects to the API server as a cluster admin.
	Config *rest.Config
	// Client is a controller-runtime client for Config, with the core and COSI types registered.
	Client client.Client
	// Scheme has the core Kubernetes and the COSI types registered.
	Scheme *runtime.Scheme
	// BinDir holds kube-apiserver, etcd and kubectl.
	BinDir string
	// RepoRoot is the root of this repository.
	RepoRoot string

	env *envtest.Environment
}

// Start starts etcd and kube-apiserver from BinDir and installs the CRDs from config/crd/bases.
// The binaries are taken from $KUBEBUILDER_ASSETS when set, else from the repository's bin/.
// It fails, rather than skipping, when they are missing: a test that silently does not run would
// hide a broken build.
func Start() (*Env, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	binDir := os.Getenv("KUBEBUILDER_ASSETS")
	if binDir == "" {
		binDir = filepath.Join(root, "bin")
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(binDir, name)); err != nil {
			return nil, fmt.Errorf("%s not found in %s: run `make kube-binaries` (or `make test`) to build it: %w", name, binDir, err)
		}
	}

	scheme := scheme.New()

	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: binDir,
		Scheme:                scheme,
	}
	// Admission plugins that production clusters enable and that change what COSI may write:
	// OwnerReferencesPermissionEnforcement (OpenShift's default) refuses an owner reference with
	// blockOwnerDeletion unless the writer may update the owner's finalizers.
	env.ControlPlane.GetAPIServer().Configure().Append("enable-admission-plugins", admissionPlugins...)
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", binDir, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, errors.Join(err, env.Stop())
	}
	return &Env{Config: cfg, Client: c, Scheme: scheme, BinDir: binDir, RepoRoot: root, env: env}, nil
}

// admissionPlugins are enabled in the test API server in addition to its defaults.
var admissionPlugins = []string{"OwnerReferencesPermissionEnforcement"}

// AdmissionPlugins returns the admission plugins the test API server enables beyond its defaults.
func (e *Env) AdmissionPlugins() []string { return admissionPlugins }

// Stop stops the API server and etcd and removes their data.
func (e *Env) Stop() error {
	return e.env.Stop()
}

// WriteKubeconfig writes a kubeconfig for a cluster-admin user of the API server to path, for
// tools such as kubectl.
func (e *Env) WriteKubeconfig(path string) error {
	user, err := e.env.AddUser(envtest.User{Name: "cosi-test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	data, err := user.KubeConfig()
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// RepoRoot returns the root of this repository (the directory of the main go.mod), found by
// walking up from the working directory, which `go test` sets to the package directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "config", "crd")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root (go.mod next to config/crd) not found above the working directory")
		}
		dir = parent
	}
}
