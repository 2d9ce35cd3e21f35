package sidecar

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
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
	"github.com/kube-cosi/cosi/pkg/driver"
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
	// AccessesByUID finds the access a grant recorded by an earlier version names.
	AccessesByUID *index.Lazy

	log       logr.Logger
	record    statusRecorder[*cosiapi.Bucket]
	refreshes secretChecks
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
	return ctrl.NewControllerManagedBy(mgr).
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
		// Provisioned: no second DriverCreateBucket; its information is refreshed at intervals.
		return r.refreshBucket(ctx, bucket)
	}
	if err := r.provision(ctx, bucket); err != nil {
		return r.result(bucket, cosiapi.EventFailedCreateBucket, err)
	}
	if r.RefreshInterval > 0 && conditions.IsTrue(bucket, cosiapi.ConditionProvisioned) {
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

// provision creates (dynamic) or finds (static) the backend bucket and records it in status
// (KEP-1979 "Creating a Bucket" and "Accessing an Existing OSP Bucket", sidecar steps).
func (r *BucketReconciler) provision(ctx context.Context, bucket *cosiapi.Bucket) error {
	if err := checkBucketParameters(bucket.Spec.Parameters); err != nil {
		return r.record.invalid(ctx, bucket, cosiapi.ReasonInvalidParameter, err.Error())
	}
	protocols := rpcProtocols(bucket.Spec.Protocols)
	// The driver's protocols first: nothing is created in the backend for a Bucket that would be
	// refused afterwards.
	for _, p := range protocols {
		if !slices.Contains(r.Info.GetSupportedProtocols(), p) {
			return r.record.invalid(ctx, bucket, cosiapi.ReasonUnsupportedProtocol,
				fmt.Sprintf("driver %s does not support protocol %s (it supports %v)",
					r.Info.GetName(), apiProtocol(p), apiProtocols(r.Info.GetSupportedProtocols())))
		}
	}
	var info *cosiproto.ProtocolBucketInfo
	if id := bucket.Spec.ExistingBucketID; id != "" {
		resp, err := r.Driver.DriverGetBucket(ctx, &cosiproto.DriverGetBucketRequest{
			BucketId: id, Protocols: protocols, Parameters: driverParameters(bucket.Spec.Parameters),
		})
		if err != nil {
			return r.record.failed(ctx, bucket, rpcError{"DriverGetBucket", err}, cosiapi.EventFailedCreateBucket)
		}
		info = resp.GetProtocols()
	} else {
		if bucket.Status.BucketID == "" {
			if err := r.generateID(ctx, bucket, protocols); err != nil {
				return err
			}
		}
		// Phase 2.
		resp, err := r.Driver.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{
			BucketId: bucket.Status.BucketID, Protocols: protocols, Parameters: driverParameters(bucket.Spec.Parameters),
		})
		if err != nil {
			return r.record.failed(ctx, bucket, rpcError{"DriverCreateBucket", err}, cosiapi.EventFailedCreateBucket)
		}
		info = resp.GetProtocols()
	}

	if err := driver.ValidateBucketInfo(info, r.Info.GetSupportedProtocols(), protocols); err != nil {
		return r.record.invalid(ctx, bucket, cosiapi.ReasonUnsupportedProtocol,
			"the driver's answer does not fit the Bucket: "+err.Error())
	}
	status := r.record.status(bucket)
	if id := bucket.Spec.ExistingBucketID; id != "" {
		bucket.Status.BucketID = id
	}
	bucket.Status.Protocols = nil
	for _, p := range driver.BucketInfoProtocols(info) {
		bucket.Status.Protocols = append(bucket.Status.Protocols, apiProtocol(p))
	}
	bucket.Status.BucketInfo = bucketStatusInfo(info)
	reason, msg := cosiapi.ReasonProvisioned, "the bucket exists in the backend"
	if bucket.Spec.ExistingBucketID != "" {
		reason, msg = imported(r.Driver)
	}
	conditions.MarkTrue(bucket, cosiapi.ConditionProvisioned, reason, msg)
	conditions.MarkFalse(bucket, cosiapi.ConditionProvisionFailed, cosiapi.ReasonDriverSucceeded, "")
	conditions.MarkTrue(bucket, cosiapi.ConditionResourcesValidated, cosiapi.ReasonValid, "")
	return status.Patch(ctx, patch.NoLock)
}

