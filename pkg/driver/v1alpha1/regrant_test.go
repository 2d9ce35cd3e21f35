package v1alpha1_test

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
)

// What ALREADY_EXISTS means, and what a second grant of one account may do, through the sidecar's
// production client against the fake driver (fake_test.go) on a real Unix socket.

// ALREADY_EXISTS on DriverCreateBucket is "a bucket by that name exists but is incompatible with the
// request" in both COSI specs (v1alpha1 "CreateBucket Errors", KEP-1979 DriverCreateBucket): the
// creation fails, final, and the bucket is neither handed out as this Bucket's nor touched.
func TestCreateBucketAlreadyExistsIsIncompatible(t *testing.T) {
	f := newFake()
	f.buckets["bc-1"] = true // made earlier, with other parameters
	f.create = func(_ int, _ *v1.DriverCreateBucketRequest) (*v1.DriverCreateBucketResponse, error) {
		return nil, status.Error(codes.AlreadyExists, "bucket bc-1 exists with other parameters")
	}
	c, _ := serveFake(t, f)
	resp, err := c.DriverCreateBucket(t.Context(), createRequest())
	if status.Code(err) != codes.AlreadyExists || resp != nil {
		t.Fatalf("DriverCreateBucket answered ALREADY_EXISTS by the driver: answer %v, %v; want ALREADY_EXISTS, no answer",
			resp != nil, err)
	}
	if !finalForGrant(err) {
		t.Errorf("%v is retried by the sidecar; the specs say the caller must fix the request first", err)
	}
	buckets, _, calls := f.state()
	if !slices.Equal(buckets, []string{"bc-1"}) || calls["DriverDeleteBucket"] != 0 {
		t.Errorf("buckets %v, calls %v: the existing bucket must be left alone", buckets, calls)
	}
}

// A lost Secret: the sidecar grants the same account again (docs/sidecar.md). A driver that
// answers ALREADY_EXISTS will not return the account's key again, and the key workloads still hold
// (mounted from the lost Secret) must keep working: the adapter revokes nothing, and the grant
// fails, final, saying why.
func TestRegrantAlreadyExistsKeepsTheKey(t *testing.T) {
	f := newFake()
	f.grant = func(_ int, req *v1.DriverGrantBucketAccessRequest) (*v1.DriverGrantBucketAccessResponse, error) {
		if f.accounts[req.GetName()] {
			return nil, status.Error(codes.AlreadyExists, "account exists")
		}
		return nil, nil
	}
	c, _ := serveFake(t, f)
	if _, err := c.DriverGrantBucketAccess(t.Context(), grantRequest("ba-1", readWrite)); err != nil {
		t.Fatal(err)
	}
	resp, err := c.DriverGrantBucketAccess(t.Context(), grantRequest("ba-1", readWrite))
	if status.Code(err) != codes.AlreadyExists || resp != nil || !finalForGrant(err) {
		t.Errorf("the second grant of ba-1 answered ALREADY_EXISTS: answer %v, %v; want ALREADY_EXISTS (final), no answer",
			resp != nil, err)
	}
	_, accounts, calls := f.state()
	if calls["DriverRevokeBucketAccess"] != 0 || !slices.Equal(accounts, []string{"ba-1"}) {
		t.Errorf("calls %v, accounts %v: the account whose key workloads hold was revoked", calls, accounts)
	}
}

// A second grant whose answer the adapter refuses (no credentials of the requested protocol) does
// not revoke the account either: it is the account of the first grant, whose key workloads hold.
// The refusal is retried.
func TestRegrantRefusedAnswerKeepsTheKey(t *testing.T) {
	f := newFake()
	f.grant = func(n int, req *v1.DriverGrantBucketAccessRequest) (*v1.DriverGrantBucketAccessResponse, error) {
		if n == 1 {
			return nil, nil
		}
		return &v1.DriverGrantBucketAccessResponse{AccountId: req.GetName(), Credentials: map[string]*v1.CredentialDetails{
			v1alpha1.CredentialsAzure: {Secrets: map[string]string{v1alpha1.AzureAccessToken: fakeSecret}},
		}}, nil
	}
	c, _ := serveFake(t, f)
	if _, err := c.DriverGrantBucketAccess(t.Context(), grantRequest("ba-1", readWrite)); err != nil {
		t.Fatal(err)
	}
	resp, err := c.DriverGrantBucketAccess(t.Context(), grantRequest("ba-1", readWrite))
	if err == nil || resp != nil || finalForGrant(err) {
		t.Errorf("a second grant answered without S3 credentials: answer %v, %v; want a refusal the sidecar retries",
			resp != nil, err)
	}
	_, accounts, calls := f.state()
	if calls["DriverRevokeBucketAccess"] != 0 || !slices.Equal(accounts, []string{"ba-1"}) {
		t.Errorf("calls %v, accounts %v: the account whose key workloads hold was revoked", calls, accounts)
	}
}

// A lost answer, then ALREADY_EXISTS: the driver made bc-1 in a call whose answer was lost and
// answers the repeated call ALREADY_EXISTS ("already owned by you"), or bc-1 is another's bucket
// and the first call's answer was lost too. The adapter sees the same two answers in both cases,
// so it cannot tell the driver's bucket from a foreign one, and takes neither: the creation fails,
// final, nothing is deleted, and the message points to what an admin who checks the store can do.
func TestCreateBucketAfterALostAnswer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		foreign bool
	}{{"the driver's own bucket", false}, {"another's bucket of the same name", true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			if tc.foreign {
				f.buckets["bc-1"] = true
			}
			f.create = func(n int, req *v1.DriverCreateBucketRequest) (*v1.DriverCreateBucketResponse, error) {
				if n == 1 {
					if !tc.foreign {
						f.buckets[req.GetName()] = true // made, and the answer lost
					}
					return nil, status.Error(codes.DeadlineExceeded, "context deadline exceeded")
				}
				return nil, status.Error(codes.AlreadyExists, "bucket bc-1 already exists and is owned by you")
			}
			c, _ := serveFake(t, f)
			if _, err := c.DriverCreateBucket(t.Context(), createRequest()); finalForGrant(err) || err == nil {
				t.Fatalf("first DriverCreateBucket: %v, want an error the sidecar retries", err)
			}
			resp, err := c.DriverCreateBucket(t.Context(), createRequest())
			if status.Code(err) != codes.AlreadyExists || resp != nil || !finalForGrant(err) {
				t.Fatalf("the repeated DriverCreateBucket: answer %v, %v; want ALREADY_EXISTS, final", resp != nil, err)
			}
			if msg := status.Convert(err).Message(); !strings.Contains(msg, `"A lost create answer"`) {
				t.Errorf("message %q does not point to what an admin can do", msg)
			}
			buckets, _, calls := f.state()
			if !slices.Equal(buckets, []string{"bc-1"}) || calls["DriverDeleteBucket"] != 0 {
				t.Errorf("buckets %v, calls %v: the existing bucket must be left alone", buckets, calls)
			}
		})
	}
}
