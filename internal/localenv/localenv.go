// Package localenv runs the whole of COSI on one machine, as a cluster runs it: a real etcd and
// kube-apiserver (the binaries this project builds), the CRDs and the generated RBAC, the Versity
// S3 gateway as the object store, and cosi-controller, cosi-sidecar and cosi-driver-s3 as child
// processes with the flags a Deployment would give them, each authenticating as its own user
// bound only to its generated ClusterRole. cosi-local (make run) and the end-to-end suite use it.
package localenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/internal/scheme"
	"github.com/kube-cosi/cosi/internal/versity"
)

// DriverName is the S3 driver's name in the local environment (the driver's default).
const DriverName = s3.DefaultName

// Options configure an environment.
type Options struct {
	// Dir holds everything: etcd's data (Dir/etcd), the object store (Dir/s3), the logs
	// (Dir/log) and the kubeconfig (Dir/kubeconfig). Data in it survives a restart.
	Dir string
	// RepoRoot is the repository (for the CRDs and RBAC); BinDir holds the binaries.
	RepoRoot, BinDir string
	// S3Address and IAMAddress are the object store's host:port; empty means free ports. Fix
	// them for an environment that is restarted: issued Secrets hold the S3 endpoint.
	S3Address, IAMAddress string
	// Progress, when set, receives one line per finished step.
	Progress func(step string, took time.Duration)
}

// Env is a running environment.
type Env struct {
	opts Options
	// Kubeconfig is an admin kubeconfig for users (kubectl --kubeconfig).
	Kubeconfig string
	// Config and Client are admin clients.
	Config *rest.Config
	Client client.Client
	// Store is the object store.
	Store *versity.Store
	// Controller, Sidecar and Driver are the COSI processes.
	Controller, Sidecar, Driver *Process

	apiServer *envtest.Environment
}

// Process is a COSI binary running as a child process.
type Process struct {
	Name string
	// Log is the process's log file (appended to across restarts).
	Log    string
	health string // host:port of /readyz, or "" (then: the socket file)
	socket string
	binary string
	args   []string
	cmd    *exec.Cmd
	done   chan struct{}
}

