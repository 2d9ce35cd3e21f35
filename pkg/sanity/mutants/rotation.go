package mutants

import (
	"context"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

const (
	caseRotateWorks = "DriverRotateBucketAccessCredentials/" +
		"returns a new working credential; the old one keeps working"
	caseRotateIdempotent = "DriverRotateBucketAccessCredentials/is idempotent for the same credential_id"
	caseRetireWorks      = "DriverRetireBucketAccessCredentials/refuses the retired credential and keeps the new one"
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
