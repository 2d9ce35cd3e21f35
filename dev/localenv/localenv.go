// Package localenv runs the whole of COSI on one machine, as a cluster runs it: a real etcd and
// kube-apiserver (the binaries this project builds) with the CRDs, an object store, and
// cosi-controller, cosi-sidecar and a driver as child processes with the flags a Deployment would
// give them. Options choose the driver (s3, azure or memory), the object store (Versity, Ceph
// RGW, Azurite or none) and the identities (each component bound only to its generated roles, or cluster admin).
// cosi-local (make run), cosi-bench and the end-to-end suite use it; dev/testenv uses its
// API server for the tests that run COSI in process.
package localenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube-cosi/cosi/dev/issuer"
	"github.com/kube-cosi/cosi/dev/process"
	"github.com/kube-cosi/cosi/dev/store/azurite"
	"github.com/kube-cosi/cosi/dev/store/rgw"
	"github.com/kube-cosi/cosi/dev/store/versity"
	"github.com/kube-cosi/cosi/drivers/s3"
)

// DriverName is the S3 driver's name in the local environment (the driver's default).
const DriverName = s3.DefaultName

// Driver is the COSI driver an environment runs.
type Driver string

// The drivers.
const (
	// DriverS3 is cosi-driver-s3 against the object store (the default).
	DriverS3 Driver = "s3"
	// DriverMemory is cosi-driver-memory: no object store, nothing on disk.
	DriverMemory Driver = "memory"
	// DriverAzure is cosi-driver-azure against Azurite's Blob service (docs/drivers/azure.md).
	DriverAzure Driver = "azure"
	// DriverV1alpha1S3 is cosi-driver-v1alpha1s3, the reference cosi.v1alpha1 driver, against
	// Versity (docs/v1alpha1-drivers.md); the sidecar detects its protocol.
	DriverV1alpha1S3 Driver = "v1alpha1s3"
)

// Store is the object store an environment runs.
type Store string

// The object stores.
const (
	// StoreVersity is the Versity S3 gateway with its IAM service (the default for DriverS3).
	StoreVersity Store = "versity"
	// StoreRGW is Ceph RGW started by hack/ceph/rgw.sh (make ceph installs Ceph).
	StoreRGW Store = "rgw"
	// StoreAzurite is Azurite, Microsoft's Azure Storage emulator (make azurite installs it; the
	// default for DriverAzure).
	StoreAzurite Store = "azurite"
	// StoreNone runs no object store (the default for DriverMemory).
	StoreNone Store = "none"
)

// SidecarGracePeriod is how long Env.Sidecar is given to stop after SIGTERM: the cosi-driver
// chart's terminationGracePeriodSeconds (test/install checks both).
const SidecarGracePeriod = 150 * time.Second

// componentNamespace is the namespace of the COSI components, as the manifests deploy them.
const componentNamespace = "cosi-system"

// Identities say as whom the COSI processes talk to the API server.
type Identities string

// The identities.
const (
	// GeneratedRoles runs each component as a user bound only to its generated roles
	// (config/rbac), so that a missing permission shows (the default).
	GeneratedRoles Identities = "generated-roles"
	// Admin runs every component as a cluster admin.
	Admin Identities = "admin"
)

