package adversarial

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/dev/v1alpha1drivers"
	"github.com/kube-cosi/cosi/drivers/v1alpha1s3"
	"github.com/kube-cosi/cosi/internal/sidecar"
)

// Issue 41, item 1: a COSI v1alpha1 driver that names every account itself, anew on each grant
// (v1alpha1drivers.RandomAccounts around the reference driver, on Versity). Its IDs are recorded
// in the grant record before any Secret holds their keys, and every one is revoked with the
// access.

func randomAccounts(d **v1alpha1drivers.RandomAccounts) func(*v1alpha1s3.Driver) v1alpha1drivers.Server {
	return func(s *v1alpha1s3.Driver) v1alpha1drivers.Server {
		*d = v1alpha1drivers.NewRandomAccounts(s)
		return *d
	}
}

// keyRefused waits until the key of the Secret (a copy: it may be deleted) no longer works on the
// store.
func keyRefused(t *testing.T, sec *corev1.Secret) {
	t.Helper()
	testenv.Eventually(t, func() error {
		if keyWorks(sec) == nil {
			return fmt.Errorf("the key of Secret %s still works after the revocation", sec.Name)
		}
		return nil
	})
}

// The access is granted with the driver's account, which the Provisioned condition names; a grant
// for a lost Secret makes a second account (the first one's key, which workloads may hold, keeps
// working); deleting the access revokes both.
func TestV1alpha1DriverChosenAccounts(t *testing.T) {
	t.Parallel()
	var drv *v1alpha1drivers.RandomAccounts
	s := newV1alpha1System(t, randomAccounts(&drv))
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	ba := s.provisionedAccess(s.accessClass().Name, c)
	made := drv.Made()
	if len(made) != 1 {
		t.Fatalf("the driver made accounts %v; want one", made)
	}
	if want := cosiapi.AccountNamePrefix + string(ba.UID); ba.Status.AccountID != want {
		t.Errorf("status.accountID %q, want %q (the ID COSI addresses the access by)", ba.Status.AccountID, want)
	}
	msg := meta.FindStatusCondition(ba.Status.Conditions, cosiapi.ConditionProvisioned).Message
	if !strings.Contains(msg, made[0]) {
		t.Errorf("the Provisioned condition does not name the driver's account %s: %q", made[0], msg)
	}
	first := secret(t, ba)
	if err := keyWorks(first); err != nil {
		t.Fatal(err)
	}

	mustDelete(t, tenant, first)
	var second *corev1.Secret
	testenv.Eventually(t, func() error {
		sec := first.DeepCopy()
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(sec), sec); err != nil {
			return err
		}
		if sec.UID == first.UID {
			return fmt.Errorf("the Secret is not written again yet")
		}
		second = sec
		return keyWorks(sec)
	})
	if got := drv.Live(); len(got) != 2 {
		t.Errorf("live accounts %v after a grant for a lost Secret; want two", got)
	}
	if err := keyWorks(first); err != nil {
		t.Errorf("the first key, which workloads may hold, after the grant for a lost Secret: %v", err)
	}

	mustDelete(t, tenant, ba)
	env.Gone(t, ba)
	keyRefused(t, first)
	keyRefused(t, second)
	if got := drv.Live(); len(got) != 0 {
		t.Errorf("accounts %v left after the access was deleted", got)
	}
}

