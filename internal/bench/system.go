package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/scheme"
)

const driverName = "bench.memory.cosi.io"

// system is one fresh API server with COSI running against it as processes.
type system struct {
	cfg        Config
	env        *envtest.Environment
	rest       *rest.Config
	client     client.Client
	dir        string
	kubeconfig string
	endpoint   string

	driver, sidecar, controller          *process
	driverMetrics, sidecarMetrics, ctrlM string

	watch *watcher
}

// process is a COSI binary running as a child process.
type process struct {
	name   string
	health string // host:port of /readyz
	args   []string
	cmd    *exec.Cmd
	log    *os.File
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func startSystem(ctx context.Context, cfg Config) (*system, error) {
	s := &system{cfg: cfg}
	var err error
	if s.dir, err = os.MkdirTemp("", "cosi-bench"); err != nil {
		return nil, err
	}
	s.env = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(cfg.RepoRoot, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: cfg.BinDir,
	}
	if s.rest, err = s.env.Start(); err != nil {
		return nil, fmt.Errorf("starting the API server: %w", err)
	}
	s.rest.QPS, s.rest.Burst = 5000, 10000
	if s.client, err = client.New(s.rest, client.Options{Scheme: scheme.New()}); err != nil {
		return nil, err
	}
	user, err := s.env.AddUser(envtest.User{Name: "cosi-bench", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	data, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	s.kubeconfig = filepath.Join(s.dir, "kubeconfig")
	if err := os.WriteFile(s.kubeconfig, data, 0o600); err != nil {
		return nil, err
	}
	s.endpoint = "unix://" + filepath.Join(s.dir, "driver.sock")
	if s.watch, err = newWatcher(ctx, s.rest); err != nil {
		return nil, err
	}
	return s, nil
}

// startCOSI starts the driver, sidecar and controller and waits until they are ready.
func (s *system) startCOSI(ctx context.Context) error {
	var err error
	for _, addr := range []*string{&s.driverMetrics, &s.sidecarMetrics, &s.ctrlM} {
		if *addr, err = freePort(); err != nil {
			return err
		}
	}
	s.driver = &process{name: "cosi-driver-memory", args: []string{"--endpoint", s.endpoint, "--name", driverName, "--metrics-address", s.driverMetrics}}
	if err := s.start(s.driver); err != nil {
		return err
	}
	sidecarHealth, _ := freePort()
	s.sidecar = &process{name: "cosi-sidecar", health: sidecarHealth, args: []string{"--kubeconfig", s.kubeconfig, "--driver-endpoint", s.endpoint, "--leader-elect=false",
		"--workers", fmt.Sprint(s.cfg.Workers), "--metrics-bind-address", s.sidecarMetrics, "--health-probe-bind-address", sidecarHealth}}
	ctrlHealth, _ := freePort()
	s.controller = &process{name: "cosi-controller", health: ctrlHealth, args: []string{"--kubeconfig", s.kubeconfig, "--leader-elect=false",
		"--workers", fmt.Sprint(s.cfg.Workers), "--metrics-bind-address", s.ctrlM, "--health-probe-bind-address", ctrlHealth}}
	for _, p := range []*process{s.sidecar, s.controller} {
		if err := s.start(p); err != nil {
			return err
		}
	}
	for _, addr := range []string{sidecarHealth, ctrlHealth} {
		if err := waitReady(ctx, addr); err != nil {
			return err
		}
	}
	return nil
}

func (s *system) start(p *process) error {
	var err error
	if p.log == nil {
		if p.log, err = os.Create(filepath.Join(s.dir, p.name+".log")); err != nil {
			return err
		}
	}
	p.cmd = exec.Command(filepath.Join(s.cfg.BinDir, p.name), p.args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	return p.cmd.Start()
}

// restart stops a process with SIGTERM (letting reconciles in flight finish), starts it again and
// waits until it is ready.
func (s *system) restart(ctx context.Context, p *process) error {
	if err := p.stop(); err != nil {
		return err
	}
	if err := s.start(p); err != nil {
		return err
	}
	return waitReady(ctx, p.health)
}

func (p *process) stop() error {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
		return nil
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Signal(syscall.SIGQUIT) // a goroutine dump into its log
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
		return fmt.Errorf("%s did not stop within 30s of SIGTERM (log: %s)", p.name, p.log.Name())
	}
}

func waitReady(ctx context.Context, addr string) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready after 60s", addr)
}

// stop stops everything; it keeps the logs when the run failed.
func (s *system) stop(failed bool) {
	for _, p := range []*process{s.controller, s.sidecar, s.driver} {
		_ = p.stop()
		if p != nil && p.log != nil {
			p.log.Close()
		}
	}
	_ = s.env.Stop()
	if failed {
		s.cfg.logf("logs kept in %s", s.dir)
		return
	}
	_ = os.RemoveAll(s.dir)
}

// watcher records, from a watch, when each claim and access became Provisioned and when each
// went away.
type watcher struct {
	mu          sync.Mutex
	provisioned map[types.UID]time.Time
	deleted     map[types.UID]time.Time
	cache       cache.Cache
}

func newWatcher(ctx context.Context, cfg *rest.Config) (*watcher, error) {
	c, err := cache.New(cfg, cache.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, err
	}
	w := &watcher{provisioned: map[types.UID]time.Time{}, deleted: map[types.UID]time.Time{}, cache: c}
	for _, obj := range []client.Object{&cosiapi.BucketClaim{}, &cosiapi.BucketAccess{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return nil, err
		}
		record := func(o any) {
			now := time.Now()
			var uid types.UID
			var ok bool
			switch x := o.(type) {
			case *cosiapi.BucketClaim:
				uid, ok = x.UID, meta.IsStatusConditionTrue(x.Status.Conditions, cosiapi.ConditionProvisioned)
			case *cosiapi.BucketAccess:
				uid, ok = x.UID, meta.IsStatusConditionTrue(x.Status.Conditions, cosiapi.ConditionProvisioned)
			}
			if !ok {
				return
			}
			w.mu.Lock()
			if _, seen := w.provisioned[uid]; !seen {
				w.provisioned[uid] = now
			}
			w.mu.Unlock()
		}
		_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    record,
			UpdateFunc: func(_, n any) { record(n) },
			DeleteFunc: func(o any) {
				if tomb, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
					o = tomb.Obj
				}
				if co, ok := o.(client.Object); ok {
					w.mu.Lock()
					w.deleted[co.GetUID()] = time.Now()
					w.mu.Unlock()
				}
			},
		})
		if err != nil {
			return nil, err
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("watch cache did not sync")
	}
	return w, nil
}

// times returns, for each uid, the time recorded in m, and how many are recorded.
func (w *watcher) times(m map[types.UID]time.Time, uids []types.UID) ([]time.Time, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]time.Time, len(uids))
	n := 0
	for i, uid := range uids {
		if t, ok := m[uid]; ok {
			out[i] = t
			n++
		}
	}
	return out, n
}

// waitFor waits until all uids are recorded in m.
func (w *watcher) waitFor(ctx context.Context, m map[types.UID]time.Time, uids []types.UID, timeout time.Duration) ([]time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		times, n := w.times(m, uids)
		if n == len(uids) {
			return times, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d objects after %v", n, len(uids), timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
