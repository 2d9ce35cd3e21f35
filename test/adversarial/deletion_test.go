package adversarial

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

// Issue 12, item 1: two accesses of one claim deleted together, then the claim: nothing hangs,
// every key is revoked, the bucket is deleted.
func TestAccessesDeletedTogether(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	aclass := s.accessClass()
	a := s.provisionedAccess(aclass.Name, c)
	b := s.provisionedAccess(aclass.Name, c)
	bucketID := boundBucket(t, c).Status.BucketID

	mustDelete(t, tenant, a)
	mustDelete(t, tenant, b)
	mustDelete(t, tenant, c)
	for _, o := range []client.Object{a, b, c} {
		env.Gone(t, o)
	}
	s.waitRevoked(a.Status.AccountID)
	s.waitRevoked(b.Status.AccountID)
	s.waitBucketDeleted(bucketID)
}

// Issue 12, item 2: the reference annotation is re-derived from the live accesses: a tenant who
// removes it gets it back, and a claim in use is not deleted even when the tenant removes it and
// deletes the claim at once.
func TestReferenceAnnotationIsRederived(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	ba := s.provisionedAccess(s.accessClass().Name, c)
	bucketID := boundBucket(t, c).Status.BucketID
	creds := credentials(secret(t, ba))

	unreference := func(c *cosiapi.BucketClaim) { delete(c.Annotations, cosiapi.AnnotationHasBucketAccessReferences) }
	edit(t, tenant, c, unreference)
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		if _, ok := c.Annotations[cosiapi.AnnotationHasBucketAccessReferences]; !ok {
			return fmt.Errorf("the reference annotation was not put back: %v", c.Annotations)
		}
		return nil
	})

	edit(t, tenant, c, unreference)
	mustDelete(t, tenant, c)
	holds(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return fmt.Errorf("a claim in use was deleted: %w", err)
		}
		if !s.driver.Backend().Allowed(creds, bucketID, memory.ObjectData, true) {
			return fmt.Errorf("the bucket of a claim in use was deleted or its key revoked")
		}
		return nil
	})
	mustDelete(t, tenant, ba)
	env.Gone(t, ba)
	env.Gone(t, c)
	s.waitBucketDeleted(bucketID)
}

// Issue 12, item 3: a tenant who sets sidecar-cleanup-finished on its access before deleting it
// does not skip the revocation or the Secret's deletion.
func TestForgedCleanupAnnotation(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	ba := s.provisionedAccess(s.accessClass().Name, c)
	sec := secret(t, ba)

	edit(t, tenant, ba, func(ba *cosiapi.BucketAccess) {
		metav1.SetMetaDataAnnotation(&ba.ObjectMeta, cosiapi.AnnotationSidecarCleanupFinished, "true")
	})
	mustDelete(t, tenant, ba)
	env.Gone(t, ba)
	env.Gone(t, sec)
	s.waitRevoked(ba.Status.AccountID)
	if n := s.calls.Count("DriverRevokeBucketAccess/" + ba.Status.AccountID); n == 0 {
		t.Error("the access was never revoked in the driver")
	}
}

// Issue 12, item 3: protection finalizers removed from a provisioned access, its claim and its
// Bucket are put back.
func TestRemovedFinalizersArePutBack(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	ba := s.provisionedAccess(s.accessClass().Name, c)
	b := boundBucket(t, c)

	unprotect := func(o client.Object) { controllerutil.RemoveFinalizer(o, cosiapi.FinalizerProtection) }
	edit(t, tenant, ba, func(o *cosiapi.BucketAccess) { unprotect(o) })
	edit(t, tenant, c, func(o *cosiapi.BucketClaim) { unprotect(o) })
	edit(t, env.Client, b, func(o *cosiapi.Bucket) { unprotect(o) })
	for _, o := range []client.Object{ba, c, b} {
		testenv.Eventually(t, func() error {
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(o), o); err != nil {
				return err
			}
			if !controllerutil.ContainsFinalizer(o, cosiapi.FinalizerProtection) {
				return fmt.Errorf("%s: the protection finalizer was not put back: %v", o.GetName(), o.GetFinalizers())
			}
			return nil
		})
	}
}

