package sidecar

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
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
	"github.com/kube-cosi/cosi/internal/kube/lookup"
	"github.com/kube-cosi/cosi/internal/kube/patch"
	"github.com/kube-cosi/cosi/internal/kube/predicates"
	"github.com/kube-cosi/cosi/internal/kube/requeue"
	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// +kubebuilder:rbac:groups=objectstorage.k8s.io,resources=bucketaccesses,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=objectstorage.k8s.io,resources=bucketaccesses/status,verbs=get;update;patch
// Secrets: KEP-1979's minimum, no get, list or watch (see secrets.go). A patch returns the object,
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
	// every Secret of the access (rotation.go).
	RotationGracePeriod time.Duration
	// Grants are the grant records, the grants in flight and the answers not yet written,
	// shared with the other reconcilers.
	Grants *grantBook

	checks      secretChecks
	checkMetric *prometheus.CounterVec
	rotations   rotationAnswers
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
		// The Secret checks that fall due (checks.go).
		WatchesRawSource(r.checks.wakeChecks(r.SecretCheckInterval)).
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

// Reconcile handles one BucketAccess.
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
	if ba.Status.DriverName != r.Info.GetName() {
		return reconcile.Result{}, nil // not handed off to this driver (yet)
	}
	if ba.DeletionTimestamp != nil {
		r.checks.forget(req.NamespacedName, ba.UID)
		return r.result(ba, cosiapi.EventFailedRevokeAccess, r.delete(ctx, ba))
	}
	if len(ba.Status.AccessedBuckets) == 0 {
		return reconcile.Result{}, nil
	}
	if conditions.IsTrue(ba, cosiapi.ConditionProvisioned) {
		return r.check(ctx, ba)
	}
	renewAt, err := r.grant(ctx, ba, false)
	if err != nil {
		return r.result(ba, cosiapi.EventFailedGrantAccess, err)
	}
	// Granted, or waiting for a watched object: the Secrets' checks, the rotation period and the
	// renewal of credentials that expire start from here. A granted access's checks are in the
	// schedule (recordGranted), which wakes it; one still waiting is looked at again after an
	// interval.
	next := time.Duration(0)
	if !r.checks.scheduled(req.NamespacedName, ba.UID) {
		next = r.SecretCheckInterval
	}
	if p, err := parseAccessParameters(ba.Status.Parameters); err == nil && p.rotationPeriod > 0 {
		next = sooner(p.rotationPeriod, next)
	}
	return reconcile.Result{RequeueAfter: sooner(next, until(renewAt))}, nil
}

// result reports a failed Kubernetes API call as an event and hands the error to
// controller-runtime.
func (r *BucketAccessReconciler) result(ba *cosiapi.BucketAccess, reason string, err error) (reconcile.Result, error) {
	requeue.APIErrorEvent(r.Recorder, ba, reason, err)
	return result(err)
}

// check looks after a provisioned access: its finalizer is put back if someone removed it, and its
// Secrets are checked every SecretCheckInterval (the sidecar cannot watch Secrets), spread by a
// rate limit when many fall due together (checks.go). A lost or deleted Secret is written again,
// with one more DriverGrantBucketAccess: drivers return the access's credentials again for the
// same account (memory), or issue a new key and keep the newest previous one (S3 on IAM), so the
// key that workloads still hold stays valid.
func (r *BucketAccessReconciler) check(ctx context.Context, ba *cosiapi.BucketAccess) (reconcile.Result, error) {
	if err := patch.AddFinalizer(ctx, r.Client, ba); err != nil {
		return r.result(ba, cosiapi.EventFailedGrantAccess, err)
	}
	rotating, err := r.rotate(ctx, ba)
	if err != nil {
		return r.result(ba, cosiapi.EventFailedRotateCredentials, err)
	}
	refreshing, err := r.refresh(ctx, ba)
	if err != nil {
		return r.result(ba, cosiapi.EventFailedRefresh, err)
	}
	rotating = sooner(rotating, refreshing)
	key := client.ObjectKeyFromObject(ba)
	// A check not due yet is woken at its time by the schedule (wakeChecks).
	if wait := r.checks.due(key, ba.UID, r.SecretCheckInterval); wait > 0 {
		return reconcile.Result{RequeueAfter: rotating}, nil
	}
	intact, err := r.secretsIntact(ctx, ba)
	if err != nil {
		r.checkMetric.WithLabelValues(r.Info.GetName(), secretCheckFailed).Inc()
		return r.result(ba, cosiapi.EventFailedGrantAccess, err)
	}
	if !intact {
		renewAt, err := r.grant(ctx, ba, true)
		if err != nil {
			r.checkMetric.WithLabelValues(r.Info.GetName(), secretCheckFailed).Inc()
			return r.result(ba, cosiapi.EventFailedGrantAccess, err)
		}
		rotating = sooner(rotating, until(renewAt))
		r.checkMetric.WithLabelValues(r.Info.GetName(), secretCheckRewritten).Inc()
	} else {
		r.checkMetric.WithLabelValues(r.Info.GetName(), secretCheckIntact).Inc()
	}
	r.checks.done(key, ba.UID)
	return reconcile.Result{RequeueAfter: rotating}, nil
}

