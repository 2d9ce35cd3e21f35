package driver_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// lateGrantDriver's grants do not pass their context on: a grant goes on after its caller gave
// up, as a backend that already had the request does. It tells when a grant is inside the driver
// and waits for release before it acts.
type lateGrantDriver struct {
	*memory.Driver
	entered chan struct{}
	release chan struct{}
	done    chan struct{}
}

func (d *lateGrantDriver) DriverGrantBucketAccess(
	_ context.Context,
	req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	close(d.entered)
	<-d.release
	defer close(d.done)
	return d.Driver.DriverGrantBucketAccess(context.Background(), req)
}

// A revocation that arrives while a grant of the same account is still running in the driver
// (its caller gave up on it) waits for that grant: otherwise the revocation finds nothing to
// revoke, answers OK, and the late grant then creates an account that nothing will ever revoke
// (docs/reliability.md, finding 1).
func TestRevocationWaitsForALateGrantOfItsAccount(t *testing.T) {
	d := &lateGrantDriver{
		Driver:  newMemory(t, memory.Config{}),
		entered: make(chan struct{}),
		release: make(chan struct{}),
		done:    make(chan struct{}),
	}
	ts := startServer(t, d)
	c := connect(t, ts.endpoint, driverclient.Options{})
	ctx := t.Context()

	if _, err := c.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: "b"}); err != nil {
		t.Fatal(err)
	}
	access := []*cosiproto.AccessedBucket{{
		BucketId:    "b",
		AccessModes: &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE},
	}}
	gen, err := c.DriverGenerateBucketAccessId(ctx, &cosiproto.DriverGenerateBucketAccessIdRequest{
		AccountName: "a", Buckets: access,
		Protocol:           cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
	})
	if err != nil {
		t.Fatal(err)
	}
	account := gen.GetAccountId()

	// The caller gives up on the grant; the driver goes on with it.
	grantCtx, cancel := context.WithCancel(ctx)
	granted := make(chan error, 1)
	go func() {
		_, err := c.DriverGrantBucketAccess(grantCtx, &cosiproto.DriverGrantBucketAccessRequest{
			AccountId: account, Buckets: access,
			Protocol:           cosiproto.ObjectProtocol_S3,
			AuthenticationType: cosiproto.AuthenticationType_KEY,
		})
		granted <- err
	}()
	<-d.entered
	cancel()
	if err := <-granted; status.Code(err) != codes.Canceled {
		t.Fatalf("the abandoned grant: %v, want Canceled", err)
	}

	// The access is deleted: its revocation.
	revoked := make(chan error, 1)
	go func() {
		_, err := c.DriverRevokeBucketAccess(ctx, revokeV2(account, "b"))
		revoked <- err
	}()
	// Without the wait the revocation is done at once; give it the time to be (this only orders
	// the steps: the test passes or fails the same however long it waits).
	var revokeErr error
	select {
	case revokeErr = <-revoked:
		close(d.release)
	case <-time.After(500 * time.Millisecond):
		close(d.release)
		revokeErr = <-revoked
	}
	if revokeErr != nil {
		t.Fatalf("DriverRevokeBucketAccess: %v", revokeErr)
	}
	<-d.done
	// Whatever the late grant created, the revocation removed.
	if accounts := d.Backend().Accounts(); len(accounts) != 0 {
		t.Errorf("accounts left in the backend after the revocation: %v, want none", accounts)
	}
}

func revokeV2(account, bucket string) *cosiproto.DriverRevokeBucketAccessRequest {
	return &cosiproto.DriverRevokeBucketAccessRequest{
		AccountId: account, Buckets: []*cosiproto.DriverRevokeBucketAccessRequest_Bucket{{BucketId: bucket}},
		Protocol: cosiproto.ObjectProtocol_S3, AuthenticationType: cosiproto.AuthenticationType_KEY,
	}
}
