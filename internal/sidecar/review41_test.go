package sidecar_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
)

// Review of issue 41 (adversarial): a v1alpha1 driver that names every account itself, anew on
// each grant (as dev/v1alpha1drivers.RandomAccounts), behind the real sidecar against a real API
// server. The fake keeps its "store": the accounts it made and has not revoked.

// randomV1alpha1 is a FAKE v1alpha1 driver: each grant makes account "acct-<n>" whatever name it
// is given. Knobs: complete (endpoint and region in the answer, else the key alone, as the
// upstream sample), slowOnce (the next grant makes its account, then answers only after the
// delay: past the sidecar's call timeout, its answer is lost), strictRevoke (revoking an account
// that does not exist is INTERNAL, the store's NoSuchEntity passed on, as
// dev/v1alpha1drivers.InternalOnMissingBucket does for buckets).
type randomV1alpha1 struct {
	v1.UnimplementedIdentityServer
	v1.UnimplementedProvisionerServer
	name string

	mu           sync.Mutex
	n            int
	live         map[string]bool
	made         []string
	complete     bool
	slowOnce     time.Duration
	strictRevoke bool
	// failNext are errors the next grants answer, in order, before the driver makes anything.
	failNext []error
	// prefixed: the account is "cosi-" + the name (the same for the same name), and a repeated
	// grant of an account that exists answers ALREADY_EXISTS (a key is shown once).
	prefixed bool
}

func (d *randomV1alpha1) DriverGetInfo(context.Context, *v1.DriverGetInfoRequest) (*v1.DriverGetInfoResponse, error) {
	return &v1.DriverGetInfoResponse{Name: d.name}, nil
}

func (d *randomV1alpha1) DriverCreateBucket(
	_ context.Context, req *v1.DriverCreateBucketRequest,
) (*v1.DriverCreateBucketResponse, error) {
	return &v1.DriverCreateBucketResponse{BucketId: req.GetName()}, nil
}

func (d *randomV1alpha1) DriverDeleteBucket(
	context.Context, *v1.DriverDeleteBucketRequest,
) (*v1.DriverDeleteBucketResponse, error) {
	return &v1.DriverDeleteBucketResponse{}, nil
}

func (d *randomV1alpha1) DriverGrantBucketAccess(
	_ context.Context, req *v1.DriverGrantBucketAccessRequest,
) (*v1.DriverGrantBucketAccessResponse, error) {
	d.mu.Lock()
	if len(d.failNext) > 0 {
		err := d.failNext[0]
		d.failNext = d.failNext[1:]
		d.mu.Unlock()
		return nil, err
	}
	d.n++
	id := fmt.Sprintf("acct-%d", d.n)
	if d.prefixed {
		id = "cosi-" + req.GetName()
		if d.live[id] {
			d.mu.Unlock()
			return nil, status.Errorf(codes.AlreadyExists, "user %s exists", id)
		}
	}
	d.live[id] = true
	d.made = append(d.made, id)
	secrets := map[string]string{v1alpha1.S3AccessKeyID: "AKID-" + id, v1alpha1.S3AccessSecretKey: "secret-" + id}
	if d.complete {
		secrets[v1alpha1.S3Endpoint], secrets[v1alpha1.S3Region] = "https://s3.example.com", "r-1"
	}
	slow := d.slowOnce
	d.slowOnce = 0
	d.mu.Unlock()
	if slow > 0 {
		time.Sleep(slow)
	}
	return &v1.DriverGrantBucketAccessResponse{AccountId: id, Credentials: map[string]*v1.CredentialDetails{
		v1alpha1.CredentialsS3: {Secrets: secrets},
	}}, nil
}

func (d *randomV1alpha1) DriverRevokeBucketAccess(
	_ context.Context, req *v1.DriverRevokeBucketAccessRequest,
) (*v1.DriverRevokeBucketAccessResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	id := req.GetAccountId()
	if !d.live[id] {
		if d.strictRevoke {
			return nil, status.Errorf(codes.Internal, "NoSuchEntity: user %s", id)
		}
		return nil, status.Errorf(codes.NotFound, "no user %s", id)
	}
	delete(d.live, id)
	return &v1.DriverRevokeBucketAccessResponse{}, nil
}

