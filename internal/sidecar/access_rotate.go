package sidecar

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/kube/patch"
	"github.com/kube-cosi/cosi/pkg/driver"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Credential rotation (a COSI extension; docs/sidecar.md, "Credential rotation"). An admin asks
// for one with a new value of AnnotationRotateCredentials on a BucketAccess. The sidecar then,
// recording each step in the access's grant record before it takes the next:
//
//  1. records the rotation: the credential being replaced (From, the one the Secrets hold, as the
//     record names it) and the request's value, handled from then on;
//  2. asks the driver for a new credential (DriverRotateBucketAccessCredentials) and records its
//     credential_id (To), before any Secret holds it;
//  3. writes the new credential into every Secret of the access, in place, and records when
//     (Written);
//  4. once the grace period has passed since then, retires From
//     (DriverRetireBucketAccessCredentials), and records the rotation done.
//
// A rotation is also started, with no annotation, once the access's class's rotation period
// (cosiapi.ParameterRotationPeriod) has passed since the record's PeriodFrom: the access is
// requeued for that moment, and nothing is read or written before it.
//
// A sidecar that stops at any point continues from the record. Before To is recorded no Secret
// holds the new credential, so the driver is asked again (the call is idempotent, or replaces the
// credential nobody holds). Between 2 and 3 the answer may be lost with the sidecar: a Secret that
// already holds To (AnnotationCredentialID) gives its credential to the others; with none, the
// driver is asked again. From is retired only when no Secret holds it, and only after every
// Secret held To for the grace period: the sidecar never retires the credential a Secret holds,
// and never leaves From working once the rotation is done.

// rotationState is what a grant record keeps of the access's credentials.
type rotationState struct {
	// CredentialID is the credential_id of the credential the access's Secrets were last written
	// with (by a grant or a rotation); empty when the driver named none, and then the access's
	// credentials cannot rotate.
	CredentialID string `json:"credentialID,omitempty"`
	// RotateToken is the last AnnotationRotateCredentials value handled.
	RotateToken string `json:"rotateToken,omitempty"`
	// RefreshToken is the last AnnotationRefreshSecret value handled (access_refresh.go).
	RefreshToken string `json:"refreshToken,omitempty"`
	// PeriodFrom is when the rotation period last started: the Secrets were written with
	// CredentialID (by a grant or a rotation), or a rotation ended without a new credential (the
	// driver cannot rotate, or refused). Nil: when the record was created, before the grant.
	PeriodFrom *metav1.Time `json:"periodFrom,omitempty"`
	// Rotation is the rotation in progress.
	Rotation *rotation `json:"rotation,omitempty"`
	// Expiry is when the credentials the Secrets hold expire, as the driver's answer said (an
	// Azure SAS token's expiry); nil when they do not. ExpiryFrom is when the grant that answered
	// wrote them. The Secrets are written again from a new grant once four fifths of that
	// lifetime passed (renewal, access_renew.go).
	Expiry     *metav1.Time `json:"expiry,omitempty"`
	ExpiryFrom *metav1.Time `json:"expiryFrom,omitempty"`
	// NoRotation is set when the driver answered a rotation Unimplemented, until one succeeds:
	// credentials that expire are then renewed by a grant.
	NoRotation bool `json:"noRotation,omitempty"`
	// RenewByGrant is the ExpiryFrom of credentials whose renewal by a rotation failed for good,
	// or answered credentials due for renewal at once: those are renewed by a grant.
	RenewByGrant *metav1.Time `json:"renewByGrant,omitempty"`
	// Unretired are credentials that a rotation replaced and could not retire before the renewal
	// of their successor was due: retired at every look at the access until that succeeds.
	Unretired []string `json:"unretired,omitempty"`
	// DriverAccountIDs are the account IDs other than AccountID that a v1alpha1 driver returned for
	// the access, each recorded as soon as the driver answered, before any Secret held its
	// credentials (access_driveraccounts.go): revocation addresses each of them instead of
	// AccountID. Empty for v1alpha2 drivers and for v1alpha1 drivers whose account_id is the name.
	DriverAccountIDs []string `json:"driverAccountIDs,omitempty"`
}

