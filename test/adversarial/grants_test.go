package adversarial

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

// The tests of issue 25 (the second adversarial round) on grants, revocation and Secret writes.

// newKeyPerGrant makes the memory driver issue a new key on every grant, as the S3 driver does on
// IAM: every needless grant shows as a new key.
func newKeyPerGrant(c *memory.Config) { c.NewKeyPerGrant = true }

// Issue 25, item 1: an admin deletes a claim's Bucket object, stripping its finalizer (as
// docs/security.md allows); the tenant then deletes the access: its key is revoked all the same.
func TestRevokedAfterAdminDeletesBucket(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyRetain)
	ba := s.provisionedAccess(s.accessClass().Name, c)
	b := boundBucket(t, c)
	creds := credentials(secret(t, ba))

	// Deleted first, then its finalizer removed: a deleting object does not get it back.
	mustDelete(t, env.Client, b)
	edit(t, env.Client, b, func(o *cosiapi.Bucket) { controllerutil.RemoveFinalizer(o, cosiapi.FinalizerProtection) })
	env.Gone(t, b)
	mustDelete(t, tenant, ba)
	s.waitRevoked(ba.Status.AccountID)
	if s.driver.Backend().Allowed(creds, b.Status.BucketID, memory.ObjectData, false) {
		t.Error("the key of a deleted access still opens the bucket")
	}
	env.Gone(t, ba)
}

// Issue 25, item 1: an admin replaces a Bucket (kubectl replace: its annotations are gone); the
// access's key is revoked when the access is deleted.
func TestRevokedAfterBucketReplaced(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	ba := s.provisionedAccess(s.accessClass().Name, c)
	b := boundBucket(t, c)

	edit(t, env.Client, b, func(o *cosiapi.Bucket) { o.Annotations = nil })
	mustDelete(t, tenant, ba)
	s.waitRevoked(ba.Status.AccountID)
	env.Gone(t, ba)
	mustDelete(t, tenant, c)
	s.waitBucketDeleted(b.Status.BucketID)
}

// Issue 25, item 1: an access that has no grant record (granted by a version that kept none) is
// revoked when it is deleted, and its status says "revoked" only once the driver revoked it.
func TestRevokedWithoutGrantRecord(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	ba := s.provisionedAccess(s.accessClass().Name, c)
	creds := credentials(secret(t, ba))
	bucketID := boundBucket(t, c).Status.BucketID
	forgetGrantRecords(t, ba)

	s.faults.Set(0, memory.Fault{Method: "DriverRevokeBucketAccess", Code: codes.Unavailable, Rate: 1})
	mustDelete(t, tenant, ba)
	waitEvent(t, ba, cosiapi.EventFailedRevokeAccess)
	holds(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return fmt.Errorf("the access went while its revocation fails: %w", err)
		}
		if meta.IsStatusConditionFalse(ba.Status.Conditions, cosiapi.ConditionProvisioned) {
			return fmt.Errorf("status says %+v while the revocation fails",
				meta.FindStatusCondition(ba.Status.Conditions, cosiapi.ConditionProvisioned))
		}
		return nil
	})
	s.faults.Set(0)
	s.waitRevoked(ba.Status.AccountID)
	if s.driver.Backend().Allowed(creds, bucketID, memory.ObjectData, false) {
		t.Error("the key of a deleted access still opens the bucket")
	}
	env.Gone(t, ba)
}

// forgetGrantRecords removes every record of the access's grant, wherever a version of COSI kept
// it: the grant record in COSI's namespace, the annotations of its Buckets.
func forgetGrantRecords(t *testing.T, ba *cosiapi.BucketAccess) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "cosi-system", Name: "cosi-grant-" + string(ba.UID)}}
	if err := env.Client.Delete(t.Context(), cm); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	for _, ab := range ba.Status.AccessedBuckets {
		b := &cosiapi.Bucket{ObjectMeta: metav1.ObjectMeta{Name: ab.BucketName}}
		edit(t, env.Client, b, func(o *cosiapi.Bucket) {
			delete(o.Annotations, "objectstorage.k8s.io/grant-"+string(ba.UID))
		})
	}
}

