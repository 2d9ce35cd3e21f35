package sidecar_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// renewByGrant is a driver of Azure tokens that cannot rotate them and renews them by a repeated
// grant, which moves the token's expiry and keeps the token: renewals are grants.
var renewByGrant = memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_AZURE},
	RenewByGrant: true}

// sasExpiryOf is when the token in an access's Secret expires, as the Secret says.
func sasExpiryOf(t *testing.T, s *corev1.Secret) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339, string(s.Data[cosiapi.SecretKeyAzureSASTokenExpiry]))
	if err != nil {
		t.Fatalf("%s: %v", cosiapi.SecretKeyAzureSASTokenExpiry, err)
	}
	return at
}

// waitRenewedAfter waits until the token in the access's Secret i expires later than after.
func waitRenewedAfter(t *testing.T, ba *cosiapi.BucketAccess, i int, after time.Time) time.Time {
	t.Helper()
	var got time.Time
	testenv.Eventually(t, func() error {
		// The Secret may not be there yet: the test deleted it and the sidecar writes it again.
		s := &corev1.Secret{}
		key := types.NamespacedName{Namespace: ba.Namespace, Name: ba.Spec.BucketClaims[i].AccessSecretName}
		if err := env.Client.Get(t.Context(), key, s); err != nil {
			return err
		}
		if got = sasExpiryOf(t, s); !got.After(after) {
			return fmt.Errorf("the Secret's token expires at %s, not renewed", got.Format(time.RFC3339))
		}
		return nil
	})
	return got
}

// azureAccess is a provisioned Azure key access whose token expires sasExpiry after each grant.
func (h *harness) azureAccess(sasExpiry string, buckets ...*cosiapi.Bucket) *cosiapi.BucketAccess {
	h.t.Helper()
	return provisioned(h.t, h.accessWith(map[string]string{memory.ParamSASExpiry: sasExpiry},
		cosiapi.ProtocolAzure, cosiapi.AuthenticationTypeKey, buckets...), accessConditions)
}

// noSecretInEvents fails when an event about the access carries its token.
func noSecretInEvents(t *testing.T, ba *cosiapi.BucketAccess, token string) {
	t.Helper()
	sig := token[strings.Index(token, "sig=")+len("sig="):]
	for _, e := range events(t, ba) {
		if strings.Contains(e, sig) {
			t.Errorf("an event carries the token: %s", e)
		}
	}
}

// TestRenewalDuringRotationGrace: a rotation whose new credential is in the Secrets, waiting for
// its grace period to retire the old one, does not hold back the renewal of credentials that
// expire: once the renewal is due, the grace period ends (the old credential is retired), and the
// renewal rotates the new credential in turn, which keeps working until its own grace ends.
func TestRenewalDuringRotationGrace(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_AZURE}})
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) {
		o.RotationGracePeriod = time.Hour
	})

	b := h.provisionedBucket(cosiapi.ProtocolAzure)
	ba := h.azureAccess("12s", b)
	first := sasExpiryOf(t, secret(t, ba, 0))
	old := credentialsFrom(ba.Spec.Protocol, secret(t, ba, 0))
	askRotation(t, ba, "renew-during-grace")
	var rotated *cosiproto.CredentialInfo
	testenv.Eventually(t, func() error {
		rotated = credentialsFrom(ba.Spec.Protocol, secret(t, ba, 0))
		if rotated.GetAzure().GetAccessToken() == old.GetAzure().GetAccessToken() {
			return fmt.Errorf("the Secret still holds the old token")
		}
		return nil
	})
	rotationCondition(t, ba, cosiapi.ReasonRotating)

	waitRenewedAfter(t, ba, 0, sasExpiryOf(t, secret(t, ba, 0)))
	renewed := credentialsFrom(ba.Spec.Protocol, secret(t, ba, 0))
	if renewed.GetAzure().GetAccessToken() == rotated.GetAzure().GetAccessToken() {
		t.Error("the renewal kept the rotated token: its expiry cannot move")
	}
	for _, c := range []struct {
		what  string
		creds *cosiproto.CredentialInfo
		works bool
	}{{"the first token", old, false}, {"the rotated token", rotated, true}, {"the renewed token", renewed, true}} {
		if got := h.driver.Backend().Allowed(c.creds, b.Status.BucketID, memory.ObjectData, true); got != c.works {
			t.Errorf("%s works: %t, want %t (first expiry %s)", c.what, got, c.works, first.Format(time.RFC3339))
		}
	}
	if got := h.driver.Backend().AccountKeys(ba.Status.AccountID); len(got) != 2 {
		t.Errorf("the account has %d credentials, want 2: the renewed one, and the rotated one in its grace period",
			len(got))
	}
	noSecretInEvents(t, ba, rotated.GetAzure().GetAccessToken())
	noSecretInEvents(t, ba, renewed.GetAzure().GetAccessToken())
}