// sooner is the shorter of two waits, zero meaning none.
func sooner(wait, other time.Duration) time.Duration {
	if wait <= 0 || other > 0 && other < wait {
		return other
	}
	return wait
}

// grant provisions the access in two phases and writes its Secrets (KEP-1979 "Generating Bucket
// Access Credentials", sidecar steps). again is set when the Secrets of a provisioned access are
// written anew (check); otherwise the access is granted only if it is not provisioned yet. It
// returns when the credentials it wrote are renewed (renewal), zero when they do not expire or
// nothing was written.
func (r *BucketAccessReconciler) grant(ctx context.Context, ba *cosiapi.BucketAccess, again bool) (time.Time, error) {
	// COSI's own parameters are checked before the driver is asked anything: an invalid one is
	// final, and nothing is granted until the access changes.
	if _, err := parseAccessParameters(ba.Status.Parameters); err != nil {
		return time.Time{}, r.record.invalid(ctx, ba, cosiapi.ReasonInvalidParameter, err.Error())
	}
	// Counted in flight first, then the access confirmed uncached: a Bucket's reconcile revokes a
	// recorded grant only when the access is gone (uncached) and no grant for it is in flight, so
	// either it sees this grant, or this grant sees the access gone.
	done := r.Grants.inFlight.start(ba.UID)
	defer done()
	buckets, held, ready, err := r.prepareGrant(ctx, ba, again)
	if err != nil || !ready {
		return time.Time{}, err
	}
	req := newGrantRequest(ba, buckets)
	switch {
	case ba.Status.AccountID == "":
		// Phase 1: get the account ID and persist it (with the bucket IDs, for the revocation)
		// before anything exists in the backend.
		if err := r.generateAccountID(ctx, ba, buckets, req); err != nil {
			return time.Time{}, err
		}
	case !r.grantRecorded(ctx, ba):
		if err := r.checkAccountID(ctx, ba, req); err != nil {
			return time.Time{}, err
		}
	}
	// Recorded before the driver is asked: whatever happens to the BucketAccess or its Buckets
	// from now on, the grant can be revoked.
	rec := newGrantRecord(ba)
	for _, b := range buckets {
		if len(b.Status.BucketInfo) > 0 {
			if rec.BucketInfo == nil {
				rec.BucketInfo = map[string]map[string]string{}
			}
			rec.BucketInfo[b.Name] = b.Status.BucketInfo
		}
	}
	written, err := r.Grants.store.put(ctx, rec)
	if err != nil {
		return time.Time{}, err
	}

	// Phase 2, unless the driver already answered this request and only the Secrets are missing.
	grantReq := req.grant(ba.Status.AccountID)
	key, err := proto.MarshalOptions{Deterministic: true}.Marshal(grantReq)
	if err != nil {
		return time.Time{}, err
	}
	resp := r.Grants.answers.get(ba.UID, string(key))
	if resp == nil {
		callCtx := ctx
		if !held {
			callCtx = v1alpha1.WithNoCredentialsHeld(ctx)
		}
		if resp, err = r.Driver.DriverGrantBucketAccess(callCtx, grantReq); err != nil {
			return time.Time{}, r.record.failed(ctx, ba, rpcError{"DriverGrantBucketAccess", err},
				cosiapi.EventFailedGrantAccess)
		}
		if err := driver.ValidateGrantResponse(grantReq, resp); err != nil {
			return time.Time{}, r.record.invalidAnswer(ctx, ba, cosiapi.ReasonProvisioningFailed,
				"DriverGrantBucketAccess returned an incomplete or invalid answer: "+err.Error())
		}
		r.Grants.answers.put(ba.UID, string(key), resp)
	}
	if err := r.writeSecrets(ctx, ba, buckets, req.protocol, resp); err != nil {
		return time.Time{}, err
	}
	now, expiry := metav1.Now(), credentialsExpiry(resp.GetCredentials())
	if err := r.Grants.store.recordCredential(ctx, written, resp.GetCredentialId(), now, expiry); err != nil {
		return time.Time{}, err
	}
	if err := r.recordGranted(ctx, ba); err != nil {
		return time.Time{}, err
	}
	r.Grants.answers.forget(ba.UID)
	return renewal(&now, expiry), nil
}

