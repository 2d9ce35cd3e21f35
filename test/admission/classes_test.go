package admission

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
)

// TestAllowedClasses: cosi-allowed-classes. A namespace annotated by its admin may use only the
// classes the annotations list, whoever creates the object; a namespace without them, any.
func TestAllowedClasses(t *testing.T) {
	waitForPolicies(t)
	everything := namespace(
		t,
		map[string]string{
			cosiapi.AnnotationAllowedBucketClasses:       "*",
			cosiapi.AnnotationAllowedBucketAccessClasses: "read-only,*",
		},
	)
	nothing := namespace(t, nil)
	restrict(
		t,
		nothing,
		map[string]string{cosiapi.AnnotationAllowedBucketClasses: "", cosiapi.AnnotationAllowedBucketAccessClasses: " , "},
	)
	const premiumRefused = "spec.bucketClassName: premium is not allowed in namespace " + restrictedNamespace +
		" (the namespace annotation " + cosiapi.AnnotationAllowedBucketClasses + " allows: standard, archive)"
	const readWriteRefused = "spec.bucketAccessClassName: read-write is not allowed in namespace " + restrictedNamespace +
		" (the namespace annotation " + cosiapi.AnnotationAllowedBucketAccessClasses + " allows: read-only)"

	claims := []struct {
		name    string
		as      actor
		claim   *cosiapi.BucketClaim
		refused string
	}{
		{"claim of a class the namespace may not use", tenant, newClaim(restrictedNamespace, "premium"), premiumRefused},
		{
			"admin's claim of a class the namespace may not use",
			admin,
			newClaim(restrictedNamespace, "premium"),
			premiumRefused,
		},
		{"claim of a class the namespace may use", tenant, newClaim(restrictedNamespace, "archive"), ""},
		{"claim of the first class listed, before the comma", tenant, newClaim(restrictedNamespace, "standard"), ""},
		{
			"claim of a class that only contains an allowed name",
			tenant,
			newClaim(restrictedNamespace, "archive-2"),
			"spec.bucketClassName: archive-2 is not allowed",
		},
		{"claim of an imported bucket", tenant, newStaticClaim(restrictedNamespace, "imported"), ""},
		{"claim in a namespace without the annotation", tenant, newClaim(tenantNamespace, "premium"), ""},
		{"claim in a namespace that allows *", tenant, newClaim(everything, "premium"), ""},
		{
			"claim in a namespace whose annotation is empty",
			tenant,
			newClaim(nothing, "standard"),
			"spec.bucketClassName: standard is not allowed in namespace " + nothing +
				" (the namespace annotation " + cosiapi.AnnotationAllowedBucketClasses + " allows: none)",
		},
	}
	for _, tc := range claims {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			answer(t, tc.as.Create(t.Context(), tc.claim), tc.refused)
		})
	}
	accesses := []struct {
		name    string
		access  *cosiapi.BucketAccess
		refused string
	}{
		{"access of a class the namespace may not use", newAccess(restrictedNamespace, "read-write"), readWriteRefused},
		{"access of a class the namespace may use", newAccess(restrictedNamespace, "read-only"), ""},
		{"access in a namespace without the annotation", newAccess(tenantNamespace, "read-write"), ""},
		{"access in a namespace that allows *", newAccess(everything, "read-write"), ""},
		{
			"access in a namespace whose annotation lists no name",
			newAccess(nothing, "read-only"),
			"spec.bucketAccessClassName: read-only is not allowed",
		},
	}
	for _, tc := range accesses {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			answer(t, tenant.Create(t.Context(), tc.access), tc.refused)
		})
	}
}

