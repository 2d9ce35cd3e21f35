// Package bench is cosi-bench: it measures provisioning throughput, latency, API writes, driver
// calls and memory of the real cosi-controller, cosi-sidecar and cosi-driver-memory processes
// against a fresh local kube-apiserver, several runs over, and reports medians and ranges.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/internal/controller"
)

// Config says what to measure.
type Config struct {
	RepoRoot, BinDir string
	Sizes            []int // numbers of claims (and accesses) per throughput measurement
	Runs             int
	Writers          int // concurrent writers creating and deleting objects
	Workers          int // reconcile workers of controller and sidecar
	Single           int // sequential single claims for the latency figures
	RawObjects       int // objects for the API server's raw ceiling
	RestartSize      int // claims and accesses created across restarts of controller and sidecar (0: skip)
	RSSClaims        int // claims provisioned before measuring memory (0: skip)
	// NamespaceDeletionSize is the number of claims, with one access each, deleted all at once
	// as a namespace's deletion does (0: skip).
	NamespaceDeletionSize int
	// ScaleSizes are the sizes (claims, each with one access) the scale phase reaches in turn,
	// keeping the objects of the sizes before (none: skip); ScaleQuiet is how long it counts
	// reconciles and requests while nothing changes, at each size.
	ScaleSizes []int
	ScaleQuiet time.Duration
	// Profiles, when set, is a directory for Go profiles of controller and sidecar taken in the
	// scale phase: the heap at each size when quiet and after each restart's catch-up, and the
	// CPU during each catch-up's first ProfileCPU (the compared restarts' too).
	Profiles   string
	ProfileCPU time.Duration
	// RestartMemoryLimit, when set, is a GOMEMLIMIT for one more restart at each scale size,
	// before the usual one: what the Go memory limit does to the catch-up's memory and time.
	RestartMemoryLimit string
	// APIServerFeatureGates are the API server's --feature-gates ("Name=false", ...; none: its
	// defaults, as a cluster runs it). DetectCacheInconsistency=false stops its periodic checks of
	// every watch cache against etcd, whose cost lands at random in a catch-up (see ListFloor).
	APIServerFeatureGates []string
	// SecretCheckInterval is the sidecar's --secret-check-interval; zero leaves its default. A
	// short one makes the scale phase's quiet period show how the Secret checks are spread.
	SecretCheckInterval time.Duration
	// CompareBinDir, when set, holds other builds of cosi-controller and cosi-sidecar: at each
	// scale size, after the usual restart, controller and sidecar restart ComparePairs times with
	// those and with BinDir's, in turn (A B B A ...), so that their catch-ups are measured on the
	// same objects, alternated (figures that move with the machine's load are compared as ratios).
	CompareBinDir string
	ComparePairs  int
	// ReferenceDir, when set, holds the reference implementation's builds (hack/reference/build.sh):
	// the run is then the side-by-side mode only, this project and the reference measured with
	// each size in turn, Runs times each, alternated (sidebyside.go).
	ReferenceDir string
	JSON         string
	Log          io.Writer
}

