package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube-cosi/cosi/dev/localenv"
)

// The scale phase (-scale): claims with one access each (Buckets, grant records and Secrets
// with them) are provisioned by the real processes up to each size in turn, the earlier sizes'
// objects kept; at each size it measures the memory of controller and sidecar (peak while
// provisioning, steady after), of the API server and etcd, etcd's database, the reconciles and
// requests while quiet, and a restart of controller and sidecar to "caught up". See
// docs/benchmark.md, "Scale".

// scaleControllers are the reconcilers of controller and sidecar, each of which reconciles every
// object of its kind once after a start (its informer lists them): claims, Buckets, accesses, and
// the sidecar's grant records (one per access).
var scaleControllers = []string{
	"controller bucketclaim", "controller bucket", "controller bucketaccess",
	"sidecar sidecar-bucket", "sidecar sidecar-bucketaccess", "sidecar sidecar-grant",
}

// mutatingDriverCalls are the driver calls that change the object store; DriverGetBucket is the
// sidecar's scheduled refresh of a Bucket's information (every Secret check interval), not a
// catch-up call.
var mutatingDriverCalls = []string{
	"DriverCreateBucket", "DriverDeleteBucket", "DriverGrantBucketAccess", "DriverRevokeBucketAccess",
}

// ScaleResult is the scale phase at one size: N claims, N Buckets, N accesses, N grant records and
// N Secrets (an "object set" is one of each).
type ScaleResult struct {
	N int `json:"n"`
	// Load is the 1-minute load average when the size was reached (the machine is shared).
	Load float64 `json:"load"`
	// ProvisionSec is the time to provision this size's new claims and accesses, and the rates.
	ProvisionSec   float64 `json:"provisionSec"`
	ClaimsPerSec   float64 `json:"claimsPerSec"`
	AccessesPerSec float64 `json:"accessesPerSec"`
	// Memory in MiB: the peak RSS sampled while this size's objects were provisioned, the RSS
	// and the Go heap in use after the quiet period.
	ControllerPeakRSS, SidecarPeakRSS   float64
	ControllerRSS, SidecarRSS           float64
	ControllerHeap, SidecarHeap         float64
	APIServerRSS, EtcdRSS               float64
	ControllerBytesPerSet, SidecarBytes float64 // (RSS - RSS before any object) / N, bytes
	// EtcdDBMiB is the size of etcd's database file; EtcdObjects the API server's count of the
	// objects it stores (apiserver_resource_objects, all resources, as last updated).
	EtcdDBMiB   float64 `json:"etcdDBMiB"`
	EtcdObjects float64 `json:"etcdObjects"`
	// QuietSec of quiet: the reconciles (by "component controller") and COSI's API requests
	// (by "VERB resource[/sub] code") meanwhile.
	QuietSec        float64            `json:"quietSec"`
	QuietReconciles map[string]float64 `json:"quietReconciles"`
	QuietRequests   map[string]float64 `json:"quietRequests"`
	// QuietSecretPatches are COSI's PATCH secrets (the Secret checks) per second in each second
	// from the end of provisioning to the end of the quiet period, against N/CheckIntervalSec due
	// on average (the sidecar's --secret-check-interval).
	QuietSecretPatches []float64 `json:"quietSecretPatches"`
	CheckIntervalSec   float64   `json:"checkIntervalSec"`
	// QuietCheckDecisions are the sidecar's scheduled-check decisions in the quiet period, by
	// decision (cosi_sidecar_scheduled_check_decisions_total: NotDue, Placed, Kept, Ran, Refused),
	// Secrets and Bucket information together.
	QuietCheckDecisions map[string]float64 `json:"quietCheckDecisions,omitempty"`
	// Restart: controller and sidecar stopped with SIGTERM and started again; CaughtUpSec is the
	// time from the start until every reconciler has reconciled every object of its kind once
	// and the work queues are empty. Its reconciles, COSI's API requests and the driver's calls
	// by method meanwhile, and the memory of the new processes when caught up.
	CaughtUpSec          float64            `json:"caughtUpSec"`
	RestartReconciles    map[string]float64 `json:"restartReconciles"`
	RestartRequests      map[string]float64 `json:"restartRequests"`
	RestartDriverCalls   map[string]float64 `json:"restartDriverCalls"`
	RestartControllerRSS float64            `json:"restartControllerRSS"`
	RestartSidecarRSS    float64            `json:"restartSidecarRSS"`
	RestartControllerHWM float64            `json:"restartControllerPeakRSS"`
	RestartSidecarHWM    float64            `json:"restartSidecarPeakRSS"`
	// RestartCPU is the CPU seconds each process used during the catch-up, by command name
	// (cosi-controller, cosi-sidecar, kube-apiserver, etcd, ...).
	RestartCPU map[string]float64 `json:"restartCPU"`
	// RestartConsistencyChecks are the API server's own cache checks that ended meanwhile.
	RestartConsistencyChecks map[string]float64 `json:"restartConsistencyChecks,omitempty"`
	// LimitedRestart is a restart before that one with GOMEMLIMIT=Config.RestartMemoryLimit.
	LimitedRestart *RestartFigures `json:"limitedRestart,omitempty"`
	// ListFloor is the catch-up's initial lists served to the benchmark alone after that restart:
	// what the API server takes for them, the floor of CaughtUpSec on this machine.
	ListFloor *ListFloor `json:"listFloor,omitempty"`
	// Compared are the restarts after that one, alternated: Config.CompareBinDir's builds and
	// Config.BinDir's (RestartFigures.BinDir says which), Config.ComparePairs pairs, in turn in
	// either order.
	Compared []RestartFigures `json:"compared,omitempty"`
}

