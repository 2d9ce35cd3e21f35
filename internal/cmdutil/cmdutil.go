// Package cmdutil holds what the cosi-controller and cosi-sidecar commands share: their logging
// and Kubernetes client flags.
package cmdutil

import (
	"flag"
	"log/slog"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Flags are the shared flags. Register them before flag.Parse.
type Flags struct {
	qps       float64
	burst     int
	verbosity int
}

// Register registers the shared flags on the command line.
func Register(verbosityHelp string) *Flags {
	f := &Flags{}
	flag.Float64Var(&f.qps, "kube-api-qps", 500, "queries per second to the API server (client-side limit)")
	flag.IntVar(&f.burst, "kube-api-burst", 1000, "burst of queries to the API server (client-side limit)")
	flag.IntVar(&f.verbosity, "v", 0, verbosityHelp)
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
