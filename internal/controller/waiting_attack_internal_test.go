package controller

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
)

// flakyLeases is the API reader, whose Lease reads fail (429, as the API server's priority and
// fairness answers under load) while fail is set.
type flakyLeases struct {
	client.Reader
	fail atomic.Bool
}

func (f *flakyLeases) Get(
	ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption,
) error {
	if _, ok := obj.(*coordinationv1.Lease); ok && f.fail.Load() {
		return apierrors.NewTooManyRequests("the test refuses Lease reads", 1)
	}
	return f.Reader.Get(ctx, key, obj, opts...)
}

// A claim that waits for a sidecar keeps saying so while its driver's Lease cannot be read for a
// while (readLease: "cannot tell now; the status stays what it was"): it does not flip to
// Provisioning and back at each failed read.
func TestWaitingForDriverKeptWhileTheLeaseCannotBeRead(t *testing.T) {
	t.Parallel()
	const ns = "apps"
	const recheck = 2 * time.Second
	var flaky *flakyLeases
	api, _, _ := startWaitsController(t, ns, Options{DriverGrace: time.Second, DriverRecheck: recheck},
		func(claims *BucketClaimReconciler) {
			flaky = &flakyLeases{Reader: claims.Drivers.reader}
			claims.Drivers.reader = flaky
		})
	ctx := t.Context()

	driver := "flaky.controller-test.cosi.io"
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "cosi-system", Name: sidecarLeaseName(driver)},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("")}}
	class := objects.BucketClass("class", driver, cosiapi.DeletionPolicyDelete)
	claim := objects.BucketClaim(ns, "claim", class.Name, objects.S3)
	for _, o := range []client.Object{lease, class, claim} {
		if err := api.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	waits := func() error {
		if err := api.Client.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(claim.Status.Conditions, cosiapi.ConditionProvisioned); c == nil ||
			c.Reason != cosiapi.ReasonWaitingForDriver {
			return fmt.Errorf("Provisioned %+v, want WaitingForDriver", c)
		}
		return nil
	}
	testenv.Eventually(t, waits)
	flaky.fail.Store(true)
	testenv.Never(t, leaseAnswerTTL+3*recheck, waits)
	flaky.fail.Store(false)
	testenv.Never(t, leaseAnswerTTL+2*recheck, waits)
}

// Objects deleted and created again under the same name, a claim whose Bucket an admin deletes,
// an access whose claim goes: the waits hold one entry per waiting object, and none once all
// are gone.
func TestWaitsForgetRecreatedObjects(t *testing.T) {
	t.Parallel()
	const ns = "apps"
	api, claims, accesses := startWaitsController(t, ns, Options{DriverGrace: time.Hour}, nil)
	ctx := t.Context()
	waits := func(w *waiting, want int) func() error {
		return func() error {
			if n, looks := w.len(); n != want || looks != want {
				return fmt.Errorf("%d objects wait, %d looks are due; want %d", n, looks, want)
			}
			return nil
		}
	}
	driver := "recreated.controller-test.cosi.io"
	class := objects.BucketClass("class", driver, cosiapi.DeletionPolicyDelete)
	aclass := objects.BucketAccessClass("accessclass", driver)
	if err := api.Client.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	if err := api.Client.Create(ctx, aclass); err != nil {
		t.Fatal(err)
	}
	claim := func() *cosiapi.BucketClaim { return objects.BucketClaim(ns, "claim", class.Name, objects.S3) }
	access := func() *cosiapi.BucketAccess {
		return objects.BucketAccess(ns, "access", aclass.Name, objects.Grant("claim", "creds", objects.ReadWrite))
	}
	for range 3 {
		c, ba := claim(), access()
		for _, o := range []client.Object{c, ba} {
			if err := api.Client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		testenv.Eventually(t, waits(claims.waits, 1))
		testenv.Eventually(t, waits(accesses.waits, 1))
		// An admin deletes the claim's Bucket (no sidecar protects it): the claim creates it again.
		if err := api.Client.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			t.Fatal(err)
		}
		b := &cosiapi.Bucket{ObjectMeta: metav1.ObjectMeta{Name: c.Status.BoundBucketName}}
		if err := api.Client.Delete(ctx, b); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, func() error {
			if err := api.Client.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
				return err
			}
			if b.DeletionTimestamp != nil {
				return fmt.Errorf("Bucket %s not created again yet", b.Name)
			}
			return nil
		})
		testenv.Eventually(t, waits(claims.waits, 1))
		// The claim goes first, then the access.
		for _, o := range []client.Object{c, ba} {
			if err := api.Client.Delete(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		api.Gone(t, ba)
		api.Gone(t, c)
		testenv.Eventually(t, waits(accesses.waits, 0))
		testenv.Eventually(t, waits(claims.waits, 0))
	}
}

// hungLeases is a reader whose Lease reads hang until their context ends.
type hungLeases struct{ client.Reader }

func (hungLeases) Get(ctx context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if _, ok := obj.(*coordinationv1.Lease); !ok {
		return errors.New("only Leases are read here")
	}
	<-ctx.Done()
	return ctx.Err()
}

// A Lease read that hangs ends with readLease's own timeout as "cannot tell now", so that the looks
// waiting for its answer go on.
func TestLeaseReadThatHangsIsCannotTell(t *testing.T) {
	defer func(d time.Duration) { leaseReadTimeout = d }(leaseReadTimeout)
	leaseReadTimeout = 50 * time.Millisecond
	w := &driverWatch{reader: hungLeases{}, namespace: "cosi-system", grace: time.Second, recheck: time.Minute}
	a := w.readLease(t.Context(), "hung.example.com")
	if !a.unknown || a.why != "" || a.again != time.Minute {
		t.Fatalf("a hung Lease read answered %+v, want cannot tell now (unknown, look again in a minute)", a)
	}
}
