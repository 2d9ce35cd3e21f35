package kubectlcosi

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kube-cosi/cosi/dev/reasons"
)

// TestEveryReasonExplained: every condition reason and event reason of the API has an
// explanation, with who acts and what to do.
func TestEveryReasonExplained(t *testing.T) {
	all, err := reasons.FromAPI()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 20 {
		t.Fatalf("found only %d reasons in the API: %v", len(all), all)
	}
	for _, r := range all {
		e, ok := Explanations[r.Value]
		if !ok {
			t.Errorf("%s (%q) has no explanation in Explanations", r.Name, r.Value)
			continue
		}
		if e.Meaning == "" || e.Action == "" ||
			!slices.Contains([]string{WhoUser, WhoAdmin, WhoDriverOwner, WhoNobody}, e.Who) {
			t.Errorf("%s: incomplete explanation %+v", r.Name, e)
		}
	}
}

// TestAdmissionPolicies: doctor looks for exactly the policies config/admission installs.
func TestAdmissionPolicies(t *testing.T) {
	files, err := filepath.Glob("../../config/admission/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			var o struct {
				Kind     string
				Metadata struct{ Name string }
			}
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.Kind == "ValidatingAdmissionPolicy" {
				names = append(names, o.Metadata.Name)
			}
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, AdmissionPolicies) {
		t.Errorf("config/admission has policies %v; doctor checks %v", names, AdmissionPolicies)
	}
}

// TestV1alpha1BucketViewPolicy: doctor looks for the policy config/components/v1alpha1-bucket-view
// installs.
func TestV1alpha1BucketViewPolicy(t *testing.T) {
	data, err := os.ReadFile("../../config/components/v1alpha1-bucket-view/read-only.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var o struct {
			Kind     string
			Metadata struct{ Name string }
		}
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatal(err)
		}
		if o.Kind == "ValidatingAdmissionPolicy" {
			names = append(names, o.Metadata.Name)
		}
	}
	if !slices.Equal(names, []string{V1alpha1BucketViewPolicy}) {
		t.Errorf("config/components/v1alpha1-bucket-view has policies %v; doctor checks %s", names,
			V1alpha1BucketViewPolicy)
	}
}