// renewsByRotation reports whether the credentials the Secrets hold are renewed, before they
// expire, by a rotation rather than a grant: when the driver named their credential_id and has
// not refused to rotate them. A rotation issues new credentials and retires the old ones after the
// grace period, so a copy of credentials that expired stays expired (an Azure token's stored
// access policy is never extended); a grant may extend the same credentials, or fail to renew
// them at all.
func (g *rotationState) renewsByRotation() bool {
	return g.CredentialID != "" && !g.NoRotation && g.ExpiryFrom != nil &&
		(g.RenewByGrant == nil || !g.RenewByGrant.Equal(g.ExpiryFrom))
}

// rotationStuckPastExpiry reports whether the driver has not answered the rotation in progress
// and the credentials the Secrets hold expired meanwhile (by expiryMargin: the record keeps the
// expiry to the second, the driver may not).
func (g *rotationState) rotationStuckPastExpiry() bool {
	return g.Rotation != nil && g.Rotation.To == "" && g.Expiry != nil &&
		!time.Now().Before(g.Expiry.Add(expiryMargin))
}

// expiryMargin is how long after the recorded expiry credentials are surely expired.
const expiryMargin = time.Second

// renewalDue reports whether the credentials the Secrets hold are to be renewed by a rotation now.
func (g *rotationState) renewalDue() bool {
	at := renewal(g.ExpiryFrom, g.Expiry)
	return g.renewsByRotation() && !at.IsZero() && !time.Now().Before(at)
}

// rotation is one rotation in progress.
type rotation struct {
	// From is the credential being replaced; it is retired at the end.
	From string `json:"from"`
	// To is the credential the driver issued, recorded before any Secret holds it.
	To string `json:"to,omitempty"`
	// Renewal is set for a rotation that renews credentials before they expire.
	Renewal bool `json:"renewal,omitempty"`
	// Written is when every Secret of the access held To; From is retired a grace period later.
	Written *metav1.Time `json:"written,omitempty"`
}

// rotationAnswers keeps the driver's answer to a rotation until the Secrets hold it, as answers
// does for grants: a Secret write that fails is retried with it, without asking the driver again.
type rotationAnswers struct {
	mu sync.Mutex
	m  map[types.UID]*cosiproto.DriverRotateBucketAccessCredentialsResponse
}

func (a *rotationAnswers) get(uid types.UID, to string) *cosiproto.DriverRotateBucketAccessCredentialsResponse {
	a.mu.Lock()
	defer a.mu.Unlock()
	if resp := a.m[uid]; resp != nil && resp.GetCredentialId() == to {
		return resp
	}
	return nil
}

func (a *rotationAnswers) put(uid types.UID, resp *cosiproto.DriverRotateBucketAccessCredentialsResponse) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[types.UID]*cosiproto.DriverRotateBucketAccessCredentialsResponse{}
	}
	a.m[uid] = resp
}

func (a *rotationAnswers) forget(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.m, uid)
}

// rotateRequest is the request that rotates the recorded grant's credential from.
func (g grantRecord) rotateRequest(from string) *cosiproto.DriverRotateBucketAccessCredentialsRequest {
	gen := g.generateRequest()
	return &cosiproto.DriverRotateBucketAccessCredentialsRequest{
		AccountId: g.AccountID, Buckets: gen.GetBuckets(), Protocol: gen.GetProtocol(),
		AuthenticationType: gen.GetAuthenticationType(), ServiceAccount: gen.GetServiceAccount(),
		Parameters: gen.GetParameters(), CredentialId: from,
	}
}

// retireRequest is the request that retires one credential of the recorded grant's account.
func (g grantRecord) retireRequest(credentialID string) *cosiproto.DriverRetireBucketAccessCredentialsRequest {
	return &cosiproto.DriverRetireBucketAccessCredentialsRequest{
		AccountId: g.AccountID, CredentialId: credentialID, Protocol: rpcProtocol(g.Protocol), Parameters: g.Parameters,
	}
}

// rotationDue reports whether the record cm (g) has a rotation to start or continue for the
// access: one is in progress, the annotation has a new value, the credentials are to be renewed
// by a rotation, or the rotation period has passed. Otherwise wait is how long until the period
// passes (zero: no period; the renewal's moment is refresh's to wait for).
func rotationDue(
	ba *cosiapi.BucketAccess, g *rotationState, cm *corev1.ConfigMap, period time.Duration,
) (due bool, wait time.Duration) {
	if g == nil {
		return false, 0
	}
	token := ba.Annotations[cosiapi.AnnotationRotateCredentials]
	if g.Rotation != nil || token != "" && token != g.RotateToken || g.renewalDue() || len(g.Unretired) > 0 {
		return true, 0
	}
	if period <= 0 {
		return false, 0
	}
	from := cm.CreationTimestamp.Time
	if g.PeriodFrom != nil {
		from = g.PeriodFrom.Time
	}
	wait = time.Until(from.Add(period))
	return wait <= 0, wait
}

