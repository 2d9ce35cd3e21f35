// Command cosi-sidecar is the COSI provisioner sidecar. It runs next to one COSI driver and
// reconciles that driver's Buckets and BucketAccesses.
package main

import (
	"flag"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kube-cosi/cosi/internal/cmdutil"
	"github.com/kube-cosi/cosi/internal/cmdutil/serving"
	"github.com/kube-cosi/cosi/internal/cmdutil/version"
	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
)

func main() {
	var opts sidecar.Options
	common := cmdutil.Register("log verbosity: 2 logs every driver call, 5 also requests and responses (secrets stripped)")
	flag.StringVar(&opts.DriverEndpoint, "driver-endpoint", os.Getenv(driver.EndpointEnv),
		"the driver's socket, unix:///path/to/driver.sock (default $COSI_ENDPOINT)")
	flag.DurationVar(&opts.DriverTimeout, "driver-timeout", time.Minute,
		"timeout of each driver call; at most "+sidecar.MaxDriverTimeout.String()+", the deadline of a reconcile")
	flag.DurationVar(&opts.DriverStartTimeout, "driver-start-timeout", 2*time.Minute,
		"how long to wait for the driver to answer at start-up")
	flag.IntVar(&opts.Workers, "workers", 16, "objects of each kind reconciled at once")
	flag.DurationVar(&opts.SecretCheckInterval, "secret-check-interval", sidecar.DefaultSecretCheckInterval,
		"how often the Secrets of each provisioned access are checked, and written again when lost "+
			"(the sidecar cannot watch Secrets)")
	flag.DurationVar(&opts.RotationGracePeriod, "rotation-grace-period", sidecar.DefaultRotationGracePeriod,
		"how long a rotated credential keeps working once the new one is in every Secret of its access, "+
			"so that workloads re-read their Secret (docs/sidecar.md, \"Credential rotation\")")
	flag.DurationVar(&opts.UsageInterval, "usage-interval", sidecar.DefaultUsageInterval,
		"how often each bucket's usage is read from a driver that can report it (the BUCKET_USAGE capability: one "+
			"driver call per bucket, and a Bucket status write when it changed); 0 turns it off")
	flag.BoolVar(&opts.LeaderElection, "leader-elect", true, "elect one leader among the sidecars of this driver")
	flag.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", "",
		"namespace of the leader election Lease (default: the pod's namespace)")
	flag.StringVar(&opts.MetricsAddress, "metrics-bind-address", serving.DefaultMetricsAddress,
		`address of /metrics ("0" disables); loopback unless set, e.g. :8443 for Prometheus`)
	flag.BoolVar(&opts.MetricsSecure, "metrics-secure", false, "serve /metrics over HTTPS, only to bearer tokens "+
		"allowed to get the non-resource URL /metrics (TokenReview, SubjectAccessReview: bind the ServiceAccount "+
		"to system:auth-delegator)")
	flag.StringVar(&opts.DriverMetricsURL, "driver-metrics-url", "",
		"the driver's own /metrics on the Pod's loopback, e.g. http://127.0.0.1:8082/metrics, relayed at "+
			serving.DriverMetricsPath+" of the metrics server, behind its authentication (empty: none)")
	flag.StringVar(&opts.HealthAddress, "health-probe-bind-address", serving.DefaultHealthAddress,
		`address of /healthz and /readyz ("0" disables); loopback unless set, e.g. :8081 for the kubelet's probes`)
	flag.StringVar(&opts.PprofAddress, serving.PprofFlag, "", serving.PprofUsage)
	flag.StringVar(&opts.DriverProtocol, "driver-protocol", "",
		`the driver's protocol, "v1alpha2" or "v1alpha1" (default: detected at start-up; docs/v1alpha1-drivers.md)`)
	flag.Func(
		"v1alpha1-protocols",
		`object protocols a v1alpha1 driver serves, comma-separated S3, Azure, GCS (default S3): `+
			`v1alpha1 drivers do not report them`,
		func(s string) (err error) { opts.V1alpha1Protocols, err = sidecar.ParseProtocols(s); return err },
	)
	flag.StringVar(&opts.V1alpha1S3Endpoint, "v1alpha1-s3-endpoint", "",
		"S3 endpoint URL (http or https) of a v1alpha1 driver's grants that return none; a BucketAccessClass's "+
			v1alpha1.ParameterS3Endpoint+" wins (docs/v1alpha1-drivers.md)")
	flag.StringVar(&opts.V1alpha1S3Region, "v1alpha1-s3-region", "",
		"S3 region of a v1alpha1 driver's grants that return none; a BucketAccessClass's "+
			v1alpha1.ParameterS3Region+" wins")
	version.AddFlag(flag.CommandLine)
	flag.Parse() // also --kubeconfig, registered by controller-runtime

	log := common.Logger()
	common.LimitMemory(log)
	cfg, err := common.KubeConfig("cosi-sidecar")
	if err != nil {
		log.Error(err, "no Kubernetes configuration")
		os.Exit(1)
	}
	if err := sidecar.Run(ctrl.SetupSignalHandler(), cfg, opts, log); err != nil {
		log.Error(err, "sidecar failed")
		os.Exit(1)
	}
}
