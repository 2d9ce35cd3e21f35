package sidecar_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// TestDeletedSecretDuringAnsweredRotation: a tenant deletes an access Secret (COSI's finalizer keeps
// it Terminating: the sidecar cannot watch Secrets) and an admin asks for a rotation before the next
// Secret check (checks every 10 minutes, as in production). The rotation has the driver's answer in
// hand; 1f83e06 says a Secret lost during a rotation is written by the rotation, not left to a
// check. The Secret must be written again, with the new key, without waiting for the check.
func TestDeletedSecretDuringAnsweredRotation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) {
		o.RotationGracePeriod = time.Millisecond
		o.SecretCheckInterval = 10 * time.Minute
	})
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b), accessConditions)
	old := secretCredentials(t, ba, nil)
	s := secret(t, ba, 0)
	key := client.ObjectKeyFromObject(s)
	if err := env.Client.Delete(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	askRotation(t, ba, "2024-01-01")
	testenv.Eventually(t, func() error {
		got := &corev1.Secret{}
		err := env.Client.Get(t.Context(), key, got)
		switch {
		case apierrors.IsNotFound(err):
			return fmt.Errorf("Secret %s gone, not written again", key.Name)
		case err != nil:
			return err
		case got.UID == s.UID:
			g, _ := grantRecordOf(t, ba)
			return fmt.Errorf("Secret %s still the deleted one (Terminating, finalizers %v; record's rotation %+v)",
				key.Name, got.Finalizers, g.Rotation)
		case credentialsFrom(ba.Spec.Protocol, got).GetS3().GetAccessKeyId() == old.GetS3().GetAccessKeyId():
			return fmt.Errorf("Secret %s holds the old key", key.Name)
		}
		return nil
	})
	rotationCondition(t, ba, cosiapi.ReasonRotated)
}

// TestRenewalWhileRotationCallFails: access.go's upkeep says "A rotation whose driver keeps failing
// does not keep ... credentials from being renewed before they expire". An Azure access whose SAS
// token expires 12s after each grant; an admin asks for a rotation and the driver's rotation call
// keeps failing (UNAVAILABLE, retried with backoff). The token in the Secret must still be renewed
// before it expires.
func TestRenewalWhileRotationCallFails(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_AZURE}})
	b := h.provisionedBucket(cosiapi.ProtocolAzure)
	ba := h.azureAccess("12s", b)
	first := sasExpiryOf(t, secret(t, ba, 0))
	h.faults.Set(0, memory.Fault{Method: "DriverRotateBucketAccessCredentials", Code: codes.Unavailable, Rate: 1})
	askRotation(t, ba, "renew-while-rotation-fails")
	testenv.Eventually(t, func() error {
		if h.calls.Count("DriverRotateBucketAccessCredentials") == 0 {
			return fmt.Errorf("no rotation call yet")
		}
		return nil
	})
	time.Sleep(time.Until(first.Add(2 * time.Second)))
	s := secret(t, ba, 0)
	if got := sasExpiryOf(t, s); !got.After(first) {
		g, _ := grantRecordOf(t, ba)
		t.Errorf("the token in Secret %s expired at %s and was not renewed while the rotation call failed "+
			"(%d rotation calls; record's rotation %+v)", s.Name, got.Format(time.RFC3339),
			h.calls.Count("DriverRotateBucketAccessCredentials"), g.Rotation)
	}
}

// TestRebuiltSecretAfterRestartMatchesGrant: a two-claim access; the tenant holds the second Secret
// Terminating with a finalizer of theirs and deletes it, an admin asks for a rotation (the first
// Secret gets the new key, the second cannot be written), the sidecar restarts (the answer is
// lost) and the tenant lets the old Secret go. The rotation writes the second Secret again from the
// first one and the Bucket's information: it must hold exactly what a grant wrote there (keys,
// bucket information, certificate authority, annotations), with the new key, and the old key must
// be retired only once both Secrets hold the new one.
func TestRebuiltSecretAfterRestartMatchesGrant(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3},
		CertificateAuthority: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"})
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) { o.RotationGracePeriod = time.Millisecond })
	b1, b2 := h.provisionedBucket(cosiapi.ProtocolS3), h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b1, b2), accessConditions)
	old := secretCredentials(t, ba, nil)
	granted := secret(t, ba, 1)
	key := client.ObjectKeyFromObject(granted)

	holdAndDelete(t, granted)
	askRotation(t, ba, "2024-01-01")
	waitIssued(t, ba)
	testenv.Eventually(t, func() error {
		g, err := grantRecordOf(t, ba)
		if err != nil || g.Rotation == nil {
			return fmt.Errorf("record %+v: %w", g, err)
		}
		if got := secret(t, ba, 0).Annotations[cosiapi.AnnotationCredentialID]; got != g.Rotation.To {
			return fmt.Errorf("Secret 0 holds %s, not %s yet", got, g.Rotation.To)
		}
		return nil
	})
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) { o.RotationGracePeriod = time.Millisecond })
	setSecretFinalizers(t, key, func(s *corev1.Secret) { controllerutil.RemoveFinalizer(s, tenantFinalizer) })
	rotationCondition(t, ba, cosiapi.ReasonRotated)
	rotated := secretCredentials(t, ba, old)
	rebuilt := secret(t, ba, 1)
	if rebuilt.UID == granted.UID {
		t.Fatal("the Secret was not written again")
	}
	for k, v := range granted.Data {
		switch k {
		case cosiapi.SecretKeyS3AccessKeyID, cosiapi.SecretKeyS3SecretAccessKey:
			continue
		}
		if w, ok := rebuilt.Data[k]; !ok || string(w) != string(v) {
			t.Errorf("rebuilt Secret: key %s = %q, the grant wrote %q", k, w, v)
		}
	}
	for k := range rebuilt.Data {
		if _, ok := granted.Data[k]; !ok {
			t.Errorf("rebuilt Secret: key %s the grant did not write", k)
		}
	}
	for _, a := range []string{cosiapi.AnnotationSecretDataKeys, cosiapi.AnnotationBucketClaimReference,
		cosiapi.AnnotationBucketAccessReference} {
		if rebuilt.Annotations[a] != granted.Annotations[a] {
			t.Errorf("rebuilt Secret: annotation %s = %q, the grant wrote %q", a, rebuilt.Annotations[a],
				granted.Annotations[a])
		}
	}
	got := rebuilt.Annotations[cosiapi.AnnotationCredentialID]
	want := secret(t, ba, 0).Annotations[cosiapi.AnnotationCredentialID]
	if got != want {
		t.Errorf("rebuilt Secret: credential id %q, the other Secret %q", got, want)
	}
	if h.driver.Backend().Allowed(old, b1.Status.BucketID, memory.ObjectData, false) {
		t.Error("the old key still works after the rotation")
	}
	if !h.driver.Backend().Allowed(rotated, b2.Status.BucketID, memory.ObjectData, false) {
		t.Error("the new key does not open the second Bucket")
	}
}

