package sidecar_test

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// TestSecretCheckWhileRotationFails: a rotation whose driver call keeps failing with a code that
// is retried does not stop the access's Secret checks: a Secret the tenant deletes is written
// again (not left Terminating under COSI's finalizer), with a key that works, while the rotation
// is still retried.
func TestSecretCheckWhileRotationFails(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b), accessConditions)
	h.faults.Set(0, memory.Fault{Method: "DriverRotateBucketAccessCredentials", Code: codes.Unavailable, Rate: 1})
	askRotation(t, ba, "2024-01-01")
	waitForEvent(t, ba, cosiapi.EventFailedRotateCredentials)

	s := secret(t, ba, 0)
	if err := env.Client.Delete(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	var again *corev1.Secret
	testenv.Eventually(t, func() error {
		again = &corev1.Secret{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(s), again); err != nil {
			return err
		}
		if again.UID == s.UID {
			return fmt.Errorf("Secret %s not written again (deleting: %v)", s.Name, again.DeletionTimestamp != nil)
		}
		return nil
	})
	if !h.driver.Backend().Allowed(credentialsFrom(ba.Spec.Protocol, again), b.Status.BucketID, memory.ObjectData, false) {
		t.Error("the Secret written again holds a key that does not open the Bucket")
	}
	if n := h.calls.Count("DriverRotateBucketAccessCredentials"); n < 2 {
		t.Errorf("%d DriverRotateBucketAccessCredentials calls, want the failing rotation retried", n)
	}
	h.faults.Set(0)
	rotationCondition(t, ba, cosiapi.ReasonRotating)
	deleteAccess(t, ba)
}