func (d *randomV1alpha1) set(f func(d *randomV1alpha1)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(d)
}

func (d *randomV1alpha1) liveAccounts() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, id := range d.made {
		if d.live[id] {
			out = append(out, id)
		}
	}
	return out
}

func (d *randomV1alpha1) madeAccounts() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.made)
}

// newRandomHarness is a harness whose driver is a randomV1alpha1 on a real Unix socket.
func newRandomHarness(
	t *testing.T, set func(*sidecar.Options), driver func(*randomV1alpha1),
) (*harness, *randomV1alpha1) {
	t.Helper()
	h := &harness{t: t, config: sidecarConfig}
	h.name = fmt.Sprintf("v1alpha1-random-%d.sidecar-test.cosi.io", driverCounter.Add(1))
	d := &randomV1alpha1{name: h.name, live: map[string]bool{}}
	if driver != nil {
		driver(d)
	}
	sock := filepath.Join(t.TempDir(), "driver.sock")
	h.endpoint = "unix://" + sock
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	v1.RegisterIdentityServer(srv, d)
	v1.RegisterProvisionerServer(srv, d)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	opts := sidecarOptions(h.endpoint)
	if set != nil {
		set(&opts)
	}
	h.stop = testenv.StartSidecar(t, h.config, opts)
	return h, d
}

// within waits up to d for f to return nil, failing t with f's last error.
func within(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = f(); err == nil {
			return
		}
	}
	t.Fatalf("after %v: %v", d, err)
}

// docs/v1alpha1-drivers.md, Limits: "an account made by a grant whose answer was lost is known only
// to the driver (reported, not revoked)". A lost answer on the grant that writes a Secret the
// tenant deleted is not reported: the DriverAccountMayHaveLeaked event is emitted only for
// accesses whose Secrets were never written, although this sidecar saw the call end
// DEADLINE_EXCEEDED itself. A tenant deletes Secrets at will, so this is the common path.
func TestReview41LostAnswerOfAGrantForALostSecretIsReported(t *testing.T) {
	t.Parallel()
	h, d := newRandomHarness(t, func(o *sidecar.Options) { o.DriverTimeout = 2 * time.Second },
		func(d *randomV1alpha1) { d.complete = true })
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.accessWith(nil, cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b), accessConditions)
	first := secret(t, ba, 0)

	// The next grant makes its account and answers after the call's deadline: lost.
	d.set(func(d *randomV1alpha1) { d.slowOnce = 4 * time.Second })
	if err := env.Client.Delete(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		s := &corev1.Secret{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(first), s); err != nil {
			return err
		}
		if s.UID == first.UID {
			return fmt.Errorf("the Secret is not written again yet")
		}
		return nil
	})
	live := d.liveAccounts()
	if len(live) != 3 {
		t.Fatalf("live accounts %v; want the first grant's, the lost answer's and the third grant's", live)
	}
	// The sidecar knows the lost one's call ended DEADLINE_EXCEEDED, and the next grant answered
	// with a new account of the driver's naming: the admin should be told.
	within(t, 20*time.Second, func() error {
		if ev := events(t, ba); !slices.ContainsFunc(ev, func(s string) bool {
			return strings.HasPrefix(s, cosiapi.EventDriverAccountMayHaveLeaked)
		}) {
			return fmt.Errorf("account %s was made by a grant whose answer was lost (DEADLINE_EXCEEDED) and is "+
				"known only to the driver, yet no %s event: %v", live[1], cosiapi.EventDriverAccountMayHaveLeaked, ev)
		}
		return nil
	})
}