// Issue 25, item 3: someone who may write Buckets, and nothing else, forges a grant record (in
// the Bucket annotation where earlier versions kept them) that names another tenant's access UID,
// account and Secret with an access name that does not exist. The sidecar neither deletes the
// Secret nor revokes the account; and such a user cannot write the grant records themselves.
func TestForgedGrantRecordAsBucketAdmin(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	admin := bucketAdmin(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	victim := s.provisionedAccess(s.accessClass().Name, c)
	victimSecret := secret(t, victim)
	b := boundBucket(t, c)

	forged, err := json.Marshal(map[string]any{
		"namespace": tenantNamespace, "name": "no-such-access", "uid": victim.UID,
		"accountID": victim.Status.AccountID, "protocol": "S3", "authenticationType": "Key",
		"bucketIDs": []string{b.Status.BucketID}, "secretNames": []string{victimSecret.Name},
	})
	if err != nil {
		t.Fatal(err)
	}
	key := "objectstorage.k8s.io/grant-" + string(victim.UID)
	edit(t, admin, b, func(o *cosiapi.Bucket) { metav1.SetMetaDataAnnotation(&o.ObjectMeta, key, string(forged)) })
	// Both the sidecars that trusted such records and those that do not remove them.
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		if _, ok := b.Annotations[key]; ok {
			return fmt.Errorf("the forged record is still on the Bucket")
		}
		return nil
	})
	now := secret(t, victim)
	if now.UID != victimSecret.UID || now.DeletionTimestamp != nil {
		t.Error("the victim's Secret was deleted because of a forged record")
	}
	if !s.driver.Backend().Allowed(credentials(victimSecret), b.Status.BucketID, memory.ObjectData, true) {
		t.Error("the victim's key was revoked because of a forged record")
	}

	record := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "cosi-system", Name: "cosi-grant-forged"}}
	if err := admin.Create(t.Context(), record); !apierrors.IsForbidden(err) {
		t.Errorf("a Bucket admin writes in COSI's namespace: %v", err)
	}
}

// bucketAdmin is a user who may do anything with Buckets, and nothing else.
func bucketAdmin(t *testing.T) client.Client {
	t.Helper()
	name := uniqueName("bucket-admin")
	for _, o := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{cosiapi.GroupName}, Resources: []string{"buckets"}, Verbs: []string{"*"}},
		}},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}},
		},
	} {
		mustCreate(t, env.Client, o)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: name}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// quotaNamespace creates a namespace of the test's own, with a tenant who holds only a namespace
// Role there; refuse and allow make its ResourceQuota refuse, or allow, new Secrets.
func quotaNamespace(t *testing.T) (namespace string, tenant client.Client, refuse, allow func()) {
	t.Helper()
	namespace = uniqueName("quota")
	if err := env.CreateNamespace(t.Context(), namespace); err != nil {
		t.Fatal(err)
	}
	tenant, err := tenantClient(t.Context(), namespace, "tenant", false)
	if err != nil {
		t.Fatal(err)
	}
	secrets := corev1.ResourceName("count/secrets")
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "no-secrets"}}
	refuse = func() {
		t.Helper()
		quota.ResourceVersion = ""
		quota.Spec.Hard = corev1.ResourceList{secrets: resource.MustParse("0")}
		mustCreate(t, env.Client, quota)
		// What the quota controller would report: the quota admission plugin checks it.
		quota.Status = corev1.ResourceQuotaStatus{
			Hard: quota.Spec.Hard, Used: corev1.ResourceList{secrets: resource.MustParse("0")},
		}
		if err := env.Client.Status().Update(t.Context(), quota); err != nil {
			t.Fatal(err)
		}
	}
	allow = func() { t.Helper(); mustDelete(t, env.Client, quota); env.Gone(t, quota) }
	return namespace, tenant, refuse, allow
}

// grants counts the driver's DriverGrantBucketAccess calls for an account.
func (s *system) grants(accountID string) int {
	return s.calls.Count("DriverGrantBucketAccess/" + accountID)
}

