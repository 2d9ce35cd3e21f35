package sidecar

import (
	"context"
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
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
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/kube/lookup"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
)

// grantBook is what the sidecar's reconcilers share about grants: the records, the grants in
// flight, the answers not yet written to Secrets, and the revocation of a recorded grant.
type grantBook struct {
	store    grantStore
	inFlight inFlight
	fence    bucketFence
	answers  answers
	outcomes grantOutcomes
	driver   *driverclient.Client
	client   client.Client
	reader   client.Reader
	events   events.EventRecorder
}

// accessGone reports whether the recorded access no longer exists. The cache answers "it exists";
// "gone" is confirmed with the API server.
func (b *grantBook) accessGone(ctx context.Context, namespace, name string, uid types.UID) (bool, error) {
	ba := &cosiapi.BucketAccess{}
	return lookup.ConfirmGone(ctx, b.client, b.reader, types.NamespacedName{Namespace: namespace, Name: name}, ba,
		func() bool { return ba.UID == uid })
}

// revokeOrphan revokes the recorded grant of an access that is gone, as the access's own deletion
// would have (KEP-1979 "Deleting a BucketAccess" step 3: Secrets first, then the revocation), and
// removes the record. It reports false, doing nothing, while the access exists. A grant in flight
// for the access is waited for: revoked first, it would leave the account it then creates.
//
// The cached record names the access (its namespace, name and UID never change), and the cache
// answers "the access exists" without a request, as accessGone does: the access's going wakes the
// GrantReconciler again. Only an access confirmed gone costs the uncached read of the record
// that the revocation acts on.
func (b *grantBook) revokeOrphan(ctx context.Context, uid types.UID) (revoked bool, err error) {
	return b.revokeOrphanOf(ctx, uid, b.store.cached(ctx, uid))
}

// revokeOrphanOf is revokeOrphan with what the cache holds of the record, read by the caller.
func (b *grantBook) revokeOrphanOf(ctx context.Context, uid types.UID, cached *cachedGrant) (revoked bool, err error) {
	if cached != nil {
		if gone, err := b.accessGone(ctx, cached.Namespace, cached.Name, uid); err != nil || !gone {
			return false, err
		}
	}
	g, cm, err := b.store.get(ctx, uid) // uncached: another reconcile may have revoked it already
	if err != nil || g == nil {
		return g == nil && err == nil, err
	}
	if cached == nil || cached.Namespace != g.Namespace || cached.Name != g.Name {
		gone, err := b.accessGone(ctx, g.Namespace, g.Name, g.UID)
		if err != nil || !gone {
			return false, err
		}
	}
	if b.inFlight.has(uid) {
		return false, errRequeue("a grant for a deleted BucketAccess is in flight; revoking it when it ends")
	}
	b.answers.forget(uid)
	lost := b.outcomes.lost(uid) && b.driver.Protocol() == driverclient.ProtocolV1alpha1
	if err := b.revoke(ctx, *g, cm); err != nil {
		return false, err
	}
	// A grant whose answer may have been lost (access_driveraccounts.go) is reported on the
	// grant's Buckets: the access is gone.
	if lost {
		for _, name := range g.BucketNames {
			bucket := &cosiapi.Bucket{}
			if b.client.Get(ctx, types.NamespacedName{Name: name}, bucket) == nil {
				b.events.Eventf(bucket, nil, corev1.EventTypeWarning, cosiapi.EventDriverAccountMayHaveLeaked,
					"DriverRevokeBucketAccess", "%s", "BucketAccess "+g.Namespace+"/"+g.Name+": "+lostAnswerReport(*g, cm))
			}
		}
	}
	b.outcomes.forget(uid)
	return true, b.store.remove(ctx, cm)
}

