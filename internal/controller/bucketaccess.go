package controller

import (
	"context"
	"errors"
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
)

// +kubebuilder:rbac:groups=objectstorage.k8s.io,resources=bucketaccesses,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=objectstorage.k8s.io,resources=bucketaccesses/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=objectstorage.k8s.io,resources=bucketaccessclasses,verbs=get;list;watch

// BucketAccessReconciler validates BucketAccesses against their class and claims, marks the claims
// as referenced, hands each access to its driver's sidecar, and finishes its deletion (KEP-1979
// "Generating Bucket Access Credentials" and "Deleting a BucketAccess", controller steps).
type BucketAccessReconciler struct {
	Client client.Client
	// APIReader reads a claim live before the access is handed off: the hand-off must never
	// follow a stale "not deleting" (see holders).
	APIReader client.Reader
	Recorder  events.EventRecorder
	Metrics   *metrics
	// Drivers tells whether a sidecar serves a handed-off access's driver (nil: never asked).
	Drivers *driverWatch

	// log reports what the watches cannot return: their map functions' errors.
	log logr.Logger
	// waits holds the handed-off accesses that wait for a sidecar (nil when Drivers is).
	waits *waiting
}

// The conditions the controller writes on BucketAccesses: all of them until the hand-off; after
// it the sidecar writes them, and the controller only ResourcesValidated, when a claim goes.
var (
	accessConditions = []string{
		cosiapi.ConditionProvisioned,
		cosiapi.ConditionProvisionFailed,
		cosiapi.ConditionResourcesValidated,
	}
	// After the hand-off, Provisioned is the sidecar's, but for the controller's WaitingForDriver
	// while no sidecar has acted on the access (driverWatch.checkAccess).
	handedOffAccessConditions = []string{cosiapi.ConditionResourcesValidated, cosiapi.ConditionProvisioned}
)

// SetupWithManager registers the reconciler and its watches: an access waits for its claims and
// its class by watching them.
func (r *BucketAccessReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	r.log = mgr.GetLogger().WithValues("controller", "bucketaccess")
	wake := predicate.Or[client.Object](predicates.SpecOrLifecycleChanged, predicates.ProtectionRemoved, deletingChanged)
	b := ctrl.NewControllerManagedBy(mgr).
		Named("bucketaccess").
		For(&cosiapi.BucketAccess{}, builder.WithPredicates(wake)).
		// A claim's changes matter to the accesses not handed off yet; its removal also to those
		// handed off (checkHandedOff).
		Watches(&cosiapi.BucketClaim{}, handler.EnqueueRequestsFromMapFunc(r.waitingAccessesOfClaim),
			builder.WithPredicates(claimChanged)).
		Watches(&cosiapi.BucketClaim{}, handler.EnqueueRequestsFromMapFunc(r.accessesOfClaim),
			builder.WithPredicates(claimRemoved)).
		Watches(&cosiapi.BucketAccessClass{}, handler.EnqueueRequestsFromMapFunc(r.accessesOfClass)).
		// A Bucket bound to a claim (its claim reference's UID set) wakes the accesses waiting for it.
		Watches(&cosiapi.Bucket{}, handler.EnqueueRequestsFromMapFunc(r.accessesOfBucket),
			builder.WithPredicates(bucketBindingChanged)).
		WithOptions(opts)
	if r.Drivers != nil {
		r.waits = newWaiting(r.stillWaiting)
		b = b.WatchesRawSource(r.waits.source())
	}
	return b.Complete(r)
}

// stillWaiting is waiting.still for accesses: the driver check (driverWatch.checkAccess) on the
// cached access. An access that went, or that a sidecar acted on, no longer waits.
func (r *BucketAccessReconciler) stillWaiting(ctx context.Context, key types.NamespacedName) (bool, time.Duration) {
	ba := &cosiapi.BucketAccess{}
	if err := r.Client.Get(ctx, key, ba); err != nil {
		return !apierrors.IsNotFound(err), 0
	}
	if ba.Status.DriverName == "" {
		// Only handed-off accesses wait: the cache lags behind the hand-off. The reconcile
		// decides.
		return true, 0
	}
	marked := ba.DeepCopy()
	again := r.Drivers.checkAccess(ctx, marked)
	if conditions.Changed(ba.Status.Conditions, marked.Status.Conditions) {
		return true, 0
	}
	return false, again
}

