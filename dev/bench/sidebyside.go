package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/process"
	"github.com/kube-cosi/cosi/internal/kube/scheme"
)

// Side by side: this project's controller, sidecar and memory driver, and the reference
// implementation's controller and sidecar (kubernetes-sigs/container-object-storage-interface) with
// a no-op driver of this project's for its protocol (hack/reference/noopdriver), measured the same
// way, in alternating runs, each on a fresh API server with its own CRDs (both are
// objectstorage.k8s.io/v1alpha2, with different schemas). hack/reference/build.sh builds the
// reference outside the repository into the directory that -reference names.

// The files of a reference directory (hack/reference/build.sh).
const (
	RefController = "ref-controller"
	RefSidecar    = "ref-sidecar"
	RefDriver     = "ref-driver"
	RefCRDDir     = "crd"
	RefCommitFile = "COMMIT"
)

// refSecretKey is the key of the S3 secret key in the reference's access Secrets
// (CredentialVar_S3_AccessSecretKey of its API).
const refSecretKey = "COSI_S3_ACCESS_SECRET_KEY"

// The implementations' names in the report.
const (
	implThis      = "this project"
	implReference = "reference"
)

// implementation is what differs between the two in a side-by-side measurement: what runs, the
// CRDs, the objects the benchmark creates (in each one's schema) and when one counts as done.
type implementation struct {
	name string
	// crds are the CRDs the API server installs; none means this project's.
	crds []string
	// start starts the driver, the sidecar and the controller in env and sets env's Components.
	start func(ctx context.Context, env *localenv.Env) error
	// classes are the BucketClass and BucketAccessClass "bench" of driverName.
	classes func() []*unstructured.Unstructured
	// claim and access are the i-th claim and its access in namespace ns.
	claim, access func(ns string, i int) *unstructured.Unstructured
	// ready reports whether a claim or an access is provisioned.
	ready func(u *unstructured.Unstructured) bool
	// secretKey is the Secret key that holds the S3 secret key once an access is provisioned.
	secretKey string
}

// thisImplementation is this project's processes from -bin, as the rest of cosi-bench runs them.
func thisImplementation() *implementation {
	return &implementation{
		name:  implThis,
		start: func(ctx context.Context, env *localenv.Env) error { return env.StartCOSI(ctx) },
		classes: func() []*unstructured.Unstructured {
			return []*unstructured.Unstructured{
				mustUnstructured(objects.BucketClass("bench", driverName, cosiapi.DeletionPolicyDelete), "BucketClass"),
				mustUnstructured(objects.BucketAccessClass("bench", driverName), "BucketAccessClass"),
			}
		},
		claim: func(ns string, i int) *unstructured.Unstructured {
			return mustUnstructured(benchClaim(ns, i), "BucketClaim")
		},
		access: func(ns string, i int) *unstructured.Unstructured {
			return mustUnstructured(benchAccess(ns, i), "BucketAccess")
		},
		ready:     conditionTrue(cosiapi.ConditionProvisioned),
		secretKey: cosiapi.SecretKeyS3SecretAccessKey,
	}
}

// referenceImplementation is the reference's controller, sidecar and ref-driver from dir, with
// its CRDs from dir/crd, started with the flags its deployment gives them (none but the
// connection's: its default log level and one reconcile worker per controller).
func referenceImplementation(dir string) *implementation {
	return &implementation{
		name:  implReference,
		crds:  []string{filepath.Join(dir, RefCRDDir)},
		start: func(ctx context.Context, env *localenv.Env) error { return startReference(ctx, env, dir) },
		classes: func() []*unstructured.Unstructured {
			return []*unstructured.Unstructured{
				newUnstructured("BucketClass", "", "bench", map[string]any{
					"driverName": driverName, "deletionPolicy": "Delete"}),
				newUnstructured("BucketAccessClass", "", "bench", map[string]any{
					"driverName": driverName, "authenticationType": "Key"}),
			}
		},
		claim: func(ns string, i int) *unstructured.Unstructured {
			return newUnstructured("BucketClaim", ns, fmt.Sprintf("claim-%d", i), map[string]any{
				"bucketClassName": "bench", "protocols": []any{"S3"}})
		},
		access: func(ns string, i int) *unstructured.Unstructured {
			return newUnstructured("BucketAccess", ns, fmt.Sprintf("access-%d", i), map[string]any{
				"bucketAccessClassName": "bench",
				"protocol":              "S3",
				"bucketClaims": []any{map[string]any{
					"bucketClaimName":  fmt.Sprintf("claim-%d", i),
					"accessMode":       "ReadWrite",
					"accessSecretName": fmt.Sprintf("creds-%d", i),
				}},
			})
		},
		ready:     readyToUse,
		secretKey: refSecretKey,
	}
}