// An account the adapter revoked itself stays in the record (an answer it refused; earlier
// accounts nobody holds), and the access's deletion revokes it again, before the others, stopping
// at the first failure. A driver that answers a repeated revocation INTERNAL (NoSuchEntity passed
// on, as dev/v1alpha1drivers.InternalOnMissingBucket does for deletions) then holds the deletion
// forever, and the account whose key the Secret held is never revoked.
//
// The repair path of docs/v1alpha1-drivers.md: the sample-like driver's answer lacks an endpoint
// and region (refused, final, the account revoked at once: "An answer the adapter refuses ...
// revoked at once" for a fresh account); the admin sets the sidecar's flags and restarts it; the
// access is granted; the tenant deletes it.
func TestReview41AccountsRevokedByTheAdapterAreNotRevokedAgain(t *testing.T) {
	t.Parallel()
	h, d := newRandomHarness(t, nil, func(d *randomV1alpha1) { d.strictRevoke = true })
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	ba := h.accessWith(nil, cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
	waitCondition(t, ba, accessConditions, cosiapi.ConditionProvisioned, "False", cosiapi.ReasonProvisioningFailed)
	if live := d.liveAccounts(); len(live) != 0 {
		t.Fatalf("live accounts %v after a refused answer; the adapter revokes a fresh one at once", live)
	}
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) {
		o.V1alpha1S3Endpoint, o.V1alpha1S3Region = "https://flag.s3.example.com", "flag-1"
	})
	ba = provisioned(t, ba, accessConditions)
	live := d.liveAccounts()
	if len(live) != 1 {
		t.Fatalf("live accounts %v; want the granted one", live)
	}

	if err := env.Client.Delete(t.Context(), ba); err != nil {
		t.Fatal(err)
	}
	within(t, 20*time.Second, func() error {
		if got := d.liveAccounts(); len(got) != 0 {
			fresh := &cosiapi.BucketAccess{}
			_ = env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), fresh)
			return fmt.Errorf("account(s) %v, whose key the Secret held, not revoked after the access's deletion; "+
				"events %v", got, events(t, fresh))
		}
		fresh := &cosiapi.BucketAccess{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), fresh); err != nil {
			return err
		}
		if fresh.Annotations[cosiapi.AnnotationSidecarCleanupFinished] == "" {
			return fmt.Errorf("the access's deletion is not finished: events %v", events(t, fresh))
		}
		return nil
	})
}

// After a restart the sidecar reports DriverAccountMayHaveLeaked for every access not yet granted
// whose next grant names a new account, also when every earlier grant's answer was received and
// its account recorded and revoked: here the documented repair of a refused answer (the admin
// sets the flags and restarts the sidecar, docs/v1alpha1-drivers.md). The event sends the admin
// looking in the store for an account that does not exist.
func TestReview41NoLeakReportedWhenNothingWasLost(t *testing.T) {
	t.Parallel()
	h, d := newRandomHarness(t, nil, nil)
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	ba := h.accessWith(nil, cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
	waitCondition(t, ba, accessConditions, cosiapi.ConditionProvisioned, "False", cosiapi.ReasonProvisioningFailed)
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) {
		o.V1alpha1S3Endpoint, o.V1alpha1S3Region = "https://flag.s3.example.com", "flag-1"
	})
	ba = provisioned(t, ba, accessConditions)
	// Every account the driver made is known: the first was recorded and revoked, the second is
	// the access's.
	if live := d.liveAccounts(); len(live) != 1 {
		t.Fatalf("live accounts %v; want one", live)
	}
	time.Sleep(2 * time.Second) // events are recorded asynchronously
	for _, ev := range events(t, ba) {
		if strings.HasPrefix(ev, cosiapi.EventDriverAccountMayHaveLeaked) {
			t.Errorf("nothing was lost (every account the driver made, %v, was recorded), yet: %s", d.madeAccounts(), ev)
		}
	}
}

