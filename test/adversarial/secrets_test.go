package adversarial

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

// Issue 12, item 8: a Secret the user owns under the accessSecretName is found before anything is
// granted; once the user deletes it, the access proceeds.
func TestUserSecretConflictIsCheckedBeforeGranting(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	ba := newAccess(s.accessClass().Name, c)
	mine := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: ba.Spec.BucketClaims[0].AccessSecretName, Namespace: tenantNamespace},
		StringData: map[string]string{"password": "the user's own"},
	}
	mustCreate(t, tenant, mine)
	mustCreate(t, tenant, ba)
	waitCondition(t, ba, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse, cosiapi.ReasonSecretConflict)
	holds(t, func() error {
		if n := s.calls.Count("DriverGrantBucketAccess"); n > 0 {
			return fmt.Errorf("credentials were minted (%d grants) though their Secret cannot be written", n)
		}
		got := &corev1.Secret{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(mine), got); err != nil {
			return err
		}
		if string(got.Data["password"]) != "the user's own" || len(got.Data) != 1 {
			return fmt.Errorf("the user's Secret was changed: keys %v", len(got.Data))
		}
		return nil
	})
	mustDelete(t, tenant, mine)
	waitProvisioned(t, ba)
	if n := s.calls.Count("DriverGrantBucketAccess"); n != 1 {
		t.Errorf("%d grants; want 1", n)
	}
}

// Issue 12, item 10: whoever can write bucketaccesses/status cannot point an access at someone
// else's Bucket.
func TestForgedAccessedBuckets(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	victim := s.provisionedClaim(cosiapi.DeletionPolicyDelete) // in tenantNamespace, but not this access's claim
	own := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	victimBucket := boundBucket(t, victim)

	// An access whose class does not exist, so that the controller never hands it off, with a
	// forged hand-off in status.
	ba := newAccess("no-such-class", own)
	mustCreate(t, statusWriter, ba)
	// The forger writes the status subresource, as its RBAC allows.
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return err
		}
		ba.Status.DriverName = s.name
		ba.Status.AuthenticationType = cosiapi.AuthenticationTypeKey
		ba.Status.AccessedBuckets = []cosiapi.AccessedBucket{{BucketClaimName: own.Name, BucketName: victimBucket.Name}}
		return statusWriter.Status().Update(t.Context(), ba)
	})
	waitCondition(t, ba, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse, cosiapi.ReasonInvalidReference)
	holds(t, func() error {
		if n := s.calls.Count("DriverGrantBucketAccess/bucket/" + victimBucket.Status.BucketID); n > 0 {
			return fmt.Errorf("the forged access was granted the victim's bucket")
		}
		return nil
	})
	mustDelete(t, tenant, ba)
	env.Gone(t, ba)
}

// Issue 12, item 13: codes that are not final are retried with backoff, on create, grant, revoke
// and delete alike; nothing stays behind.
func TestNonFinalErrorsAreRetried(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	methods := []string{"DriverCreateBucket", "DriverGrantBucketAccess", "DriverRevokeBucketAccess", "DriverDeleteBucket"}
	var faults []memory.Fault
	for _, m := range methods {
		for _, code := range []codes.Code{codes.PermissionDenied, codes.Internal, codes.FailedPrecondition, codes.NotFound} {
			faults = append(faults, memory.Fault{Method: m, Code: code, Count: 1})
		}
	}
	s.faults.Set(0, faults...)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	ba := s.provisionedAccess(s.accessClass().Name, c)
	bucketID := boundBucket(t, c).Status.BucketID
	mustDelete(t, tenant, ba)
	mustDelete(t, tenant, c)
	env.Gone(t, ba)
	env.Gone(t, c)
	s.waitRevoked(ba.Status.AccountID)
	s.waitBucketDeleted(bucketID)
	for _, m := range methods {
		if n := s.calls.Count(m + "/" + codes.Internal.String()); n == 0 {
			t.Errorf("%s: the injected faults were not hit", m)
		}
	}
}

