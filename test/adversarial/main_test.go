// Package adversarial runs the COSI Controller and the provisioner sidecar, on their generated
// roles, against a real kube-apiserver, and attacks them as a tenant would: a user who holds only a
// namespace Role on BucketClaims, BucketAccesses and Secrets edits annotations and finalizers,
// deletes Secrets, and deletes objects together and in odd orders; the memory driver fails calls on
// purpose. Every test asserts the end state: the backend holds nothing that should be gone, keys
// are revoked, Secrets are gone, nothing is stuck, and no access is granted more than it must be.
package adversarial

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/controller"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

const tenantNamespace = "tenant-a"

var (
	env *testenv.Env
	// tenant is a user who holds only a namespace Role: every verb on bucketclaims,
	// bucketaccesses and secrets in tenantNamespace, and nothing else.
	tenant client.Client
	// statusWriter is a tenant who may also write bucketaccesses/status (a loose RBAC setup).
	statusWriter  client.Client
	sidecarConfig *rest.Config
)

func TestMain(m *testing.M) {
	testenv.Run(m, func(ctx context.Context, e *testenv.Env) error {
		env = e
		if err := env.CreateNamespace(ctx, tenantNamespace); err != nil {
			return err
		}
		var err error
		if tenant, err = tenantClient(ctx, tenantNamespace, "tenant", false); err != nil {
			return err
		}
		if statusWriter, err = tenantClient(ctx, tenantNamespace, "status-writer", true); err != nil {
			return err
		}
		if sidecarConfig, err = env.ServiceAccountConfig(
			ctx,
			"config/rbac/sidecar/role.yaml",
			"cosi-system",
			"cosi-sidecar",
		); err != nil {
			return err
		}
		controllerCfg, err := env.ServiceAccountConfig(
			ctx,
			"config/rbac/controller/role.yaml",
			"cosi-system",
			"cosi-controller",
		)
		if err != nil {
			return err
		}
		controllerCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return slowHandOffs{rt} })
		env.Go(ctx, "controller", func(ctx context.Context) error {
			return controller.Run(
				ctx,
				controllerCfg,
				controller.Options{Workers: 4, MetricsAddress: "0", HealthAddress: "0"},
				logr.Discard(),
			)
		})
		return nil
	})
}

// tenantClient creates a user bound to a Role in namespace only, and a client acting as it.
func tenantClient(ctx context.Context, namespace, name string, writesStatus bool) (client.Client, error) {
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{cosiapi.GroupName}, Resources: []string{"bucketclaims", "bucketaccesses"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}},
	}
	if writesStatus {
		rules = append(
			rules,
			rbacv1.PolicyRule{
				APIGroups: []string{cosiapi.GroupName},
				Resources: []string{"bucketaccesses/status"},
				Verbs:     []string{"*"},
			},
		)
	}
	for _, o := range []client.Object{
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Rules: rules},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}},
		},
	} {
		if err := env.Client.Create(ctx, o); err != nil {
			return nil, err
		}
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: name}
	return client.New(cfg, client.Options{Scheme: env.Scheme})
}

// slowHandOffPrefix names the accesses whose hand-off reaches the API server late: the
// controller's status write that hands them off to the sidecar waits slowHandOff first, as on a
// slow network, so that tests can make other writes land between its decision and its write.
const (
	slowHandOffPrefix = "slow-handoff-"
	slowHandOff       = 300 * time.Millisecond
)

// slowHandOffs delays the controller's hand-off writes of the accesses named slowHandOffPrefix*.
type slowHandOffs struct{ next http.RoundTripper }