// SizeResult is one throughput measurement with N claims and N accesses.
type SizeResult struct {
	N                               int     `json:"n"`
	ClaimsPerSec                    float64 `json:"claimsPerSec"`
	ClaimP50, ClaimP90, ClaimP99    float64 // ms, create to Provisioned
	ClaimWrites                     float64 `json:"claimWritesPerClaim"`
	CreateRPCs                      float64 `json:"createBucketCallsPerClaim"`
	AccessesPerSec                  float64 `json:"accessesPerSec"`
	AccessP50, AccessP90, AccessP99 float64
	AccessWrites                    float64 `json:"accessWritesPerAccess"`
	GrantRPCs                       float64 `json:"grantCallsPerAccess"`
	SecretsWithData                 int     `json:"secretsWithData"`
	IdleReconciles                  float64 `json:"idleReconciles"` // reconciles in 2 s of quiet after provisioning
	// DeferredReconciles and DeferredRequests are the reconciles and COSI's API requests per claim
	// with its access from the end of the accesses phase until the controller's grace period
	// (controller.DefaultDriverGrace) plus 2 s has passed since the last access was provisioned: the
	// work scheduled by provisioning that the phases, which stop counting 0.5 s after the last
	// object is provisioned, leave out. DeferredByController breaks the reconciles down by
	// "component controller".
	DeferredReconciles   float64            `json:"deferredReconciles"`
	DeferredRequests     float64            `json:"deferredRequests"`
	DeferredByController map[string]float64 `json:"deferredReconcilesByController,omitempty"`
	DeletionsPerSec      float64            `json:"deletionsPerSec"`
	DriverEmptyAfter     float64            `json:"driverEmptyAfterSec"`
	Conflicts            float64            `json:"conflicts"`
	// Requests are COSI's API requests (the API server's, minus the benchmark's own) by
	// "VERB resource[/subresource] code", per object in each phase.
	Requests map[string]phaseFigures `json:"requests"`
	// Reconciles are the reconciles of controller and sidecar by "component controller", per
	// object in each phase.
	Reconciles map[string]phaseFigures `json:"reconciles"`
	// Totals are the sums of Requests (all, reads, writes) and of Reconciles.
	ClaimRequests, ClaimReads, AccessRequests, AccessReads, AccessReconciles, ClaimReconciles float64
	// CPUCores is the CPU used during the claims and accesses phases, in cores (CPU seconds per
	// second of wall time), by process; "total" sums them.
	CPUCores map[string]float64 `json:"cpuCores"`
	// APIServerCPU is the kube-apiserver's CPU seconds per 1,000 objects in each phase (the
	// benchmark's own writes and watches included, the same for every COSI build).
	APIServerCPU phaseFigures `json:"apiServerCPUPer1000"`
}

// RunResult is one run.
type RunResult struct {
	RawCreate1, RawCreate8, RawStatus1, RawStatus8 float64 // objects/s
	SingleProvisionP50, SingleDeleteP50            float64 // ms
	Sizes                                          []SizeResult
	RestartCreateRPCs, RestartGrantRPCs            float64 // per object, across restarts
	// NamespaceDeletionSec is the time from deleting every claim and access of a namespace to an
	// empty driver; the reads are the API server's LIST and GET requests of BucketAccesses
	// meanwhile, per claim.
	NamespaceDeletionSec                                      float64
	NamespaceDeletionAccessLists, NamespaceDeletionAccessGets float64
	ControllerCPU, SidecarCPU                                 float64   // seconds
	ControllerPeakRSS, SidecarPeakRSS                         float64   // MiB, during the throughput phases
	ControllerRSS, SidecarRSS                                 float64   // MiB, with RSSClaims claims provisioned
	Scale                                                     *ScaleRun `json:",omitempty"`
}

func (c Config) logf(format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
}