// Issue 12, item 3: a tenant who removes the access's finalizer and deletes it at once, faster
// than COSI can put the finalizer back, still has its key revoked.
func TestAccessDeletedWithoutFinalizerIsRevoked(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	ba := s.provisionedAccess(s.accessClass().Name, c)
	bucketID := boundBucket(t, c).Status.BucketID
	creds := credentials(secret(t, ba))

	edit(t, tenant, ba, func(o *cosiapi.BucketAccess) { controllerutil.RemoveFinalizer(o, cosiapi.FinalizerProtection) })
	mustDelete(t, tenant, ba)
	s.waitRevoked(ba.Status.AccountID)
	if s.driver.Backend().Allowed(creds, bucketID, memory.ObjectData, false) {
		t.Error("the key of a deleted access still opens the bucket")
	}
	// And the claim, no longer referenced, can go with its bucket.
	mustDelete(t, tenant, c)
	env.Gone(t, c)
	s.waitBucketDeleted(bucketID)
}

// Issue 12, item 4: an admin deletes a Bucket, then the user deletes the claim while an access
// still uses it: the backend bucket stays, and the key works, until the access is gone.
func TestAdminDeletedBucketWaitsForAccesses(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	ba := s.provisionedAccess(s.accessClass().Name, c)
	b := boundBucket(t, c)
	creds := credentials(secret(t, ba))

	mustDelete(t, env.Client, b)
	mustDelete(t, tenant, c)
	holds(t, func() error {
		if !s.driver.Backend().Allowed(creds, b.Status.BucketID, memory.ObjectData, true) {
			return fmt.Errorf("the bucket was deleted, or its key revoked, while an access uses it")
		}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		if _, ok := b.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted]; ok {
			return fmt.Errorf("the Bucket was released for deletion while an access uses it")
		}
		return nil
	})
	mustDelete(t, tenant, ba)
	for _, o := range []client.Object{ba, c, b} {
		env.Gone(t, o)
	}
	s.waitBucketDeleted(b.Status.BucketID)
	s.waitRevoked(ba.Status.AccountID)
}

// Issue 25, item 19 (replaces issue 12's TestNoGrantToADeletingClaim, which created the access
// only once the deletion had been seen): a claim's deletion and a new access's hand-off, at the
// same moment, in several rounds at once. The "racing" access is created first, and its hand-off
// reaches the API server slowHandOff late; each round deletes its claim at another moment of that
// time, so that some deletions land between the hand-off's read of the claim and its write. A
// "late" access is created once the deletion returned. The late access is never handed off or
// granted (KEP-1979: no new access to a deleting claim); the racing one is either refused, and
// then does not keep the claim (issue 25, item 6), or handed off, and then keeps the claim, its
// Bucket and its key until it is deleted: it is never handed off to a claim that goes.
func TestClaimDeletionRacesNewAccesses(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	aclass := s.accessClass()
	type round struct {
		claim        *cosiapi.BucketClaim
		racing, late *cosiapi.BucketAccess
		bucketID     string
	}
	rounds := make([]*round, 12)
	for i := range rounds {
		r := &round{claim: s.provisionedClaim(cosiapi.DeletionPolicyDelete)}
		r.racing, r.late = newAccess(aclass.Name, r.claim), newAccess(aclass.Name, r.claim)
		r.racing.Name = slowHandOffPrefix + r.racing.Name
		r.bucketID = boundBucket(t, r.claim).Status.BucketID
		rounds[i] = r
	}
	var wg sync.WaitGroup
	for i, r := range rounds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := tenant.Create(t.Context(), r.racing); err != nil {
				t.Errorf("creating %s: %v", r.racing.Name, err)
				return
			}
			// Not a wait for something: where in the racing hand-off this round's deletion lands.
			time.Sleep(time.Duration(i) * slowHandOff / time.Duration(len(rounds)))
			if err := tenant.Delete(t.Context(), r.claim); err != nil {
				t.Errorf("deleting %s: %v", r.claim.Name, err)
			}
			if err := tenant.Create(t.Context(), r.late); err != nil {
				t.Errorf("creating %s: %v", r.late.Name, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	decided := func(ba *cosiapi.BucketAccess) error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return err
		}
		rv := meta.FindStatusCondition(ba.Status.Conditions, cosiapi.ConditionResourcesValidated)
		if ba.Status.DriverName == "" && (rv == nil || rv.Reason == cosiapi.ReasonPending) {
			return fmt.Errorf("%s is neither handed off nor refused: %+v", ba.Name, ba.Status.Conditions)
		}
		return nil
	}
	handedOff := 0
	for _, r := range rounds {
		testenv.Eventually(t, func() error { return decided(r.racing) })
		testenv.Eventually(t, func() error { return decided(r.late) })
		if r.racing.Status.DriverName == "" {
			env.Gone(t, r.claim) // a refused access does not keep it
		} else {
			handedOff++
			waitProvisioned(t, r.racing)
			creds := credentials(secret(t, r.racing))
			holds(t, func() error {
				if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(r.claim), r.claim); err != nil {
					return fmt.Errorf("the claim of handed-off access %s went: %w", r.racing.Name, err)
				}
				if !s.driver.Backend().Allowed(creds, r.bucketID, memory.ObjectData, true) {
					return fmt.Errorf("the bucket of handed-off access %s was deleted, or its key revoked", r.racing.Name)
				}
				return nil
			})
			mustDelete(t, tenant, r.racing)
			env.Gone(t, r.racing)
			env.Gone(t, r.claim)
		}
		s.waitBucketDeleted(r.bucketID)
		for _, ba := range []*cosiapi.BucketAccess{r.late, r.racing} {
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); client.IgnoreNotFound(err) != nil {
				t.Fatal(err)
			}
		}
		if r.late.Status.DriverName != "" || r.late.Status.AccountID != "" {
			t.Errorf("%s, created after its claim's deletion, was handed off (driver %q, account %q)",
				r.late.Name, r.late.Status.DriverName, r.late.Status.AccountID)
		}
	}
	t.Logf("%d of %d racing accesses were handed off before their claim's deletion", handedOff, len(rounds))
	if n := s.calls.Count("DriverGrantBucketAccess/OK"); n != handedOff {
		t.Errorf("%d grants, want %d: one per access handed off before its claim's deletion", n, handedOff)
	}
	if left := s.driver.Backend().Accounts(); len(left) > 0 {
		t.Errorf("accounts left in the backend: %v", left)
	}
}

