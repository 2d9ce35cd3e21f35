package sidecar_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// askRotation sets the rotate-credentials annotation of the access to token, as an admin does.
func askRotation(t *testing.T, ba *cosiapi.BucketAccess, token string) {
	t.Helper()
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return err
		}
		if ba.Annotations == nil {
			ba.Annotations = map[string]string{}
		}
		ba.Annotations[cosiapi.AnnotationRotateCredentials] = token
		return env.Client.Update(t.Context(), ba)
	})
}

// rotationCondition waits until the access's CredentialsRotated condition has the reason, and
// returns its message.
func rotationCondition(t *testing.T, ba *cosiapi.BucketAccess, reason string) string {
	t.Helper()
	var msg string
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return err
		}
		c := meta.FindStatusCondition(ba.Status.Conditions, cosiapi.ConditionCredentialsRotated)
		if c == nil || c.Reason != reason {
			return fmt.Errorf("condition %s: %+v, want reason %s", cosiapi.ConditionCredentialsRotated, c, reason)
		}
		msg = c.Message
		return nil
	})
	return msg
}

// secretCredentials waits until every Secret of the access holds credentials other than not
// (nil: any), all the same, and returns them.
func secretCredentials(
	t *testing.T, ba *cosiapi.BucketAccess, not *cosiproto.CredentialInfo,
) *cosiproto.CredentialInfo {
	t.Helper()
	var creds *cosiproto.CredentialInfo
	testenv.Eventually(t, func() error {
		creds = nil
		for i := range ba.Spec.BucketClaims {
			c := credentialsFrom(ba.Spec.Protocol, secret(t, ba, i))
			if not != nil && c.GetS3().GetAccessKeyId() == not.GetS3().GetAccessKeyId() {
				return fmt.Errorf("Secret %d still holds the old key", i)
			}
			if creds != nil && c.GetS3().GetAccessKeyId() != creds.GetS3().GetAccessKeyId() {
				return fmt.Errorf("the Secrets hold different keys")
			}
			creds = c
		}
		return nil
	})
	return creds
}

// TestRotateCredentials: an admin's annotation rotates the key of a multi-bucket access. The new
// key reaches every Secret while the old one keeps working for the grace period; a sidecar that
// restarts meanwhile finishes the rotation from its records, retires the old key once the grace
// period has passed, and says so in the condition and events. The same annotation value does not
// rotate again; a new one does.
func TestRotateCredentials(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
	// The answer to the first rotation is lost after the driver rotated: the sidecar asks again
	// and must get, and write, the same key.
	h.faults.Set(0, memory.Fault{Method: "DriverRotateBucketAccessCredentials", Code: codes.Unavailable, Count: 1,
		After: true})
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) {
		o.RotationGracePeriod = time.Hour
	})

	b1, b2 := h.provisionedBucket(cosiapi.ProtocolS3), h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b1, b2), accessConditions)
	old := secretCredentials(t, ba, nil)
	backend := h.driver.Backend()

	askRotation(t, ba, "2024-01-01")
	rotated := secretCredentials(t, ba, old)
	for _, b := range []*cosiapi.Bucket{b1, b2} {
		if !backend.Allowed(rotated, b.Status.BucketID, memory.ObjectData, false) {
			t.Errorf("the new key does not open Bucket %s", b.Name)
		}
		if !backend.Allowed(old, b.Status.BucketID, memory.ObjectData, false) {
			t.Errorf("the old key stopped working during the grace period (Bucket %s)", b.Name)
		}
	}
	rotationCondition(t, ba, cosiapi.ReasonRotating)
	if n := h.calls.Count("DriverRotateBucketAccessCredentials"); n != 2 {
		t.Errorf("%d DriverRotateBucketAccessCredentials calls, want 2 (one lost answer, one repeat)", n)
	}

	// A sidecar with no grace period left finishes the rotation from the records.
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) {
		o.RotationGracePeriod = time.Millisecond
	})
	rotationCondition(t, ba, cosiapi.ReasonRotated)
	if backend.Allowed(old, b1.Status.BucketID, memory.ObjectData, false) {
		t.Error("the old key works after the rotation completed")
	}
	if !backend.Allowed(rotated, b1.Status.BucketID, memory.ObjectData, true) {
		t.Error("the new key stopped working")
	}
	if got := secretCredentials(t, ba, old); got.GetS3().GetAccessKeyId() != rotated.GetS3().GetAccessKeyId() {
		t.Error("the Secrets changed after the rotation completed")
	}
	ev := strings.Join(events(t, ba), "\n")
	for _, want := range []string{cosiapi.EventRotatingCredentials, cosiapi.EventCredentialsRotated} {
		if !strings.Contains(ev, want+":") {
			t.Errorf("no %s event; events:\n%s", want, ev)
		}
	}
	if n := h.calls.Count("DriverRetireBucketAccessCredentials"); n != 1 {
		t.Errorf("%d DriverRetireBucketAccessCredentials calls, want 1", n)
	}

	// A new value rotates again.
	askRotation(t, ba, "2024-02-01")
	third := secretCredentials(t, ba, rotated)
	rotationCondition(t, ba, cosiapi.ReasonRotated)
	testenv.Eventually(t, func() error {
		if backend.Allowed(rotated, b1.Status.BucketID, memory.ObjectData, false) {
			return fmt.Errorf("the second key still works")
		}
		return nil
	})
	if !backend.Allowed(third, b2.Status.BucketID, memory.ObjectData, false) {
		t.Error("the third key does not work")
	}
	if n := h.calls.Count("DriverRotateBucketAccessCredentials"); n != 3 {
		t.Errorf("%d DriverRotateBucketAccessCredentials calls after two rotations, want 3", n)
	}
	deleteAccess(t, ba)
	if accounts := backend.Accounts(); len(accounts) != 0 {
		t.Errorf("accounts left after the access was deleted: %v", accounts)
	}
}