// grantRecorded reports whether the cache holds the access's grant record with its account ID.
func (r *BucketAccessReconciler) grantRecorded(ctx context.Context, ba *cosiapi.BucketAccess) bool {
	g := r.Grants.store.cached(ctx, ba.UID)
	return g != nil && g.AccountID == ba.Status.AccountID
}

// prepareGrant returns the access's Buckets once the access may be granted: it still exists, its
// Buckets are provisioned, it has its finalizer, and its Secrets can be written. ready is false,
// with the conditions saying why, while something is missing. held is false only when no
// credentials of the access's account can have been handed out (see granted).
func (r *BucketAccessReconciler) prepareGrant(
	ctx context.Context, ba *cosiapi.BucketAccess, again bool,
) (buckets map[string]*cosiapi.Bucket, held, ready bool, err error) {
	live := &cosiapi.BucketAccess{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ba), live); err != nil {
		return nil, false, false, client.IgnoreNotFound(err)
	}
	if live.UID != ba.UID || live.DeletionTimestamp != nil {
		return nil, false, false, nil // gone or going: the deletion path takes over
	}
	if !again && conditions.IsTrue(live, cosiapi.ConditionProvisioned) {
		// Granted already: the cache is behind the status this sidecar wrote (a reconcile
		// queued during the grant runs before the informer delivers it). Granting on the stale
		// copy would call the driver once more; the update wakes the Secret checks instead.
		return nil, false, false, nil
	}
	buckets, ready, err = r.buckets(ctx, ba)
	if err != nil || !ready {
		return nil, false, false, err
	}
	if err := patch.AddFinalizer(ctx, r.Client, ba); err != nil {
		return nil, false, false, err
	}
	// Before anything is granted, the Secrets must be writable: credentials that cannot be
	// written would only be minted for nothing.
	ready, present, conflict, stuck, err := r.secretsReady(ctx, ba)
	if err != nil {
		return nil, false, false, err
	}
	if conflict != "" {
		return nil, false, false, r.secretConflict(ctx, ba, errSecretConflict{conflict})
	}
	if stuck != "" {
		return nil, false, false, r.secretUnwritable(ctx, ba, stuck, errRequeue(stuck))
	}
	if !ready {
		return nil, false, false, errRequeue("a Secret of the access is being deleted; writing it again when it is gone")
	}
	return buckets, granted(live) || present, true, nil
}