// atMostGrants checks, for a while, that the access is granted at most n times.
func (s *system) atMostGrants(t *testing.T, ba *cosiapi.BucketAccess, n int) {
	t.Helper()
	holds(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return err
		}
		if got := s.grants(ba.Status.AccountID); ba.Status.AccountID == "" || got > n {
			return fmt.Errorf("%d grants of account %q; want at most %d", got, ba.Status.AccountID, n)
		}
		return nil
	})
}

// Issue 25, item 2: a Secret write refused after the grant (a ResourceQuota on count/secrets) is
// retried as a write, with the driver's answer: the access is granted once, its condition says
// the Secret cannot be written, and it is provisioned once the quota allows it.
func TestRefusedSecretWriteDoesNotGrantAgain(t *testing.T) {
	t.Parallel()
	s := newSystem(t, newKeyPerGrant)
	namespace, tenant, refuse, allow := quotaNamespace(t)
	c := objects.BucketClaim(namespace, uniqueName("claim"), s.bucketClass(cosiapi.DeletionPolicyDelete).Name, objects.S3)
	mustCreate(t, tenant, c)
	waitProvisioned(t, c)
	refuse()
	ba := objects.BucketAccess(namespace, uniqueName("access"), s.accessClass().Name,
		objects.Grant(c.Name, uniqueName("creds"), objects.ReadWrite))
	mustCreate(t, tenant, ba)
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return err
		}
		if ba.Status.AccountID == "" || s.grants(ba.Status.AccountID) == 0 {
			return fmt.Errorf("not granted yet")
		}
		return nil
	})
	s.atMostGrants(t, ba, 1)
	waitCondition(t, ba, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse, cosiapi.ReasonSecretWriteFailed)
	if meta.IsStatusConditionTrue(ba.Status.Conditions, cosiapi.ConditionProvisioned) {
		t.Error("Provisioned is True while the Secret cannot be written")
	}

	allow()
	waitProvisioned(t, ba)
	waitCondition(t, ba, cosiapi.ConditionResourcesValidated, metav1.ConditionTrue, cosiapi.ReasonValid)
	if n := s.grants(ba.Status.AccountID); n != 1 {
		t.Errorf("%d grants; want 1", n)
	}
	bucketID := boundBucket(t, c).Status.BucketID
	if !s.driver.Backend().Allowed(credentials(secret(t, ba)), bucketID, memory.ObjectData, true) {
		t.Error("the Secret's key does not open the bucket")
	}
}

// Issue 12, item 7, and issue 25, items 2 and 19: a tenant deletes a COSI Secret while Secret
// writes are refused, with a driver that issues a new key on every grant. The Secret is written
// again once writes are allowed, the access is granted once more and no more, and the key that
// running Pods hold keeps working.
func TestDeletedSecretIsRewrittenWithoutAGrantStorm(t *testing.T) {
	t.Parallel()
	s := newSystem(t, newKeyPerGrant)
	namespace, tenant, refuse, allow := quotaNamespace(t)
	c := objects.BucketClaim(namespace, uniqueName("claim"), s.bucketClass(cosiapi.DeletionPolicyDelete).Name, objects.S3)
	mustCreate(t, tenant, c)
	waitProvisioned(t, c)
	ba := objects.BucketAccess(namespace, uniqueName("access"), s.accessClass().Name,
		objects.Grant(c.Name, uniqueName("creds"), objects.ReadWrite))
	mustCreate(t, tenant, ba)
	waitProvisioned(t, ba)
	bucketID := boundBucket(t, c).Status.BucketID
	old := secret(t, ba)

	refuse()
	mustDelete(t, tenant, old)
	testenv.Eventually(t, func() error {
		if n := s.grants(ba.Status.AccountID); n < 2 {
			return fmt.Errorf("%d grants: the lost Secret was not noticed yet", n)
		}
		return nil
	})
	s.atMostGrants(t, ba, 2)
	waitCondition(t, ba, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse, cosiapi.ReasonSecretWriteFailed)

	allow()
	testenv.Eventually(t, func() error {
		now := &corev1.Secret{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(old), now); err != nil {
			return err
		}
		if now.UID == old.UID || now.DeletionTimestamp != nil {
			return fmt.Errorf("the deleted Secret was not written again (terminating: %v)", now.DeletionTimestamp != nil)
		}
		if !s.driver.Backend().Allowed(credentials(now), bucketID, memory.ObjectData, true) {
			return fmt.Errorf("the rewritten Secret's credentials do not open the bucket")
		}
		return nil
	})
	waitCondition(t, ba, cosiapi.ConditionResourcesValidated, metav1.ConditionTrue, cosiapi.ReasonValid)
	if !s.driver.Backend().Allowed(credentials(old), bucketID, memory.ObjectData, true) {
		t.Error("the key that running Pods hold stopped working when the Secret was written again")
	}
	s.atMostGrants(t, ba, 2)
}

