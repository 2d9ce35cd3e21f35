package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/controller"
)

const (
	testNamespace = "apps"
	driverName    = "memory.controller-test.cosi.io"
)

var env *testenv.Env

// TestMain starts the API server and one controller for all tests. The controller connects as a
// ServiceAccount bound to the generated ClusterRole only, so a missing permission fails the tests.
func TestMain(m *testing.M) {
	testenv.Run(m, func(ctx context.Context, e *testenv.Env) error {
		env = e
		cfg, err := env.ServiceAccountConfig(ctx, "config/rbac/controller/role.yaml", "cosi-system", "cosi-controller")
		if err != nil {
			return err
		}
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return holdClaimDeletions{countLists{rt}} })
		if err := env.CreateNamespace(ctx, testNamespace); err != nil {
			return err
		}
		env.Go(ctx, "controller", func(ctx context.Context) error {
			return controller.Run(
				ctx,
				cfg,
				controller.Options{Workers: 4, MetricsAddress: "0", HealthAddress: "0"},
				logr.Discard(),
			)
		})
		return nil
	})
}

// uncachedAccessLists counts the controller's LISTs of BucketAccesses that the API server answers
// from etcd: neither a watch nor an informer's list (which carries a resourceVersion).
var uncachedAccessLists atomic.Int64

type countLists struct{ next http.RoundTripper }

func (c countLists) RoundTrip(req *http.Request) (*http.Response, error) {
	q := req.URL.Query()
	if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/bucketaccesses") && !q.Has("watch") &&
		q.Get("resourceVersion") == "" {
		uncachedAccessLists.Add(1)
	}
	return c.next.RoundTrip(req)
}

// heldDeletions names the BucketClaims whose DELETED watch events the controller's cache does not
// get until the test releases them: a cache that lags behind the API server, as under load.
var heldDeletions = &deletionHold{names: map[string][]func(){}}

type deletionHold struct {
	mu sync.Mutex
	// names maps each held claim's name to the writes of its held events to their watch streams.
	names map[string][]func()
}

// hold holds the DELETED events of the claim name until the end of t.
func (h *deletionHold) hold(t *testing.T, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.names[name] = nil
	t.Cleanup(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, write := range h.names[name] {
			go write() // blocks until the informer reads it, or its watch is closed
		}
		delete(h.names, name)
	})
}

// held reports whether the watch event raw is a held DELETED event; it is kept with write.
func (h *deletionHold) held(raw []byte, write func()) bool {
	var ev struct {
		Type   string `json:"type"`
		Object struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		} `json:"object"`
	}
	if err := json.Unmarshal(raw, &ev); err != nil || ev.Type != "DELETED" {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	writes, ok := h.names[ev.Object.Metadata.Name]
	if ok {
		h.names[ev.Object.Metadata.Name] = append(writes, write)
	}
	return ok
}

// holdClaimDeletions passes the controller's watches of BucketClaims through heldDeletions.
type holdClaimDeletions struct{ next http.RoundTripper }

func (h holdClaimDeletions) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := h.next.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || !strings.HasSuffix(req.URL.Path, "/bucketclaims") ||
		req.URL.Query().Get("watch") == "" || resp.StatusCode != http.StatusOK ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return resp, err
	}
	pr, pw := io.Pipe()
	upstream := resp.Body
	go func() {
		dec := json.NewDecoder(upstream)
		for {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				pw.CloseWithError(err)
				return
			}
			write := func() { _, _ = pw.Write(append(raw, '\n')) }
			if !heldDeletions.held(raw, write) {
				write()
			}
		}
	}()
	resp.Body = pipeBody{pr, upstream}
	return resp, nil
}

type pipeBody struct {
	*io.PipeReader
	upstream io.Closer
}

func (b pipeBody) Close() error {
	_ = b.PipeReader.Close()
	return b.upstream.Close()
}

var counter atomic.Int64

func uniqueName(prefix string) string { return fmt.Sprintf("%s-%d", prefix, counter.Add(1)) }

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Create(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, obj client.Object) {
	t.Helper()
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
}

