package controller_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/controller"
)

// leaseRenewed writes the Lease of driver's sidecars as renewed at renew for d by holder.
func leaseRenewed(t *testing.T, api *testenv.Env, driver, holder string, renew time.Time, d time.Duration) {
	t.Helper()
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "cosi-system",
		Name: driver + "-cosi-sidecar"}}
	testenv.Eventually(t, func() error {
		err := api.Client.Get(t.Context(), client.ObjectKeyFromObject(lease), lease)
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		lease.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder),
			RenewTime: &metav1.MicroTime{Time: renew}, LeaseDurationSeconds: ptr.To(int32(d / time.Second))}
		if err != nil {
			return api.Client.Create(t.Context(), lease)
		}
		return api.Client.Update(t.Context(), lease)
	})
}

// provisioned returns the Provisioned condition of obj, read live.
func provisioned(t *testing.T, api *testenv.Env, obj client.Object) (*metav1.Condition, error) {
	t.Helper()
	if err := api.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
		return nil, err
	}
	var conds []metav1.Condition
	switch o := obj.(type) {
	case *cosiapi.BucketClaim:
		conds = o.Status.Conditions
	case *cosiapi.BucketAccess:
		conds = o.Status.Conditions
	}
	return meta.FindStatusCondition(conds, cosiapi.ConditionProvisioned), nil
}

// A Lease that was fresh when the objects' grace period ended expires later, comes back, is
// released, goes: the claim and the access follow it at the next looks, and nothing is reconciled
// while nothing changes, whatever the tenant does to their metadata.
func TestWaitingForDriverFollowsTheLease(t *testing.T) {
	t.Parallel()
	api := ownAPIServer(t)
	count := newReconciles()
	const recheck = 2 * time.Second
	runController(t, api, controller.Options{DriverGrace: time.Second, DriverRecheck: recheck}, count.logger())
	driver := uniqueName("flaps") + ".controller-test.cosi.io"
	// A sidecar holds the Lease, and stops renewing it: it expires in 8 s.
	leaseRenewed(t, api, driver, "sidecar-0", time.Now(), 8*time.Second)

	objs := servedAndWaiting(t, api, driver)
	waiting, ba := objs.waiting, objs.access

	// Expired.
	for _, o := range []client.Object{waiting, ba} {
		testenv.Eventually(t, func() error {
			c, err := provisioned(t, api, o)
			if err != nil {
				return err
			}
			if c == nil || c.Reason != cosiapi.ReasonWaitingForDriver || !strings.Contains(c.Message, "expired at") {
				return fmt.Errorf("%s: Provisioned %+v, want WaitingForDriver (expired)", o.GetName(), c)
			}
			return nil
		})
	}

	// Quiet: no reconcile while nothing changes, over several looks.
	quiet := func(what string) {
		t.Helper()
		n, m := count.of("bucketclaim", waiting), count.of("bucketaccess", ba)
		testenv.Never(t, 3*recheck+time.Second, func() error { return nil })
		if n2, m2 := count.of("bucketclaim", waiting), count.of("bucketaccess", ba); n2 != n || m2 != m {
			t.Errorf("%s: reconciled while nothing changed: claim %d → %d, access %d → %d", what, n, n2, m, m2)
		}
	}
	quiet("expired")

	// A tenant touches their objects' metadata: nothing flips.
	for i := range 3 {
		for _, o := range []client.Object{waiting, ba} {
			testenv.Eventually(t, func() error {
				if err := api.Client.Get(t.Context(), client.ObjectKeyFromObject(o), o); err != nil {
					return err
				}
				o.SetLabels(map[string]string{"touch": fmt.Sprint(i)})
				o.SetAnnotations(map[string]string{"touch": fmt.Sprint(i)})
				return api.Client.Update(t.Context(), o)
			})
		}
	}
	testenv.Never(t, 2*recheck, func() error {
		for _, o := range []client.Object{waiting, ba} {
			c, err := provisioned(t, api, o)
			if err != nil {
				return err
			}
			if c == nil || c.Reason != cosiapi.ReasonWaitingForDriver {
				return fmt.Errorf("%s: Provisioned %+v after the tenant's touches", o.GetName(), c)
			}
		}
		return nil
	})

	// A sidecar takes the Lease: the claim takes back its wait.
	leaseRenewed(t, api, driver, "sidecar-1", time.Now(), time.Hour)
	testenv.Condition(t, api, waiting, claimConditions, cosiapi.ConditionProvisioned, metav1.ConditionUnknown,
		cosiapi.ReasonProvisioning)
	quiet("served")

	// It releases it.
	sidecarLease(t, api, driver, "")
	for _, o := range []client.Object{waiting, ba} {
		testenv.Eventually(t, func() error {
			c, err := provisioned(t, api, o)
			if err != nil {
				return err
			}
			if c == nil || c.Reason != cosiapi.ReasonWaitingForDriver || !strings.Contains(c.Message, "held by nobody") {
				return fmt.Errorf("%s: Provisioned %+v, want WaitingForDriver (held by nobody)", o.GetName(), c)
			}
			return nil
		})
	}
	quiet("released")

	// It goes.
	if err := api.Client.Delete(t.Context(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Namespace: "cosi-system", Name: driver + "-cosi-sidecar"}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		c, err := provisioned(t, api, waiting)
		if err != nil {
			return err
		}
		if c == nil || c.Reason != cosiapi.ReasonWaitingForDriver || !strings.Contains(c.Message, "does not exist") {
			return fmt.Errorf("Provisioned %+v, want WaitingForDriver (does not exist)", c)
		}
		return nil
	})
	quiet("gone")

	// A sidecar acts on both: nothing puts the wait back.
	actOnBucket(t, api, bindingOf(t, api, waiting))
	actOnAccess(t, api, ba)
	testenv.Condition(t, api, waiting, claimConditions, cosiapi.ConditionProvisioned, metav1.ConditionTrue,
		cosiapi.ReasonProvisioned)
	testenv.Never(t, 3*recheck, func() error {
		for _, o := range []client.Object{waiting, ba} {
			c, err := provisioned(t, api, o)
			if err != nil {
				return err
			}
			if c == nil || c.Reason == cosiapi.ReasonWaitingForDriver {
				return fmt.Errorf("%s: Provisioned %+v after the sidecar acted", o.GetName(), c)
			}
		}
		return nil
	})
	t.Logf("reconciles: claim %d, access %d", count.of("bucketclaim", waiting), count.of("bucketaccess", ba))
}

