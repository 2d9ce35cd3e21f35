package v1alpha1drivers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"

	v1 "sigs.k8s.io/container-object-storage-interface/proto"
)

// RandomAccounts mimics the v1alpha1 drivers that name each account themselves, anew on every
// grant, whatever name they are given (v1alpha1 allows it: DriverGrantBucketAccessResponse.
// account_id): every DriverGrantBucketAccess makes an account "ba-" + 8 random hex digits with the
// wrapped driver and returns that ID; revocation addresses the account by it. A repeated grant
// makes another account.
type RandomAccounts struct {
	Server

	// AfterGrant, when set, is called after the wrapped driver made an account and before the
	// answer is returned, with the account's ID: a test holds the answer there (a sidecar that
	// stops now never receives it).
	AfterGrant func(ctx context.Context, accountID string)
	// BeforeGrant, when set, is called with the grant's request (the name it was given) and the ID
	// of the account it is about to make, before the wrapped driver is asked: a fault suite learns
	// which access and bucket each account was made for, also when the grant is cut short and
	// nobody receives its answer.
	BeforeGrant func(req *v1.DriverGrantBucketAccessRequest, accountID string)

	mu      sync.Mutex
	made    []string
	revoked []string
}

// NewRandomAccounts wraps d.
func NewRandomAccounts(d Server) *RandomAccounts { return &RandomAccounts{Server: d} }

// DriverGrantBucketAccess makes an account of a random name with the wrapped driver.
func (d *RandomAccounts) DriverGrantBucketAccess(
	ctx context.Context, req *v1.DriverGrantBucketAccessRequest,
) (*v1.DriverGrantBucketAccessResponse, error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	id := "ba-" + hex.EncodeToString(b)
	if d.BeforeGrant != nil {
		d.BeforeGrant(req, id)
	}
	named := &v1.DriverGrantBucketAccessRequest{
		BucketId: req.GetBucketId(), Name: id, AuthenticationType: req.GetAuthenticationType(),
		Parameters: req.GetParameters(),
	}
	resp, err := d.Server.DriverGrantBucketAccess(ctx, named)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.made = append(d.made, id)
	d.mu.Unlock()
	if d.AfterGrant != nil {
		d.AfterGrant(ctx, id)
	}
	resp.AccountId = id
	return resp, nil
}

// DriverRevokeBucketAccess revokes the account with the wrapped driver.
func (d *RandomAccounts) DriverRevokeBucketAccess(
	ctx context.Context, req *v1.DriverRevokeBucketAccessRequest,
) (*v1.DriverRevokeBucketAccessResponse, error) {
	resp, err := d.Server.DriverRevokeBucketAccess(ctx, req)
	if err == nil {
		d.mu.Lock()
		d.revoked = append(d.revoked, req.GetAccountId())
		d.mu.Unlock()
	}
	return resp, err
}

// Made are the accounts the driver made, in order; Live those of them not revoked since.
func (d *RandomAccounts) Made() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.made)
}

// Live are the accounts made and not revoked.
func (d *RandomAccounts) Live() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, id := range d.made {
		if !slices.Contains(d.revoked, id) {
			out = append(out, id)
		}
	}
	return out
}
