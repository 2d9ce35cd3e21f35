// Package sidecar is the COSI provisioner sidecar: it runs next to one driver and reconciles that
// driver's Buckets and BucketAccesses by calling the driver over its Unix socket.
package sidecar

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/cache/index"
	"github.com/kube-cosi/cosi/internal/cache/jsonwatch"
	"github.com/kube-cosi/cosi/internal/cache/slim"
	"github.com/kube-cosi/cosi/internal/cmdutil/serving"
	"github.com/kube-cosi/cosi/internal/kube/requeue"
	"github.com/kube-cosi/cosi/internal/kube/scheme"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Leader election Leases live in the component's own namespace: a Role there, not a ClusterRole. The
// election records "became leader" and "stopped leading" as core/v1 Events of the Lease there.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch,namespace=cosi-system
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch,namespace=cosi-system

// Options configure the sidecar.
type Options struct {
	// DriverEndpoint is the driver's socket, unix:///path/to/driver.sock.
	DriverEndpoint string
	// DriverTimeout bounds each driver call (0: one minute; at most MaxDriverTimeout, or Run
	// refuses it); DriverStartTimeout bounds the wait for the driver to answer at start-up.
	DriverTimeout, DriverStartTimeout time.Duration
	// Workers is the number of objects of each kind reconciled at once.
	Workers int
	// SecretCheckInterval is how often the Secrets of a provisioned access are checked (and
	// written again when lost). The sidecar cannot watch Secrets: it may not read them.
	SecretCheckInterval time.Duration
	// LeaderElection makes the sidecars of one driver elect one leader (a Lease named after the
	// driver, in LeaderElectionNamespace).
	LeaderElection          bool
	LeaderElectionNamespace string
	// GrantNamespace holds the grant records (record.go): the sidecar's own namespace, where
	// tenants cannot write. Empty: LeaderElectionNamespace, else the Pod's namespace, else
	// DefaultGrantNamespace.
	GrantNamespace string
	// MetricsAddress and HealthAddress serve /metrics and /healthz, /readyz ("0" disables, ""
	// is loopback: serving.DefaultMetricsAddress, DefaultHealthAddress); MetricsSecure serves
	// /metrics over HTTPS to authorized clients only (serving.Metrics).
	MetricsAddress, HealthAddress string
	MetricsSecure                 bool
	// DriverMetricsURL, when set, is the driver's own /metrics on the Pod's loopback
	// (http://127.0.0.1:<port>/metrics), which the metrics server relays at
	// serving.DriverMetricsPath behind its own authentication.
	DriverMetricsURL string
	// PprofAddress serves the Go profiles (/debug/pprof); "" or "0" is off.
	PprofAddress string
	// SkipNameValidation allows several sidecars in one process (tests).
	SkipNameValidation bool
	// RotationGracePeriod is how long the credential a rotation replaced keeps working after the
	// new one is in every Secret of the access, so that workloads re-read their Secret (zero:
	// DefaultRotationGracePeriod).
	RotationGracePeriod time.Duration
	// UsageInterval is how often each provisioned Bucket's usage is asked of a driver that
	// advertises the BUCKET_USAGE capability (one DriverGetBucketUsage per Bucket, and a status
	// write when the figures changed); zero or negative: never. cosi-sidecar's default is
	// DefaultUsageInterval.
	UsageInterval time.Duration
	// DriverProtocol forces the driver protocol (driverclient.ProtocolV1alpha2 or ProtocolV1alpha1);
	// empty detects it. V1alpha1Protocols are the object protocols a v1alpha1 driver serves.
	DriverProtocol    string
	V1alpha1Protocols []cosiproto.ObjectProtocol_Type
	// V1alpha1S3Endpoint and V1alpha1S3Region are the S3 endpoint and region of a v1alpha1
	// driver's grants that carry none, unless the class says otherwise (v1alpha1.Options).
	V1alpha1S3Endpoint, V1alpha1S3Region string
}