// Issue 25, item 6: an access the controller refused or never handed off (forbidden by its class,
// its class missing, a protocol the claim lacks, a second claim that does not exist) does not
// block its claim's deletion: the claim and its bucket go, the access stays, never granted.
func TestRefusedAccessDoesNotBlockClaimDeletion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		access func(s *system, c *cosiapi.BucketClaim) *cosiapi.BucketAccess
	}{
		{"forbidden by its class", func(s *system, c *cosiapi.BucketClaim) *cosiapi.BucketAccess {
			class := s.accessClass(func(ac *cosiapi.BucketAccessClass) {
				ac.Spec.DisallowedBucketAccessModes.ObjectData = []cosiapi.BucketAccessMode{cosiapi.BucketAccessModeReadWrite}
			})
			return newAccess(class.Name, c)
		}},
		{"class missing", func(_ *system, c *cosiapi.BucketClaim) *cosiapi.BucketAccess {
			return newAccess(uniqueName("no-such-class"), c)
		}},
		{"protocol the claim lacks", func(s *system, c *cosiapi.BucketClaim) *cosiapi.BucketAccess {
			ba := newAccess(s.accessClass().Name, c)
			ba.Spec.Protocol = cosiapi.ProtocolAzure
			return ba
		}},
		{"never handed off", func(s *system, c *cosiapi.BucketClaim) *cosiapi.BucketAccess {
			class := s.accessClass(func(ac *cosiapi.BucketAccessClass) {
				ac.Spec.MultiBucketAccess = cosiapi.MultiBucketAccessMultipleBuckets
			})
			return newAccess(class.Name, c, newClaim("never-created"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSystem(t)
			c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
			used := s.provisionedAccess(s.accessClass().Name, c)
			bucketID := boundBucket(t, c).Status.BucketID
			refused := tc.access(s, c)
			mustCreate(t, tenant, refused)
			testenv.Eventually(t, func() error {
				if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(refused), refused); err != nil {
					return err
				}
				if meta.IsStatusConditionTrue(refused.Status.Conditions, cosiapi.ConditionResourcesValidated) ||
					meta.FindStatusCondition(refused.Status.Conditions, cosiapi.ConditionResourcesValidated) == nil {
					return fmt.Errorf("%s not refused or waiting yet: %+v", refused.Name, refused.Status.Conditions)
				}
				return nil
			})
			mustDelete(t, tenant, used)
			mustDelete(t, tenant, c)
			env.Gone(t, used)
			env.Gone(t, c)
			s.waitBucketDeleted(bucketID)
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(refused), refused); err != nil {
				t.Fatalf("the refused access: %v", err)
			}
			if refused.Status.DriverName != "" {
				t.Errorf("the refused access was handed off to %s", refused.Status.DriverName)
			}
			if n := s.calls.Count("DriverGrantBucketAccess"); n != 1 {
				t.Errorf("%d grants, want 1 (the access in use)", n)
			}
			mustDelete(t, tenant, refused)
			env.Gone(t, refused)
		})
	}
}

