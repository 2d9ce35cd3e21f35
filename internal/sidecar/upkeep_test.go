package sidecar_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// TestSecretCheckWhileRotationFails: a rotation whose driver call keeps failing with a code that
// is retried (after the driver acted: its answer is lost each time) does not stop the access's
// Secret checks. A Secret the tenant deletes is let go at the next check, not left Terminating
// under COSI's finalizer, and no grant is made meanwhile (a driver that issues a key per grant
// would otherwise leave a key the rotation never retires). Once the driver answers, the rotation
// writes every Secret, the lost one too, and the account holds the new key alone.
func TestSecretCheckWhileRotationFails(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{
		Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}, NewKeyPerGrant: true,
	})
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) { o.RotationGracePeriod = time.Millisecond })
	b1, b2 := h.provisionedBucket(cosiapi.ProtocolS3), h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b1, b2), accessConditions)
	old := secretCredentials(t, ba, nil)
	h.faults.Set(0, memory.Fault{
		Method: "DriverRotateBucketAccessCredentials", Code: codes.Unavailable, Rate: 1, After: true,
	})
	askRotation(t, ba, "2024-01-01")
	waitForEvent(t, ba, cosiapi.EventFailedRotateCredentials)
	grants := h.calls.Count("DriverGrantBucketAccess")

	s := secret(t, ba, 0)
	if err := env.Client.Delete(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		again := &corev1.Secret{}
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(s), again)
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		case again.UID == s.UID:
			return fmt.Errorf("Secret %s not let go (deleting: %v)", s.Name, again.DeletionTimestamp != nil)
		}
		return fmt.Errorf("Secret %s written again during the rotation", s.Name)
	})
	if n := h.calls.Count("DriverGrantBucketAccess"); n != grants {
		t.Errorf("%d DriverGrantBucketAccess calls during the failing rotation, want none", n-grants)
	}
	if n := h.calls.Count("DriverRotateBucketAccessCredentials"); n < 2 {
		t.Errorf("%d DriverRotateBucketAccessCredentials calls, want the failing rotation retried", n)
	}

	h.faults.Set(0)
	testenv.Eventually(t, func() error { // the rotation writes the lost Secret
		return env.Client.Get(t.Context(), client.ObjectKeyFromObject(s), &corev1.Secret{})
	})
	rotated := secretCredentials(t, ba, old)
	rotationCondition(t, ba, cosiapi.ReasonRotated)
	keys := h.driver.Backend().AccountKeys(ba.Status.AccountID)
	if len(keys) != 1 || keys[0].GetS3().GetAccessKeyId() != rotated.GetS3().GetAccessKeyId() {
		t.Errorf("the account holds %d keys after the rotation, want the Secrets' alone", len(keys))
	}
	for _, b := range []*cosiapi.Bucket{b1, b2} {
		if !h.driver.Backend().Allowed(rotated, b.Status.BucketID, memory.ObjectData, false) {
			t.Errorf("the rotated key does not open Bucket %s", b.Name)
		}
	}
	deleteAccess(t, ba)
}
