package sidecar_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

const tenantFinalizer = "example.com/tenant-hold"

// recordedRotation is what the test reads of an access's grant record.
type recordedRotation struct {
	CredentialID string `json:"credentialID"`
	Rotation     *struct {
		From    string  `json:"from"`
		To      string  `json:"to"`
		Written *string `json:"written"`
	} `json:"rotation"`
}

// grantRecordOf reads the access's grant record as an admin would.
func grantRecordOf(t *testing.T, ba *cosiapi.BucketAccess) (*recordedRotation, error) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(t.Context(), types.NamespacedName{
		Namespace: sidecarNamespace, Name: "cosi-grant-" + string(ba.UID),
	}, cm); err != nil {
		return nil, err
	}
	var g recordedRotation
	if err := json.Unmarshal([]byte(cm.Data["grant.json"]), &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// holdAndDelete has the tenant hold the Secret with a finalizer of theirs and delete it: it stays
// Terminating until setSecretFinalizers removes that finalizer.
func holdAndDelete(t *testing.T, s *corev1.Secret) {
	t.Helper()
	setSecretFinalizers(t, client.ObjectKeyFromObject(s), func(s *corev1.Secret) {
		controllerutil.AddFinalizer(s, tenantFinalizer)
	})
	if err := env.Client.Delete(t.Context(), s); err != nil {
		t.Fatal(err)
	}
}

// waitIssued waits until the access's record names the credential its rotation issued (To).
func waitIssued(t *testing.T, ba *cosiapi.BucketAccess) {
	t.Helper()
	testenv.Eventually(t, func() error {
		g, err := grantRecordOf(t, ba)
		if err != nil {
			return err
		}
		if g.Rotation == nil || g.Rotation.To == "" {
			return fmt.Errorf("no credential issued yet: %+v", g.Rotation)
		}
		return nil
	})
}

// setSecretFinalizers changes the finalizers of the Secret as its namespace's tenant can.
func setSecretFinalizers(t *testing.T, key client.ObjectKey, change func(*corev1.Secret)) {
	t.Helper()
	testenv.Eventually(t, func() error {
		s := &corev1.Secret{}
		if err := env.Client.Get(t.Context(), key, s); err != nil {
			return err
		}
		change(s)
		return env.Client.Update(t.Context(), s)
	})
}

// TestLostSecretDuringRotationAfterRestart: a tenant deletes an access Secret while a rotation
// writes the Secrets (a finalizer of the tenant's keeps it Terminating for a moment, so the
// rotation's write fails after the driver issued the new credential and its credential_id is
// recorded), and the sidecar restarts meanwhile (its answer to the rotation is lost). Once the
// Secret is gone, it must be written again: by the rotation or by the Secret check.
func TestLostSecretDuringRotationAfterRestart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) { o.RotationGracePeriod = time.Millisecond })
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b), accessConditions)
	s := secret(t, ba, 0)
	key := client.ObjectKeyFromObject(s)

	// The tenant holds the Secret with a finalizer of theirs and deletes it.
	holdAndDelete(t, s)
	testenv.Eventually(t, func() error { // the Secret check lets COSI's finalizer go
		got := &corev1.Secret{}
		if err := env.Client.Get(t.Context(), key, got); err != nil {
			return err
		}
		if !slices.Equal(got.Finalizers, []string{tenantFinalizer}) {
			return fmt.Errorf("finalizers %v", got.Finalizers)
		}
		return nil
	})

	// A rotation: the driver issues the new credential, its ID is recorded, the write fails.
	askRotation(t, ba, "2024-01-01")
	waitIssued(t, ba)
	// The sidecar restarts: the rotation's answer is lost.
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) { o.RotationGracePeriod = time.Millisecond })
	// The tenant lets the old Secret go.
	setSecretFinalizers(t, key, func(s *corev1.Secret) { controllerutil.RemoveFinalizer(s, tenantFinalizer) })

	testenv.Eventually(t, func() error {
		got := &corev1.Secret{}
		err := env.Client.Get(t.Context(), key, got)
		switch {
		case apierrors.IsNotFound(err):
			g, _ := grantRecordOf(t, ba)
			return fmt.Errorf("Secret %s not written again (record's rotation %+v)", key.Name, g.Rotation)
		case err != nil:
			return err
		case got.UID == s.UID:
			return fmt.Errorf("Secret %s still the deleted one", key.Name)
		}
		return nil
	})
	rotationCondition(t, ba, cosiapi.ReasonRotated)
}

