package controller

import (
	"context"
	"fmt"
	"maps"
	"reflect"
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
	"github.com/kube-cosi/cosi/internal/kube/lookup"
	"github.com/kube-cosi/cosi/internal/kube/patch"
	"github.com/kube-cosi/cosi/internal/kube/predicates"
	"github.com/kube-cosi/cosi/internal/kube/requeue"
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
	// APIReader reads live what a claim's deletion must not decide on a stale copy: the
	// accesses it fences (holders), and whether its Bucket is gone.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Metrics   *metrics
	// Drivers tells whether a sidecar serves a Bucket's driver (nil: never asked).
	Drivers *driverWatch

	// log reports what the watches cannot return: their map functions' errors.
	log logr.Logger
	// waits holds the claims whose Bucket waits for a sidecar (nil when Drivers is).
	waits *waiting
}

// SetupWithManager registers the reconciler and its watches: a claim waits for its Bucket and its
// BucketClass by watching them, never by returning errors.
func (r *BucketClaimReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	r.log = mgr.GetLogger().WithValues("controller", "bucketclaim")
	wake := predicate.Or[client.Object](
		predicate.And[client.Object](predicates.SpecOrLifecycleChanged, predicate.Not(r.referencePublished())),
		predicates.ProtectionRemoved,
	)
	b := ctrl.NewControllerManagedBy(mgr).
		Named("bucketclaim").
		For(&cosiapi.BucketClaim{}, builder.WithPredicates(wake)).
		Watches(&cosiapi.Bucket{}, handler.EnqueueRequestsFromMapFunc(r.claimsOfBucket),
			builder.WithPredicates(bucketChanged)).
		Watches(&cosiapi.BucketClass{}, handler.EnqueueRequestsFromMapFunc(r.claimsOfClass)).
		// The reference annotation follows the accesses: created, deleting, finalizer gone, gone.
		Watches(&cosiapi.BucketAccess{}, handler.EnqueueRequestsFromMapFunc(claimsOfAccess),
			builder.WithPredicates(accessReferenceChanged)).
		WithOptions(opts)
	if r.Drivers != nil {
		r.waits = newWaiting(r.stillWaiting)
		b = b.WatchesRawSource(r.waits.source())
	}
	return b.Complete(r)
}

// stillWaiting is waiting.still for claims: the status the claim's reconcile would write from the
// cached claim and Bucket (mirror, driverWatch.check). A claim that went, or whose Bucket a
// sidecar picked up, no longer waits.
func (r *BucketClaimReconciler) stillWaiting(ctx context.Context, key types.NamespacedName) (bool, time.Duration) {
	claim := &cosiapi.BucketClaim{}
	if err := r.Client.Get(ctx, key, claim); err != nil {
		return !apierrors.IsNotFound(err), 0
	}
	name := claim.Status.BoundBucketName
	if claim.Spec.ExistingBucketName != "" {
		name = claim.Spec.ExistingBucketName
	}
	b := &cosiapi.Bucket{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, b); name == "" || err != nil {
		// Not in the cache, which lags behind the reconcile that added the claim: the
		// reconcile decides.
		return true, 0
	}
	// What the claim's reconcile would write: its Bucket's status (bind), then the check. A
	// sidecar that runs and has not acted yet takes back WaitingForDriver.
	marked := claim.DeepCopy()
	prev := provisionedBefore(claim)
	if ref := b.Spec.BucketClaimRef; ref.Namespace == claim.Namespace && ref.Name == claim.Name &&
		ref.UID == claim.UID {
		mirror(marked, b)
	}
	again := r.Drivers.check(ctx, marked, b, prev)
	if conditions.Changed(claim.Status.Conditions, marked.Status.Conditions) {
		return true, 0
	}
	return false, again
}

