// Package controller is the COSI Controller: it binds BucketClaims to Buckets, validates
// BucketAccesses against their classes and hands them to the driver's sidecar, and orchestrates
// deletion (KEP-1979 "Controller overview" and the controller steps of "Control Flows").
package controller

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/cache/index"
	"github.com/kube-cosi/cosi/internal/cache/jsonwatch"
	"github.com/kube-cosi/cosi/internal/cache/slim"
	"github.com/kube-cosi/cosi/internal/cmdutil/serving"
	"github.com/kube-cosi/cosi/internal/kube/requeue"
	"github.com/kube-cosi/cosi/internal/kube/scheme"
)

// Leader election Leases live in the component's own namespace: a Role there, not a ClusterRole. The
// election records "became leader" and "stopped leading" as core/v1 Events of the Lease there.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch,namespace=cosi-system
//
// The sidecars' Leases may be in namespaces of their own (Options.SidecarLeaseNamespaces): the
// controller reads them by name there, to tell whether a driver is served (drivers.go).
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch,namespace=cosi-system
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Options configure the controller.
type Options struct {
	// Workers is the number of objects of each kind reconciled at once.
	Workers int
	// LeaderElection makes the controller replicas elect one leader (Lease "cosi-controller").
	LeaderElection          bool
	LeaderElectionNamespace string
	// MetricsAddress and HealthAddress serve /metrics and /healthz, /readyz ("0" disables, ""
	// is loopback: serving.DefaultMetricsAddress, DefaultHealthAddress); MetricsSecure serves
	// /metrics over HTTPS to authorized clients only (serving.Metrics).
	MetricsAddress, HealthAddress string
	MetricsSecure                 bool
	// PprofAddress serves the Go profiles (/debug/pprof); "" or "0" is off.
	PprofAddress string
	// SkipNameValidation allows several controllers in one process (tests).
	SkipNameValidation bool
	// DriverGrace is how long a new Bucket may wait for a sidecar before the controller checks
	// that one serves its driver (ReasonWaitingForDriver); 0 means DefaultDriverGrace.
	DriverGrace time.Duration
	// DriverRecheck is how often the controller looks again for a sidecar of a driver that none
	// serves; 0 means DefaultDriverRecheck.
	DriverRecheck time.Duration
	// SidecarLeaseNamespaces are the namespaces besides the controller's where drivers' sidecars
	// elect their leader (drivers installed in a namespace of their own): their Leases are looked
	// for there too. Leases elsewhere are not trusted: tenants may create Leases in their own
	// namespaces.
	SidecarLeaseNamespaces []string
}

// LeaseName is the leader election Lease of the controller.
const LeaseName = "cosi-controller"

// Run reconciles until ctx is done.
func Run(ctx context.Context, cfg *rest.Config, opts Options, log logr.Logger) error {
	mgr, err := newManager(cfg, opts, log)
	if err != nil {
		return err
	}
	if err := Setup(ctx, mgr, opts); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// newManager returns the controller's manager, before Setup.
func newManager(cfg *rest.Config, opts Options, log logr.Logger) (ctrl.Manager, error) {
	cacheOpts := CacheOptions()
	// COSI's kinds decoded in one pass (internal/cache/jsonwatch).
	if err := jsonwatch.Use(cfg, &cacheOpts); err != nil {
		return nil, err
	}
	return ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme.New(),
		MapperProvider:                scheme.NewMapper,
		Logger:                        log,
		Cache:                         cacheOpts,
		Metrics:                       serving.Metrics(opts.MetricsAddress, opts.MetricsSecure),
		HealthProbeBindAddress:        serving.Health(opts.HealthAddress),
		PprofBindAddress:              opts.PprofAddress,
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              LeaseName,
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		Controller: config.Controller{
			SkipNameValidation: ptr.To(opts.SkipNameValidation),
			// The priority queue of controller-runtime v0.24 can deadlock on shutdown
			// (kubernetes-sigs/controller-runtime#3538, fixed in v0.25, which needs Kubernetes 0.37
			// libraries): workers then never finish and the process does not stop on SIGTERM.
			UsePriorityQueue: ptr.To(false),
		},
	})
}

// CacheOptions are the options of the controller's cache: no object's managedFields, the strings
// and maps objects repeat shared (internal/cache/slim), and no Bucket's bucketInfo (unread).
func CacheOptions() cache.Options {
	return cache.Options{DefaultTransform: slim.Transform(unread)}
}

// unread drops from the controller's cached objects what it never reads: each Bucket's
// status.bucketInfo (the sidecar's: it writes it, and the Secrets from it), a few hundred bytes
// per Bucket. Nothing dropped is ever written back: the controller writes a Bucket only with
// patches of its metadata and spec computed from the cached copy, never its status, and reads
// from the API server (APIReader) get whole objects. TestControllerNeverReadsBucketInfo keeps it
// from starting to read what its cache no longer holds.
func unread(obj any) {
	if b, ok := obj.(*cosiapi.Bucket); ok {
		b.Status.BucketInfo = nil
	}
}

// Setup registers the indexes and reconcilers with a manager.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	_, _, err := setup(ctx, mgr, opts)
	return err
}

// setup is Setup; it returns the claim and access reconcilers (tests look at their waits).
func setup(ctx context.Context, mgr ctrl.Manager, opts Options) (*BucketClaimReconciler, *BucketAccessReconciler,
	error,
) {
	if err := index.Register(ctx, mgr.GetCache(), index.ClaimsByClass, index.ClaimsByExistingBucket,
		index.AccessesByClaim, index.AccessesByClass, index.AccessesByBucket); err != nil {
		return nil, nil, err
	}
	metrics := newMetrics()
	registerObjectMetrics(mgr.GetClient())
	copts := controller.Options{MaxConcurrentReconciles: max(opts.Workers, 1), RateLimiter: requeue.RateLimiter()}
	recorder := mgr.GetEventRecorder("cosi-controller")
	// Hashed index lookups read the informers' indexers (index.WithInformers).
	c, reader := index.WithInformers(mgr.GetClient(), mgr.GetCache()), mgr.GetAPIReader()
	grace := opts.DriverGrace
	if grace <= 0 {
		grace = DefaultDriverGrace
	}
	recheck := opts.DriverRecheck
	if recheck <= 0 {
		recheck = DefaultDriverRecheck
	}
	drivers := &driverWatch{reader: reader, namespace: leaseNamespace(opts), others: opts.SidecarLeaseNamespaces,
		grace: grace, recheck: recheck}
	claims := &BucketClaimReconciler{Client: c, APIReader: reader, Recorder: recorder, Metrics: metrics,
		Drivers: drivers}
	if err := claims.SetupWithManager(mgr, copts); err != nil {
		return nil, nil, err
	}
	accesses := &BucketAccessReconciler{Client: c, APIReader: reader, Recorder: recorder, Metrics: metrics,
		Drivers: drivers}
	if err := accesses.SetupWithManager(mgr, copts); err != nil {
		return nil, nil, err
	}
	return claims, accesses, (&BucketReconciler{Client: c, APIReader: reader, Recorder: recorder,
		Metrics: metrics}).SetupWithManager(mgr, copts)
}