// Options configure an environment.
type Options struct {
	// Dir holds everything: etcd's data (Dir/etcd), the object store (Dir/s3), the logs
	// (Dir/log) and the kubeconfig (Dir/kubeconfig). Data in it survives a restart.
	Dir string
	// RepoRoot is the repository (for the CRDs and RBAC); BinDir holds the binaries.
	RepoRoot, BinDir string
	// Driver, Store and Identities choose what runs; the zero values are DriverS3, the driver's
	// default store and GeneratedRoles.
	Driver     Driver
	Store      Store
	Identities Identities
	// DriverName is the driver's --name; empty means the driver's default.
	DriverName string
	// S3Address and IAMAddress are Versity's host:port; empty means free ports. Fix them for an
	// environment that is restarted: issued Secrets hold the S3 endpoint.
	S3Address, IAMAddress string
	// AzureAddress is Azurite's host:port; empty means a free port. Fix it for an environment
	// that is restarted: issued tokens hold the Blob endpoint.
	AzureAddress string
	// Workers is the --workers of controller and sidecar; 0 leaves their default.
	Workers int
	// Metrics serves every COSI process's metrics on a free port (Component.MetricsAddress).
	Metrics bool
	// Pprof serves the Go profiles of controller and sidecar on a free port
	// (Component.PprofAddress).
	Pprof bool
	// LeaderElection makes the controller and the sidecar elect their leaders with Leases in
	// cosi-system, as deployed (and export leader_election_master_status); off, each is leader.
	LeaderElection bool
	// Admission installs the ValidatingAdmissionPolicies of config/admission, as deployed.
	Admission bool
	// Verbosity is the -v of every COSI process; 0 leaves their default.
	Verbosity int
	// Progress, when set, receives one line per finished step.
	Progress func(step string, took time.Duration)
	// DriverArgs, SidecarArgs and ControllerArgs are added to the flags of the driver, the sidecar
	// and the controller (cosi-chaos gives the memory driver a state file and its control
	// endpoint, and the sidecar a short --driver-timeout).
	DriverArgs, SidecarArgs, ControllerArgs []string
	// SidecarDriverEndpoint is where the sidecar calls the driver; empty means the driver's
	// socket (cosi-chaos puts a fault proxy in between).
	SidecarDriverEndpoint string
	// APIServerFeatureGates are the API server's --feature-gates (APIServerOptions.FeatureGates).
	APIServerFeatureGates []string
	// CRDPaths are the CRDs the API server installs (APIServerOptions.CRDPaths); empty means
	// COSI's. cosi-bench's side-by-side mode gives the reference implementation's.
	CRDPaths []string
	// ControllerManager runs kube-controller-manager next to the API server (make run does), so
	// that garbage collection and namespace deletion work as in a cluster.
	ControllerManager bool
	// Issuer, when set, is the API server's ServiceAccount issuer (APIServerOptions.Issuer), and
	// the S3 driver on Versity serves authenticationType ServiceAccount for it: its IAM service
	// verifies the tokens workloads exchange against the issuer the front publishes (while
	// Issuer.Serve runs).
	Issuer *issuer.Front
}

// Env is a running environment.
type Env struct {
	opts Options
	*APIServer
	// Kubeconfig is an admin kubeconfig for users (kubectl --kubeconfig).
	Kubeconfig string
	// Store is the Versity object store (StoreVersity), RGW the Ceph one (StoreRGW), Azurite the
	// Azure emulator (StoreAzurite).
	Store   *versity.Store
	RGW     *rgw.Cluster
	Azurite *azurite.Emulator
	// Controller, Sidecar and Driver are the COSI processes (after StartCOSI).
	Controller, Sidecar, Driver *Component
}

// Component is a COSI binary running as a child process.
type Component struct {
	*process.Process
	// MetricsAddress serves its Prometheus metrics (with Options.Metrics).
	MetricsAddress string
	// PprofAddress serves its Go profiles at /debug/pprof/ (controller and sidecar, with
	// Options.Pprof).
	PprofAddress string
}