// The documented case itself (an access whose Secrets were never written): a grant whose answer
// is lost (DEADLINE_EXCEEDED), then a grant that fails without making anything (a transient
// INTERNAL), then one that names a new account. The sidecar keeps only the last call's outcome per
// access (grantOutcomes.ended overwrites it), so the INTERNAL erases the lost answer, and the grant
// that names the new account emits no DriverAccountMayHaveLeaked although acct-1 is known only to
// the driver.
func TestReview41LostAnswerIsReportedAfterAnotherFailure(t *testing.T) {
	t.Parallel()
	h, d := newRandomHarness(t, func(o *sidecar.Options) { o.DriverTimeout = 2 * time.Second },
		func(d *randomV1alpha1) {
			d.complete = true
			d.slowOnce = 4 * time.Second
		})
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	ba := h.accessWith(nil, cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
	testenv.Eventually(t, func() error {
		if len(d.madeAccounts()) == 0 {
			return fmt.Errorf("no grant yet")
		}
		return nil
	})
	// The second grant (the first retry after the lost answer) fails at once, making nothing.
	d.set(func(d *randomV1alpha1) { d.failNext = []error{status.Error(codes.Internal, "transient")} })
	ba = provisioned(t, ba, accessConditions)
	live := d.liveAccounts()
	if len(live) != 2 || live[0] != "acct-1" {
		t.Fatalf("live accounts %v; want the lost answer's acct-1 and the granted one", live)
	}
	within(t, 20*time.Second, func() error {
		if ev := events(t, ba); !slices.ContainsFunc(ev, func(s string) bool {
			return strings.HasPrefix(s, cosiapi.EventDriverAccountMayHaveLeaked)
		}) {
			return fmt.Errorf("acct-1 was made by a grant whose answer was lost and is known only to the driver, "+
				"yet no %s event: %v", cosiapi.EventDriverAccountMayHaveLeaked, ev)
		}
		return nil
	})
}

// A tenant with the standard Role deletes their access's Secret again and again: each time the
// Secret check grants again, and a driver that names accounts anew makes a whole new account,
// recorded and kept (with a working key) until the access goes. docs/security.md keeps
// refresh-secret and rotate-credentials from tenants because "a tenant could otherwise have keys
// minted at will"; deleting the Secret does the same here, without bound: every store account and
// key a tenant mints this way stays until the access is deleted (an IAM account's user quota is
// shared by every tenant of the driver). The S3-on-IAM reference keeps "the newest previous" key
// (internal/sidecar/access_check.go); here nothing is ever dropped.
func TestReview41TenantCannotMintAccountsByDeletingTheSecret(t *testing.T) {
	t.Parallel()
	h, d := newRandomHarness(t, nil, func(d *randomV1alpha1) { d.complete = true })
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.accessWith(nil, cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b), accessConditions)
	const deletions = 4
	for range deletions {
		s := secret(t, ba, 0)
		if err := env.Client.Delete(t.Context(), s); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, func() error {
			again := &corev1.Secret{}
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(s), again); err != nil {
				return err
			}
			if again.UID == s.UID {
				return fmt.Errorf("the Secret is not written again yet")
			}
			return nil
		})
	}
	if live := d.liveAccounts(); len(live) > 2 {
		t.Errorf("after %d deletions of its Secret by the tenant, the access has %d live accounts in the store, "+
			"each with a working key: %v; want the current one and at most the newest previous one", deletions,
			len(live), live)
	}
	deleteAccess(t, ba)
	if live := d.liveAccounts(); len(live) != 0 {
		t.Errorf("accounts %v left after the access was deleted", live)
	}
}

// Tried (holds): the tenant removes the access's finalizers and deletes it while the grant is at
// the driver; the driver's account, recorded when the answer arrives, is revoked by the
// GrantReconciler once the grant ends.
func TestReview41AccessDeletedWhileTheGrantIsInFlight(t *testing.T) {
	t.Parallel()
	h, d := newRandomHarness(t, nil, func(d *randomV1alpha1) {
		d.complete = true
		d.slowOnce = 3 * time.Second
	})
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	ba := h.accessWith(nil, cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
	testenv.Eventually(t, func() error {
		if len(d.madeAccounts()) == 0 {
			return fmt.Errorf("no grant yet")
		}
		return nil
	})
	fresh := &cosiapi.BucketAccess{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), fresh); err != nil {
		t.Fatal(err)
	}
	fresh.Finalizers = nil
	if err := env.Client.Update(t.Context(), fresh); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(t.Context(), fresh); err != nil {
		t.Fatal(err)
	}
	env.Gone(t, fresh)
	within(t, 30*time.Second, func() error {
		if live := d.liveAccounts(); len(live) != 0 {
			return fmt.Errorf("accounts %v left after the access vanished during its grant", live)
		}
		cms := &corev1.ConfigMapList{}
		if err := env.Client.List(t.Context(), cms, client.InNamespace(sidecarNamespace)); err != nil {
			return err
		}
		for _, cm := range cms.Items {
			if strings.HasSuffix(cm.Name, string(ba.UID)) {
				return fmt.Errorf("grant record %s left", cm.Name)
			}
		}
		return nil
	})
}

