package sidecar

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/cache/index"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/kube/patch"
	"github.com/kube-cosi/cosi/internal/kube/predicates"
	"github.com/kube-cosi/cosi/internal/kube/requeue"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// +kubebuilder:rbac:groups=objectstorage.k8s.io,resources=bucketaccesses,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=objectstorage.k8s.io,resources=bucketaccesses/status,verbs=get;update;patch
// Secrets: KEP-1979's minimum, no get, list or watch (see access_secrets.go). A patch returns the object,
// so these verbs alone would still read any Secret by name and create any Secret anywhere; the
// cosi-sidecar-secrets admission policy (config/admission) confines them to COSI's Secrets.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;update;patch;delete
// Not a permission (nothing serves bucketaccesssecrets): it marks the holder as the sidecar for
// cosi-sidecar-secrets.
// +kubebuilder:rbac:groups=objectstorage.k8s.io,resources=bucketaccesssecrets,verbs=write-only
// Owner references with blockOwnerDeletion on the Secrets need the right to update the owner's
// finalizers (the OwnerReferencesPermissionEnforcement admission plugin checks it).
// +kubebuilder:rbac:groups=objectstorage.k8s.io,resources=bucketaccesses/finalizers,verbs=update

// BucketAccessReconciler grants and revokes the accesses of one driver, and writes their Secrets
// (KEP-1979 "Generating Bucket Access Credentials" and "Deleting a BucketAccess", the sidecar
// steps). It acts only after the controller's hand-off: status.driverName names this driver.
type BucketAccessReconciler struct {
	Client client.Client
	// APIReader reads, uncached, what a grant or a revocation must not decide on a stale copy:
	// whether the access still exists, and the grant records on its Buckets.
	APIReader client.Reader
	Driver    *driverclient.Client
	Info      *cosiproto.DriverGetInfoResponse
	Recorder  events.EventRecorder
	// SecretCheckInterval is how often the Secrets of a provisioned access are checked.
	SecretCheckInterval time.Duration
	// RotationGracePeriod is how long a rotated credential keeps working once its successor is in
	// every Secret of the access (access_rotate.go).
	RotationGracePeriod time.Duration
	// Grants are the grant records, the grants in flight and the answers not yet written,
	// shared with the other reconcilers.
	Grants *grantBook

	checks      secretChecks
	checkMetric *prometheus.CounterVec
	rotations   rotationAnswers
	later       laterQueue
	log         logr.Logger
	record      statusRecorder[*cosiapi.BucketAccess]
}

// SetupWithManager registers the reconciler and its watches; the accesses of a Bucket are found
// with index.AccessesByBucket.
func (r *BucketAccessReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	r.log = mgr.GetLogger().WithValues("controller", "sidecar-bucketaccess")
	r.checkMetric = secretCheckMetric(r.Info.GetName())
	r.checks.countDecisions(scheduledCheckMetric(), r.Info.GetName(), scheduledCheckSecrets)
	r.record = statusRecorder[*cosiapi.BucketAccess]{
		client: r.Client, events: r.Recorder, lock: patch.OptimisticLock, kind: "BucketAccess",
		backoff: opts.RateLimiter, invalidEvent: cosiapi.EventFailedGrantAccess, invalidAction: "Grant",
	}
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.(*cosiapi.BucketAccess).Status.DriverName == r.Info.GetName()
	})
	wake := predicate.Or[client.Object](predicates.SpecOrLifecycleChanged, handOffChanged, predicates.ProtectionRemoved,
		rotationAsked)
	return ctrl.NewControllerManagedBy(mgr).
		Named("sidecar-bucketaccess").
		For(&cosiapi.BucketAccess{}, builder.WithPredicates(ours, wake)).

		// A Bucket that becomes provisioned, or starts deleting, wakes the accesses for it.
		Watches(&cosiapi.Bucket{}, handler.EnqueueRequestsFromMapFunc(r.accessesForBucket),
			builder.WithPredicates(bucketReadinessChanged)).
		// The Secret checks that fall due (schedule.go).
		WatchesRawSource(r.checks.wakeChecks(r.SecretCheckInterval)).
		// Upkeeps that need an access sooner than their failed part's backoff (upkeep).
		WatchesRawSource(r.later.source()).
		WithOptions(opts).
		Complete(r)
}

// handOffChanged passes the controller's hand-off (a status change) and nothing else of status.
var handOffChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*cosiapi.BucketAccess), e.ObjectNew.(*cosiapi.BucketAccess)
		return o.Status.DriverName != n.Status.DriverName || len(o.Status.AccessedBuckets) != len(n.Status.AccessedBuckets)
	},
	DeleteFunc: func(event.DeleteEvent) bool { return false },
}