// Start starts everything and returns when the controller and the sidecar are ready.
func Start(ctx context.Context, opts Options) (env *Env, err error) {
	e, err := New(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := e.StartCOSI(ctx); err != nil {
		return nil, errors.Join(err, e.Stop())
	}
	return e, nil
}

// New starts what COSI needs, without COSI: the API server with the CRDs, the identities and the
// object store. StartCOSI starts the COSI processes.
func New(ctx context.Context, opts Options) (env *Env, err error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	e := &Env{opts: opts, Kubeconfig: filepath.Join(opts.Dir, "kubeconfig")}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.Stop())
		}
	}()
	for _, d := range []string{"etcd", "log", "run"} {
		if err := os.MkdirAll(filepath.Join(opts.Dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	name := "etcd and kube-apiserver, CRDs installed"
	if opts.ControllerManager {
		name = "etcd, kube-apiserver and kube-controller-manager, CRDs installed"
	}
	if err := e.step(name, e.startAPIServer); err != nil {
		return nil, err
	}
	// The components' namespace holds the sidecar's grant records (sidecar.DefaultGrantNamespace),
	// whoever the components run as.
	if err := e.APIServer.CreateNamespace(ctx, componentNamespace); err != nil {
		return nil, err
	}
	if opts.Admission {
		if err := e.step("admission policies of config/admission installed", func() error {
			return e.installAdmission(ctx)
		}); err != nil {
			return nil, err
		}
	}
	if opts.Identities == GeneratedRoles {
		if err := e.step("RBAC: cosi-controller and cosi-sidecar bound to their generated roles", func() error {
			return e.componentUsers(ctx)
		}); err != nil {
			return nil, err
		}
	}
	if err := e.startStore(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// MakeRunOptions are the options of make run (dev/cmd/cosi-local): the S3 driver on Versity,
// kube-controller-manager for garbage collection and namespace deletion, and COSI as deployed,
// with leader election and the admission policies, so that kubectl cosi doctor finds what it
// finds in a cluster.
func MakeRunOptions() Options {
	return Options{Verbosity: 2, ControllerManager: true, LeaderElection: true, Admission: true}
}

// installAdmission applies the policies and bindings of config/admission.
func (e *Env) installAdmission(ctx context.Context) error {
	files, err := filepath.Glob(filepath.Join(e.opts.RepoRoot, "config", "admission", "*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no manifests in %s", filepath.Join(e.opts.RepoRoot, "config", "admission"))
	}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		if _, err := ApplyFile(ctx, e.APIServer.Client, f); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	return nil
}

func (o *Options) defaults() error {
	if o.Driver == "" {
		o.Driver = DriverS3
	}
	if o.Identities == "" {
		o.Identities = GeneratedRoles
	}
	switch {
	case o.Store == "" && (o.Driver == DriverS3 || o.Driver == DriverV1alpha1S3):
		o.Store = StoreVersity
	case o.Store == "" && o.Driver == DriverAzure:
		o.Store = StoreAzurite
	case o.Store == "":
		o.Store = StoreNone
	}
	if o.Driver == DriverS3 && (o.Store == StoreNone || o.Store == StoreAzurite) {
		return errors.New("the s3 driver needs an S3 object store (versity or rgw)")
	}
	if o.Driver == DriverAzure && o.Store != StoreAzurite {
		return errors.New("the azure driver runs against Azurite only")
	}
	if o.Driver == DriverV1alpha1S3 && o.Store != StoreVersity {
		return errors.New("the v1alpha1s3 driver runs against Versity only")
	}
	return nil
}

func (e *Env) step(name string, f func() error) error {
	start := time.Now()
	if err := f(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if e.opts.Progress != nil {
		e.opts.Progress(name, time.Since(start))
	}
	return nil
}

func (e *Env) startAPIServer() error {
	var err error
	// A fixed data directory keeps the objects across restarts.
	o := APIServerOptions{RepoRoot: e.opts.RepoRoot, BinDir: e.opts.BinDir, EtcdDir: filepath.Join(e.opts.Dir, "etcd"),
		LogDir: filepath.Join(e.opts.Dir, "log"), Issuer: e.opts.Issuer, FeatureGates: e.opts.APIServerFeatureGates,
		CRDPaths: e.opts.CRDPaths,
		// The cap docs/install.md asks of a cluster that offers keyless accesses (kubectl cosi
		// doctor checks it); ServiceAccountTokenConfig's tokens of a day fit under it.
		Flags: map[string][]string{"service-account-max-token-expiration": {"24h"}}}
	if e.opts.ControllerManager {
		o.ControllerManagerLog = filepath.Join(e.opts.Dir, "log", "kube-controller-manager.log")
	}
	e.APIServer, err = StartAPIServer(o)
	if err != nil {
		return err
	}
	return e.WriteAdminKubeconfig(e.Kubeconfig)
}

// componentUsers creates the users cosi-controller and cosi-sidecar, each bound to its generated
// roles and to nothing else, and their kubeconfigs.
func (e *Env) componentUsers(ctx context.Context) error {
	for _, name := range []string{"controller", "sidecar"} {
		if err := e.UserKubeconfig(
			ctx,
			"config/rbac/"+name+"/role.yaml",
			componentNamespace,
			"cosi-"+name,
			e.kubeconfigOf("cosi-"+name),
		); err != nil {
			return err
		}
	}
	return nil
}

// kubeconfigOf is the kubeconfig a COSI process uses.
func (e *Env) kubeconfigOf(name string) string {
	if e.opts.Identities == Admin {
		return e.Kubeconfig
	}
	return filepath.Join(e.opts.Dir, "run", name+".kubeconfig")
}

func (e *Env) startStore(ctx context.Context) error {
	switch e.opts.Store {
	case StoreVersity:
		return e.step("object store: Versity S3 gateway and its IAM service", func() error {
			var err error
			e.Store, err = versity.Start(
				ctx,
				versity.Options{Binary: filepath.Join(e.opts.BinDir, "versitygw"), Dir: filepath.Join(e.opts.Dir, "s3"),
					S3Address: e.opts.S3Address, IAMAddress: e.opts.IAMAddress},
			)
			return err
		})
	case StoreRGW:
		return e.step("object store: Ceph RGW", func() error {
			if !rgw.Installed() {
				return errors.New("radosgw not found (make ceph installs Ceph from Debian's packages)")
			}
			dir := filepath.Join(e.opts.Dir, "rgw")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			var err error
			e.RGW, err = rgw.Start(filepath.Join(e.opts.RepoRoot, "hack", "ceph", "rgw.sh"), dir)
			return err
		})
	case StoreAzurite:
		return e.step("object store: Azurite's Blob service", func() error {
			var err error
			e.Azurite, err = azurite.Start(ctx, azurite.Options{
				Binary: azurite.Binary(e.opts.BinDir), Dir: filepath.Join(e.opts.Dir, "azurite"),
				Address: e.opts.AzureAddress,
			})
			return err
		})
	case StoreNone:
		return nil
	}
	return fmt.Errorf("unknown object store %q", e.opts.Store)
}

// StartCOSI starts the driver, the sidecar and the controller, and returns when each is ready.
func (e *Env) StartCOSI(ctx context.Context) error {
	socket := filepath.Join(e.opts.Dir, "run", "driver.sock")
	endpoint := "unix://" + socket
	driverArgs, err := e.driverArgs()
	if err != nil {
		return err
	}
	metricsFlag := "--metrics-address"
	if e.opts.Driver == DriverV1alpha1S3 {
		metricsFlag = "" // a v1alpha1 driver serves no metrics
	}
	if e.Driver, err = e.component(
		"cosi-driver-"+string(e.opts.Driver),
		metricsFlag,
		append(append([]string{"--endpoint", endpoint}, driverArgs...), e.opts.DriverArgs...),
	); err != nil {
		return err
	}
	// Not ready until the new process listens.
	e.Driver.BeforeStart = func() error { return removeIfExists(socket) }
	e.Driver.Ready = process.FileExists(socket)
	sidecarEndpoint := endpoint
	if e.opts.SidecarDriverEndpoint != "" {
		sidecarEndpoint = e.opts.SidecarDriverEndpoint
	}
	if e.Sidecar, err = e.manager(
		"cosi-sidecar",
		append([]string{"--driver-endpoint", sidecarEndpoint}, e.opts.SidecarArgs...)...); err != nil {
		return err
	}
	// The sidecar lets driver calls in flight finish on SIGTERM, up to sidecar.ShutdownTimeout:
	// it is given the grace period the cosi-driver chart gives its Pod, not Stop's default. An
	// overloaded API server can hold its last writes that long (the 80,000-set benchmark's
	// restart, docs/benchmark.md).
	e.Sidecar.StopTimeout = SidecarGracePeriod
	if e.Controller, err = e.manager("cosi-controller", e.opts.ControllerArgs...); err != nil {
		return err
	}
	for _, c := range []*Component{e.Driver, e.Sidecar, e.Controller} {
		if err := e.step(c.Name+" (log: "+c.Log+")", func() error { return c.Start(ctx) }); err != nil {
			return err
		}
	}
	return nil
}

// driverArgs are the driver's flags for its name and its object store.
func (e *Env) driverArgs() ([]string, error) {
	var args []string
	if e.opts.DriverName != "" {
		args = append(args, "--name", e.opts.DriverName)
	}
	switch {
	case e.opts.Driver == DriverMemory:
	case e.opts.Driver == DriverV1alpha1S3:
		args = append(
			args,
			"--s3-endpoint",
			e.Store.S3Endpoint,
			"--iam-endpoint",
			e.Store.IAMEndpoint,
			"--credentials-file",
			e.Store.RootEnvFile(),
		)
	case e.opts.Driver == DriverAzure:
		args = append(args, "--blob-endpoint", e.Azurite.Endpoint, "--credentials-file", e.Azurite.AccountEnvFile())
	case e.opts.Store == StoreVersity:
		args = append(args, "--s3-endpoint", e.Store.S3Endpoint, "--accounts", "iam", "--iam-endpoint", e.Store.IAMEndpoint,
			"--credentials-file", e.Store.RootEnvFile())
		if e.opts.Issuer != nil {
			args = append(args, "--service-account-issuer", e.opts.Issuer.URL,
				"--service-account-issuer-thumbprints", e.opts.Issuer.Thumbprint)
		}
	case e.opts.Store == StoreRGW:
		args = append(args, "--s3-endpoint", e.RGW.Endpoint, "--accounts", "rgw", "--credentials-file", e.RGW.AdminEnvFile())
	default:
		return nil, fmt.Errorf("driver %q with object store %q", e.opts.Driver, e.opts.Store)
	}
	return args, nil
}

// manager is controller or sidecar (a controller-runtime manager) with args: its identity, leader
// election as Options.LeaderElection says, and ready when /readyz answers.
func (e *Env) manager(name string, args ...string) (*Component, error) {
	health, err := process.FreeAddress()
	if err != nil {
		return nil, err
	}
	args = append(
		args,
		"--kubeconfig",
		e.kubeconfigOf(name),
		"--leader-elect="+strconv.FormatBool(e.opts.LeaderElection),
		"--health-probe-bind-address",
		health,
	)
	if e.opts.LeaderElection {
		args = append(args, "--leader-election-namespace", componentNamespace)
	}
	if e.opts.Workers > 0 {
		args = append(args, "--workers", strconv.Itoa(e.opts.Workers))
	}
	if !e.opts.Metrics {
		args = append(args, "--metrics-bind-address", "0")
	}
	pprof := ""
	if e.opts.Pprof {
		if pprof, err = process.FreeAddress(); err != nil {
			return nil, err
		}
		args = append(args, "--pprof-bind-address", pprof)
	}
	c, err := e.component(name, "--metrics-bind-address", args)
	if err != nil {
		return nil, err
	}
	c.PprofAddress = pprof
	c.Ready = process.HTTPReady("http://" + health + "/readyz")
	return c, nil
}

// component is the COSI binary name with args; metricsFlag is its flag for the metrics address.
func (e *Env) component(name, metricsFlag string, args []string) (*Component, error) {
	c := &Component{Process: &process.Process{Name: name, Binary: filepath.Join(e.opts.BinDir, name),
		Log: filepath.Join(e.opts.Dir, "log", name+".log"), DumpOnHang: true}}
	if e.opts.Metrics && metricsFlag != "" {
		var err error
		if c.MetricsAddress, err = process.FreeAddress(); err != nil {
			return nil, err
		}
		args = append(args, metricsFlag, c.MetricsAddress)
	}
	if e.opts.Verbosity > 0 {
		args = append(args, "-v", strconv.Itoa(e.opts.Verbosity))
	}
	c.Args = args
	return c, nil
}

// Restart stops c and starts it again with the same flags, and waits until it is ready.
func (e *Env) Restart(ctx context.Context, c *Component) error {
	return c.Restart(ctx)
}

// Stop stops the COSI processes, the object store and the API server, in that order. The data
// in Dir stays.
func (e *Env) Stop() error {
	var errs []error
	for _, c := range []*Component{e.Controller, e.Sidecar, e.Driver} {
		if c != nil {
			errs = append(errs, c.Stop())
		}
	}
	if e.Store != nil {
		errs = append(errs, e.Store.Stop())
	}
	if e.RGW != nil {
		errs = append(errs, e.RGW.Stop())
	}
	if e.Azurite != nil {
		errs = append(errs, e.Azurite.Stop())
	}
	if e.APIServer != nil {
		errs = append(errs, e.APIServer.Stop())
	}
	return errors.Join(errs...)
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// AdminClient returns a client for the API server as cluster admin, allowed qps requests a
// second (the default client's limits are for components, not for load generators).
func (e *Env) AdminClient(qps float32) (*rest.Config, client.Client, error) {
	cfg := rest.CopyConfig(e.Config)
	cfg.QPS, cfg.Burst = qps, int(2*qps)
	c, err := client.New(cfg, client.Options{Scheme: e.Scheme})
	return cfg, c, err
}
