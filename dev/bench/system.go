package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/internal/kube/scheme"
)

const driverName = "bench.memory.cosi.io"

// system is one fresh API server with COSI running against it as processes (dev/localenv:
// the memory driver, every component as cluster admin, metrics on).
type system struct {
	cfg    Config
	env    *localenv.Env
	rest   *rest.Config
	client client.Client
	dir    string
	// requests counts the benchmark's own API requests, to tell them from COSI's.
	requests *requestCounter

	watch *watcher
}

// sidecarArgs are the sidecar's flags that cfg sets.
func sidecarArgs(cfg Config) []string {
	if cfg.SecretCheckInterval <= 0 {
		return nil
	}
	return []string{"--secret-check-interval", cfg.SecretCheckInterval.String()}
}

// startSystem starts the API server and the watches; env.StartCOSI starts COSI.
func startSystem(ctx context.Context, cfg Config) (*system, error) {
	s := &system{cfg: cfg}
	var err error
	if s.dir, err = os.MkdirTemp("", "cosi-bench"); err != nil {
		return nil, err
	}
	if s.env, err = localenv.New(ctx, localenv.Options{
		Dir:         s.dir,
		RepoRoot:    cfg.RepoRoot,
		BinDir:      cfg.BinDir,
		Driver:      localenv.DriverMemory,
		DriverName:  driverName,
		Identities:  localenv.Admin,
		Workers:     cfg.Workers,
		Metrics:     true,
		SidecarArgs: sidecarArgs(cfg),
		Pprof:       cfg.Profiles != "",

		APIServerFeatureGates: cfg.APIServerFeatureGates,
	}); err != nil {
		return nil, fmt.Errorf("starting the API server: %w", err)
	}
	if s.rest, _, err = s.env.AdminClient(5000); err != nil {
		return nil, errors.Join(err, s.env.Stop())
	}
	// Every request of the benchmark (writers, watches, scrapes) goes through the counter.
	s.requests = newRequestCounter()
	s.rest.Wrap(s.requests.wrap)
	if s.client, err = client.New(s.rest, client.Options{Scheme: scheme.New()}); err != nil {
		return nil, errors.Join(err, s.env.Stop())
	}
	if s.watch, err = newWatcher(ctx, s.rest); err != nil {
		return nil, errors.Join(err, s.env.Stop())
	}
	return s, nil
}

// stop stops everything; it keeps the logs when the run failed.
func (s *system) stop(failed bool) {
	_ = s.env.Stop()
	if failed {
		s.cfg.logf("logs kept in %s", filepath.Join(s.dir, "log"))
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
	return recordedTimes(m, uids)
}

// recordedTimes returns, for each uid, the time recorded in m, and how many are recorded. The
// caller holds the lock of m.
func recordedTimes(m map[types.UID]time.Time, uids []types.UID) ([]time.Time, int) {
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
func (w *watcher) waitFor(
	ctx context.Context,
	m map[types.UID]time.Time,
	uids []types.UID,
	timeout time.Duration,
) ([]time.Time, error) {
	return pollTimes(ctx, len(uids), timeout, func() ([]time.Time, int) { return w.times(m, uids) })
}

// pollTimes asks times every 5 ms until it has recorded all n objects, and returns their times.
func pollTimes(
	ctx context.Context, n int, timeout time.Duration, times func() ([]time.Time, int),
) ([]time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		got, recorded := times()
		if recorded == n {
			return got, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d objects after %v", recorded, n, timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