// rotationAsked passes a new AnnotationRotateCredentials or AnnotationRefreshSecret value.
var rotationAsked = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()
		return o[cosiapi.AnnotationRotateCredentials] != n[cosiapi.AnnotationRotateCredentials] ||
			o[cosiapi.AnnotationRefreshSecret] != n[cosiapi.AnnotationRefreshSecret]
	},
	DeleteFunc: func(event.DeleteEvent) bool { return false },
}

var bucketReadinessChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*cosiapi.Bucket), e.ObjectNew.(*cosiapi.Bucket)
		return o.Status.BucketID != n.Status.BucketID ||
			conditions.IsTrue(o, cosiapi.ConditionProvisioned) != conditions.IsTrue(n, cosiapi.ConditionProvisioned) ||
			o.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted] !=
				n.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted] ||
			!maps.Equal(o.Status.BucketInfo, n.Status.BucketInfo) ||
			!o.DeletionTimestamp.Equal(n.DeletionTimestamp)
	},
	DeleteFunc: func(event.DeleteEvent) bool { return false },
}

func (r *BucketAccessReconciler) accessesForBucket(ctx context.Context, o client.Object) []reconcile.Request {
	var list cosiapi.BucketAccessList
	if err := index.AccessesByBucket.List(ctx, r.Client, &list, "", o.GetName()); err != nil {
		r.log.Error(err, "listing the accesses of a Bucket", "bucket", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, ba := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&ba)})
	}
	return reqs
}

// The life of an access, as the sidecar drives it. Each reconcile reads the access and decides
// its step (nextStep); what the step has done so far is in the access's status and its grant
// record (record.go), so a sidecar that stops anywhere continues where it was:
//
//	handed off, not provisioned -> grant (access_grant.go): the account ID in status (phase 1), the
//	                               grant record, DriverGrantBucketAccess (phase 2), the Secrets
//	                               (access_secrets.go), Provisioned True
//	provisioned                 -> upkeep (below), each part on its own: one that fails never
//	                               keeps the others from running
//	                                 rotate  (access_rotate.go): asked by annotation, due by the
//	                                         class's period, or in progress (the record's rotation)
//	                                 refresh (access_refresh.go): asked by annotation, or the
//	                                         Buckets' information changed; renew (access_renew.go):
//	                                         credentials that expire, at four fifths of their life
//	                                 check   (access_check.go): every interval, the Secrets are
//	                                         there and whole; written again with a grant if not
//	being deleted               -> revoke (access_revoke.go): the Secrets, DriverRevokeBucketAccess
//	                               from the record, the record, then the controller is told
//
// An access that vanished without its revocation (a tenant removed its finalizer) is revoked from
// its record alone (record_orphans.go).

// accessStep is what a reconcile does with an access.
type accessStep int

const (
	// stepNone: not handed off to this driver, or its Buckets are not named yet.
	stepNone accessStep = iota
	// stepGrant: handed off and not provisioned.
	stepGrant
	// stepUpkeep: provisioned.
	stepUpkeep
	// stepRevoke: being deleted.
	stepRevoke
)

// nextStep decides what the reconcile does with the access, for the driver named driverName.
func nextStep(ba *cosiapi.BucketAccess, driverName string) accessStep {
	switch {
	case ba.Status.DriverName != driverName:
		return stepNone
	case ba.DeletionTimestamp != nil:
		return stepRevoke
	case len(ba.Status.AccessedBuckets) == 0:
		return stepNone
	case conditions.IsTrue(ba, cosiapi.ConditionProvisioned):
		return stepUpkeep
	}
	return stepGrant
}