// granted reports whether the access's Secrets were ever written: the grant succeeded and
// recordGranted set Provisioned True and ProvisionFailed False (DriverSucceeded). Provisioned
// stays True until the access is revoked (a failed call, a lost Secret or a Bucket that is no
// longer provisioned leaves it), ProvisionFailed until a call fails.
//
// With no Secret of the access present either (prepareGrant), no credentials of its account can
// have been handed out: workloads get them only from those Secrets. Only then does the grant say
// so to a v1alpha1 driver's adapter (v1alpha1.WithNoCredentialsHeld), which may then revoke the
// account and grant it again when the driver answers ALREADY_EXISTS: the driver made the account
// in a call whose answer was lost (the sidecar stopped, or its answers were lost in a restart,
// before a Secret was written) and will not return its key again. Otherwise ALREADY_EXISTS is
// final, and the key that workloads hold keeps working (the Secret was lost, not the key).
//
// Both facts are needed: the Secrets alone are the tenant's to delete, and the conditions alone
// miss a Secret written by a sidecar that stopped before recordGranted. The conditions are read
// uncached (the cache may not show this sidecar's own recordGranted yet), and only who can write
// bucketaccesses/status can remove them: tenants with the standard Role cannot; a tenant allowed
// to (loose RBAC) affects only their own access, whose account is pinned to the one the driver
// generates for its UID (the grant record, checkAccountID), and gets no more than a new key for
// it, as re-creating the access would give. A Secret with the access's label is the tenant's to
// forge as well, which only makes the grant keep the account.
func granted(ba *cosiapi.BucketAccess) bool {
	return conditions.IsTrue(ba, cosiapi.ConditionProvisioned) ||
		conditions.Has(ba, cosiapi.ConditionProvisionFailed, metav1.ConditionFalse, cosiapi.ReasonDriverSucceeded)
}

// grantRequest is what both phases of a grant send to the driver.
type grantRequest struct {
	accountName string
	protocol    cosiproto.ObjectProtocol_Type
	auth        cosiproto.AuthenticationType_Type
	sa          *cosiproto.ServiceAccount
	buckets     []*cosiproto.AccessedBucket
	parameters  map[string]string
}

func newGrantRequest(ba *cosiapi.BucketAccess, buckets map[string]*cosiapi.Bucket) grantRequest {
	req := grantRequest{
		accountName: cosiapi.AccountNamePrefix + string(ba.UID),
		protocol:    rpcProtocol(ba.Spec.Protocol),
		auth:        rpcAuthenticationType(ba.Status.AuthenticationType),
		parameters:  driverParameters(ba.Status.Parameters),
	}
	if req.auth == cosiproto.AuthenticationType_SERVICE_ACCOUNT {
		// Only for ServiceAccount authentication, so that Key drivers never come to rely on it.
		req.sa = &cosiproto.ServiceAccount{Namespace: ba.Namespace, Name: ba.Spec.ServiceAccountName}
	}
	for _, claim := range ba.Spec.BucketClaims {
		req.buckets = append(
			req.buckets,
			&cosiproto.AccessedBucket{
				BucketId:    buckets[claim.BucketClaimName].Status.BucketID,
				AccessModes: rpcAccessModes(claim.AccessModes),
			},
		)
	}
	return req
}

func (g grantRequest) generate() *cosiproto.DriverGenerateBucketAccessIdRequest {
	return &cosiproto.DriverGenerateBucketAccessIdRequest{
		AccountName: g.accountName, Buckets: g.buckets, Protocol: g.protocol,
		AuthenticationType: g.auth, ServiceAccount: g.sa, Parameters: g.parameters,
	}
}

func (g grantRequest) grant(accountID string) *cosiproto.DriverGrantBucketAccessRequest {
	return &cosiproto.DriverGrantBucketAccessRequest{
		AccountId: accountID, Buckets: g.buckets, Protocol: g.protocol,
		AuthenticationType: g.auth, ServiceAccount: g.sa, Parameters: g.parameters,
	}
}

// generateAccountID is phase 1: the driver names the account, and the name is persisted with the
// bucket IDs before anything exists in the backend.
func (r *BucketAccessReconciler) generateAccountID(
	ctx context.Context, ba *cosiapi.BucketAccess, buckets map[string]*cosiapi.Bucket, req grantRequest,
) error {
	resp, err := r.Driver.DriverGenerateBucketAccessId(ctx, req.generate())
	if err != nil {
		return r.record.failed(ctx, ba, rpcError{"DriverGenerateBucketAccessId", err}, cosiapi.EventFailedGrantAccess)
	}
	if resp.GetAccountId() == "" {
		return r.record.invalidAnswer(ctx, ba, cosiapi.ReasonProvisioningFailed,
			"DriverGenerateBucketAccessId returned an empty account_id")
	}
	status := r.record.status(ba)
	ba.Status.AccountID = resp.GetAccountId()
	for i, ab := range ba.Status.AccessedBuckets {
		ba.Status.AccessedBuckets[i].BucketID = buckets[ab.BucketClaimName].Status.BucketID
	}
	conditions.Init(ba, cosiapi.ConditionProvisionFailed)
	conditions.MarkUnknown(ba, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioning,
		"account ID generated; granting access")
	return status.Patch(ctx, patch.OptimisticLock)
}