// Start starts everything and returns when the controller and the sidecar are ready.
func Start(ctx context.Context, opts Options) (env *Env, err error) {
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
	if err := e.step("etcd and kube-apiserver, CRDs installed", e.startAPIServer); err != nil {
		return nil, err
	}
	var controllerKubeconfig, sidecarKubeconfig string
	if err := e.step("RBAC: cosi-controller and cosi-sidecar bound to their generated roles", func() error {
		var err error
		if controllerKubeconfig, err = e.componentUser("cosi-controller", "config/rbac/controller/role.yaml"); err != nil {
			return err
		}
		sidecarKubeconfig, err = e.componentUser("cosi-sidecar", "config/rbac/sidecar/role.yaml")
		return err
	}); err != nil {
		return nil, err
	}
	if err := e.step("object store: Versity S3 gateway and its IAM service", func() error {
		var err error
		e.Store, err = versity.Start(ctx, versity.Options{Binary: filepath.Join(opts.BinDir, "versitygw"), Dir: filepath.Join(opts.Dir, "s3"),
			S3Address: opts.S3Address, IAMAddress: opts.IAMAddress})
		return err
	}); err != nil {
		return nil, err
	}

	socket := filepath.Join(opts.Dir, "run", "driver.sock")
	endpoint := "unix://" + socket
	sidecarHealth, err := freeAddress()
	if err != nil {
		return nil, err
	}
	controllerHealth, err := freeAddress()
	if err != nil {
		return nil, err
	}
	e.Driver = e.process("cosi-driver-s3", "", socket, "--endpoint", endpoint, "--s3-endpoint", e.Store.S3Endpoint,
		"--accounts", "iam", "--iam-endpoint", e.Store.IAMEndpoint, "--credentials-file", e.Store.RootEnvFile(), "-v", "2")
	e.Sidecar = e.process("cosi-sidecar", sidecarHealth, "", "--kubeconfig", sidecarKubeconfig, "--driver-endpoint", endpoint,
		"--leader-elect=false", "--metrics-bind-address", "0", "--health-probe-bind-address", sidecarHealth, "-v", "2")
	e.Controller = e.process("cosi-controller", controllerHealth, "", "--kubeconfig", controllerKubeconfig,
		"--leader-elect=false", "--metrics-bind-address", "0", "--health-probe-bind-address", controllerHealth, "-v", "2")
	for _, p := range []*Process{e.Driver, e.Sidecar, e.Controller} {
		if err := e.step(p.Name+" (log: "+p.Log+")", func() error { return p.start(ctx) }); err != nil {
			return nil, err
		}
	}
	return e, nil
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
	e.apiServer = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(e.opts.RepoRoot, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: e.opts.BinDir,
	}
	// A fixed data directory keeps the objects across restarts (envtest removes only the
	// temporary directories it makes itself).
	e.apiServer.ControlPlane.Etcd = &envtest.Etcd{DataDir: filepath.Join(e.opts.Dir, "etcd")}
	var err error
	if e.Config, err = e.apiServer.Start(); err != nil {
		return err
	}
	if e.Client, err = client.New(e.Config, client.Options{Scheme: scheme.New()}); err != nil {
		return err
	}
	admin, err := e.apiServer.AddUser(envtest.User{Name: "cosi-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	data, err := admin.KubeConfig()
	if err != nil {
		return err
	}
	return os.WriteFile(e.Kubeconfig, data, 0o600)
}

// componentUser installs the generated ClusterRole at rolePath, creates a user named like the
// component bound to it (and to nothing else), and returns a kubeconfig for that user.
func (e *Env) componentUser(name, rolePath string) (string, error) {
	data, err := os.ReadFile(filepath.Join(e.opts.RepoRoot, rolePath))
	if err != nil {
		return "", err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		return "", fmt.Errorf("%s: %w", rolePath, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}},
	}
	ctx := context.Background()
	for _, o := range []client.Object{role, binding} {
		if err := e.Client.Create(ctx, o); apierrors.IsAlreadyExists(err) {
			err = e.Client.Patch(ctx, o, client.Merge)
		} else if err != nil {
			return "", err
		}
	}
	user, err := e.apiServer.AddUser(envtest.User{Name: name}, nil)
	if err != nil {
		return "", err
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(e.opts.Dir, "run", name+".kubeconfig")
	return path, os.WriteFile(path, kubeconfig, 0o600)
}

func (e *Env) process(name, health, socket string, args ...string) *Process {
	return &Process{Name: name, Log: filepath.Join(e.opts.Dir, "log", name+".log"), health: health, socket: socket,
		binary: filepath.Join(e.opts.BinDir, name), args: args}
}

// start starts p and waits until it is ready: /readyz answers, or its socket exists.
func (p *Process) start(ctx context.Context) error {
	log, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	if p.socket != "" {
		_ = os.Remove(p.socket) // not ready until the new process listens
	}
	p.cmd = exec.Command(p.binary, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return err
	}
	p.done = make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(p.done) }()

	deadline := time.After(60 * time.Second)
	for {
		if p.ready() {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited; see %s", p.Name, p.Log)
		case <-deadline:
			return fmt.Errorf("%s not ready after 60s; see %s", p.Name, p.Log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (p *Process) ready() bool {
	if p.health == "" {
		_, err := os.Stat(p.socket)
		return err == nil
	}
	resp, err := http.Get("http://" + p.health + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Stop stops p with SIGTERM (SIGKILL after 30 seconds).
func (p *Process) Stop() error {
	if p == nil || p.cmd == nil || p.done == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within 30s of SIGTERM; see %s", p.Name, p.Log)
	}
}

// Restart stops p and starts it again with the same flags.
func (e *Env) Restart(ctx context.Context, p *Process) error {
	if err := p.Stop(); err != nil {
		return err
	}
	return p.start(ctx)
}

// Stop stops the COSI processes, the object store and the API server, in that order. The data
// in Dir stays.
func (e *Env) Stop() error {
	var errs []error
	for _, p := range []*Process{e.Controller, e.Sidecar, e.Driver} {
		errs = append(errs, p.Stop())
	}
	if e.Store != nil {
		errs = append(errs, e.Store.Stop())
	}
	if e.apiServer != nil && e.Config != nil {
		errs = append(errs, e.apiServer.Stop())
	}
	return errors.Join(errs...)
}

func freeAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
