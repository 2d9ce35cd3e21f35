// Package controller is the COSI Controller: it binds BucketClaims to Buckets, validates
// BucketAccesses against their classes and hands them to the driver's sidecar, and orchestrates
// deletion (KEP-1979 "Controller overview" and the controller steps of "Control Flows").
package controller

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/apiutil"
)

// Leader election Leases live in the component's own namespace: a Role there, not a ClusterRole.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch,namespace=cosi-system
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Options configure the controller.
type Options struct {
	// Workers is the number of objects of each kind reconciled at once.
	Workers int
	// LeaderElection makes the controller replicas elect one leader (Lease "cosi-controller").
	LeaderElection          bool
	LeaderElectionNamespace string
	// MetricsAddress and HealthAddress serve /metrics and /healthz, /readyz ("0" disables).
	MetricsAddress, HealthAddress string
	// SkipNameValidation allows several controllers in one process (tests).
	SkipNameValidation bool
}

// LeaseName is the leader election Lease of the controller.
const LeaseName = "cosi-controller"

// Index names of the cache's field indexes.
const (
	indexClaimsByClass   = "spec.bucketClassName"
	indexAccessesByClaim = "spec.bucketClaims.bucketClaimName" // "<namespace>/<claim name>"
	indexAccessesByClass = "spec.bucketAccessClassName"
)

// Run reconciles until ctx is done.
func Run(ctx context.Context, cfg *rest.Config, opts Options, log logr.Logger) error {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: apiutil.Scheme(),
		Logger: log,
		// No object's managedFields in the cache: COSI never reads them, and they would take much
		// of its memory.
		Cache:                         cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
		Metrics:                       metricsserver.Options{BindAddress: opts.MetricsAddress},
		HealthProbeBindAddress:        opts.HealthAddress,
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

// Setup registers the indexes and reconcilers with a manager.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	indexes := []struct {
		obj   client.Object
		field string
		fn    client.IndexerFunc
	}{
		{&cosiapi.BucketClaim{}, indexClaimsByClass, func(o client.Object) []string {
			return []string{o.(*cosiapi.BucketClaim).Spec.BucketClassName}
		}},
		{&cosiapi.BucketAccess{}, indexAccessesByClaim, func(o client.Object) []string {
			ba := o.(*cosiapi.BucketAccess)
			keys := make([]string, 0, len(ba.Spec.BucketClaims))
			for _, c := range ba.Spec.BucketClaims {
				keys = append(keys, ba.Namespace+"/"+c.BucketClaimName)
			}
			return keys
		}},
		{&cosiapi.BucketAccess{}, indexAccessesByClass, func(o client.Object) []string {
			return []string{o.(*cosiapi.BucketAccess).Spec.BucketAccessClassName}
		}},
		{&cosiapi.BucketAccess{}, indexAccessesByBucket, func(o client.Object) []string {
			var names []string
			for _, b := range o.(*cosiapi.BucketAccess).Status.AccessedBuckets {
				names = append(names, b.BucketName)
			}
			return names
		}},
	}
	for _, ix := range indexes {
		if err := mgr.GetFieldIndexer().IndexField(ctx, ix.obj, ix.field, ix.fn); err != nil {
			return fmt.Errorf("index %s: %w", ix.field, err)
		}
	}
	metrics := newMetrics()
	copts := controller.Options{MaxConcurrentReconciles: max(opts.Workers, 1), RateLimiter: apiutil.RateLimiter()}
	recorder := mgr.GetEventRecorder("cosi-controller")
	c, reader := mgr.GetClient(), mgr.GetAPIReader()
	if err := (&BucketClaimReconciler{Client: c, APIReader: reader, Recorder: recorder, Metrics: metrics}).SetupWithManager(mgr, copts); err != nil {
		return err
	}
	if err := (&BucketAccessReconciler{Client: c, Recorder: recorder, Metrics: metrics}).SetupWithManager(mgr, copts); err != nil {
		return err
	}
	return (&BucketReconciler{Client: c, APIReader: reader, Recorder: recorder, Metrics: metrics}).SetupWithManager(mgr, copts)
}