// ScaleRun is the scale phase of one run: the RSS before any object, then each size.
type ScaleRun struct {
	ControllerBaseRSS, SidecarBaseRSS float64
	// Sizes are the sizes measured in full.
	Sizes []ScaleResult
	// BrokeAt is the size that could not be reached or measured, and BrokeError why (what
	// stopped it: a timeout, an API server that failed, an interrupt).
	BrokeAt    int    `json:",omitempty"`
	BrokeError string `json:",omitempty"`
}

// Writes returns the writes of counts (by "VERB resource[/sub] code") and, of them, the writes
// that are not scheduled Secret checks (PATCH secrets, every Secret check interval per access).
func Writes(counts map[string]float64) (all, unscheduled float64) {
	for k, v := range counts {
		verb, rest, _ := strings.Cut(k, " ")
		if !(request{Verb: verb}).isWrite() {
			continue
		}
		all += v
		if verb != "PATCH" || !strings.HasPrefix(rest, "secrets ") {
			unscheduled += v
		}
	}
	return all, unscheduled
}

// MutatingCalls sums the driver calls by method that change the object store.
func MutatingCalls(calls map[string]float64) float64 {
	total := 0.0
	for _, m := range mutatingDriverCalls {
		total += calls[m]
	}
	return total
}

// caughtUp says whether every reconciler in want has reconciled at least want's count, and no
// work queue holds anything.
func caughtUp(reconciled, want map[string]float64, queued float64) bool {
	if queued > 0 {
		return false
	}
	for k, n := range want {
		if reconciled[k] < n {
			return false
		}
	}
	return true
}

// bytesPer returns (rss - base) MiB per object, in bytes.
func bytesPer(rss, base float64, n int) float64 {
	if n == 0 {
		return 0
	}
	return (rss - base) * (1 << 20) / float64(n)
}

// Fit is a least-squares line y = Intercept + Slope·x.
type Fit struct {
	Intercept, Slope float64
}

// At returns the line's value at x.
func (f Fit) At(x float64) float64 { return f.Intercept + f.Slope*x }

// linearFit fits a line to the points (x[i], y[i]); with fewer than two distinct x it is flat at
// the mean.
func linearFit(x, y []float64) Fit {
	n := float64(len(x))
	if n == 0 {
		return Fit{}
	}
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx += x[i]
		sy += y[i]
		sxx += x[i] * x[i]
		sxy += x[i] * y[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return Fit{Intercept: sy / n}
	}
	slope := (n*sxy - sx*sy) / d
	return Fit{Intercept: (sy - slope*sx) / n, Slope: slope}
}

// scale runs the scale phase: each size of cfg.ScaleSizes reached in turn in one namespace.
func (s *system) scale(ctx context.Context) (ScaleRun, error) {
	var run ScaleRun
	const ns = "scale"
	if err := s.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return run, err
	}
	var err error
	if run.ControllerBaseRSS, err = rss(s.env.Controller.Pid()); err != nil {
		return run, err
	}
	if run.SidecarBaseRSS, err = rss(s.env.Sidecar.Pid()); err != nil {
		return run, err
	}
	err = run.reach(s.cfg.ScaleSizes, func(from, n int) (ScaleResult, error) {
		s.cfg.logf("scale: %d claims and accesses (%d new)", n, n-from)
		return s.scaleTo(ctx, ns, from, n, run)
	}, func(run ScaleRun) {
		s.writePartial(run)
		if run.BrokeAt == 0 {
			last := run.Sizes[len(run.Sizes)-1]
			s.cfg.logf("scale: N=%d: controller %.0f MiB, sidecar %.0f MiB, caught up after restart in %.1f s",
				last.N, last.ControllerRSS, last.SidecarRSS, last.CaughtUpSec)
		}
	})
	return run, err
}

// reach measures each size in turn (measure provisions from..n-1 and measures n) and calls
// measured after each, and after the size that could not be reached or measured. That size is
// BrokeAt, not in Sizes: a size measured in part would bend the fits.
func (run *ScaleRun) reach(
	sizes []int, measure func(from, n int) (ScaleResult, error), measured func(ScaleRun),
) error {
	from := 0
	for _, n := range sizes {
		r, err := measure(from, n)
		if err != nil {
			run.BrokeAt, run.BrokeError = n, err.Error()
			measured(*run)
			return fmt.Errorf("scale at N=%d: %w", n, err)
		}
		run.Sizes = append(run.Sizes, r)
		from = n
		measured(*run)
	}
	return nil
}

// writePartial writes the sizes measured so far next to the JSON file, so that a run stopped or
// broken at a larger size keeps them.
func (s *system) writePartial(run ScaleRun) {
	if s.cfg.JSON == "" {
		return
	}
	if data, err := json.MarshalIndent(run, "", "  "); err == nil {
		_ = os.WriteFile(s.cfg.JSON+".scale-partial", data, 0o644)
	}
}