// Run connects to the driver, waits until it answers, and reconciles until ctx is done.
func Run(ctx context.Context, cfg *rest.Config, opts Options, log logr.Logger) error {
	if err := opts.validate(); err != nil {
		return err
	}
	drv, err := driverclient.New(opts.DriverEndpoint, driverclient.Options{
		Logger: log.WithName("driver"), Registerer: metrics.Registry, CallTimeout: opts.DriverTimeout,
		Protocol: opts.DriverProtocol, V1alpha1: opts.v1alpha1(),
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := drv.Close(); err != nil {
			log.Error(err, "closing the connection to the driver")
		}
	}()

	log.Info("waiting for the driver", "endpoint", opts.DriverEndpoint, "timeout", opts.DriverStartTimeout)
	probeCtx, cancel := context.WithTimeout(ctx, opts.DriverStartTimeout)
	info, err := drv.Probe(probeCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("driver at %s: %w", opts.DriverEndpoint, err)
	}
	log = log.WithValues("driverName", info.GetName())
	log.Info("driver ready", "protocols", info.GetSupportedProtocols(), "driverProtocol", drv.Protocol())

	store := grantStore{namespace: grantNamespace(opts), driver: grantDriverLabel(info.GetName())}
	log.Info("grant records", "namespace", store.namespace, "label", cosiapi.LabelGrantDriver+"="+store.driver)
	mgr, err := newManager(cfg, opts, info, store, log)
	if err != nil {
		return err
	}
	if err := setup(ctx, mgr, drv, info, store, opts); err != nil {
		return err
	}
	// Readiness follows the driver: a sidecar whose driver stops answering is not ready.
	if err := mgr.AddReadyzCheck("driver", func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 5*time.Second)
		defer cancel()
		_, err := drv.DriverGetInfo(ctx, &cosiproto.DriverGetInfoRequest{})
		return err
	}); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

func newManager(
	cfg *rest.Config, opts Options, info *cosiproto.DriverGetInfoResponse, store grantStore, log logr.Logger,
) (ctrl.Manager, error) {
	// COSI's kinds decoded in one pass (internal/cache/jsonwatch).
	cacheOpts := CacheOptions(store.namespace, store.driver)
	if err := jsonwatch.Use(cfg, &cacheOpts); err != nil {
		return nil, err
	}
	metrics := serving.Metrics(opts.MetricsAddress, opts.MetricsSecure)
	if opts.DriverMetricsURL != "" {
		relay, err := serving.RelayMetrics(opts.DriverMetricsURL)
		if err != nil {
			return nil, err
		}
		metrics.ExtraHandlers = map[string]http.Handler{serving.DriverMetricsPath: relay}
	}
	return ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme.New(),
		MapperProvider:                scheme.NewMapper,
		Logger:                        log,
		Cache:                         cacheOpts,
		GracefulShutdownTimeout:       ptr.To(shutdownTimeout),
		Metrics:                       metrics,
		HealthProbeBindAddress:        serving.Health(opts.HealthAddress),
		PprofBindAddress:              opts.PprofAddress,
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              LeaseName(info.GetName()),
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		Controller:                    ctrlConfig(opts),
	})
}

// CacheOptions are the options of the sidecar's cache, its grant records in grantNamespace
// labeled with driverLabel (the driver's LabelGrantDriver value): no object's managedFields, the
// strings objects repeat shared (internal/cache/slim). No Secret is cached: the sidecar may not read
// Secrets. Of ConfigMaps, only the driver's grant records, and of each only what is read from the
// cache (record_cache.go).
func CacheOptions(grantNamespace, driverLabel string) cache.Options {
	return cache.Options{
		DefaultTransform: slim.Transform(),
		ByObject: map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {
			Namespaces: map[string]cache.Config{grantNamespace: {}},
			Label:      labels.SelectorFromSet(labels.Set{cosiapi.LabelGrantDriver: driverLabel}),
			Transform:  slim.Transform(compactGrantRecord),
		}},
	}
}

func ctrlConfig(opts Options) config.Controller {
	return config.Controller{
		SkipNameValidation: ptr.To(opts.SkipNameValidation),
		// The priority queue of controller-runtime v0.24 can deadlock on shutdown
		// (kubernetes-sigs/controller-runtime#3538, fixed in v0.25, which needs Kubernetes 0.37
		// libraries): workers then never finish and the process does not stop on SIGTERM.
		UsePriorityQueue: ptr.To(false),
	}
}