// deletingChanged passes the changes of a deleting access that decide whether its deletion may
// finish (releasable): the sidecar's record of its cleanup is in status, which
// SpecOrLifecycleChanged does not pass. The sidecar's other status writes change nothing delete
// reads.
var deletingChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*cosiapi.BucketAccess), e.ObjectNew.(*cosiapi.BucketAccess)
		return n.DeletionTimestamp != nil && releasable(o) != releasable(n)
	},
	DeleteFunc: func(event.DeleteEvent) bool { return false },
}

var bucketBindingChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.(*cosiapi.Bucket).Spec.BucketClaimRef != e.ObjectNew.(*cosiapi.Bucket).Spec.BucketClaimRef
	},
	DeleteFunc: func(event.DeleteEvent) bool { return false },
}

func (r *BucketAccessReconciler) accessesOfBucket(ctx context.Context, o client.Object) []reconcile.Request {
	ref := o.(*cosiapi.Bucket).Spec.BucketClaimRef
	return r.list(ctx, index.AccessesByClaim, index.ClaimKey(ref.Namespace, ref.Name), true)
}

// claimChanged passes claim changes an access waits for: creation, binding, protocols, deletion.
var claimChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*cosiapi.BucketClaim), e.ObjectNew.(*cosiapi.BucketClaim)
		return o.Status.BoundBucketName != n.Status.BoundBucketName ||
			!slices.Equal(o.Status.Protocols, n.Status.Protocols) ||
			!o.DeletionTimestamp.Equal(n.DeletionTimestamp)
	},
	DeleteFunc: func(event.DeleteEvent) bool { return false },
}

// claimRemoved passes a claim's removal only.
var claimRemoved = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	UpdateFunc:  func(event.UpdateEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func (r *BucketAccessReconciler) accessesOfClaim(ctx context.Context, o client.Object) []reconcile.Request {
	return r.list(ctx, index.AccessesByClaim, index.ClaimKey(o.GetNamespace(), o.GetName()), false)
}

// waitingAccessesOfClaim maps a claim to its accesses not handed off: a handed-off access reads
// nothing of its claims but whether they exist.
func (r *BucketAccessReconciler) waitingAccessesOfClaim(ctx context.Context, o client.Object) []reconcile.Request {
	return r.list(ctx, index.AccessesByClaim, index.ClaimKey(o.GetNamespace(), o.GetName()), true)
}

func (r *BucketAccessReconciler) accessesOfClass(ctx context.Context, o client.Object) []reconcile.Request {
	return r.list(ctx, index.AccessesByClass, o.GetName(), true)
}

func (r *BucketAccessReconciler) list(
	ctx context.Context, field index.Field, value string, notHandedOff bool,
) []reconcile.Request {
	var list cosiapi.BucketAccessList
	if err := field.List(ctx, r.Client, &list, "", value); err != nil {
		r.log.Error(err, "listing BucketAccesses to wake", "index", field.Name, "value", value)
		return nil
	}
	var reqs []reconcile.Request
	for _, ba := range list.Items {
		if !notHandedOff || ba.Status.DriverName == "" {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&ba)})
		}
	}
	return reqs
}

