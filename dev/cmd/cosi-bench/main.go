// Command cosi-bench measures COSI's provisioning throughput, latency, API writes, driver calls and
// memory: the real cosi-controller, cosi-sidecar and cosi-driver-memory processes (from bin/)
// against a fresh kube-apiserver and etcd per run. See docs/benchmark.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kube-cosi/cosi/dev/bench"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/internal/cmdutil/version"
)

func main() {
	root, err := localenv.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cosi-bench: run from the repository:", err)
		os.Exit(2)
	}
	cfg := bench.Config{RepoRoot: root, Log: os.Stderr}
	sizes := flag.String("n", "100,500,2000", "numbers of claims (and accesses) per throughput measurement")
	flag.StringVar(
		&cfg.BinDir,
		"bin",
		filepath.Join(root, "bin"),
		"directory with the COSI binaries, kube-apiserver and etcd",
	)
	flag.IntVar(&cfg.Runs, "runs", 3, "repetitions of every measurement")
	flag.IntVar(&cfg.Writers, "writers", 8, "concurrent writers creating and deleting objects")
	flag.IntVar(&cfg.Workers, "workers", 16, "reconcile workers of controller and sidecar")
	flag.IntVar(&cfg.Single, "single", 20, "single claims created one at a time for the latency figures")
	flag.IntVar(&cfg.RawObjects, "raw", 1000, "objects for the API server's raw ceiling")
	flag.IntVar(
		&cfg.RestartSize,
		"restart",
		500,
		"claims and accesses provisioned across restarts of controller and sidecar (0 skips)",
	)
	flag.IntVar(
		&cfg.NamespaceDeletionSize,
		"nsdelete",
		500,
		"claims, with one access each, deleted all at once as a namespace's deletion does (0 skips)",
	)
	flag.IntVar(&cfg.RSSClaims, "rss", 10000, "claims (Buckets) provisioned before measuring memory (0 skips)")
	scale := flag.String("scale", "",
		"sizes the scale phase reaches in turn, e.g. 3000,10000,20000: claims with one access each, kept (empty skips)")
	flag.DurationVar(&cfg.ScaleQuiet, "scale-quiet", 10*time.Second,
		"quiet time at each scale size in which reconciles and requests are counted")
	flag.StringVar(&cfg.Profiles, "profiles", "",
		"directory for the Go profiles of controller and sidecar in the scale phase (heap when quiet and after "+
			"the restart, CPU during the catch-up; empty: none)")
	flag.DurationVar(&cfg.ProfileCPU, "profile-cpu", 20*time.Second,
		"length of the CPU profile taken from each restart's start (with -profiles; longer than the catch-up "+
			"to cover it whole)")
	flag.StringVar(&cfg.RestartMemoryLimit, "restart-memlimit", "",
		"GOMEMLIMIT (e.g. 400MiB) of controller and sidecar in one more restart at each scale size (empty: none)")
	flag.DurationVar(&cfg.SecretCheckInterval, "secret-check-interval", 0,
		"the sidecar's --secret-check-interval (0 leaves its default, 10m); the checks are N/interval writes "+
			"per second: raise it with -scale sizes of tens of thousands, as an admin would (docs/install.md)")
	flag.StringVar(&cfg.CompareBinDir, "restart-compare", "",
		"directory with other builds of cosi-controller and cosi-sidecar: at each scale size, restarts alternated "+
			"between those and -bin's, their catch-ups compared on the same objects (empty: none)")
	flag.IntVar(&cfg.ComparePairs, "restart-compare-pairs", 2,
		"pairs of restarts with -restart-compare, in turn in either order (A B B A ...)")
	flag.StringVar(&cfg.ReferenceDir, "reference", "",
		"directory with the reference implementation's controller, sidecar, no-op driver and CRDs "+
			"(hack/reference/build.sh): compare this project's and the reference's side by side, in alternating "+
			"runs on fresh API servers, and nothing else (-n then defaults to 500)")
	featureGates := flag.String("apiserver-feature-gates", "",
		"the API server's --feature-gates, e.g. DetectCacheInconsistency=false (its periodic check of each watch "+
			"cache against etcd, which costs a list of the resource every 5-7.5 minutes: it lands at random in a "+
			"catch-up); empty: its defaults, as a cluster runs it")
	flag.StringVar(&cfg.JSON, "json", "", "write the results as JSON to this file")
	version.AddFlag(flag.CommandLine)
	flag.Parse()
	if cfg.ReferenceDir != "" && !flagSet("n") {
		*sizes = "500"
	}
	var err2 error
	if cfg.Sizes, err2 = parseSizes("-n", *sizes); err2 == nil {
		cfg.ScaleSizes, err2 = parseSizes("-scale", *scale)
	}
	if err2 == nil && !slices.IsSorted(cfg.ScaleSizes) {
		err2 = fmt.Errorf("-scale: %q: the sizes are reached in turn, smallest first", *scale)
	}
	if err2 != nil {
		fmt.Fprintln(os.Stderr, "cosi-bench:", err2)
		os.Exit(2)
	}
	if *featureGates != "" {
		cfg.APIServerFeatureGates = strings.Split(*featureGates, ",")
	}
	// The benchmark's own watches log nothing worth reading; progress goes to standard error.
	ctrl.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := bench.Run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cosi-bench:", err)
		os.Exit(1)
	}
}

// flagSet says whether the flag name was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// parseSizes parses a comma-separated list of positive numbers; an empty list is none.
func parseSizes(flagName, list string) ([]int, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	var out []int
	for _, s := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s: %q is not a positive number", flagName, s)
		}
		out = append(out, n)
	}
	return out, nil
}
