package v1alpha1_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Drivers that choose their own account IDs (v1alpha1 allows it: DriverGrantBucketAccessResponse.
// account_id), such as one that makes an IAM user "ba-" + random hex whatever name it is given.
// With a caller that records the IDs (WithDriverAccounts), such a grant succeeds once the ID is
// recorded; revocation then addresses the account by it.

// randomAccounts makes the fake a driver that names each account it grants itself, anew on every
// call: ba-r1, ba-r2, ...
func randomAccounts(f *fakeV1) {
	f.grant = func(n int, _ *v1.DriverGrantBucketAccessRequest) (*v1.DriverGrantBucketAccessResponse, error) {
		id := fmt.Sprintf("ba-r%d", n)
		f.accounts[id] = true
		return &v1.DriverGrantBucketAccessResponse{AccountId: id, Credentials: s3Credentials()}, nil
	}
}

// recorder is a caller's record of the driver's account IDs.
type recorder struct {
	mu   sync.Mutex
	ids  []string
	fail error
}

func (r *recorder) accounts() v1alpha1.DriverAccounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return v1alpha1.DriverAccounts{Known: slices.Clone(r.ids), Record: r.record}
}

func (r *recorder) record(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.fail != nil {
		return r.fail
	}
	r.ids = append(r.ids, id)
	return nil
}

func (r *recorder) recorded() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ids)
}

// The returned ID is recorded before the answer is returned, and the answer holds the key.
func TestGrantDriverChosenAccountIsRecorded(t *testing.T) {
	f := newFake()
	randomAccounts(f)
	c, _ := serveFake(t, f)
	rec := &recorder{}
	resp, err := c.DriverGrantBucketAccess(v1alpha1.WithDriverAccounts(t.Context(), rec.accounts()),
		grantRequest("ba-1", readWrite))
	if err != nil {
		t.Fatalf("DriverGrantBucketAccess returning the driver's own account_id, with a record: %v", err)
	}
	if resp.GetCredentials().GetS3().GetAccessSecretKey() != fakeSecret {
		t.Errorf("the answer lacks the key")
	}
	if got := rec.recorded(); !slices.Equal(got, []string{"ba-r1"}) {
		t.Errorf("recorded %v, want [ba-r1]", got)
	}
	if _, accounts, _ := f.state(); !slices.Equal(accounts, []string{"ba-r1"}) {
		t.Errorf("accounts %v, want [ba-r1]", accounts)
	}
	// Revoked by the recorded ID.
	revoke := revokeAccount("ba-r1")
	if _, err := c.DriverRevokeBucketAccess(t.Context(), revoke); err != nil {
		t.Fatal(err)
	}
	if _, accounts, _ := f.state(); len(accounts) != 0 {
		t.Errorf("accounts %v left after the revocation by the recorded ID", accounts)
	}
}

// An ID the record already holds (a driver that names an account itself, the same on every call)
// is not recorded again.
func TestGrantKnownDriverAccountIsNotRecordedAgain(t *testing.T) {
	f := newFake()
	f.grant = func(_ int, _ *v1.DriverGrantBucketAccessRequest) (*v1.DriverGrantBucketAccessResponse, error) {
		f.accounts["key-42"] = true
		return &v1.DriverGrantBucketAccessResponse{AccountId: "key-42", Credentials: s3Credentials()}, nil
	}
	c, _ := serveFake(t, f)
	rec := &recorder{ids: []string{"key-42"}}
	rec.fail = errors.New("no second write expected")
	if _, err := c.DriverGrantBucketAccess(v1alpha1.WithDriverAccounts(t.Context(), rec.accounts()),
		grantRequest("ba-1", readWrite)); err != nil {
		t.Fatal(err)
	}
}

// A record that cannot be written: the account is revoked at once (nobody got its key) and the
// grant fails with a code the sidecar retries; nothing of it is left.
func TestGrantDriverChosenAccountNotRecordedIsRevoked(t *testing.T) {
	f := newFake()
	randomAccounts(f)
	c, _ := serveFake(t, f)
	rec := &recorder{fail: errors.New("the API server is away")}
	resp, err := c.DriverGrantBucketAccess(v1alpha1.WithDriverAccounts(t.Context(), rec.accounts()),
		grantRequest("ba-1", readWrite))
	if err == nil || finalForGrant(err) || resp != nil {
		t.Fatalf("grant whose account cannot be recorded: %v, %v; want no answer and an error the sidecar retries", resp, err)
	}
	if strings.Contains(err.Error(), fakeSecret) {
		t.Errorf("the error carries the secret: %v", err)
	}
	if _, accounts, _ := f.state(); len(accounts) != 0 {
		t.Errorf("accounts %v left although their IDs were never recorded", accounts)
	}
}

