// Package chaos is cosi-chaos: a seeded workload of BucketClaims and BucketAccesses created, used
// and deleted concurrently against the real cosi-controller, cosi-sidecar and cosi-driver-memory
// processes, a kube-apiserver and an etcd (dev/localenv), while processes are killed with
// SIGKILL at random moments and inside driver calls, etcd and the API server crash, and the driver
// fails and stalls. At the end it waits for the system to converge and audits it from the
// backend's side and the API's: what leaked, what was lost, what is stuck. docs/reliability.md
// describes the checks and the figures of its runs.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/process"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

// The drivers a run can use, and their names in it.
const (
	// DriverMemory is cosi-driver-memory with its own faults, control endpoint and journal; its
	// state file is the backend the audit reads.
	DriverMemory = "memory"
	// DriverS3 is cosi-driver-s3 against Versity's S3 gateway and IAM service, behind a fault
	// proxy (proxy.go); the audit asks the store and tries keys with S3 requests.
	DriverS3 = "s3"
	// DriverV1alpha1 is cosi-driver-v1alpha1s3, the reference COSI v1alpha1 driver, on Versity,
	// behind a fault proxy of the v1alpha1 protocol (proxy_v1alpha1.go) that also makes it name
	// every account itself, anew on each grant: the sidecar drives it through its v1alpha1 adapter.
	// The workload is what v1alpha1 can do (plan.go, v1alpha1Plan); the audit accounts accounts by
	// the grant records' driverAccountIDs, and takes an account that no access explains as a leak
	// that the sidecar must have reported (audit_v1alpha1.go).
	DriverV1alpha1 = "v1alpha1"

	memoryDriverName   = "chaos.memory.cosi.io"
	s3DriverName       = "chaos.s3.cosi.io"
	v1alpha1DriverName = "chaos.v1alpha1.cosi.io"
)

