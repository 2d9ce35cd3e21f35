package controller

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"

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
	"github.com/kube-cosi/cosi/internal/apiutil"
)

// +kubebuilder:rbac:groups=objectstorage.k8s.io,resources=bucketaccesses,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=objectstorage.k8s.io,resources=bucketaccesses/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=objectstorage.k8s.io,resources=bucketaccessclasses,verbs=get;list;watch

// BucketAccessReconciler validates BucketAccesses against their class and claims, marks the claims
// as referenced, hands each access to its driver's sidecar, and finishes its deletion (KEP-1979
// "Generating Bucket Access Credentials" and "Deleting a BucketAccess", controller steps).
type BucketAccessReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Metrics  *metrics
}

// SetupWithManager registers the reconciler and its watches: an access waits for its claims and
// its class by watching them.
func (r *BucketAccessReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("bucketaccess").
		For(&cosiapi.BucketAccess{}, builder.WithPredicates(apiutil.SpecOrLifecycleChanged)).
		Watches(&cosiapi.BucketClaim{}, handler.EnqueueRequestsFromMapFunc(r.accessesOfClaim), builder.WithPredicates(claimChanged)).
		Watches(&cosiapi.BucketAccessClass{}, handler.EnqueueRequestsFromMapFunc(r.accessesOfClass)).
		WithOptions(opts).
		Complete(r)
}

// claimChanged passes claim changes an access waits for: binding, protocols, deletion.
var claimChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*cosiapi.BucketClaim), e.ObjectNew.(*cosiapi.BucketClaim)
		return o.Status.BoundBucketName != n.Status.BoundBucketName || !slices.Equal(o.Status.Protocols, n.Status.Protocols) ||
			!o.DeletionTimestamp.Equal(n.DeletionTimestamp)
	},
}

func (r *BucketAccessReconciler) accessesOfClaim(ctx context.Context, o client.Object) []reconcile.Request {
	return r.list(ctx, client.MatchingFields{indexAccessesByClaim: o.GetNamespace() + "/" + o.GetName()}, false)
}

func (r *BucketAccessReconciler) accessesOfClass(ctx context.Context, o client.Object) []reconcile.Request {
	return r.list(ctx, client.MatchingFields{indexAccessesByClass: o.GetName()}, true)
}

func (r *BucketAccessReconciler) list(ctx context.Context, sel client.MatchingFields, notHandedOff bool) []reconcile.Request {
	var list cosiapi.BucketAccessList
	if err := r.Client.List(ctx, &list, sel); err != nil {
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
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if ba.DeletionTimestamp != nil {
		return apiutil.Result(r.delete(ctx, ba))
	}
	if ba.Status.DriverName != "" {
		return apiutil.Result(r.checkHandedOff(ctx, ba))
	}
	// The finalizer first, so that the status patch below is based on the current version.
	if err := apiutil.AddFinalizer(ctx, r.Client, ba); err != nil {
		return apiutil.Result(err)
	}
	orig := ba.DeepCopy()
	if err := r.handOff(ctx, ba); err != nil {
		return apiutil.Result(err)
	}
	if reflect.DeepEqual(orig.Status, ba.Status) {
		return reconcile.Result{}, nil
	}
	return apiutil.Result(r.Client.Status().Patch(ctx, ba, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})))
}