// Issue 25, item 21: a tenant damages the COSI Secret: removes a key, then also pads its
// annotations to the size limit so that no rewrite can succeed. The key is written back with one
// grant more; the unwritable Secret shows in the access's condition, and drives no more grants.
func TestTenantCannotDriveGrantsByBreakingTheSecret(t *testing.T) {
	t.Parallel()
	s := newSystem(t, newKeyPerGrant)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	ba := s.provisionedAccess(s.accessClass().Name, c)
	bucketID := boundBucket(t, c).Status.BucketID

	sec := secret(t, ba)
	edit(t, tenant, sec, func(o *corev1.Secret) { delete(o.Data, cosiapi.SecretKeyS3SecretAccessKey) })
	testenv.Eventually(t, func() error {
		now := secret(t, ba)
		if len(now.Data[cosiapi.SecretKeyS3SecretAccessKey]) == 0 {
			return fmt.Errorf("the removed key was not written back")
		}
		if !s.driver.Backend().Allowed(credentials(now), bucketID, memory.ObjectData, true) {
			return fmt.Errorf("the rewritten Secret's credentials do not open the bucket")
		}
		return nil
	})
	s.atMostGrants(t, ba, 2)

	edit(t, tenant, sec, func(o *corev1.Secret) {
		delete(o.Data, cosiapi.SecretKeyS3SecretAccessKey)
		o.Annotations = map[string]string{"padding": strings.Repeat("x", 256*1024-64)}
	})
	waitCondition(t, ba, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse, cosiapi.ReasonSecretWriteFailed)
	s.atMostGrants(t, ba, 3)
}

// Issue 25, item 8: a grant whose access vanished cannot be revoked for now: the failure shows as
// an event on the Bucket, where the admin looks, not as a failed provisioning of the Bucket and
// its claim; the revocation is retried until it succeeds.
func TestOrphanRevokeFailureIsReportedOnTheBucket(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	ba := s.provisionedAccess(s.accessClass().Name, c)
	b := boundBucket(t, c)

	s.faults.Set(0, memory.Fault{Method: "DriverRevokeBucketAccess", Code: codes.Unavailable, Rate: 1})
	edit(t, tenant, ba, func(o *cosiapi.BucketAccess) { controllerutil.RemoveFinalizer(o, cosiapi.FinalizerProtection) })
	mustDelete(t, tenant, ba)
	// The controller may have put the finalizer back first: then it is removed again, which a
	// deleting object does not get back.
	testenv.Eventually(t, func() error {
		live := &cosiapi.BucketAccess{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), live); apierrors.IsNotFound(err) {
			return nil
		}
		controllerutil.RemoveFinalizer(live, cosiapi.FinalizerProtection)
		if err := tenant.Update(t.Context(), live); err != nil {
			return err
		}
		return fmt.Errorf("the access was still there")
	})
	waitEvent(t, b, cosiapi.EventFailedRevokeAccess)
	holds(t, func() error {
		for _, o := range []client.Object{b, c} {
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(o), o); err != nil {
				return err
			}
			if meta.IsStatusConditionTrue(conditions(o), cosiapi.ConditionProvisionFailed) {
				return fmt.Errorf("%s %s reports a failed provisioning for another object's revocation: %+v",
					o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), conditions(o))
			}
		}
		for _, e := range env.Events(t, c) {
			if strings.HasPrefix(e, cosiapi.EventFailedCreateBucket) {
				return fmt.Errorf("the claim has event %q for another object's revocation", e)
			}
		}
		return nil
	})
	s.faults.Set(0)
	s.waitRevoked(ba.Status.AccountID)
}

