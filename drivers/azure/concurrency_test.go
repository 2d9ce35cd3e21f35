package azure_test

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/drivers/azure"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// newDriverWith returns a driver for the account that calls it through client.
func (a *account) newDriverWith(t *testing.T, client *http.Client) *azure.Driver {
	t.Helper()
	creds, err := azure.StaticCredentials(a.Account, a.Key)
	if err != nil {
		t.Fatal(err)
	}
	d, err := azure.New(azure.Config{Endpoint: a.Endpoint, Credentials: creds, HTTPClient: client})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// pauseAfterACLRead is a transport that, once armed, holds the answer to the next Get Container
// ACL until the test lets it go: a driver stopped between reading a container's stored access
// policies and writing them back.
type pauseAfterACLRead struct {
	mu      sync.Mutex
	armed   bool
	read    chan struct{}
	proceed chan struct{}
}

func newPauseAfterACLRead() *pauseAfterACLRead {
	return &pauseAfterACLRead{read: make(chan struct{}), proceed: make(chan struct{})}
}

func (p *pauseAfterACLRead) arm() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = true
}

func (p *pauseAfterACLRead) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || req.URL.Query().Get("comp") != "acl" {
		return resp, err
	}
	p.mu.Lock()
	pause := p.armed
	p.armed = false
	p.mu.Unlock()
	if pause {
		close(p.read)
		<-p.proceed
	}
	return resp, err
}

// noticeConflicts is a transport that reports, once, an answer of HTTP 409 or 412: the account
// refusing a request because another writer holds the container.
type noticeConflicts struct {
	once     sync.Once
	conflict chan struct{}
}

func (n *noticeConflicts) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil && (resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusPreconditionFailed) {
		n.once.Do(func() { close(n.conflict) })
	}
	return resp, err
}