// TestRotationUnsupported: a driver that cannot rotate answers Unimplemented; the access's
// condition says so and the key keeps working.
func TestRotationUnsupported(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
	h.faults.Set(0, memory.Fault{Method: "DriverRotateBucketAccessCredentials", Code: codes.Unimplemented, Rate: 1})
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b), accessConditions)
	creds := secretCredentials(t, ba, nil)

	askRotation(t, ba, "now")
	if msg := rotationCondition(t, ba, cosiapi.ReasonRotationUnsupported); !strings.Contains(msg, "Unimplemented") {
		t.Errorf("condition message %q does not name the driver's answer", msg)
	}
	waitForEvent(t, ba, cosiapi.EventRotationUnsupported+":")
	if !h.driver.Backend().Allowed(creds, b.Status.BucketID, memory.ObjectData, true) {
		t.Error("the key stopped working")
	}
	if n := h.calls.Count("DriverRotateBucketAccessCredentials"); n != 1 {
		t.Errorf("%d DriverRotateBucketAccessCredentials calls, want 1", n)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(ba.Status.Conditions, cosiapi.ConditionProvisioned)
	if c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Provisioned = %+v, want True: the access still works", c)
	}
}

// TestRotationAskedDuringRotation: a new value of the annotation that comes while a rotation runs
// (its old key in its grace period) asks for one more rotation, started as soon as the first is
// done, not at the access's next Secret check (an hour here, 10 minutes by default). Found by the
// fault suite (docs/reliability.md, "Found by the suite").
func TestRotationAskedDuringRotation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) {
		o.RotationGracePeriod = 10 * time.Second
		o.SecretCheckInterval = time.Hour
	})

	b := h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b), accessConditions)
	first := secretCredentials(t, ba, nil)
	askRotation(t, ba, "first")
	second := secretCredentials(t, ba, first)
	askRotation(t, ba, "second") // during the first rotation's grace period
	third := secretCredentials(t, ba, second)
	rotationCondition(t, ba, cosiapi.ReasonRotated)
	backend := h.driver.Backend()
	testenv.Eventually(t, func() error {
		for i, k := range []*cosiproto.CredentialInfo{first, second} {
			if backend.Allowed(k, b.Status.BucketID, memory.ObjectData, false) {
				return fmt.Errorf("key %d still works", i+1)
			}
		}
		return nil
	})
	if !backend.Allowed(third, b.Status.BucketID, memory.ObjectData, true) {
		t.Error("the third key does not work")
	}
	if n := h.calls.Count("DriverRotateBucketAccessCredentials"); n != 2 {
		t.Errorf("%d DriverRotateBucketAccessCredentials calls, want 2", n)
	}
	deleteAccess(t, ba)
}