// Run measures cfg.Runs times, prints the summary to out and writes the JSON file.
func Run(ctx context.Context, cfg Config, out io.Writer) error {
	if cfg.ReferenceDir != "" {
		return runSideBySide(ctx, cfg, out)
	}
	var runs []RunResult
	for i := range cfg.Runs {
		cfg.logf("run %d of %d", i+1, cfg.Runs)
		r, err := runOnce(ctx, cfg)
		if err != nil {
			return fmt.Errorf("run %d: %w", i+1, err)
		}
		runs = append(runs, r)
	}
	summary := summarizeRuns(cfg, runs)
	printSummary(out, cfg, summary)
	bs := breakdowns(cfg, runs)
	printBreakdowns(out, bs)
	for i, r := range runs {
		if r.Scale != nil {
			printScale(out, i+1, *r.Scale)
		}
	}
	if cfg.JSON != "" {
		data, err := json.MarshalIndent(
			map[string]any{"config": cfg, "summary": summary, "breakdown": bs, "runs": runs}, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(cfg.JSON, data, 0o644)
	}
	return nil
}

func runOnce(ctx context.Context, cfg Config) (r RunResult, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := startSystem(ctx, cfg)
	if err != nil {
		return r, err
	}
	defer func() { s.stop(err != nil) }()

	cfg.logf("raw API server ceiling with %d objects", cfg.RawObjects)
	if err := s.rawCeiling(ctx, &r); err != nil {
		return r, err
	}
	if err := s.env.StartCOSI(ctx); err != nil {
		return r, err
	}
	if err := s.setupClasses(ctx); err != nil {
		return r, err
	}
	cfg.logf("single claims, one at a time (%d)", cfg.Single)
	if err := s.single(ctx, &r); err != nil {
		return r, err
	}
	for _, n := range cfg.Sizes {
		cfg.logf("throughput with %d claims and %d accesses", n, n)
		sr, err := s.throughput(ctx, n)
		if err != nil {
			return r, fmt.Errorf("throughput at N=%d: %w", n, err)
		}
		r.Sizes = append(r.Sizes, sr)
	}
	r.ControllerCPU, r.ControllerPeakRSS, _, _ = procStats(s.env.Controller.Pid())
	r.SidecarCPU, r.SidecarPeakRSS, _, _ = procStats(s.env.Sidecar.Pid())
	if cfg.RestartSize > 0 {
		cfg.logf("%d claims and accesses across restarts of controller and sidecar", cfg.RestartSize)
		if err := s.restarts(ctx, &r); err != nil {
			return r, err
		}
	}
	if cfg.NamespaceDeletionSize > 0 {
		cfg.logf("a namespace of %d claims and accesses deleted at once", cfg.NamespaceDeletionSize)
		if err := s.namespaceDeletion(ctx, &r); err != nil {
			return r, err
		}
	}
	if cfg.RSSClaims > 0 {
		cfg.logf("memory with %d claims and Buckets", cfg.RSSClaims)
		if err := s.memory(ctx, &r); err != nil {
			return r, err
		}
	}
	if len(cfg.ScaleSizes) > 0 {
		sr, err := s.scale(ctx)
		r.Scale = &sr
		if err != nil {
			// What was measured before it broke is reported: where it broke is a result.
			cfg.logf("scale: %v", err)
			printScale(os.Stdout, 0, sr)
			return r, err
		}
	}
	return r, nil
}

// parallel runs f(0..n-1) on the configured number of writers and returns the first error.
func (s *system) parallel(n int, f func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range s.cfg.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// rawCeiling measures creates/s and status updates/s of BucketClaims with 1 and with all writers,
// before COSI runs, so nothing reconciles them.
func (s *system) rawCeiling(ctx context.Context, r *RunResult) error {
	if err := s.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "raw"}}); err != nil {
		return err
	}
	n := s.cfg.RawObjects
	writers := s.cfg.Writers
	for _, w := range []int{1, writers} {
		s.cfg.Writers = w
		claims := make([]*cosiapi.BucketClaim, n)
		start := time.Now()
		err := s.parallel(n, func(i int) error {
			claims[i] = &cosiapi.BucketClaim{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("raw-%d-%d", w, i), Namespace: "raw"},
				Spec:       cosiapi.BucketClaimSpec{BucketClassName: "none", Protocols: []cosiapi.Protocol{cosiapi.ProtocolS3}},
			}
			return s.client.Create(ctx, claims[i])
		})
		if err != nil {
			s.cfg.Writers = writers
			return err
		}
		createRate := float64(n) / time.Since(start).Seconds()
		start = time.Now()
		err = s.parallel(n, func(i int) error {
			claims[i].Status.BoundBucketName = "bc-" + string(claims[i].UID)
			claims[i].Status.Conditions = []metav1.Condition{
				{Type: cosiapi.ConditionProvisioned, Status: metav1.ConditionUnknown,
					Reason: cosiapi.ReasonProvisioning, Message: "raw", LastTransitionTime: metav1.Now()},
			}
			return s.client.Status().Update(ctx, claims[i])
		})
		s.cfg.Writers = writers
		if err != nil {
			return err
		}
		statusRate := float64(n) / time.Since(start).Seconds()
		if w == 1 {
			r.RawCreate1, r.RawStatus1 = createRate, statusRate
		} else {
			r.RawCreate8, r.RawStatus8 = createRate, statusRate
		}
	}
	return s.client.DeleteAllOf(ctx, &cosiapi.BucketClaim{}, client.InNamespace("raw"))
}

func (s *system) setupClasses(ctx context.Context) error {
	if err := s.client.Create(ctx, objects.BucketClass("bench", driverName, cosiapi.DeletionPolicyDelete)); err != nil {
		return err
	}
	return s.client.Create(ctx, objects.BucketAccessClass("bench", driverName))
}

func benchClaim(ns string, i int) *cosiapi.BucketClaim {
	return objects.BucketClaim(ns, fmt.Sprintf("claim-%d", i), "bench", objects.S3)
}