// handOff validates the access and, when everything is ready, fills in the status the sidecar
// acts on. Problems end up in the conditions of ba, which the caller writes.
func (r *BucketAccessReconciler) handOff(ctx context.Context, ba *cosiapi.BucketAccess) error {
	g := ba.Generation
	wait := func(msg string) {
		apiutil.SetCondition(&ba.Status.Conditions, g, cosiapi.ConditionProvisioned, metav1.ConditionUnknown, cosiapi.ReasonWaitingForResources, msg)
		apiutil.SetCondition(&ba.Status.Conditions, g, cosiapi.ConditionResourcesValidated, metav1.ConditionUnknown, cosiapi.ReasonWaitingForResources, msg)
	}
	reject := func(reason, msg string) {
		// Final until the access, its class or a claim changes: the watches bring it back.
		apiutil.SetCondition(&ba.Status.Conditions, g, cosiapi.ConditionProvisioned, metav1.ConditionFalse, cosiapi.ReasonProvisioningFailed, msg)
		apiutil.SetCondition(&ba.Status.Conditions, g, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse, reason, msg)
	}

	class := &cosiapi.BucketAccessClass{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: ba.Spec.BucketAccessClassName}, class); err != nil {
		if apierrors.IsNotFound(err) {
			wait(fmt.Sprintf("BucketAccessClass %s does not exist", ba.Spec.BucketAccessClassName))
			return nil
		}
		return err
	}
	if msg := forbiddenByClass(ba, class); msg != "" {
		reject(cosiapi.ReasonForbiddenByClass, msg)
		return nil
	}

	var accessed []cosiapi.AccessedBucket
	var waiting []string
	for _, ref := range ba.Spec.BucketClaims {
		claim := &cosiapi.BucketClaim{}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ba.Namespace, Name: ref.BucketClaimName}, claim); err != nil {
			if apierrors.IsNotFound(err) {
				waiting = append(waiting, "BucketClaim "+ref.BucketClaimName+" does not exist")
				continue
			}
			return err
		}
		if claim.DeletionTimestamp != nil {
			reject(cosiapi.ReasonInvalidReference, fmt.Sprintf("BucketClaim %s is being deleted: no new access is granted to it", claim.Name))
			return nil
		}
		// Block the claim's deletion while this access exists (KEP-1979 step 3.5).
		if err := apiutil.SetAnnotation(ctx, r.Client, claim, cosiapi.AnnotationHasBucketAccessReferences); err != nil {
			return err
		}
		if claim.Status.BoundBucketName == "" {
			waiting = append(waiting, "BucketClaim "+claim.Name+" is not bound yet")
			continue
		}
		if len(claim.Status.Protocols) > 0 && !slices.Contains(claim.Status.Protocols, ba.Spec.Protocol) {
			reject(cosiapi.ReasonUnsupportedProtocol, fmt.Sprintf("BucketClaim %s supports %v, not %s", claim.Name, claim.Status.Protocols, ba.Spec.Protocol))
			return nil
		}
		bucket := &cosiapi.Bucket{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: claim.Status.BoundBucketName}, bucket); err != nil {
			if apierrors.IsNotFound(err) {
				waiting = append(waiting, "Bucket "+claim.Status.BoundBucketName+" of BucketClaim "+claim.Name+" does not exist")
				continue
			}
			return err
		}
		if bucket.Spec.DriverName != class.Spec.DriverName {
			reject(cosiapi.ReasonInvalidReference, fmt.Sprintf("BucketClaim %s is served by driver %s; BucketAccessClass %s uses driver %s",
				claim.Name, bucket.Spec.DriverName, class.Name, class.Spec.DriverName))
			return nil
		}
		accessed = append(accessed, cosiapi.AccessedBucket{BucketClaimName: claim.Name, BucketName: bucket.Name, BucketID: bucket.Status.BucketID})
	}
	if len(waiting) > 0 {
		wait(fmt.Sprintf("waiting: %v", waiting))
		return nil
	}

	// Hand off: copy what the sidecar needs, so that it works even if the class changes later.
	ba.Status.AccessedBuckets = accessed
	ba.Status.DriverName = class.Spec.DriverName
	ba.Status.AuthenticationType = class.Spec.AuthenticationType
	if ba.Status.AuthenticationType == "" {
		ba.Status.AuthenticationType = cosiapi.AuthenticationTypeKey
	}
	ba.Status.Parameters = maps.Clone(class.Spec.Parameters)
	apiutil.SetCondition(&ba.Status.Conditions, g, cosiapi.ConditionResourcesValidated, metav1.ConditionTrue, cosiapi.ReasonValid, "")
	apiutil.SetCondition(&ba.Status.Conditions, g, cosiapi.ConditionProvisioned, metav1.ConditionUnknown, cosiapi.ReasonProvisioning, "handed off to driver "+class.Spec.DriverName)
	return nil
}

