// Package admission tests the ValidatingAdmissionPolicies of config/admission, installed from
// those files into a real kube-apiserver: what they refuse to a tenant who holds only a namespace
// Role, with messages naming the field; what they still allow tenants; that COSI's components, on
// their generated roles, are never refused what they do; and what the sidecar's own token may not
// do with Secrets (cosi-sidecar-secrets).
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
	"sigs.k8s.io/yaml"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
)

const (
	tenantNamespace     = "tenant-a"
	restrictedNamespace = "tenant-restricted"
)

// An actor is a principal the tests send requests as.
type actor struct {
	name string
	client.Client
}

var (
	env *testenv.Env

	// tenant holds every verb on bucketclaims, bucketaccesses and secrets in the tenant
	// namespaces, and nothing else: a namespace user as KEP-1979 expects them.
	tenant actor
	// broadTenant's Role is written too broadly: every resource of objectstorage.k8s.io in its
	// namespaces, status subresources included.
	broadTenant actor
	// bucketAdmin may do everything with Buckets (import, edit, delete) and nothing else: an admin
	// who is not COSI.
	bucketAdmin actor
	// controller and sidecar are ServiceAccounts bound to the generated roles of config/rbac, as
	// COSI runs.
	controller, sidecar actor
	// admin is the test's cluster admin (system:masters, which no authorizer is asked about).
	admin actor
	// clusterAdmin is bound to the cluster-admin ClusterRole ("*" on everything), as admins usually
	// are: RBAC answers for it.
	clusterAdmin actor
	// namespacedSidecar holds the sidecar's ClusterRole through a RoleBinding in tenantNamespace
	// only: a sidecar confined to a namespace.
	namespacedSidecar actor
)

func TestMain(m *testing.M) {
	testenv.Run(m, func(ctx context.Context, e *testenv.Env) error {
		env = e
		return setup(ctx)
	})
}

// setup installs the policies and creates the namespaces and the actors.
func setup(ctx context.Context) error {
	var err error
	admin = actor{"admin", env.Client}
	if err := installPolicies(ctx); err != nil {
		return err
	}
	if err := env.Client.Create(
		ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: restrictedNamespace, Annotations: map[string]string{
			cosiapi.AnnotationAllowedBucketClasses:       "standard, archive",
			cosiapi.AnnotationAllowedBucketAccessClasses: "read-only",
		}}},
	); err != nil {
		return err
	}
	if err := env.CreateNamespace(ctx, tenantNamespace); err != nil {
		return err
	}
	for _, ns := range []string{tenantNamespace, restrictedNamespace} {
		if err := bindTenants(ctx, ns); err != nil {
			return err
		}
	}
	if err := bindBucketAdmin(ctx); err != nil {
		return err
	}
	if tenant, err = impersonate("tenant"); err != nil {
		return err
	}
	if broadTenant, err = impersonate("broad-tenant"); err != nil {
		return err
	}
	if bucketAdmin, err = impersonate("bucket-admin"); err != nil {
		return err
	}
	if controller, err = component(ctx, "controller"); err != nil {
		return err
	}
	if sidecar, err = component(ctx, "sidecar"); err != nil {
		return err
	}
	return bindAdminAndNamespacedSidecar(ctx)
}

// bindAdminAndNamespacedSidecar binds clusterAdmin and namespacedSidecar (after the sidecar's
// generated ClusterRole is installed).
func bindAdminAndNamespacedSidecar(ctx context.Context) error {
	user := func(name string) []rbacv1.Subject {
		return []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}}
	}
	if err := create(ctx,
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "cluster-admin-user"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   user("cluster-admin-user"),
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "namespaced-sidecar", Namespace: tenantNamespace},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cosi-sidecar"},
			Subjects:   user("namespaced-sidecar"),
		},
	); err != nil {
		return err
	}
	var err error
	if clusterAdmin, err = impersonate("cluster-admin-user"); err != nil {
		return err
	}
	namespacedSidecar, err = impersonate("namespaced-sidecar")
	return err
}

// installPolicies creates every policy and binding that config/admission/kustomization.yaml lists,
// from the files: what is tested is what is shipped.
func installPolicies(ctx context.Context) error {
	dir := filepath.Join(env.RepoRoot, "config", "admission")
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return err
	}
	var kustomization struct{ Resources []string }
	if err := yaml.Unmarshal(data, &kustomization); err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	if len(files) != len(kustomization.Resources)+1 {
		return fmt.Errorf(
			"%s lists %v, the directory holds %v: a policy file would not be installed",
			dir,
			kustomization.Resources,
			files,
		)
	}
	for _, name := range kustomization.Resources {
		f := filepath.Join(dir, name)
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

// bindTenants gives tenant and broadTenant their Roles in ns.
func bindTenants(ctx context.Context, ns string) error {
	roles := map[string][]rbacv1.PolicyRule{
		"tenant": {
			{
				APIGroups: []string{cosiapi.GroupName},
				Resources: []string{"bucketclaims", "bucketaccesses"},
				Verbs:     []string{"*"},
			},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}},
		},
		"broad-tenant": {
			{APIGroups: []string{cosiapi.GroupName}, Resources: []string{"*"}, Verbs: []string{"*"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}},
		},
	}
	for user, rules := range roles {
		if err := create(ctx,
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns}, Rules: rules},
			&rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
			}); err != nil {
			return err
		}
	}
	return nil
}