func benchAccess(ns string, i int) *cosiapi.BucketAccess {
	return objects.BucketAccess(ns, fmt.Sprintf("access-%d", i), "bench",
		objects.Grant(fmt.Sprintf("claim-%d", i), fmt.Sprintf("creds-%d", i), objects.ReadWrite))
}

// claimObject and accessObject are benchClaim and benchAccess, for make2.
func claimObject(ns string, i int) client.Object  { return benchClaim(ns, i) }
func accessObject(ns string, i int) client.Object { return benchAccess(ns, i) }

// single measures one claim at a time: create to Provisioned, delete to gone.
func (s *system) single(ctx context.Context, r *RunResult) error {
	if err := s.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "single"}}); err != nil {
		return err
	}
	var provision, deletion []time.Duration
	for i := range s.cfg.Single {
		c := benchClaim("single", i)
		start := time.Now()
		if err := s.client.Create(ctx, c); err != nil {
			return err
		}
		times, err := s.watch.waitFor(ctx, s.watch.provisioned, []types.UID{c.UID}, time.Minute)
		if err != nil {
			return err
		}
		provision = append(provision, times[0].Sub(start))
		start = time.Now()
		if err := s.client.Delete(ctx, c); err != nil {
			return err
		}
		times, err = s.watch.waitFor(ctx, s.watch.deleted, []types.UID{c.UID}, time.Minute)
		if err != nil {
			return err
		}
		deletion = append(deletion, times[0].Sub(start))
	}
	r.SingleProvisionP50 = ms(percentile(provision, 50))
	r.SingleDeleteP50 = ms(percentile(deletion, 50))
	return s.waitDriverEmpty(ctx)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// create creates objects with all writers and returns their UIDs and creation times.
func (s *system) create(ctx context.Context, objs []client.Object) ([]types.UID, []time.Time, error) {
	uids := make([]types.UID, len(objs))
	starts := make([]time.Time, len(objs))
	err := s.parallel(len(objs), func(i int) error {
		starts[i] = time.Now()
		if err := s.client.Create(ctx, objs[i]); err != nil {
			return err
		}
		uids[i] = objs[i].GetUID()
		return nil
	})
	return uids, starts, err
}

// latency returns the rate (first create to last done) and the latency percentiles in ms.
func latency(starts, done []time.Time) (rate, p50, p90, p99 float64) {
	first, last := starts[0], done[0]
	d := make([]time.Duration, len(starts))
	for i := range starts {
		if starts[i].Before(first) {
			first = starts[i]
		}
		if done[i].After(last) {
			last = done[i]
		}
		d[i] = done[i].Sub(starts[i])
	}
	return float64(
			len(starts),
		) / last.Sub(first).
			Seconds(),
		ms(
			percentile(d, 50),
		), ms(
			percentile(d, 90),
		), ms(
			percentile(d, 99),
		)
}

// scrapes are the metrics of the API server and the COSI processes, and the benchmark's own
// requests, at one moment.
type scrapes struct {
	api, driver, sidecar, controller metrics
	bench                            requestCounts
}

func (s *system) scrape(ctx context.Context) (m scrapes, err error) {
	if m.api, err = scrapeAPIServer(ctx, s.rest); err != nil {
		return m, err
	}
	m.bench = s.requests.snapshot()
	if m.driver, err = scrapeHTTP(ctx, s.env.Driver.MetricsAddress); err != nil {
		return m, err
	}
	if m.sidecar, err = scrapeHTTP(ctx, s.env.Sidecar.MetricsAddress); err != nil {
		return m, err
	}
	m.controller, err = scrapeHTTP(ctx, s.env.Controller.MetricsAddress)
	return m, err
}

func rpcs(before, after metrics, method string) float64 {
	sel := map[string]string{"method_name": method, "grpc_status_code": "OK"}
	return after.sum(
		"cosi_driver_operation_duration_seconds",
		sel,
	) - before.sum(
		"cosi_driver_operation_duration_seconds",
		sel,
	)
}

func reconciles(ms ...[2]metrics) float64 {
	total := 0.0
	for _, m := range ms {
		total += m[1].sum(
			"controller_runtime_reconcile_total",
			map[string]string{"result": "*"},
		) - m[0].sum(
			"controller_runtime_reconcile_total",
			map[string]string{"result": "*"},
		)
	}
	return total
}

