package controller

import (
	"context"
	"fmt"
	"reflect"
	"slices"

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
	"github.com/kube-cosi/cosi/internal/conditions"
	"github.com/kube-cosi/cosi/internal/index"
	"github.com/kube-cosi/cosi/internal/patch"
	"github.com/kube-cosi/cosi/internal/predicates"
	"github.com/kube-cosi/cosi/internal/requeue"
)

// +kubebuilder:rbac:groups=objectstorage.k8s.io,resources=bucketclaims,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=objectstorage.k8s.io,resources=bucketclaims/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=objectstorage.k8s.io,resources=buckets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=objectstorage.k8s.io,resources=bucketclasses,verbs=get;list;watch

// The conditions the controller writes on BucketClaims: all of them, no one else writes them.
var claimConditions = []string{
	cosiapi.ConditionProvisioned,
	cosiapi.ConditionProvisionFailed,
	cosiapi.ConditionResourcesValidated,
}

// BucketClaimReconciler binds BucketClaims to Buckets, dynamic and static, mirrors the Bucket's
// status on the claim, and orchestrates the claim's deletion (KEP-1979 "Creating a Bucket",
// "Accessing an Existing OSP Bucket" and "Deleting a Bucket", controller steps).
type BucketClaimReconciler struct {
	Client client.Client
	// APIReader lists BucketAccesses uncached before a claim's deletion goes ahead.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Metrics   *metrics

	// log reports what the watches cannot return: their map functions' errors.
	log logr.Logger
}

// SetupWithManager registers the reconciler and its watches: a claim waits for its Bucket and its
// BucketClass by watching them, never by returning errors.
func (r *BucketClaimReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	r.log = mgr.GetLogger().WithValues("controller", "bucketclaim")
	wake := predicate.Or[client.Object](predicates.SpecOrLifecycleChanged, predicates.ProtectionRemoved)
	return ctrl.NewControllerManagedBy(mgr).
		Named("bucketclaim").
		For(&cosiapi.BucketClaim{}, builder.WithPredicates(wake)).
		Watches(&cosiapi.Bucket{}, handler.EnqueueRequestsFromMapFunc(r.claimsOfBucket),
			builder.WithPredicates(bucketChanged)).
		Watches(&cosiapi.BucketClass{}, handler.EnqueueRequestsFromMapFunc(r.claimsOfClass)).
		// The reference annotation follows the accesses: created, deleting, finalizer gone, gone.
		Watches(&cosiapi.BucketAccess{}, handler.EnqueueRequestsFromMapFunc(claimsOfAccess),
			builder.WithPredicates(accessReferenceChanged)).
		WithOptions(opts).
		Complete(r)
}

// bucketChanged passes Bucket changes a claim mirrors or waits for.
var bucketChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*cosiapi.Bucket), e.ObjectNew.(*cosiapi.Bucket)
		return !reflect.DeepEqual(o.Status, n.Status) || o.Spec.BucketClaimRef != n.Spec.BucketClaimRef ||
			!o.DeletionTimestamp.Equal(n.DeletionTimestamp)
	},
}

// claimsOfBucket maps a Bucket to the claim it names, and to static claims that name it.
func (r *BucketClaimReconciler) claimsOfBucket(ctx context.Context, o client.Object) []reconcile.Request {
	b := o.(*cosiapi.Bucket)
	reqs := []reconcile.Request{
		{NamespacedName: types.NamespacedName{Namespace: b.Spec.BucketClaimRef.Namespace, Name: b.Spec.BucketClaimRef.Name}},
	}
	var claims cosiapi.BucketClaimList
	if err := r.Client.List(ctx, &claims, client.MatchingFields{index.ClaimsByExistingBucket.Name: b.Name}); err != nil {
		// A list from the cache fails only when the index is missing: a programming error.
		r.log.Error(err, "listing the static claims of a Bucket", "bucket", b.Name)
	}
	for _, c := range claims.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
	}
	return reqs
}

// accessReferenceChanged passes the access changes that can change whether it references its
// claims: creation, deletion, a finalizer change, a spec change.
var accessReferenceChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld, e.ObjectNew
		return o.GetGeneration() != n.GetGeneration() || !slices.Equal(o.GetFinalizers(), n.GetFinalizers()) ||
			!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp())
	},
}

// claimsOfAccess maps an access to the claims it names.
func claimsOfAccess(_ context.Context, o client.Object) []reconcile.Request {
	ba := o.(*cosiapi.BucketAccess)
	reqs := make([]reconcile.Request, 0, len(ba.Spec.BucketClaims))
	for _, c := range ba.Spec.BucketClaims {
		reqs = append(reqs,
			reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ba.Namespace, Name: c.BucketClaimName}})
	}
	return reqs
}

