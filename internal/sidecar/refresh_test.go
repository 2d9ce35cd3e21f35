package sidecar_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// askRefresh sets the refresh-secret annotation of the access to token, as an admin does.
func askRefresh(t *testing.T, ba *cosiapi.BucketAccess, token string) {
	t.Helper()
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return err
		}
		if ba.Annotations == nil {
			ba.Annotations = map[string]string{}
		}
		ba.Annotations[cosiapi.AnnotationRefreshSecret] = token
		return env.Client.Update(t.Context(), ba)
	})
}

// TestSecretRefresh: when the driver's answer for an existing Bucket changes (the backend moved
// to another endpoint and region), the Bucket's status and the access's Secret follow it at the
// Secret checks, in place and with the same key, without a grant; while nothing changes the
// Secret is not written. What only a grant answers (the certificate authority) is refreshed when
// an admin asks with the refresh-secret annotation: one grant per new value.
func TestSecretRefresh(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
	b := h.refreshedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b), accessConditions)
	s := secret(t, ba, 0)
	creds := credentialsFrom(ba.Spec.Protocol, s)

	// Nothing changed: the Secret checks (every second here) do not write it.
	rv := s.ResourceVersion
	testenv.Never(t, 3*time.Second, func() error {
		if got := secret(t, ba, 0).ResourceVersion; got != rv {
			return fmt.Errorf("the Secret was written (resourceVersion %s, was %s) though nothing changed", got, rv)
		}
		return nil
	})

	h.driver.MoveS3("https://s3-moved.memory.invalid", "memory-2", "")
	testenv.Eventually(t, func() error {
		s = secret(t, ba, 0)
		if got := string(s.Data[cosiapi.SecretKeyS3EndpointURL]); got != "https://s3-moved.memory.invalid" {
			return fmt.Errorf("Secret endpoint %q", got)
		}
		if got := string(s.Data[cosiapi.SecretKeyS3Region]); got != "memory-2" {
			return fmt.Errorf("Secret region %q", got)
		}
		return nil
	})
	if got := credentialsFrom(ba.Spec.Protocol, s); got.GetS3().GetAccessKeyId() != creds.GetS3().GetAccessKeyId() ||
		got.GetS3().GetAccessSecretKey() != creds.GetS3().GetAccessSecretKey() {
		t.Error("the refresh changed the key")
	}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
		t.Fatal(err)
	}
	if got := b.Status.BucketInfo["COSI_S3_ENDPOINT_URL"]; got != "https://s3-moved.memory.invalid" {
		t.Errorf("Bucket status.bucketInfo endpoint %q, want the moved one", got)
	}
	if n := h.calls.Count("DriverGrantBucketAccess"); n != 1 {
		t.Errorf("%d DriverGrantBucketAccess calls, want 1: a periodic refresh does not grant", n)
	}
	waitForEvent(t, ba, cosiapi.EventSecretsRefreshed+":")

	// The certificate authority comes with grants only: refreshed on demand.
	const ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	h.driver.MoveS3("https://s3-moved.memory.invalid", "memory-2", ca)
	askRefresh(t, ba, "1")
	testenv.Eventually(t, func() error {
		if got := string(secret(t, ba, 0).Data[cosiapi.SecretKeyCertificateAuthority]); got != ca {
			return fmt.Errorf("Secret certificate authority %q", got)
		}
		return nil
	})
	if n := h.calls.Count("DriverGrantBucketAccess"); n != 2 {
		t.Errorf("%d DriverGrantBucketAccess calls, want 2: one per refresh asked", n)
	}
	// The same value asks nothing more.
	askRefresh(t, ba, "1")
	testenv.Never(t, 3*time.Second, func() error {
		if n := h.calls.Count("DriverGrantBucketAccess"); n != 2 {
			return fmt.Errorf("%d DriverGrantBucketAccess calls after the same refresh value, want 2", n)
		}
		return nil
	})
	if !h.driver.Backend().Allowed(creds, b.Status.BucketID, memory.ObjectData, true) {
		t.Error("the key stopped working")
	}
	deleteAccess(t, ba)
}

// TestBucketInfoRefreshedWithoutAnEvent: a provisioned Bucket's information is asked of the
// driver again at every refresh interval from its provisioning on, also when nothing else wakes
// its reconciler (no access, no edit).
func TestBucketInfoRefreshedWithoutAnEvent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
	b := h.refreshedBucket(cosiapi.ProtocolS3)
	h.driver.MoveS3("https://s3-moved.memory.invalid", "memory-2", "")
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		if got := b.Status.BucketInfo["COSI_S3_ENDPOINT_URL"]; got != "https://s3-moved.memory.invalid" {
			return fmt.Errorf("Bucket status.bucketInfo endpoint %q, want the moved one", got)
		}
		return nil
	})
}

