package localenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kube-cosi/cosi/dev/cluster"
	"github.com/kube-cosi/cosi/dev/issuer"
	"github.com/kube-cosi/cosi/dev/process"
	"github.com/kube-cosi/cosi/internal/kube/scheme"
)

// APIServerOptions configure an API server.
type APIServerOptions struct {
	// RepoRoot is the repository (for the CRDs); empty means RepoRoot().
	RepoRoot string
	// CRDPaths are the files or directories of the CRDs to install; empty means COSI's,
	// RepoRoot/config/crd/bases. A test of the migration from COSI v1alpha1 gives the v1alpha1 ones.
	CRDPaths []string
	// BinDir holds kube-apiserver, etcd and kubectl; empty means $KUBEBUILDER_ASSETS, else
	// RepoRoot/bin.
	BinDir string
	// EtcdDir, when set, is etcd's data directory, kept across restarts; empty means a temporary
	// one, removed by Stop.
	EtcdDir string
	// AdmissionPlugins are enabled in addition to the API server's defaults.
	AdmissionPlugins []string
	// FeatureGates are the API server's --feature-gates ("Name=true", ...); none leaves the
	// defaults.
	FeatureGates []string
	// Flags are more kube-apiserver flags, by name without the dashes, each value given as a flag
	// of its own (--api-audiences=a --api-audiences=b): the settings of a cluster that a test
	// needs, such as service-account-max-token-expiration.
	Flags map[string][]string
	// ControllerManagerLog, when set, runs kube-controller-manager from BinDir too, logging to
	// this file: owner references cascade and deleted namespaces finish deleting, as in a cluster.
	ControllerManagerLog string
	// LogDir receives the logs of etcd and kube-apiserver once Crash restarted them; empty
	// discards them.
	LogDir string
	// Issuer, when set, is the API server's ServiceAccount token issuer: its URL the
	// --service-account-issuer, its JWKS the --service-account-jwks-uri. Once the API server runs,
	// the front serves its documents and anonymous users may read them (AllowIssuerDiscovery), so
	// that an object store's IAM service can verify the ServiceAccount tokens workloads exchange.
	Issuer *issuer.Front
}

// APIServer is a running etcd and kube-apiserver with the COSI CRDs installed.
type APIServer struct {
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
	// AdmissionPlugins are the admission plugins enabled beyond the API server's defaults.
	AdmissionPlugins []string

	env *envtest.Environment
	kcm *process.Process
	// restarted are etcd and kube-apiserver once Crash runs them, by name; logDir their logs.
	restarted map[string]*process.Process
	logDir    string
}

