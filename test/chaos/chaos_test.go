// Package chaos is the fault suite's tier: cosi-chaos (dev/chaos) at CI size. The real
// cosi-controller, cosi-sidecar and a driver run as processes (from bin/: make build) against
// kube-apiserver, etcd and kube-controller-manager, while the suite kills them with SIGKILL, also
// inside driver calls, crashes etcd and the API server, and makes the driver fail and stall; then
// it waits for convergence and audits the backend and the API. A run passes with every fault kind
// injected, the system converged and no violation; then it plants one violation of each kind and
// checks that the audit finds each. The memory driver runs at the size that proves most; the S3
// driver against Versity's IAM (keys tried with real S3 requests) smaller, for time, and so does the
// reference COSI v1alpha1 driver on Versity, made to name every account itself (issue 41: the
// sidecar killed between the driver's answer and its record of the account).
// docs/reliability.md has the figures, and the larger runs.
package chaos

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kube-cosi/cosi/dev/chaos"
	"github.com/kube-cosi/cosi/dev/localenv"
)

// The CI sizes, in claims: about as many accesses come with them. COSI_CHAOS_CLAIMS and
// COSI_CHAOS_SEED change size and seed (a failure prints its seed).
const (
	memoryClaims   = 200
	s3Claims       = 60
	v1alpha1Claims = 60
)

func TestChaosMemory(t *testing.T) {
	runChaos(t, chaos.DriverMemory, memoryClaims, 2*time.Second, "cosi-driver-memory")
}

// The S3 run is shorter: its faults come faster, so that every kind fires.
func TestChaosS3(t *testing.T) {
	runChaos(t, chaos.DriverS3, s3Claims, time.Second, "cosi-driver-s3", "versitygw")
}

// The v1alpha1 run is the S3 run's size, its faults as fast: the accounts the driver names itself
// are audited by the grant records and the sidecar's leak reports (docs/reliability.md).
func TestChaosV1alpha1(t *testing.T) {
	runChaos(t, chaos.DriverV1alpha1, v1alpha1Claims, time.Second, "cosi-driver-v1alpha1s3", "versitygw")
}

func runChaos(t *testing.T, driver string, claims int, interval time.Duration, binaries ...string) {
	ctrl.SetLogger(logr.Discard())
	root, err := localenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cfg := chaos.DefaultConfig(envInt(t, "COSI_CHAOS_CLAIMS", claims))
	cfg.Driver, cfg.Faults.Interval = driver, interval
	cfg.Seed = int64(envInt(t, "COSI_CHAOS_SEED", int(cfg.Seed)))
	cfg.RepoRoot, cfg.BinDir = root, filepath.Join(root, "bin")
	cfg.SelfCheck = true
	cfg.Log = logWriter{t}
	v1alpha1 := driver == chaos.DriverV1alpha1
	if v1alpha1 {
		// Finding 7 (docs/reliability.md): the sidecar reports one lost answer per grant that
		// succeeds after it, and none lost before the access's deletion or in a restart during a
		// Secret refresh; the accounts those made are reported as known gaps, not violations,
		// until it reports every one. Delete this line then.
		cfg.KnownGaps = []string{chaos.CheckUnreportedLeak}
	}
	for _, b := range append([]string{"cosi-controller", "cosi-sidecar", "kube-controller-manager"}, binaries...) {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, b)); err != nil {
			t.Fatalf("%s is missing from bin/: run make build (and make kube-binaries versitygw): %v", b, err)
		}
	}
	// At most 8 minutes, and ending before go test's timeout (10 minutes for the package by
	// default), so that a run that is too slow fails with its report rather than a panic.
	budget := 8 * time.Minute
	if deadline, ok := t.Deadline(); ok {
		budget = min(budget, time.Until(deadline)-time.Minute)
	}
	ctx, cancel := context.WithTimeout(t.Context(), budget)
	defer cancel()
	res, err := chaos.Run(ctx, cfg)
	if res != nil {
		var out strings.Builder
		res.Print(&out)
		t.Log("\n" + out.String())
		t.Log(res.Summary())
	}
	if err != nil {
		t.Fatalf("the run failed (seed %d): %v", cfg.Seed, err)
	}
	if !res.Converged || len(res.Violations) > 0 {
		t.Fatalf("seed %d: %d violations; replay with COSI_CHAOS_SEED=%d or bin/cosi-chaos --driver %s --seed %d -n %d",
			cfg.Seed, len(res.Violations), cfg.Seed, driver, cfg.Seed, cfg.Claims)
	}
	if len(res.KnownGaps) > 0 {
		t.Logf("KNOWN GAP (finding 7, docs/reliability.md): %d buckets hold accounts leaked without a report",
			len(res.KnownGaps))
	}
	// A suite whose faults did not fire cannot fail.
	kinds := []string{
		"kill -9 cosi-controller", "kill -9 cosi-sidecar", "kill -9 cosi-driver-", "crash etcd",
		"crash kube-apiserver", "kill -9 cosi-sidecar inside", "kill -9 " + binaries[0] + " inside",
		"driver error Unavailable", "driver error DeadlineExceeded", "driver error Aborted",
		"driver error ResourceExhausted", "driver error Canceled", "driver call slower than",
	}
	if v1alpha1 {
		// The crash of issue 41: between the driver's answer and the sidecar's record of it.
		kinds = append(kinds, "kill -9 cosi-sidecar inside DriverGrantBucketAccess (after the driver acted)")
	}
	for _, kind := range kinds {
		n := 0
		for k, v := range res.Faults {
			if strings.HasPrefix(k, kind) {
				n += v
			}
		}
		if n == 0 {
			t.Errorf("no fault %q was injected", kind)
		}
	}
	if len(res.SelfCheck) == 0 {
		t.Fatal("the self-check did not run")
	}
	if v1alpha1 {
		// A v1alpha1 driver cannot rotate; its accounts' leaks are audited instead.
		for _, check := range []string{chaos.CheckUnreportedLeak, chaos.CheckOrphanAccount, chaos.CheckStrayKey,
			chaos.CheckGrantRecord, chaos.ReportedLeaksTitle} {
			if !res.SelfCheck[check] {
				t.Errorf("the self-check planted nothing for %q", check)
			}
		}
		return
	}
	// Rotations ran, and the faults hit their calls.
	for _, m := range []string{"DriverRotateBucketAccessCredentials", "DriverRetireBucketAccessCredentials"} {
		for _, what := range []string{"answered OK", "injected errors"} {
			if res.Rotations[m+": "+what] == 0 {
				t.Errorf("%s: no calls %s", m, what)
			}
		}
		n := 0
		for k, v := range res.Faults {
			if strings.Contains(k, " inside "+m+" ") {
				n += v
			}
		}
		if n == 0 {
			t.Errorf("no kill inside %s", m)
		}
	}
	for _, check := range []string{chaos.CheckRotatedKey, chaos.CheckRotation, chaos.CheckGrantRecord} {
		if !res.SelfCheck[check] {
			t.Errorf("the self-check planted nothing for %q", check)
		}
	}
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// logWriter sends the run's progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
