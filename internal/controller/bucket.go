package controller

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/kube/lookup"
	"github.com/kube-cosi/cosi/internal/kube/patch"
	"github.com/kube-cosi/cosi/internal/kube/predicates"
	"github.com/kube-cosi/cosi/internal/kube/requeue"
)

// BucketReconciler releases Buckets for deprovisioning: a Bucket may be deprovisioned only when
// its bound claim is deleting or gone (KEP-1979 "Deleting a Bucket"), which the sidecar cannot see,
// so the controller tells it with the bucketclaim-being-deleted annotation. A claim's own deletion
// does that for its Bucket (BucketClaimReconciler.delete); this reconciler handles the Buckets whose
// claim is gone without it: an admin deleted the Bucket of a claim that later went, or someone
// removed the claim's finalizer. It also observes, on the leader only, the Bucket and BucketAccess
// transitions for the operation metrics.
type BucketReconciler struct {
	Client client.Client
	// APIReader confirms, uncached, that a claim is gone before its Bucket is released (the
	// cache may lag behind a claim created a moment ago), and reads live the accesses of that
	// claim that the cache shows not handed off (holders).
	APIReader client.Reader
	Recorder  events.EventRecorder
	Metrics   *metrics
}

// SetupWithManager registers the reconciler for Buckets that are deleting or bound, woken also
// when their claim or an access holding them goes, and the metric observers.
func (r *BucketReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	if err := r.observe(mgr); err != nil {
		return err
	}
	candidate := predicate.NewPredicateFuncs(func(o client.Object) bool {
		b := o.(*cosiapi.Bucket)
		_, released := b.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted]
		return !released && (b.DeletionTimestamp != nil || b.Spec.BucketClaimRef.UID != "")
	})
	// Nothing release reads is in the status or the finalizers, which the sidecar writes two or
	// three times per Bucket: SpecOrLifecycleChanged drops those updates.
	return ctrl.NewControllerManagedBy(mgr).
		Named("bucket").
		For(&cosiapi.Bucket{}, builder.WithPredicates(candidate, predicates.SpecOrLifecycleChanged)).
		Watches(&cosiapi.BucketClaim{}, handler.EnqueueRequestsFromMapFunc(bucketsOfClaim),
			builder.WithPredicates(claimRemoved)).
		Watches(&cosiapi.BucketAccess{}, handler.EnqueueRequestsFromMapFunc(bucketsOfAccess),
			builder.WithPredicates(accessReferenceChanged)).
		WithOptions(opts).
		Complete(r)
}

func bucketsOfClaim(_ context.Context, o client.Object) []reconcile.Request {
	c := o.(*cosiapi.BucketClaim)
	var reqs []reconcile.Request
	for _, name := range []string{c.Status.BoundBucketName, c.Spec.ExistingBucketName} {
		if name != "" {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
		}
	}
	return reqs
}

func bucketsOfAccess(_ context.Context, o client.Object) []reconcile.Request {
	var reqs []reconcile.Request
	for _, b := range o.(*cosiapi.BucketAccess).Status.AccessedBuckets {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: b.BucketName}})
	}
	return reqs
}

// Reconcile releases a Bucket whose claim is gone once no access holds it: it annotates it, and
// deletes it when its policy is Delete.
func (r *BucketReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	bucket := &cosiapi.Bucket{}
	if err := r.Client.Get(ctx, req.NamespacedName, bucket); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	return requeue.ResultWithEvent(r.Recorder, bucket, cosiapi.EventFailedDeleteBucket, r.release(ctx, bucket))
}