// rotate starts or continues the access's rotation, if one is asked for, due or in progress. It
// returns how long until the rotation needs the access again (zero: never). Nothing is written,
// and the API server is not asked, when there is nothing to do: the decision is made on the
// cached record, and confirmed on the record read uncached before anything is done.
func (r *BucketAccessReconciler) rotate(ctx context.Context, ba *cosiapi.BucketAccess) (time.Duration, error) {
	params, err := parseAccessParameters(ba.Status.Parameters)
	if err != nil {
		// Granted before the parameter was checked: no periodic rotation, and the condition says why.
		return 0, r.markRotation(ctx, ba, metav1.ConditionFalse, cosiapi.ReasonInvalidParameter, err.Error())
	}
	period := params.rotationPeriod
	if c, cm := r.Grants.store.cachedRecord(ctx, ba.UID); c == nil {
		return 0, nil
	} else if due, wait := rotationDue(ba, &c.rotationState, cm, period); !due {
		return wait, nil
	}
	g, cm, err := r.Grants.store.get(ctx, ba.UID)
	if err != nil || g == nil {
		return 0, err
	}
	if due, wait := rotationDue(ba, &g.rotationState, cm, period); !due || g.AccountID != ba.Status.AccountID {
		return wait, nil
	}
	retireErr := r.retireUnretired(ctx, ba, g, cm)
	if g.Rotation != nil && g.Rotation.To == "" && g.renewalDue() {
		// Not answered yet, and the credentials are to be renewed: its new credentials renew them.
		g.Rotation.Renewal = true
	}
	for {
		wait, err := r.rotateSteps(ctx, ba, g, cm, period)
		if err != nil || wait > 0 {
			return wait, errors.Join(retireErr, err)
		}
		// Done, or ended without a new credential. A new value of the annotation that came while
		// it ran, or credentials due for renewal, ask for the next rotation now: nothing else
		// would requeue the access before its next Secret check.
		if token := ba.Annotations[cosiapi.AnnotationRotateCredentials]; (token == "" || token == g.RotateToken) &&
			!g.renewalDue() {
			break
		}
	}
	if retireErr != nil {
		return 0, retireErr
	}
	// The next one is due a period after PeriodFrom (a period shorter than the grace period starts
	// it at once).
	if _, next := rotationDue(ba, &g.rotationState, cm, period); period > 0 {
		return max(next, time.Second), nil
	}
	return 0, nil
}

// rotateSteps takes the steps of the rotation that is due or in progress.
func (r *BucketAccessReconciler) rotateSteps(
	ctx context.Context, ba *cosiapi.BucketAccess, g *grantRecord, cm *corev1.ConfigMap, period time.Duration,
) (time.Duration, error) {
	if g.Rotation == nil {
		if err := r.startRotation(ctx, ba, g, cm, period); err != nil || g.Rotation == nil {
			return 0, err
		}
	}
	if g.Rotation.To == "" {
		if done, err := r.issueCredential(ctx, ba, g, cm); err != nil || done {
			return 0, err
		}
	}
	if g.Rotation.Written == nil {
		wait, err := r.writeRotated(ctx, ba, g, cm)
		if err != nil || wait > 0 || g.Rotation == nil {
			return wait, err
		}
	}
	return r.retireRotated(ctx, ba, g, cm)
}