// checkAccountID checks an account ID this sidecar has no record of granting: it stopped between
// phase 1 and the record, or someone who can write status put it there (another access's
// account, say). The driver generates the same ID for the same account name (KEP-1979
// "DriverGenerateBucketAccessId"); anything else is not this access's account.
func (r *BucketAccessReconciler) checkAccountID(ctx context.Context, ba *cosiapi.BucketAccess, req grantRequest) error {
	resp, err := r.Driver.DriverGenerateBucketAccessId(ctx, req.generate())
	if err != nil {
		return r.record.failed(ctx, ba, rpcError{"DriverGenerateBucketAccessId", err}, cosiapi.EventFailedGrantAccess)
	}
	if resp.GetAccountId() != ba.Status.AccountID {
		return r.record.invalid(ctx, ba, cosiapi.ReasonInvalidReference,
			"status.accountID is not the account the driver generates for this BucketAccess")
	}
	return nil
}

// writeSecrets writes the Secret of each claim from the driver's answer.
func (r *BucketAccessReconciler) writeSecrets(
	ctx context.Context,
	ba *cosiapi.BucketAccess,
	buckets map[string]*cosiapi.Bucket,
	protocol cosiproto.ObjectProtocol_Type,
	resp *cosiproto.DriverGrantBucketAccessResponse,
) error {
	for _, claim := range ba.Spec.BucketClaims {
		bucketID := buckets[claim.BucketClaimName].Status.BucketID
		var info *cosiproto.ProtocolBucketInfo
		for _, b := range resp.GetBuckets() {
			if b.GetBucketId() == bucketID {
				info = b.GetBucketInfo()
			}
		}
		data := secretData(protocol, info, resp.GetCredentials(), resp.GetCertificateAuthority())
		if err := r.writeSecret(ctx, ba, claim, data, resp.GetCredentialId()); err != nil {
			var conflict errSecretConflict
			if errors.As(err, &conflict) {
				return r.secretConflict(ctx, ba, conflict)
			}
			return r.secretWriteFailed(ctx, ba, claim.AccessSecretName, err)
		}
	}
	return nil
}

// secretWriteFailed records that a Secret could not be written after the grant
// (ResourcesValidated False, as KEP-1979 says of Secrets that cannot be written): a ResourceQuota,
// a policy, a server error, or a Secret that someone made unwritable. The write is retried with
// backoff, with the driver's answer kept in memory (answers): never with a new grant.
func (r *BucketAccessReconciler) secretWriteFailed(
	ctx context.Context, ba *cosiapi.BucketAccess, name string, err error,
) error {
	msg := fmt.Sprintf("access granted, but Secret %s cannot be written; retrying the write: %v", name, err)
	return r.secretUnwritable(ctx, ba, msg, fmt.Errorf("writing Secret %s: %w", name, err))
}

// secretUnwritable records that a Secret of the access cannot be written (ResourcesValidated
// False, SecretWriteFailed; Provisioned not True unless it was) with msg, and returns err: the
// write is retried with backoff.
func (r *BucketAccessReconciler) secretUnwritable(
	ctx context.Context, ba *cosiapi.BucketAccess, msg string, err error,
) error {
	status := r.record.status(ba)
	msg = conditions.Truncate(msg)
	conditions.MarkFalse(ba, cosiapi.ConditionResourcesValidated, cosiapi.ReasonSecretWriteFailed, msg)
	if !conditions.IsTrue(ba, cosiapi.ConditionProvisioned) {
		conditions.MarkUnknown(ba, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioning, msg)
	}
	if status.ConditionsChanged() {
		r.Recorder.Eventf(ba, nil, corev1.EventTypeWarning, cosiapi.EventFailedGrantAccess, "WriteSecret", "%s", msg)
		if perr := status.Patch(ctx, patch.OptimisticLock); perr != nil {
			return fmt.Errorf("%w (and recording it: %w)", err, perr)
		}
	}
	return err
}