// scaleTo provisions claims and accesses from..n-1 and measures size n.
func (s *system) scaleTo(ctx context.Context, ns string, from, n int, run ScaleRun) (ScaleResult, error) {
	r := ScaleResult{N: n}
	peaks := s.samplePeaks()
	start := time.Now()
	for _, newObj := range []func(string, int) client.Object{claimObject, accessObject} {
		objs := make([]client.Object, n-from)
		for i := range objs {
			objs[i] = newObj(ns, from+i)
		}
		t0 := time.Now()
		uids, _, err := s.create(ctx, objs)
		if err != nil {
			peaks.stop()
			return r, err
		}
		if err := s.watch.waitAll(ctx, uids, time.Duration(len(uids))*200*time.Millisecond+2*time.Minute); err != nil {
			peaks.stop()
			return r, err
		}
		rate := float64(len(uids)) / time.Since(t0).Seconds()
		if r.ClaimsPerSec == 0 {
			r.ClaimsPerSec = rate
		} else {
			r.AccessesPerSec = rate
		}
	}
	r.ProvisionSec = time.Since(start).Seconds()
	r.ControllerPeakRSS, r.SidecarPeakRSS = peaks.stop()
	r.Load = loadAverage()

	// Quiet: a second for the last status writes, then the count. The PATCH secrets are counted
	// in each second from the end of provisioning: the Secret checks that fell due meanwhile run
	// as soon as the work queue has room, which can be before the last access is seen provisioned.
	type perSecond struct {
		n   []float64
		err error
	}
	patches := make(chan perSecond, 1)
	go func() {
		n, err := s.secretPatchesPerSecond(ctx, time.Second+s.cfg.ScaleQuiet)
		patches <- perSecond{n, err}
	}()
	time.Sleep(time.Second)
	before, err := s.scrape(ctx)
	if err != nil {
		return r, err
	}
	time.Sleep(s.cfg.ScaleQuiet)
	after, err := s.scrape(ctx)
	p := <-patches
	if p.err != nil {
		return r, p.err
	}
	r.QuietSecretPatches = p.n
	if err != nil {
		return r, err
	}
	r.QuietSec = s.cfg.ScaleQuiet.Seconds()
	r.CheckIntervalSec = s.cfg.SecretCheckInterval.Seconds()
	if r.CheckIntervalSec == 0 {
		r.CheckIntervalSec = defaultSecretCheckInterval.Seconds()
	}
	r.QuietReconciles = componentReconciles(before, after)
	r.QuietCheckDecisions = checkDecisions(before.sidecar, after.sidecar)
	r.QuietRequests = cosiRequests(before, after)
	if err := s.measureMemory(&r, after, run); err != nil {
		return r, err
	}
	s.profiles(ctx, n, "quiet", "heap?gc=1")
	if s.cfg.RestartMemoryLimit != "" {
		// First, so that the next size is provisioned by processes started as in a cluster.
		f, _, _, err := s.restart(ctx, n, restartHow{env: []string{"GOMEMLIMIT=" + s.cfg.RestartMemoryLimit}})
		if err != nil {
			return r, fmt.Errorf("restart with GOMEMLIMIT=%s: %w", s.cfg.RestartMemoryLimit, err)
		}
		r.LimitedRestart = &f
	}
	if err := s.restartToCaughtUp(ctx, &r); err != nil {
		return r, err
	}
	// A measurement, not a step: its failure is told and the run goes on.
	if r.ListFloor, err = s.listFloor(ctx, n, time.Duration(r.CaughtUpSec*float64(time.Second))); err != nil {
		s.cfg.logf("scale: N=%d: the catch-up's lists alone: %v", n, err)
	}
	if s.cfg.CompareBinDir == "" {
		return r, nil
	}
	// Last, so that the next size is provisioned by BinDir's builds; the pairs in turn in either
	// order (A B B A ...), so that what moves with time (the scheduled checks falling due, etcd's
	// compactions) moves both builds' medians alike.
	for i := range s.cfg.ComparePairs {
		dirs := []string{s.cfg.CompareBinDir, s.cfg.BinDir}
		if i%2 == 1 {
			dirs[0], dirs[1] = dirs[1], dirs[0]
		}
		for j, dir := range dirs {
			s.cfg.logf("scale: N=%d: restart with %s's controller and sidecar", n, dir)
			// Profiles named by build and turn (compare1, bin2, bin3, compare4, ...), for pprof -diff_base.
			build := "bin"
			if dir == s.cfg.CompareBinDir {
				build = "compare"
			}
			how := restartHow{binDir: dir, profile: fmt.Sprintf("%s%d", build, 2*i+j+1)}
			f, _, _, err := s.restart(ctx, n, how)
			if err != nil {
				return r, fmt.Errorf("restart with %s's controller and sidecar: %w", dir, err)
			}
			r.Compared = append(r.Compared, f)
		}
	}
	return r, nil
}

// defaultSecretCheckInterval is the sidecar's default --secret-check-interval.
const defaultSecretCheckInterval = 10 * time.Minute

// secretPatchesPerSecond counts COSI's PATCH secrets in each second for d, from the API server's
// metrics scraped every second.
func (s *system) secretPatchesPerSecond(ctx context.Context, d time.Duration) ([]float64, error) {
	sample := func() (requestCounts, time.Time, error) {
		bench := s.requests.snapshot()
		m, err := scrapeAPIServer(ctx, s.rest)
		return apiRequests(m).minus(bench), time.Now(), err
	}
	prev, at, err := sample()
	if err != nil {
		return nil, err
	}
	var out []float64
	for end := at.Add(d); at.Before(end); {
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(time.Until(at.Add(time.Second))):
		}
		next, nextAt, err := sample()
		if err != nil {
			return out, err
		}
		n := next.minus(prev).sum(func(r request) bool {
			return r.Verb == "PATCH" && r.Resource == "secrets" && r.Subresource == ""
		})
		out = append(out, n/nextAt.Sub(at).Seconds())
		prev, at = next, nextAt
	}
	return out, nil
}