// Reconcile handles one BucketAccess.
func (r *BucketAccessReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ba := &cosiapi.BucketAccess{}
	if err := r.Client.Get(ctx, req.NamespacedName, ba); err != nil {
		if apierrors.IsNotFound(err) {
			r.waits.remove(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if ba.DeletionTimestamp != nil {
		r.waits.remove(req.NamespacedName)
		return requeue.ResultWithEvent(r.Recorder, ba, cosiapi.EventFailedRevokeAccess, r.delete(ctx, ba))
	}
	again, err := r.reconcile(ctx, ba)
	res, err := requeue.ResultWithEvent(r.Recorder, ba, cosiapi.EventFailedGrantAccess, err)
	switch {
	case err != nil: // its retry decides
	case again > 0:
		r.waits.add(req.NamespacedName, again)
	default:
		r.waits.remove(req.NamespacedName)
	}
	return res, err
}

// reconcile protects the access and hands it off. It returns when to look again at a handed-off
// access that waits for something it cannot watch (a sidecar of its driver): waits looks then,
// and reconciles the access only if it still waits.
func (r *BucketAccessReconciler) reconcile(ctx context.Context, ba *cosiapi.BucketAccess) (time.Duration, error) {
	// The finalizer first, on every reconcile: it is put back when a tenant removed it, and the
	// status patch below is based on the current version.
	if err := patch.AddFinalizer(ctx, r.Client, ba); err != nil {
		return 0, err
	}
	if ba.Status.DriverName != "" {
		return r.checkHandedOff(ctx, ba)
	}
	status := patch.NewStatus(r.Client, ba, accessConditions...)
	orig := status.Before()
	conditions.Init(ba, cosiapi.ConditionProvisionFailed)
	event, err := r.handOff(ctx, ba)
	if err != nil {
		return 0, err
	}
	if patched, err := status.PatchIfChanged(ctx, patch.OptimisticLock); err != nil || !patched {
		return 0, err
	}
	// An event for each new refusal or wait, not for each reconcile.
	if event != nil && conditions.Changed(orig.Status.Conditions, ba.Status.Conditions) {
		r.Recorder.Eventf(ba, nil, event.eventType, event.reason, "HandOff", "%s", conditions.Truncate(event.message))
	}
	if ba.Status.DriverName != "" && r.Drivers != nil {
		// Handed off: the sidecar's status writes do not wake this reconciler, so it looks
		// whether one acted once the grace period is over.
		return r.Drivers.grace + time.Second, nil
	}
	return 0, nil
}

// handOffEvent is the event a hand-off that did not happen reports.
type handOffEvent struct{ eventType, reason, message string }

// markWaiting records that the access waits for an object the controller watches.
func markWaiting(ba *cosiapi.BucketAccess, msg string) {
	conditions.MarkUnknown(ba, cosiapi.ConditionProvisioned, cosiapi.ReasonWaitingForResources, msg)
	conditions.MarkUnknown(ba, cosiapi.ConditionResourcesValidated, cosiapi.ReasonWaitingForResources, msg)
}

// wait records that the access waits, with an event.
func wait(ba *cosiapi.BucketAccess, msg string) *handOffEvent {
	markWaiting(ba, msg)
	return &handOffEvent{corev1.EventTypeNormal, cosiapi.EventWaitingForBucket, msg}
}

// refusal is why the access is not handed off, final until the access, its class or a claim
// changes: the watches bring it back.
type refusal struct{ reason, msg string }

func (e refusal) Error() string { return e.msg }

// reject records a refusal.
func reject(ba *cosiapi.BucketAccess, no refusal) *handOffEvent {
	conditions.MarkFalse(ba, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioningFailed, no.msg)
	conditions.MarkFalse(ba, cosiapi.ConditionResourcesValidated, no.reason, no.msg)
	return &handOffEvent{corev1.EventTypeWarning, cosiapi.EventFailedGrantAccess, no.msg}
}

// handOff validates the access (KEP-1979 "Generating Bucket Access Credentials", step 3) and, when
// everything is ready, fills in the status the sidecar acts on. Problems end up in the conditions
// of ba, which the caller writes.
//
// It returns the event to record when the access is refused or waits.
func (r *BucketAccessReconciler) handOff(ctx context.Context, ba *cosiapi.BucketAccess) (*handOffEvent, error) {
	live, err := r.publishReferences(ctx, ba)
	if err != nil {
		return nil, err
	}
	class := &cosiapi.BucketAccessClass{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: ba.Spec.BucketAccessClassName}, class); err != nil {
		if apierrors.IsNotFound(err) {
			msg := fmt.Sprintf("BucketAccessClass %s does not exist", ba.Spec.BucketAccessClassName)
			markWaiting(ba, msg)
			return &handOffEvent{corev1.EventTypeNormal, cosiapi.EventWaitingForClass, msg}, nil
		}
		return nil, err
	}
	if msg := forbiddenByClass(ba, class); msg != "" {
		return reject(ba, refusal{cosiapi.ReasonForbiddenByClass, msg}), nil
	}
	accessed, waiting, err := r.accessedBuckets(ctx, ba, class, live)
	var no refusal
	switch {
	case errors.As(err, &no):
		return reject(ba, no), nil
	case err != nil:
		return nil, err
	case len(waiting) > 0:
		return wait(ba, fmt.Sprintf("waiting: %v", waiting)), nil
	}

	// Hand off: copy what the sidecar needs, so that it works even if the class changes later.
	ba.Status.AccessedBuckets = accessed
	ba.Status.DriverName = class.Spec.DriverName
	ba.Status.AuthenticationType = class.Spec.AuthenticationType
	if ba.Status.AuthenticationType == "" {
		ba.Status.AuthenticationType = cosiapi.AuthenticationTypeKey
	}
	ba.Status.Parameters = maps.Clone(class.Spec.Parameters)
	conditions.MarkTrue(ba, cosiapi.ConditionResourcesValidated, cosiapi.ReasonValid, "")
	conditions.MarkUnknown(ba, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioning,
		handedOffMessage+class.Spec.DriverName)
	return nil, nil
}

// publishReferences sets the has-bucketaccess-references annotation on each claim of the access
// that exists and lacks it (KEP-1979 "Generating Bucket Access Credentials" step 3.5), on every
// reconcile before the hand-off, whether the access then waits, is refused or is handed off: the
// claim's reconciler is not woken by an access's creation (accessReferenceChanged), this is where a
// new access is published. It returns the claims it patched: live copies, read after the access
// was (the patch's response).
func (r *BucketAccessReconciler) publishReferences(
	ctx context.Context, ba *cosiapi.BucketAccess,
) (map[string]*cosiapi.BucketClaim, error) {
	live := map[string]*cosiapi.BucketClaim{}
	for _, ref := range ba.Spec.BucketClaims {
		claim := &cosiapi.BucketClaim{}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ba.Namespace, Name: ref.BucketClaimName},
			claim); err != nil {
			if apierrors.IsNotFound(err) {
				continue // its creation wakes the access
			}
			return nil, err
		}
		if _, published := claim.Annotations[cosiapi.AnnotationHasBucketAccessReferences]; published {
			continue
		}
		if err := patch.SetAnnotation(ctx, r.Client, claim, cosiapi.AnnotationHasBucketAccessReferences); err != nil {
			return nil, err
		}
		live[claim.Name] = claim
	}
	return live, nil
}