// Config says what to run.
type Config struct {
	// RepoRoot is the repository (CRDs, RBAC); BinDir holds the COSI binaries, kube-apiserver,
	// etcd and kube-controller-manager.
	RepoRoot, BinDir string
	// Dir holds the run's data and logs; empty means a temporary directory, removed after a run
	// without violations.
	Dir string
	// Driver is DriverMemory (the default), DriverS3 or DriverV1alpha1.
	Driver string
	// Seed chooses the workload and the faults; the same seed replays the same plan.
	Seed int64
	// Claims is the number of BucketClaims (each with its life: created, accessed, deleted or
	// kept); about as many BucketAccesses come with them.
	Claims int
	// PerNamespace is the number of claims in one namespace; Writers the namespaces worked on at
	// once.
	PerNamespace, Writers int
	// Faults are what is injected.
	Faults Faults
	// DriverTimeout is the sidecar's --driver-timeout; slow calls take longer.
	DriverTimeout time.Duration
	// NewKeyPerGrant makes the driver issue a new key on every grant of an existing account,
	// keeping only the previous one valid, as the S3 driver does on IAM: a Secret left with a
	// key two grants old shows as a lost key.
	NewKeyPerGrant bool
	// RotationPeriod is the rotation period of the BucketAccessClass that rotates periodically
	// (cosiapi.ParameterRotationPeriod); RotationGracePeriod the sidecar's
	// --rotation-grace-period, after which a rotated key is retired.
	RotationPeriod, RotationGracePeriod time.Duration
	// ConvergeTimeout bounds the wait for convergence once the workload and the faults ended.
	ConvergeTimeout time.Duration
	// SelfCheck, after a run without violations, plants one violation of each kind behind COSI's
	// back and checks that the audit finds each (Result.SelfCheck).
	SelfCheck bool
	// KnownGaps are checks whose findings come from a known gap in COSI (docs/reliability.md,
	// "Found by the suite"), for a run that shows everything else: they are reported apart
	// (Result.KnownGaps), not as violations, and neither hold up convergence nor keep the
	// self-check from running (which still plants one of each and checks that the audit finds
	// it). cosi-chaos tolerates none unless told.
	KnownGaps []string
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// Faults are the faults of a run; the zero value injects none.
type Faults struct {
	// Kills kills cosi-controller, cosi-sidecar and the driver with SIGKILL at random moments and
	// starts them again.
	Kills bool
	// Pauses holds a driver call inside the driver, before or after it acts, and kills the driver
	// or the sidecar while it is held.
	Pauses bool
	// ControlPlane crashes etcd and kube-apiserver (SIGKILL) and starts them again.
	ControlPlane bool
	// ErrorRate is the share of driver calls that fail with a retryable code (Unavailable,
	// DeadlineExceeded, Aborted, ResourceExhausted, Canceled), half of them after the driver acted.
	ErrorRate float64
	// SlowRate is the share of driver calls held beyond DriverTimeout before the driver acts; the
	// driver gives up with its caller, as one that passes its context on to its backend does.
	SlowRate float64
	// LateRate is the share of driver calls held beyond DriverTimeout that the driver carries out
	// all the same, after the sidecar gave up: a backend that had the request already.
	LateRate float64
	// Interval is the mean time between two process faults (kills, pauses, crashes).
	Interval time.Duration
}

// DefaultConfig is a run of n claims with every fault.
func DefaultConfig(n int) Config {
	return Config{
		Seed: 1, Claims: n, PerNamespace: 4, Writers: 8,
		Faults: Faults{Kills: true, Pauses: true, ControlPlane: true, ErrorRate: 0.3, SlowRate: 0.03,
			Interval: 2 * time.Second},
		DriverTimeout: 2 * time.Second, NewKeyPerGrant: true, ConvergeTimeout: 5 * time.Minute,
		RotationPeriod: 15 * time.Second, RotationGracePeriod: 2 * time.Second,
	}
}

// Result is what a run found.
type Result struct {
	Seed             int64
	Claims, Accesses int
	Namespaces       int
	// Faults counts the faults injected, by kind.
	Faults map[string]int
	// Rotations counts what the workload asked of credential rotation and Secret refresh, and what
	// the driver did (its journal): rotations, retirements.
	Rotations map[string]int
	// Workload is how long the workload ran (with the faults); Converge how long the system then
	// took to pass the audit (or ConvergeTimeout when it never did).
	Workload, Converge time.Duration
	Converged          bool
	// Violations are the audit's findings after convergence (or at the timeout).
	Violations []Violation
	// KnownGaps are the findings of the checks of Config.KnownGaps, after convergence.
	KnownGaps []Violation
	// ReportedLeaks (DriverV1alpha1) are the accounts left in the store that no access explains,
	// each covered by a DriverAccountMayHaveLeaked event about an access to its bucket: made by a
	// grant whose answer was lost, known only to the driver, and reported by the sidecar.
	ReportedLeaks []string
	// SelfCheck are the checks that found their planted violation (Config.SelfCheck).
	SelfCheck map[string]bool
	// Dir holds the logs when they were kept.
	Dir string
}

// Run starts the system, runs the workload with the faults, waits for convergence, audits, and
// returns what it found. An error means the run itself failed (the system did not start, the
// harness lost a process), not that the audit found violations.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	cfg.defaults()
	keep := cfg.Dir != ""
	if cfg.Dir == "" {
		if cfg.Dir, err = os.MkdirTemp("", "cosi-chaos"); err != nil {
			return nil, err
		}
	}
	r := &run{cfg: cfg, start: time.Now(), res: &Result{Seed: cfg.Seed, Faults: map[string]int{},
		Rotations: map[string]int{}, Dir: cfg.Dir}}
	defer func() {
		if stopErr := r.stop(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		if err == nil && len(r.res.Violations) == 0 && !keep {
			_ = os.RemoveAll(cfg.Dir)
			r.res.Dir = ""
		}
	}()
	if err := r.setup(ctx); err != nil {
		return r.res, err
	}
	plan := newPlan(cfg)
	r.res.Namespaces, r.res.Claims, r.res.Accesses = len(plan.namespaces), plan.claims(), plan.accesses()
	r.logf("seed %d: %d claims and %d accesses in %d namespaces", cfg.Seed, r.res.Claims, r.res.Accesses,
		r.res.Namespaces)
	for _, ns := range plan.namespaces {
		for _, a := range ns.access {
			switch {
			case a.periodic && a.keep:
				r.res.Rotations["accesses rotating every "+cfg.RotationPeriod.String()+" (kept)"]++
			case a.periodic:
				r.res.Rotations["accesses rotating every "+cfg.RotationPeriod.String()+" (deleted)"]++
			}
		}
	}
	if err := r.createStatic(ctx, plan); err != nil {
		return r.res, err
	}
	if err := r.setFaults(ctx, true); err != nil {
		return r.res, err
	}
	monkeyCtx, stopMonkey := context.WithCancel(ctx)
	monkeyDone := make(chan error, 1)
	r.firstRound = make(chan struct{})
	go func() { monkeyDone <- r.monkey(monkeyCtx) }()
	watchDone := make(chan struct{})
	go func() { r.watchSecrets(monkeyCtx); close(watchDone) }()
	workStart := time.Now()
	workErr := r.work(ctx, plan)
	if workErr == nil {
		// A short run goes on until every kind of fault was injected once (the kills inside a
		// rotation's calls wait for one), for at most firstRoundPatience.
		select {
		case <-r.firstRound:
		case <-time.After(firstRoundPatience):
			r.logf("not every kind of fault was injected %s after the workload", firstRoundPatience)
		case <-ctx.Done():
		}
	}
	stopMonkey()
	monkeyErr := <-monkeyDone
	<-watchDone
	r.res.Workload = time.Since(workStart)
	if err := errors.Join(workErr, monkeyErr); err != nil {
		return r.res, err
	}
	r.logf("workload done in %s; faults stopped: %v", r.res.Workload.Round(time.Second), r.res.Faults)
	if err := r.calm(ctx); err != nil {
		return r.res, err
	}
	convergeStart := time.Now()
	found, err := r.converge(ctx, plan)
	r.res.Converge = time.Since(convergeStart)
	if err != nil {
		return r.res, err
	}
	violations, known := r.knownGaps(found)
	r.res.Converged = len(violations) == 0
	r.countDriverFaults()
	r.res.Violations = r.histories(ctx, violations)
	r.res.KnownGaps = r.histories(ctx, known)
	if cfg.SelfCheck && len(violations) == 0 {
		// The converged audit's, not the self-check's.
		tried, reported := r.res.Rotations[replacedKeysTried], r.res.ReportedLeaks
		r.res.SelfCheck, err = r.selfCheck(ctx)
		r.res.Rotations[replacedKeysTried], r.res.ReportedLeaks = tried, reported
		if err != nil {
			return r.res, err
		}
	}
	return r.res, nil
}

func (c *Config) defaults() {
	d := DefaultConfig(c.Claims)
	if c.PerNamespace <= 0 {
		c.PerNamespace = d.PerNamespace
	}
	if c.Writers <= 0 {
		c.Writers = d.Writers
	}
	if c.DriverTimeout <= 0 {
		c.DriverTimeout = d.DriverTimeout
	}
	if c.ConvergeTimeout <= 0 {
		c.ConvergeTimeout = d.ConvergeTimeout
	}
	if c.RotationPeriod <= 0 {
		c.RotationPeriod = d.RotationPeriod
	}
	if c.RotationGracePeriod <= 0 {
		c.RotationGracePeriod = d.RotationGracePeriod
	}
	if c.Faults.Interval <= 0 {
		c.Faults.Interval = d.Faults.Interval
	}
	if c.Driver == "" {
		c.Driver = DriverMemory
	}
}

// run is one chaos run.
type run struct {
	cfg     Config
	start   time.Time
	res     *Result
	env     *localenv.Env
	client  client.Client
	control faultControl
	backend backend
	// proxy holds the S3 driver's faults, v1proxy the v1alpha1 driver's (and names its accounts).
	proxy   *proxy
	v1proxy *v1alpha1Proxy
	// driverEndpoint is the driver's own socket, behind the proxy (DriverV1alpha1): the self-check
	// asks the driver there, as an admin with access to it would.
	driverEndpoint string
	// driverName is the driver's name in the classes; endpoint is where the sidecar calls it.
	driverName, endpoint string
	// stateFile is the memory driver's state; journal the driver's calls.
	stateFile, journal string
	ledger             ledger
	timeline           timeline
	// pauseKills counts the kills inside a call, to take the driver and the sidecar in turn;
	// insideKills counts them by method.
	pauseKills  int
	insideKills map[string]int
	// lostAnswerKills counts the sidecar's kills inside a grant after the driver acted, with a
	// v1alpha1 driver (a kind of fault of its own).
	lostAnswerKills int
	// firstRound is closed once the monkey has injected every kind of process fault (its first
	// round); firstRoundDone says so to the monkey.
	firstRound     chan struct{}
	firstRoundDone bool
	// asides are the kept accesses' rotations and refreshes, asked in the background; asideErrs
	// their errors (under the ledger's lock).
	asides    sync.WaitGroup
	asideErrs []error
}

func (r *run) countRotation(what string) {
	r.ledger.mu.Lock()
	defer r.ledger.mu.Unlock()
	r.res.Rotations[what]++
}

func (r *run) logf(format string, args ...any) {
	if r.cfg.Log != nil {
		fmt.Fprintf(r.cfg.Log, "%7.1fs "+format+"\n", append([]any{time.Since(r.start).Seconds()}, args...)...)
	}
}

// setup starts the API server (with kube-controller-manager, so that namespaces finish deleting),
// the object store for the S3 driver, the classes, and COSI.
func (r *run) setup(ctx context.Context) error {
	r.journal = filepath.Join(r.cfg.Dir, "log", "driver-calls.jsonl")
	driverSocket := filepath.Join(r.cfg.Dir, "run", "driver.sock")
	r.endpoint = "unix://" + driverSocket
	opts := localenv.Options{
		Dir: r.cfg.Dir, RepoRoot: r.cfg.RepoRoot, BinDir: r.cfg.BinDir, ControllerManager: true,
		SidecarArgs: []string{"--driver-timeout", r.cfg.DriverTimeout.String(),
			"--rotation-grace-period", r.cfg.RotationGracePeriod.String()},
		Verbosity: 2,
	}
	switch r.cfg.Driver {
	case DriverMemory:
		control, err := process.FreeAddress()
		if err != nil {
			return err
		}
		r.control = remoteFaults{memory.Control{Address: control}}
		r.backend = memoryBackend{r}
		r.driverName = memoryDriverName
		r.stateFile = filepath.Join(r.cfg.Dir, "run", "memory-state.json")
		opts.Driver, opts.DriverName = localenv.DriverMemory, r.driverName
		opts.DriverArgs = []string{"--state-file", r.stateFile, "--control-address", control, "--journal", r.journal,
			"--fault-seed", strconv.FormatUint(uint64(r.cfg.Seed)+1, 10), "-v", "2"}
		if r.cfg.NewKeyPerGrant {
			opts.DriverArgs = append(opts.DriverArgs, "--new-key-per-grant")
		}
	case DriverS3:
		r.driverName = s3DriverName
		opts.Driver, opts.Store, opts.DriverName = localenv.DriverS3, localenv.StoreVersity, r.driverName
		proxySocket := filepath.Join(r.cfg.Dir, "run", "proxy.sock")
		opts.SidecarDriverEndpoint = "unix://" + proxySocket
		for _, d := range []string{filepath.Dir(r.journal), filepath.Dir(proxySocket)} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				return err
			}
		}
		var err error
		if r.proxy, err = startProxy(proxySocket, r.endpoint, r.journal); err != nil {
			return err
		}
		r.proxy.faults.Seed(uint64(r.cfg.Seed) + 1)
		r.control = localFaults{r.proxy.faults}
		r.endpoint = opts.SidecarDriverEndpoint
	case DriverV1alpha1:
		r.driverName = v1alpha1DriverName
		opts.Driver, opts.Store, opts.DriverName = localenv.DriverV1alpha1S3, localenv.StoreVersity, r.driverName
		proxySocket := filepath.Join(r.cfg.Dir, "run", "proxy.sock")
		opts.SidecarDriverEndpoint = "unix://" + proxySocket
		for _, d := range []string{filepath.Dir(r.journal), filepath.Dir(proxySocket)} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				return err
			}
		}
		var err error
		if r.v1proxy, err = startV1alpha1Proxy(proxySocket, r.endpoint, r.journal); err != nil {
			return err
		}
		r.v1proxy.faults.Seed(uint64(r.cfg.Seed) + 1)
		r.control = localFaults{r.v1proxy.faults}
		r.driverEndpoint, r.endpoint = r.endpoint, opts.SidecarDriverEndpoint
	default:
		return fmt.Errorf("unknown driver %q (%s, %s or %s)", r.cfg.Driver, DriverMemory, DriverS3, DriverV1alpha1)
	}
	r.logf("starting etcd, kube-apiserver, kube-controller-manager and COSI (%s driver) in %s", r.cfg.Driver,
		r.cfg.Dir)
	var err error
	if r.env, err = localenv.New(ctx, opts); err != nil {
		return err
	}
	switch r.cfg.Driver {
	case DriverS3:
		r.backend = newS3Backend(r.env.Store)
	case DriverV1alpha1:
		s3b := newS3Backend(r.env.Store)
		s3b.noCredentialIDs = true
		r.backend = s3b
	}
	if _, r.client, err = r.env.AdminClient(200); err != nil {
		return err
	}
	classes := []client.Object{
		objects.BucketClass("chaos-delete", r.driverName, cosiapi.DeletionPolicyDelete),
		objects.BucketClass("chaos-retain", r.driverName, cosiapi.DeletionPolicyRetain),
		objects.BucketAccessClass("chaos", r.driverName, objects.MultiBucket),
		objects.BucketAccessClass(rotatingClass, r.driverName, objects.MultiBucket, objects.AccessParameters(
			map[string]string{cosiapi.ParameterRotationPeriod: r.cfg.RotationPeriod.String()})),
	}
	if r.v1alpha1() {
		// One bucket per access, and no rotation: what a v1alpha1 driver can do.
		classes = []client.Object{classes[0], classes[1], objects.BucketAccessClass("chaos", r.driverName)}
	}
	for _, o := range classes {
		if err := r.client.Create(ctx, o); err != nil {
			return err
		}
	}
	return r.env.StartCOSI(ctx)
}