// startRotation records the rotation that the annotation or the period asks for, or that it
// cannot be done.
func (r *BucketAccessReconciler) startRotation(
	ctx context.Context, ba *cosiapi.BucketAccess, g *grantRecord, cm *corev1.ConfigMap, period time.Duration,
) error {
	why, renewal := "asked by annotation "+cosiapi.AnnotationRotateCredentials, false
	switch token := ba.Annotations[cosiapi.AnnotationRotateCredentials]; {
	case token != "" && token != g.RotateToken:
	case g.renewalDue():
		why, renewal = "renewing credentials that expire at "+g.Expiry.UTC().Format(time.RFC3339), true
	default:
		why = fmt.Sprintf("rotation period %s (%s) passed", period, cosiapi.ParameterRotationPeriod)
	}
	g.RotateToken = ba.Annotations[cosiapi.AnnotationRotateCredentials]
	if g.CredentialID == "" {
		g.PeriodFrom = ptr.To(metav1.Now())
		if err := r.Grants.store.update(ctx, cm, *g); err != nil {
			return err
		}
		if ba.Status.AuthenticationType == cosiapi.AuthenticationTypeServiceAccount {
			return r.rotationUnsupported(ctx, ba, "a ServiceAccount access has no key to rotate: its workloads get "+
				"short-lived credentials themselves, as their ServiceAccount")
		}
		return r.rotationUnsupported(ctx, ba,
			"the driver named no credential_id when it granted this access: its credentials cannot rotate")
	}
	g.Rotation = &rotation{From: g.CredentialID, Renewal: renewal}
	if err := r.Grants.store.update(ctx, cm, *g); err != nil {
		return err
	}
	r.Recorder.Eventf(ba, nil, corev1.EventTypeNormal, cosiapi.EventRotatingCredentials, "Rotate",
		"rotating credential %s: %s", g.Rotation.From, why)
	return r.markRotation(ctx, ba, metav1.ConditionUnknown, cosiapi.ReasonRotating,
		"asking the driver for a new credential")
}

// issueCredential asks the driver for the new credential and records it (step 2). done is true
// when the rotation ended there: the driver cannot rotate, or refused with a final error.
func (r *BucketAccessReconciler) issueCredential(
	ctx context.Context, ba *cosiapi.BucketAccess, g *grantRecord, cm *corev1.ConfigMap,
) (done bool, err error) {
	rot := g.Rotation
	if g.CredentialID != rot.From {
		// A grant wrote the Secrets anew meanwhile (a lost Secret), with the credential the record
		// now names: that one replaces From.
		rot.To = g.CredentialID
		return false, r.Grants.store.update(ctx, cm, *g)
	}
	// A rotation revokes every credential of the account but From (IAM's, and the memory driver's
	// rule): the answer of a grant whose record or status write failed, kept for its retry, would
	// write a revoked key into the Secrets, and record it as the one to rotate from next. Forgotten
	// before the call, which may act even when its answer is lost: the retry grants anew.
	r.Grants.answers.forget(ba.UID)
	req := g.rotateRequest(rot.From)
	resp, err := r.Driver.DriverRotateBucketAccessCredentials(ctx, req)
	if err != nil {
		return r.rotationFailed(ctx, ba, g, cm, rpcError{"DriverRotateBucketAccessCredentials", err})
	}
	if verr := driver.ValidateRotateResponse(req, resp); verr != nil {
		// Unusable: the credential it may have issued is retired at once (nobody holds it).
		if id := resp.GetCredentialId(); id != "" && id != rot.From {
			if _, err := r.Driver.DriverRetireBucketAccessCredentials(ctx, g.retireRequest(id)); err != nil {
				return false, errors.New(rpcError{"DriverRetireBucketAccessCredentials", err}.Error())
			}
		}
		return r.rotationFailed(ctx, ba, g, cm, rpcError{"DriverRotateBucketAccessCredentials",
			status.Error(codes.InvalidArgument, "invalid answer: "+verr.Error())})
	}
	r.rotations.put(ba.UID, resp)
	rot.To = resp.GetCredentialId()
	return false, r.Grants.store.update(ctx, cm, *g)
}

