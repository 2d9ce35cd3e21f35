package v1alpha1_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
)

// unheld is the test's context, saying that no credentials of the granted account were handed out.
func unheld(t *testing.T) context.Context { return v1alpha1.WithNoCredentialsHeld(t.Context()) }

// The answers the reference v1alpha1 driver never gives, driven through the sidecar's production
// client against the fake driver (fake_test.go) on a real Unix socket.

// ALREADY_EXISTS on DriverGrantBucketAccess when the caller says no credentials of the account
// were handed out (an earlier answer was lost): the driver will not return the key again, so the
// adapter revokes the account and grants it once more, and the answer holds the new key. (Without
// that word, nothing is revoked: regrant_test.go.)
func TestUnheldGrantAlreadyExistsRevokesAndGrantsAgain(t *testing.T) {
	f := newFake()
	f.accounts["ba-1"] = true // granted before; its key was lost
	f.grant = func(_ int, req *v1.DriverGrantBucketAccessRequest) (*v1.DriverGrantBucketAccessResponse, error) {
		if f.accounts[req.GetName()] {
			return nil, status.Error(codes.AlreadyExists, "account exists")
		}
		return nil, nil
	}
	c, _ := serveFake(t, f)
	resp, err := c.DriverGrantBucketAccess(unheld(t), grantRequest("ba-1", readWrite))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetCredentials().GetS3().GetAccessSecretKey() != fakeSecret {
		t.Errorf("the answer lacks the new key")
	}
	_, accounts, calls := f.state()
	if calls["DriverRevokeBucketAccess"] != 1 || calls["DriverGrantBucketAccess"] != 2 {
		t.Errorf("calls %v, want one revoke between two grants", calls)
	}
	if !slices.Equal(accounts, []string{"ba-1"}) {
		t.Errorf("accounts %v, want [ba-1]", accounts)
	}
}

// When the grant after the revocation fails, nothing is left: the old account is revoked, no new
// one exists, no key is returned, and the failure is the driver's (here retried by the sidecar).
func TestUnheldGrantAlreadyExistsRegrantFails(t *testing.T) {
	f := newFake()
	f.accounts["ba-1"] = true
	f.grant = func(n int, _ *v1.DriverGrantBucketAccessRequest) (*v1.DriverGrantBucketAccessResponse, error) {
		if n == 1 {
			return nil, status.Error(codes.AlreadyExists, "account exists")
		}
		return nil, status.Error(codes.Unavailable, "backend busy")
	}
	c, _ := serveFake(t, f)
	resp, err := c.DriverGrantBucketAccess(unheld(t), grantRequest("ba-1", readWrite))
	if status.Code(err) != codes.Unavailable || resp != nil {
		t.Fatalf("DriverGrantBucketAccess: %v, %v; want the regrant's UNAVAILABLE and no answer", resp, err)
	}
	if _, accounts, _ := f.state(); len(accounts) != 0 {
		t.Errorf("accounts %v left after a failed regrant", accounts)
	}
}

// When the revocation before the regrant fails, the grant fails with a code the sidecar retries,
// whatever the driver's code: a failed revocation is never final, and the old account stays
// recorded for the sidecar's revocation (by name) at deletion.
func TestUnheldGrantAlreadyExistsRevokeFails(t *testing.T) {
	f := newFake()
	f.accounts["ba-1"] = true
	f.grant = func(_ int, req *v1.DriverGrantBucketAccessRequest) (*v1.DriverGrantBucketAccessResponse, error) {
		if f.accounts[req.GetName()] {
			return nil, status.Error(codes.AlreadyExists, "account exists")
		}
		return nil, nil
	}
	f.revoke = func(n int, _ *v1.DriverRevokeBucketAccessRequest) error {
		if n == 1 {
			return status.Error(codes.InvalidArgument, "careless vendor: revoke refused")
		}
		return nil
	}
	c, _ := serveFake(t, f)
	_, err := c.DriverGrantBucketAccess(unheld(t), grantRequest("ba-1", readWrite))
	if err == nil || finalForGrant(err) {
		t.Fatalf("DriverGrantBucketAccess with a failed revocation: %v, want an error the sidecar retries", err)
	}
	// The sidecar's retry.
	resp, err := c.DriverGrantBucketAccess(unheld(t), grantRequest("ba-1", readWrite))
	if err != nil || resp.GetCredentials().GetS3().GetAccessSecretKey() != fakeSecret {
		t.Fatalf("retried grant: %v", err)
	}
}