// newUnstructured is an objectstorage.k8s.io/v1alpha2 object of kind with spec.
func newUnstructured(kind, namespace, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(cosiapi.SchemeGroupVersion.WithKind(kind))
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// mustUnstructured converts one of this project's typed objects, of kind.
func mustUnstructured(obj runtime.Object, kind string) *unstructured.Unstructured {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		panic(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(cosiapi.SchemeGroupVersion.WithKind(kind))
	return u
}

// conditionTrue reports whether an object's status has the condition typ with status True (this
// project's Provisioned).
func conditionTrue(typ string) func(*unstructured.Unstructured) bool {
	return func(u *unstructured.Unstructured) bool {
		conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conditions {
			m, ok := c.(map[string]any)
			if ok && m["type"] == typ && m["status"] == string(metav1.ConditionTrue) {
				return true
			}
		}
		return false
	}
}

// readyToUse reports whether status.readyToUse is true (the reference's claims and accesses).
func readyToUse(u *unstructured.Unstructured) bool {
	ready, found, err := unstructured.NestedBool(u.Object, "status", "readyToUse")
	return found && err == nil && ready
}

// Reference describes a directory of reference builds.
type Reference struct {
	Dir    string `json:"dir"`
	Commit string `json:"commit"`
}

// LoadReference checks that dir holds what hack/reference/build.sh puts there and reads the
// reference's commit.
func LoadReference(dir string) (Reference, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Reference{}, err
	}
	for _, f := range []string{RefController, RefSidecar, RefDriver, RefCRDDir} {
		if _, err := os.Stat(filepath.Join(abs, f)); err != nil {
			return Reference{}, fmt.Errorf("-reference %s: %w (hack/reference/build.sh builds it)", dir, err)
		}
	}
	commit, err := os.ReadFile(filepath.Join(abs, RefCommitFile))
	if err != nil {
		return Reference{}, fmt.Errorf("-reference %s: %w (hack/reference/build.sh writes it)", dir, err)
	}
	return Reference{Dir: abs, Commit: strings.TrimSpace(string(commit))}, nil
}

// startReference starts ref-driver, then the reference's sidecar (it connects to the driver at
// its start) and controller, each as cluster admin with its metrics on plain HTTP, and waits until
// each is ready.
func startReference(ctx context.Context, env *localenv.Env, dir string) error {
	runDir := filepath.Dir(env.Kubeconfig)
	// The reference's sidecar wants unix://PATH.sock.
	socket := filepath.Join(runDir, "run", "ref-driver.sock")
	endpoint := "unix://" + socket
	logOf := func(name string) string { return filepath.Join(runDir, "log", name+".log") }
	env.Driver = &localenv.Component{Process: &process.Process{Name: RefDriver, Binary: filepath.Join(dir, RefDriver),
		Args: []string{"--endpoint", endpoint, "--name", driverName}, Log: logOf(RefDriver),
		Ready: process.FileExists(socket)}}
	var err error
	if env.Sidecar, err = referenceManager(dir, RefSidecar, env.Kubeconfig, logOf(RefSidecar)); err != nil {
		return err
	}
	env.Sidecar.Env = append(os.Environ(), "COSI_ENDPOINT="+endpoint)
	if env.Controller, err = referenceManager(dir, RefController, env.Kubeconfig, logOf(RefController)); err != nil {
		return err
	}
	for _, c := range []*localenv.Component{env.Driver, env.Sidecar, env.Controller} {
		if err := c.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// referenceManager is the reference's controller or sidecar (controller-runtime managers with the
// same flags): ready when /readyz answers.
func referenceManager(dir, name, kubeconfig, log string) (*localenv.Component, error) {
	var health, metrics string
	if err := process.FreeAddresses(&health, &metrics); err != nil {
		return nil, err
	}
	return &localenv.Component{
		Process: &process.Process{Name: name, Binary: filepath.Join(dir, name), Log: log, DumpOnHang: true,
			Args: []string{"--kubeconfig", kubeconfig, "--health-probe-bind-address", health,
				"--metrics-bind-address", metrics, "--metrics-secure=false"},
			Ready: process.HTTPReady("http://" + health + "/readyz")},
		MetricsAddress: metrics,
	}, nil
}

// SideRun is one implementation's measurement with N claims, then N accesses, on a fresh API
// server: the rates, and per object in each phase COSI's API requests and reconciles and the CPU
// of the API server, the sidecar and the controller.
type SideRun struct {
	Implementation string  `json:"implementation"`
	N              int     `json:"n"`
	Load           float64 `json:"load"` // the machine's 1-minute load average at the start
	ClaimsPerSec   float64 `json:"claimsPerSec"`
	AccessesPerSec float64 `json:"accessesPerSec"`
	// Requests are COSI's API requests by "VERB resource[/subresource] code", per claim while the
	// claims are provisioned and per access while the accesses are (Deletion is unused).
	Requests                          map[string]phaseFigures `json:"requests"`
	ClaimWrites, AccessWrites         float64
	ClaimRequests, AccessRequests     float64
	ClaimReconciles                   float64
	AccessReconciles                  float64
	APIServerCPU                      phaseFigures `json:"apiServerCPUPer1000"`
	SidecarCPU                        phaseFigures `json:"sidecarCPUPer1000"`
	ControllerCPU                     phaseFigures `json:"controllerCPUPer1000"`
	ClaimP50, ClaimP99                float64      // ms, create to provisioned
	AccessP50, AccessP99              float64
	SecretsWithKey                    int     `json:"secretsWithKey"`
	ControllerPeakRSS, SidecarPeakRSS float64 // MiB
}

// SideBySide is the side-by-side mode's result.
type SideBySide struct {
	This      string                          `json:"this"` // git describe of the repository
	Reference Reference                       `json:"reference"`
	Runs      []SideRun                       `json:"runs"` // in the order measured
	Summary   map[int][]Comparison            `json:"summary"`
	Requests  map[int]map[string]sideRequests `json:"requests"`
}

// runSideBySide measures both implementations cfg.Runs times for each size, alternated (this
// project first in odd runs, the reference first in even ones: A B B A A B ...), and prints the
// comparison.
func runSideBySide(ctx context.Context, cfg Config, out io.Writer) error {
	ref, err := LoadReference(cfg.ReferenceDir)
	if err != nil {
		return err
	}
	result := SideBySide{This: describeRepo(cfg.RepoRoot), Reference: ref}
	impls := [2]*implementation{thisImplementation(), referenceImplementation(ref.Dir)}
	for _, n := range cfg.Sizes {
		for i := range cfg.Runs {
			for _, im := range runOrder(impls, i) {
				cfg.logf("side by side, N=%d, run %d of %d: %s", n, i+1, cfg.Runs, im.name)
				r, err := measureSide(ctx, cfg, im, n)
				if err != nil {
					return fmt.Errorf("%s, N=%d, run %d: %w", im.name, n, i+1, err)
				}
				result.Runs = append(result.Runs, r)
			}
		}
	}
	result.Summary, result.Requests = map[int][]Comparison{}, map[int]map[string]sideRequests{}
	for _, n := range cfg.Sizes {
		this, reference := sideRunsOf(result.Runs, implThis, n), sideRunsOf(result.Runs, implReference, n)
		result.Summary[n] = compareSides(this, reference)
		result.Requests[n] = map[string]sideRequests{
			implThis: medianRequests(this), implReference: medianRequests(reference)}
	}
	printSideBySide(out, cfg, result)
	if cfg.JSON != "" {
		data, err := json.MarshalIndent(map[string]any{"config": cfg, "sideBySide": result}, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(cfg.JSON, data, 0o644)
	}
	return nil
}

// runOrder is the order of the implementations in run i (from 0): A B, then B A, and so on.
func runOrder[T any](impls [2]T, i int) [2]T {
	if i%2 == 1 {
		return [2]T{impls[1], impls[0]}
	}
	return impls
}

// sideRunsOf returns the runs of implementation name with n claims, in order.
func sideRunsOf(runs []SideRun, name string, n int) []SideRun {
	var out []SideRun
	for _, r := range runs {
		if r.Implementation == name && r.N == n {
			out = append(out, r)
		}
	}
	return out
}

// describeRepo is git describe of the repository (the commit of this project measured, with
// -dirty for uncommitted changes), or "unknown".
func describeRepo(root string) string {
	b, err := exec.Command("git", "-C", root, "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// sideSystem is one implementation running on a fresh API server, and the benchmark's client
// and watch.
type sideSystem struct {
	cfg      Config
	im       *implementation
	env      *localenv.Env
	dir      string
	rest     *rest.Config
	client   client.Client
	requests *requestCounter
	watch    *readyWatcher
}

// sideScrape is the metrics of the API server, the sidecar and the controller, the benchmark's
// own requests, and the CPU seconds of the API server, the sidecar and the controller, at one
// moment.
type sideScrape struct {
	api, sidecar, controller metrics
	bench                    requestCounts
	cpu                      sideCPU
}

type sideCPU struct{ apiServer, sidecar, controller float64 }

// measureSide measures im with n claims and n accesses on a fresh API server.
func measureSide(ctx context.Context, cfg Config, im *implementation, n int) (r SideRun, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r = SideRun{Implementation: im.name, N: n, Load: loadAverage(), Requests: map[string]phaseFigures{}}
	s := &sideSystem{cfg: cfg, im: im}
	if s.dir, err = os.MkdirTemp("", "cosi-bench-side"); err != nil {
		return r, err
	}
	if s.env, err = localenv.New(ctx, localenv.Options{
		Dir: s.dir, RepoRoot: cfg.RepoRoot, BinDir: cfg.BinDir, Driver: localenv.DriverMemory,
		DriverName: driverName, Identities: localenv.Admin, Workers: cfg.Workers, Metrics: true,
		CRDPaths: im.crds, APIServerFeatureGates: cfg.APIServerFeatureGates,
	}); err != nil {
		return r, fmt.Errorf("starting the API server: %w", err)
	}
	defer func() {
		cancel() // the benchmark's watches first: the API server waits for open watches as it stops
		err = errors.Join(err, s.env.Stop())
		if err != nil {
			cfg.logf("logs kept in %s", filepath.Join(s.dir, "log"))
			return
		}
		_ = os.RemoveAll(s.dir)
	}()
	if err := s.connect(ctx); err != nil {
		return r, err
	}
	if err := im.start(ctx, s.env); err != nil {
		return r, err
	}
	for _, ns := range []string{"warmup", "bench"} {
		if err := s.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return r, err
		}
	}
	for _, c := range im.classes() {
		if err := s.client.Create(ctx, c); err != nil {
			return r, err
		}
	}
	if err := s.warmUp(ctx); err != nil {
		return r, fmt.Errorf("warm-up: %w", err)
	}
	return r, s.measure(ctx, n, &r)
}

// connect makes the benchmark's client and watch, every request counted.
func (s *sideSystem) connect(ctx context.Context) error {
	var err error
	if s.rest, _, err = s.env.AdminClient(5000); err != nil {
		return err
	}
	s.requests = newRequestCounter()
	s.rest.Wrap(s.requests.wrap)
	if s.client, err = client.New(s.rest, client.Options{Scheme: scheme.New()}); err != nil {
		return err
	}
	s.watch, err = newReadyWatcher(ctx, s.rest, s.im.ready)
	return err
}

// Warm-up: sideWarmUp claims with an access each, provisioned before the measurement, then
// sideSettle of quiet. A fresh API server is still busy with the CRDs it just installed
// (their OpenAPI, discovery) and the processes' first requests open connections and fill
// caches; the usual run's raw ceiling and single claims do the same before its throughput phase.
const (
	sideWarmUp = 20
	sideSettle = 3 * time.Second
)

// warmUp provisions sideWarmUp claims and accesses in the namespace warmup, and waits sideSettle.
func (s *sideSystem) warmUp(ctx context.Context) error {
	for _, newObj := range []func(string, int) *unstructured.Unstructured{s.im.claim, s.im.access} {
		if _, err := s.provision(ctx, "warmup", sideWarmUp, newObj, 2*time.Minute); err != nil {
			return err
		}
	}
	time.Sleep(sideSettle)
	return nil
}

// measure provisions n claims, waits 2 s, then provisions an access to each, as the throughput
// phase of a usual run does (without the deletion).
func (s *sideSystem) measure(ctx context.Context, n int, r *SideRun) error {
	timeout := time.Duration(n)*200*time.Millisecond + 2*time.Minute
	claimsStart, err := s.scrape(ctx)
	if err != nil {
		return err
	}
	claims, err := s.provision(ctx, "bench", n, s.im.claim, timeout)
	if err != nil {
		return fmt.Errorf("claims: %w", err)
	}
	r.ClaimsPerSec, r.ClaimP50, _, r.ClaimP99 = latency(claims.starts, claims.done)
	claimsCPU := s.cpu()
	time.Sleep(500 * time.Millisecond) // let the last status writes land before counting
	claimsDone, err := s.scrape(ctx)
	if err != nil {
		return err
	}
	claimsDone.cpu = claimsCPU
	cosi := recordRequests(claimsStart, claimsDone, n, r, func(f *phaseFigures, v float64) { f.Claims = v })
	r.ClaimRequests = cosi.sum(func(request) bool { return true }) / float64(n)
	r.ClaimWrites = cosi.sum(request.isWrite) / float64(n)
	r.ClaimReconciles = reconciles(
		[2]metrics{claimsStart.sidecar, claimsDone.sidecar},
		[2]metrics{claimsStart.controller, claimsDone.controller}) / float64(n)
	r.APIServerCPU.Claims, r.SidecarCPU.Claims, r.ControllerCPU.Claims = perThousand(claimsStart.cpu, claimsDone.cpu, n)

	time.Sleep(2 * time.Second) // quiet, as the usual run's idle check
	accessesStart, err := s.scrape(ctx)
	if err != nil {
		return err
	}
	profiled := s.profileAccesses(ctx, n)
	accesses, err := s.provision(ctx, "bench", n, s.im.access, timeout)
	if err != nil {
		return fmt.Errorf("accesses: %w", err)
	}
	<-profiled
	r.AccessesPerSec, r.AccessP50, _, r.AccessP99 = latency(accesses.starts, accesses.done)
	accessesCPU := s.cpu()
	time.Sleep(500 * time.Millisecond)
	accessesDone, err := s.scrape(ctx)
	if err != nil {
		return err
	}
	accessesDone.cpu = accessesCPU
	cosi = recordRequests(accessesStart, accessesDone, n, r, func(f *phaseFigures, v float64) { f.Accesses = v })
	r.AccessRequests = cosi.sum(func(request) bool { return true }) / float64(n)
	r.AccessWrites = cosi.sum(request.isWrite) / float64(n)
	r.AccessReconciles = reconciles(
		[2]metrics{accessesStart.sidecar, accessesDone.sidecar},
		[2]metrics{accessesStart.controller, accessesDone.controller}) / float64(n)
	r.APIServerCPU.Accesses, r.SidecarCPU.Accesses, r.ControllerCPU.Accesses =
		perThousand(accessesStart.cpu, accessesDone.cpu, n)
	_, r.ControllerPeakRSS, _, _ = procStats(s.env.Controller.Pid())
	_, r.SidecarPeakRSS, _, _ = procStats(s.env.Sidecar.Pid())
	if r.SecretsWithKey, err = s.secretsWithKey(ctx); err != nil {
		return err
	}
	if r.SecretsWithKey != n {
		return fmt.Errorf("%d of %d access Secrets hold %s", r.SecretsWithKey, n, s.im.secretKey)
	}
	return nil
}

// profileAccesses saves, with Config.Profiles, the API server's CPU profile of the access phase's
// first Config.ProfileCPU as kube-apiserver-<n>-accesses-<implementation>-<time>.pprof; the channel
// closes when it is saved (at once without Config.Profiles).
func (s *sideSystem) profileAccesses(ctx context.Context, n int) <-chan struct{} {
	done := make(chan struct{})
	if s.cfg.Profiles == "" {
		close(done)
		return done
	}
	sys := &system{cfg: s.cfg, rest: s.rest}
	name := fmt.Sprintf("accesses-%s-%s", strings.ReplaceAll(s.im.name, " ", "-"), time.Now().Format("150405"))
	go func() {
		defer close(done)
		sys.apiServerProfile(ctx, n, name)
	}()
	return done
}

// provisioned are the creation and provisioning times of objects.
type provisioned struct{ starts, done []time.Time }

// provision creates n objects made by newObj in namespace ns with all writers, and waits until
// all are provisioned.
func (s *sideSystem) provision(
	ctx context.Context,
	ns string,
	n int,
	newObj func(ns string, i int) *unstructured.Unstructured,
	timeout time.Duration,
) (p provisioned, err error) {
	objs := make([]client.Object, n)
	for i := range objs {
		objs[i] = newObj(ns, i)
	}
	sys := &system{cfg: s.cfg, client: s.client}
	uids, starts, err := sys.create(ctx, objs)
	if err != nil {
		return p, err
	}
	done, err := s.watch.waitFor(ctx, uids, timeout)
	return provisioned{starts: starts, done: done}, err
}

// scrape reads the metrics and the CPU seconds.
func (s *sideSystem) scrape(ctx context.Context) (m sideScrape, err error) {
	m.cpu = s.cpu()
	if m.api, err = scrapeAPIServer(ctx, s.rest); err != nil {
		return m, err
	}
	m.bench = s.requests.snapshot()
	if m.sidecar, err = scrapeHTTP(ctx, s.env.Sidecar.MetricsAddress); err != nil {
		return m, err
	}
	m.controller, err = scrapeHTTP(ctx, s.env.Controller.MetricsAddress)
	return m, err
}

// cpu reads the CPU seconds of the API server, the sidecar and the controller.
func (s *sideSystem) cpu() sideCPU {
	c := sideCPU{apiServer: childCPU()["kube-apiserver"]}
	c.sidecar, _, _, _ = procStats(s.env.Sidecar.Pid())
	c.controller, _, _, _ = procStats(s.env.Controller.Pid())
	return c
}

// perThousand is the CPU seconds from before to after per 1,000 of n objects.
func perThousand(before, after sideCPU, n int) (apiServer, sidecar, controller float64) {
	k := 1000 / float64(n)
	return (after.apiServer - before.apiServer) * k, (after.sidecar - before.sidecar) * k,
		(after.controller - before.controller) * k
}

// recordRequests sets in r, through set, COSI's requests between two scrapes per object, and
// returns them.
func recordRequests(before, after sideScrape, n int, r *SideRun, set func(*phaseFigures, float64)) requestCounts {
	cosi := apiRequests(after.api).minus(apiRequests(before.api)).minus(after.bench.minus(before.bench))
	for req, v := range cosi {
		f := r.Requests[req.String()]
		set(&f, v/float64(n))
		r.Requests[req.String()] = f
	}
	return cosi
}

// secretsWithKey counts the Secrets of the namespace whose im.secretKey is not empty.
func (s *sideSystem) secretsWithKey(ctx context.Context) (int, error) {
	var secrets corev1.SecretList
	if err := s.client.List(ctx, &secrets, client.InNamespace("bench")); err != nil {
		return 0, err
	}
	n := 0
	for _, sec := range secrets.Items {
		if len(sec.Data[s.im.secretKey]) > 0 {
			n++
		}
	}
	return n, nil
}

// readyWatcher records, from watches of BucketClaims and BucketAccesses, when each became ready.
type readyWatcher struct {
	mu    sync.Mutex
	ready map[types.UID]time.Time
}

func newReadyWatcher(ctx context.Context, cfg *rest.Config, ready func(*unstructured.Unstructured) bool) (
	*readyWatcher, error) {
	c, err := cache.New(cfg, cache.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, err
	}
	w := &readyWatcher{ready: map[types.UID]time.Time{}}
	record := func(o any) {
		now := time.Now()
		u, ok := o.(*unstructured.Unstructured)
		if !ok || !ready(u) {
			return
		}
		w.mu.Lock()
		if _, seen := w.ready[u.GetUID()]; !seen {
			w.ready[u.GetUID()] = now
		}
		w.mu.Unlock()
	}
	for _, kind := range []string{"BucketClaim", "BucketAccess"} {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(cosiapi.SchemeGroupVersion.WithKind(kind))
		inf, err := c.GetInformer(ctx, u)
		if err != nil {
			return nil, err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    record,
			UpdateFunc: func(_, n any) { record(n) },
		}); err != nil {
			return nil, err
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, errors.New("watch cache did not sync")
	}
	return w, nil
}

// waitFor waits until every uid is ready and returns when each became so.
func (w *readyWatcher) waitFor(ctx context.Context, uids []types.UID, timeout time.Duration) ([]time.Time, error) {
	return pollTimes(ctx, len(uids), timeout, func() ([]time.Time, int) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return recordedTimes(w.ready, uids)
	})
}