// throughput creates n claims, then n accesses, as fast as the writers can, then deletes them all.
func (s *system) throughput(ctx context.Context, n int) (SizeResult, error) {
	m := &sizeRun{system: s, n: n, ns: fmt.Sprintf("bench-%d-%d", n, time.Now().UnixNano()),
		sr:      SizeResult{N: n, Requests: map[string]phaseFigures{}, Reconciles: map[string]phaseFigures{}},
		timeout: time.Duration(n)*100*time.Millisecond + time.Minute}
	if err := s.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: m.ns}}); err != nil {
		return m.sr, err
	}
	for _, phase := range []func(context.Context) error{
		m.provisionClaims, m.idle, m.provisionAccesses, m.deferred, m.deleteAll,
	} {
		if err := phase(ctx); err != nil {
			return m.sr, err
		}
	}
	return m.sr, nil
}

// sizeRun is one throughput measurement, phase by phase.
type sizeRun struct {
	*system
	n       int
	ns      string
	timeout time.Duration
	sr      SizeResult

	start            scrapes   // before the claims
	claimsDone       scrapes   // once the claims are provisioned
	accessesStart    scrapes   // before the accesses
	accessesDone     scrapes   // once the accesses are provisioned
	deletionStart    scrapes   // once the deferred work is counted
	lastAccess       time.Time // when the last access was provisioned
	cpu0             map[string]float64
	wall0            time.Time
	accessesCPU0     map[string]float64 // before the accesses
	deletionCPU0     map[string]float64 // before the deletion
	claims, accesses []client.Object
	claimUIDs        []types.UID
	accessUIDs       []types.UID
}

// provisionClaims creates the claims and measures until they are provisioned: rate, latency, API
// writes and DriverCreateBucket calls per claim.
func (m *sizeRun) provisionClaims(ctx context.Context) error {
	var err error
	if m.start, err = m.scrape(ctx); err != nil {
		return err
	}
	m.cpu0, m.wall0 = childCPU(), time.Now()
	var starts, done []time.Time
	if m.claims, m.claimUIDs, starts, done, err = m.provision(ctx, "claims", claimObject); err != nil {
		return err
	}
	m.sr.ClaimsPerSec, m.sr.ClaimP50, m.sr.ClaimP90, m.sr.ClaimP99 = latency(starts, done)
	m.sr.APIServerCPU.Claims = m.apiServerCPU(m.cpu0)
	time.Sleep(500 * time.Millisecond) // let the last status writes land before counting
	if m.claimsDone, err = m.scrape(ctx); err != nil {
		return err
	}
	// COSI's writes: all writes to any resource but the benchmark's own.
	cosi := m.record(m.start, m.claimsDone, func(f *phaseFigures, v float64) { f.Claims = v })
	m.sr.ClaimRequests = cosi.sum(func(request) bool { return true }) / float64(m.n)
	m.sr.ClaimWrites = cosi.sum(request.isWrite) / float64(m.n)
	m.sr.ClaimReads = m.sr.ClaimRequests - m.sr.ClaimWrites
	m.sr.ClaimReconciles = reconciles(
		[2]metrics{m.start.sidecar, m.claimsDone.sidecar},
		[2]metrics{m.start.controller, m.claimsDone.controller},
	) / float64(m.n)
	m.sr.CreateRPCs = rpcs(m.start.driver, m.claimsDone.driver, "DriverCreateBucket") / float64(m.n)
	return nil
}