// StartAPIServer starts etcd and kube-apiserver from BinDir and installs the CRDs from
// config/crd/bases. It fails, rather than skipping, when the binaries are missing: a test that
// silently does not run would hide a broken build.
func StartAPIServer(opts APIServerOptions) (*APIServer, error) {
	root := opts.RepoRoot
	if root == "" {
		var err error
		if root, err = RepoRoot(); err != nil {
			return nil, err
		}
	}
	binDir := opts.BinDir
	if binDir == "" {
		if binDir = os.Getenv("KUBEBUILDER_ASSETS"); binDir == "" {
			binDir = filepath.Join(root, "bin")
		}
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(binDir, name)); err != nil {
			return nil, fmt.Errorf(
				"%s not found in %s: run `make kube-binaries` (or `make test`) to build it: %w",
				name,
				binDir,
				err,
			)
		}
	}
	crds := opts.CRDPaths
	if len(crds) == 0 {
		crds = []string{filepath.Join(root, "config", "crd", "bases")}
	}
	s := scheme.New()
	env := &envtest.Environment{
		CRDDirectoryPaths:     crds,
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: binDir,
		Scheme:                s,
	}
	if opts.EtcdDir != "" {
		// envtest removes only the temporary directories it makes itself.
		env.ControlPlane.Etcd = &envtest.Etcd{DataDir: opts.EtcdDir}
	}
	if len(opts.AdmissionPlugins) > 0 {
		env.ControlPlane.GetAPIServer().Configure().Append("enable-admission-plugins", opts.AdmissionPlugins...)
	}
	if len(opts.FeatureGates) > 0 {
		env.ControlPlane.GetAPIServer().Configure().Set("feature-gates", strings.Join(opts.FeatureGates, ","))
	}
	for name, values := range opts.Flags {
		env.ControlPlane.GetAPIServer().Configure().Append(name, values...)
	}
	if opts.Issuer != nil {
		env.ControlPlane.GetAPIServer().Configure().
			Set("service-account-issuer", opts.Issuer.URL).
			Set("service-account-jwks-uri", opts.Issuer.JWKSURI)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", binDir, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return nil, errors.Join(err, env.Stop())
	}
	a := &APIServer{Config: cfg, Client: c, Scheme: s, BinDir: binDir, RepoRoot: root,
		AdmissionPlugins: opts.AdmissionPlugins, env: env, logDir: opts.LogDir}
	if opts.ControllerManagerLog != "" {
		if err := a.startControllerManager(opts.ControllerManagerLog); err != nil {
			return nil, errors.Join(err, a.Stop())
		}
	}
	if opts.Issuer != nil {
		if err := opts.Issuer.SetBackend(cfg); err != nil {
			return nil, errors.Join(err, a.Stop())
		}
		if err := a.AllowIssuerDiscovery(context.Background()); err != nil {
			return nil, errors.Join(err, a.Stop())
		}
	}
	return a, nil
}

// startControllerManager runs kube-controller-manager with the flags of the test node
// (dev/cluster) and the service account key envtest made for the API server.
func (a *APIServer) startControllerManager(log string) error {
	bin := filepath.Join(a.BinDir, "kube-controller-manager")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("kube-controller-manager not found in %s: run `make kube-binaries` to build it: %w", a.BinDir, err)
	}
	certDir := a.env.ControlPlane.APIServer.CertDir
	kubeconfig := filepath.Join(certDir, "kube-controller-manager.kubeconfig")
	if err := a.WriteKubeconfig(kubeconfig, "system:kube-controller-manager"); err != nil {
		return err
	}
	a.kcm = &process.Process{
		Name:     "kube-controller-manager",
		Binary:   bin,
		Log:      log,
		OwnGroup: true,
		Args: cluster.ControllerManagerArgs(
			kubeconfig,
			filepath.Join(certDir, "sa-signer.key"),
			filepath.Join(certDir, "apiserver.crt"),
		),
	}
	return a.kcm.Start(context.Background())
}

// Stop stops the API server and etcd, and removes etcd's data unless it is in EtcdDir.
func (a *APIServer) Stop() error {
	if a == nil {
		return nil
	}
	var kcmErr error
	if a.kcm != nil {
		kcmErr = a.kcm.Stop()
	}
	// The API server before etcd, whoever runs them (envtest, or Crash after it restarted them).
	return errors.Join(kcmErr, a.restarted[KubeAPIServer].Stop(), a.env.Stop(), a.restarted[Etcd].Stop())
}

// Kubeconfig returns a kubeconfig for a user authenticated by a client certificate.
func (a *APIServer) Kubeconfig(user string, groups ...string) ([]byte, error) {
	u, err := a.env.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding user %s: %w", user, err)
	}
	return u.KubeConfig()
}

// WriteKubeconfig writes a kubeconfig for user, in groups, to path (mode 0600).
func (a *APIServer) WriteKubeconfig(path, user string, groups ...string) error {
	data, err := a.Kubeconfig(user, groups...)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// WriteAdminKubeconfig writes a kubeconfig for a cluster-admin user to path, for tools such as
// kubectl.
func (a *APIServer) WriteAdminKubeconfig(path string) error {
	return a.WriteKubeconfig(path, "cosi-admin", "system:masters")
}

// CreateNamespace creates a namespace, unless it exists.
func (a *APIServer) CreateNamespace(ctx context.Context, name string) error {
	err := a.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
