package controller

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/apiutil"
)

// BucketReconciler handles Buckets an admin deletes: their deprovisioning may start only when
// the bound claim is deleting or gone (KEP-1979 "Deleting a Bucket"), which the sidecar cannot
// see, so the controller tells it with the bucketclaim-being-deleted annotation. It also observes
// the Bucket and BucketAccess transitions for the operation metrics.
type BucketReconciler struct {
	Client  client.Client
	Metrics *metrics
}

// SetupWithManager registers the reconciler for deleted Buckets, woken also when their claim
// goes, and the metric observers.
func (r *BucketReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	if err := r.observe(mgr); err != nil {
		return err
	}
	deleting := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetDeletionTimestamp() != nil && o.GetAnnotations()[cosiapi.AnnotationBucketClaimBeingDeleted] == ""
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("bucket").
		For(&cosiapi.Bucket{}, builder.WithPredicates(deleting)).
		Watches(&cosiapi.BucketClaim{}, handler.EnqueueRequestsFromMapFunc(boundBucket), builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return false },
			UpdateFunc: func(e event.UpdateEvent) bool { return e.ObjectNew.GetDeletionTimestamp() != nil },
		})).
		WithOptions(opts).
		Complete(r)
}

func boundBucket(_ context.Context, o client.Object) []reconcile.Request {
	if name := o.(*cosiapi.BucketClaim).Status.BoundBucketName; name != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: name}}}
	}
	return nil
}

// Reconcile annotates a deleted Bucket whose claim is deleting, gone, or another claim by now.
func (r *BucketReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	bucket := &cosiapi.Bucket{}
	if err := r.Client.Get(ctx, req.NamespacedName, bucket); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if bucket.DeletionTimestamp == nil || bucket.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted] != "" {
		return reconcile.Result{}, nil
	}
	ref := bucket.Spec.BucketClaimRef
	claim := &cosiapi.BucketClaim{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, claim)
	if client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, err
	}
	claimGone := apierrors.IsNotFound(err) || (ref.UID != "" && claim.UID != ref.UID)
	if !claimGone && claim.DeletionTimestamp == nil {
		return reconcile.Result{}, nil // the claim still uses it: wait (the claim watch wakes this)
	}
	return apiutil.Result(apiutil.SetAnnotation(ctx, r.Client, bucket, cosiapi.AnnotationBucketClaimBeingDeleted))
}

// observe records the create and delete metrics of Buckets and BucketAccesses, whose Provisioned
// condition and finalizers the sidecar sets: it watches their transitions in the cache.
func (r *BucketReconciler) observe(mgr ctrl.Manager) error {
	ctx := context.Background()
	for _, kind := range []struct {
		obj      client.Object
		name     string
		driver   func(client.Object) string
		conds    func(client.Object) bool
		onDelete bool
	}{
		{&cosiapi.Bucket{}, "Bucket", func(o client.Object) string { return o.(*cosiapi.Bucket).Spec.DriverName },
			func(o client.Object) bool {
				return apiutil.IsTrue(o.(*cosiapi.Bucket).Status.Conditions, cosiapi.ConditionProvisioned)
			}, true},
		{&cosiapi.BucketAccess{}, "BucketAccess", func(o client.Object) string { return o.(*cosiapi.BucketAccess).Status.DriverName },
			func(o client.Object) bool {
				return apiutil.IsTrue(o.(*cosiapi.BucketAccess).Status.Conditions, cosiapi.ConditionProvisioned)
			}, false},
	} {
		informer, err := mgr.GetCache().GetInformer(ctx, kind.obj)
		if err != nil {
			return err
		}
		_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			UpdateFunc: func(oldObj, newObj any) {
				o, n := oldObj.(client.Object), newObj.(client.Object)
				if !kind.conds(o) && kind.conds(n) && n.GetDeletionTimestamp() == nil {
					r.Metrics.created(kind.driver(n), kind.name, n.GetCreationTimestamp().Time)
				}
			},
			DeleteFunc: func(obj any) {
				if !kind.onDelete {
					return // BucketAccess deletion is observed where the controller removes its finalizer
				}
				if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
					obj = tomb.Obj
				}
				o, ok := obj.(client.Object)
				if !ok {
					return
				}
				since := time.Now()
				if ts := o.GetDeletionTimestamp(); ts != nil {
					since = ts.Time
				}
				r.Metrics.deleted(kind.driver(o), kind.name, since, kind.conds(o))
			},
		})
		if err != nil {
			return err
		}
	}
	return nil
}