// accessedBuckets returns the Buckets of the access's claims, or what they wait for, or a refusal
// (as the error). live are the claims read live since the access was (publishReferences).
func (r *BucketAccessReconciler) accessedBuckets(
	ctx context.Context,
	ba *cosiapi.BucketAccess,
	class *cosiapi.BucketAccessClass,
	live map[string]*cosiapi.BucketClaim,
) (
	accessed []cosiapi.AccessedBucket, waiting []string, err error,
) {
	for _, ref := range ba.Spec.BucketClaims {
		ab, waitingFor, err := r.accessedBucket(ctx, ba, class, ref.BucketClaimName, live[ref.BucketClaimName])
		if err != nil {
			return nil, nil, err
		}
		if waitingFor != "" {
			waiting = append(waiting, waitingFor)
			continue
		}
		accessed = append(accessed, *ab)
	}
	return accessed, waiting, nil
}

// accessedBucket checks one claim of the access and returns its Bucket, or what it waits for, or a
// refusal (as the error).
func (r *BucketAccessReconciler) accessedBucket(
	ctx context.Context,
	ba *cosiapi.BucketAccess,
	class *cosiapi.BucketAccessClass,
	claimName string,
	live *cosiapi.BucketClaim,
) (
	*cosiapi.AccessedBucket, string, error,
) {
	claim := live
	if claim == nil {
		claim = &cosiapi.BucketClaim{}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ba.Namespace, Name: claimName}, claim); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, "BucketClaim " + claimName + " does not exist", nil
			}
			return nil, "", err
		}
	}
	// Publish the reference (KEP-1979 step 3.5), then check that the claim is not being deleted
	// (step 3.7) on a live copy read after this access was: the object the annotation's patch
	// returned (live, from publishReferences), or an uncached read. A claim's deletion fences the
	// accesses it finds not handed off, with a write locked to their version (holders): either it
	// fences this access before the hand-off lands, and the hand-off conflicts, or this read sees
	// it deleting.
	_, published := claim.Annotations[cosiapi.AnnotationHasBucketAccessReferences]
	switch {
	case live != nil:
	case published:
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, "BucketClaim " + claimName + " does not exist", nil
			}
			return nil, "", err
		}
	default:
		if err := patch.SetAnnotation(ctx, r.Client, claim, cosiapi.AnnotationHasBucketAccessReferences); err != nil {
			return nil, "", err
		}
	}
	if claim.DeletionTimestamp != nil {
		return nil, "", deletingClaimRefusal(claim)
	}
	if claim.Status.BoundBucketName == "" {
		return nil, "BucketClaim " + claim.Name + " is not bound yet", nil
	}
	if len(claim.Status.Protocols) > 0 && !slices.Contains(claim.Status.Protocols, ba.Spec.Protocol) {
		return nil, "", refusal{
			cosiapi.ReasonUnsupportedProtocol,
			fmt.Sprintf("BucketClaim %s supports %v, not %s", claim.Name, claim.Status.Protocols, ba.Spec.Protocol),
		}
	}
	bucket := &cosiapi.Bucket{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: claim.Status.BoundBucketName}, bucket); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "Bucket " + claim.Status.BoundBucketName + " of BucketClaim " + claim.Name + " does not exist", nil
		}
		return nil, "", err
	}
	// Verify that the claim is bound to the Bucket (KEP-1979 step 3.6), with the claim's UID:
	// the sidecar checks the same before granting.
	switch ref := bucket.Spec.BucketClaimRef; {
	case ref.Namespace != claim.Namespace || ref.Name != claim.Name || (ref.UID != "" && ref.UID != claim.UID):
		return nil, "", refusal{
			cosiapi.ReasonInvalidReference,
			fmt.Sprintf("Bucket %s is not bound to BucketClaim %s", bucket.Name, claim.Name),
		}
	case ref.UID == "":
		return nil, "Bucket " + bucket.Name + " is not bound to BucketClaim " + claim.Name + " yet", nil
	}
	if bucket.Spec.DriverName != class.Spec.DriverName {
		return nil, "", refusal{
			cosiapi.ReasonInvalidReference,
			fmt.Sprintf("BucketClaim %s is served by driver %s; BucketAccessClass %s uses driver %s",
				claim.Name, bucket.Spec.DriverName, class.Name, class.Spec.DriverName),
		}
	}
	return &cosiapi.AccessedBucket{
		BucketClaimName: claim.Name,
		BucketName:      bucket.Name,
		BucketID:        bucket.Status.BucketID,
	}, "", nil
}