// TestRenewalByRotation: a driver that rotates credentials (the Azure driver) renews an expiring
// token with a new one, never by moving the old one's expiry: a copy of the old token works
// through the grace period, is refused once it expired or was retired, and stays refused after
// the next renewals. The renewals are rotations, not grants, and say so in events.
func TestRenewalByRotation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_AZURE}})
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) {
		o.RotationGracePeriod = time.Second
	})
	b := h.provisionedBucket(cosiapi.ProtocolAzure)
	ba := h.azureAccess("10s", b)
	first := sasExpiryOf(t, secret(t, ba, 0))
	old := credentialsFrom(ba.Spec.Protocol, secret(t, ba, 0))
	grants := h.calls.Count("DriverGrantBucketAccess")

	second := waitRenewedAfter(t, ba, 0, first)
	renewed := credentialsFrom(ba.Spec.Protocol, secret(t, ba, 0))
	if renewed.GetAzure().GetAccessToken() == old.GetAzure().GetAccessToken() {
		t.Fatal("the renewal kept the token: a copy that expired would work again")
	}
	waitForEvent(t, ba, cosiapi.EventSecretsRefreshed+": renewed before the credentials' expiry")
	time.Sleep(time.Until(first.Add(time.Second)))
	if h.driver.Backend().Allowed(old, b.Status.BucketID, memory.ObjectData, false) {
		t.Error("the first token works past its expiry")
	}
	if !h.driver.Backend().Allowed(renewed, b.Status.BucketID, memory.ObjectData, true) {
		t.Error("the renewed token does not work")
	}
	waitRenewedAfter(t, ba, 0, second)
	if h.driver.Backend().Allowed(old, b.Status.BucketID, memory.ObjectData, false) {
		t.Error("the first token works again after the next renewal")
	}
	if n := h.calls.Count("DriverGrantBucketAccess"); n != grants {
		t.Errorf("%d grants for the renewals, want rotations only", n-grants)
	}
	if h.calls.Count("DriverRotateBucketAccessCredentials") < 2 {
		t.Error("fewer than two rotations for two renewals")
	}
	testenv.Eventually(t, func() error {
		if n := len(h.driver.Backend().AccountKeys(ba.Status.AccountID)); n != 1 {
			return fmt.Errorf("the account has %d credentials: the replaced ones are not retired", n)
		}
		return nil
	})
	noSecretInEvents(t, ba, renewed.GetAzure().GetAccessToken())
	deleteAccess(t, ba)
}

// TestRenewalOfShortLivedCredentialsIsBounded: a driver whose credentials expire a second after
// each grant, or had expired already, is not asked in a loop: a few grants over many seconds.
func TestRenewalOfShortLivedCredentialsIsBounded(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"rotation", "grant"} {
		for _, expiry := range []string{"1s", "1ms", "-1h"} {
			t.Run(mode+"/"+expiry, func(t *testing.T) {
				t.Parallel()
				cfg := memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_AZURE}}
				if mode == "grant" {
					cfg = renewByGrant
				}
				h := newHarness(t, cfg)
				b := h.provisionedBucket(cosiapi.ProtocolAzure)
				ba := h.azureAccess(expiry, b)
				calls := func() int {
					return h.calls.Count("DriverGrantBucketAccess") + h.calls.Count("DriverRotateBucketAccessCredentials")
				}
				start := calls()
				const window = 12 * time.Second
				time.Sleep(window)
				// The renewal waits at least requeueDelay (5s) after a grant: 3 in the window; 8
				// leaves room for anything else (a Secret check that rewrites).
				if n := calls() - start; n > 8 {
					t.Errorf("%d grants and rotations in %s: the renewal loops", n, window)
				}
				deleteAccess(t, ba)
			})
		}
	}
}

