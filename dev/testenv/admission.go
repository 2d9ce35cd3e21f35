package testenv

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RefuseUpdates has the API server refuse every update of the ConfigMap namespace/name (which
// must exist), with a ValidatingAdmissionPolicy, until lift is called or the test ends: a write
// refused as a policy webhook, a quota or RBAC not loaded yet after a restart refuse it. c is an
// admin's client. RefuseUpdates and lift return once the API server enforces the change (admission
// policies apply to every user, the admin's dry-run probe included).
func RefuseUpdates(t testing.TB, c client.Client, namespace, name string) (lift func()) {
	t.Helper()
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "test-refuse-updates-" + name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				ResourceNames: []string{name},
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule: admissionv1.Rule{
						APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"},
					},
				},
			}}},
			Validations: []admissionv1.Validation{{Expression: "false", Message: "refused by the test"}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: namespace},
			}},
		},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := c.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	// t.Context() is done when cleanups run.
	probe := func() error {
		cm := &corev1.ConfigMap{}
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: namespace, Name: name}, cm); err != nil {
			return err
		}
		metav1.SetMetaDataAnnotation(&cm.ObjectMeta, "test.cosi.io/probe", "refused")
		return c.Update(context.Background(), cm, client.DryRunAll)
	}
	Eventually(t, func() error {
		switch err := probe(); {
		case err == nil:
			return fmt.Errorf("policy %s is not in force yet: its probe was allowed", policy.Name)
		case !strings.Contains(err.Error(), policy.Name):
			return fmt.Errorf("policy %s is not in force yet: %w", policy.Name, err)
		}
		return nil
	})
	var once sync.Once
	lift = func() {
		once.Do(func() {
			for _, o := range []client.Object{binding, policy} {
				if err := c.Delete(context.Background(), o); err != nil {
					t.Error(err)
				}
			}
			Eventually(t, probe)
		})
	}
	t.Cleanup(lift)
	return lift
}
