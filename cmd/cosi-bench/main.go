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
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kube-cosi/cosi/internal/bench"
	"github.com/kube-cosi/cosi/internal/localenv"
	"github.com/kube-cosi/cosi/internal/version"
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
	flag.StringVar(&cfg.JSON, "json", "", "write the results as JSON to this file")
	version.AddFlag(flag.CommandLine)
	flag.Parse()
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "cosi-bench: -n: %q is not a positive number\n", s)
			os.Exit(2)
		}
		cfg.Sizes = append(cfg.Sizes, n)
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