// Issue 25, item 9: a driver that fails to delete a claim's bucket is reported to the claim's
// user: the claim stays, deleting, with ProvisionFailed True and a FailedDeleteBucket event that
// carry the driver's error, until the driver succeeds.
func TestFailedBucketDeletionIsReportedOnTheClaim(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	b := boundBucket(t, c)
	s.faults.Set(0, memory.Fault{Method: "DriverDeleteBucket", Code: codes.Internal, Rate: 1})
	mustDelete(t, tenant, c)
	pf := testenv.Condition(t, env, client.Object(c), conditions, cosiapi.ConditionProvisionFailed, metav1.ConditionTrue,
		cosiapi.ReasonDriverError)
	if !strings.Contains(pf.Message, "DriverDeleteBucket") {
		t.Errorf("ProvisionFailed message %q does not name the failed call", pf.Message)
	}
	env.WaitForEvent(t, c, cosiapi.EventFailedDeleteBucket+": DriverDeleteBucket")
	if !s.driver.Backend().BucketExists(b.Status.BucketID) {
		t.Fatal("the bucket is gone although its deletion failed")
	}
	s.faults.Set(0)
	env.Gone(t, c)
	env.Gone(t, b)
	s.waitBucketDeleted(b.Status.BucketID)
}

// Issue 12, item 6: a user removes the claim's finalizer and deletes it: the Delete-policy Bucket
// and the backend bucket are deleted anyway; a Retain one stays.
func TestClaimDeletedWithoutFinalizer(t *testing.T) {
	t.Parallel()
	for _, policy := range []cosiapi.DeletionPolicy{cosiapi.DeletionPolicyDelete, cosiapi.DeletionPolicyRetain} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			s := newSystem(t)
			c := s.provisionedClaim(policy)
			b := boundBucket(t, c)
			edit(t, tenant, c, func(o *cosiapi.BucketClaim) { controllerutil.RemoveFinalizer(o, cosiapi.FinalizerProtection) })
			mustDelete(t, tenant, c)
			env.Gone(t, c)
			if policy == cosiapi.DeletionPolicyDelete {
				env.Gone(t, b)
				s.waitBucketDeleted(b.Status.BucketID)
				return
			}
			holds(t, func() error {
				if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
					return fmt.Errorf("the retained Bucket: %w", err)
				}
				if !s.driver.Backend().BucketExists(b.Status.BucketID) {
					return fmt.Errorf("the retained bucket was deleted")
				}
				return nil
			})
		})
	}
}

// Issue 12, items 1 and 6 together: everything of a namespace deleted at once, in the order a
// namespace deletion uses (no order).
func TestEverythingDeletedAtOnce(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	aclass := s.accessClass(func(c *cosiapi.BucketAccessClass) {
		c.Spec.MultiBucketAccess = cosiapi.MultiBucketAccessMultipleBuckets
	})
	c1 := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	c2 := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	accesses := []*cosiapi.BucketAccess{
		s.provisionedAccess(aclass.Name, c1, c2), s.provisionedAccess(aclass.Name, c1), s.provisionedAccess(aclass.Name, c2),
	}
	buckets := []string{boundBucket(t, c1).Status.BucketID, boundBucket(t, c2).Status.BucketID}
	all := []client.Object{c1, accesses[0], c2, accesses[1], accesses[2]}
	for _, o := range all {
		mustDelete(t, tenant, o)
	}
	for _, o := range all {
		env.Gone(t, o)
	}
	for _, ba := range accesses {
		s.waitRevoked(ba.Status.AccountID)
	}
	for _, id := range buckets {
		s.waitBucketDeleted(id)
	}
	if left := s.driver.Backend().Accounts(); len(left) > 0 {
		t.Errorf("accounts left in the backend: %v", left)
	}
	if left := slices.DeleteFunc(s.driver.Backend().Buckets(), func(string) bool { return false }); len(left) > 0 {
		t.Errorf("buckets left in the backend: %v", left)
	}
}

