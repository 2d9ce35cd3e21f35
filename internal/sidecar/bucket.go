package sidecar

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/cache/index"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/kube/patch"
	"github.com/kube-cosi/cosi/internal/kube/predicates"
	"github.com/kube-cosi/cosi/internal/kube/requeue"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// +kubebuilder:rbac:groups=objectstorage.k8s.io,resources=buckets,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=objectstorage.k8s.io,resources=buckets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// BucketReconciler provisions, checks and deletes the backend buckets of the Buckets of one
// driver (KEP-1979 "Creating a Bucket", "Accessing an Existing OSP Bucket", "Deleting a Bucket",
// the sidecar steps). It never deletes a Bucket object: the sidecar has no permission to.
type BucketReconciler struct {
	Client client.Client
	// APIReader confirms, uncached, that a BucketAccess whose grant is recorded for a Bucket is
	// gone before the grant is revoked.
	APIReader client.Reader
	Driver    *driverclient.Client
	Info      *cosiproto.DriverGetInfoResponse
	Recorder  events.EventRecorder
	// Grants are the grant records and the grants in flight, shared with the other reconcilers.
	Grants *grantBook
	// RefreshInterval is how often a provisioned Bucket's information is asked of the driver
	// again (bucket_refresh.go); zero: never.
	RefreshInterval time.Duration
	// UsageInterval is how often a provisioned Bucket's usage is asked of a driver that
	// advertises BUCKET_USAGE (bucket_usage.go); zero: never.
	UsageInterval time.Duration
	// AccessesByUID finds the access a grant recorded by an earlier version names.
	AccessesByUID *index.Lazy

	log       logr.Logger
	record    statusRecorder[*cosiapi.Bucket]
	refreshes secretChecks
	usage     usageChecks
}

// SetupWithManager registers the reconciler for this driver's Buckets.
func (r *BucketReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	r.log = mgr.GetLogger().WithValues("controller", "sidecar-bucket")
	r.refreshes.countDecisions(scheduledCheckMetric(), r.Info.GetName(), scheduledCheckBucketInfo)
	r.record = statusRecorder[*cosiapi.Bucket]{
		client: r.Client, events: r.Recorder, lock: patch.NoLock, kind: "Bucket", backoff: opts.RateLimiter,
		initial:      []string{cosiapi.ConditionResourcesValidated, cosiapi.ConditionProvisionFailed},
		invalidEvent: cosiapi.EventFailedCreateBucket, invalidAction: "Provision", invalidUnprovisions: true,
	}
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.(*cosiapi.Bucket).Spec.DriverName == r.Info.GetName()
	})
	wake := predicate.Or[client.Object](predicates.SpecOrLifecycleChanged, predicates.ProtectionRemoved)
	err := ctrl.NewControllerManagedBy(mgr).
		Named("sidecar-bucket").
		For(&cosiapi.Bucket{}, builder.WithPredicates(ours, wake)).

		// An access that goes may release a deleting Bucket that waits for its grant.
		Watches(&cosiapi.BucketAccess{}, handler.EnqueueRequestsFromMapFunc(r.bucketsOfAccess),
			builder.WithPredicates(accessGoing)).
		// So may the removal of a grant record.
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(bucketsOfRecord),
			builder.WithPredicates(predicate.Funcs{
				CreateFunc: func(event.CreateEvent) bool { return false },
				UpdateFunc: func(event.UpdateEvent) bool { return false },
			})).
		// The information refreshes that fall due (bucket_refresh.go, schedule.go).
		WatchesRawSource(r.refreshes.wakeChecks(r.RefreshInterval)).
		WithOptions(opts).
		Complete(r)
	if err != nil {
		return err
	}
	return r.setupUsage(mgr, opts, ours)
}

// bucketsOfAccess maps an access to the Buckets it names in status and to those of its grant
// record: the record is the sidecar's own, and whoever can write the access's status cannot hide
// it.
func (r *BucketReconciler) bucketsOfAccess(ctx context.Context, o client.Object) []reconcile.Request {
	var reqs []reconcile.Request
	for _, b := range o.(*cosiapi.BucketAccess).Status.AccessedBuckets {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: b.BucketName}})
	}
	if g := r.Grants.store.cached(ctx, o.GetUID()); g != nil {
		for _, name := range g.BucketNames {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
		}
	}
	return reqs
}

// bucketsOfRecord maps a grant record to its Buckets.
func bucketsOfRecord(_ context.Context, o client.Object) []reconcile.Request {
	cm, ok := o.(*corev1.ConfigMap)
	if !ok {
		return nil
	}
	g, err := cachedGrantOf(cm) // the cache's copy
	if err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(g.BucketNames))
	for _, name := range g.BucketNames {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
	}
	return reqs
}

// Reconcile handles one Bucket.
func (r *BucketReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ctx, cancel := finishOnShutdown(ctx)
	defer cancel()
	bucket := &cosiapi.Bucket{}
	if err := r.Client.Get(ctx, req.NamespacedName, bucket); err != nil {
		if apierrors.IsNotFound(err) {
			r.refreshes.gone(req.NamespacedName) // gone without its deletion seen: no refresh left behind
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if bucket.Spec.DriverName != r.Info.GetName() {
		return reconcile.Result{}, nil
	}
	// Grants recorded on the Bucket by an earlier version move to the grant records.
	if err := r.migrateLegacyGrants(ctx, bucket); err != nil {
		return r.result(bucket, cosiapi.EventFailedRevokeAccess, err)
	}
	if bucket.DeletionTimestamp != nil || bucket.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted] != "" {
		r.refreshes.forget(req.NamespacedName, bucket.UID)
		return r.result(bucket, cosiapi.EventFailedDeleteBucket, r.delete(ctx, bucket))
	}
	// The finalizer on every reconcile: it is put back when someone removed it.
	if err := patch.AddFinalizer(ctx, r.Client, bucket); err != nil {
		return r.result(bucket, cosiapi.EventFailedCreateBucket, err)
	}
	if conditions.IsTrue(bucket, cosiapi.ConditionProvisioned) && bucket.Status.BucketID != "" {
		// Provisioned: no second DriverCreateBucket; its information is refreshed at intervals
		// (and its usage read by the usage controller, bucket_usage.go).
		return r.refreshBucket(ctx, bucket)
	}
	if err := r.provision(ctx, bucket); err != nil {
		return r.result(bucket, cosiapi.EventFailedCreateBucket, err)
	}
	if r.RefreshInterval > 0 && refreshable(bucket) && conditions.IsTrue(bucket, cosiapi.ConditionProvisioned) {
		// The driver has just answered: its information is asked again an interval from now,
		// whether or not anything wakes the Bucket before (the schedule wakes it: wakeChecks).
		r.refreshes.done(req.NamespacedName, bucket.UID)
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, nil
}

// result reports a failed Kubernetes API call as an event and hands the error to
// controller-runtime.
func (r *BucketReconciler) result(bucket *cosiapi.Bucket, reason string, err error) (reconcile.Result, error) {
	requeue.APIErrorEvent(r.Recorder, bucket, reason, err)
	return result(err)
}