// TestRefreshRetriedAfterARotation: a refresh whose grant the driver answered but whose grant record
// write was refused keeps the answer for its retry; a rotation of the access before the retry
// revokes the key of that answer (the driver issues a key per grant and, as on IAM, a rotation
// revokes every key but the one it rotates from). The retry must not write the revoked key into
// the Secrets: they end with a key that works, and the next rotation succeeds. Found by the fault
// suite (docs/reliability.md, finding 6), where the write was refused while RBAC was not loaded
// after an API server restart; here a ValidatingAdmissionPolicy refuses it.
func TestRefreshRetriedAfterARotation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{
		Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}, NewKeyPerGrant: true,
	})
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) {
		o.RotationGracePeriod = time.Second
	})

	b := h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b), accessConditions)
	first := secret(t, ba, 0).Annotations[cosiapi.AnnotationCredentialID]

	lift := testenv.RefuseUpdates(t, env.Client, sidecarNamespace, "cosi-grant-"+string(ba.UID))
	askRefresh(t, ba, "refresh-1")
	testenv.Eventually(t, func() error {
		if got := secret(t, ba, 0).Annotations[cosiapi.AnnotationCredentialID]; got == first {
			return fmt.Errorf("the Secret still holds credential %s", got)
		}
		return nil
	}) // the grant's answer is in the Secrets ...
	waitForEvent(t, ba, cosiapi.EventFailedRefresh+": Kubernetes API error") // ... its record refused
	// The rotation is asked while the record is refused (its start is refused too), so that it
	// runs before the refresh's retry, whichever reconcile comes first once the records are free.
	askRotation(t, ba, "rotate-1")
	waitForEvent(t, ba, cosiapi.EventFailedRotateCredentials+": Kubernetes API error")
	lift()

	rotated := rotationCondition(t, ba, cosiapi.ReasonRotated)
	waitForEvent(t, ba, cosiapi.EventSecretsRefreshed+":")
	backend := h.driver.Backend()
	if !backend.Allowed(secretCredentials(t, ba, nil), b.Status.BucketID, memory.ObjectData, true) {
		t.Error("after the rotation and the refresh, the Secret's key does not work")
	}

	askRotation(t, ba, "rotate-2")
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return err
		}
		c := meta.FindStatusCondition(ba.Status.Conditions, cosiapi.ConditionCredentialsRotated)
		if c == nil || c.Message == rotated || c.Reason != cosiapi.ReasonRotated && c.Reason != cosiapi.ReasonRotationFailed {
			return fmt.Errorf("the second rotation is not over: %+v", c)
		}
		if c.Reason == cosiapi.ReasonRotationFailed {
			t.Errorf("the second rotation failed: %s", c.Message)
		}
		return nil
	})
	if !backend.Allowed(secretCredentials(t, ba, nil), b.Status.BucketID, memory.ObjectData, true) {
		t.Error("after the second rotation, the Secret's key does not work")
	}
	deleteAccess(t, ba)
}

// TestRotationOfServiceAccountAccess: a rotation asked of a ServiceAccount access ends at once,
// its condition saying that such an access has no key to rotate, without asking the driver; the
// access stays provisioned.
func TestRotationOfServiceAccountAccess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeServiceAccount, b), accessConditions)

	askRotation(t, ba, "now")
	if msg := rotationCondition(t, ba, cosiapi.ReasonRotationUnsupported); !strings.Contains(msg, "ServiceAccount") {
		t.Errorf("condition message %q does not say that a ServiceAccount access has no key to rotate", msg)
	}
	waitForEvent(t, ba, cosiapi.EventRotationUnsupported+":")
	if n := h.calls.Count("DriverRotateBucketAccessCredentials"); n != 0 {
		t.Errorf("%d DriverRotateBucketAccessCredentials calls, want none", n)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(ba.Status.Conditions, cosiapi.ConditionProvisioned)
	if c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Provisioned = %+v, want True", c)
	}
}
