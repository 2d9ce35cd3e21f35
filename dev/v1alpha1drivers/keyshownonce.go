// Package v1alpha1drivers holds, for tests, COSI v1alpha1 drivers with the answers of driver
// classes that the reference v1alpha1 driver (drivers/v1alpha1s3) never gives: wrappers around any
// v1alpha1 driver that mimic such a class over its real store, and ServeS3, which serves the
// reference driver on Versity, wrapped or not.
package v1alpha1drivers

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"
)

// Server is what a v1alpha1 driver serves.
type Server interface {
	v1.IdentityServer
	v1.ProvisionerServer
}

// KeyShownOnce mimics the v1alpha1 drivers that show an account's key once: the grant that creates
// an account returns its key, and every later grant of that account, until it is revoked, answers
// ALREADY_EXISTS without credentials (the v1alpha1 spec allows it: "Multiple calls to ...
// GrantBucketAccess ... may result in error ALREADY_EXISTS"). A revoked account can be granted
// anew. Everything else is the wrapped driver's.
type KeyShownOnce struct {
	Server

	mu      sync.Mutex
	granted map[string]bool
	calls   map[string]int
}

// NewKeyShownOnce wraps d.
func NewKeyShownOnce(d Server) *KeyShownOnce {
	return &KeyShownOnce{Server: d, granted: map[string]bool{}, calls: map[string]int{}}
}

// DriverGrantBucketAccess grants an account that does not exist yet, with the wrapped driver, and
// answers ALREADY_EXISTS for one that does.
func (d *KeyShownOnce) DriverGrantBucketAccess(
	ctx context.Context, req *v1.DriverGrantBucketAccessRequest,
) (*v1.DriverGrantBucketAccessResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls[req.GetName()]++
	if d.granted[req.GetName()] {
		return nil, status.Errorf(codes.AlreadyExists, "account %s exists", req.GetName())
	}
	resp, err := d.Server.DriverGrantBucketAccess(ctx, req)
	if err == nil {
		d.granted[req.GetName()] = true
	}
	return resp, err
}

// DriverRevokeBucketAccess revokes the account with the wrapped driver; it can be granted again.
func (d *KeyShownOnce) DriverRevokeBucketAccess(
	ctx context.Context, req *v1.DriverRevokeBucketAccessRequest,
) (*v1.DriverRevokeBucketAccessResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	resp, err := d.Server.DriverRevokeBucketAccess(ctx, req)
	if err == nil {
		delete(d.granted, req.GetAccountId())
	}
	return resp, err
}

// Grants is the number of DriverGrantBucketAccess calls for the account, answered or refused.
func (d *KeyShownOnce) Grants(account string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[account]
}