// claimsOfClass maps a BucketClass to the claims waiting for it.
func (r *BucketClaimReconciler) claimsOfClass(ctx context.Context, o client.Object) []reconcile.Request {
	var claims cosiapi.BucketClaimList
	if err := r.Client.List(ctx, &claims, client.MatchingFields{index.ClaimsByClass.Name: o.GetName()}); err != nil {
		r.log.Error(err, "listing the claims of a BucketClass", "bucketClass", o.GetName())
		return nil
	}
	var reqs []reconcile.Request
	for _, c := range claims.Items {
		if c.Status.BoundBucketName == "" {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
		}
	}
	return reqs
}

// Reconcile handles one BucketClaim.
func (r *BucketClaimReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	claim := &cosiapi.BucketClaim{}
	if err := r.Client.Get(ctx, req.NamespacedName, claim); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if claim.DeletionTimestamp != nil {
		return requeue.ResultWithEvent(r.Recorder, claim, cosiapi.EventFailedDeleteBucket, r.delete(ctx, claim))
	}
	return requeue.ResultWithEvent(r.Recorder, claim, cosiapi.EventFailedCreateBucket, r.reconcile(ctx, claim))
}

// reconcile protects the claim, publishes its references, binds it and mirrors its Bucket.
func (r *BucketClaimReconciler) reconcile(ctx context.Context, claim *cosiapi.BucketClaim) error {
	// Put back, on every reconcile, what a tenant may have removed.
	if err := patch.AddFinalizer(ctx, r.Client, claim); err != nil {
		return err
	}
	if err := r.publishReferences(ctx, claim); err != nil {
		return err
	}
	status := patch.NewStatus(r.Client, claim, claimConditions...)
	conditions.Init(claim, cosiapi.ConditionProvisionFailed)
	bucket, err := r.bucket(ctx, claim, status)
	if err != nil {
		return err
	}
	if bucket != nil {
		if err := r.bind(ctx, claim, bucket); err != nil {
			return err
		}
	}
	return r.patchStatus(ctx, status, claim, bucket)
}

// publishReferences sets the has-bucketaccess-references annotation while accesses reference the
// claim and removes it when none does (KEP-1979 "Generating Bucket Access Credentials" step 3.5 and
// "Deleting a BucketAccess" step 4.1), derived from the accesses themselves. It is removed only
// after an uncached list confirms that no access references the claim.
func (r *BucketClaimReconciler) publishReferences(ctx context.Context, claim *cosiapi.BucketClaim) error {
	refs, err := r.referencingAccesses(ctx, claim, false)
	if err != nil {
		return err
	}
	_, annotated := claim.Annotations[cosiapi.AnnotationHasBucketAccessReferences]
	switch {
	case len(refs) > 0:
		return patch.SetAnnotation(ctx, r.Client, claim, cosiapi.AnnotationHasBucketAccessReferences)
	case !annotated:
		return nil
	}
	if refs, err = r.referencingAccesses(ctx, claim, true); err != nil || len(refs) > 0 {
		return err
	}
	return patch.RemoveAnnotation(ctx, r.Client, claim, cosiapi.AnnotationHasBucketAccessReferences)
}

// bucket returns the claim's Bucket, creating it for a dynamic claim. It returns nil, with the
// claim's conditions saying why, while there is no Bucket to bind to.
//
// When it writes the bound name, status takes a new snapshot, so the caller's final patch carries
// only later changes.
func (r *BucketClaimReconciler) bucket(
	ctx context.Context, claim *cosiapi.BucketClaim, status *patch.Status[*cosiapi.BucketClaim],
) (*cosiapi.Bucket, error) {
	name := claim.Status.BoundBucketName
	if claim.Spec.ExistingBucketName != "" {
		name = claim.Spec.ExistingBucketName
	}
	if name != "" {
		bucket, create, err := r.namedBucket(ctx, claim, name)
		if err != nil || !create {
			return bucket, err
		}
	}

	class := &cosiapi.BucketClass{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: claim.Spec.BucketClassName}, class); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
		conditions.MarkUnknown(claim, cosiapi.ConditionProvisioned, cosiapi.ReasonWaitingForResources,
			"waiting for BucketClass "+claim.Spec.BucketClassName)
		conditions.MarkUnknown(claim, cosiapi.ConditionResourcesValidated, cosiapi.ReasonWaitingForResources,
			fmt.Sprintf("BucketClass %s does not exist", claim.Spec.BucketClassName))
		return nil, nil
	}
	if name == "" {
		// Record the bound name before creating the Bucket (KEP-1979 "Creating a Bucket").
		// The conditions say what bind will say once the Bucket exists, so that binding needs
		// no second status write.
		claim.Status.BoundBucketName = cosiapi.BucketNamePrefix + string(claim.UID)
		setBoundConditions(claim)
		if err := status.Patch(ctx, patch.OptimisticLock); err != nil {
			return nil, err
		}
		name = claim.Status.BoundBucketName
	}
	return r.createBucket(ctx, claim, class, name)
}