// TestTwoDriversOneContainer checks two drivers changing one container's stored access policies
// at once: two replicas of the driver around a leader change, or two clusters that imported the
// same container. Each reads the container's policies and writes them back with its change; the
// driver's own lock serializes only its own calls. Driver A reads the policies, then driver B
// revokes an access, then A writes the policies it read with its new access added: the revoked
// policy must not come back, nor its token work again.
func TestTwoDriversOneContainer(t *testing.T) {
	a := startAzurite(t)
	ctx := t.Context()
	pause := newPauseAfterACLRead()
	conflicts := &noticeConflicts{conflict: make(chan struct{})}
	_, pa := serve(t, a.newDriverWith(t, &http.Client{Transport: pause}), logr.Discard())
	_, pb := serve(t, a.newDriverWith(t, &http.Client{Transport: conflicts}), logr.Discard())
	bucket := createBucket(t, pb)
	revoked := grant(t, pb, readWrite, nil, bucket)
	if err := put(ctx, revoked.client, "blob", "x"); err != nil {
		t.Fatal(err)
	}

	// A grants a new access and stops after reading the policies.
	pause.arm()
	req := accessRequest("ba-concurrent-grant", readWrite, nil, bucket)
	granted := make(chan error, 1)
	go func() {
		_, err := pa.DriverGrantBucketAccess(ctx, grantRequest(req, req.AccountName))
		granted <- err
	}()
	<-pause.read

	// B revokes the first access meanwhile; retried while the driver answers Unavailable, as the
	// sidecar retries it.
	revokeDone := make(chan error, 1)
	go func() {
		for {
			_, err := pb.DriverRevokeBucketAccess(ctx, &cosiproto.DriverRevokeBucketAccessRequest{
				AccountId: revoked.id, Protocol: cosiproto.ObjectProtocol_AZURE,
				AuthenticationType: cosiproto.AuthenticationType_KEY,
				Buckets:            []*cosiproto.DriverRevokeBucketAccessRequest_Bucket{{BucketId: bucket}},
			})
			if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
				revokeDone <- err
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	var revokeErr error
	revokeFinished := false
	select {
	case revokeErr = <-revokeDone: // B did not wait for A
		revokeFinished = true
	case <-conflicts.conflict: // B found the container held by A
	}
	close(pause.proceed)
	if err := <-granted; err != nil {
		t.Fatalf("driver A's grant: %v", err)
	}
	if !revokeFinished {
		revokeErr = <-revokeDone
	}
	if revokeErr != nil {
		t.Fatalf("driver B's revoke: %v", revokeErr)
	}

	if err := put(ctx, revoked.client, "blob", "after revoke"); !refused(err) {
		t.Errorf("put with the revoked token, after another driver's grant: %v, want refused (403)", err)
	}
	acl, err := a.admin.NewContainerClient(bucket).GetAccessPolicy(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range acl.SignedIdentifiers {
		ids = append(ids, azure.PolicyOwner(*s.ID))
	}
	if len(ids) != 1 || ids[0] != req.AccountName {
		t.Errorf("the container's stored access policies: %v, want only [%s]", ids, req.AccountName)
	}
}

// TestLeasedContainer checks grants and revokes on a container that someone else leased: with an
// infinite lease (an owner protecting an imported container from deletion, which the driver never
// takes) they work and leave the lease alone; with a lease of a fixed duration (another driver
// changing the policies) they are Unavailable, retried, until it is released. Deleting a leased
// container is Unavailable too.
func TestLeasedContainer(t *testing.T) {
	a := startAzurite(t)
	ctx := t.Context()
	_, p := serve(t, a.newDriver(t, ""), logr.Discard())
	bucket := createBucket(t, p)
	owner, err := lease.NewContainerClient(a.admin.NewContainerClient(bucket), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := owner.AcquireLease(ctx, -1, nil); err != nil {
		t.Fatal(err)
	}
	acc := grant(t, p, readWrite, nil, bucket)
	if err := put(ctx, acc.client, "blob", "x"); err != nil {
		t.Errorf("put with a token for a container with an infinite lease: %v", err)
	}
	revoke(t, p, acc)
	if err := put(ctx, acc.client, "blob", "y"); !refused(err) {
		t.Errorf("put with a revoked token: %v, want refused (403)", err)
	}
	props, err := a.admin.NewContainerClient(bucket).GetProperties(ctx, nil)
	if err != nil || props.LeaseDuration == nil || *props.LeaseDuration != lease.DurationTypeInfinite {
		t.Errorf("the owner's lease after a grant and a revoke: %v, %v; want infinite", props.LeaseDuration, err)
	}
	_, err = p.DriverDeleteBucket(ctx, &cosiproto.DriverDeleteBucketRequest{
		BucketId: bucket, Parameters: map[string]string{azure.ParamPurgeOnDelete: "true"}})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "lease") {
		t.Errorf("deleting a container with its owner's lease: %v, want Unavailable naming the lease", err)
	}
	if _, err := owner.ReleaseLease(ctx, nil); err != nil {
		t.Fatal(err)
	}

	if _, err := owner.AcquireLease(ctx, azure.PolicyLeaseSeconds, nil); err != nil {
		t.Fatal(err)
	}
	_, err = tryGrant(t, p, readWrite, nil, bucket)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "lease") {
		t.Errorf("a grant while another writer holds the container's lease: %v, want Unavailable naming the lease", err)
	}
	if _, err := owner.ReleaseLease(ctx, nil); err != nil {
		t.Fatal(err)
	}
	grant(t, p, readWrite, nil, bucket)
}

// TestConcurrentGrants checks the limit of five accesses per container with grants at once, from
// one driver and from two (retried while Unavailable, as the sidecar does): exactly five are
// granted, the others are ResourceExhausted, and the container's policies are exactly those of the
// five granted, whose tokens all work.
func TestConcurrentGrants(t *testing.T) {
	a := startAzurite(t)
	ctx := t.Context()
	_, p1 := serve(t, a.newDriver(t, ""), logr.Discard())
	_, p2 := serve(t, a.newDriver(t, ""), logr.Discard())
	for _, drivers := range [][]cosiproto.ProvisionerClient{{p1}, {p1, p2}} {
		bucket := createBucket(t, p1)
		const tries = 2 * azure.MaxStoredAccessPolicies
		type result struct {
			id    string
			token string
			err   error
		}
		results := make(chan result, tries)
		for i := range tries {
			p := drivers[i%len(drivers)]
			go func() {
				req := accessRequest("ba-concurrent-"+rand8(), readWrite, nil, bucket)
				for {
					resp, err := p.DriverGrantBucketAccess(ctx, grantRequest(req, req.AccountName))
					if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
						results <- result{req.AccountName, resp.GetCredentials().GetAzure().GetAccessToken(), err}
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()
		}
		granted := map[string]bool{}
		for range tries {
			r := <-results
			switch {
			case r.err == nil:
				granted[r.id] = true
				if err := put(ctx, workloadClient(t, r.token), "blob-"+r.id, "x"); err != nil {
					t.Errorf("%d drivers: put with the token of granted access %s: %v", len(drivers), r.id, err)
				}
			case status.Code(r.err) != codes.InvalidArgument:
				t.Errorf("%d drivers: grant: %v, want OK or InvalidArgument (the container is full)", len(drivers), r.err)
			}
		}
		if len(granted) != azure.AccessSlots {
			t.Errorf("%d drivers: %d of %d concurrent grants succeeded, want %d", len(drivers), len(granted), tries,
				azure.AccessSlots)
		}
		acl, err := a.admin.NewContainerClient(bucket).GetAccessPolicy(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		policies := map[string]bool{}
		for _, s := range acl.SignedIdentifiers {
			policies[azure.PolicyOwner(*s.ID)] = true
		}
		if !maps.Equal(policies, granted) {
			t.Errorf("%d drivers: the container's policies %v, want those of the granted accesses %v", len(drivers),
				policies, granted)
		}
	}
}

// cancelAfterACLWrite is a transport that, once armed, cancels the call after the next Set
// Container ACL took effect, before its answer reaches the driver: a driver stopped between writing
// an access's policy and answering the grant.
type cancelAfterACLWrite struct {
	mu     sync.Mutex
	cancel context.CancelFunc
}

func (c *cancelAfterACLWrite) arm(cancel context.CancelFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancel = cancel
}

func (c *cancelAfterACLWrite) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || req.Method != http.MethodPut || req.URL.Query().Get("comp") != "acl" {
		return resp, err
	}
	c.mu.Lock()
	cancel := c.cancel
	c.cancel = nil
	c.mu.Unlock()
	if cancel == nil {
		return resp, err
	}
	_ = resp.Body.Close()
	cancel()
	return nil, context.Canceled
}

// TestGrantInterrupted checks a grant stopped after its policy was written and before it answered:
// the policy is there, owned by no Secret yet; the grant repeated (the sidecar's retry, which
// recorded the access before asking) answers at once, neither Unavailable for the lease the
// stopped grant held nor with a second policy, and the token works; the revoke removes the policy.
func TestGrantInterrupted(t *testing.T) {
	a := startAzurite(t)
	ctx := t.Context()
	interrupt := &cancelAfterACLWrite{}
	d := a.newDriverWith(t, &http.Client{Transport: interrupt})
	_, p := serve(t, a.newDriver(t, ""), logr.Discard())
	bucket := createBucket(t, p)
	req := accessRequest("ba-interrupted", readWrite, nil, bucket)
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	interrupt.arm(cancel)
	if _, err := d.DriverGrantBucketAccess(callCtx, grantRequest(req, req.AccountName)); err == nil {
		t.Fatal("the interrupted grant answered")
	}
	policies := func() []string {
		t.Helper()
		acl, err := a.admin.NewContainerClient(bucket).GetAccessPolicy(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range acl.SignedIdentifiers {
			ids = append(ids, azure.PolicyOwner(*s.ID))
		}
		return ids
	}
	if got := policies(); !slices.Equal(got, []string{req.AccountName}) {
		t.Fatalf("policies after the interrupted grant: %v, want [%s]", got, req.AccountName)
	}
	resp, err := d.DriverGrantBucketAccess(ctx, grantRequest(req, req.AccountName))
	if err != nil {
		t.Fatalf("the grant repeated: %v", err)
	}
	if err := put(ctx, workloadClient(t, resp.GetCredentials().GetAzure().GetAccessToken()), "blob", "x"); err != nil {
		t.Errorf("put with the token of the repeated grant: %v", err)
	}
	if got := policies(); !slices.Equal(got, []string{req.AccountName}) {
		t.Errorf("policies after the repeated grant: %v, want [%s]", got, req.AccountName)
	}
	revoke(t, p, &access{id: req.AccountName, bucket: bucket})
	if got := policies(); len(got) != 0 {
		t.Errorf("policies after the revoke: %v, want none", got)
	}
}