func bindBucketAdmin(ctx context.Context) error {
	return create(ctx,
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "bucket-admin"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{cosiapi.GroupName}, Resources: []string{"buckets"}, Verbs: []string{"*"}},
		}},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "bucket-admin"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "bucket-admin"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "bucket-admin"}},
		})
}

func create(ctx context.Context, objs ...client.Object) error {
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

func impersonate(user string) (actor, error) {
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	return actor{user, c}, err
}

// component returns a client for the ServiceAccount of controller or sidecar, bound to the roles
// generated into config/rbac, authenticated with the ServiceAccount's own token.
func component(ctx context.Context, name string) (actor, error) {
	cfg, err := env.ServiceAccountTokenConfig(ctx, "config/rbac/"+name+"/role.yaml", "cosi-system", "cosi-"+name)
	if err != nil {
		return actor{}, err
	}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	return actor{name, c}, err
}

var counter atomic.Int64

func uniqueName(prefix string) string { return fmt.Sprintf("%s-%d", prefix, counter.Add(1)) }

func newClaim(ns, class string) *cosiapi.BucketClaim {
	return objects.BucketClaim(ns, uniqueName("claim"), class)
}

func newStaticClaim(ns, bucket string) *cosiapi.BucketClaim {
	c := objects.BucketClaim(ns, uniqueName("claim"), "")
	c.Spec.ExistingBucketName = bucket
	return c
}

func newAccess(ns, class string) *cosiapi.BucketAccess {
	return objects.BucketAccess(
		ns,
		uniqueName("access"),
		class,
		objects.Grant("data", uniqueName("creds"), objects.ReadOnly),
	)
}

func newBucket() *cosiapi.Bucket {
	return objects.Bucket(
		uniqueName("bucket"),
		"s3.example.com",
		cosiapi.DeletionPolicyDelete,
		objects.ClaimedBy(tenantNamespace, "data", ""),
	)
}

// newSecret is an ordinary Secret of the tenant; cosiSecret makes it one the sidecar wrote.
func newSecret() *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("creds"), Namespace: tenantNamespace},
		StringData: map[string]string{cosiapi.SecretKeyProtocol: "S3"}}
}

func cosiSecret(s *corev1.Secret) {
	metav1.SetMetaDataLabel(&s.ObjectMeta, cosiapi.LabelBucketAccessUID, testUID)
	s.Finalizers = append(s.Finalizers, cosiapi.FinalizerProtection)
}

// A createCase is one create request and the answer the policies must give.
type createCase[T client.Object] struct {
	name   string
	as     actor
	mutate func(T)
	// refused is what the refusal message must say, naming the field; empty: allowed.
	refused string
}

func runCreates[T client.Object](t *testing.T, build func() T, cases []createCase[T]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obj := build()
			if tc.mutate != nil {
				tc.mutate(obj)
			}
			answer(t, tc.as.Create(t.Context(), obj), tc.refused)
		})
	}
}

// An updateCase is one update (or delete) request on an object the admin created, and the answer
// the policies must give.
type updateCase[T client.Object] struct {
	name string
	// before shapes the object the admin creates, e.g. as COSI leaves it.
	before func(T)
	// deleting: the admin deletes the object first, so that the request finds it Terminating.
	deleting bool
	as       actor
	// update changes the object; nil means that the request deletes it.
	update func(T)
	// refused is what the refusal message must say, naming the field; empty: allowed.
	refused string
}

func runUpdates[T client.Object](t *testing.T, build func() T, cases []updateCase[T]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obj := build()
			if tc.before != nil {
				tc.before(obj)
			}
			if err := env.Client.Create(t.Context(), obj); err != nil {
				t.Fatal(err)
			}
			if tc.deleting {
				if err := env.Client.Delete(t.Context(), obj); err != nil {
					t.Fatal(err)
				}
			}
			if tc.update == nil {
				answer(t, tc.as.Delete(t.Context(), obj), tc.refused)
				return
			}
			answer(t, update(t, tc.as, obj, tc.update), tc.refused)
		})
	}
}

// update applies mutate to a fresh copy of obj as c, and returns the API server's answer.
func update[T client.Object](t *testing.T, c actor, obj T, mutate func(T)) error {
	t.Helper()
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	mutate(obj)
	return c.Update(t.Context(), obj)
}