// namedBucket returns the Bucket the claim names (static) or is bound to (dynamic). While there
// is none, it returns nil, with the claim's conditions saying why, or create: the dynamic claim's
// Bucket is created again.
func (r *BucketClaimReconciler) namedBucket(
	ctx context.Context, claim *cosiapi.BucketClaim, name string,
) (b *cosiapi.Bucket, create bool, err error) {
	bucket := &cosiapi.Bucket{}
	err = r.Client.Get(ctx, types.NamespacedName{Name: name}, bucket)
	switch {
	case err == nil:
		return bucket, false, nil
	case !apierrors.IsNotFound(err):
		return nil, false, err
	case claim.Spec.ExistingBucketName != "":
		// Static: wait for the admin's Bucket; the Bucket watch wakes the claim.
		conditions.MarkUnknown(claim, cosiapi.ConditionProvisioned, cosiapi.ReasonWaitingForResources,
			"waiting for Bucket "+name)
		conditions.MarkUnknown(claim, cosiapi.ConditionResourcesValidated, cosiapi.ReasonWaitingForResources,
			fmt.Sprintf("Bucket %s does not exist yet", name))
		return nil, false, nil
	case wasProvisioned(claim):
		// The claim's Bucket was provisioned and is gone: an error, not a re-create
		// (KEP-1979 "Creating a Bucket", step 2.5).
		conditions.MarkFalse(claim, cosiapi.ConditionResourcesValidated, cosiapi.ReasonInvalidReference,
			fmt.Sprintf("bound Bucket %s went missing", name))
		r.Recorder.Eventf(claim, nil, corev1.EventTypeWarning, cosiapi.EventFailedCreateBucket, "Bind",
			"bound Bucket %s went missing", name)
		return nil, false, nil
	}
	// The name was recorded but the Bucket never provisioned: creating it was interrupted, or
	// it was deleted before the driver made anything. Creating it again is safe: the same
	// name gives the same bucket ID.
	return nil, true, nil
}

// createBucket creates the dynamic claim's Bucket from its class, or returns the one that exists.
func (r *BucketClaimReconciler) createBucket(
	ctx context.Context, claim *cosiapi.BucketClaim, class *cosiapi.BucketClass, name string,
) (*cosiapi.Bucket, error) {
	bucket := &cosiapi.Bucket{
		// Without the sidecar's protection finalizer: the sidecar adds it (KEP-1979 "Creating a
		// Bucket" step 3.2) before it first calls the driver, and the API server adds no
		// finalizer to an object being deleted, so a Bucket is protected from the moment anything
		// may exist in the backend. A Bucket that no sidecar serves has nothing to protect, and
		// goes when it is deleted.
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: cosiapi.BucketSpec{
			DriverName:     class.Spec.DriverName,
			DeletionPolicy: class.Spec.DeletionPolicy,
			Parameters:     class.Spec.Parameters,
			Protocols:      claim.Spec.Protocols,
			BucketClaimRef: cosiapi.BucketClaimReference{Name: claim.Name, Namespace: claim.Namespace, UID: claim.UID},
		},
	}
	if err := r.Client.Create(ctx, bucket); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating Bucket %s: %w", name, err)
		}
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(bucket), bucket); err != nil {
			return nil, err
		}
	}
	return bucket, nil
}