// firstRoundPatience is how long a run waits, once the workload is done, for the monkey to inject
// every kind of fault once.
const firstRoundPatience = time.Minute

// rotatingClass is the BucketAccessClass whose accesses' credentials rotate periodically.
const rotatingClass = "chaos-rotating"

// stop stops everything.
func (r *run) stop() error {
	var err error
	if r.env != nil {
		err = r.env.Stop()
	}
	return errors.Join(err, r.proxy.stop(), r.v1proxy.stop())
}

// knownGaps splits the audit's findings into violations and the findings of Config.KnownGaps.
func (r *run) knownGaps(found []Violation) (violations, known []Violation) {
	for _, v := range found {
		if slices.Contains(r.cfg.KnownGaps, v.Check) {
			known = append(known, v)
		} else {
			violations = append(violations, v)
		}
	}
	return violations, known
}

// v1alpha1 reports whether the run drives a COSI v1alpha1 driver (DriverV1alpha1).
func (r *run) v1alpha1() bool { return r.cfg.Driver == DriverV1alpha1 }

// rng returns a random source for one stream of choices of the run (the plan of one namespace,
// the faults), so that each stream depends on the seed only, not on the order things ran in.
func (r *run) rng(stream uint64) *rand.Rand { return seeded(r.cfg.Seed, stream) }

func seeded(seed int64, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), stream))
}
