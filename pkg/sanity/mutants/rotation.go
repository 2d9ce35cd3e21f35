package mutants

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

const (
	caseRotateWorks = "DriverRotateBucketAccessCredentials/returns a new working credential; " +
		"the old one keeps working"
	caseRotateIdempotent = "DriverRotateBucketAccessCredentials/is idempotent for the same credential_id"
	caseRetireWorks      = "DriverRetireBucketAccessCredentials/refuses the retired credential and keeps the new one"
	caseRetireOnly       = "DriverRetireBucketAccessCredentials/refuses the account's only credential " +
		"with FailedPrecondition"
	caseRotateUnknownCredential = "DriverRotateBucketAccessCredentials/returns NotFound for a credential " +
		"the account does not have"
)

func rotationMutants() []Mutant {
	return []Mutant{
		{
			Name: "retire-keeps-key", MustCatch: true,
			Bug:  "DriverRetireBucketAccessCredentials answers OK and leaves the old key working",
			Case: caseRetireWorks, Says: "still works",
			New: plain(func(d *memory.Driver) Server { return retireKeepsKey{d} }),
		},
		{
			Name: "rotate-revokes-old", MustCatch: true,
			Bug:  "DriverRotateBucketAccessCredentials revokes the old key at once (no grace for running Pods)",
			Case: caseRotateWorks, Says: "stopped working before it was retired",
			New: plain(func(d *memory.Driver) Server { return rotateRevokesOld{d} }),
		},
		{
			Name: "retire-only-key", MustCatch: true,
			Bug: "DriverRetireBucketAccessCredentials of the account's only key deletes it and answers OK, " +
				"leaving an account no credential opens",
			Case: caseRetireOnly, Says: "returned OK",
			New: plain(func(d *memory.Driver) Server { return retireOnlyKey{d} }),
		},
		{
			Name: "rotate-unknown-credential", MustCatch: true,
			Bug: "DriverRotateBucketAccessCredentials with a credential_id the account does not have rotates " +
				"the account's current key instead of answering NotFound",
			Case: caseRotateUnknownCredential, Says: "returned OK",
			New: plain(func(d *memory.Driver) Server { return &rotateAnyCredential{Driver: d, current: map[string]string{}} }),
		},
		{
			Name: "rotate-twice-two-keys", MustCatch: true,
			Bug:  "a repeated rotation (a retry) issues another key and leaves the first call's key working",
			Case: caseRotateIdempotent, Says: "left the first call's",
			New: plain(func(d *memory.Driver) Server { return &rotateTwiceTwoKeys{Driver: d, issued: map[string]string{}} }),
		},
	}
}

type retireKeepsKey struct{ *memory.Driver }

func (retireKeepsKey) DriverRetireBucketAccessCredentials(
	context.Context, *cosiproto.DriverRetireBucketAccessCredentialsRequest,
) (*cosiproto.DriverRetireBucketAccessCredentialsResponse, error) {
	return &cosiproto.DriverRetireBucketAccessCredentialsResponse{}, nil
}

type rotateRevokesOld struct{ *memory.Driver }

func (d rotateRevokesOld) DriverRotateBucketAccessCredentials(
	ctx context.Context, req *cosiproto.DriverRotateBucketAccessCredentialsRequest,
) (*cosiproto.DriverRotateBucketAccessCredentialsResponse, error) {
	resp, err := d.Driver.DriverRotateBucketAccessCredentials(ctx, req)
	if err == nil { // the bug: the old key stops working at once
		_, err = d.Driver.DriverRetireBucketAccessCredentials(ctx, &cosiproto.DriverRetireBucketAccessCredentialsRequest{
			AccountId: req.GetAccountId(), CredentialId: req.GetCredentialId(),
		})
	}
	return resp, err
}

// rotateTwiceTwoKeys issues a new key on every call: a repeated call rotates from the key the
// first one issued, which keeps working.
type rotateTwiceTwoKeys struct {
	*memory.Driver
	mu     sync.Mutex
	issued map[string]string
}

func (d *rotateTwiceTwoKeys) DriverRotateBucketAccessCredentials(
	ctx context.Context, req *cosiproto.DriverRotateBucketAccessCredentialsRequest,
) (*cosiproto.DriverRotateBucketAccessCredentialsResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	key := req.GetAccountId() + "/" + req.GetCredentialId()
	if last, ok := d.issued[key]; ok {
		req = proto.Clone(req).(*cosiproto.DriverRotateBucketAccessCredentialsRequest)
		req.CredentialId = last
	}
	resp, err := d.Driver.DriverRotateBucketAccessCredentials(ctx, req)
	if err == nil {
		d.issued[key] = resp.GetCredentialId()
	}
	return resp, err
}

// retireOnlyKey retires the only key by revoking the account it belongs to.
type retireOnlyKey struct{ *memory.Driver }

func (d retireOnlyKey) DriverRetireBucketAccessCredentials(
	ctx context.Context, req *cosiproto.DriverRetireBucketAccessCredentialsRequest,
) (*cosiproto.DriverRetireBucketAccessCredentialsResponse, error) {
	resp, err := d.Driver.DriverRetireBucketAccessCredentials(ctx, req)
	if isCode(err, codes.FailedPrecondition) { // the bug: the only key goes all the same
		if _, err := d.Driver.DriverRevokeBucketAccess(ctx, &cosiproto.DriverRevokeBucketAccessRequest{
			AccountId: req.GetAccountId(),
		}); err != nil {
			return nil, err
		}
		return &cosiproto.DriverRetireBucketAccessCredentialsResponse{}, nil
	}
	return resp, err
}

// rotateAnyCredential rotates from the account's current key when credential_id names none of its
// keys.
type rotateAnyCredential struct {
	*memory.Driver
	mu      sync.Mutex
	current map[string]string // account ID -> credential ID of its last grant or rotation
}

func (d *rotateAnyCredential) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, req)
	if err == nil {
		d.mu.Lock()
		d.current[req.GetAccountId()] = resp.GetCredentialId()
		d.mu.Unlock()
	}
	return resp, err
}

func (d *rotateAnyCredential) DriverRotateBucketAccessCredentials(
	ctx context.Context, req *cosiproto.DriverRotateBucketAccessCredentialsRequest,
) (*cosiproto.DriverRotateBucketAccessCredentialsResponse, error) {
	resp, err := d.Driver.DriverRotateBucketAccessCredentials(ctx, req)
	d.mu.Lock()
	defer d.mu.Unlock()
	if current, ok := d.current[req.GetAccountId()]; ok && isCode(err, codes.NotFound) {
		r := clone(req)
		r.CredentialId = current // the bug: any credential_id rotates the current key
		resp, err = d.Driver.DriverRotateBucketAccessCredentials(ctx, r)
	}
	if err == nil {
		d.current[req.GetAccountId()] = resp.GetCredentialId()
	}
	return resp, err
}