// The sidecar stops while the driver's answer is on its way (here: after the driver made the
// account, before it answers): the answer is lost, and the ID with it. The restarted sidecar's
// grant makes another account, which is recorded and revoked with the access; the first one is
// known only to the driver. The sidecar cannot revoke it, and says so: a Warning event on the
// access names the bucket and the accounts it knows.
func TestV1alpha1DriverChosenAccountOfALostAnswer(t *testing.T) {
	t.Parallel()
	var drv *v1alpha1drivers.RandomAccounts
	s := newV1alpha1System(t, randomAccounts(&drv))
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)

	var once sync.Once
	held, release := make(chan string, 1), make(chan struct{})
	drv.AfterGrant = func(ctx context.Context, id string) {
		once.Do(func() {
			held <- id
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
	}
	ba := newAccess(s.accessClass().Name, c)
	mustCreate(t, tenant, ba)
	var lost string
	select {
	case lost = <-held:
	case <-t.Context().Done():
		t.Fatal("no grant came")
	}
	s.stopSidecar()
	close(release)
	s.startSidecar()
	waitProvisioned(t, ba)

	live := drv.Live()
	if len(live) != 2 || live[0] != lost {
		t.Fatalf("live accounts %v; want the lost answer's %s and the restarted sidecar's", live, lost)
	}
	env.WaitForEvent(t, ba, cosiapi.EventDriverAccountMayHaveLeaked+": the driver named this grant's account \""+live[1])
	if err := keyWorks(secret(t, ba)); err != nil {
		t.Fatal(err)
	}
	granted := secret(t, ba)

	mustDelete(t, tenant, ba)
	env.Gone(t, ba)
	keyRefused(t, granted)
	if got := drv.Live(); !slices.Equal(got, []string{lost}) {
		t.Errorf("accounts %v left after the access was deleted; want only the lost answer's %s", got, lost)
	}
}

// revokesFail fails DriverRevokeBucketAccess UNAVAILABLE once for each account in fail, as a driver
// that is away for a moment.
type revokesFail struct {
	v1alpha1drivers.Server

	mu   sync.Mutex
	fail map[string]bool
}

func (d *revokesFail) failOnce(accountID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fail[accountID] = true
}

func (d *revokesFail) DriverRevokeBucketAccess(
	ctx context.Context, req *v1.DriverRevokeBucketAccessRequest,
) (*v1.DriverRevokeBucketAccessResponse, error) {
	d.mu.Lock()
	failing := d.fail[req.GetAccountId()]
	delete(d.fail, req.GetAccountId())
	d.mu.Unlock()
	if failing {
		return nil, status.Error(codes.Unavailable, "the store is away")
	}
	return d.Server.DriverRevokeBucketAccess(ctx, req)
}

// A grant's account of the driver's naming whose ID cannot be recorded (the grant record's update is
// refused, as by a policy, or by RBAC not loaded yet after an API server restart) is revoked at once;
// when that revocation fails too, the account is known to the sidecar alone, and the driver, which
// names every grant's account anew, never names it again: the sidecar keeps its ID, records it with
// the access's next grant, and revokes it. None of the driver's accounts is left once the access is
// deleted.
func TestV1alpha1DriverChosenAccountNeitherRecordedNorRevoked(t *testing.T) {
	t.Parallel()
	var drv *v1alpha1drivers.RandomAccounts
	var revokes *revokesFail
	s := newV1alpha1System(t, func(d *v1alpha1s3.Driver) v1alpha1drivers.Server {
		revokes = &revokesFail{Server: randomAccounts(&drv)(d), fail: map[string]bool{}}
		return revokes
	})
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)

	// The first grant is held before the driver acts, until the record's updates are refused.
	var once sync.Once
	held, release := make(chan string, 1), make(chan struct{})
	drv.BeforeGrant = func(_ *v1.DriverGrantBucketAccessRequest, id string) {
		once.Do(func() {
			held <- id
			select {
			case <-release:
			case <-time.After(time.Minute):
			}
		})
	}
	ba := newAccess(s.accessClass().Name, c)
	mustCreate(t, tenant, ba)
	var first string
	select {
	case first = <-held:
	case <-t.Context().Done():
		t.Fatal("no grant came")
	}
	lift := testenv.RefuseUpdates(t, env.Client, sidecar.DefaultGrantNamespace, "cosi-grant-"+string(ba.UID))
	revokes.failOnce(first)
	close(release)
	env.WaitForEvent(t, ba, cosiapi.EventFailedGrantAccess+": DriverGrantBucketAccess: Aborted: v1alpha1 adapter: "+
		"revoking account_id \""+first+"\", which the driver chose and which could not be recorded")
	if !slices.Contains(drv.Live(), first) {
		t.Fatalf("the first account %s was revoked: the test did not make its revocation fail", first)
	}
	lift()
	waitProvisioned(t, ba)

	mustDelete(t, tenant, ba)
	env.Gone(t, ba)
	if got := drv.Live(); len(got) != 0 {
		t.Errorf("accounts %v left after the access was deleted; the first grant's, %s, was neither recorded nor "+
			"revoked when its answer came", got, first)
	}
}

// answersLost loses the answers of the next grants after the wrapped driver acted (UNAVAILABLE, as a
// connection that drops): the account exists, its ID reaches nobody.
type answersLost struct {
	v1alpha1drivers.Server

	n atomic.Int32
}

func (d *answersLost) DriverGrantBucketAccess(
	ctx context.Context, req *v1.DriverGrantBucketAccessRequest,
) (*v1.DriverGrantBucketAccessResponse, error) {
	resp, err := d.Server.DriverGrantBucketAccess(ctx, req)
	if err == nil && d.n.Add(-1) >= 0 {
		return nil, status.Error(codes.Unavailable, "the connection dropped after the driver answered")
	}
	return resp, err
}

// A Secret refresh grants again, and a driver that names its accounts anew makes another account.
// When the refresh's answer is lost after the driver made it, its account is known only to the
// driver, as with a first grant: the refresh's next grant reports it (DriverAccountMayHaveLeaked).
func TestV1alpha1DriverChosenAccountOfALostRefreshAnswer(t *testing.T) {
	t.Parallel()
	var drv *v1alpha1drivers.RandomAccounts
	var lost *answersLost
	s := newV1alpha1System(t, func(d *v1alpha1s3.Driver) v1alpha1drivers.Server {
		lost = &answersLost{Server: randomAccounts(&drv)(d)}
		return lost
	})
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	ba := s.provisionedAccess(s.accessClass().Name, c)

	lost.n.Store(1)
	edit(t, env.Client, ba, func(a *cosiapi.BucketAccess) {
		metav1.SetMetaDataAnnotation(&a.ObjectMeta, cosiapi.AnnotationRefreshSecret, "after-a-lost-answer")
	})
	testenv.Eventually(t, func() error {
		if made := drv.Made(); len(made) < 3 {
			return fmt.Errorf("accounts made %v: the refresh has not granted twice yet", made)
		}
		return nil
	})
	leaked := drv.Made()[1]
	env.WaitForEvent(t, ba, cosiapi.EventDriverAccountMayHaveLeaked+": the driver named this grant's account")

	mustDelete(t, tenant, ba)
	env.Gone(t, ba)
	if got := drv.Live(); !slices.Equal(got, []string{leaked}) {
		t.Errorf("accounts %v left after the access was deleted; want only the lost refresh answer's %s", got, leaked)
	}
}