// referencePublished matches the update that only adds has-bucketaccess-references to a claim
// that an access in the cache references: an access's reconcile publishing its reference
// (BucketAccessReconciler.publishReferences), once per new access. The claim's reconcile would
// find the annotation as publishReferences wants it and nothing else changed, so it is not woken;
// the annotation added by someone else to a claim no access references still wakes it, and it
// removes it. Should the accesses go meanwhile, their removal wakes the claim.
func (r *BucketClaimReconciler) referencePublished() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		DeleteFunc: func(event.DeleteEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*cosiapi.BucketClaim), e.ObjectNew.(*cosiapi.BucketClaim)
			key := cosiapi.AnnotationHasBucketAccessReferences
			if _, had := o.Annotations[key]; had || o.Generation != n.Generation ||
				!o.DeletionTimestamp.Equal(n.DeletionTimestamp) {
				return false
			}
			added := maps.Clone(o.Annotations)
			if added == nil {
				added = map[string]string{}
			}
			added[key] = n.Annotations[key]
			if _, has := n.Annotations[key]; !has || !maps.Equal(added, n.Annotations) {
				return false
			}
			refs, err := referencingAccesses(context.Background(), r.Client, n)
			return err == nil && len(refs) > 0
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
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
	if err := index.ClaimsByExistingBucket.List(ctx, r.Client, &claims, "", b.Name); err != nil {
		// A list from the cache fails only when the index is missing: a programming error.
		r.log.Error(err, "listing the static claims of a Bucket", "bucket", b.Name)
	}
	for _, c := range claims.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
	}
	return reqs
}

