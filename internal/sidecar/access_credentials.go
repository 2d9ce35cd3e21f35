package sidecar

import (
	"context"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// answers keeps the driver's answer to a grant until the access's Secrets are written with it. A
// Secret write that fails after the grant (a ResourceQuota on Secrets, a policy webhook, a server
// error, a tenant who made the Secret unwritable) is retried with the answer already obtained,
// never with a new grant: a driver that issues a new key on every grant would otherwise mint keys
// at the rate of the retries. The answer is dropped once the Secrets are written, the access is
// deleted, or a rotation asks the driver for a new credential (which revokes the answer's key);
// a sidecar that restarts meanwhile grants once more. An answer whose credentials are due for
// renewal (renewal, counted from the answer) is dropped too: written after a long outage, it
// would put credentials that expire, or expired, into the Secrets, and record them as renewed.
type answers struct {
	mu sync.Mutex
	m  map[types.UID]answer
}

type answer struct {
	// request is the grant request the answer is for, as bytes: a changed request (another
	// account, other buckets or parameters) is granted again.
	request string
	resp    *cosiproto.DriverGrantBucketAccessResponse
	// at is when the driver answered.
	at metav1.Time
}

func (a *answers) get(uid types.UID, request string) *cosiproto.DriverGrantBucketAccessResponse {
	a.mu.Lock()
	defer a.mu.Unlock()
	got, ok := a.m[uid]
	if !ok || got.request != request {
		return nil
	}
	if at := renewal(&got.at, credentialsExpiry(got.resp.GetCredentials())); !at.IsZero() && !time.Now().Before(at) {
		delete(a.m, uid)
		return nil
	}
	return got.resp
}

func (a *answers) put(uid types.UID, request string, resp *cosiproto.DriverGrantBucketAccessResponse) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[types.UID]answer{}
	}
	a.m[uid] = answer{request: request, resp: resp, at: metav1.Now()}
}

func (a *answers) forget(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.m, uid)
}

// askCredentials is phase 2: the driver's answer to the grant, unless it already answered this
// request and only the Secrets are missing (answers). forget drops the answer once the Secrets
// hold it and the record names its credential: a grant after that asks the driver again.
func (r *BucketAccessReconciler) askCredentials(
	ctx context.Context, ba *cosiapi.BucketAccess, p *preparedGrant,
) (resp *cosiproto.DriverGrantBucketAccessResponse, forget func(), err error) {
	uid := ba.UID
	forget = func() { r.Grants.answers.forget(uid) }
	grantReq := p.req.grant(ba.Status.AccountID)
	key, err := proto.MarshalOptions{Deterministic: true}.Marshal(grantReq)
	if err != nil {
		return nil, nil, err
	}
	if resp := r.Grants.answers.get(uid, string(key)); resp != nil {
		return resp, forget, nil
	}
	callCtx := ctx
	if !p.held {
		callCtx = v1alpha1.WithNoCredentialsHeld(ctx)
	}
	resp, err = r.Driver.DriverGrantBucketAccess(callCtx, grantReq)
	if r.Driver.Protocol() == driverclient.ProtocolV1alpha1 {
		// Only a v1alpha1 driver names accounts itself (access_driveraccounts.go).
		r.Grants.outcomes.ended(uid, err)
	}
	if err != nil {
		return nil, nil, driverFailed("DriverGrantBucketAccess", err)
	}
	if err := driver.ValidateGrantResponse(grantReq, resp); err != nil {
		return nil, nil, invalidAnswer("DriverGrantBucketAccess returned an incomplete or invalid answer: " + err.Error())
	}
	r.Grants.answers.put(uid, string(key), resp)
	return resp, forget, nil
}

// renewal is when credentials written at from and expiring at expiry are written again: once four
// fifths of their lifetime passed, and not sooner than requeueDelay after from, so that a driver
// whose new credentials do not expire later is not asked in a loop. Zero when they do not expire,
// or had expired when written (a new grant then waits for an admin's AnnotationRefreshSecret).
func renewal(from, expiry *metav1.Time) time.Time {
	if from == nil || expiry == nil || !expiry.After(from.Time) {
		return time.Time{}
	}
	at := from.Add(expiry.Sub(from.Time) * 4 / 5)
	if earliest := from.Add(requeueDelay); at.Before(earliest) {
		at = earliest
	}
	return at
}

// until is the wait until t, zero (no wait) when t is; at least a millisecond otherwise.
func until(t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return max(time.Until(t), time.Millisecond)
}

// credentialsExpiry is when the credentials of a driver's answer expire; nil when they do not.
func credentialsExpiry(creds *cosiproto.CredentialInfo) *metav1.Time {
	ts := creds.GetAzure().GetExpiryTimestamp()
	if ts == nil {
		return nil
	}
	return ptr.To(metav1.NewTime(ts.AsTime()))
}