// forbiddenByClass returns why the class forbids the access, or "".
func forbiddenByClass(ba *cosiapi.BucketAccess, class *cosiapi.BucketAccessClass) string {
	if len(ba.Spec.BucketClaims) > 1 && class.Spec.MultiBucketAccess != cosiapi.MultiBucketAccessMultipleBuckets {
		return fmt.Sprintf(
			"BucketAccessClass %s allows one BucketClaim per BucketAccess (multiBucketAccess is not MultipleBuckets); "+
				"this access references %d",
			class.Name,
			len(ba.Spec.BucketClaims),
		)
	}
	if class.Spec.AuthenticationType == cosiapi.AuthenticationTypeServiceAccount && ba.Spec.ServiceAccountName == "" {
		return fmt.Sprintf("BucketAccessClass %s uses ServiceAccount authentication: set spec.serviceAccountName", class.Name)
	}
	d := class.Spec.DisallowedBucketAccessModes
	for _, ref := range ba.Spec.BucketClaims {
		m := ref.AccessModes
		for _, c := range []struct {
			name       string
			mode       cosiapi.BucketAccessMode
			disallowed []cosiapi.BucketAccessMode
		}{
			{"objectData", m.ObjectData, d.ObjectData},
			{"objectMetadata", m.ObjectMetadata, d.ObjectMetadata},
			{"bucketMetadata", m.BucketMetadata, d.BucketMetadata},
		} {
			if c.mode != "" && slices.Contains(c.disallowed, c.mode) {
				return fmt.Sprintf("BucketAccessClass %s does not allow %s access mode %s (BucketClaim %s)", class.Name, c.name,
					c.mode, ref.BucketClaimName)
			}
		}
	}
	return ""
}