// TestCredentialsRenewedBeforeExpiry: credentials that expire (an Azure SAS token with
// sasExpiry) are written again from a new grant before they expire, with nothing asking for it
// (no annotation, no Secret check due), also by a sidecar restarted in between; the token stays
// the same and keeps working past the expiry the Secret first said.
func TestCredentialsRenewedBeforeExpiry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, renewByGrant)
	b := h.provisionedBucket(cosiapi.ProtocolAzure)
	ba := provisioned(t, h.accessWith(map[string]string{memory.ParamSASExpiry: "12s"},
		cosiapi.ProtocolAzure, cosiapi.AuthenticationTypeKey, b), accessConditions)
	expiryOf := func(s *corev1.Secret) time.Time {
		t.Helper()
		at, err := time.Parse(time.RFC3339, string(s.Data[cosiapi.SecretKeyAzureSASTokenExpiry]))
		if err != nil {
			t.Fatalf("%s: %v", cosiapi.SecretKeyAzureSASTokenExpiry, err)
		}
		return at
	}
	s := secret(t, ba, 0)
	first, token := expiryOf(s), string(s.Data[cosiapi.SecretKeyAzureSASToken])
	creds := credentialsFrom(ba.Spec.Protocol, s)

	// Renewed once, then the sidecar restarts: the next renewal comes from the grant record.
	renewedAfter := func(after time.Time) time.Time {
		t.Helper()
		var got time.Time
		testenv.Eventually(t, func() error {
			s := secret(t, ba, 0)
			if got = expiryOf(s); !got.After(after) {
				return fmt.Errorf("the Secret's token expires at %s, not renewed", got.Format(time.RFC3339))
			}
			if string(s.Data[cosiapi.SecretKeyAzureSASToken]) != token {
				return fmt.Errorf("the renewal changed the token")
			}
			return nil
		})
		return got
	}
	second := renewedAfter(first)
	waitForEvent(t, ba, cosiapi.EventSecretsRefreshed+": renewed before the credentials' expiry")
	h.stop()
	h.startSidecar()
	renewedAfter(second)

	if now := time.Now(); !now.After(first) {
		t.Fatalf("renewed twice before the first expiry (%s) passed: the renewals came too early", first)
	}
	if !h.driver.Backend().Allowed(creds, b.Status.BucketID, memory.ObjectData, true) {
		t.Error("the token stopped working past the expiry the Secret first said")
	}
	if n := h.calls.Count("DriverGrantBucketAccess"); n < 3 {
		t.Errorf("%d DriverGrantBucketAccess calls, want 3 or more: the grant and a renewal each", n)
	}
	deleteAccess(t, ba)
}

// TestDynamicBucketRefreshedOnlyWhenAsked: KEP-1979 says DriverGetBucket "does not apply to
// dynamically-provisioned Buckets": the driver is not asked for their information at intervals
// unless their class opts in (ParameterRefreshBucketInfo); and a refresh whose answer lacks a value
// the Secrets hold (the region here) leaves that value in them: a workload may use it.
func TestDynamicBucketRefreshedOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
	plain := h.provisionedBucket(cosiapi.ProtocolS3)
	asked := h.refreshedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, asked), accessConditions)
	region := string(secret(t, ba, 0).Data[cosiapi.SecretKeyS3Region])
	if region == "" {
		t.Fatal("the Secret has no region to keep")
	}

	h.driver.MoveS3("https://s3-moved.memory.invalid", "", "")
	testenv.Eventually(t, func() error {
		s := secret(t, ba, 0)
		if got := string(s.Data[cosiapi.SecretKeyS3EndpointURL]); got != "https://s3-moved.memory.invalid" {
			return fmt.Errorf("Secret endpoint %q, want the moved one", got)
		}
		return nil
	})
	if got := string(secret(t, ba, 0).Data[cosiapi.SecretKeyS3Region]); got != region {
		t.Errorf("Secret region %q after a refresh that answered none, want %q kept", got, region)
	}
	testenv.Never(t, 3*time.Second, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(plain), plain); err != nil {
			return err
		}
		if got := plain.Status.BucketInfo["COSI_S3_ENDPOINT_URL"]; got == "https://s3-moved.memory.invalid" {
			return fmt.Errorf("the dynamically provisioned Bucket %s of a class that did not opt in was refreshed",
				plain.Name)
		}
		return nil
	})
}
