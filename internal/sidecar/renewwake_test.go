package sidecar_test

import (
	"fmt"
	"testing"
	"time"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// longCheckHarness is a harness whose sidecar checks Secrets (and refreshes Buckets) once an hour,
// as a real one does (10 minutes by default): only what the access asks for itself wakes it.
func longCheckHarness(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_AZURE}})
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) {
		o.SecretCheckInterval = time.Hour
	})
	return h
}

// renewedBy waits until the token in the access's first Secret expires later than after, or
// fails once deadline passed.
func renewedBy(t *testing.T, ba *cosiapi.BucketAccess, after, deadline time.Time) time.Time {
	t.Helper()
	for {
		got := sasExpiryOf(t, secret(t, ba, 0))
		if got.After(after) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("at %s the Secret's token still expires at %s: not renewed before it expired",
				time.Now().UTC().Format(time.RFC3339), got.Format(time.RFC3339))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFirstRenewalDoesNotWaitForTheSecretCheck: credentials that expire are renewed before they
// expire after the grant that wrote them, when the Secret checks are rarer than the credentials'
// lifetime. The grant's reconcile used to requeue the access at the renewal (sooner(interval,
// until(renewAt))); since 0befd59 it asks sooner(0, until(renewAt)), which is 0: the renewal waits
// for the first Secret check, an interval (an hour here) later, and the token expires meanwhile.
// Fails on 92b41a8; passes on 0befd59^.
func TestFirstRenewalDoesNotWaitForTheSecretCheck(t *testing.T) {
	t.Parallel()
	h := longCheckHarness(t)
	b := h.provisionedBucket(cosiapi.ProtocolAzure)
	ba := h.azureAccess("10s", b)
	first := sasExpiryOf(t, secret(t, ba, 0))
	// Renewed at four fifths of the lifetime (8 s); a few seconds' slack past the expiry.
	renewedBy(t, ba, first, first.Add(5*time.Second))
	deleteAccess(t, ba)
}

// TestRenewalsKeepComingWithoutSecretChecks: every renewal, not only the first, comes before the
// credentials expire when the Secret checks are rarer than the credentials' lifetime. check()
// computes the next renewal (refresh) but drops it: rotating = sooner(rotating, refreshing) is 0
// when no rotation is pending (sooner(0, x) == 0), so the next renewal waits for a Secret check.
// Fails on 92b41a8 and on 0befd59^ (where the check's RequeueAfter hid it behind the check
// interval); with checks once an interval, credentials shorter-lived than 5 intervals expire.
func TestRenewalsKeepComingWithoutSecretChecks(t *testing.T) {
	t.Parallel()
	h := longCheckHarness(t)
	b := h.provisionedBucket(cosiapi.ProtocolAzure)
	ba := h.azureAccess("10s", b)
	first := sasExpiryOf(t, secret(t, ba, 0))
	// The first renewal: nothing asked in this test but the grant's own requeue (see the test
	// above); allowed to be late here, so that this test shows the renewals after it.
	testenv.Eventually(t, func() error {
		if got := sasExpiryOf(t, secret(t, ba, 0)); !got.After(first) {
			return fmt.Errorf("not renewed yet (expires %s)", got.Format(time.RFC3339))
		}
		return nil
	})
	second := sasExpiryOf(t, secret(t, ba, 0))
	third := renewedBy(t, ba, second, second.Add(5*time.Second))
	renewedBy(t, ba, third, third.Add(5*time.Second))
	deleteAccess(t, ba)
}