// A bucket_id other than the name is refused, final; and the bucket the driver made is deleted
// again, since nothing would ever address it by that ID: no Bucket, no grant, no deletion.
func TestCreateBucketOtherIDIsRefusedAndDeleted(t *testing.T) {
	f := newFake()
	f.create = func(_ int, req *v1.DriverCreateBucketRequest) (*v1.DriverCreateBucketResponse, error) {
		f.buckets["vendor-"+req.GetName()] = true
		return &v1.DriverCreateBucketResponse{BucketId: "vendor-" + req.GetName()}, nil
	}
	c, _ := serveFake(t, f)
	_, err := c.DriverCreateBucket(t.Context(), createRequest())
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "vendor-bc-1") {
		t.Fatalf("DriverCreateBucket returning another bucket_id: %v, want UNIMPLEMENTED naming it", err)
	}
	buckets, _, _ := f.state()
	if len(buckets) != 0 {
		t.Errorf("buckets %v left in the backend after the refusal", buckets)
	}
	if got := f.paramsOf("DriverDeleteBucket"); len(got) != 1 || got[0]["tier"] != "gold" {
		t.Errorf("delete_context %v, want the Bucket's parameters", got)
	}
}

// When deleting that bucket fails, the refusal is not final: the sidecar retries the creation,
// the (idempotent) driver answers with the same ID, and the adapter deletes it again.
func TestCreateBucketOtherIDDeleteFails(t *testing.T) {
	f := newFake()
	f.create = func(_ int, req *v1.DriverCreateBucketRequest) (*v1.DriverCreateBucketResponse, error) {
		f.buckets["vendor-"+req.GetName()] = true
		return &v1.DriverCreateBucketResponse{BucketId: "vendor-" + req.GetName()}, nil
	}
	f.del = func(n int, _ *v1.DriverDeleteBucketRequest) error {
		if n == 1 {
			return status.Error(codes.FailedPrecondition, "backend refused")
		}
		return nil
	}
	c, _ := serveFake(t, f)
	_, err := c.DriverCreateBucket(t.Context(), createRequest())
	if err == nil || finalForGrant(err) {
		t.Fatalf("DriverCreateBucket with a failed clean-up: %v, want an error the sidecar retries", err)
	}
	_, err = c.DriverCreateBucket(t.Context(), createRequest())
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("retried DriverCreateBucket: %v, want UNIMPLEMENTED once the bucket is deleted", err)
	}
	if buckets, _, _ := f.state(); len(buckets) != 0 {
		t.Errorf("buckets %v left in the backend", buckets)
	}
}

// An account_id other than the name is revoked at once, by the returned ID, and refused, final,
// without its key.
func TestGrantOtherAccountIDIsRevoked(t *testing.T) {
	f := newFake()
	f.grant = func(_ int, _ *v1.DriverGrantBucketAccessRequest) (*v1.DriverGrantBucketAccessResponse, error) {
		f.accounts["key-42"] = true
		return &v1.DriverGrantBucketAccessResponse{AccountId: "key-42", Credentials: s3Credentials()}, nil
	}
	c, _ := serveFake(t, f)
	resp, err := c.DriverGrantBucketAccess(t.Context(), grantRequest("ba-1", readWrite))
	if status.Code(err) != codes.Unimplemented || resp != nil {
		t.Fatalf("DriverGrantBucketAccess returning another account_id: %v, %v; want UNIMPLEMENTED", resp, err)
	}
	if strings.Contains(err.Error(), fakeSecret) {
		t.Errorf("the refusal carries the secret: %v", err)
	}
	if _, accounts, _ := f.state(); len(accounts) != 0 {
		t.Errorf("accounts %v left in the backend after the refusal", accounts)
	}
}

// When that revocation fails, even with a code the sidecar would take as final, the grant is
// retried rather than the account leaked: the next attempt revokes it.
func TestGrantOtherAccountIDRevokeFails(t *testing.T) {
	f := newFake()
	f.grant = func(_ int, _ *v1.DriverGrantBucketAccessRequest) (*v1.DriverGrantBucketAccessResponse, error) {
		f.accounts["key-42"] = true
		return &v1.DriverGrantBucketAccessResponse{AccountId: "key-42", Credentials: s3Credentials()}, nil
	}
	f.revoke = func(n int, _ *v1.DriverRevokeBucketAccessRequest) error {
		if n == 1 {
			return status.Error(codes.InvalidArgument, "careless vendor: revoke refused")
		}
		return nil
	}
	c, _ := serveFake(t, f)
	_, err := c.DriverGrantBucketAccess(t.Context(), grantRequest("ba-1", readWrite))
	if err == nil || finalForGrant(err) {
		t.Fatalf("DriverGrantBucketAccess with a failed revocation: %v, want an error the sidecar retries", err)
	}
	if _, accounts, _ := f.state(); !slices.Equal(accounts, []string{"key-42"}) {
		t.Fatalf("accounts %v, want key-42 still there (the revocation failed)", accounts)
	}
	_, err = c.DriverGrantBucketAccess(t.Context(), grantRequest("ba-1", readWrite))
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("retried grant: %v, want UNIMPLEMENTED once revoked", err)
	}
	if _, accounts, _ := f.state(); len(accounts) != 0 {
		t.Errorf("accounts %v left in the backend", accounts)
	}
}