// Issue 25, item 3: grant records are not bounded by the size of one object: 70 accesses to one
// claim, each with a 4 KiB class parameter, all reach Provisioned, and all are revoked.
func TestManyLargeAccessesToOneClaim(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	class := s.accessClass(objects.AccessParameters(map[string]string{memory.ParamDescription: strings.Repeat("d", 4096)}))
	accesses := createAccesses(t, 70, class.Name, c)
	for _, ba := range accesses {
		waitProvisioned(t, ba)
	}
	deleteAccesses(t, accesses)
	for _, ba := range accesses {
		s.waitRevoked(ba.Status.AccountID)
	}
}

// Issue 25, item 3: 2,000 accesses to one claim all reach Provisioned, and all are revoked.
//
// Not parallel: the controller is shared, and the test's thousands of reconciles would queue
// ahead of another test's, beyond the waits that test allows for reconciliation (not for load).
// Top-level tests that are not parallel run alone, before the parallel ones.
func TestTwoThousandAccessesToOneClaim(t *testing.T) {
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	accesses := createAccesses(t, 2000, s.accessClass().Name, c)
	for _, ba := range accesses {
		waitProvisioned(t, ba)
	}
	deleteAccesses(t, accesses)
	for _, ba := range accesses {
		s.waitRevoked(ba.Status.AccountID)
	}
	if n := len(s.driver.Backend().Accounts()); n != 0 {
		t.Errorf("%d accounts left in the backend", n)
	}
}

// createAccesses creates n accesses to the claim, eight at a time.
func createAccesses(t *testing.T, n int, class string, c *cosiapi.BucketClaim) []*cosiapi.BucketAccess {
	t.Helper()
	accesses := make([]*cosiapi.BucketAccess, n)
	for i := range accesses {
		accesses[i] = newAccess(class, c)
	}
	parallel(t, accesses, func(ba *cosiapi.BucketAccess) error { return tenant.Create(t.Context(), ba) })
	return accesses
}

func deleteAccesses(t *testing.T, accesses []*cosiapi.BucketAccess) {
	t.Helper()
	parallel(t, accesses, func(ba *cosiapi.BucketAccess) error {
		return client.IgnoreNotFound(tenant.Delete(t.Context(), ba))
	})
	// Gone in whatever order the queues take them: wait while the deletions progress, and fail
	// only when none has progressed for a minute (a wait for reconciliation, not a speed test; a
	// per-object minute failed in make test, with 2,000 deletions queued under the load of the
	// other packages).
	left := slices.Clone(accesses)
	for progressed := time.Now(); len(left) > 0; time.Sleep(100 * time.Millisecond) {
		before := len(left)
		left = slices.DeleteFunc(left, func(ba *cosiapi.BucketAccess) bool {
			err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), &cosiapi.BucketAccess{})
			return apierrors.IsNotFound(err)
		})
		if len(left) < before {
			progressed = time.Now()
		}
		if time.Since(progressed) > time.Minute {
			t.Fatalf("%d of %d accesses still exist after a minute without a deletion, among them %s",
				len(left), len(accesses), left[0].Name)
		}
	}
}

// parallel calls f for each object, eight at a time, and fails t with the first error.
func parallel[T any](t *testing.T, objs []T, f func(T) error) {
	t.Helper()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	work := make(chan T)
	for range 8 {
		wg.Go(func() {
			for o := range work {
				if err := f(o); err != nil {
					mu.Lock()
					first = cmpErr(first, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, o := range objs {
		work <- o
	}
	close(work)
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