// TestRenewalRetriedAfterDriverErrors: a renewal whose grant fails is retried until it succeeds;
// the access stays provisioned, and the failure says nothing of the token.
func TestRenewalRetriedAfterDriverErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, renewByGrant)
	b := h.provisionedBucket(cosiapi.ProtocolAzure)
	ba := h.azureAccess("10s", b)
	s := secret(t, ba, 0)
	first, token := sasExpiryOf(t, s), string(s.Data[cosiapi.SecretKeyAzureSASToken])
	h.faults.Set(0, memory.Fault{Method: "DriverGrantBucketAccess", Code: codes.Unavailable, Count: 3})
	waitRenewedAfter(t, ba, 0, first)
	if got := string(secret(t, ba, 0).Data[cosiapi.SecretKeyAzureSASToken]); got != token {
		t.Error("the renewal changed the token")
	}
	ba = provisioned(t, ba, accessConditions)
	testenv.Eventually(t, func() error {
		ba = provisioned(t, ba, accessConditions)
		if c := findCondition(ba, cosiapi.ConditionProvisionFailed); c != nil && c.Status == metav1.ConditionTrue {
			return fmt.Errorf("ProvisionFailed still True after the renewal: %s", c.Message)
		}
		return nil
	})
	noSecretInEvents(t, ba, token)
}

func findCondition(ba *cosiapi.BucketAccess, typ string) *metav1.Condition {
	i := slices.IndexFunc(ba.Status.Conditions, func(c metav1.Condition) bool { return c.Type == typ })
	if i < 0 {
		return nil
	}
	return &ba.Status.Conditions[i]
}

// TestRenewalOfDeletedAccess: an access deleted while its renewal's grant is in the driver (before
// or after the driver acted) is revoked once that grant is done, and never granted again: no account is left behind.
func TestRenewalOfDeletedAccess(t *testing.T) {
	t.Parallel()
	for _, after := range []bool{false, true} {
		t.Run(fmt.Sprintf("after=%t", after), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, renewByGrant)
			b := h.provisionedBucket(cosiapi.ProtocolAzure)
			ba := h.azureAccess("8s", b)
			account := ba.Status.AccountID
			h.faults.Pause("DriverGrantBucketAccess", after)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			if _, ok := h.faults.WaitPaused(ctx); !ok {
				t.Fatal("no renewal reached the driver")
			}
			if err := env.Client.Delete(t.Context(), ba); err != nil {
				t.Fatal(err)
			}
			h.faults.Release()
			deleteAccess(t, ba)
			testenv.Eventually(t, func() error {
				if slices.Contains(h.driver.Backend().Accounts(), account) {
					return fmt.Errorf("account %s still exists after its access was deleted", account)
				}
				return nil
			})
			n := h.calls.Count("DriverGrantBucketAccess")
			testenv.Never(t, 10*time.Second, func() error {
				if got := h.calls.Count("DriverGrantBucketAccess"); got != n {
					return fmt.Errorf("%d DriverGrantBucketAccess calls after the access was deleted", got-n)
				}
				if slices.Contains(h.driver.Backend().Accounts(), account) {
					return fmt.Errorf("account %s granted again after its access was deleted", account)
				}
				return nil
			})
		})
	}
}

// TestRenewalAfterSidecarStoppedMidRenewal: a sidecar that stops while the renewal's grant is in
// the driver (the driver renewed, the answer is lost) is followed by one that renews.
func TestRenewalAfterSidecarStoppedMidRenewal(t *testing.T) {
	t.Parallel()
	h := newHarness(t, renewByGrant)
	b := h.provisionedBucket(cosiapi.ProtocolAzure)
	ba := h.azureAccess("10s", b)
	first := sasExpiryOf(t, secret(t, ba, 0))
	h.faults.Pause("DriverGrantBucketAccess", true)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, ok := h.faults.WaitPaused(ctx); !ok {
		t.Fatal("no renewal reached the driver")
	}
	h.faults.Abort()
	h.stop()
	h.startSidecar()
	second := waitRenewedAfter(t, ba, 0, first)
	waitRenewedAfter(t, ba, 0, second)
	creds := credentialsFrom(ba.Spec.Protocol, secret(t, ba, 0))
	if !h.driver.Backend().Allowed(creds, b.Status.BucketID, memory.ObjectData, true) {
		t.Error("the token in the Secret does not work")
	}
}