// rotationFailed records a failed rotation call: retried with backoff when repeating it may
// help; otherwise the rotation ends, the old credential still in the Secrets and working.
func (r *BucketAccessReconciler) rotationFailed(
	ctx context.Context, ba *cosiapi.BucketAccess, g *grantRecord, cm *corev1.ConfigMap, rpc rpcError,
) (bool, error) {
	code := status.Code(rpc.err)
	switch code {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.OutOfRange, codes.Unimplemented:
		// Final: repeating the same request cannot help.
	case codes.ResourceExhausted:
		// The backend has no room for the new credential until something else is retired (an
		// Azure container's free stored access policy, taken by another access's rotation for its
		// grace period): asked again at short, fixed intervals, not with a backoff that would
		// grow past the moment room is made, and a renewal's credentials would expire meanwhile.
		return false, errors.Join(errRequeue(rpc.Error()), r.markRotation(ctx, ba, metav1.ConditionUnknown,
			cosiapi.ReasonRotating, "waiting for room: "+rpc.Error()))
	default:
		r.Recorder.Eventf(ba, nil, corev1.EventTypeWarning, cosiapi.EventFailedRotateCredentials, "Rotate",
			"%s", conditions.Truncate(rpc.Error()))
		// Returned as a plain error: retried with backoff whatever the code.
		return false, errors.Join(errors.New(rpc.Error()), r.markRotation(ctx, ba, metav1.ConditionUnknown,
			cosiapi.ReasonRotating, "retrying: "+rpc.Error()))
	}
	if g.Rotation.Renewal {
		// Renewed by a grant instead (refresh), rather than asked again at once.
		g.RenewByGrant = g.ExpiryFrom
	}
	g.NoRotation = code == codes.Unimplemented
	g.Rotation = nil
	g.PeriodFrom = ptr.To(metav1.Now())
	if err := r.Grants.store.update(ctx, cm, *g); err != nil {
		return false, err
	}
	r.rotations.forget(ba.UID)
	if code == codes.Unimplemented {
		return true, r.rotationUnsupported(ctx, ba, "the driver cannot rotate credentials: "+rpc.Error())
	}
	msg := "the rotation failed and is not retried; the credential in the Secrets keeps working: " + rpc.Error()
	r.Recorder.Eventf(ba, nil, corev1.EventTypeWarning, cosiapi.EventFailedRotateCredentials, "Rotate",
		"%s", conditions.Truncate(msg))
	return true, r.markRotation(ctx, ba, metav1.ConditionFalse, cosiapi.ReasonRotationFailed, msg)
}

func (r *BucketAccessReconciler) rotationUnsupported(ctx context.Context, ba *cosiapi.BucketAccess, msg string) error {
	r.Recorder.Eventf(ba, nil, corev1.EventTypeWarning, cosiapi.EventRotationUnsupported, "Rotate",
		"%s", conditions.Truncate(msg))
	return r.markRotation(ctx, ba, metav1.ConditionFalse, cosiapi.ReasonRotationUnsupported, msg)
}

// writeRotated writes the new credential into every Secret of the access, in place (step 3): from
// the driver's answer, or, when that was lost with a restart, from a Secret that already holds
// it; with neither, the driver is asked again. It returns a wait while the Secrets cannot be
// written yet.
func (r *BucketAccessReconciler) writeRotated(
	ctx context.Context, ba *cosiapi.BucketAccess, g *grantRecord, cm *corev1.ConfigMap,
) (time.Duration, error) {
	rot := g.Rotation
	var expiry *metav1.Time // of the new credential, when the driver's answer is at hand
	answered := false
	if resp := r.rotations.get(ba.UID, rot.To); resp != nil {
		if wait, err := r.writeAnswer(ctx, ba, resp); err != nil || wait > 0 {
			return wait, err
		}
		expiry, answered = credentialsExpiry(resp.GetCredentials()), true
	} else {
		copied, wait, err := r.copyRotated(ctx, ba, rot.To)
		if err != nil || wait > 0 {
			return wait, err
		}
		if !copied {
			// No Secret holds To, nor does anything else (only Secrets are written with it): the
			// driver is asked again, and may replace To with another credential.
			rot.To = ""
			if done, err := r.issueCredential(ctx, ba, g, cm); err != nil || done {
				return 0, err
			}
			return r.writeRotated(ctx, ba, g, cm)
		}
	}
	r.rotations.forget(ba.UID)
	now := metav1.Now()
	rot.Written = &now
	g.CredentialID, g.PeriodFrom, g.NoRotation = rot.To, &now, false
	old := g.Expiry
	if !answered && rot.Renewal {
		// The answer, with the new credential's expiry, was lost in a restart: the renewal is still
		// due by the record, and a rotation now would cut the grace period short. A grant
		// (refresh) returns the new credential with its expiry, and renewals rotate from there.
		g.RenewByGrant = g.ExpiryFrom
	}
	if answered {
		g.Expiry, g.ExpiryFrom = expiry, &now
		if expiry == nil {
			g.ExpiryFrom = nil
		}
		if g.renewalDue() {
			// Due for renewal at once (expired already, or about to): renewing by a rotation
			// again would loop; a grant renews them, and says so.
			g.RenewByGrant = g.ExpiryFrom
		}
	}
	if err := r.Grants.store.update(ctx, cm, *g); err != nil {
		return 0, err
	}
	if err := r.secretsWritten(ctx, ba); err != nil {
		return 0, err
	}
	if rot.Renewal && answered && old != nil {
		next := "the new credentials do not expire"
		if g.Expiry != nil {
			next = "the new credentials expire at " + g.Expiry.UTC().Format(time.RFC3339)
		}
		r.Recorder.Eventf(ba, nil, corev1.EventTypeNormal, cosiapi.EventSecretsRefreshed, "Refresh",
			"renewed before the credentials' expiry at %s: %s (credential %s, replacing %s, retired after %s)",
			old.UTC().Format(time.RFC3339), next, rot.To, rot.From, r.RotationGracePeriod)
	}
	return 0, r.markRotation(ctx, ba, metav1.ConditionUnknown, cosiapi.ReasonRotating, fmt.Sprintf(
		"the Secrets hold the new credential %s; credential %s is retired after %s", rot.To, rot.From,
		r.RotationGracePeriod))
}