// recordGranted records the grant in status. Once the driver has answered, the result is written
// whatever else changed the object meanwhile (a tenant's label, the controller's condition): a
// conflict here is retried on a fresh copy, never by granting again. The first patch is made on
// ba as it is, locked to its version: the copy that phase 1's patch returned, unless this grant
// had no phase 1 (then it may be the cache's, and a stale one conflicts). An access that a fresh
// copy shows replaced (deleted, and another created under its name) gets nothing: the new one was
// never granted, and the old one's grant record is revoked as its access is gone.
func (r *BucketAccessReconciler) recordGranted(ctx context.Context, ba *cosiapi.BucketAccess) error {
	fresh := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !fresh {
			live := &cosiapi.BucketAccess{}
			if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ba), live); err != nil {
				return err
			}
			if live.UID != ba.UID {
				return errReplaced
			}
			live.DeepCopyInto(ba)
		}
		fresh = false
		status := r.record.status(ba)
		conditions.MarkTrue(ba, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioned, "access granted; Secrets written")
		conditions.MarkFalse(ba, cosiapi.ConditionProvisionFailed, cosiapi.ReasonDriverSucceeded, "")
		conditions.MarkTrue(ba, cosiapi.ConditionResourcesValidated, cosiapi.ReasonValid, "")
		return status.Patch(ctx, patch.OptimisticLock)
	})
	if err != nil {
		if errors.Is(err, errReplaced) {
			return nil
		}
		return lookup.IgnoreGone(err)
	}
	r.checks.done(client.ObjectKeyFromObject(ba), ba.UID)
	return nil
}

// errReplaced: the object read again under the name is another one (its UID differs).
var errReplaced = errors.New("replaced by another object of the same name")

// buckets resolves the Buckets of the access by claim name. ready is false while a Bucket is not
// provisioned yet: the access waits, and the Bucket watch wakes it.
//
// The hand-off in status is checked against the Buckets themselves before anything is granted:
// whoever can write bucketaccesses/status could otherwise name any Bucket of the cluster. Each
// Bucket must be bound to the claim of this access that names it, in the access's namespace.
func (r *BucketAccessReconciler) buckets(
	ctx context.Context, ba *cosiapi.BucketAccess,
) (map[string]*cosiapi.Bucket, bool, error) {
	buckets := map[string]*cosiapi.Bucket{}
	var waiting []string
	for _, ab := range ba.Status.AccessedBuckets {
		b := &cosiapi.Bucket{}
		// A final refusal only for a Bucket confirmed gone uncached: the cache may not have a
		// Bucket created a moment before the hand-off.
		gone, err := lookup.ConfirmGone(ctx, r.Client, r.APIReader, types.NamespacedName{Name: ab.BucketName}, b,
			func() bool { return true })
		if err != nil {
			return nil, false, err
		}
		if gone {
			return nil, false, r.record.invalid(ctx, ba, cosiapi.ReasonInvalidReference,
				fmt.Sprintf("Bucket %s of BucketClaim %s does not exist", ab.BucketName, ab.BucketClaimName))
		}
		ref := b.Spec.BucketClaimRef
		switch {
		case !slices.ContainsFunc(ba.Spec.BucketClaims, func(c cosiapi.BucketClaimAccess) bool {
			return c.BucketClaimName == ab.BucketClaimName
		}) ||
			buckets[ab.BucketClaimName] != nil:
			return nil, false, r.record.invalid(ctx, ba, cosiapi.ReasonInvalidReference,
				fmt.Sprintf("status names BucketClaim %s, which spec does not, or twice", ab.BucketClaimName))
		case ref.Namespace != ba.Namespace || ref.Name != ab.BucketClaimName || ref.UID == "":
			return nil, false, r.record.invalid(ctx, ba, cosiapi.ReasonInvalidReference,
				fmt.Sprintf("Bucket %s is not bound to BucketClaim %s", ab.BucketName, ab.BucketClaimName))
		case b.DeletionTimestamp != nil || b.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted] != "":
			return nil, false, r.record.invalid(ctx, ba, cosiapi.ReasonInvalidReference,
				fmt.Sprintf("BucketClaim %s is being deleted: no new access is granted to it", ab.BucketClaimName))
		case b.Spec.DriverName != r.Info.GetName():
			return nil, false, r.record.invalid(ctx, ba, cosiapi.ReasonInvalidReference,
				fmt.Sprintf("Bucket %s belongs to driver %s, not %s", ab.BucketName, b.Spec.DriverName, r.Info.GetName()))
		case b.Status.BucketID == "" || !conditions.IsTrue(b, cosiapi.ConditionProvisioned):
			waiting = append(waiting, ab.BucketName)
		case !slices.Contains(b.Status.Protocols, ba.Spec.Protocol):
			return nil, false, r.record.invalid(ctx, ba, cosiapi.ReasonUnsupportedProtocol,
				fmt.Sprintf("Bucket %s does not support %s (it supports %v)", ab.BucketName, ba.Spec.Protocol, b.Status.Protocols))
		}
		buckets[ab.BucketClaimName] = b
	}
	for _, claim := range ba.Spec.BucketClaims {
		if buckets[claim.BucketClaimName] == nil {
			return nil, false, r.record.invalid(ctx, ba, cosiapi.ReasonInvalidReference,
				fmt.Sprintf("BucketClaim %s has no accessed Bucket in status", claim.BucketClaimName))
		}
	}
	if len(waiting) == 0 {
		return buckets, true, nil
	}
	status := r.record.status(ba)
	msg := fmt.Sprintf("waiting for Buckets %v to be provisioned", waiting)
	if conditions.IsTrue(ba, cosiapi.ConditionProvisioned) {
		// A granted access whose lost Secret waits for its Bucket stays provisioned: its key
		// works, and Provisioned True is what keeps its next grant from revoking it (granted).
		conditions.MarkUnknown(ba, cosiapi.ConditionResourcesValidated, cosiapi.ReasonWaitingForResources, msg)
	} else {
		conditions.MarkUnknown(ba, cosiapi.ConditionProvisioned, cosiapi.ReasonWaitingForResources, msg)
	}
	if !status.ConditionsChanged() {
		return nil, false, nil
	}
	r.Recorder.Eventf(ba, nil, corev1.EventTypeNormal, cosiapi.EventWaitingForBucket, "Grant", msg)
	return nil, false, status.Patch(ctx, patch.OptimisticLock)
}