// accessReferenceChanged passes the access changes that can change whether it holds or names its
// claims and Buckets: a spec change, holdsReference turning false (its finalizer removed while it
// is deleting), the sidecar's refusal for good (refusedForGood, a status change: a claim whose
// deletion waits on the access goes on), its removal. Not its creation: the access's own
// reconcile publishes its reference on its claims before anything else
// (BucketAccessReconciler.publishReferences), and a new access holds no claim or Bucket the
// controller would release. Not the finalizer's addition, nor the start of a deletion that the
// finalizer holds: neither changes holdsReference.
var accessReferenceChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*cosiapi.BucketAccess), e.ObjectNew.(*cosiapi.BucketAccess)
		return o.Generation != n.Generation || holdsReference(o) != holdsReference(n) ||
			refusedForGood(o) != refusedForGood(n)
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
	if err := index.ClaimsByClass.List(ctx, r.Client, &claims, "", o.GetName()); err != nil {
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
		if apierrors.IsNotFound(err) {
			r.waits.remove(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if claim.DeletionTimestamp != nil {
		r.waits.remove(req.NamespacedName)
		return requeue.ResultWithEvent(r.Recorder, claim, cosiapi.EventFailedDeleteBucket, r.delete(ctx, claim))
	}
	again, err := r.reconcile(ctx, claim)
	res, err := requeue.ResultWithEvent(r.Recorder, claim, cosiapi.EventFailedCreateBucket, err)
	switch {
	case err != nil: // its retry decides
	case again > 0:
		r.waits.add(req.NamespacedName, again)
	default:
		r.waits.remove(req.NamespacedName)
	}
	return res, err
}

// reconcile protects the claim, publishes its references, binds it and mirrors its Bucket. It
// returns when to look again at a claim that waits for something it cannot watch (a sidecar):
// waits looks then, and reconciles the claim only if it still waits.
func (r *BucketClaimReconciler) reconcile(ctx context.Context, claim *cosiapi.BucketClaim) (time.Duration, error) {
	// Put back, on every reconcile, what a tenant may have removed.
	if err := patch.AddFinalizer(ctx, r.Client, claim); err != nil {
		return 0, err
	}
	if err := r.publishReferences(ctx, claim); err != nil {
		return 0, err
	}
	status := patch.NewStatus(r.Client, claim, claimConditions...)
	conditions.Init(claim, cosiapi.ConditionProvisionFailed)
	bucket, err := r.bucket(ctx, claim, status)
	if err != nil {
		return 0, err
	}
	var again time.Duration
	if bucket != nil {
		prev := provisionedBefore(claim)
		if err := r.bind(ctx, claim, bucket); err != nil {
			return 0, err
		}
		again = r.Drivers.check(ctx, claim, bucket, prev)
	}
	return again, r.patchStatus(ctx, status, claim, bucket)
}

// publishReferences sets the has-bucketaccess-references annotation while accesses reference the
// claim and removes it when none does (KEP-1979 "Generating Bucket Access Credentials" step 3.5 and
// "Deleting a BucketAccess" step 4.1), derived from the accesses in the cache. It is COSI's
// published view only: the claim's deletion decides from the accesses (holders), and an access
// sets it itself before its hand-off, so a cache that lags here costs nothing.
func (r *BucketClaimReconciler) publishReferences(ctx context.Context, claim *cosiapi.BucketClaim) error {
	refs, err := referencingAccesses(ctx, r.Client, claim)
	if err != nil {
		return err
	}
	if len(refs) > 0 {
		return patch.SetAnnotation(ctx, r.Client, claim, cosiapi.AnnotationHasBucketAccessReferences)
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
	case claim.Spec.ExistingBucketName != "" && claim.Status.BoundBucketName == name:
		// Static, and bound to it: the loss is reported for as long as it lasts (the claim's
		// Provisioned condition stays what the Bucket last said); an admin who creates the
		// Bucket again binds it again.
		conditions.MarkFalse(claim, cosiapi.ConditionResourcesValidated, cosiapi.ReasonInvalidReference,
			missingMessage(name))
		return nil, false, nil
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
			missingMessage(name))
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
		// Final until the Bucket changes: a Bucket reserved for another claim is never taken. The
		// claim's tenant reads this: another namespace's claim is not named (its owner's admin
		// sees it in the Bucket's spec).
		owner := "a BucketClaim of another namespace"
		if ref.Namespace == claim.Namespace {
			owner = "BucketClaim " + ref.Name
			if ref.Name == claim.Name {
				owner = "an earlier BucketClaim of this name"
			}
		}
		msg := fmt.Sprintf("Bucket %s is bound to %s, not to this claim", bucket.Name, owner)
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

// provisionedBefore returns a copy of the claim's Provisioned condition, before mirroring its
// Bucket changes it (driverWatch.check), or nil.
func provisionedBefore(claim *cosiapi.BucketClaim) *metav1.Condition {
	if c := conditions.Get(claim, cosiapi.ConditionProvisioned); c != nil {
		prev := *c
		return &prev
	}
	return nil
}

// wasProvisioned reports whether the claim mirrored a provisioning outcome of its Bucket.
func wasProvisioned(claim *cosiapi.BucketClaim) bool {
	return conditions.IsKnown(claim, cosiapi.ConditionProvisioned)
}

func missingMessage(bucket string) string { return fmt.Sprintf("bound Bucket %s went missing", bucket) }

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
	if pf := becomes(orig, claim, cosiapi.ConditionProvisionFailed, metav1.ConditionTrue); pf != nil {
		reason := cosiapi.EventFailedCreateBucket
		if claim.DeletionTimestamp != nil {
			reason = cosiapi.EventFailedDeleteBucket
		}
		r.Recorder.Eventf(claim, nil, corev1.EventTypeWarning, reason, "Provision", "%s", pf.Message)
	}
	// Waits that the user sees in kubectl describe: once, when they start.
	if c := becomes(orig, claim, cosiapi.ConditionProvisioned, metav1.ConditionUnknown); c != nil &&
		c.Reason == cosiapi.ReasonWaitingForDriver {
		r.Recorder.Eventf(claim, nil, corev1.EventTypeWarning, cosiapi.EventWaitingForDriver, "Provision", "%s", c.Message)
	}
	if c := becomes(orig, claim, cosiapi.ConditionResourcesValidated, metav1.ConditionUnknown); c != nil &&
		c.Reason == cosiapi.ReasonWaitingForResources && claim.Spec.ExistingBucketName == "" &&
		claim.Status.BoundBucketName == "" {
		r.Recorder.Eventf(claim, nil, corev1.EventTypeNormal, cosiapi.EventWaitingForClass, "Bind", "%s", c.Message)
	}
	// A reference that became invalid (the bound Bucket went missing, or is another claim's):
	// once, when it appears, not on every reconcile.
	if rv := becomes(orig, claim, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse); rv != nil &&
		rv.Reason == cosiapi.ReasonInvalidReference {
		r.Recorder.Eventf(claim, nil, corev1.EventTypeWarning, cosiapi.EventFailedCreateBucket, "Bind", "%s", rv.Message)
	}
	if bucket != nil && !conditions.IsTrue(orig, cosiapi.ConditionProvisioned) &&
		conditions.IsTrue(claim, cosiapi.ConditionProvisioned) {
		r.Metrics.created(bucket.Spec.DriverName, "BucketClaim", claim.CreationTimestamp.Time)
	}
	return nil
}

// becomes returns the condition typ of claim when it has status s and did not have it, or had
// another reason or message, in orig: what deserves an event once.
func becomes(orig, claim *cosiapi.BucketClaim, typ string, s metav1.ConditionStatus) *metav1.Condition {
	c := conditions.Get(claim, typ)
	if c == nil || c.Status != s {
		return nil
	}
	if old := conditions.Get(orig, typ); old != nil && old.Status == s && old.Reason == c.Reason &&
		old.Message == c.Message {
		return nil
	}
	return c
}

// delete deletes a claim (KEP-1979 "Deleting a Bucket", step 2): blocked while BucketAccesses
// handed off to the sidecar hold it; then the Bucket is annotated, and deleted with the Delete
// policy, left with Retain. With Delete, the claim stays until its Bucket is gone, so that its
// user sees a driver that fails to delete the bucket (ProvisionFailed and a FailedDeleteBucket
// event, KEP-1979 "Monitoring Requirements").
//
// Whether accesses hold the claim is decided from the accesses (holders), not from the
// annotation, which a tenant can remove: a claim in use is never deleted.
func (r *BucketClaimReconciler) delete(ctx context.Context, claim *cosiapi.BucketClaim) error {
	if !controllerutil.ContainsFinalizer(claim, cosiapi.FinalizerProtection) {
		return nil
	}
	fence := deletingClaimRefusal(claim)
	refs, err := holders(ctx, r.Client, r.APIReader, r.Recorder, claim.Namespace, claim.Name, "", &fence)
	if err != nil {
		return err
	}
	if len(refs) > 0 {
		return r.blockDeletion(ctx, claim, refs)
	}
	bucket, driverName, err := r.releaseBucket(ctx, claim)
	if err != nil {
		return err
	}
	if bucket != nil {
		return r.waitForBucket(ctx, claim, bucket) // its deletion wakes the claim
	}
	provisioned := conditions.IsTrue(claim, cosiapi.ConditionProvisioned)
	if removed, err := patch.FinalizerRemoved(ctx, r.Client, claim); err != nil || !removed {
		return err // not removed: a stale copy of a claim that is gone, counted already
	}
	r.Metrics.deleted(driverName, "BucketClaim", claim.DeletionTimestamp.Time,
		createOutcome(provisioned, driverCalled(claim)))
	return nil
}

// markDeleting sets the claim's Provisioned condition for a deletion that waits: its status stays
// what it was (True, or False for a bucket that failed), so that waiting never flips it.
func markDeleting(claim *cosiapi.BucketClaim, reason, msg string) {
	s := metav1.ConditionUnknown
	if p := conditions.Get(claim, cosiapi.ConditionProvisioned); p != nil {
		s = p.Status
	}
	conditions.Set(claim, cosiapi.ConditionProvisioned, s, reason, msg)
}

// blockDeletion records that the claim's deletion waits for the accesses that hold it, and puts
// back the reference annotation a tenant may have removed.
func (r *BucketClaimReconciler) blockDeletion(ctx context.Context, claim *cosiapi.BucketClaim, refs []string) error {
	if err := patch.SetAnnotation(ctx, r.Client, claim, cosiapi.AnnotationHasBucketAccessReferences); err != nil {
		return err
	}
	status := patch.NewStatus(r.Client, claim, claimConditions...)
	markDeleting(claim, cosiapi.ReasonDeletionBlocked,
		fmt.Sprintf("deletion waits until the BucketAccesses that use this claim are deleted: %v", refs))
	return r.patchStatus(ctx, status, claim, nil)
}

// waitForBucket records that the claim's deletion waits for its Bucket (Delete policy) to be
// deprovisioned, with the Bucket's ProvisionFailed condition: the driver's error when it fails to
// delete the bucket, which patchStatus also reports as a FailedDeleteBucket event.
func (r *BucketClaimReconciler) waitForBucket(
	ctx context.Context, claim *cosiapi.BucketClaim, bucket *cosiapi.Bucket,
) error {
	status := patch.NewStatus(r.Client, claim, claimConditions...)
	msg := fmt.Sprintf("waiting until the driver deletes the bucket of Bucket %s", bucket.Name)
	if p := conditions.Get(bucket, cosiapi.ConditionProvisioned); p != nil && p.Reason == cosiapi.ReasonDeletionBlocked {
		msg = fmt.Sprintf("Bucket %s: %s", bucket.Name, p.Message)
	}
	markDeleting(claim, cosiapi.ReasonDeleting, msg)
	conditions.Mirror(claim, bucket, cosiapi.ConditionProvisionFailed)
	return r.patchStatus(ctx, status, claim, nil)
}

// releaseBucket tells the sidecar that the claim's Bucket may be deprovisioned, and deletes the
// Bucket when its policy is Delete. It returns that Bucket while it exists (the claim waits for
// it), and the Bucket's driver, for the metrics.
func (r *BucketClaimReconciler) releaseBucket(
	ctx context.Context, claim *cosiapi.BucketClaim,
) (deleting *cosiapi.Bucket, driverName string, err error) {
	if name := claim.Status.BoundBucketName; name != "" {
		bucket := &cosiapi.Bucket{}
		// Gone is confirmed live: the claim goes next, and a Bucket created a moment ago may not
		// be in the cache yet.
		gone, err := lookup.ConfirmGone(ctx, r.Client, r.APIReader, types.NamespacedName{Name: name}, bucket,
			func() bool { return true })
		if err != nil {
			return nil, "", err
		}
		ref := bucket.Spec.BucketClaimRef
		if !gone && ref.Namespace == claim.Namespace && ref.Name == claim.Name && (ref.UID == "" || ref.UID == claim.UID) {
			driverName = bucket.Spec.DriverName
			// Tell the sidecar the claim is going: it may now deprovision.
			if err := patch.SetAnnotation(ctx, r.Client, bucket, cosiapi.AnnotationBucketClaimBeingDeleted); err != nil {
				return nil, "", client.IgnoreNotFound(err)
			}
			if bucket.Spec.DeletionPolicy == cosiapi.DeletionPolicyDelete {
				if bucket.DeletionTimestamp == nil {
					err := r.Client.Delete(ctx, bucket, client.Preconditions{UID: &bucket.UID})
					if client.IgnoreNotFound(err) != nil {
						return nil, "", err
					}
				}
				return bucket, driverName, nil
			}
			// Retain: the Bucket and the backend bucket stay, unbound.
		}
		// A Bucket that is gone, or bound to another claim, is not this claim's to touch.
	}
	if driverName == "" {
		// The Bucket went already (an admin, or the claim waited for it): the class, if it is
		// still there, names the driver for the metrics.
		class := &cosiapi.BucketClass{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: claim.Spec.BucketClassName}, class); err == nil {
			driverName = class.Spec.DriverName
		}
	}
	return nil, driverName, nil
}
