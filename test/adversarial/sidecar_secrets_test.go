package adversarial

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
)

// sidecarPolicy is the admission policy that confines the sidecar's Secret rights.
const sidecarPolicy = "cosi-sidecar-secrets"

// Issue 25, items 4, 19 and 20: what the sidecar's token may do with Secrets, sent as the sidecar
// (its ServiceAccount's own token, bound to its generated role). The role alone has no get, list or
// watch, and yet it reads a Secret whose name it knows (a patch that changes nothing returns it),
// changes and deletes any Secret, and creates any Secret in any namespace, a ServiceAccount token in
// kube-system included (that ServiceAccount's rights, once the token controller fills it in). With
// cosi-sidecar-secrets (config/admission) installed, all of that is refused, and the real sidecar,
// on the same token, still creates, probes, rewrites, releases, replaces and deletes its own
// Secrets.
//
// Not parallel: the policy applies to the whole API server, and this tier's other tests run without
// the policies (they show what holds without them); it is removed before they start. The test also
// checks that every test here runs with the OwnerReferencesPermissionEnforcement admission plugin,
// which refuses blockOwnerDeletion without permission on bucketaccesses/finalizers.
func TestSidecarSecretRights(t *testing.T) {
	if !slices.Contains(env.AdmissionPlugins, "OwnerReferencesPermissionEnforcement") {
		t.Error("the test API server does not enforce owner reference permissions")
	}
	cfg, err := env.ServiceAccountTokenConfig(t.Context(), "config/rbac/sidecar/role.yaml", "cosi-system", "cosi-sidecar")
	if err != nil {
		t.Fatal(err)
	}
	sidecar, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	victim := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("victim"), Namespace: tenantNamespace},
		StringData: map[string]string{"password": "the tenant's"},
	}
	mustCreate(t, tenant, victim)

	t.Run("without the policy", func(t *testing.T) {
		for _, r := range sidecarRequests(sidecar, victim, true) {
			got, err := r.send(t.Context())
			switch {
			case r.rbac:
				if !apierrors.IsForbidden(err) {
					t.Errorf("%s: %v; want forbidden by RBAC", r.name, err)
				}
			case err != nil:
				t.Errorf("%s: %v; want allowed by the sidecar's role", r.name, err)
			case r.reads && string(got.Data["password"]) != "the tenant's":
				t.Errorf("%s: the Secret's data did not come back: %v", r.name, got.Data)
			}
		}
	})

	installSidecarPolicy(t, sidecar)
	t.Run("with the policy", func(t *testing.T) {
		for _, r := range sidecarRequests(sidecar, victim, false) {
			got, err := r.send(t.Context())
			switch {
			case r.rbac:
				if !apierrors.IsForbidden(err) {
					t.Errorf("%s: %v; want forbidden by RBAC", r.name, err)
				}
			case !refusedByPolicy(err):
				t.Errorf("%s: %v; want refused by %s", r.name, err, sidecarPolicy)
			}
			if got != nil && len(got.Data) > 0 {
				t.Errorf("%s: the Secret's data came back", r.name)
			}
		}
		now := &corev1.Secret{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(victim), now); err != nil {
			t.Fatal(err)
		}
		if now.UID != victim.UID || string(now.Data["password"]) != "the tenant's" || now.DeletionTimestamp != nil {
			t.Errorf("the tenant's Secret was changed or deleted")
		}
	})

	t.Run("the sidecar with the policy", func(t *testing.T) {
		s := newSystem(t)
		s.stopSidecar()
		s.stopSidecar = testenv.StartSidecar(t, cfg, testenv.SidecarOptions(s.endpoint))
		c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
		class := s.accessClass().Name

		// Created (after a probe of the free name), then rewritten in place when a tenant breaks
		// it, released and written again when a tenant deletes it, replaced when a tenant makes it
		// immutable, and deleted with the access.
		ba := s.provisionedAccess(class, c)
		first := secret(t, ba)
		edit(t, tenant, first, func(s *corev1.Secret) { delete(s.Data, cosiapi.SecretKeyProtocol) })
		testenv.Eventually(t, func() error {
			now := secret(t, ba)
			if now.UID != first.UID || len(now.Data[cosiapi.SecretKeyProtocol]) == 0 {
				return fmt.Errorf("the broken Secret was not rewritten in place")
			}
			return nil
		})
		mustDelete(t, tenant, first)
		testenv.Eventually(t, func() error {
			now := &corev1.Secret{}
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(first), now); err != nil {
				return err
			}
			if now.UID == first.UID || now.DeletionTimestamp != nil {
				return fmt.Errorf("the deleted Secret was not written again")
			}
			return nil
		})
		// Made immutable with a key removed, it can never be patched: the sidecar removes its
		// finalizer, deletes it and creates it anew (secretsReady).
		second := secret(t, ba)
		edit(t, tenant, second, func(s *corev1.Secret) {
			delete(s.Data, cosiapi.SecretKeyProtocol)
			s.Immutable = ptr.To(true)
		})
		testenv.Eventually(t, func() error {
			now := &corev1.Secret{}
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(second), now); err != nil {
				return err
			}
			if now.UID == second.UID || ptr.Deref(now.Immutable, false) || len(now.Data[cosiapi.SecretKeyProtocol]) == 0 {
				return fmt.Errorf("the immutable Secret was not replaced")
			}
			return nil
		})

		// A Secret whose label a tenant removed (cosi-reserved-secrets would refuse that) is found
		// by its owner reference, and deleted with its access.
		unlabelled := s.provisionedAccess(class, c)
		edit(t, tenant, secret(t, unlabelled), func(s *corev1.Secret) { delete(s.Labels, cosiapi.LabelBucketAccessUID) })

		for _, a := range []*cosiapi.BucketAccess{ba, unlabelled} {
			sec := secret(t, a)
			mustDelete(t, tenant, a)
			env.Gone(t, a)
			env.Gone(t, sec)
			s.waitRevoked(a.Status.AccountID)
			for _, e := range env.Events(t, a) {
				if strings.Contains(e, sidecarPolicy) {
					t.Errorf("%s refused the sidecar: %s", sidecarPolicy, e)
				}
			}
		}
		mustDelete(t, tenant, c)
		env.Gone(t, c)
	})
}