// measureMemory records the memory of every process and etcd's size, with m the processes' last
// scrape.
func (s *system) measureMemory(r *ScaleResult, m scrapes, run ScaleRun) error {
	var err error
	if r.ControllerRSS, err = rss(s.env.Controller.Pid()); err != nil {
		return err
	}
	if r.SidecarRSS, err = rss(s.env.Sidecar.Pid()); err != nil {
		return err
	}
	r.ControllerHeap = m.controller.sum("go_memstats_heap_inuse_bytes", nil) / (1 << 20)
	r.SidecarHeap = m.sidecar.sum("go_memstats_heap_inuse_bytes", nil) / (1 << 20)
	r.ControllerBytesPerSet = bytesPer(r.ControllerRSS, run.ControllerBaseRSS, r.N)
	r.SidecarBytes = bytesPer(r.SidecarRSS, run.SidecarBaseRSS, r.N)
	byName := childRSS()
	r.APIServerRSS, r.EtcdRSS = byName["kube-apiserver"], byName["etcd"]
	if fi, err := os.Stat(filepath.Join(s.dir, "etcd", "member", "snap", "db")); err == nil {
		r.EtcdDBMiB = float64(fi.Size()) / (1 << 20)
	}
	// apiserver_resource_objects replaces apiserver_storage_objects (deprecated) in newer API
	// servers; the API server updates it every minute or so.
	r.EtcdObjects = m.api.sum("apiserver_resource_objects", nil)
	if r.EtcdObjects == 0 {
		r.EtcdObjects = m.api.sum("apiserver_storage_objects", nil)
	}
	return nil
}

// restartToCaughtUp stops controller and sidecar (SIGTERM), starts them again, and measures until
// every reconciler has reconciled each object of its kind once.
func (s *system) restartToCaughtUp(ctx context.Context, r *ScaleResult) error {
	f, before, m, err := s.restart(ctx, r.N, restartHow{profile: "restart"})
	if err != nil {
		return err
	}
	r.CaughtUpSec, r.RestartCPU, r.RestartConsistencyChecks = f.CaughtUpSec, f.CPU, f.ConsistencyChecks
	r.RestartControllerRSS, r.RestartSidecarRSS = f.ControllerRSS, f.SidecarRSS
	r.RestartControllerHWM, r.RestartSidecarHWM = f.ControllerPeakRSS, f.SidecarPeakRSS
	r.RestartReconciles = componentReconciles(scrapes{}, m)
	r.RestartRequests = cosiRequests(before, m)
	r.RestartDriverCalls = driverCalls(before.driver, m.driver)
	return nil
}

// RestartFigures are what a restart of controller and sidecar to caught up took.
type RestartFigures struct {
	// GoMemLimit is the GOMEMLIMIT the processes ran with ("": none).
	GoMemLimit string `json:"goMemLimit,omitempty"`
	// BinDir is the directory of the builds that restarted ("": Config.BinDir's, the usual
	// restarts).
	BinDir      string  `json:"binDir,omitempty"`
	CaughtUpSec float64 `json:"caughtUpSec"`
	// CPU is the CPU seconds each process used, by command name.
	CPU map[string]float64 `json:"cpu"`
	// ConsistencyChecks are the API server's own checks of its caches against etcd that ended
	// meanwhile, by resource (consistencyChecks): counted in its CPU, not caused by the restart.
	ConsistencyChecks map[string]float64 `json:"consistencyChecks,omitempty"`
	// RSS of the new processes when caught up, and their peak (VmHWM) since their start, MiB.
	ControllerRSS, SidecarRSS         float64
	ControllerPeakRSS, SidecarPeakRSS float64
	// Their live heap when caught up (HeapAlloc after a collection), MiB; with Config.Profiles
	// only (the processes serve /debug/pprof then).
	ControllerLiveHeap, SidecarLiveHeap float64 `json:",omitempty"`
}

// restartHow is how a restart starts controller and sidecar again.
type restartHow struct {
	// env is added to their environment.
	env []string
	// binDir holds the binaries they start from ("": as before).
	binDir string
	// profile, when set, names the restart in the file names of the profiles (Config.Profiles)
	// taken during the catch-up (CPU: "<profile>-catchup") and after it (heap: "<profile>-caughtup").
	profile string
}