// bind checks that the Bucket is bound to this claim, binds a static Bucket by setting the claim's
// UID on it, and mirrors the Bucket's status on the claim.
func (r *BucketClaimReconciler) bind(ctx context.Context, claim *cosiapi.BucketClaim, bucket *cosiapi.Bucket) error {
	ref := bucket.Spec.BucketClaimRef
	if ref.Namespace != claim.Namespace || ref.Name != claim.Name || (ref.UID != "" && ref.UID != claim.UID) {
		// Final until the Bucket changes: a Bucket reserved for another claim is never taken.
		msg := fmt.Sprintf("Bucket %s is bound to BucketClaim %s/%s (uid %q), not to this claim", bucket.Name, ref.Namespace,
			ref.Name, ref.UID)
		conditions.MarkFalse(claim, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioningFailed, msg)
		conditions.MarkFalse(claim, cosiapi.ConditionResourcesValidated, cosiapi.ReasonInvalidReference, msg)
		return nil
	}
	if ref.UID == "" {
		bindBucket := func() bool { bucket.Spec.BucketClaimRef.UID = claim.UID; return true }
		if err := patch.Locked(ctx, r.Client, bucket, bindBucket); err != nil {
			return err
		}
	}
	claim.Status.BoundBucketName = bucket.Name
	mirror(claim, bucket)
	return nil
}

// mirror sets the claim's status from its Bucket's: Provisioned True/False (never Unknown),
// ProvisionFailed, protocols, and whether the Bucket fits the claim.
//
// Each condition is set once, to its final value: setting it twice in one pass (Unknown, then the
// Bucket's True) would stamp a new lastTransitionTime and write the claim every time.
func mirror(claim *cosiapi.BucketClaim, bucket *cosiapi.Bucket) {
	if conditions.IsKnown(bucket, cosiapi.ConditionProvisioned) {
		conditions.Mirror(claim, bucket, cosiapi.ConditionProvisioned)
	} else {
		conditions.MarkUnknown(claim, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioning, waitingMessage(bucket.Name))
	}
	conditions.Mirror(claim, bucket, cosiapi.ConditionProvisionFailed)
	claim.Status.Protocols = bucket.Status.Protocols

	rv := conditions.Get(bucket, cosiapi.ConditionResourcesValidated)
	missing := slices.DeleteFunc(slices.Clone(claim.Spec.Protocols),
		func(p cosiapi.Protocol) bool { return slices.Contains(bucket.Status.Protocols, p) })
	switch {
	default:
		conditions.MarkTrue(claim, cosiapi.ConditionResourcesValidated, cosiapi.ReasonValid, boundMessage(bucket.Name))
	case rv != nil && rv.Status == metav1.ConditionFalse:
		conditions.MarkFalse(claim, cosiapi.ConditionResourcesValidated, rv.Reason, "Bucket "+bucket.Name+": "+rv.Message)
	case conditions.IsTrue(bucket, cosiapi.ConditionProvisioned) && len(missing) > 0:
		conditions.MarkFalse(claim, cosiapi.ConditionResourcesValidated, cosiapi.ReasonUnsupportedProtocol,
			fmt.Sprintf("Bucket %s supports %v; the claim requires %v", bucket.Name, bucket.Status.Protocols, missing))
	}
}

// wasProvisioned reports whether the claim mirrored a provisioning outcome of its Bucket.
func wasProvisioned(claim *cosiapi.BucketClaim) bool {
	return conditions.IsKnown(claim, cosiapi.ConditionProvisioned)
}

func waitingMessage(bucket string) string {
	return fmt.Sprintf("waiting for Bucket %s to be provisioned", bucket)
}
func boundMessage(bucket string) string { return "bound to Bucket " + bucket }

// setBoundConditions sets the conditions of a claim bound to a Bucket that is not provisioned yet,
// exactly as bind will compute them, so that binding needs no second status write.
func setBoundConditions(claim *cosiapi.BucketClaim) {
	name := claim.Status.BoundBucketName
	conditions.MarkUnknown(claim, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioning, waitingMessage(name))
	conditions.MarkTrue(claim, cosiapi.ConditionResourcesValidated, cosiapi.ReasonValid, boundMessage(name))
}

// patchStatus writes the claim's status once, if it changed, and records the events and metrics
// of what changed.
func (r *BucketClaimReconciler) patchStatus(
	ctx context.Context, status *patch.Status[*cosiapi.BucketClaim], claim *cosiapi.BucketClaim, bucket *cosiapi.Bucket,
) error {
	orig := status.Before()
	// Locked to the version read: a status computed from a stale copy must never land, least of
	// all on a claim deleted and created again under the same name (it would carry the old claim's
	// Provisioned condition without its Bucket).
	if patched, err := status.PatchIfChanged(ctx, patch.OptimisticLock); err != nil || !patched {
		return err
	}
	if pf := conditions.Get(claim, cosiapi.ConditionProvisionFailed); pf != nil && pf.Status == metav1.ConditionTrue {
		if old := conditions.Get(orig, cosiapi.ConditionProvisionFailed); old == nil || old.Status != pf.Status ||
			old.Message != pf.Message {
			r.Recorder.Eventf(claim, nil, corev1.EventTypeWarning, cosiapi.EventFailedCreateBucket, "Provision", "%s",
				pf.Message)
		}
	}
	if bucket != nil && !conditions.IsTrue(orig, cosiapi.ConditionProvisioned) &&
		conditions.IsTrue(claim, cosiapi.ConditionProvisioned) {
		r.Metrics.created(bucket.Spec.DriverName, "BucketClaim", claim.CreationTimestamp.Time)
	}
	return nil
}