// forbiddenByClass returns why the class forbids the access, or "".
func forbiddenByClass(ba *cosiapi.BucketAccess, class *cosiapi.BucketAccessClass) string {
	if len(ba.Spec.BucketClaims) > 1 && class.Spec.MultiBucketAccess != cosiapi.MultiBucketAccessMultipleBuckets {
		return fmt.Sprintf("BucketAccessClass %s allows one BucketClaim per BucketAccess (multiBucketAccess is not MultipleBuckets); this access references %d",
			class.Name, len(ba.Spec.BucketClaims))
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
				return fmt.Sprintf("BucketAccessClass %s does not allow %s access mode %s (BucketClaim %s)", class.Name, c.name, c.mode, ref.BucketClaimName)
			}
		}
	}
	return ""
}

// checkHandedOff reports claims that went missing after the hand-off (ResourcesValidated False).
func (r *BucketAccessReconciler) checkHandedOff(ctx context.Context, ba *cosiapi.BucketAccess) error {
	orig := ba.DeepCopy()
	var missing []string
	for _, ref := range ba.Spec.BucketClaims {
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: ba.Namespace, Name: ref.BucketClaimName}, &cosiapi.BucketClaim{})
		if apierrors.IsNotFound(err) {
			missing = append(missing, ref.BucketClaimName)
		} else if err != nil {
			return err
		}
	}
	if len(missing) == 0 {
		return nil
	}
	apiutil.SetCondition(&ba.Status.Conditions, ba.Generation, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse, cosiapi.ReasonInvalidReference,
		fmt.Sprintf("BucketClaims %v went missing after provisioning", missing))
	if !apiutil.ConditionsChanged(orig.Status.Conditions, ba.Status.Conditions) {
		return nil
	}
	return r.Client.Status().Patch(ctx, ba, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}

// delete finishes a BucketAccess's deletion once the sidecar has cleaned up (KEP-1979 "Deleting a
// BucketAccess", step 4): the claims lose their reference annotation when no other access
// references them, then the finalizer goes.
func (r *BucketAccessReconciler) delete(ctx context.Context, ba *cosiapi.BucketAccess) error {
	if !controllerutil.ContainsFinalizer(ba, cosiapi.FinalizerProtection) {
		return nil
	}
	if ba.Status.DriverName != "" && ba.Annotations[cosiapi.AnnotationSidecarCleanupFinished] == "" {
		return nil // the sidecar revokes first; its annotation wakes this reconciler
	}
	for _, ref := range ba.Spec.BucketClaims {
		var others cosiapi.BucketAccessList
		if err := r.Client.List(ctx, &others, client.InNamespace(ba.Namespace), client.MatchingFields{indexAccessesByClaim: ba.Namespace + "/" + ref.BucketClaimName}); err != nil {
			return err
		}
		if slices.ContainsFunc(others.Items, func(o cosiapi.BucketAccess) bool { return o.UID != ba.UID }) {
			continue
		}
		claim := &cosiapi.BucketClaim{}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ba.Namespace, Name: ref.BucketClaimName}, claim); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return err
		}
		if err := apiutil.RemoveAnnotation(ctx, r.Client, claim, cosiapi.AnnotationHasBucketAccessReferences); err != nil {
			return err
		}
	}
	provisioned := apiutil.IsTrue(ba.Status.Conditions, cosiapi.ConditionProvisioned)
	if err := apiutil.RemoveFinalizer(ctx, r.Client, ba); err != nil {
		return err
	}
	r.Metrics.deleted(ba.Status.DriverName, "BucketAccess", ba.DeletionTimestamp.Time, provisioned)
	return nil
}