// Reconcile takes one BucketAccess's step.
func (r *BucketAccessReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ctx, cancel := finishOnShutdown(ctx)
	defer cancel()
	ba := &cosiapi.BucketAccess{}
	if err := r.Client.Get(ctx, req.NamespacedName, ba); err != nil {
		if apierrors.IsNotFound(err) {
			r.checks.gone(req.NamespacedName) // gone without its deletion seen: no check left behind
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	switch nextStep(ba, r.Info.GetName()) {
	case stepRevoke:
		r.checks.forget(req.NamespacedName, ba.UID)
		return r.result(ba, cosiapi.EventFailedRevokeAccess, r.delete(ctx, ba))
	case stepUpkeep:
		return r.upkeep(ctx, ba)
	case stepGrant:
		return r.firstGrant(ctx, ba)
	}
	return reconcile.Result{}, nil
}

// firstGrant grants an access that is not provisioned yet.
func (r *BucketAccessReconciler) firstGrant(ctx context.Context, ba *cosiapi.BucketAccess) (reconcile.Result, error) {
	renewAt, err := r.grant(ctx, ba, false)
	if err != nil {
		return r.result(ba, cosiapi.EventFailedGrantAccess, err)
	}
	// Granted, or waiting for a watched object: the Secrets' checks, the rotation period and the
	// renewal of credentials that expire start from here. A granted access's checks are in the
	// schedule (recordGranted), which wakes it; one still waiting is looked at again after an
	// interval.
	next := time.Duration(0)
	if !r.checks.scheduled(client.ObjectKeyFromObject(ba), ba.UID) {
		next = r.SecretCheckInterval
	}
	if p, err := parseAccessParameters(ba.Status.Parameters); err == nil && p.rotationPeriod > 0 {
		next = sooner(p.rotationPeriod, next)
	}
	return reconcile.Result{RequeueAfter: sooner(next, until(renewAt))}, nil
}

// upkeepPart is one part of a provisioned access's upkeep: it returns how long until it needs the
// access again (zero: not before an event or its schedule), and its failures are reported with
// event reason.
type upkeepPart struct {
	name   string
	reason string
	run    func(context.Context, *cosiapi.BucketAccess) (time.Duration, error)
}

// upkeep looks after a provisioned access: its finalizer is put back if someone removed it, then
// its rotation, its refresh (with the renewal of expiring credentials) and its Secret check run,
// each whatever the others did. A rotation whose driver keeps failing does not keep a Secret a
// tenant deleted from being written again, nor credentials from being renewed before they expire.
func (r *BucketAccessReconciler) upkeep(ctx context.Context, ba *cosiapi.BucketAccess) (reconcile.Result, error) {
	if err := patch.AddFinalizer(ctx, r.Client, ba); err != nil {
		return r.result(ba, cosiapi.EventFailedGrantAccess, err)
	}
	parts := []upkeepPart{
		{"rotate", cosiapi.EventFailedRotateCredentials, r.rotate},
		{"refresh", cosiapi.EventFailedRefresh, r.refresh},
		{"check", cosiapi.EventFailedGrantAccess, r.checkSecrets},
	}
	var wait time.Duration
	var errs []error
	for _, part := range parts {
		w, err := part.run(ctx, ba)
		if err != nil {
			requeue.APIErrorEvent(r.Recorder, ba, part.reason, err)
			errs = append(errs, fmt.Errorf("%s: %w", part.name, err))
			continue
		}
		wait = sooner(wait, w)
	}
	res, err := upkeepResult(wait, errs)
	if err != nil && wait > 0 {
		// A part that failed is retried with controller-runtime's backoff, which grows to
		// minutes: another part's wait (a renewal due before the credentials expire, the end
		// of a grace period) is kept too.
		r.later.after(client.ObjectKeyFromObject(ba), wait)
	}
	return res, err
}

// laterQueue queues an object after a time of its own, on the controller's work queue (which
// keeps an object once, at its soonest time).
type laterQueue struct {
	mu    sync.Mutex
	queue workqueue.TypedRateLimitingInterface[reconcile.Request]
}

// source is the controller's source that hands the queue over when the controller starts.
func (l *laterQueue) source() source.Source {
	return source.Func(func(_ context.Context, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.queue = queue
		return nil
	})
}

// after queues key after d; nothing before the controller started.
func (l *laterQueue) after(key types.NamespacedName, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.queue != nil {
		l.queue.AddAfter(reconcile.Request{NamespacedName: key}, d)
	}
}

// upkeepResult is the result of an upkeep whose parts asked to be run again after wait, and whose
// failed parts returned errs. The first failure retried with backoff decides (the parts that
// succeeded run again with it, doing nothing until they are due), then a conflict's rate-limited
// retry, then the soonest wait, then a final failure. A final failure does not cancel the wait of
// the others (a rotation's grace period, its period, a renewal): nothing else would wake the
// access for them. The part that failed repeats its driver call at most when they wake it: a
// refused refresh request is answered (not asked again), a failed check is asked again then.
func upkeepResult(wait time.Duration, errs []error) (reconcile.Result, error) {
	var final error
	conflict := false
	for _, err := range errs {
		res, rerr := result(err)
		switch {
		case rerr != nil && !errors.Is(rerr, reconcile.TerminalError(nil)):
			return res, rerr
		case rerr != nil:
			final = rerr
		case res.Requeue: //nolint:staticcheck // a conflict's rate-limited retry (requeue.Result)
			conflict = true
		default:
			wait = sooner(wait, res.RequeueAfter)
		}
	}
	switch {
	case conflict:
		return reconcile.Result{Requeue: true}, nil //nolint:staticcheck // as requeue.Result
	case wait > 0 || final == nil:
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	return reconcile.Result{}, final
}

// result reports a failed Kubernetes API call as an event and hands the error to
// controller-runtime.
func (r *BucketAccessReconciler) result(ba *cosiapi.BucketAccess, reason string, err error) (reconcile.Result, error) {
	requeue.APIErrorEvent(r.Recorder, ba, reason, err)
	return result(err)
}

// sooner is the shorter of two waits, zero meaning none.
func sooner(wait, other time.Duration) time.Duration {
	if wait <= 0 || other > 0 && other < wait {
		return other
	}
	return wait
}