// delete deletes a claim (KEP-1979 "Deleting a Bucket", step 2): blocked while BucketAccesses
// reference it; then the Bucket is annotated, deleted with the Delete policy, left with Retain.
//
// Whether accesses reference the claim is decided from an uncached list of the accesses, not from
// the annotation, which a tenant can remove: a claim in use is never deleted.
func (r *BucketClaimReconciler) delete(ctx context.Context, claim *cosiapi.BucketClaim) error {
	if !controllerutil.ContainsFinalizer(claim, cosiapi.FinalizerProtection) {
		return nil
	}
	refs, err := r.referencingAccesses(ctx, claim, true)
	if err != nil {
		return err
	}
	if len(refs) > 0 {
		return r.blockDeletion(ctx, claim, refs)
	}
	driverName, err := r.releaseBucket(ctx, claim)
	if err != nil {
		return err
	}
	provisioned := conditions.IsTrue(claim, cosiapi.ConditionProvisioned)
	if err := patch.RemoveFinalizer(ctx, r.Client, claim); err != nil {
		return err
	}
	r.Metrics.deleted(driverName, "BucketClaim", claim.DeletionTimestamp.Time,
		createOutcome(provisioned, driverCalled(claim)))
	return nil
}

// blockDeletion records that the claim's deletion waits for the accesses that reference it, and
// puts back the reference annotation a tenant may have removed.
func (r *BucketClaimReconciler) blockDeletion(ctx context.Context, claim *cosiapi.BucketClaim, refs []string) error {
	if err := patch.SetAnnotation(ctx, r.Client, claim, cosiapi.AnnotationHasBucketAccessReferences); err != nil {
		return err
	}
	status := patch.NewStatus(r.Client, claim, claimConditions...)
	s := metav1.ConditionUnknown
	if conditions.IsTrue(claim, cosiapi.ConditionProvisioned) {
		s = metav1.ConditionTrue
	}
	conditions.Set(claim, cosiapi.ConditionProvisioned, s, cosiapi.ReasonDeletionBlocked,
		fmt.Sprintf("deletion waits until the BucketAccesses that reference this claim are deleted: %v", refs))
	return r.patchStatus(ctx, status, claim, nil)
}

// releaseBucket tells the sidecar that the claim's Bucket may be deprovisioned, and deletes the
// Bucket when its policy is Delete. It returns the Bucket's driver, for the metrics.
func (r *BucketClaimReconciler) releaseBucket(
	ctx context.Context, claim *cosiapi.BucketClaim,
) (driverName string, err error) {
	if name := claim.Status.BoundBucketName; name != "" {
		bucket := &cosiapi.Bucket{}
		err := r.Client.Get(ctx, types.NamespacedName{Name: name}, bucket)
		if client.IgnoreNotFound(err) != nil {
			return "", err
		}
		ref := bucket.Spec.BucketClaimRef
		if err == nil && ref.Namespace == claim.Namespace && ref.Name == claim.Name &&
			(ref.UID == "" || ref.UID == claim.UID) {
			driverName = bucket.Spec.DriverName
			// Tell the sidecar the claim is going: it may now deprovision.
			if err := patch.SetAnnotation(ctx, r.Client, bucket, cosiapi.AnnotationBucketClaimBeingDeleted); err != nil {
				return "", err
			}
			if bucket.Spec.DeletionPolicy == cosiapi.DeletionPolicyDelete && bucket.DeletionTimestamp == nil {
				if err := r.Client.Delete(ctx, bucket, client.Preconditions{UID: &bucket.UID}); client.IgnoreNotFound(err) != nil {
					return "", err
				}
			}
			// Retain: the Bucket and the backend bucket stay, unbound.
		}
		// A Bucket that is gone, or bound to another claim, is not this claim's to touch.
	}
	if driverName == "" {
		// The Bucket went already (a retry after a conflict, or an admin): the class, if it is
		// still there, names the driver for the metrics.
		class := &cosiapi.BucketClass{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: claim.Spec.BucketClassName}, class); err == nil {
			driverName = class.Spec.DriverName
		}
	}
	return driverName, nil
}