// A caller that stops (its context canceled) while the record is written: the revocation of the
// unrecorded account still happens, with a context of its own.
func TestGrantDriverChosenAccountRevokedAfterTheCallerStopped(t *testing.T) {
	f := newFake()
	randomAccounts(f)
	c, _ := serveFake(t, f)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	accounts := v1alpha1.DriverAccounts{Record: func(context.Context, string) error {
		cancel() // the sidecar stops now
		return errors.New("stopping")
	}}
	_, err := c.DriverGrantBucketAccess(v1alpha1.WithDriverAccounts(ctx, accounts), grantRequest("ba-1", readWrite))
	if err == nil {
		t.Fatal("the grant succeeded although its account was not recorded")
	}
	if _, accounts, _ := f.state(); len(accounts) != 0 {
		t.Errorf("accounts %v left by a caller that stopped after the driver answered", accounts)
	}
}

// An incomplete answer for an account no earlier grant returned is thrown away with its account,
// even when credentials of the access are held (they are another account's).
func TestGrantDriverChosenAccountIncompleteIsRevoked(t *testing.T) {
	f := newFake()
	f.grant = func(n int, _ *v1.DriverGrantBucketAccessRequest) (*v1.DriverGrantBucketAccessResponse, error) {
		id := fmt.Sprintf("ba-r%d", n)
		f.accounts[id] = true
		return &v1.DriverGrantBucketAccessResponse{AccountId: id, Credentials: map[string]*v1.CredentialDetails{}}, nil
	}
	c, _ := serveFake(t, f)
	rec := &recorder{}
	_, err := c.DriverGrantBucketAccess(v1alpha1.WithDriverAccounts(t.Context(), rec.accounts()),
		grantRequest("ba-1", readWrite))
	if err == nil {
		t.Fatal("an answer without credentials was accepted")
	}
	if _, accounts, _ := f.state(); len(accounts) != 0 {
		t.Errorf("accounts %v left after an incomplete answer", accounts)
	}
}

// A grant that says nobody holds the access's credentials (earlier answers were lost) revokes the
// accounts the earlier grants made at once; a grant for a lost Secret keeps them (workloads may
// hold their keys), and they are revoked with the access.
func TestGrantDriverChosenAccountsOfLostAnswers(t *testing.T) {
	for _, held := range []bool{false, true} {
		t.Run(fmt.Sprintf("held=%v", held), func(t *testing.T) {
			f := newFake()
			randomAccounts(f)
			c, _ := serveFake(t, f)
			rec := &recorder{}
			ctx := t.Context()
			if !held {
				ctx = v1alpha1.WithNoCredentialsHeld(ctx)
			}
			for range 2 {
				if _, err := c.DriverGrantBucketAccess(v1alpha1.WithDriverAccounts(ctx, rec.accounts()),
					grantRequest("ba-1", readWrite)); err != nil {
					t.Fatal(err)
				}
			}
			if got := rec.recorded(); !slices.Equal(got, []string{"ba-r1", "ba-r2"}) {
				t.Errorf("recorded %v, want [ba-r1 ba-r2]", got)
			}
			want := []string{"ba-r2"}
			if held {
				want = []string{"ba-r1", "ba-r2"}
			}
			if _, accounts, _ := f.state(); !slices.Equal(accounts, want) {
				t.Errorf("accounts %v, want %v", accounts, want)
			}
		})
	}
}

// An empty account_id names no other account: the name is the account's.
func TestGrantEmptyAccountIDIsTheName(t *testing.T) {
	f := newFake()
	f.grant = func(_ int, req *v1.DriverGrantBucketAccessRequest) (*v1.DriverGrantBucketAccessResponse, error) {
		f.accounts[req.GetName()] = true
		return &v1.DriverGrantBucketAccessResponse{Credentials: s3Credentials()}, nil
	}
	c, _ := serveFake(t, f)
	if _, err := c.DriverGrantBucketAccess(t.Context(), grantRequest("ba-1", readWrite)); err != nil {
		t.Fatalf("grant answered with an empty account_id: %v", err)
	}
	if _, accounts, _ := f.state(); !slices.Equal(accounts, []string{"ba-1"}) {
		t.Errorf("accounts %v, want [ba-1]", accounts)
	}
}

func revokeAccount(accountID string) *cosiproto.DriverRevokeBucketAccessRequest {
	return &cosiproto.DriverRevokeBucketAccessRequest{
		AccountId:          accountID,
		Buckets:            []*cosiproto.DriverRevokeBucketAccessRequest_Bucket{{BucketId: "bc-1"}},
		Protocol:           cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
	}
}
