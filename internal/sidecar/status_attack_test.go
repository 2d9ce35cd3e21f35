package sidecar_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

// refuseStatusLabel marks the Buckets whose status updates refuseBucketStatus refuses.
const refuseStatusLabel = "test.cosi.io/refuse-status"

// refuseBucketStatus has the API server refuse every status update of the Buckets that carry
// refuseStatusLabel, until the test ends: a status write that fails as a webhook, a quota or an
// overloaded server fail it. It returns once the policy is in force (probed with a Bucket of no
// driver's, which no sidecar writes).
func refuseBucketStatus(t *testing.T) {
	t.Helper()
	name := uniqueName("test-refuse-bucket-status")
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule: admissionv1.Rule{
						APIGroups: []string{cosiapi.GroupName}, APIVersions: []string{"*"}, Resources: []string{"buckets/status"},
					},
				},
			}}},
			Validations: []admissionv1.Validation{{Expression: "false", Message: "refused by the test"}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{ObjectSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{refuseStatusLabel: "true"},
			}},
		},
	}
	probe := newProbeBucket()
	for _, o := range []client.Object{policy, binding, probe} {
		if err := env.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, o := range []client.Object{binding, policy, probe} {
			_ = env.Client.Delete(context.Background(), o)
		}
	})
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(probe), probe); err != nil {
			return err
		}
		probe.Status.BucketID = "probe"
		err := env.Client.Status().Update(t.Context(), probe, client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), name) {
			return fmt.Errorf("policy %s is not in force yet: %w", name, err)
		}
		return nil
	})
}

// newProbeBucket is a Bucket of no driver, labelled to have its status updates refused.
func newProbeBucket() *cosiapi.Bucket {
	b := &cosiapi.Bucket{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("probe"), Labels: map[string]string{refuseStatusLabel: "true"}},
	}
	b.Spec.DriverName = "nobody.test.cosi.io"
	b.Spec.DeletionPolicy = cosiapi.DeletionPolicyRetain
	b.Spec.Protocols = []cosiapi.Protocol{cosiapi.ProtocolS3}
	b.Spec.ExistingBucketID = "probe"
	b.Spec.BucketClaimRef = cosiapi.BucketClaimReference{Namespace: testNamespace, Name: b.Name}
	return b
}

// TestFinalErrorRecordedAfterAFailedStatusWrite: the driver refuses a Bucket with a final code
// (not retried until the Bucket changes), and the status write that records it fails. The
// refusal must still reach the status once the API server takes it: a condition that stays what
// it was, with nothing retrying, says nothing of why the Bucket is not provisioned.
func TestFinalErrorRecordedAfterAFailedStatusWrite(t *testing.T) {
	t.Parallel()
	refuseBucketStatus(t)
	h := newHarness(t, memory.Config{})
	b := h.bucket(cosiapi.DeletionPolicyDelete)
	b.Spec.Parameters = map[string]string{memory.ParamVersioning: "maybe"} // InvalidArgument
	b.Labels = map[string]string{refuseStatusLabel: "true"}
	h.create(b)
	testenv.Eventually(t, func() error {
		if h.calls.Count("DriverGenerateBucketId") == 0 {
			return fmt.Errorf("the driver was not asked yet")
		}
		return nil
	})
	// The API server takes status writes again (a label is no change the sidecar watches).
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		delete(b.Labels, refuseStatusLabel)
		return env.Client.Update(t.Context(), b)
	})
	testenv.Condition(t, env, b, bucketConditions, cosiapi.ConditionProvisioned, metav1.ConditionFalse,
		cosiapi.ReasonProvisioningFailed)
}