// secretConflict records that an access Secret's name is taken (ResourcesValidated False,
// SecretConflict) and retries later: the sidecar cannot watch Secrets, so it looks again after a
// while rather than waiting for an event.
func (r *BucketAccessReconciler) secretConflict(
	ctx context.Context, ba *cosiapi.BucketAccess, conflict errSecretConflict,
) error {
	status := r.record.status(ba)
	msg := conflict.Error()
	conditions.MarkFalse(ba, cosiapi.ConditionResourcesValidated, cosiapi.ReasonSecretConflict, msg)
	if !conditions.IsTrue(ba, cosiapi.ConditionProvisioned) {
		conditions.MarkUnknown(ba, cosiapi.ConditionProvisioned, cosiapi.ReasonWaitingForResources, msg)
	}
	if status.ConditionsChanged() {
		r.Recorder.Eventf(ba, nil, corev1.EventTypeWarning, cosiapi.EventFailedGrantAccess, "WriteSecret", "%s", msg)
		if err := status.Patch(ctx, patch.OptimisticLock); err != nil {
			return err
		}
	}
	return errRequeue(msg)
}

// delete removes the Secrets, revokes the access, and tells the controller (KEP-1979 "Deleting a
// BucketAccess", step 3). The Secrets go first, before the credentials in them stop working.
//
// The annotation alone does not end it: a tenant can set it on their own access before deleting
// it. The sidecar records the revocation in status first (Provisioned False, Revoked), which a
// tenant cannot write, and the controller waits for both.
func (r *BucketAccessReconciler) delete(ctx context.Context, ba *cosiapi.BucketAccess) error {
	if revoked(ba) {
		if ba.Annotations[cosiapi.AnnotationSidecarCleanupFinished] != "" {
			return nil
		}
		return lookup.IgnoreGone(patch.SetAnnotation(ctx, r.Client, ba, cosiapi.AnnotationSidecarCleanupFinished))
	}
	if err := r.deleteSecrets(ctx, ba); err != nil {
		return err
	}
	r.Grants.answers.forget(ba.UID)
	// Revoked from the sidecar's own record of the grant, not from status, which someone who can
	// write it could point at another access's account, nor from the Buckets, which an admin can
	// delete or replace. The record is written before the grant.
	rec, cm, err := r.Grants.store.get(ctx, ba.UID)
	if err != nil {
		return err
	}
	if rec == nil {
		if rec, err = r.unrecordedGrant(ctx, ba); err != nil {
			return err
		}
	}
	if rec != nil && rec.AccountID != "" && len(rec.BucketIDs) > 0 {
		if _, err := r.Driver.DriverRevokeBucketAccess(ctx, rec.revokeRequest()); err != nil {
			return r.record.failed(ctx, ba, rpcError{"DriverRevokeBucketAccess", err}, cosiapi.EventFailedRevokeAccess)
		}
	}
	if cm != nil {
		if err := r.Grants.store.remove(ctx, cm); err != nil {
			return err
		}
	}
	if err := r.forgetLegacyGrant(ctx, ba); err != nil {
		return err
	}
	status := r.record.status(ba)
	conditions.MarkFalse(ba, cosiapi.ConditionProvisioned, cosiapi.ReasonRevoked, "access revoked; Secrets deleted")
	if err := status.Patch(ctx, patch.OptimisticLock); err != nil {
		return lookup.IgnoreGone(err)
	}
	return lookup.IgnoreGone(patch.SetAnnotation(ctx, r.Client, ba, cosiapi.AnnotationSidecarCleanupFinished))
}