// checkHandedOff reports claims that went missing after the hand-off (ResourcesValidated False),
// and a driver that no sidecar serves while none has acted on the access (Provisioned Unknown,
// WaitingForDriver). It returns when to look again for a sidecar.
func (r *BucketAccessReconciler) checkHandedOff(ctx context.Context, ba *cosiapi.BucketAccess) (time.Duration, error) {
	status := patch.NewStatus(r.Client, ba, handedOffAccessConditions...)
	orig := status.Before()
	var missing []string
	for _, ref := range ba.Spec.BucketClaims {
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: ba.Namespace, Name: ref.BucketClaimName},
			&cosiapi.BucketClaim{})
		if apierrors.IsNotFound(err) {
			missing = append(missing, ref.BucketClaimName)
		} else if err != nil {
			return 0, err
		}
	}
	if len(missing) > 0 {
		conditions.MarkFalse(ba, cosiapi.ConditionResourcesValidated, cosiapi.ReasonInvalidReference,
			fmt.Sprintf("BucketClaims %v went missing after provisioning", missing))
	}
	again := r.Drivers.checkAccess(ctx, ba)
	// Locked to the version read: a sidecar that acted since then wrote Provisioned, which
	// WaitingForDriver must not overwrite.
	if patched, err := status.PatchIfChanged(ctx, patch.OptimisticLock); err != nil || !patched {
		return again, err
	}
	if c := conditions.Get(ba, cosiapi.ConditionProvisioned); c != nil && c.Reason == cosiapi.ReasonWaitingForDriver &&
		conditions.Changed(orig.Status.Conditions, ba.Status.Conditions) {
		if o := conditions.Get(orig, cosiapi.ConditionProvisioned); o == nil || o.Reason != cosiapi.ReasonWaitingForDriver {
			r.Recorder.Eventf(ba, nil, corev1.EventTypeWarning, cosiapi.EventWaitingForDriver, "Grant", "%s", c.Message)
		}
	}
	return again, nil
}

// delete finishes a BucketAccess's deletion once the sidecar has cleaned up (KEP-1979 "Deleting a
// BucketAccess", step 4): the finalizer goes, and the claims, reconciled by the access watch,
// lose their reference annotation when no other access references them.
//
// The sidecar's annotation is not enough: a tenant can set it on their own access. The sidecar
// also records the revocation in status (Provisioned False, ReasonRevoked), which a tenant cannot
// write, and that is what the controller waits for.
func (r *BucketAccessReconciler) delete(ctx context.Context, ba *cosiapi.BucketAccess) error {
	if !controllerutil.ContainsFinalizer(ba, cosiapi.FinalizerProtection) {
		return nil
	}
	if !releasable(ba) {
		return nil // the sidecar revokes first; its status and annotation wake this reconciler
	}
	// Handed off, but phase 1 never recorded an account: nothing was granted (the account ID is
	// persisted before the grant), no Secret was written, and the sidecar has nothing to clean
	// up, or there is no sidecar for the driver at all. The finalizer goes without waiting for
	// it, locked to the version read: a phase 1 recorded since then makes the removal conflict,
	// and the next pass waits for the sidecar.
	// Provisioned is False (Revoked) by now: whether the grant ever succeeded shows in
	// ProvisionFailed, set False by the sidecar's successful grant.
	granted := conditions.Has(ba, cosiapi.ConditionProvisionFailed, metav1.ConditionFalse, cosiapi.ReasonDriverSucceeded)
	outcome := createOutcome(granted, ba.Status.AccountID != "" || driverCalled(ba))
	if removed, err := patch.FinalizerRemoved(ctx, r.Client, ba); err != nil || !removed {
		return err // not removed: a stale copy of an access that is gone, counted already
	}
	r.Metrics.deleted(ba.Status.DriverName, "BucketAccess", ba.DeletionTimestamp.Time, outcome)
	return nil
}

// releasable reports whether a deleting access's finalizer may go: it was never handed off, or
// the sidecar has finished its cleanup, or phase 1 recorded no account (see delete).
func releasable(ba *cosiapi.BucketAccess) bool {
	return ba.Status.DriverName == "" || sidecarFinished(ba) || ba.Status.AccountID == ""
}

// sidecarFinished reports whether the sidecar has deleted the access's Secrets and revoked it.
func sidecarFinished(ba *cosiapi.BucketAccess) bool {
	_, annotated := ba.Annotations[cosiapi.AnnotationSidecarCleanupFinished]
	return annotated && conditions.Has(ba, cosiapi.ConditionProvisioned, metav1.ConditionFalse, cosiapi.ReasonRevoked)
}