func (r *BucketReconciler) release(ctx context.Context, bucket *cosiapi.Bucket) error {
	if _, released := bucket.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted]; released {
		return nil
	}
	if bucket.DeletionTimestamp == nil && bucket.Spec.BucketClaimRef.UID == "" {
		return nil // an unbound static Bucket waits for its claim
	}
	if gone, err := r.claimGone(ctx, bucket); err != nil || !gone {
		// A claim that exists, deleting or not, releases its Bucket itself when it goes.
		return err
	}
	ref := bucket.Spec.BucketClaimRef
	users, err := holders(ctx, r.Client, r.APIReader, r.Recorder, ref.Namespace, ref.Name, bucket.Name, nil)
	if err != nil || len(users) > 0 {
		return err // the access watch wakes this when they go
	}
	if err := patch.SetAnnotation(ctx, r.Client, bucket, cosiapi.AnnotationBucketClaimBeingDeleted); err != nil {
		return err
	}
	if bucket.Spec.DeletionPolicy != cosiapi.DeletionPolicyDelete || bucket.DeletionTimestamp != nil {
		return nil
	}
	return client.IgnoreNotFound(r.Client.Delete(ctx, bucket, client.Preconditions{UID: &bucket.UID}))
}

// claimGone reports whether the Bucket's claim no longer exists: not found, or another claim of
// the same name. The cache answers "it exists"; "gone" is confirmed uncached, because a claim
// created a moment ago may not be in the cache yet.
func (r *BucketReconciler) claimGone(ctx context.Context, bucket *cosiapi.Bucket) (bool, error) {
	ref := bucket.Spec.BucketClaimRef
	claim := &cosiapi.BucketClaim{}
	return lookup.ConfirmGone(ctx, r.Client, r.APIReader, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name},
		claim, func() bool { return ref.UID == "" || claim.UID == ref.UID })
}

// observe records the create and delete metrics of Buckets and BucketAccesses, whose Provisioned
// condition and finalizers the sidecar sets: it watches their transitions in the cache. Every
// replica has the cache, and the metrics are counted once per cluster, so the observers run on
// the leader only: they are added when it is elected, and removed when it stops.
func (r *BucketReconciler) observe(mgr ctrl.Manager) error {
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		var added []func() error
		defer func() {
			for _, remove := range added {
				_ = remove()
			}
		}()
		for _, o := range r.observers() {
			informer, err := mgr.GetCache().GetInformer(ctx, o.obj)
			if err != nil {
				return err
			}
			// A handler added to a synced informer is first told of every object as added:
			// only updates and deletions are transitions.
			reg, err := informer.AddEventHandler(o.handler)
			if err != nil {
				return err
			}
			added = append(added, func() error { return informer.RemoveEventHandler(reg) })
		}
		<-ctx.Done()
		return nil
	}))
}

type observer struct {
	obj     client.Object
	handler toolscache.ResourceEventHandler
}

// observers are the metric observers of Buckets and BucketAccesses.
func (r *BucketReconciler) observers() []observer {
	var out []observer
	for _, kind := range []struct {
		obj      client.Object
		name     string
		driver   func(client.Object) string
		conds    func(client.Object) bool
		onDelete bool
	}{
		{&cosiapi.Bucket{}, "Bucket", func(o client.Object) string { return o.(*cosiapi.Bucket).Spec.DriverName },
			func(o client.Object) bool {
				return conditions.IsTrue(o.(*cosiapi.Bucket), cosiapi.ConditionProvisioned)
			}, true},
		{&cosiapi.BucketAccess{}, "BucketAccess",
			func(o client.Object) string { return o.(*cosiapi.BucketAccess).Status.DriverName },
			func(o client.Object) bool {
				return conditions.IsTrue(o.(*cosiapi.BucketAccess), cosiapi.ConditionProvisioned)
			}, false},
	} {
		out = append(out, observer{kind.obj, toolscache.ResourceEventHandlerFuncs{
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
				b, _ := o.(*cosiapi.Bucket)
				r.Metrics.deleted(kind.driver(o), kind.name, since,
					createOutcome(kind.conds(o), b != nil && (b.Status.BucketID != "" || driverCalled(b))))
			},
		}})
	}
	return out
}