// revoke deletes the Secrets of a recorded grant and revokes it in the driver. A failure is
// reported where admins look, as a Warning event on the grant's Buckets (the access is gone), and
// retried: a failed revocation is never given up.
func (b *grantBook) revoke(ctx context.Context, g grantRecord, cm *corev1.ConfigMap) error {
	if err := deleteAccessSecrets(ctx, b.client, g.Namespace, g.UID, g.SecretNames); err != nil {
		return err
	}
	if g.AccountID == "" || len(g.BucketIDs) == 0 {
		return nil // nothing was granted: phase 1 records the account with its buckets
	}
	g = b.withUnrecorded(g)
	if err := revokeGrant(ctx, b.driver, b.store, g, cm); err != nil {
		rpc := rpcError{"DriverRevokeBucketAccess", err}
		msg := conditions.Truncate(fmt.Sprintf("revoking the access of deleted BucketAccess %s/%s (UID %s): %s",
			g.Namespace, g.Name, g.UID, rpc.Error()))
		for _, name := range g.BucketNames {
			bucket := &cosiapi.Bucket{}
			if b.client.Get(ctx, types.NamespacedName{Name: name}, bucket) == nil {
				b.events.Eventf(bucket, nil, corev1.EventTypeWarning, cosiapi.EventFailedRevokeAccess, rpc.method, "%s", msg)
			}
		}
		return rpc
	}
	b.forgetUnrecorded(g)
	return nil
}

// GrantReconciler revokes the grants whose BucketAccess vanished without the sidecar's cleanup (a
// tenant removed its finalizer and deleted it, or it was deleted while no sidecar ran). It
// reconciles the grant records: each at start-up, and each whose access goes.
type GrantReconciler struct {
	Grants *grantBook
	log    logr.Logger
}

// SetupWithManager registers the reconciler. The manager's cache holds only this driver's records
// (newManager).
func (r *GrantReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	r.log = mgr.GetLogger().WithValues("controller", "sidecar-grant")
	store := r.Grants.store
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == store.namespace && o.GetLabels()[cosiapi.LabelGrantDriver] == store.driver
	})
	// A record is created before its grant, while its access exists: only start-up (the initial
	// list) and the access's going away can leave it orphaned.
	return ctrl.NewControllerManagedBy(mgr).
		Named("sidecar-grant").
		For(&corev1.ConfigMap{}, builder.WithPredicates(ours, predicate.Funcs{
			UpdateFunc: func(event.UpdateEvent) bool { return false },
			DeleteFunc: func(event.DeleteEvent) bool { return false },
		})).
		Watches(&cosiapi.BucketAccess{}, handler.EnqueueRequestsFromMapFunc(
			func(_ context.Context, o client.Object) []reconcile.Request {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{
					Namespace: store.namespace, Name: grantRecordName(o.GetUID()),
				}}}
			}), builder.WithPredicates(accessGoing)).
		WithOptions(opts).
		Complete(r)
}

// Reconcile revokes one record's grant if its access is gone.
func (r *GrantReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ctx, cancel := finishOnShutdown(ctx)
	defer cancel()
	uid := grantRecordUID(req.Name)
	if uid == "" || req.Namespace != r.Grants.store.namespace {
		return reconcile.Result{}, nil
	}
	cached := r.Grants.store.cached(ctx, uid)
	if cached == nil {
		// Not in the cache: never recorded, or removed. An access event for an unrecorded
		// access costs no API request.
		return reconcile.Result{}, nil
	}
	if _, err := r.Grants.revokeOrphanOf(ctx, uid, cached); err != nil {
		return result(err)
	}
	return reconcile.Result{}, nil
}

// accessGoing passes the access changes that may leave a grant to revoke: the removal of one of
// its finalizers (by a tenant, say), and its deletion. Not the addition of a finalizer (the
// controller's, on every new access) nor the start of a deletion that finalizers hold: the access
// is still there after either, and the deletion that follows wakes the reconciler.
var accessGoing = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		kept := e.ObjectNew.GetFinalizers()
		return slices.ContainsFunc(e.ObjectOld.GetFinalizers(), func(f string) bool { return !slices.Contains(kept, f) })
	},
}