// generateID is phase 1 of a dynamic Bucket: get the ID and persist it before anything exists in
// the backend, so that whatever phase 2 creates can always be deleted.
func (r *BucketReconciler) generateID(
	ctx context.Context, bucket *cosiapi.Bucket, protocols []cosiproto.ObjectProtocol_Type,
) error {
	resp, err := r.Driver.DriverGenerateBucketId(ctx,
		&cosiproto.DriverGenerateBucketIdRequest{
			Name: bucket.Name, Protocols: protocols, Parameters: driverParameters(bucket.Spec.Parameters),
		})
	if err != nil {
		return r.record.failed(ctx, bucket, rpcError{"DriverGenerateBucketId", err}, cosiapi.EventFailedCreateBucket)
	}
	if resp.GetBucketId() == "" {
		return r.record.invalid(ctx, bucket, cosiapi.ReasonProvisioningFailed,
			"DriverGenerateBucketId returned an empty bucket_id")
	}
	status := r.record.status(bucket)
	bucket.Status.BucketID = resp.GetBucketId()
	conditions.Init(bucket, cosiapi.ConditionProvisionFailed, cosiapi.ConditionResourcesValidated)
	conditions.MarkUnknown(bucket, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioning,
		"bucket ID generated; creating the bucket")
	return status.Patch(ctx, patch.NoLock)
}

// delete deprovisions the bucket once its claim is being deleted (KEP-1979 "Deleting a Bucket",
// step 3). Without the controller's annotation nothing happens, even with a deletion timestamp:
// an admin deleting a Bucket whose claim still exists must not lose data.
func (r *BucketReconciler) delete(ctx context.Context, bucket *cosiapi.Bucket) error {
	if !controllerutil.ContainsFinalizer(bucket, cosiapi.FinalizerProtection) {
		return nil
	}
	if bucket.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted] == "" {
		ref := bucket.Spec.BucketClaimRef
		return r.waiting(ctx, bucket,
			fmt.Sprintf("deletion waits until BucketClaim %s/%s is deleted", ref.Namespace, ref.Name))
	}
	if bucket.DeletionTimestamp == nil {
		return nil // Delete policy: the controller deletes the Bucket next. Retain: nothing to do.
	}
	// No grant outlives its Bucket object: those of accesses that are gone are revoked now, and
	// the controller released the Bucket only once no access held it.
	live, err := r.liveGrants(ctx, bucket)
	if err != nil {
		return err
	}
	if len(live) > 0 {
		return r.waiting(ctx, bucket,
			fmt.Sprintf("deletion waits until the BucketAccesses %v that hold this Bucket are deleted", live))
	}
	// An imported bucket is never deleted, whatever its policy: the API refuses Delete with
	// existingBucketID, and a Bucket stored before that rule is treated as Retain.
	if bucket.Spec.DeletionPolicy == cosiapi.DeletionPolicyDelete && bucket.Spec.ExistingBucketID == "" &&
		bucket.Status.BucketID != "" {
		_, err := r.Driver.DriverDeleteBucket(ctx, &cosiproto.DriverDeleteBucketRequest{
			BucketId: bucket.Status.BucketID, Parameters: driverParameters(bucket.Spec.Parameters),
		})
		if err != nil {
			return r.record.failed(ctx, bucket, rpcError{"DriverDeleteBucket", err}, cosiapi.EventFailedDeleteBucket)
		}
	}
	// Retain: the backend bucket stays; only the object goes.
	return patch.RemoveFinalizer(ctx, r.Client, bucket)
}