func claimConditions(c *cosiapi.BucketClaim) []metav1.Condition   { return c.Status.Conditions }
func accessConditions(a *cosiapi.BucketAccess) []metav1.Condition { return a.Status.Conditions }

// Builders.

func bucketClass(policy cosiapi.DeletionPolicy) *cosiapi.BucketClass {
	return objects.BucketClass(
		uniqueName("class"),
		driverName,
		policy,
		objects.ClassParameters(map[string]string{"versioning": "true"}),
	)
}

func claim(class string, protocols ...cosiapi.Protocol) *cosiapi.BucketClaim {
	return objects.BucketClaim(testNamespace, uniqueName("claim"), class, objects.Protocols(protocols...))
}

func accessClass(mutate ...func(*cosiapi.BucketAccessClass)) *cosiapi.BucketAccessClass {
	return objects.BucketAccessClass(
		uniqueName("accessclass"),
		driverName,
		append(
			[]func(*cosiapi.BucketAccessClass){objects.AccessParameters(map[string]string{"policy": "strict"})},
			mutate...)...)
}

func access(class string, claims ...string) *cosiapi.BucketAccess {
	ba := objects.BucketAccess(testNamespace, uniqueName("access"), class)
	for _, c := range claims {
		objects.Grant(c, c+"-creds", objects.ReadWrite)(ba)
	}
	return ba
}

// boundBucket waits until the controller created and bound the claim's Bucket, and returns it.
func boundBucket(t *testing.T, c *cosiapi.BucketClaim) *cosiapi.Bucket {
	t.Helper()
	b := &cosiapi.Bucket{}
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		if c.Status.BoundBucketName == "" {
			return fmt.Errorf("claim %s not bound yet", c.Name)
		}
		b.Name = c.Status.BoundBucketName
		return env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b)
	})
	return b
}

// provisionAsSidecar does what the sidecar does once the driver created the bucket.
func provisionAsSidecar(t *testing.T, b *cosiapi.Bucket, s metav1.ConditionStatus, protocols ...cosiapi.Protocol) {
	t.Helper()
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		if len(b.Finalizers) == 0 {
			b.Finalizers = []string{cosiapi.FinalizerProtection}
			if err := env.Client.Update(t.Context(), b); err != nil {
				return err
			}
		}
		b.Status.BucketID = b.Name
		b.Status.Protocols = protocols
		reason := cosiapi.ReasonProvisioned
		if s == metav1.ConditionFalse {
			reason = cosiapi.ReasonProvisioningFailed
		}
		meta.SetStatusCondition(
			&b.Status.Conditions,
			metav1.Condition{Type: cosiapi.ConditionProvisioned, Status: s, Reason: reason, Message: "by the test"},
		)
		return env.Client.Status().Update(t.Context(), b)
	})
}

// revokeAsSidecar does what the sidecar does once it deleted a deleting access's Secrets and
// revoked it: the Revoked condition, then the cleanup annotation.
func revokeAsSidecar(t *testing.T, ba *cosiapi.BucketAccess) {
	t.Helper()
	// The access may go as soon as both are written: gone is done.
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return client.IgnoreNotFound(err)
		}
		meta.SetStatusCondition(
			&ba.Status.Conditions,
			metav1.Condition{Type: cosiapi.ConditionProvisioned, Status: metav1.ConditionFalse,
				Reason: cosiapi.ReasonRevoked, Message: "by the test"},
		)
		if err := env.Client.Status().Update(t.Context(), ba); err != nil {
			return client.IgnoreNotFound(err)
		}
		metav1.SetMetaDataAnnotation(&ba.ObjectMeta, cosiapi.AnnotationSidecarCleanupFinished, "true")
		return client.IgnoreNotFound(env.Client.Update(t.Context(), ba))
	})
}

// finishAsSidecar does what the sidecar does when a deleting Bucket may go: remove its finalizer.
func finishAsSidecar(t *testing.T, obj client.Object) {
	t.Helper()
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return client.IgnoreNotFound(err)
		}
		obj.SetFinalizers(nil)
		return env.Client.Update(t.Context(), obj)
	})
}