// provision creates n objects made by newObj with all writers and waits until they are all
// provisioned; it returns them, their UIDs, and when each was created and provisioned.
func (m *sizeRun) provision(ctx context.Context, what string, newObj func(ns string, i int) client.Object) (
	objs []client.Object, uids []types.UID, starts, done []time.Time, err error) {
	objs = make2(m.n, m.ns, newObj)
	if uids, starts, err = m.create(ctx, objs); err != nil {
		return nil, nil, nil, nil, err
	}
	if done, err = m.watch.waitFor(ctx, m.watch.provisioned, uids, m.timeout); err != nil {
		return nil, nil, nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	return objs, uids, starts, done, nil
}

// idle counts reconciles in 2 s of quiet: nothing should reconcile once everything is provisioned
// (hot loops).
func (m *sizeRun) idle(ctx context.Context) error {
	time.Sleep(2 * time.Second)
	quiet, err := m.scrape(ctx)
	if err != nil {
		return err
	}
	m.sr.IdleReconciles = reconciles(
		[2]metrics{m.claimsDone.sidecar, quiet.sidecar},
		[2]metrics{m.claimsDone.controller, quiet.controller},
	)
	return nil
}

// provisionAccesses creates an access to each claim and measures until they are provisioned:
// rate, latency, API writes and DriverGrantBucketAccess calls per access, CPU, and Secrets that
// hold credentials.
func (m *sizeRun) provisionAccesses(ctx context.Context) error {
	before, err := m.scrape(ctx)
	if err != nil {
		return err
	}
	m.accessesStart = before
	m.accessesCPU0 = childCPU()
	var starts, done []time.Time
	if m.accesses, m.accessUIDs, starts, done, err = m.provision(ctx, "accesses", accessObject); err != nil {
		return err
	}
	m.sr.AccessesPerSec, m.sr.AccessP50, m.sr.AccessP90, m.sr.AccessP99 = latency(starts, done)
	for _, t := range done {
		if t.After(m.lastAccess) {
			m.lastAccess = t
		}
	}
	m.sr.APIServerCPU.Accesses = m.apiServerCPU(m.accessesCPU0)
	m.sr.CPUCores = cpuCores(m.cpu0, childCPU(), time.Since(m.wall0)-2500*time.Millisecond) // minus the pauses
	time.Sleep(500 * time.Millisecond)
	after, err := m.scrape(ctx)
	if err != nil {
		return err
	}
	m.accessesDone, m.deletionStart = after, after
	cosi := m.record(before, after, func(f *phaseFigures, v float64) { f.Accesses = v })
	m.sr.AccessRequests = cosi.sum(func(request) bool { return true }) / float64(m.n)
	m.sr.AccessWrites = cosi.sum(request.isWrite) / float64(m.n)
	m.sr.AccessReads = m.sr.AccessRequests - m.sr.AccessWrites
	m.sr.AccessReconciles = reconciles(
		[2]metrics{before.sidecar, after.sidecar},
		[2]metrics{before.controller, after.controller},
	) / float64(m.n)
	m.sr.GrantRPCs = rpcs(before.driver, after.driver, "DriverGrantBucketAccess") / float64(m.n)
	var secrets corev1.SecretList
	if err := m.client.List(
		ctx,
		&secrets,
		client.InNamespace(m.ns),
		client.HasLabels{cosiapi.LabelBucketAccessUID},
	); err != nil {
		return err
	}
	for _, sec := range secrets.Items {
		if len(sec.Data[cosiapi.SecretKeyS3SecretAccessKey]) > 0 {
			m.sr.SecretsWithData++
		}
	}
	return nil
}

// deferredWait is how long after the last access was provisioned deferred stops counting.
const deferredWait = controller.DefaultDriverGrace + 2*time.Second

// deferred counts the work that provisioning scheduled for later (DeferredReconciles): it waits
// until the controller's grace period plus 2 s has passed since the last access was provisioned,
// after the latest time at which a check scheduled at a claim's binding or an access's hand-off
// comes due (both precede provisioning).
func (m *sizeRun) deferred(ctx context.Context) error {
	time.Sleep(time.Until(m.lastAccess.Add(deferredWait)))
	after, err := m.scrape(ctx)
	if err != nil {
		return err
	}
	before := m.accessesDone
	cosi := apiRequests(after.api).minus(apiRequests(before.api)).minus(after.bench.minus(before.bench))
	m.sr.DeferredRequests = cosi.sum(func(request) bool { return true }) / float64(m.n)
	m.sr.DeferredReconciles = reconciles(
		[2]metrics{before.sidecar, after.sidecar},
		[2]metrics{before.controller, after.controller},
	) / float64(m.n)
	m.sr.DeferredByController = map[string]float64{}
	for _, c := range []struct {
		name          string
		before, after metrics
	}{{"controller", before.controller, after.controller}, {"sidecar", before.sidecar, after.sidecar}} {
		for name, v := range reconcilesByController(c.before, c.after) {
			m.sr.DeferredByController[c.name+" "+name] = v / float64(m.n)
		}
	}
	m.deletionStart = after
	return nil
}

// deleteAll deletes everything at once (claims wait for their accesses, as users would see) and
// measures until the objects are gone and the driver holds nothing; then the conflicts of the
// whole measurement.
func (m *sizeRun) deleteAll(ctx context.Context) error {
	start := time.Now()
	m.deletionCPU0 = childCPU()
	all := append(append([]client.Object{}, m.accesses...), m.claims...)
	if err := m.parallel(
		len(all),
		func(i int) error { return client.IgnoreNotFound(m.client.Delete(ctx, all[i])) },
	); err != nil {
		return err
	}
	if _, err := m.watch.waitFor(ctx, m.watch.deleted, append(m.accessUIDs, m.claimUIDs...), m.timeout); err != nil {
		return fmt.Errorf("deletion: %w", err)
	}
	m.sr.DeletionsPerSec = float64(len(all)) / time.Since(start).Seconds()
	if err := m.waitDriverEmpty(ctx); err != nil {
		return err
	}
	m.sr.DriverEmptyAfter = time.Since(start).Seconds()
	m.sr.APIServerCPU.Deletion = m.apiServerCPU(m.deletionCPU0)
	end, err := m.scrape(ctx)
	if err != nil {
		return err
	}
	m.sr.Conflicts = conflicts(m.start.api, end.api)
	m.record(m.deletionStart, end, func(f *phaseFigures, v float64) { f.Deletion = v })
	return nil
}

// phaseFigures is a figure per object in each phase: per claim while claims are provisioned, per
// access while accesses are, and per claim with its access while both are deleted.
type phaseFigures struct {
	Claims   float64 `json:"perClaim"`
	Accesses float64 `json:"perAccess"`
	Deletion float64 `json:"perDeletedClaimAndAccess"`
}

// record sets, through set, COSI's requests and the reconciles between two scrapes, per object,
// and returns COSI's requests.
func (m *sizeRun) record(before, after scrapes, set func(*phaseFigures, float64)) requestCounts {
	cosi := apiRequests(after.api).minus(apiRequests(before.api)).minus(after.bench.minus(before.bench))
	for r, v := range cosi {
		f := m.sr.Requests[r.String()]
		set(&f, v/float64(m.n))
		m.sr.Requests[r.String()] = f
	}
	for _, c := range []struct {
		name          string
		before, after metrics
	}{{"controller", before.controller, after.controller}, {"sidecar", before.sidecar, after.sidecar}} {
		for name, v := range reconcilesByController(c.before, c.after) {
			key := c.name + " " + name
			f := m.sr.Reconciles[key]
			set(&f, v/float64(m.n))
			m.sr.Reconciles[key] = f
		}
	}
	return cosi
}

// reconcilesByController returns the reconciles between two scrapes by controller name.
func reconcilesByController(before, after metrics) map[string]float64 {
	out := map[string]float64{}
	for _, m := range []struct {
		ms   metrics
		sign float64
	}{{after, 1}, {before, -1}} {
		for _, metric := range m.ms["controller_runtime_reconcile_total"].GetMetric() {
			for _, l := range metric.GetLabel() {
				if l.GetName() == "controller" {
					out[l.GetValue()] += m.sign * metric.GetCounter().GetValue()
				}
			}
		}
	}
	for k, v := range out {
		if v == 0 {
			delete(out, k)
		}
	}
	return out
}

// waitDriverEmpty waits until the driver holds no bucket and no account.
func (s *system) waitDriverEmpty(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		m, err := scrapeHTTP(ctx, s.env.Driver.MetricsAddress)
		if err != nil {
			return err
		}
		if m.sum("cosi_memory_buckets", nil) == 0 && m.sum("cosi_memory_accounts", nil) == 0 {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("the driver still holds buckets or accounts after 10 minutes")
}

// apiServerCPU is the kube-apiserver's CPU seconds since the reading before, per 1,000 objects.
func (m *sizeRun) apiServerCPU(before map[string]float64) float64 {
	return (childCPU()["kube-apiserver"] - before["kube-apiserver"]) / float64(m.n) * 1000
}

// cpuCores turns two CPU readings into cores used over wall.
func cpuCores(before, after map[string]float64, wall time.Duration) map[string]float64 {
	out := map[string]float64{}
	for name, cpu := range after {
		c := (cpu - before[name]) / wall.Seconds()
		out[name] = c
		out["total"] += c
	}
	return out
}
