// Command cosi-chaos runs COSI's fault suite: a seeded workload of BucketClaims and BucketAccesses
// against the real cosi-controller, cosi-sidecar and a driver (cosi-driver-memory by default), a
// kube-apiserver and an etcd, while it kills processes, crashes the control plane and makes the
// driver fail and stall; then it waits for convergence and audits what leaked, was lost or is
// stuck. It exits 1 when the audit finds a violation. See docs/reliability.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kube-cosi/cosi/dev/chaos"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/internal/cmdutil/version"
)

func main() {
	root, err := localenv.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cosi-chaos: run from the repository:", err)
		os.Exit(2)
	}
	cfg := chaos.DefaultConfig(200)
	cfg.RepoRoot, cfg.Log = root, os.Stderr
	flag.StringVar(&cfg.Driver, "driver", chaos.DriverMemory, "the driver: memory (its state file is the backend), "+
		"s3 (against Versity's S3 gateway and IAM service, behind a fault proxy) or v1alpha1 (the reference COSI "+
		"v1alpha1 driver on Versity, behind a fault proxy that makes it name every account itself)")
	flag.Int64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the workload and the faults; the same seed replays the same plan")
	flag.IntVar(&cfg.Claims, "n", cfg.Claims, "BucketClaims (about as many BucketAccesses come with them)")
	flag.IntVar(&cfg.PerNamespace, "per-namespace", cfg.PerNamespace, "claims per namespace")
	flag.IntVar(&cfg.Writers, "writers", cfg.Writers, "namespaces worked on at once")
	flag.StringVar(&cfg.BinDir, "bin", filepath.Join(root, "bin"),
		"directory with the COSI binaries, kube-apiserver, etcd and kube-controller-manager")
	flag.StringVar(&cfg.Dir, "dir", "", "directory for the run's data and logs (default: a temporary one, "+
		"removed after a run without violations)")
	flag.BoolVar(&cfg.Faults.Kills, "kills", cfg.Faults.Kills, "kill -9 controller, sidecar and driver at random moments")
	flag.BoolVar(&cfg.Faults.Pauses, "pauses", cfg.Faults.Pauses,
		"kill -9 the driver or the sidecar while a driver call is held before or after the driver acts")
	flag.BoolVar(&cfg.Faults.ControlPlane, "control-plane", cfg.Faults.ControlPlane, "crash etcd and kube-apiserver")
	flag.Float64Var(&cfg.Faults.ErrorRate, "error-rate", cfg.Faults.ErrorRate,
		"share of driver calls failing with a retryable code, half of them after the driver acted")
	flag.Float64Var(&cfg.Faults.SlowRate, "slow-rate", cfg.Faults.SlowRate,
		"share of driver calls held beyond --driver-timeout before the driver acts")
	flag.Float64Var(&cfg.Faults.LateRate, "late-rate", cfg.Faults.LateRate,
		"share of driver calls held beyond --driver-timeout that the driver carries out after the sidecar gave up")
	flag.DurationVar(&cfg.Faults.Interval, "interval", cfg.Faults.Interval, "mean time between process faults")
	flag.DurationVar(&cfg.DriverTimeout, "driver-timeout", cfg.DriverTimeout, "the sidecar's --driver-timeout")
	flag.BoolVar(&cfg.NewKeyPerGrant, "new-key-per-grant", cfg.NewKeyPerGrant,
		"the driver issues a new key on every grant, keeping the previous one valid (as IAM back-ends)")
	flag.DurationVar(&cfg.RotationPeriod, "rotation-period", cfg.RotationPeriod,
		"rotation period of the BucketAccessClass whose accesses' credentials rotate periodically")
	flag.DurationVar(&cfg.RotationGracePeriod, "rotation-grace-period", cfg.RotationGracePeriod,
		"the sidecar's --rotation-grace-period: how long a rotated key keeps working")
	flag.DurationVar(&cfg.ConvergeTimeout, "converge-timeout", cfg.ConvergeTimeout,
		"how long to wait for convergence once the faults stopped")
	flag.BoolVar(&cfg.SelfCheck, "self-check", false,
		"after a run without violations, plant one of each kind and check that the audit finds each")
	flag.Func("known-gap", "a check whose findings come from a known gap in COSI (docs/reliability.md): reported "+
		"apart, not as violations (repeatable)", func(check string) error {
		cfg.KnownGaps = append(cfg.KnownGaps, check)
		return nil
	})
	version.AddFlag(flag.CommandLine)
	flag.Parse()

	// The harness's own clients log nothing worth reading; progress goes to standard error.
	ctrl.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := chaos.Run(ctx, cfg)
	if res != nil {
		res.Print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cosi-chaos:", err)
		os.Exit(2)
	}
	if len(res.Violations) > 0 {
		os.Exit(1)
	}
}