// TestRenewalAfterGrantRecordDeleted: a provisioned access whose grant record was deleted (an
// admin's mistake) still has its credentials renewed before they expire.
func TestRenewalAfterGrantRecordDeleted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, renewByGrant)
	b := h.provisionedBucket(cosiapi.ProtocolAzure)
	ba := h.azureAccess("15s", b)
	first := sasExpiryOf(t, secret(t, ba, 0))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: sidecarNamespace, Name: "cosi-grant-" + string(ba.UID),
	}}
	if err := env.Client.Delete(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	waitRenewedAfter(t, ba, 0, first)
	creds := credentialsFrom(ba.Spec.Protocol, secret(t, ba, 0))
	if !h.driver.Backend().Allowed(creds, b.Status.BucketID, memory.ObjectData, true) {
		t.Error("the token in the Secret does not work")
	}
	deleteAccess(t, ba)
}

// TestRenewalWaitsForAnUnprovisionedBucket: a renewal due while a Bucket of the access is not
// provisioned (being provisioned again) asks the driver nothing and says nothing false (no "the
// driver's new credentials still expire" event: the driver was not asked), and renews once the
// Bucket is provisioned again.
func TestRenewalWaitsForAnUnprovisionedBucket(t *testing.T) {
	t.Parallel()
	h := newHarness(t, renewByGrant)
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) {
		o.DriverTimeout = 2 * time.Minute // the held DriverCreateBucket below is not given up
	})
	// Refreshed at intervals: the refresh schedule wakes the Bucket after the status edit below
	// (a status change alone does not), and it is provisioned again.
	b := h.refreshedBucket(cosiapi.ProtocolAzure)
	ba := h.azureAccess("8s", b)
	first := sasExpiryOf(t, secret(t, ba, 0))
	// The Bucket is provisioned again, its DriverCreateBucket held in the driver.
	h.faults.Pause("DriverCreateBucket", false)
	t.Cleanup(h.faults.Release)
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: cosiapi.ConditionProvisioned,
			Status: metav1.ConditionUnknown, Reason: cosiapi.ReasonProvisioning, Message: "again"})
		return env.Client.Status().Update(t.Context(), b)
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, ok := h.faults.WaitPaused(ctx); !ok {
		t.Fatal("the Bucket is not provisioned again")
	}
	grants := h.calls.Count("DriverGrantBucketAccess")
	testenv.Never(t, 12*time.Second, func() error {
		for _, e := range events(t, ba) {
			if strings.HasPrefix(e, cosiapi.EventFailedRefresh+":") {
				return fmt.Errorf("event %q though the driver was not asked", e)
			}
		}
		return nil
	})
	if n := h.calls.Count("DriverGrantBucketAccess"); n != grants {
		t.Errorf("%d DriverGrantBucketAccess calls while the Bucket was not provisioned", n-grants)
	}
	h.faults.Release()
	provisioned(t, b, bucketConditions)
	waitRenewedAfter(t, ba, 0, first)
}