// Issue 12, item 13: a revoke that keeps failing with a code other places call final still shows
// in the access's conditions and events, and the access stays until it succeeds.
func TestFailingRevokeIsNeverGivenUp(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	ba := s.provisionedAccess(s.accessClass().Name, c)
	s.faults.Set(0, memory.Fault{Method: "DriverRevokeBucketAccess", Code: codes.InvalidArgument, Rate: 1})
	mustDelete(t, tenant, ba)
	waitCondition(t, ba, cosiapi.ConditionProvisionFailed, metav1.ConditionTrue, cosiapi.ReasonDriverError)
	waitEvent(t, ba, cosiapi.EventFailedRevokeAccess)
	before := s.calls.Count("DriverRevokeBucketAccess/" + codes.InvalidArgument.String())
	testenv.Eventually(t, func() error {
		if n := s.calls.Count("DriverRevokeBucketAccess/" + codes.InvalidArgument.String()); n <= before {
			return fmt.Errorf("the failed revoke is not retried")
		}
		return nil
	})
	s.faults.Set(0)
	env.Gone(t, ba)
	s.waitRevoked(ba.Status.AccountID)
}

// Issue 12, item 15: requested protocols are checked against the driver before anything is
// created in the backend.
func TestUnsupportedProtocolCreatesNothing(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := newClaim(s.bucketClass(cosiapi.DeletionPolicyDelete).Name)
	c.Spec.Protocols = []cosiapi.Protocol{cosiapi.ProtocolGCS}
	mustCreate(t, tenant, c)
	waitCondition(t, c, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse, cosiapi.ReasonUnsupportedProtocol)
	for _, m := range []string{"DriverGenerateBucketId", "DriverCreateBucket"} {
		if n := s.calls.Count(m + "/OK"); n > 0 {
			t.Errorf("%s was called %d times for a protocol the driver does not support", m, n)
		}
	}
	if b := s.driver.Backend().Buckets(); len(b) > 0 {
		t.Errorf("buckets were created: %v", b)
	}
	mustDelete(t, tenant, c)
	env.Gone(t, c)
}

// Issue 12, item 17: an access the controller refuses gets a FailedGrantAccess event; one whose
// claim has no Bucket yet gets WaitingForBucket; conditions start Unknown; Bucket info uses the
// KEP's COSI_<PROTOCOL>_<KEY> keys.
func TestEventsAndConditionsTheKEPLists(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	single := s.accessClass()
	other := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	refused := newAccess(single.Name, c, other)
	mustCreate(t, tenant, refused)
	waitEvent(t, refused, cosiapi.EventFailedGrantAccess)

	// A claim whose class does not exist yet has no Bucket.
	pending := newClaim(uniqueName("later"))
	mustCreate(t, tenant, pending)
	waiting := newAccess(single.Name, pending)
	mustCreate(t, tenant, waiting)
	waitEvent(t, waiting, cosiapi.EventWaitingForBucket)
	waitCondition(t, waiting, cosiapi.ConditionProvisionFailed, metav1.ConditionUnknown, cosiapi.ReasonPending)
	waitCondition(t, pending, cosiapi.ConditionProvisionFailed, metav1.ConditionUnknown, cosiapi.ReasonPending)

	b := boundBucket(t, c)
	info := b.Status.BucketInfo
	var protocols []string
	for _, p := range b.Status.Protocols {
		protocols = append(protocols, string(p))
	}
	if want := strings.Join(protocols, ","); info[cosiapi.SecretKeyProtocol] != want || want == "" {
		t.Errorf(
			"bucketInfo %s = %q, want the bucket's protocols %q",
			cosiapi.SecretKeyProtocol,
			info[cosiapi.SecretKeyProtocol],
			want,
		)
	}
	// Exactly the Secret's bucket info of the protocol, under COSI_S3_<KEY> (the Secret key without
	// its AWS_ or AWS_S3_ prefix), with the Secret's values: no other key, none missing.
	ba := s.provisionedAccess(single.Name, c)
	data := secret(t, ba).Data
	want := map[string]string{cosiapi.SecretKeyProtocol: "S3"}
	for key, status := range map[string]string{
		cosiapi.SecretKeyS3EndpointURL: "COSI_S3_ENDPOINT_URL", cosiapi.SecretKeyS3BucketName: "COSI_S3_BUCKET_NAME",
		cosiapi.SecretKeyS3Region: "COSI_S3_DEFAULT_REGION", cosiapi.SecretKeyS3AddressingStyle: "COSI_S3_ADDRESSING_STYLE",
	} {
		if v, ok := data[key]; ok {
			want[status] = string(v)
		}
	}
	if len(want) < 3 || !maps.Equal(info, want) {
		t.Errorf("bucketInfo %v, want %v", info, want)
	}
	mustDelete(t, tenant, ba)
	env.Gone(t, ba)
	for _, o := range []client.Object{refused, waiting, pending, c, other} {
		mustDelete(t, tenant, o)
		env.Gone(t, o)
	}
}