func (s slowHandOffs) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPatch && strings.Contains(req.URL.Path, "/bucketaccesses/"+slowHandOffPrefix) &&
		strings.HasSuffix(req.URL.Path, "/status") && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"driverName"`)) {
			time.Sleep(slowHandOff)
		}
	}
	rest, status := strings.CutSuffix(req.URL.Path, "/status")
	if req.Method == http.MethodPatch && status && strings.Contains(rest, "/bucketaccesses/") && req.Body != nil {
		if h, ok := heldHandOffs.Load(rest[strings.LastIndex(rest, "/")+1:]); ok {
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return nil, err
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
			if bytes.Contains(body, []byte(`"driverName"`)) {
				if err := h.(*heldHandOff).wait(req.Context()); err != nil {
					return nil, err
				}
			}
		}
	}
	return s.next.RoundTrip(req)
}

// heldHandOffs holds the controller's first hand-off write of an access (by name) until the test
// releases it: the controller has decided from a claim it read alive, and its write is on the way
// while the test does something else.
var heldHandOffs sync.Map

type heldHandOff struct {
	first, releaseOnce sync.Once
	arrived, released  chan struct{}
}

// holdHandOff holds the first hand-off write of the access name: arrived is closed when it waits,
// and it goes on Release (at the end of t at the latest). Later writes are not held.
func holdHandOff(t *testing.T, name string) *heldHandOff {
	h := &heldHandOff{arrived: make(chan struct{}), released: make(chan struct{})}
	heldHandOffs.Store(name, h)
	t.Cleanup(func() {
		heldHandOffs.Delete(name)
		h.Release()
	})
	return h
}

func (h *heldHandOff) Release() { h.releaseOnce.Do(func() { close(h.released) }) }

func (h *heldHandOff) wait(ctx context.Context) error {
	first := false
	h.first.Do(func() { first = true; close(h.arrived) })
	if !first {
		return nil
	}
	select {
	case <-h.released:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var driverCounter atomic.Int64

// system is one memory driver, with fault injection and call counts, and its sidecar; the
// controller is shared by all tests. Each test has a driver of its own, so that faults and counts
// are its own.
type system struct {
	t        *testing.T
	name     string
	endpoint string
	driver   *memory.Driver
	faults   *memory.Faults
	calls    *memory.Calls
	// stopSidecar stops the sidecar (as a crash would, between two reconciles);
	// startSidecar starts a new one.
	stopSidecar func()
}

func newSystem(t *testing.T, opts ...func(*memory.Config)) *system {
	t.Helper()
	s := &system{t: t, faults: &memory.Faults{}, calls: &memory.Calls{}}
	s.name = fmt.Sprintf("memory-%d.adversarial.cosi.io", driverCounter.Add(1))
	cfg := memory.Config{
		Name:      s.name,
		Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3, cosiproto.ObjectProtocol_AZURE},
	}
	for _, o := range opts {
		o(&cfg)
	}
	var err error
	if s.driver, err = memory.New(cfg); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "cosi-adversarial")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s.endpoint = "unix://" + filepath.Join(dir, "driver.sock")
	testenv.ServeDriver(t, s.endpoint, s.driver, s.calls.Interceptor(), s.faults.Interceptor())
	s.startSidecar()
	return s
}

// startSidecar runs a sidecar for the system's driver until stopSidecar or the test ends.
func (s *system) startSidecar() {
	s.stopSidecar = testenv.StartSidecar(s.t, sidecarConfig, testenv.SidecarOptions(s.endpoint))
}

var objCounter atomic.Int64

func uniqueName(prefix string) string { return fmt.Sprintf("%s-%d", prefix, objCounter.Add(1)) }

// Builders. Admin objects are created by env.Client, tenant objects by tenant.

func (s *system) bucketClass(policy cosiapi.DeletionPolicy) *cosiapi.BucketClass {
	s.t.Helper()
	c := objects.BucketClass(uniqueName("class"), s.name, policy)
	mustCreate(s.t, env.Client, c)
	return c
}

func (s *system) accessClass(mutate ...func(*cosiapi.BucketAccessClass)) *cosiapi.BucketAccessClass {
	s.t.Helper()
	c := objects.BucketAccessClass(uniqueName("accessclass"), s.name, mutate...)
	mustCreate(s.t, env.Client, c)
	return c
}

func newClaim(class string) *cosiapi.BucketClaim {
	return objects.BucketClaim(tenantNamespace, uniqueName("claim"), class, objects.S3)
}

func newAccess(class string, claims ...*cosiapi.BucketClaim) *cosiapi.BucketAccess {
	ba := objects.BucketAccess(tenantNamespace, uniqueName("access"), class)
	for _, c := range claims {
		objects.Grant(c.Name, uniqueName(c.Name+"-creds"), objects.ReadWrite)(ba)
	}
	return ba
}

// provisionedClaim creates a claim of a new class with the policy and waits until it is
// provisioned.
func (s *system) provisionedClaim(policy cosiapi.DeletionPolicy) *cosiapi.BucketClaim {
	s.t.Helper()
	c := newClaim(s.bucketClass(policy).Name)
	mustCreate(s.t, tenant, c)
	waitProvisioned(s.t, c)
	return c
}

// provisionedAccess creates an access to the claims and waits until it is provisioned.
func (s *system) provisionedAccess(class string, claims ...*cosiapi.BucketClaim) *cosiapi.BucketAccess {
	s.t.Helper()
	ba := newAccess(class, claims...)
	mustCreate(s.t, tenant, ba)
	waitProvisioned(s.t, ba)
	return ba
}

func mustCreate(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(t.Context(), obj); err != nil {
		t.Fatalf("creating %s: %v", obj.GetName(), err)
	}
}

func mustDelete(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Delete(t.Context(), obj); client.IgnoreNotFound(err) != nil {
		t.Fatalf("deleting %s: %v", obj.GetName(), err)
	}
}

// edit applies mutate to the live object as c, retrying conflicts.
func edit[T client.Object](t *testing.T, c client.Client, obj T, mutate func(T)) {
	t.Helper()
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate(obj)
		return c.Update(t.Context(), obj)
	})
}

func conditions(obj client.Object) []metav1.Condition {
	switch o := obj.(type) {
	case *cosiapi.BucketClaim:
		return o.Status.Conditions
	case *cosiapi.BucketAccess:
		return o.Status.Conditions
	case *cosiapi.Bucket:
		return o.Status.Conditions
	}
	return nil
}

func waitProvisioned(t *testing.T, obj client.Object) {
	t.Helper()
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(conditions(obj), cosiapi.ConditionProvisioned) {
			return fmt.Errorf("%s not provisioned: %+v", obj.GetName(), conditions(obj))
		}
		return nil
	})
}

// waitCondition waits until obj has condition typ with status s and reason.
func waitCondition(t *testing.T, obj client.Object, typ string, s metav1.ConditionStatus, reason string) {
	t.Helper()
	testenv.Condition(t, env, obj, conditions, typ, s, reason)
}

func boundBucket(t *testing.T, c *cosiapi.BucketClaim) *cosiapi.Bucket {
	t.Helper()
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
		t.Fatal(err)
	}
	b := &cosiapi.Bucket{}
	b.Name = c.Status.BoundBucketName
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
		t.Fatal(err)
	}
	return b
}

// secret returns the access Secret of ba's first BucketClaim as the workload sees it.
func secret(t *testing.T, ba *cosiapi.BucketAccess) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	s.Name, s.Namespace = ba.Spec.BucketClaims[0].AccessSecretName, ba.Namespace
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(s), s); err != nil {
		t.Fatal(err)
	}
	return s
}

func credentials(s *corev1.Secret) *cosiproto.CredentialInfo {
	return &cosiproto.CredentialInfo{S3: &cosiproto.S3Credentials{
		AccessKeyId:     string(s.Data[cosiapi.SecretKeyS3AccessKeyID]),
		AccessSecretKey: string(s.Data[cosiapi.SecretKeyS3SecretAccessKey]),
	}}
}

// waitEvent waits for an event with the reason about obj.
func waitEvent(t *testing.T, obj client.Object, reason string) { env.WaitForEvent(t, obj, reason+":") }

// waitGone waits until the backend no longer has the account or bucket.
func (s *system) waitRevoked(accountID string) {
	s.t.Helper()
	testenv.Eventually(s.t, func() error {
		for _, a := range s.driver.Backend().Accounts() {
			if a == accountID {
				return fmt.Errorf("account %s still exists in the backend", accountID)
			}
		}
		return nil
	})
}

func (s *system) waitBucketDeleted(bucketID string) {
	s.t.Helper()
	testenv.Eventually(s.t, func() error {
		if s.driver.Backend().BucketExists(bucketID) {
			return fmt.Errorf("bucket %s still exists in the backend", bucketID)
		}
		return nil
	})
}

// holds checks, for a while, that f keeps returning nil: a property that must hold over time.
func holds(t *testing.T, f func() error) {
	t.Helper()
	testenv.Never(t, 2*time.Second, f)
}
