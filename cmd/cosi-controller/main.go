// Command cosi-controller is the COSI Controller: it binds BucketClaims to Buckets, hands
// BucketAccesses to the drivers' sidecars and orchestrates deletion.
package main

import (
	"flag"
	"os"
	"strings"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kube-cosi/cosi/internal/cmdutil"
	"github.com/kube-cosi/cosi/internal/cmdutil/serving"
	"github.com/kube-cosi/cosi/internal/cmdutil/version"
	"github.com/kube-cosi/cosi/internal/controller"
)

func main() {
	var opts controller.Options
	common := cmdutil.Register("log verbosity")
	flag.IntVar(&opts.Workers, "workers", 16, "objects of each kind reconciled at once")
	flag.BoolVar(&opts.LeaderElection, "leader-elect", true, "elect one leader among the controller replicas")
	flag.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", "",
		"namespace of the leader election Lease (default: the pod's namespace)")
	flag.Func("sidecar-lease-namespaces", "comma-separated namespaces, besides the controller's, where drivers' "+
		"sidecars elect their leader (drivers installed in a namespace of their own): their Leases tell whether a "+
		"driver is served", func(v string) error {
		for _, ns := range strings.Split(v, ",") {
			if ns = strings.TrimSpace(ns); ns != "" {
				opts.SidecarLeaseNamespaces = append(opts.SidecarLeaseNamespaces, ns)
			}
		}
		return nil
	})
	flag.StringVar(&opts.MetricsAddress, "metrics-bind-address", serving.DefaultMetricsAddress,
		`address of /metrics ("0" disables); loopback unless set, e.g. :8443 for Prometheus`)
	flag.BoolVar(&opts.MetricsSecure, "metrics-secure", false, "serve /metrics over HTTPS, only to bearer tokens "+
		"allowed to get the non-resource URL /metrics (TokenReview, SubjectAccessReview: bind the ServiceAccount "+
		"to system:auth-delegator)")
	flag.StringVar(&opts.HealthAddress, "health-probe-bind-address", serving.DefaultHealthAddress,
		`address of /healthz and /readyz ("0" disables); loopback unless set, e.g. :8081 for the kubelet's probes`)
	flag.StringVar(&opts.PprofAddress, serving.PprofFlag, "", serving.PprofUsage)
	version.AddFlag(flag.CommandLine)
	flag.Parse() // also --kubeconfig, registered by controller-runtime

	log := common.Logger()
	common.LimitMemory(log)
	cfg, err := common.KubeConfig("cosi-controller")
	if err != nil {
		log.Error(err, "no Kubernetes configuration")
		os.Exit(1)
	}
	if err := controller.Run(ctrl.SetupSignalHandler(), cfg, opts, log); err != nil {
		log.Error(err, "controller failed")
		os.Exit(1)
	}
}