// writeAnswer writes the Secrets from the driver's answer to the rotation.
func (r *BucketAccessReconciler) writeAnswer(
	ctx context.Context, ba *cosiapi.BucketAccess, resp *cosiproto.DriverRotateBucketAccessCredentialsResponse,
) (time.Duration, error) {
	buckets, ready, err := r.buckets(ctx, ba)
	if err != nil || !ready {
		return requeueDelay, r.recordProblem(ctx, ba, err)
	}
	granted := &cosiproto.DriverGrantBucketAccessResponse{
		Buckets: resp.GetBuckets(), Credentials: resp.GetCredentials(),
		CertificateAuthority: resp.GetCertificateAuthority(), CredentialId: resp.GetCredentialId(),
	}
	return 0, r.recordProblem(ctx, ba, r.writeSecrets(ctx, ba, buckets, rpcProtocol(ba.Spec.Protocol), granted))
}

// copyRotated gives the credential to of a Secret that holds it to the access's other Secrets,
// writing again those that were lost (deleted, or missing a key) from the Buckets' information.
// copied is false when no Secret holds it: the driver is then asked again, and its answer written
// into every Secret, lost ones included (a rotation that waited for the Secret check to write a
// lost Secret would wait forever: the check leaves the Secrets to a rotation that writes them).
func (r *BucketAccessReconciler) copyRotated(
	ctx context.Context, ba *cosiapi.BucketAccess, to string,
) (copied bool, wait time.Duration, err error) {
	secrets := map[string]*corev1.Secret{}
	var donor *corev1.Secret
	for _, claim := range ba.Spec.BucketClaims {
		state, s, err := r.probeSecret(ctx, ba, claim.AccessSecretName)
		if err != nil {
			return false, 0, err
		}
		switch {
		case state == slotForeign:
			return false, requeueDelay, r.recordProblem(ctx, ba, secretTaken(errSecretConflict{claim.AccessSecretName}))
		case state == slotDeleting:
			// Let go (COSI's finalizer removed), and written again once it is gone.
			if err := r.releaseSecret(ctx, s); err != nil {
				return false, 0, err
			}
			return false, requeueDelay, nil
		case state == slotOurs && dataComplete(s, ba.Status.AuthenticationType):
			secrets[claim.AccessSecretName] = s
			if s.Annotations[cosiapi.AnnotationCredentialID] == to {
				donor = s
			}
		}
	}
	if donor == nil {
		return false, 0, nil
	}
	var buckets map[string]*cosiapi.Bucket
	for _, claim := range ba.Spec.BucketClaims {
		s := secrets[claim.AccessSecretName]
		var data map[string][]byte
		switch {
		case s != nil && s.Annotations[cosiapi.AnnotationCredentialID] == to:
			continue
		case s != nil:
			data = maps.Clone(s.Data)
		default:
			// Lost: its Bucket's information, as the Bucket's status has it.
			if buckets == nil {
				var ready bool
				if buckets, ready, err = r.buckets(ctx, ba); err != nil || !ready {
					return false, requeueDelay, r.recordProblem(ctx, ba, err)
				}
			}
			data = map[string][]byte{cosiapi.SecretKeyProtocol: []byte(ba.Spec.Protocol)}
			for k, v := range secretBucketInfo(ba.Spec.Protocol, buckets[claim.BucketClaimName].Status.BucketInfo) {
				data[k] = []byte(v)
			}
		}
		for _, k := range credentialDataKeys {
			delete(data, k)
			if v, ok := donor.Data[k]; ok {
				data[k] = v
			}
		}
		if err := r.writeSecret(ctx, ba, claim, data, to); err != nil {
			return false, 0, fmt.Errorf("writing Secret %s: %w", claim.AccessSecretName, err)
		}
	}
	return true, 0, nil
}