// answer checks err against the expected answer: nil when refused is empty, else a refusal by an
// admission policy whose message contains refused.
func answer(t *testing.T, err error, refused string) {
	t.Helper()
	switch {
	case refused == "" && err != nil:
		t.Errorf("refused: %v; want allowed", err)
	case refused == "":
	case err == nil:
		t.Errorf("allowed; want refused with %q", refused)
	case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy"):
		t.Errorf("%v; want a refusal by an admission policy", err)
	case !strings.Contains(err.Error(), refused):
		t.Errorf("refusal %q does not say %q", err.Error(), refused)
	}
}

// Refusal messages, as the policies write them.
const (
	finalizerReserved = "metadata.finalizers: " + cosiapi.FinalizerProtection +
		" is reserved to COSI"
	claimAnnotationReserved = "metadata.annotations[" + cosiapi.AnnotationHasBucketAccessReferences +
		"]: reserved to COSI"
	accessAnnotationReserved = "metadata.annotations[" + cosiapi.AnnotationSidecarCleanupFinished +
		"]: reserved to COSI"
	rotationReserved = "metadata.annotations[" + cosiapi.AnnotationRotateCredentials +
		"]: reserved to admins"
	refreshReserved = "metadata.annotations[" + cosiapi.AnnotationRefreshSecret +
		"]: reserved to admins"
	bucketAnnotationReserved = "metadata.annotations[" + cosiapi.AnnotationBucketClaimBeingDeleted +
		"]: reserved to the COSI controller"
	grantAnnotationReserved = "metadata.annotations[" + cosiapi.GroupName + "/grant-*]: reserved to grants " +
		"an earlier version"
	secretFinalizerReserved = "metadata.finalizers: " + cosiapi.FinalizerProtection +
		" on a BucketAccess Secret is reserved to COSI"
	secretLabelReserved = "metadata.labels[" + cosiapi.LabelBucketAccessUID +
		"]: reserved to COSI"
)

// waitForPolicies waits until every policy is in force, and every actor's role too: both take a
// moment after they are created. It probes each policy with a dry-run request that the policy
// refuses (dry-run requests pass admission, and change nothing), and each component with a read.
func waitForPolicies(t *testing.T) {
	t.Helper()
	dryRun := &client.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	probes := []struct {
		name    string
		request func() error
		refused string
	}{
		{"cosi-reserved-metadata", func() error {
			c := newClaim(tenantNamespace, "standard")
			c.Finalizers = []string{cosiapi.FinalizerProtection}
			return tenant.Create(t.Context(), c, dryRun)
		}, finalizerReserved},
		{"cosi-reserved-bucket-metadata", func() error {
			b := newBucket()
			metav1.SetMetaDataAnnotation(&b.ObjectMeta, cosiapi.AnnotationBucketClaimBeingDeleted, "true")
			return bucketAdmin.Create(t.Context(), b, dryRun)
		}, bucketAnnotationReserved},
		{"cosi-reserved-secrets", func() error {
			s := newSecret()
			cosiSecret(s)
			return tenant.Create(t.Context(), s, dryRun)
		}, secretLabelReserved},
		{"cosi-reserved-status", func() error {
			ba := statusProbe(t)
			return broadTenant.Status().Update(t.Context(), ba, client.DryRunAll)
		}, "status: the status of bucketaccesses is reserved to COSI"},
		{"cosi-sidecar-secrets", func() error {
			return sidecar.Create(t.Context(), newSecret(), dryRun)
		}, sidecarLabel},
		{"cosi-allowed-classes", func() error {
			return tenant.Create(t.Context(), newClaim(restrictedNamespace, "premium"), dryRun)
		}, "spec.bucketClassName: premium is not allowed"},
	}
	for _, p := range probes {
		testenv.Eventually(t, func() error {
			err := p.request()
			if err != nil && strings.Contains(err.Error(), p.refused) {
				return nil
			}
			if err == nil {
				return fmt.Errorf("%s is not in force yet: its probe was allowed", p.name)
			}
			return fmt.Errorf("%s is not in force yet: %w", p.name, err)
		})
	}
	for _, c := range []actor{controller, sidecar, clusterAdmin, namespacedSidecar} {
		testenv.Eventually(t, func() error {
			err := c.Get(t.Context(), client.ObjectKey{Namespace: tenantNamespace, Name: "none"}, &cosiapi.BucketAccess{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("the role of %s is not in force yet: %w", c.name, err)
		})
	}
}

var statusProbeAccess atomic.Pointer[cosiapi.BucketAccess]

// statusProbe returns a BucketAccess whose status the probes may try to write, created once.
func statusProbe(t *testing.T) *cosiapi.BucketAccess {
	t.Helper()
	if ba := statusProbeAccess.Load(); ba != nil {
		return ba.DeepCopy()
	}
	ba := newAccess(tenantNamespace, "read-only")
	if err := env.Client.Create(t.Context(), ba); err != nil {
		t.Fatal(err)
	}
	if !statusProbeAccess.CompareAndSwap(nil, ba) {
		return statusProbeAccess.Load().DeepCopy()
	}
	return ba.DeepCopy()
}