// TestRenewalOfEverySecret: an access to two Buckets has both its Secrets renewed, with the same
// token, also when an admin's refresh request and a Secret the tenant deleted come at the same
// time as the renewal.
func TestRenewalOfEverySecret(t *testing.T) {
	t.Parallel()
	h := newHarness(t, renewByGrant)
	b1, b2 := h.provisionedBucket(cosiapi.ProtocolAzure), h.provisionedBucket(cosiapi.ProtocolAzure)
	ba := h.azureAccess("10s", b1, b2)
	first := sasExpiryOf(t, secret(t, ba, 0))
	token := string(secret(t, ba, 0).Data[cosiapi.SecretKeyAzureSASToken])
	second := waitRenewedAfter(t, ba, 1, first)
	waitRenewedAfter(t, ba, 0, first)
	// Next renewal: asked for and a Secret deleted around its time.
	time.Sleep(time.Until(second.Add(-3 * time.Second)))
	askRefresh(t, ba, "with-renewal")
	if err := env.Client.Delete(t.Context(), secret(t, ba, 1)); err != nil {
		t.Fatal(err)
	}
	waitRenewedAfter(t, ba, 0, second)
	waitRenewedAfter(t, ba, 1, second)
	for i := range 2 {
		s := secret(t, ba, i)
		if got := string(s.Data[cosiapi.SecretKeyAzureSASToken]); got != token {
			t.Errorf("Secret %d holds another token", i)
		}
		creds := credentialsFrom(ba.Spec.Protocol, s)
		for _, b := range []*cosiapi.Bucket{b1, b2} {
			if !h.driver.Backend().Allowed(creds, b.Status.BucketID, memory.ObjectData, false) {
				t.Errorf("the token of Secret %d does not open Bucket %s", i, b.Name)
			}
		}
	}
	noSecretInEvents(t, ba, token)
	deleteAccess(t, ba)
}

// TestRenewalFailingDriverIsBounded: a driver that fails every renewal is retried with backoff,
// not in a loop; the access stays provisioned.
func TestRenewalFailingDriverIsBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, renewByGrant)
	b := h.provisionedBucket(cosiapi.ProtocolAzure)
	ba := h.azureAccess("6s", b)
	h.faults.Set(0, memory.Fault{Method: "DriverGrantBucketAccess", Code: codes.Unavailable})
	start := h.calls.Count("DriverGrantBucketAccess")
	time.Sleep(20 * time.Second)
	// Backoff from 5ms doubling: about 12 calls in 20s; 30 is a loop.
	if n := h.calls.Count("DriverGrantBucketAccess") - start; n > 30 {
		t.Errorf("%d DriverGrantBucketAccess calls in 20s: the failing renewal loops", n)
	}
	provisioned(t, ba, accessConditions)
	h.faults.Set(0)
	deleteAccess(t, ba)
}

// TestRenewalAfterRecordWritesFailed: a renewal by a grant whose grant record cannot be written (refused,
// as by a policy webhook or RBAC not loaded after an API server restart) keeps the driver's answer
// for its retries; once the writes succeed again, after that answer's credentials expired, the
// Secrets get credentials that work, and the renewals go on.
func TestRenewalAfterRecordWritesFailed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, renewByGrant)
	b := h.provisionedBucket(cosiapi.ProtocolAzure)
	ba := h.azureAccess("8s", b)
	// The driver cannot rotate, and the sidecar knows it (a rotation asked for first): the
	// renewals are grants.
	askRotation(t, ba, "learn-unsupported")
	rotationCondition(t, ba, cosiapi.ReasonRotationUnsupported)
	grants := h.calls.Count("DriverGrantBucketAccess")
	lift := testenv.RefuseUpdates(t, env.Client, sidecarNamespace, "cosi-grant-"+string(ba.UID))
	testenv.Eventually(t, func() error {
		if n := h.calls.Count("DriverGrantBucketAccess"); n == grants {
			return fmt.Errorf("no renewal yet")
		}
		return nil
	})
	waitForEvent(t, ba, cosiapi.EventFailedRefresh+": Kubernetes API error")
	// The renewal's token expires meanwhile.
	time.Sleep(10 * time.Second)
	lift()
	testenv.Eventually(t, func() error {
		s := secret(t, ba, 0)
		creds := credentialsFrom(ba.Spec.Protocol, s)
		if !h.driver.Backend().Allowed(creds, b.Status.BucketID, memory.ObjectData, true) {
			return fmt.Errorf("the token in the Secret (expiry %s) does not work",
				s.Data[cosiapi.SecretKeyAzureSASTokenExpiry])
		}
		return nil
	})
	// And renewed from there.
	waitRenewedAfter(t, ba, 0, sasExpiryOf(t, secret(t, ba, 0)))
	deleteAccess(t, ba)
}
