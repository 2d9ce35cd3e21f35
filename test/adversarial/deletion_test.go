package adversarial

import (
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/testenv"
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

// Issue 12, item 5: no access is granted to a claim that is being deleted, and the claim goes
// once the refused access is deleted.
func TestNoGrantToADeletingClaim(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	// Another finalizer keeps the deleting claim around, as a slow controller of someone else's
	// would.
	edit(t, env.Client, c, func(o *cosiapi.BucketClaim) { controllerutil.AddFinalizer(o, "example.com/hold") })
	mustDelete(t, tenant, c)
	ba := newAccess(s.accessClass().Name, c)
	mustCreate(t, tenant, ba)
	waitCondition(t, ba, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse, cosiapi.ReasonInvalidReference)
	holds(t, func() error {
		if n := s.calls.Count("DriverGrantBucketAccess"); n > 0 {
			return fmt.Errorf("%d grants for an access to a deleting claim", n)
		}
		return nil
	})
	mustDelete(t, tenant, ba)
	env.Gone(t, ba)
	edit(t, env.Client, c, func(o *cosiapi.BucketClaim) { controllerutil.RemoveFinalizer(o, "example.com/hold") })
	env.Gone(t, c)
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