// TestRestrictingANamespaceLater: claims and accesses created before an admin restricted their
// namespace keep working. Tenants may still edit and delete them, and COSI may still remove its
// finalizers; a policy that checked updates would leave them Terminating for ever.
func TestRestrictingANamespaceLater(t *testing.T) {
	waitForPolicies(t)
	ns := namespace(t, nil)
	newClaims := func() *cosiapi.BucketClaim { return newClaim(ns, "premium") }
	newAccesses := func() *cosiapi.BucketAccess { return newAccess(ns, "read-write") }
	// Created by the tenant before the restriction, with the finalizer the controller adds.
	var claims []*cosiapi.BucketClaim
	var accesses []*cosiapi.BucketAccess
	for range 4 {
		c, ba := newClaims(), newAccesses()
		for _, o := range []client.Object{c, ba} {
			if err := tenant.Create(t.Context(), o); err != nil {
				t.Fatal(err)
			}
			answer(
				t,
				update(t, controller, o, func(o client.Object) { controllerutil.AddFinalizer(o, cosiapi.FinalizerProtection) }),
				"",
			)
		}
		claims, accesses = append(claims, c), append(accesses, ba)
	}

	restrict(
		t,
		ns,
		map[string]string{
			cosiapi.AnnotationAllowedBucketClasses:       "standard",
			cosiapi.AnnotationAllowedBucketAccessClasses: "read-only",
		},
	)
	answer(t, tenant.Create(t.Context(), newClaims()), "spec.bucketClassName: premium is not allowed")
	answer(t, tenant.Create(t.Context(), newAccesses()), "spec.bucketAccessClassName: read-write is not allowed")

	label := func(o client.Object) { o.SetLabels(map[string]string{"team": "photos"}) }
	unprotect := func(o client.Object) { controllerutil.RemoveFinalizer(o, cosiapi.FinalizerProtection) }
	for i, o := range []client.Object{claims[0], accesses[0]} {
		t.Run(fmt.Sprintf("tenant edits a label %d", i), func(t *testing.T) { answer(t, update(t, tenant, o, label), "") })
	}
	for i, o := range []client.Object{claims[1], accesses[1]} {
		t.Run(fmt.Sprintf("tenant deletes %d", i), func(t *testing.T) { answer(t, tenant.Delete(t.Context(), o), "") })
	}
	for i, o := range []client.Object{claims[2], accesses[2]} {
		t.Run(fmt.Sprintf("controller removes its finalizer from a deleting object %d", i), func(t *testing.T) {
			if err := tenant.Delete(t.Context(), o); err != nil {
				t.Fatal(err)
			}
			answer(t, update(t, controller, o, unprotect), "")
			env.Gone(t, o)
		})
	}
	t.Run("sidecar marks a deleting access cleaned up", func(t *testing.T) {
		if err := tenant.Delete(t.Context(), accesses[3]); err != nil {
			t.Fatal(err)
		}
		answer(t, update(t, sidecar, accesses[3], func(ba *cosiapi.BucketAccess) {
			metav1.SetMetaDataAnnotation(&ba.ObjectMeta, cosiapi.AnnotationSidecarCleanupFinished, "true")
		}), "")
	})
}

// namespace creates a namespace with annotations, in which tenant holds its Role, and waits until
// the Role is in force.
func namespace(t *testing.T, annotations map[string]string) string {
	t.Helper()
	name := uniqueName("ns")
	if err := env.Client.Create(
		t.Context(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}},
	); err != nil {
		t.Fatal(err)
	}
	if err := bindTenants(t.Context(), name); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		err := tenant.List(t.Context(), &cosiapi.BucketClaimList{}, client.InNamespace(name))
		if err != nil {
			return fmt.Errorf("the tenant's Role in %s is not in force yet: %w", name, err)
		}
		return nil
	})
	return name
}

// restrict annotates the namespace ns, and waits until the policy sees the annotations: the
// policy reads Namespaces from a cache. It probes with dry-run creates of a class the annotation
// does not list.
func restrict(t *testing.T, ns string, annotations map[string]string) {
	t.Helper()
	n := &corev1.Namespace{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: ns}, n); err != nil {
		t.Fatal(err)
	}
	n.Annotations = annotations
	if err := env.Client.Update(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		err := tenant.Create(t.Context(), newClaim(ns, "not-listed"), client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), "spec.bucketClassName: not-listed is not allowed") {
			return nil
		}
		return fmt.Errorf("the policy does not see the annotations of %s yet: %w", ns, err)
	})
}