func setup(
	ctx context.Context, mgr ctrl.Manager, drv *driverclient.Client, info *cosiproto.DriverGetInfoResponse,
	store grantStore, opts Options,
) error {
	if err := index.Register(
		ctx, mgr.GetCache(), GrantsByBucket, index.AccessesByBucket,
	); err != nil {
		return err
	}
	workers := max(opts.Workers, 1)
	copts := controller.Options{MaxConcurrentReconciles: workers, RateLimiter: requeue.RateLimiter()}
	recorder := mgr.GetEventRecorder("cosi-sidecar")
	// Hashed index lookups read the informers' indexers (index.WithInformers).
	c, reader := index.WithInformers(mgr.GetClient(), mgr.GetCache()), mgr.GetAPIReader()
	store.client, store.reader = c, reader
	grants := &grantBook{store: store, driver: drv, client: c, reader: reader, events: recorder}
	if err := (&GrantReconciler{Grants: grants}).SetupWithManager(mgr, copts); err != nil {
		return err
	}
	checks := opts.SecretCheckInterval
	if checks <= 0 {
		checks = DefaultSecretCheckInterval
	}
	buckets := &BucketReconciler{
		Client: c, APIReader: reader, Driver: drv, Info: info, Recorder: recorder, Grants: grants, RefreshInterval: checks,
		UsageInterval: opts.UsageInterval,
		// Only grants recorded by an earlier version look accesses up by UID (migrateLegacyGrant).
		AccessesByUID: index.NewLazy(mgr.GetCache(), index.AccessesByUID),
	}
	if err := buckets.SetupWithManager(mgr, copts); err != nil {
		return err
	}
	accesses := &BucketAccessReconciler{
		Client: c, APIReader: reader, Driver: drv, Info: info, Recorder: recorder, Grants: grants,
		SecretCheckInterval: checks, RotationGracePeriod: opts.RotationGracePeriod,
	}
	if accesses.RotationGracePeriod <= 0 {
		accesses.RotationGracePeriod = DefaultRotationGracePeriod
	}
	if err := accesses.SetupWithManager(mgr, copts); err != nil {
		return err
	}
	return mgr.AddHealthzCheck("ping", healthz.Ping)
}

// shutdownTimeout is how long the manager waits, on SIGTERM, for reconciles in flight: they may
// run for operationTimeout after the shutdown began (finishOnShutdown), so that what a driver did
// is recorded. A Pod's terminationGracePeriodSeconds must be longer (the charts and config/ give
// 150 seconds; test/install checks it against ShutdownTimeout).
const shutdownTimeout = operationTimeout + 10*time.Second

// ShutdownTimeout is shutdownTimeout, for the checks of the Deployments' grace periods.
const ShutdownTimeout = shutdownTimeout

// DefaultGrantNamespace holds the grant records when neither the options nor the Pod name a
// namespace: the namespace of the generated Role (config/rbac/sidecar).
const DefaultGrantNamespace = "cosi-system"

// grantNamespace is where the grant records are: Options.GrantNamespace, else the leader election
// namespace, else the Pod's namespace (as controller-runtime finds it for leader election), else
// DefaultGrantNamespace.
func grantNamespace(opts Options) string {
	switch {
	case opts.GrantNamespace != "":
		return opts.GrantNamespace
	case opts.LeaderElectionNamespace != "":
		return opts.LeaderElectionNamespace
	}
	if ns, err := os.ReadFile(inClusterNamespaceFile); err == nil && strings.TrimSpace(string(ns)) != "" {
		return strings.TrimSpace(string(ns))
	}
	return DefaultGrantNamespace
}

// inClusterNamespaceFile names the Pod's namespace (the ServiceAccount token volume).
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// MaxDriverTimeout is the longest DriverTimeout (--driver-timeout): every driver call runs inside
// a reconcile, whose deadline is operationTimeout, and a longer call would be cut there. The
// deadline is not derived from the flag, because the shutdown waits for it and a Pod's
// terminationGracePeriodSeconds, fixed in the Deployment, must cover that wait.
const MaxDriverTimeout = operationTimeout

// validate refuses options that would not be honoured.
func (o Options) validate() error {
	if o.DriverTimeout < 0 || o.DriverTimeout > MaxDriverTimeout {
		return fmt.Errorf("--driver-timeout %v: must be at most %v (0 means one minute): every driver call runs "+
			"inside a reconcile, whose deadline is %v, and would be cut there", o.DriverTimeout, MaxDriverTimeout,
			operationTimeout)
	}
	return o.v1alpha1().Validate()
}

// v1alpha1 are the options of the v1alpha1 adapter, used when the driver speaks v1alpha1.
func (o Options) v1alpha1() v1alpha1.Options {
	return v1alpha1.Options{
		Protocols: o.V1alpha1Protocols, S3Endpoint: o.V1alpha1S3Endpoint, S3Region: o.V1alpha1S3Region,
	}
}

// DefaultSecretCheckInterval is how often the Secrets of each provisioned access are checked
// unless configured otherwise: one no-op patch per Secret per interval.
const DefaultSecretCheckInterval = 10 * time.Minute

// DefaultRotationGracePeriod is how long a rotated credential keeps working after its successor
// is in every Secret of the access, unless configured otherwise (--rotation-grace-period).
const DefaultRotationGracePeriod = 5 * time.Minute

// LeaseName is the leader election Lease of a driver's sidecars: one per driver name, so that the
// replicas of one driver form one group with one leader (KEP-1979 "COSI Driver").
func LeaseName(driverName string) string {
	return strings.ToLower(driverName) + "-cosi-sidecar"
}