// A driver that names its accounts itself but deterministically ("cosi-" + the name) and shows a
// key once (ALREADY_EXISTS on a repeated grant). The first grant's answer is lost (DEADLINE_EXCEEDED)
// before its ID could be recorded. The retry, nobody holding a key, gets ALREADY_EXISTS; the
// adapter revokes the *name* (NOT_FOUND, taken as success), grants again, gets ALREADY_EXISTS,
// final. Deleting the access then revokes the name again (NOT_FOUND, success): the driver's
// account cosi-ba-<uid> outlives the access, and no DriverAccountMayHaveLeaked is emitted, since
// no grant ever answered with a new ID.
func TestReview41LostAnswerOfAKeyShownOnceDriverIsNotLeakedSilently(t *testing.T) {
	t.Parallel()
	h, d := newRandomHarness(t, func(o *sidecar.Options) { o.DriverTimeout = 2 * time.Second },
		func(d *randomV1alpha1) {
			d.complete, d.prefixed = true, true
			d.slowOnce = 4 * time.Second
		})
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	ba := h.accessWith(nil, cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
	msg := waitCondition(t, ba, accessConditions, cosiapi.ConditionProvisioned, "False", cosiapi.ReasonProvisioningFailed)
	t.Logf("the access stops: %s", msg)
	time.Sleep(5 * time.Second) // the lost call's answer is thrown away meanwhile
	reported := slices.ContainsFunc(events(t, ba), func(s string) bool {
		return strings.HasPrefix(s, cosiapi.EventDriverAccountMayHaveLeaked)
	})
	deleteAccess(t, ba)
	if live := d.liveAccounts(); len(live) != 0 && !reported {
		t.Errorf("account(s) %v of the lost answer outlive the deleted access, and no %s event said so: %v",
			live, cosiapi.EventDriverAccountMayHaveLeaked, events(t, ba))
	}
}

// A grant whose answer is lost (DEADLINE_EXCEEDED after the driver made its account), then only
// grants that fail, then the access's deletion: no grant answers with a new account to say so, so
// the revocation does, with DriverAccountMayHaveLeaked on the access (the fault suite's
// "answers lost before an access is deleted").
func TestLostAnswerBeforeTheDeletionIsReported(t *testing.T) {
	t.Parallel()
	h, d := newRandomHarness(t, func(o *sidecar.Options) { o.DriverTimeout = 2 * time.Second },
		func(d *randomV1alpha1) {
			d.complete = true
			d.slowOnce = 4 * time.Second
		})
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	ba := h.accessWith(nil, cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
	testenv.Eventually(t, func() error {
		if len(d.madeAccounts()) == 0 {
			return fmt.Errorf("no grant yet")
		}
		return nil
	})
	fail := make([]error, 100)
	for i := range fail {
		fail[i] = status.Error(codes.Unavailable, "the store is away")
	}
	d.set(func(d *randomV1alpha1) { d.failNext = fail })
	waitForEvent(t, ba, cosiapi.EventFailedGrantAccess+": DriverGrantBucketAccess: DeadlineExceeded")
	deleteAccess(t, ba)
	within(t, 20*time.Second, func() error {
		if ev := events(t, ba); !slices.ContainsFunc(ev, func(s string) bool {
			return strings.HasPrefix(s,
				cosiapi.EventDriverAccountMayHaveLeaked+": a grant of this access may have been answered")
		}) {
			return fmt.Errorf("the lost answer's account %v is known only to the driver, and the access went "+
				"without a %s event: %v", d.liveAccounts(), cosiapi.EventDriverAccountMayHaveLeaked, ev)
		}
		return nil
	})
}
