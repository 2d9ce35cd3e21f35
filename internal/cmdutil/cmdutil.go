// Package cmdutil holds what the cosi-controller and cosi-sidecar commands share: their logging
// and Kubernetes client flags.
package cmdutil

import (
	"flag"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Flags are the shared flags. Register them before flag.Parse.
type Flags struct {
	qps         float64
	burst       int
	verbosity   int
	memoryRatio float64
	gcPercent   int
}

// Register registers the shared flags on the command line.
func Register(verbosityHelp string) *Flags {
	f := &Flags{}
	flag.Float64Var(&f.qps, "kube-api-qps", 500, "queries per second to the API server (client-side limit)")
	flag.IntVar(&f.burst, "kube-api-burst", 1000, "burst of queries to the API server (client-side limit)")
	flag.IntVar(&f.verbosity, "v", 0, verbosityHelp)
	flag.Float64Var(&f.memoryRatio, "memory-limit-ratio", DefaultMemoryLimitRatio,
		"share of the container's memory limit (cgroup) the Go runtime keeps its memory under; 0: no limit; "+
			"GOMEMLIMIT, when set, takes precedence")
	flag.IntVar(&f.gcPercent, "gc-percent", DefaultGCPercent,
		"how far the Go heap grows past what is live before the garbage collector runs, in percent (Go's "+
			"GOGC); lower keeps less memory for more CPU; GOGC, when set, takes precedence")
	return f
}

// Logger returns the JSON logger on standard error at the chosen verbosity, and makes it the
// logger of controller-runtime and client-go.
func (f *Flags) Logger() logr.Logger {
	log := logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.Level(-f.verbosity)}))
	ctrl.SetLogger(log)
	klog.SetLogger(log)
	return log
}

// LimitMemory sets the garbage collector's target (--gc-percent, SetGCPercent) and the Go memory
// limit from the container's with --memory-limit-ratio (SetMemoryLimit).
func (f *Flags) LimitMemory(log logr.Logger) int64 {
	SetGCPercent(f.gcPercent, log)
	return SetMemoryLimit(f.memoryRatio, log)
}

// DefaultGCPercent is the garbage collector's target of controller and sidecar: the heap grows to
// 1.5 times what is live before a collection, where Go's default lets it double. Nearly all that
// is live is the caches' objects, which stay, so a collection finds little to free; at 30,000
// object sets a restart's catch-up took 2-3 % more CPU than with Go's default and left 26-30 %
// less RSS (docs/benchmark.md, "Memory").
const DefaultGCPercent = 50

// SetGCPercent sets the garbage collector's target percent (debug.SetGCPercent) unless GOGC is
// set (the operator chose) or percent is 0 or less (Go's default).
func SetGCPercent(percent int, log logr.Logger) {
	if os.Getenv("GOGC") != "" || percent <= 0 {
		return
	}
	debug.SetGCPercent(percent)
	log.V(1).Info("garbage collector target set", "percent", percent)
}

// KubeConfig returns the Kubernetes client configuration (--kubeconfig, in-cluster, or
// $KUBECONFIG) with the chosen limits.
func (f *Flags) KubeConfig(userAgent string) (*rest.Config, error) {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = float32(f.qps), f.burst
	cfg.UserAgent = userAgent
	return cfg, nil
}

// DefaultMemoryLimitRatio is the share of the container's memory limit the Go runtime keeps its
// memory under (SetMemoryLimit): the rest is for what the runtime does not count (thread stacks
// outside the heap, the binary's text) and a margin before the kernel kills the process.
const DefaultMemoryLimitRatio = 0.9

// cgroupMemoryFiles are where a container sees its memory limit: cgroup v2, then v1.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// SetMemoryLimit sets the Go runtime's soft memory limit to ratio × the container's memory limit,
// so that the garbage collector works harder as the process nears the limit instead of letting
// its heap double past it (a start lists every object of the cluster at once). It does nothing
// when GOMEMLIMIT is set (the operator chose), ratio is 0 or less, or there is no limit. It
// returns the limit set (0: none) and logs it.
func SetMemoryLimit(ratio float64, log logr.Logger) int64 {
	return setMemoryLimit(ratio, cgroupMemoryFiles, log)
}

func setMemoryLimit(ratio float64, files []string, log logr.Logger) int64 {
	if os.Getenv("GOMEMLIMIT") != "" || ratio <= 0 {
		return 0
	}
	container, file := containerMemoryLimit(files)
	if container <= 0 {
		return 0
	}
	limit := int64(float64(container) * min(ratio, 1))
	debug.SetMemoryLimit(limit)
	log.Info("Go memory limit set from the container's", "limitBytes", limit, "containerLimitBytes", container,
		"ratio", ratio, "from", file)
	return limit
}

// containerMemoryLimit returns the first memory limit found in files, and the file; 0 when none
// sets one ("max" in cgroup v2, a value near the largest int64 in v1).
func containerMemoryLimit(files []string) (int64, string) {
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(data))
		if v == "max" {
			return 0, f
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n >= 1<<62 {
			return 0, f
		}
		return n, f
	}
	return 0, ""
}