// restart stops controller and sidecar (SIGTERM), starts them again as how says, waits until
// caught up and returns its figures and the processes' scrapes before the start and when caught
// up. The next restart starts them as the first start did.
func (s *system) restart(ctx context.Context, n int, how restartHow) (f RestartFigures, before, m scrapes, err error) {
	managers := []*localenv.Component{s.env.Sidecar, s.env.Controller}
	binaries := make([]string, len(managers))
	for i, p := range managers {
		if err := p.Stop(); err != nil {
			return f, before, m, err
		}
		binaries[i] = p.Binary
		p.Env = nil
		if len(how.env) > 0 {
			p.Env = append(os.Environ(), how.env...)
		}
		if how.binDir != "" {
			p.Binary = filepath.Join(how.binDir, filepath.Base(p.Binary))
		}
	}
	defer func() {
		for i, p := range managers {
			p.Env, p.Binary = nil, binaries[i]
		}
	}()
	f.BinDir = how.binDir
	if before, err = s.scrape0(ctx); err != nil {
		return f, before, m, err
	}
	want := map[string]float64{}
	for _, c := range scaleControllers {
		want[c] = float64(n)
	}
	cpu0 := childCPU()
	start := time.Now()
	for _, p := range managers {
		if err := p.Start(ctx); err != nil {
			return f, before, m, err
		}
	}
	cpu := make(chan struct{})
	go func() {
		defer close(cpu)
		if how.profile != "" {
			s.profiles(ctx, n, how.profile+"-catchup", fmt.Sprintf("profile?seconds=%d", int(s.cfg.ProfileCPU.Seconds())))
		}
	}()
	deadline := start.Add(30 * time.Minute)
	for {
		if m, err = s.scrape(ctx); err == nil {
			reconciled := componentReconciles(scrapes{}, m)
			queued := m.controller.sum("workqueue_depth", nil) + m.sidecar.sum("workqueue_depth", nil)
			if caughtUp(reconciled, want, queued) {
				break
			}
		}
		if time.Now().After(deadline) {
			return f, before, m, fmt.Errorf("not caught up %v after the restart", deadline.Sub(start))
		}
		select {
		case <-ctx.Done():
			return f, before, m, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	f.CaughtUpSec = time.Since(start).Seconds()
	f.CPU = cpuDelta(cpu0, childCPU())
	f.ControllerRSS, _ = rss(s.env.Controller.Pid())
	f.SidecarRSS, _ = rss(s.env.Sidecar.Pid())
	_, f.ControllerPeakRSS, _, _ = procStats(s.env.Controller.Pid())
	_, f.SidecarPeakRSS, _, _ = procStats(s.env.Sidecar.Pid())
	for _, e := range how.env {
		if v, ok := strings.CutPrefix(e, "GOMEMLIMIT="); ok {
			f.GoMemLimit = v
		}
	}
	time.Sleep(time.Second) // the last requests of the catch-up land
	if m, err = s.scrape(ctx); err != nil {
		return f, before, m, err
	}
	f.ConsistencyChecks = consistencyChecks(before.api, m.api)
	if how.profile != "" {
		s.profiles(ctx, n, how.profile+"-caughtup", "heap?gc=1")
	}
	if s.cfg.Profiles != "" {
		if f.ControllerLiveHeap, err = liveHeap(ctx, s.env.Controller); err == nil {
			f.SidecarLiveHeap, err = liveHeap(ctx, s.env.Sidecar)
		}
		if err != nil {
			s.cfg.logf("live heap: %v", err)
		}
	}
	<-cpu
	return f, before, m, nil
}

// profiles saves the Go profile at /debug/pprof/<what> of controller and sidecar as
// <Profiles>/<component>-<n>-<name>.pprof (with Config.Profiles; a failure is logged, the
// measurement goes on).
func (s *system) profiles(ctx context.Context, n int, name, what string) {
	if s.cfg.Profiles == "" || strings.HasPrefix(what, "profile") && s.cfg.ProfileCPU <= 0 {
		return
	}
	var wg sync.WaitGroup
	for _, c := range []*localenv.Component{s.env.Controller, s.env.Sidecar} {
		wg.Go(func() {
			file := filepath.Join(s.cfg.Profiles, fmt.Sprintf("%s-%d-%s.pprof", c.Name, n, name))
			if err := saveProfile(ctx, http.DefaultClient, "http://"+c.PprofAddress+"/debug/pprof/"+what, file); err != nil {
				s.cfg.logf("profile %s: %v", file, err)
			}
		})
	}
	if strings.HasPrefix(what, "profile") {
		wg.Go(func() { s.apiServerProfile(ctx, n, name) })
	}
	wg.Wait()
}

// apiServerProfile saves the API server's CPU profile of the next Config.ProfileCPU as
// <Profiles>/kube-apiserver-<n>-<name>.pprof (its /debug/pprof, with the benchmark's credentials;
// a failure is logged).
func (s *system) apiServerProfile(ctx context.Context, n int, name string) {
	file := filepath.Join(s.cfg.Profiles, fmt.Sprintf("kube-apiserver-%d-%s.pprof", n, name))
	c, err := rest.HTTPClientFor(s.rest)
	if err == nil {
		err = saveProfile(ctx, c, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(s.rest.Host, "/"),
			int(s.cfg.ProfileCPU.Seconds())), file)
	}
	if err != nil {
		s.cfg.logf("profile %s: %v", file, err)
	}
}

// liveHeap is the process's heap after a collection, MiB: the HeapAlloc its heap profile reports
// (/debug/pprof/heap?gc=1&debug=1 ends with the runtime's memory statistics).
func liveHeap(ctx context.Context, c *localenv.Component) (float64, error) {
	url := "http://" + c.PprofAddress + "/debug/pprof/heap?gc=1&debug=1"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return heapAlloc(resp.Body)
}

// heapAlloc reads the "# HeapAlloc = N" line of a text heap profile, in MiB.
func heapAlloc(r io.Reader) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return n / (1 << 20), err
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no HeapAlloc in the heap profile")
}

func saveProfile(ctx context.Context, c *http.Client, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return os.WriteFile(file, data, 0o644)
}

// cpuDelta returns the CPU seconds used between two childCPU readings, by command name; a process
// started in between counts from zero.
func cpuDelta(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for name, v := range after {
		out[name] = v - before[name]
	}
	return out
}

// scrape0 scrapes the API server and the driver only (controller and sidecar are stopped).
func (s *system) scrape0(ctx context.Context) (m scrapes, err error) {
	if m.api, err = scrapeAPIServer(ctx, s.rest); err != nil {
		return m, err
	}
	m.bench = s.requests.snapshot()
	m.driver, err = scrapeHTTP(ctx, s.env.Driver.MetricsAddress)
	return m, err
}

// checkDecisions returns the sidecar's scheduled-check decisions between two scrapes by decision.
func checkDecisions(before, after metrics) map[string]float64 {
	out := map[string]float64{}
	for _, d := range []string{"NotDue", "Placed", "Kept", "Ran", "Refused"} {
		sel := map[string]string{"decision": d}
		if v := after.sum(scheduledCheckDecisions, sel) - before.sum(scheduledCheckDecisions, sel); v != 0 {
			out[d] = v
		}
	}
	return out
}

// scheduledCheckDecisions is the sidecar's metric of what its scheduled checks' rate limit decided.
const scheduledCheckDecisions = "cosi_sidecar_scheduled_check_decisions_total"

// componentReconciles returns the reconciles between two scrapes by "component controller".
func componentReconciles(before, after scrapes) map[string]float64 {
	out := map[string]float64{}
	for k, v := range reconcilesByController(before.controller, after.controller) {
		out["controller "+k] = v
	}
	for k, v := range reconcilesByController(before.sidecar, after.sidecar) {
		out["sidecar "+k] = v
	}
	return out
}

