package adversarial

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

// While the sidecar is down, a tenant removes its access's finalizer and deletes it: no event will
// ever tell the next sidecar about it. The grant recorded on the Bucket does: the key is revoked
// after the restart.
func TestAccessDeletedWhileTheSidecarIsDown(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	ba := s.provisionedAccess(s.accessClass().Name, c)
	bucketID := boundBucket(t, c).Status.BucketID
	creds := credentials(secret(t, ba))

	s.stopSidecar()
	// Deleted first, then the finalizer removed: COSI puts finalizers back only on objects that
	// are not being deleted, so this wins every time.
	mustDelete(t, tenant, ba)
	edit(t, tenant, ba, func(o *cosiapi.BucketAccess) { controllerutil.RemoveFinalizer(o, cosiapi.FinalizerProtection) })
	env.Gone(t, ba)
	s.startSidecar()
	s.waitRevoked(ba.Status.AccountID)
	if s.driver.Backend().Allowed(creds, bucketID, memory.ObjectData, false) {
		t.Error("the key of an access deleted while the sidecar was down still opens the bucket")
	}
}

// A tenant deletes an access and at once creates another with the same name and Secret name: the
// old access's cleanup never touches the new access's Secret, and the new access gets its own
// credentials once the old Secret is gone.
func TestAccessNameReusedAtOnce(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	aclass := s.accessClass()
	old := s.provisionedAccess(aclass.Name, c)
	mustDelete(t, tenant, old)
	again := newAccess(aclass.Name, c)
	again.Name, again.Spec.BucketClaims[0].AccessSecretName = old.Name, old.Spec.BucketClaims[0].AccessSecretName
	testenv.Eventually(t, func() error { return tenant.Create(t.Context(), again) }) // once the old one is gone
	waitProvisioned(t, again)
	s.waitRevoked(old.Status.AccountID)
	sec := secret(t, again)
	if sec.Labels[cosiapi.LabelBucketAccessUID] != string(again.UID) || !metav1.IsControlledBy(sec, again) {
		t.Errorf("the Secret does not belong to the new access: labels %v", sec.Labels)
	}
	bucketID := boundBucket(t, c).Status.BucketID
	if !s.driver.Backend().Allowed(credentials(sec), bucketID, memory.ObjectData, true) {
		t.Error("the new access's Secret does not open the bucket")
	}
	holds(t, func() error {
		if n := s.calls.Count("DriverGrantBucketAccess/" + again.Status.AccountID); n != 1 {
			return fmt.Errorf("%d grants for the new access; want 1", n)
		}
		return nil
	})
}

// The sidecar stops between granting and writing the Secret, as often as it takes: the access
// still ends provisioned, with one account, and is revoked when deleted.
func TestSidecarRestartsDuringGrants(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	aclass := s.accessClass()
	var accesses []*cosiapi.BucketAccess
	for range 5 {
		ba := newAccess(aclass.Name, c)
		mustCreate(t, tenant, ba)
		accesses = append(accesses, ba)
	}
	for range 3 {
		s.stopSidecar()
		s.startSidecar()
	}
	for _, ba := range accesses {
		waitProvisioned(t, ba)
	}
	for _, ba := range accesses {
		mustDelete(t, tenant, ba)
	}
	for _, ba := range accesses {
		env.Gone(t, ba)
		s.waitRevoked(ba.Status.AccountID)
	}
	mustDelete(t, tenant, c)
	env.Gone(t, c)
	if left := s.driver.Backend().Accounts(); len(left) > 0 {
		t.Errorf("accounts left in the backend: %v", left)
	}
}
