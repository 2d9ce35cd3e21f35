package sidecar_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// waitCondition waits until obj's condition typ has the status and reason, and returns its message.
func waitCondition[T client.Object](
	t *testing.T, obj T, conds func(T) []metav1.Condition, typ string, st metav1.ConditionStatus, reason string,
) string {
	t.Helper()
	var msg string
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		c := meta.FindStatusCondition(conds(obj), typ)
		if c == nil || c.Status != st || c.Reason != reason {
			return fmt.Errorf("condition %s: %+v, want %s %s", typ, c, st, reason)
		}
		msg = c.Message
		return nil
	})
	return msg
}

// TestPeriodicRotation: the class parameter objectstorage.k8s.io/rotation-period rotates an
// access's credentials on its own, again and again, with no annotation: each new key reaches the
// Secrets, and the one before is retired after the grace period. The parameter never reaches the
// driver (the memory driver refuses unknown keys, so the grant would fail), and the Secret check
// is an hour away: the rotations come from requeues at their due time.
func TestPeriodicRotation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) {
		o.RotationGracePeriod = time.Second
		o.SecretCheckInterval = time.Hour
	})

	b := h.provisionedBucket(cosiapi.ProtocolS3)
	params := map[string]string{memory.ParamSASExpiry: "1h", cosiapi.ParameterRotationPeriod: "3s"}
	ba := provisioned(t, h.accessWith(params, cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b), accessConditions)
	backend := h.driver.Backend()
	first := secretCredentials(t, ba, nil)
	second := secretCredentials(t, ba, first)
	if !backend.Allowed(second, b.Status.BucketID, memory.ObjectData, true) {
		t.Error("the rotated key does not work")
	}
	testenv.Eventually(t, func() error {
		if backend.Allowed(first, b.Status.BucketID, memory.ObjectData, false) {
			return fmt.Errorf("the first key still works")
		}
		return nil
	})
	third := secretCredentials(t, ba, second)
	if !backend.Allowed(third, b.Status.BucketID, memory.ObjectData, true) {
		t.Error("the key of the second rotation does not work")
	}
	if n := h.calls.Count("DriverRotateBucketAccessCredentials"); n < 2 {
		t.Errorf("%d DriverRotateBucketAccessCredentials calls, want at least 2", n)
	}
	if n := h.calls.Count("DriverGrantBucketAccess"); n != 1 {
		t.Errorf("%d DriverGrantBucketAccess calls, want 1: a rotation is not a grant", n)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
		t.Fatal(err)
	}
	if _, ok := ba.Annotations[cosiapi.AnnotationRotateCredentials]; ok {
		t.Error("the sidecar set the rotate-credentials annotation")
	}
	deleteAccess(t, ba)
	if accounts := backend.Accounts(); len(accounts) != 0 {
		t.Errorf("accounts left after the access was deleted: %v", accounts)
	}
}

// countingConfig is cfg with a counter of the requests made with it.
func countingConfig(cfg *rest.Config) (*rest.Config, *atomic.Int64) {
	n := &atomic.Int64{}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			n.Add(1)
			return rt.RoundTrip(req)
		})
	})
	return cfg, n
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestRotationPeriodParameter: COSI's own class parameters are parsed strictly. An invalid
// rotation period, or an unknown objectstorage.k8s.io/ key, stops the access before the driver is
// asked anything, with a condition naming the key, and is not retried; a Bucket whose class
// carries a COSI key is refused the same way. A valid period that is not due costs no API request.
func TestRotationPeriodParameter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
	cfg, requests := countingConfig(sidecarConfig)
	h.restartSidecar(cfg, func(o *sidecar.Options) {
		o.SecretCheckInterval = time.Hour
	})
	b := h.provisionedBucket(cosiapi.ProtocolS3)

	for _, tc := range []struct{ key, value, want string }{
		{cosiapi.ParameterRotationPeriod, "soon", "invalid duration"},
		{cosiapi.ParameterRotationPeriod, "-1h", "greater than zero"},
		{cosiapi.ParameterRotationPeriod, "0s", "greater than zero"},
		{cosiapi.GroupName + "/rotation-perod", "1h", "unknown"},
	} {
		ba := h.accessWith(map[string]string{tc.key: tc.value}, cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
		msg := waitCondition(t, ba, accessConditions, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse,
			cosiapi.ReasonInvalidParameter)
		if !strings.Contains(msg, "parameters["+tc.key+"]") || !strings.Contains(msg, tc.want) {
			t.Errorf("%s=%q: message %q does not name the parameter and say %q", tc.key, tc.value, msg, tc.want)
		}
	}
	if n := h.calls.Count("DriverGenerateBucketAccessId") + h.calls.Count("DriverGrantBucketAccess"); n != 0 {
		t.Errorf("%d access calls to the driver for accesses with invalid parameters, want 0", n)
	}

	bad := h.bucket(cosiapi.DeletionPolicyDelete, cosiapi.ProtocolS3)
	bad.Spec.Parameters = map[string]string{cosiapi.ParameterRotationPeriod: "1h"}
	h.create(bad)
	msg := waitCondition(t, bad, bucketConditions, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse,
		cosiapi.ReasonInvalidParameter)
	if !strings.Contains(msg, "parameters["+cosiapi.ParameterRotationPeriod+"]") {
		t.Errorf("Bucket condition %q does not name the parameter", msg)
	}
	if n := h.calls.Count("DriverGenerateBucketId"); n != 1 {
		t.Errorf("%d DriverGenerateBucketId calls, want 1 (the valid Bucket's)", n)
	}

	// A period that is not due: once the access is provisioned, the sidecar sends nothing.
	params := map[string]string{cosiapi.ParameterRotationPeriod: "1h"}
	ba := provisioned(t, h.accessWith(params, cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b), accessConditions)
	// Settled: what the grant started (its events, sent in the background) is done.
	var settled int64
	testenv.Eventually(t, func() error {
		settled = requests.Load()
		time.Sleep(time.Second)
		if n := requests.Load() - settled; n != 0 {
			return fmt.Errorf("%d API requests in the last second", n)
		}
		return nil
	})
	testenv.Never(t, 3*time.Second, func() error {
		if n := requests.Load() - settled; n != 0 {
			return fmt.Errorf("%d API requests while no rotation was due", n)
		}
		return nil
	})
	if n := h.calls.Count("DriverGenerateBucketAccessId"); n != 1 {
		t.Errorf("%d DriverGenerateBucketAccessId calls, want 1: invalid accesses were retried", n)
	}
	deleteAccess(t, ba)
}