// Issue 25, item 7: Buckets are created without the sidecar's finalizer, which the sidecar adds
// before its first driver call. Claims deleted at each step of their Bucket's creation (before
// the Bucket exists, once it exists, once its bucket ID is recorded, once provisioned) leave no
// bucket behind.
func TestClaimDeletedWhileItsBucketIsCreated(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	class := s.bucketClass(cosiapi.DeletionPolicyDelete)
	steps := []func(*cosiapi.Bucket) bool{
		nil,
		func(*cosiapi.Bucket) bool { return true },
		func(b *cosiapi.Bucket) bool { return b.Status.BucketID != "" },
		func(b *cosiapi.Bucket) bool {
			return meta.IsStatusConditionTrue(b.Status.Conditions, cosiapi.ConditionProvisioned)
		},
	}
	claims := make([]*cosiapi.BucketClaim, 3*len(steps))
	var wg sync.WaitGroup
	for i := range claims {
		c := newClaim(class.Name)
		claims[i] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := tenant.Create(t.Context(), c); err != nil {
				t.Errorf("creating %s: %v", c.Name, err)
				return
			}
			if reached := steps[i%len(steps)]; reached != nil {
				b := &cosiapi.Bucket{}
				b.Name = cosiapi.BucketNamePrefix + string(c.UID)
				for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
					if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err == nil && reached(b) {
						break
					}
					if time.Now().After(deadline) {
						t.Errorf("Bucket %s did not reach step %d", b.Name, i%len(steps))
						return
					}
				}
			}
			if err := tenant.Delete(t.Context(), c); err != nil {
				t.Errorf("deleting %s: %v", c.Name, err)
			}
		}()
	}
	wg.Wait()
	for _, c := range claims {
		env.Gone(t, c)
		b := &cosiapi.Bucket{}
		b.Name = cosiapi.BucketNamePrefix + string(c.UID)
		env.Gone(t, b)
	}
	testenv.Eventually(t, func() error {
		if left := s.driver.Backend().Buckets(); len(left) > 0 {
			return fmt.Errorf("buckets left in the backend: %v", left)
		}
		return nil
	})
}

// Issue 25, items 6 and 19: a hand-off the controller decided while the claim was alive, and
// whose write reaches the API server only after the claim's deletion went ahead, is not applied:
// the deletion fences the access it finds not handed off, the late write conflicts, and the
// access is refused. The deterministic case of TestClaimDeletionRacesNewAccesses: the hand-off
// write is held until the claim's Bucket is being deleted.
func TestHandOffLandingAfterTheClaimsDeletion(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	b := boundBucket(t, c)
	ba := newAccess(s.accessClass().Name, c)
	held := holdHandOff(t, ba.Name)
	mustCreate(t, tenant, ba)
	select {
	case <-held.arrived:
	case <-time.After(time.Minute):
		t.Fatal("the controller did not try to hand the access off")
	}
	mustDelete(t, tenant, c)
	testenv.Eventually(t, func() error {
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b)
		if err == nil && b.DeletionTimestamp == nil {
			return fmt.Errorf("the claim's deletion did not delete its Bucket %s yet", b.Name)
		}
		return client.IgnoreNotFound(err)
	})
	held.Release()
	testenv.Condition(t, env, client.Object(ba), conditions, cosiapi.ConditionResourcesValidated,
		metav1.ConditionFalse, cosiapi.ReasonInvalidReference)
	env.Gone(t, c)
	s.waitBucketDeleted(b.Status.BucketID)
	holds(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return err
		}
		if ba.Status.DriverName != "" {
			return fmt.Errorf("%s was handed off to %s after its claim's deletion", ba.Name, ba.Status.DriverName)
		}
		return nil
	})
	if n := s.calls.Count("DriverGrantBucketAccess"); n != 0 {
		t.Errorf("%d grants to the access of a deleted claim, want 0", n)
	}
}