// revoked reports whether the sidecar recorded the access's revocation in status.
func revoked(ba *cosiapi.BucketAccess) bool {
	return conditions.Has(ba, cosiapi.ConditionProvisioned, metav1.ConditionFalse, cosiapi.ReasonRevoked)
}

// unrecordedGrant returns what revokes an access that has no grant record: it was granted by a
// version that recorded grants in Bucket annotations, or stopped between phase 1 and the record.
// Without an account ID in status (phase 1 persists it before anything is recorded or granted)
// nothing was granted. Otherwise the account revoked is the one the driver generates for this
// access (KEP-1979: the same ID for the same account name), never one that status names: whoever
// can write status could point it at another access's account. The buckets are those of status
// and of the Buckets it names.
func (r *BucketAccessReconciler) unrecordedGrant(ctx context.Context, ba *cosiapi.BucketAccess) (*grantRecord, error) {
	if ba.Status.AccountID == "" {
		return nil, nil
	}
	g := newGrantRecord(ba)
	for _, ab := range ba.Status.AccessedBuckets {
		b := &cosiapi.Bucket{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: ab.BucketName}, b); err == nil &&
			b.Status.BucketID != "" && !slices.Contains(g.BucketIDs, b.Status.BucketID) {
			g.BucketIDs = append(g.BucketIDs, b.Status.BucketID)
			g.Modes = append(g.Modes, claimModes(ba, ab.BucketClaimName))
		}
	}
	if len(g.BucketIDs) == 0 {
		return nil, nil
	}
	resp, err := r.Driver.DriverGenerateBucketAccessId(ctx, g.generateRequest())
	if err != nil {
		// Retried whatever the code, as the revocation it serves: recorded, then returned as an
		// error that is not final.
		failed := r.record.failed(ctx, ba, rpcError{"DriverGenerateBucketAccessId", err}, cosiapi.EventFailedRevokeAccess)
		return nil, errors.New(failed.Error())
	}
	if resp.GetAccountId() == "" {
		return nil, errRequeue("DriverGenerateBucketAccessId returned an empty account_id; the access cannot be revoked")
	}
	g.AccountID = resp.GetAccountId()
	return &g, nil
}

// forgetLegacyGrant removes the grant of the access that an earlier version recorded in its
// Buckets' annotations, once the access is revoked.
func (r *BucketAccessReconciler) forgetLegacyGrant(ctx context.Context, ba *cosiapi.BucketAccess) error {
	key := legacyGrantAnnotationPrefix + string(ba.UID)
	for _, ab := range ba.Status.AccessedBuckets {
		b := &cosiapi.Bucket{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: ab.BucketName}, b); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return err
		}
		if _, ok := b.Annotations[key]; !ok {
			continue
		}
		if err := patch.Annotation(ctx, r.Client, b, key, ""); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}