// A tenant's claim that names a Bucket bound to another claim is refused (ProvisioningFailed), and
// stays refused: the Bucket's driver having no sidecar is none of its business, and is not
// reported on it as a wait (WaitingForDriver would say it is provisioned as soon as a sidecar runs).
func TestWaitingForDriverNotOnAClaimRefusedABucket(t *testing.T) {
	t.Parallel()
	api := ownAPIServer(t)
	const recheck = 2 * time.Second
	runController(t, api, controller.Options{DriverGrace: time.Second, DriverRecheck: recheck}, logr.Discard())
	driver := uniqueName("refused") + ".controller-test.cosi.io"
	sidecarLease(t, api, driver, "")
	b := objects.Bucket(uniqueName("static"), driver, cosiapi.DeletionPolicyRetain,
		objects.ClaimedBy(testNamespace, "owner", ""), func(b *cosiapi.Bucket) { b.Spec.ExistingBucketID = "legacy" })
	intruder := &cosiapi.BucketClaim{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("claim"), Namespace: testNamespace},
		Spec: cosiapi.BucketClaimSpec{ExistingBucketName: b.Name}}
	for _, o := range []client.Object{b, intruder} {
		if err := api.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Condition(t, api, intruder, claimConditions, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse,
		cosiapi.ReasonInvalidReference)
	testenv.Never(t, time.Second+3*recheck, func() error {
		c, err := provisioned(t, api, intruder)
		if err != nil {
			return err
		}
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != cosiapi.ReasonProvisioningFailed {
			return fmt.Errorf("Provisioned %+v, want False (ProvisioningFailed)", c)
		}
		return nil
	})
}

// The leader hands a claim and an access off, and stops while its driver's Lease is still fresh;
// the standby takes over, and marks both when the Lease expires.
func TestWaitingForDriverAfterATakeover(t *testing.T) {
	t.Parallel()
	api := ownAPIServer(t)
	opts := controller.Options{DriverGrace: time.Second, DriverRecheck: 2 * time.Second, LeaderElection: true}
	stopLeader := runController(t, api, opts, logr.Discard())
	driver := uniqueName("takeover") + ".controller-test.cosi.io"
	leaseRenewed(t, api, driver, "sidecar-0", time.Now(), 20*time.Second)

	objs := servedAndWaiting(t, api, driver)
	waiting, ba := objs.waiting, objs.access
	runController(t, api, opts, logr.Discard()) // the standby
	stopLeader()
	for _, o := range []client.Object{waiting, ba} {
		testenv.Eventually(t, func() error {
			c, err := provisioned(t, api, o)
			if err != nil {
				return err
			}
			if c == nil || c.Reason != cosiapi.ReasonWaitingForDriver || !strings.Contains(c.Message, "expired at") {
				return fmt.Errorf("%s: Provisioned %+v, want WaitingForDriver (expired)", o.GetName(), c)
			}
			return nil
		})
	}
}

