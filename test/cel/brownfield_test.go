package cel

import (
	"fmt"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
)

const brownfieldRuleMessage = "deletionPolicy must be Retain when existingBucketID is set"

// TestBrownfieldDeleteStoredBeforeTheRule: what docs/api.md promises for a Bucket with
// existingBucketID and deletionPolicy Delete stored before the CRD refused them (an upgrade). The
// API server's validation ratcheting lets updates that leave the spec alone through (COSI's
// finalizer, status), refuses spec changes, binding included, and lets the admin switch to Retain.
//
// It removes the rule from the installed CRD for a moment, so it is not parallel: Go runs it
// after every parallel case of the tests before it has finished, and it puts the CRD back before
// it returns.
func TestBrownfieldDeleteStoredBeforeTheRule(t *testing.T) {
	brownfieldDelete := func() *cosiapi.Bucket {
		b := newBucket(uniqueName("brownfield"))
		static(b)
		b.Spec.DeletionPolicy = cosiapi.DeletionPolicyDelete
		return b
	}
	// refusedNow probes the rule with a dry-run create.
	refusedNow := func() bool {
		err := env.Client.Create(t.Context(), brownfieldDelete(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), brownfieldRuleMessage)
	}

	stored := brownfieldDelete()
	beforeTheRule(t, refusedNow, func() {
		if err := env.Client.Create(t.Context(), stored); err != nil {
			t.Fatal(err)
		}
	})

	for _, tc := range []struct {
		name       string
		update     func(*cosiapi.Bucket)
		status     bool
		wantErrors []string
	}{
		{
			name:   "the sidecar adds its finalizer",
			update: func(b *cosiapi.Bucket) { b.Finalizers = []string{cosiapi.FinalizerProtection} },
		},
		{
			name:   "the sidecar writes status",
			status: true,
			update: func(b *cosiapi.Bucket) { b.Status.BucketID = "legacy-bucket" },
		},
		{
			name:       "the controller binds the claim",
			update:     func(b *cosiapi.Bucket) { b.Spec.BucketClaimRef.UID = "3f2b9c1e-0000-4000-8000-000000000003" },
			wantErrors: []string{"spec.deletionPolicy", brownfieldRuleMessage},
		},
		{
			name:   "the admin switches it to Retain",
			update: func(b *cosiapi.Bucket) { b.Spec.DeletionPolicy = cosiapi.DeletionPolicyRetain },
		},
		{
			name:   "then the claim binds",
			update: func(b *cosiapi.Bucket) { b.Spec.BucketClaimRef.UID = "3f2b9c1e-0000-4000-8000-000000000003" },
		},
	} {
		// In order, on the one stored Bucket.
		t.Run(tc.name, func(t *testing.T) {
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(stored), stored); err != nil {
				t.Fatal(err)
			}
			tc.update(stored)
			checkErrors(t, update(t.Context(), stored, tc.status), tc.wantErrors)
		})
	}
}

// beforeTheRule runs store while the brownfield rule is out of the installed Bucket CRD, then puts
// it back; refused tells whether the rule is in force (a dry-run create), waited for each time.
func beforeTheRule(t *testing.T, refused func() bool, store func()) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	crds, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	rule := setRule(t, crds, nil)
	restored := false
	t.Cleanup(func() {
		if !restored {
			setRule(t, crds, rule)
		}
	})
	for _, in := range []bool{false, true} {
		testenv.Eventually(t, func() error {
			if refused() != in {
				return fmt.Errorf("the CRD's change (rule in force: %t) is not in force yet", in)
			}
			return nil
		})
		if !in {
			store()
			setRule(t, crds, rule)
			restored = true
		}
	}
}

// setRule removes the brownfield rule from the installed Bucket CRD and returns it, or, given
// the rule it returned, puts it back.
func setRule(t *testing.T, crds client.Client, put *apiextensionsv1.ValidationRule) *apiextensionsv1.ValidationRule {
	t.Helper()
	var removed *apiextensionsv1.ValidationRule
	testenv.Eventually(t, func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := crds.Get(t.Context(), client.ObjectKey{Name: "buckets." + cosiapi.GroupName}, crd); err != nil {
			return err
		}
		spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		var rules apiextensionsv1.ValidationRules
		for _, r := range spec.XValidations {
			if strings.HasPrefix(r.Message, brownfieldRuleMessage) {
				removed = &r
				continue
			}
			rules = append(rules, r)
		}
		if put != nil {
			rules = append(rules, *put)
		} else if removed == nil {
			t.Fatal("the Bucket CRD has no rule with the message " + brownfieldRuleMessage)
		}
		spec.XValidations = rules
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
		return crds.Update(t.Context(), crd) // a conflict is retried
	})
	return removed
}