// A sidecarRequest is one request about Secrets, sent as the sidecar.
type sidecarRequest struct {
	name string
	// send returns what the API server returned of a Secret, if anything.
	send func(ctx context.Context) (*corev1.Secret, error)
	// rbac: the sidecar's role refuses it. reads: allowed, it returns the Secret's data.
	rbac, reads bool
}

// sidecarRequests are what a holder of the sidecar's token might try on the tenant's Secret victim;
// as dry runs with dryRun (nothing is changed, and the answers are the same).
func sidecarRequests(c client.Client, victim *corev1.Secret, dryRun bool) []sidecarRequest {
	var opt []string
	if dryRun {
		opt = []string{metav1.DryRunAll}
	}
	target := func() *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: victim.Name, Namespace: victim.Namespace}}
	}
	patch := func(pt types.PatchType, body string) func(context.Context) (*corev1.Secret, error) {
		return func(ctx context.Context) (*corev1.Secret, error) {
			s := target()
			return s, c.Patch(ctx, s, client.RawPatch(pt, []byte(body)), &client.PatchOptions{DryRun: opt})
		}
	}
	create := func(s *corev1.Secret) func(context.Context) (*corev1.Secret, error) {
		return func(ctx context.Context) (*corev1.Secret, error) {
			return nil, c.Create(ctx, s, &client.CreateOptions{DryRun: opt})
		}
	}
	return []sidecarRequest{
		{name: "get the tenant's Secret", rbac: true, send: func(ctx context.Context) (*corev1.Secret, error) {
			s := target()
			return s, c.Get(ctx, client.ObjectKeyFromObject(s), s)
		}},
		{name: "list the tenant's Secrets", rbac: true, send: func(ctx context.Context) (*corev1.Secret, error) {
			return nil, c.List(ctx, &corev1.SecretList{}, client.InNamespace(victim.Namespace))
		}},
		{name: "create a ServiceAccount token in kube-system", send: create(&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:        uniqueName("token"),
				Namespace:   "kube-system",
				Annotations: map[string]string{corev1.ServiceAccountNameKey: "namespace-controller"},
			},
			Type: corev1.SecretTypeServiceAccountToken,
		})},
		{name: "create an Opaque Secret without COSI's label and owner", send: create(&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: uniqueName("planted"), Namespace: victim.Namespace},
			StringData: map[string]string{"password": "the sidecar's"},
		})},
		{name: "read the tenant's Secret with an empty merge patch", reads: true, send: patch(types.MergePatchType, "{}")},
		{name: "read the tenant's Secret with an empty JSON patch", reads: true, send: patch(types.JSONPatchType, "[]")},
		{
			name: "patch the tenant Secret's data",
			send: patch(types.MergePatchType, `{"stringData":{"password":"the sidecar's"}}`),
		},
		{name: "delete the tenant's Secret", send: func(ctx context.Context) (*corev1.Secret, error) {
			return nil, c.Delete(ctx, target(), &client.DeleteOptions{DryRun: opt})
		}},
	}
}

func refusedByPolicy(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+sidecarPolicy+"'")
}

// installSidecarPolicy installs cosi-sidecar-secrets and its binding from the shipped file, waits
// until the API server enforces it on the sidecar, and removes it when the test ends, waiting until
// it no longer applies.
func installSidecarPolicy(t *testing.T, sidecar client.Client) {
	t.Helper()
	file := filepath.Join(env.RepoRoot, "config", "admission", "sidecar-secrets.yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var objs []client.Object
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var kind struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &kind); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var obj client.Object
		switch kind.Kind {
		case "ValidatingAdmissionPolicy":
			obj = &admissionv1.ValidatingAdmissionPolicy{}
		case "ValidatingAdmissionPolicyBinding":
			obj = &admissionv1.ValidatingAdmissionPolicyBinding{}
		default:
			t.Fatalf("%s: unexpected kind %q", file, kind.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		mustCreate(t, env.Client, obj)
		objs = append(objs, obj)
	}
	// t.Context() is done when cleanups run.
	probe := func() error {
		return sidecar.Create(context.Background(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: uniqueName("probe"), Namespace: tenantNamespace},
		}, client.DryRunAll)
	}
	t.Cleanup(func() {
		for _, o := range objs {
			if err := env.Client.Delete(context.Background(), o); err != nil {
				t.Error(err)
			}
		}
		testenv.Eventually(t, func() error {
			if err := probe(); err != nil {
				return fmt.Errorf("%s still applies: %w", sidecarPolicy, err)
			}
			return nil
		})
	})
	testenv.Eventually(t, func() error {
		switch err := probe(); {
		case err == nil:
			return fmt.Errorf("%s is not in force yet: its probe was allowed", sidecarPolicy)
		case !refusedByPolicy(err):
			return fmt.Errorf("%s is not in force yet: %w", sidecarPolicy, err)
		}
		return nil
	})
}