// Many claims of two drivers, one served and one not: only the unserved driver's claims say
// WaitingForDriver, and none of them is reconciled again while nothing changes.
func TestWaitingForDriverManyClaimsTwoDrivers(t *testing.T) {
	t.Parallel()
	api := ownAPIServer(t)
	count := newReconciles()
	const recheck = 2 * time.Second
	runController(t, api, controller.Options{DriverGrace: time.Second, DriverRecheck: recheck}, count.logger())
	served, unserved := uniqueName("served")+".controller-test.cosi.io", uniqueName("unserved")+".controller-test.cosi.io"
	sidecarLease(t, api, served, "sidecar-0")
	sidecarLease(t, api, unserved, "")
	var all []*cosiapi.BucketClaim
	for _, driver := range []string{served, unserved} {
		class := objects.BucketClass(uniqueName("class"), driver, cosiapi.DeletionPolicyDelete)
		if err := api.Client.Create(t.Context(), class); err != nil {
			t.Fatal(err)
		}
		for range 20 {
			c := objects.BucketClaim(testNamespace, uniqueName("claim"), class.Name, objects.S3)
			if err := api.Client.Create(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			all = append(all, c)
		}
	}
	for i, c := range all {
		reason := cosiapi.ReasonProvisioning
		if i >= 20 {
			reason = cosiapi.ReasonWaitingForDriver
		}
		testenv.Condition(t, api, c, claimConditions, cosiapi.ConditionProvisioned, metav1.ConditionUnknown, reason)
	}
	counts := func() []int {
		var n []int
		for _, c := range all {
			n = append(n, count.of("bucketclaim", c))
		}
		return n
	}
	before := counts()
	testenv.Never(t, 3*recheck+time.Second, func() error {
		for i, c := range all[:20] {
			got, err := provisioned(t, api, c)
			if err != nil {
				return err
			}
			if got == nil || got.Reason != cosiapi.ReasonProvisioning {
				return fmt.Errorf("claim %d of the served driver: Provisioned %+v", i, got)
			}
		}
		return nil
	})
	if after := counts(); !slices.Equal(before, after) {
		t.Errorf("reconciled while nothing changed: %v → %v", before, after)
	}
}

// A tenant who names another namespace's Bucket learns that it is taken, not whose it is: the
// refusal on the claim (which the tenant reads) names no other namespace, claim or UID.
func TestRefusedBucketDoesNotNameItsOwner(t *testing.T) {
	t.Parallel()
	api := ownAPIServer(t)
	runController(t, api, controller.Options{}, logr.Discard())
	driver := uniqueName("owner") + ".controller-test.cosi.io"
	sidecarLease(t, api, driver, "")
	b := objects.Bucket(uniqueName("static"), driver, cosiapi.DeletionPolicyRetain,
		objects.ClaimedBy("acme-payroll", "salaries-2027", "0b7c1e9a-uid-of-the-owner"),
		func(b *cosiapi.Bucket) { b.Spec.ExistingBucketID = "legacy" })
	intruder := &cosiapi.BucketClaim{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("claim"), Namespace: testNamespace},
		Spec: cosiapi.BucketClaimSpec{ExistingBucketName: b.Name}}
	for _, o := range []client.Object{b, intruder} {
		if err := api.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Condition(t, api, intruder, claimConditions, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse,
		cosiapi.ReasonInvalidReference)
	if err := api.Client.Get(t.Context(), client.ObjectKeyFromObject(intruder), intruder); err != nil {
		t.Fatal(err)
	}
	for _, c := range intruder.Status.Conditions {
		for _, secret := range []string{"acme-payroll", "salaries-2027", "0b7c1e9a"} {
			if strings.Contains(c.Message, secret) {
				t.Errorf("condition %s tells the tenant %q: %s", c.Type, secret, c.Message)
			}
		}
	}
}