// TestRotationRetiredAfterFinalCheckFailure: during a rotation's grace period, a tenant deletes an
// access Secret and the driver refuses the grant that would write it again with a code that is
// final (ALREADY_EXISTS, as a v1alpha1 driver answers a repeated grant). The Secret check fails for
// good, but the rotation is another part of the upkeep: the replaced credential must still be
// retired once the grace period has passed.
func TestRotationRetiredAfterFinalCheckFailure(t *testing.T) {
	t.Parallel()
	const grace = 15 * time.Second
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) { o.RotationGracePeriod = grace })
	b1, b2 := h.provisionedBucket(cosiapi.ProtocolS3), h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b1, b2), accessConditions)
	old := secretCredentials(t, ba, nil)

	askRotation(t, ba, "2024-01-01")
	secretCredentials(t, ba, old)
	rotationCondition(t, ba, cosiapi.ReasonRotating)
	written := time.Now()

	// The driver refuses grants for good; the tenant deletes the second Secret.
	h.faults.Set(0, memory.Fault{Method: "DriverGrantBucketAccess", Code: codes.AlreadyExists, Rate: 1})
	if err := env.Client.Delete(t.Context(), secret(t, ba, 1)); err != nil {
		t.Fatal(err)
	}
	waitForEvent(t, ba, cosiapi.EventFailedGrantAccess)

	time.Sleep(time.Until(written.Add(grace + 10*time.Second)))
	if h.driver.Backend().Allowed(old, b1.Status.BucketID, memory.ObjectData, false) {
		g, _ := grantRecordOf(t, ba)
		t.Errorf("the replaced key still works %s after the grace period ended (record's rotation %+v)",
			time.Since(written.Add(grace)).Round(time.Second), g.Rotation)
	}
}

// TestRotationWithImmutableSecret: a tenant makes an access Secret immutable (their right on
// Secrets), then an admin asks for a rotation. A grant replaces such a Secret before writing it
// (secretsReady); the rotation must not stay stuck on it either: the Secrets end up holding the new
// key and the old one is retired.
func TestRotationWithImmutableSecret(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) { o.RotationGracePeriod = time.Millisecond })
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b), accessConditions)
	old := secretCredentials(t, ba, nil)
	setSecretFinalizers(t, client.ObjectKeyFromObject(secret(t, ba, 0)), func(s *corev1.Secret) {
		s.Immutable = ptr.To(true)
	})

	askRotation(t, ba, "2024-01-01")
	testenv.Eventually(t, func() error {
		s := &corev1.Secret{}
		if err := env.Client.Get(t.Context(), types.NamespacedName{
			Namespace: ba.Namespace, Name: ba.Spec.BucketClaims[0].AccessSecretName,
		}, s); err != nil {
			return err // replaced: deleted, then written again
		}
		if c := credentialsFrom(ba.Spec.Protocol, s); c.GetS3().GetAccessKeyId() ==
			old.GetS3().GetAccessKeyId() {
			g, _ := grantRecordOf(t, ba)
			return fmt.Errorf("the Secret still holds the old key (record's rotation %+v; events %v)",
				g.Rotation, events(t, ba))
		}
		return nil
	})
	rotationCondition(t, ba, cosiapi.ReasonRotated)
}

// TestConditionsAfterRotationWritesALostSecret: a tenant deletes an access Secret, holding it
// Terminating with a finalizer of theirs for a while, and a rotation runs meanwhile. Once the
// tenant lets it go, the rotation writes every Secret, this one too. The access's conditions must
// then say so: ResourcesValidated True, not a Secret that "cannot be written".
func TestConditionsAfterRotationWritesALostSecret(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) { o.RotationGracePeriod = time.Millisecond })
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b), accessConditions)
	old := secretCredentials(t, ba, nil)
	s := secret(t, ba, 0)
	key := client.ObjectKeyFromObject(s)

	holdAndDelete(t, s)
	askRotation(t, ba, "2024-01-01")
	waitIssued(t, ba)
	setSecretFinalizers(t, key, func(s *corev1.Secret) { controllerutil.RemoveFinalizer(s, tenantFinalizer) })
	rotationCondition(t, ba, cosiapi.ReasonRotated)
	secretCredentials(t, ba, old)

	// Give the sidecar some Secret checks to set the record straight.
	time.Sleep(5 * time.Second)
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(ba.Status.Conditions, cosiapi.ConditionResourcesValidated)
	if c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("every Secret is written and intact, but condition %s is %+v", cosiapi.ConditionResourcesValidated, c)
	}
}

// TestFinalRefreshFailureNotRetriedAtCheckPace: an admin asks for a Secret refresh and the driver
// refuses the grant with a final code. upkeepResult says a final failure of one part is "not
// retried until the access changes, whatever the other parts wait for": the Secret checks that
// keep running (every second here) must not repeat the refused DriverGrantBucketAccess.
func TestFinalRefreshFailureNotRetriedAtCheckPace(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b), accessConditions)

	h.faults.Set(0, memory.Fault{Method: "DriverGrantBucketAccess", Code: codes.InvalidArgument, Rate: 1})
	before := h.calls.Count("DriverGrantBucketAccess")
	askRefresh(t, ba, "2024-01-01")
	testenv.Eventually(t, func() error {
		if h.calls.Count("DriverGrantBucketAccess") == before {
			return fmt.Errorf("the refresh has not asked the driver yet")
		}
		return nil
	})
	first := h.calls.Count("DriverGrantBucketAccess")
	time.Sleep(8 * time.Second)
	if n := h.calls.Count("DriverGrantBucketAccess") - first; n > 0 {
		t.Errorf("the refused grant was asked %d more times in 8s, with the access unchanged (Secret checks every 1s)", n)
	}
}