// TestRenewalWhileRetireFails: upkeepResult lets "the first failure retried with backoff" decide
// the reconcile's result, dropping the other parts' waits. An Azure access whose SAS token expires
// 30s after each write is rotated; the new token is in the Secret, and retiring the old one keeps
// failing (UNAVAILABLE: retried with backoff, up to 5 minutes). Secret checks every 10 minutes (as
// in production), so nothing else wakes the access. The renewal of the new token (due at four
// fifths of its life) must still happen before it expires.
func TestRenewalWhileRetireFails(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_AZURE}})
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) {
		o.RotationGracePeriod = time.Millisecond
		o.SecretCheckInterval = 10 * time.Minute
	})
	b := h.provisionedBucket(cosiapi.ProtocolAzure)
	ba := h.azureAccess("30s", b)
	old := credentialsFrom(ba.Spec.Protocol, secret(t, ba, 0))
	h.faults.Set(0, memory.Fault{Method: "DriverRetireBucketAccessCredentials", Code: codes.Unavailable, Rate: 1})
	askRotation(t, ba, "renew-while-retire-fails")
	testenv.Eventually(t, func() error {
		if credentialsFrom(ba.Spec.Protocol, secret(t, ba, 0)).GetAzure().GetAccessToken() ==
			old.GetAzure().GetAccessToken() {
			return fmt.Errorf("the Secret still holds the old token")
		}
		return nil
	})
	expiry := sasExpiryOf(t, secret(t, ba, 0))
	time.Sleep(time.Until(expiry.Add(2 * time.Second)))
	if got := sasExpiryOf(t, secret(t, ba, 0)); !got.After(expiry) {
		t.Errorf("the rotated token expired at %s and was not renewed while retiring the old one failed "+
			"(%d retire calls, %d grants)", got.Format(time.RFC3339),
			h.calls.Count("DriverRetireBucketAccessCredentials"), h.calls.Count("DriverGrantBucketAccess"))
	}
}

// refuseSecretDataChanges has the API server refuse every update of the Secret that changes its
// data (a policy webhook, say): the sidecar's probes (patches that change nothing) still pass.
func refuseSecretDataChanges(t *testing.T, key client.ObjectKey) {
	t.Helper()
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "test-refuse-secret-data-" + key.Name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				ResourceNames: []string{key.Name},
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}},
				},
			}}},
			Validations: []admissionv1.Validation{{Expression: "object.data == oldObject.data", Message: "refused by the test"}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: policy.Name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: key.Namespace},
			}},
		},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := env.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}
	testenv.Eventually(t, func() error {
		s := &corev1.Secret{}
		if err := env.Client.Get(t.Context(), key, s); err != nil {
			return err
		}
		s.Data["TEST_PROBE"] = []byte("x")
		if err := env.Client.Update(t.Context(), s, client.DryRunAll); err == nil {
			return fmt.Errorf("policy %s not in force yet", policy.Name)
		}
		return nil
	})
}

// TestResourcesValidatedWhileRotationCannotWrite: 1f83e06 has the Secret check set
// ResourcesValidated True again when it finds the Secrets intact. A rotation whose write of a
// Secret is refused (a policy) marks it False, SecretWriteFailed; the Secrets, still holding the
// old key, are "intact" for the check. The condition must not flap between True and False (a
// status write, and a Warning event, each time) while the write keeps failing.
func TestResourcesValidatedWhileRotationCannotWrite(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b), accessConditions)
	refuseSecretDataChanges(t, client.ObjectKeyFromObject(secret(t, ba, 0)))
	askRotation(t, ba, "2024-01-01")
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(ba.Status.Conditions, cosiapi.ConditionResourcesValidated); c == nil ||
			c.Reason != cosiapi.ReasonSecretWriteFailed {
			return fmt.Errorf("ResourcesValidated %+v", c)
		}
		return nil
	})
	flips, last := 0, metav1.ConditionFalse
	trueSeen := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		got := &cosiapi.BucketAccess{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), got); err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(got.Status.Conditions, cosiapi.ConditionResourcesValidated)
		if c != nil && c.Status != last {
			flips++
			last = c.Status
			if c.Status == metav1.ConditionTrue {
				trueSeen++
			}
		}
	}
	if trueSeen > 0 {
		t.Errorf("ResourcesValidated went True %d times (%d flips) in 10s while the rotation could not write "+
			"Secret %s (Secret checks every 1s)", trueSeen, flips, secret(t, ba, 0).Name)
	}
}
