package sidecar_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

// requestLog records the API requests a sidecar makes: verb, path (no query) and content type.
type requestLog struct {
	mu   sync.Mutex
	reqs []loggedRequest
}

type loggedRequest struct{ verb, path, contentType string }

func (r loggedRequest) String() string {
	return strings.TrimSpace(r.verb + " " + r.path + " " + r.contentType)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// config returns cfg with every request recorded in the log.
func (l *requestLog) config(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			l.mu.Lock()
			l.reqs = append(l.reqs, loggedRequest{r.Method, r.URL.Path, r.Header.Get("Content-Type")})
			l.mu.Unlock()
			return next.RoundTrip(r)
		})
	})
	return c
}

// count returns how many requests had the verb and the path, and the content type unless it is
// empty.
func (l *requestLog) count(verb, path, contentType string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.reqs {
		if r.verb == verb && r.path == path && (contentType == "" || r.contentType == contentType) {
			n++
		}
	}
	return n
}

// dump logs the requests.
func (l *requestLog) dump(t *testing.T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := make([]string, len(l.reqs))
	for i, r := range l.reqs {
		lines[i] = r.String()
	}
	t.Logf("requests:\n%s", strings.Join(lines, "\n"))
}

// grantController is the GrantReconciler's name in metrics.
const grantController = "sidecar-grant"

// grantMetric sums the values of a controller-runtime metric for the GrantReconciler, over the
// process (every sidecar of the test binary); label names the controller in the metric.
func grantMetric(t *testing.T, metric, label string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == grantController {
					sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return sum
}

// TestGrantRequests counts the API requests and reconciles of one grant that issue 21 took away;
// each is one that the grant's guarantees do not need (the tests of those guarantees are named in
// the rows). Not parallel: the reconcile counts are the process's, by controller name, and only
// this test's sidecar runs while it does.
func TestGrantRequests(t *testing.T) {
	var log requestLog
	h := newHarnessWith(t, memory.Config{}, log.config(sidecarConfig))
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	before := grantMetric(t, "controller_runtime_reconcile_total", "controller")
	ba := h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
	provisioned(t, ba, accessConditions)
	// The grant reconciler reconciles the record's creation; then nothing is left in its queue.
	testenv.Eventually(t, func() error {
		done := grantMetric(t, "controller_runtime_reconcile_total", "controller") - before
		depth := grantMetric(t, "workqueue_depth", "name")
		active := grantMetric(t, "controller_runtime_active_workers", "controller")
		if done < 1 || depth > 0 || active > 0 {
			return fmt.Errorf("grant reconciler: %v reconciles, %v queued, %v running", done, depth, active)
		}
		return nil
	})
	grantReconciles := grantMetric(t, "controller_runtime_reconcile_total", "controller") - before

	record := "/api/v1/namespaces/" + sidecarNamespace + "/configmaps/cosi-grant-" + string(ba.UID)
	access := "/apis/" + cosiapi.SchemeGroupVersion.String() + "/namespaces/" + ba.Namespace + "/bucketaccesses/" + ba.Name
	for _, c := range []struct {
		what string
		got  float64
		want float64
	}{
		// The grant reconciler decides "the access exists" from the cache, and reads the record
		// uncached only when the access is gone (TestAccessDeletedWithoutFinalizerIsRevoked,
		// TestAttackAccessVanishesDuringSlowGrant in test/adversarial). Writing the credential
		// updates the copy the record's creation returned, locked to it.
		{"uncached GETs of the grant record", float64(log.count(http.MethodGet, record, "")), 0},
		// No live read before a first grant: phase 1's status write, locked to the cached copy's
		// version, fails on a stale copy as the read would have (TestFirstGrantOnAStaleCopy);
		// the result is written on the copy phase 1 returned, read again only on a conflict
		// (TestResultIsWrittenOverAConcurrentWrite).
		{"uncached GETs of the access", float64(log.count(http.MethodGet, access, "")), 0},
		// The record's creation; not the access's finalizer, which cannot orphan a grant.
		{"grant reconciles", grantReconciles, 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}

	// Revoking: the Secret's finalizer goes with the JSON patch that finds it the access's (the
	// Secret checks' patches are JSON patches too), not with a merge patch after it
	// (TestAttackTenantFinalizerOnDeletedSecret, TestAttackRelabeledSecretLeftBehind in
	// test/adversarial: Secrets with other finalizers, or without the label, still go).
	deleteAccess(t, ba)
	secret := "/api/v1/namespaces/" + ba.Namespace + "/secrets/" + ba.Spec.BucketClaims[0].AccessSecretName
	if n := log.count(http.MethodPatch, secret, string(types.MergePatchType)); n != 0 {
		t.Errorf("merge patches of the Secret: %d, want 0", n)
	}
	if n := log.count(http.MethodDelete, secret, ""); n != 1 {
		t.Errorf("deletions of the Secret: %d, want 1", n)
	}
	env.Gone(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Namespace: ba.Namespace, Name: ba.Spec.BucketClaims[0].AccessSecretName,
	}})
	if t.Failed() {
		log.dump(t)
	}
}