// retireRotated retires the replaced credential once every Secret has held the new one for the
// grace period, and records the rotation done (step 4). A Secret that holds the old credential
// again (someone restored it) is written anew first, and the grace period starts over.
func (r *BucketAccessReconciler) retireRotated(
	ctx context.Context, ba *cosiapi.BucketAccess, g *grantRecord, cm *corev1.ConfigMap,
) (time.Duration, error) {
	rot := g.Rotation
	if wait := time.Until(rot.Written.Add(r.RotationGracePeriod)); wait > 0 && !g.renewalDue() {
		// The renewal of the new credential, once due, ends the grace period: the Secrets held it
		// for four fifths of its life, and the next rotation replaces it.
		return wait, nil
	}
	for _, claim := range ba.Spec.BucketClaims {
		state, s, err := r.probeSecret(ctx, ba, claim.AccessSecretName)
		if err != nil {
			return 0, err
		}
		if state == slotOurs && s.Annotations[cosiapi.AnnotationCredentialID] == rot.From && rot.From != rot.To {
			rot.Written = nil
			return requeueDelay, r.Grants.store.update(ctx, cm, *g)
		}
	}
	if rot.From != rot.To {
		if err := r.retire(ctx, ba, g, rot.From); err != nil {
			if !g.renewalDue() {
				return 0, err
			}
			// Retired later (retireUnretired), not holding back the renewal.
			g.Unretired = append(g.Unretired, rot.From)
		}
	}
	from, to := rot.From, rot.To
	g.Rotation = nil
	if err := r.Grants.store.update(ctx, cm, *g); err != nil {
		return 0, err
	}
	r.Recorder.Eventf(ba, nil, corev1.EventTypeNormal, cosiapi.EventCredentialsRotated, "Rotate",
		"credential %s replaced by %s, and retired", from, to)
	return 0, r.markRotation(ctx, ba, metav1.ConditionTrue, cosiapi.ReasonRotated,
		fmt.Sprintf("the Secrets hold credential %s; credential %s is retired", to, from))
}

// retire retires credential id of the access. Its failure is never final: a credential that
// should be retired must not keep working.
func (r *BucketAccessReconciler) retire(
	ctx context.Context, ba *cosiapi.BucketAccess, g *grantRecord, id string,
) error {
	if _, err := r.Driver.DriverRetireBucketAccessCredentials(ctx, g.retireRequest(id)); err != nil {
		rpc := rpcError{"DriverRetireBucketAccessCredentials", err}
		r.Recorder.Eventf(ba, nil, corev1.EventTypeWarning, cosiapi.EventFailedRotateCredentials, "Retire",
			"%s", conditions.Truncate(rpc.Error()))
		return errors.New(rpc.Error())
	}
	return nil
}

// retireUnretired retires the credentials that rotations could not retire in time, and records
// those it did. Those it could not stay recorded, and the error says so.
func (r *BucketAccessReconciler) retireUnretired(
	ctx context.Context, ba *cosiapi.BucketAccess, g *grantRecord, cm *corev1.ConfigMap,
) error {
	if len(g.Unretired) == 0 {
		return nil
	}
	var left []string
	var errs []error
	for _, id := range g.Unretired {
		if err := r.retire(ctx, ba, g, id); err != nil {
			left, errs = append(left, id), append(errs, err)
		}
	}
	if len(left) == len(g.Unretired) {
		return errors.Join(errs...)
	}
	g.Unretired = left
	return errors.Join(append(errs, r.Grants.store.update(ctx, cm, *g))...)
}

// markRotation sets the access's CredentialsRotated condition, writing only when it changed.
func (r *BucketAccessReconciler) markRotation(
	ctx context.Context, ba *cosiapi.BucketAccess, st metav1.ConditionStatus, reason, msg string,
) error {
	s := r.record.status(ba)
	conditions.Set(ba, cosiapi.ConditionCredentialsRotated, st, reason, conditions.Truncate(msg))
	if !s.ConditionsChanged() {
		return nil
	}
	return s.Patch(ctx, patch.OptimisticLock)
}
