// Package admission tests the ValidatingAdmissionPolicies of config/admission, installed from
// those files into a real kube-apiserver, against a tenant who holds only a namespace Role: what
// the policies refuse, with messages naming the field, and what tenants may still do.
package admission

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/yaml"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/testenv"
)

const (
	tenantNamespace     = "tenant-a"
	restrictedNamespace = "tenant-restricted"
)

var (
	env *testenv.Env
	// tenant holds every verb on claims, accesses and Secrets in both tenant namespaces, and
	// also on the status of claims and accesses there (a Role written too broadly).
	tenant client.Client
	// component is a ServiceAccount bound to the sidecar's generated roles, as COSI runs.
	component client.Client
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	var err error
	if env, err = testenv.Start(); err != nil {
		return 1, err
	}
	defer env.Stop()
	ctx := context.Background()
	if err := installPolicies(ctx); err != nil {
		return 1, err
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: restrictedNamespace, Annotations: map[string]string{
		cosiapi.AnnotationAllowedBucketClasses:       "standard, archive",
		cosiapi.AnnotationAllowedBucketAccessClasses: "read-only",
	}}}); err != nil {
		return 1, err
	}
	for _, ns := range []string{tenantNamespace, restrictedNamespace} {
		if err := env.CreateNamespace(ctx, ns); err != nil {
			return 1, err
		}
		if err := bindTenant(ctx, ns); err != nil {
			return 1, err
		}
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "tenant"}
	if tenant, err = client.New(cfg, client.Options{Scheme: env.Scheme}); err != nil {
		return 1, err
	}
	componentCfg, err := env.ServiceAccountConfig(ctx, "config/rbac/sidecar/role.yaml", "cosi-system", "cosi-sidecar")
	if err != nil {
		return 1, err
	}
	if component, err = client.New(componentCfg, client.Options{Scheme: env.Scheme}); err != nil {
		return 1, err
	}
	return m.Run(), nil
}

// installPolicies creates every policy and binding of config/admission, from the files.
func installPolicies(ctx context.Context) error {
	files, err := filepath.Glob(filepath.Join(env.RepoRoot, "config", "admission", "*.yaml"))
	if err != nil {
		return err
	}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			var kind struct{ Kind string }
			if err := yaml.Unmarshal([]byte(doc), &kind); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			var obj client.Object
			switch kind.Kind {
			case "ValidatingAdmissionPolicy":
				obj = &admissionv1.ValidatingAdmissionPolicy{}
			case "ValidatingAdmissionPolicyBinding":
				obj = &admissionv1.ValidatingAdmissionPolicyBinding{}
			default:
				return fmt.Errorf("%s: unexpected kind %q", f, kind.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if err := env.Client.Create(ctx, obj); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
		}
	}
	return nil
}

func bindTenant(ctx context.Context, ns string) error {
	for _, o := range []client.Object{
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{cosiapi.GroupName}, Resources: []string{"bucketclaims", "bucketaccesses", "bucketclaims/status", "bucketaccesses/status"}, Verbs: []string{"*"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}},
		}},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "tenant"}},
		},
	} {
		if err := env.Client.Create(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

var counter atomic.Int64

func uniqueName(prefix string) string { return fmt.Sprintf("%s-%d", prefix, counter.Add(1)) }

func newClaim(ns, class string) *cosiapi.BucketClaim {
	return &cosiapi.BucketClaim{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("claim"), Namespace: ns},
		Spec: cosiapi.BucketClaimSpec{BucketClassName: class}}
}

func newAccess(ns, class string) *cosiapi.BucketAccess {
	return &cosiapi.BucketAccess{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("access"), Namespace: ns},
		Spec: cosiapi.BucketAccessSpec{BucketAccessClassName: class, Protocol: cosiapi.ProtocolS3, BucketClaims: []cosiapi.BucketClaimAccess{{
			BucketClaimName: "data", AccessSecretName: uniqueName("creds"), AccessModes: cosiapi.BucketAccessModes{ObjectData: cosiapi.BucketAccessModeReadOnly},
		}}}}
}

// update applies mutate to a fresh copy of obj as c, and returns the API server's answer.
func update[T client.Object](t *testing.T, c client.Client, obj T, mutate func(T)) error {
	t.Helper()
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	mutate(obj)
	return c.Update(t.Context(), obj)
}

// refused checks that err is the policy's refusal and that its message names want.
func refused(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: allowed, want refused", what)
		return
	}
	if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
		t.Errorf("%s: %v, want a policy refusal", what, err)
		return
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %q does not name %q", what, err.Error(), want)
	}
}

func allowed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v, want allowed", what, err)
	}
}

// waitForPolicies waits until the policies are in force: a policy is effective a moment after it
// is created. It probes with a request the policy refuses.
func waitForPolicies(t *testing.T) {
	t.Helper()
	probe := newClaim(tenantNamespace, "standard")
	controllerutil.AddFinalizer(probe, cosiapi.FinalizerProtection)
	if err := env.Client.Create(t.Context(), probe); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		err := update(t, tenant, probe, func(c *cosiapi.BucketClaim) { c.Finalizers = nil })
		if err == nil {
			return fmt.Errorf("the policies are not in force yet")
		}
		if apierrors.IsConflict(err) {
			return err
		}
		return nil
	})
	testenv.Eventually(t, func() error {
		c := newClaim(restrictedNamespace, "premium")
		if err := tenant.Create(t.Context(), c); err == nil {
			_ = env.Client.Delete(t.Context(), c)
			return fmt.Errorf("the class policy is not in force yet")
		}
		return nil
	})
}