// TestResultIsWrittenOverAConcurrentWrite: the grant's result is patched on the copy of the access
// that phase 1 returned, locked to its version, so a write that lands during the grant (here a
// condition of someone else's) makes that patch conflict; the result is then written on a fresh
// copy, the other write kept, and the driver not asked again.
func TestResultIsWrittenOverAConcurrentWrite(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{})
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	h.faults.Pause("DriverGrantBucketAccess", false)
	ba := h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
	if _, ok := h.faults.WaitPaused(t.Context()); !ok {
		t.Fatal("no grant held")
	}
	const otherCondition = "ExampleChecked"
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return err
		}
		meta.SetStatusCondition(&ba.Status.Conditions, metav1.Condition{
			Type: otherCondition, Status: metav1.ConditionTrue, Reason: "Example", Message: "set during the grant",
		})
		return env.Client.Status().Update(t.Context(), ba)
	})
	h.faults.Release()
	provisioned(t, ba, accessConditions)
	if !meta.IsStatusConditionTrue(ba.Status.Conditions, otherCondition) {
		t.Errorf("the condition written during the grant is gone: %+v", ba.Status.Conditions)
	}
	if n := h.calls.Count("DriverGrantBucketAccess"); n != 1 {
		t.Errorf("DriverGrantBucketAccess called %d times, want 1", n)
	}
}

// TestCredentialIsRecordedOverAConcurrentWrite: the credential a grant wrote into the Secrets is
// recorded on the copy of the grant record that its creation returned, locked to its version, so
// a write to the record that lands during the grant (here a label) makes that update conflict;
// the record is then read again and updated, the other write kept.
func TestCredentialIsRecordedOverAConcurrentWrite(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{})
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	h.faults.Pause("DriverGrantBucketAccess", false)
	ba := h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
	if _, ok := h.faults.WaitPaused(t.Context()); !ok {
		t.Fatal("no grant held")
	}
	record := &corev1.ConfigMap{}
	key := types.NamespacedName{Namespace: sidecarNamespace, Name: "cosi-grant-" + string(ba.UID)}
	const label = "example.com/checked"
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), key, record); err != nil {
			return err
		}
		record.Labels[label] = "true"
		return env.Client.Update(t.Context(), record)
	})
	h.faults.Release()
	provisioned(t, ba, accessConditions)
	want := secret(t, ba, 0).Annotations[cosiapi.AnnotationCredentialID]
	if want == "" {
		t.Fatal("the Secret names no credential")
	}
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), key, record); err != nil {
			return err
		}
		var g struct {
			CredentialID string `json:"credentialID"`
		}
		if err := json.Unmarshal([]byte(record.Data["grant.json"]), &g); err != nil {
			return err
		}
		if g.CredentialID != want {
			return fmt.Errorf("the record names credential %q, the Secret %q", g.CredentialID, want)
		}
		return nil
	})
	if record.Labels[label] != "true" {
		t.Errorf("the label written during the grant is gone: %v", record.Labels)
	}
}

// TestRevokeReleasesASecretWithAnotherFinalizer: a Secret of the access that someone else holds
// with a finalizer of their own is released all the same when the access goes (COSI's finalizer
// removed, the Secret deleted), and goes once the other finalizer does; one without COSI's
// finalizer is deleted too.
func TestRevokeReleasesASecretWithAnotherFinalizer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{})
	b1, b2 := h.provisionedBucket(cosiapi.ProtocolS3), h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b1, b2), accessConditions)
	const hold = "example.com/hold"
	held, bare := secret(t, ba, 0), secret(t, ba, 1)
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(held), held); err != nil {
			return err
		}
		controllerutil.AddFinalizer(held, hold)
		return env.Client.Update(t.Context(), held)
	})
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(bare), bare); err != nil {
			return err
		}
		controllerutil.RemoveFinalizer(bare, cosiapi.FinalizerProtection)
		return env.Client.Update(t.Context(), bare)
	})
	deleteAccess(t, ba)
	env.Gone(t, bare)
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(held), held); err != nil {
		t.Fatal(err)
	}
	if held.DeletionTimestamp == nil || !slices.Equal(held.Finalizers, []string{hold}) {
		t.Fatalf("Secret %s: deletion %v, finalizers %v; want deleted, held by %s only",
			held.Name, held.DeletionTimestamp, held.Finalizers, hold)
	}
	controllerutil.RemoveFinalizer(held, hold)
	if err := env.Client.Update(t.Context(), held); err != nil {
		t.Fatal(err)
	}
	env.Gone(t, held)
}