// cosiRequests returns COSI's API requests between two scrapes (the API server's minus the
// benchmark's own) by "VERB resource[/sub] code".
func cosiRequests(before, after scrapes) map[string]float64 {
	out := map[string]float64{}
	for r, v := range apiRequests(after.api).minus(apiRequests(before.api)).minus(after.bench.minus(before.bench)) {
		out[r.String()] = v
	}
	return out
}

// driverCalls returns the driver's calls between two scrapes by method, errors included.
func driverCalls(before, after metrics) map[string]float64 {
	return countsBy(before, after, "cosi_driver_operation_duration_seconds", "method_name")
}

// countsBy returns what a counter or histogram (its count) grew by between two scrapes, by the
// value of one of its labels; those that did not grow are left out.
func countsBy(before, after metrics, name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range []struct {
		ms   metrics
		sign float64
	}{{after, 1}, {before, -1}} {
		for _, metric := range m.ms[name].GetMetric() {
			v := metric.GetCounter().GetValue()
			if h := metric.GetHistogram(); h != nil {
				v = float64(h.GetSampleCount())
			}
			for _, l := range metric.GetLabel() {
				if l.GetName() == label {
					out[l.GetValue()] += m.sign * v
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

// peakSampler samples the RSS of controller and sidecar every second until stopped.
type peakSampler struct {
	stopCh              chan struct{}
	wg                  sync.WaitGroup
	controller, sidecar float64
}

func (s *system) samplePeaks() *peakSampler {
	p := &peakSampler{stopCh: make(chan struct{})}
	sample := func() {
		if v, err := rss(s.env.Controller.Pid()); err == nil {
			p.controller = max(p.controller, v)
		}
		if v, err := rss(s.env.Sidecar.Pid()); err == nil {
			p.sidecar = max(p.sidecar, v)
		}
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			sample()
			select {
			case <-p.stopCh:
				sample()
				return
			case <-time.After(time.Second):
			}
		}
	}()
	return p
}

// stop stops the sampling and returns the peaks of controller and sidecar, in MiB.
func (p *peakSampler) stop() (controller, sidecar float64) {
	close(p.stopCh)
	p.wg.Wait()
	return p.controller, p.sidecar
}

// rss returns a process's resident memory in MiB.
func rss(pid int) (float64, error) {
	_, _, v, err := procStats(pid)
	return v, err
}

// childRSS returns the resident memory in MiB of this process's children by command name.
func childRSS() map[string]float64 {
	out := map[string]float64{}
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		name, ppid, ok := procParent(pid)
		if !ok || ppid != self {
			continue
		}
		if v, err := rss(pid); err == nil {
			out[name] += v
		}
	}
	return out
}

// procParent returns a process's command name and parent.
func procParent(pid int) (name string, ppid int, ok bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, false
	}
	s := string(stat)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < 0 {
		return "", 0, false
	}
	fields := strings.Fields(s[closing+2:])
	ppid, _ = strconv.Atoi(fields[1])
	return s[open+1 : closing], ppid, true
}

// loadAverage returns the 1-minute load average.
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	return v
}

// waitAll waits until every uid is provisioned, checking a few times a second (the object counts
// here are large).
func (w *watcher) waitAll(ctx context.Context, uids []types.UID, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		_, n := w.times(w.provisioned, uids)
		if n == len(uids) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d objects provisioned after %v", n, len(uids), timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// scaleSeries are the figures of the scale phase fitted against N and extrapolated, with the
// issue's target where it has one.
var scaleSeries = []struct {
	name, unit, target string
	get                func(ScaleResult) float64
}{
	{"controller RSS, peak while provisioning", "MiB", "< 600",
		func(r ScaleResult) float64 { return r.ControllerPeakRSS }},
	{"controller RSS, steady", "MiB", "< 600", func(r ScaleResult) float64 { return r.ControllerRSS }},
	{"controller Go heap in use, steady", "MiB", "", func(r ScaleResult) float64 { return r.ControllerHeap }},
	{"controller RSS after a restart, caught up", "MiB", "< 600",
		func(r ScaleResult) float64 { return r.RestartControllerRSS }},
	{"sidecar RSS, peak while provisioning", "MiB", "< 600", func(r ScaleResult) float64 { return r.SidecarPeakRSS }},
	{"sidecar RSS, steady", "MiB", "< 600", func(r ScaleResult) float64 { return r.SidecarRSS }},
	{"sidecar Go heap in use, steady", "MiB", "", func(r ScaleResult) float64 { return r.SidecarHeap }},
	{"sidecar RSS after a restart, caught up", "MiB", "< 600", func(r ScaleResult) float64 { return r.RestartSidecarRSS }},
	{"restart → caught up", "s", "< 60", func(r ScaleResult) float64 { return r.CaughtUpSec }},
	{"its lists alone, served to the benchmark", "s", "", func(r ScaleResult) float64 { return r.ListFloor.sec() }},
	{"their kube-apiserver CPU", "CPU-s", "", func(r ScaleResult) float64 { return r.ListFloor.cpu("kube-apiserver") }},
	{"kube-apiserver RSS", "MiB", "", func(r ScaleResult) float64 { return r.APIServerRSS }},
	{"etcd RSS", "MiB", "", func(r ScaleResult) float64 { return r.EtcdRSS }},
	{"etcd database", "MiB", "< 8192 (quota)", func(r ScaleResult) float64 { return r.EtcdDBMiB }},
}

// ScaleFits fits each series of scaleSeries against N over sizes.
func ScaleFits(sizes []ScaleResult) []Fit {
	x := make([]float64, len(sizes))
	for i, r := range sizes {
		x[i] = float64(r.N)
	}
	out := make([]Fit, len(scaleSeries))
	for j, s := range scaleSeries {
		y := make([]float64, len(sizes))
		for i, r := range sizes {
			y[i] = s.get(r)
		}
		out[j] = linearFit(x, y)
	}
	return out
}

// printScale prints the scale phase of run i (0: a run that broke) and the fits extrapolated to
// 100,000.
func printScale(w io.Writer, i int, run ScaleRun) {
	if i > 0 {
		fmt.Fprintf(w, "\nScale, run %d (an object set: claim + Bucket + access + grant record + Secret)\n\n", i)
	} else {
		fmt.Fprintf(w, "\nScale, as far as it went\n\n")
	}
	fmt.Fprintf(w, "RSS before any object: controller %.0f MiB, sidecar %.0f MiB\n\n",
		run.ControllerBaseRSS, run.SidecarBaseRSS)
	if run.BrokeAt > 0 {
		fmt.Fprintf(w, "Not reached: N=%d (%s); the sizes below were measured in full\n\n", run.BrokeAt, run.BrokeError)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, f func(ScaleResult) string) {
		fmt.Fprint(tw, name+"\t")
		for _, r := range run.Sizes {
			fmt.Fprint(tw, f(r)+"\t")
		}
		fmt.Fprintln(tw)
	}
	v := func(get func(ScaleResult) float64) func(ScaleResult) string {
		return func(r ScaleResult) string { return num(get(r)) }
	}
	row("N (object sets)", func(r ScaleResult) string { return strconv.Itoa(r.N) })
	row("load average (1 min)", v(func(r ScaleResult) float64 { return r.Load }))
	row("claims/s, accesses/s (this step)", func(r ScaleResult) string {
		return num(r.ClaimsPerSec) + " / " + num(r.AccessesPerSec)
	})
	row("controller RSS MiB: peak / steady / heap", func(r ScaleResult) string {
		return num(r.ControllerPeakRSS) + " / " + num(r.ControllerRSS) + " / " + num(r.ControllerHeap)
	})
	row("sidecar RSS MiB: peak / steady / heap", func(r ScaleResult) string {
		return num(r.SidecarPeakRSS) + " / " + num(r.SidecarRSS) + " / " + num(r.SidecarHeap)
	})
	row("bytes per object set: controller / sidecar", func(r ScaleResult) string {
		return fmt.Sprintf("%.0f / %.0f", r.ControllerBytesPerSet, r.SidecarBytes)
	})
	row("kube-apiserver / etcd RSS MiB", func(r ScaleResult) string {
		return num(r.APIServerRSS) + " / " + num(r.EtcdRSS)
	})
	row("etcd db MiB / objects stored", func(r ScaleResult) string {
		return num(r.EtcdDBMiB) + " / " + strconv.Itoa(int(r.EtcdObjects))
	})
	row("quiet: reconciles / COSI writes (unscheduled)", func(r ScaleResult) string {
		all, un := Writes(r.QuietRequests)
		return fmt.Sprintf("%.0f in %.0f s / %.0f (%.0f)", sum(r.QuietReconciles), r.QuietSec, all, un)
	})
	row("quiet: scheduled checks placed / refused / ran (reconciles per check run)", func(r ScaleResult) string {
		d := r.QuietCheckDecisions
		perRun := "-"
		if d["Ran"] > 0 {
			perRun = fmt.Sprintf("%.2f", (d["Placed"]+d["Refused"]+d["Kept"]+d["Ran"])/d["Ran"])
		}
		return fmt.Sprintf("%.0f / %.0f / %.0f (%s)", d["Placed"], d["Refused"], d["Ran"], perRun)
	})
	row("end of provisioning + quiet: PATCH secrets/s, peak second / mean (N/interval)", func(r ScaleResult) string {
		all := 0.0
		for _, n := range r.QuietSecretPatches {
			all += n
		}
		mean := all / float64(max(len(r.QuietSecretPatches), 1))
		return fmt.Sprintf("%.0f / %.0f (%.0f)", slices.Max(append([]float64{0}, r.QuietSecretPatches...)), mean,
			float64(r.N)/max(r.CheckIntervalSec, 1))
	})
	row("restart → caught up s", v(func(r ScaleResult) float64 { return r.CaughtUpSec }))
	row("restart: reconciles per object set", func(r ScaleResult) string {
		return num(sum(r.RestartReconciles) / float64(r.N))
	})
	row("restart: COSI writes (unscheduled)", func(r ScaleResult) string {
		all, un := Writes(r.RestartRequests)
		return fmt.Sprintf("%.0f (%.0f)", all, un)
	})
	row("restart: driver calls changing the store / GetBucket", func(r ScaleResult) string {
		return fmt.Sprintf("%.0f / %.0f", MutatingCalls(r.RestartDriverCalls), r.RestartDriverCalls["DriverGetBucket"])
	})
	row("restart: CPU-s controller / sidecar / kube-apiserver", func(r ScaleResult) string {
		c := r.RestartCPU
		return num(c["cosi-controller"]) + " / " + num(c["cosi-sidecar"]) + " / " + num(c["kube-apiserver"])
	})
	row("restart: the API server's own cache checks meanwhile", func(r ScaleResult) string {
		return checksOf(r.RestartConsistencyChecks)
	})
	row("restart's lists alone: s / CPU-s kube-apiserver / etcd", func(r ScaleResult) string {
		return num(r.ListFloor.sec()) + " / " + num(r.ListFloor.cpu("kube-apiserver")) + " / " + num(r.ListFloor.cpu("etcd"))
	})
	row("restart: RSS MiB controller / sidecar (peak)", func(r ScaleResult) string {
		return fmt.Sprintf("%s (%s) / %s (%s)", num(r.RestartControllerRSS), num(r.RestartControllerHWM),
			num(r.RestartSidecarRSS), num(r.RestartSidecarHWM))
	})
	if slices.ContainsFunc(run.Sizes, func(r ScaleResult) bool { return r.LimitedRestart != nil }) {
		limited := func(f func(RestartFigures) string) func(ScaleResult) string {
			return func(r ScaleResult) string {
				if r.LimitedRestart == nil {
					return "-"
				}
				return f(*r.LimitedRestart)
			}
		}
		row("restart with GOMEMLIMIT", limited(func(f RestartFigures) string { return f.GoMemLimit }))
		row("  → caught up s", limited(func(f RestartFigures) string { return num(f.CaughtUpSec) }))
		row("  CPU-s controller / sidecar / kube-apiserver", limited(func(f RestartFigures) string {
			return num(f.CPU["cosi-controller"]) + " / " + num(f.CPU["cosi-sidecar"]) + " / " + num(f.CPU["kube-apiserver"])
		}))
		row("  RSS MiB controller / sidecar (peak)", limited(func(f RestartFigures) string {
			return fmt.Sprintf("%s (%s) / %s (%s)", num(f.ControllerRSS), num(f.ControllerPeakRSS), num(f.SidecarRSS),
				num(f.SidecarPeakRSS))
		}))
	}
	tw.Flush()
	for _, r := range run.Sizes {
		printListFloor(w, r)
		printCompared(w, r)
	}
	for _, r := range run.Sizes {
		fmt.Fprintf(w, "\nN=%d: quiet reconciles %v; quiet requests %v\n", r.N, r.QuietReconciles, r.QuietRequests)
		fmt.Fprintf(w, "N=%d: restart reconciles %v; restart requests %v; driver calls %v\n",
			r.N, r.RestartReconciles, r.RestartRequests, r.RestartDriverCalls)
	}
	if len(run.Sizes) < 2 {
		return
	}
	fmt.Fprintf(w, "\nLeast-squares fit y = a + b·N over N = %v, extrapolated to 100,000\n\n", scaleNs(run.Sizes))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\ta\tb PER OBJECT SET\tAT 100,000\tUNIT\tTARGET")
	for j, f := range ScaleFits(run.Sizes) {
		s := scaleSeries[j]
		per := fmt.Sprintf("%.4g", f.Slope)
		if s.unit == "MiB" {
			per = fmt.Sprintf("%.0f bytes", f.Slope*(1<<20))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.name, num(f.Intercept), per, num(f.At(100000)), s.unit, s.target)
	}
	tw.Flush()
}

func scaleNs(sizes []ScaleResult) []int {
	out := make([]int, len(sizes))
	for i, r := range sizes {
		out[i] = r.N
	}
	return out
}

func sum(m map[string]float64) float64 {
	total := 0.0
	for _, v := range m {
		total += v
	}
	return total
}

// printCompared prints a size's compared restarts (Config.CompareBinDir), each, then the median of
// each build's and their ratio.
func printCompared(w io.Writer, r ScaleResult) {
	if len(r.Compared) == 0 {
		return
	}
	fmt.Fprintf(w, "\nN=%d: restarts alternated between two builds of controller and sidecar\n\n", r.N)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "BUILD\tCAUGHT UP s\tCPU-s CONTROLLER\tSIDECAR\tKUBE-APISERVER\t"+
		"LIVE HEAP MiB CONTROLLER\tSIDECAR\tRSS MiB CONTROLLER (PEAK)\tSIDECAR (PEAK)\tAPI SERVER'S CACHE CHECKS\t")
	figures := func(f RestartFigures) []float64 {
		return []float64{f.CaughtUpSec, f.CPU["cosi-controller"], f.CPU["cosi-sidecar"], f.CPU["kube-apiserver"],
			f.ControllerLiveHeap, f.SidecarLiveHeap}
	}
	var dirs []string
	byDir := map[string][][]float64{}
	for _, f := range r.Compared {
		if _, ok := byDir[f.BinDir]; !ok {
			dirs = append(dirs, f.BinDir)
		}
		byDir[f.BinDir] = append(byDir[f.BinDir], figures(f))
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s (%s)\t%s (%s)\t%s\t\n", f.BinDir, num(f.CaughtUpSec),
			num(f.CPU["cosi-controller"]), num(f.CPU["cosi-sidecar"]), num(f.CPU["kube-apiserver"]),
			num(f.ControllerLiveHeap), num(f.SidecarLiveHeap),
			num(f.ControllerRSS), num(f.ControllerPeakRSS), num(f.SidecarRSS), num(f.SidecarPeakRSS),
			checksOf(f.ConsistencyChecks))
	}
	medians := make([][]float64, len(dirs))
	for i, dir := range dirs {
		for j := range 6 {
			var col []float64
			for _, row := range byDir[dir] {
				col = append(col, row[j])
			}
			medians[i] = append(medians[i], summarize(col).Median)
		}
		m := medians[i]
		fmt.Fprintf(tw, "median %s\t%s\t%s\t%s\t%s\t%s\t%s\t\t\t\t\n", dir, num(m[0]), num(m[1]), num(m[2]), num(m[3]),
			num(m[4]), num(m[5]))
	}
	if len(dirs) == 2 {
		fmt.Fprint(tw, "ratio, second / first\t")
		for j := range 6 {
			if medians[0][j] == 0 {
				fmt.Fprint(tw, "-\t")
				continue
			}
			fmt.Fprintf(tw, "%.2f\t", medians[1][j]/medians[0][j])
		}
		fmt.Fprintln(tw, "\t\t\t")
	}
	tw.Flush()
}