// waiting records why a deleting Bucket's deprovisioning waits.
func (r *BucketReconciler) waiting(ctx context.Context, bucket *cosiapi.Bucket, msg string) error {
	status := r.record.status(bucket)
	s := metav1.ConditionUnknown
	if conditions.IsTrue(bucket, cosiapi.ConditionProvisioned) {
		s = metav1.ConditionTrue // a provisioned bucket stays provisioned while it waits
	}
	conditions.Set(bucket, cosiapi.ConditionProvisioned, s, cosiapi.ReasonDeletionBlocked, msg)
	_, err := status.PatchIfChanged(ctx, patch.NoLock)
	return err
}

// liveGrants revokes the grants recorded for the Bucket whose access is gone, and returns the
// accesses that still hold one.
func (r *BucketReconciler) liveGrants(ctx context.Context, bucket *cosiapi.Bucket) ([]string, error) {
	records, err := r.Grants.store.forBucket(ctx, bucket.Name)
	if err != nil {
		return nil, err
	}
	var live []string
	for _, uid := range slices.Sorted(maps.Keys(records)) {
		revoked, err := r.Grants.revokeOrphan(ctx, uid)
		if err != nil {
			return nil, err
		}
		if !revoked {
			live = append(live, records[uid].Namespace+"/"+records[uid].Name)
		}
	}
	return live, nil
}

// migrateLegacyGrants moves the grants that an earlier version recorded in the Bucket's
// annotations to grant records, and removes the annotations. Whoever may write Buckets could have
// written them, so each is verified first: the driver must generate the recorded account ID for
// the recorded access (KEP-1979: the same ID for the same account name), else the record names an
// account that is not the access's, and is dropped with a Warning event. A verified record whose
// access is gone is then revoked like any other (GrantReconciler), which deletes only Secrets that
// carry the access's UID.
func (r *BucketReconciler) migrateLegacyGrants(ctx context.Context, bucket *cosiapi.Bucket) error {
	for key, g := range legacyGrantRecords(bucket) {
		if err := r.migrateLegacyGrant(ctx, bucket, g); err != nil {
			return err
		}
		if err := patch.Annotation(ctx, r.Client, bucket, key, ""); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

func (r *BucketReconciler) migrateLegacyGrant(ctx context.Context, bucket *cosiapi.Bucket, g grantRecord) error {
	if g.UID == "" || g.AccountID == "" || len(g.BucketIDs) == 0 {
		return nil // unreadable, or nothing granted
	}
	existing, _, err := r.Grants.store.get(ctx, g.UID)
	if err != nil {
		return err
	}
	if existing != nil && existing.AccountID == g.AccountID {
		if slices.Contains(existing.BucketNames, bucket.Name) {
			return nil
		}
		existing.BucketNames = append(existing.BucketNames, bucket.Name)
		_, err := r.Grants.store.put(ctx, *existing)
		return err
	}
	resp, err := r.Driver.DriverGenerateBucketAccessId(ctx, g.generateRequest())
	if err != nil {
		return rpcError{"DriverGenerateBucketAccessId", err}
	}
	if resp.GetAccountId() != g.AccountID {
		r.Recorder.Eventf(bucket, nil, corev1.EventTypeWarning, cosiapi.EventFailedRevokeAccess, "MigrateGrant",
			"ignored a grant recorded in the annotations of this Bucket for BucketAccess %s/%s (UID %s): "+
				"the driver does not generate its account ID for that access", g.Namespace, g.Name, g.UID)
		return nil
	}
	// The account is the access's; the name and Secrets of the access are taken from the live
	// access with the UID, if there is one, not from the annotation.
	var list cosiapi.BucketAccessList
	if err := r.AccessesByUID.List(ctx, r.Client, &list, "", string(g.UID)); err != nil {
		return err
	}
	if len(list.Items) == 1 {
		live := &list.Items[0]
		g.Namespace, g.Name, g.SecretNames = live.Namespace, live.Name, secretNames(live)
	}
	g.BucketNames = []string{bucket.Name}
	_, err = r.Grants.store.put(ctx, g)
	return err
}
