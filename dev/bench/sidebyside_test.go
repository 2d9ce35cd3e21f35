package bench

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// The ratio is of the medians; its range is of the runs taken in pairs, and a pair whose reference
// figure is 0 has no ratio.
func TestCompare(t *testing.T) {
	c := compare([]float64{57.3, 56.4, 59.4}, []float64{45, 47, 44.1})
	if c.This.Median != 57.3 || c.Reference.Median != 45 {
		t.Fatalf("medians %v, %v; want 57.3, 45", c.This.Median, c.Reference.Median)
	}
	if !near(c.Ratio, 57.3/45) || !near(c.RatioMin, 56.4/47) || !near(c.RatioMax, 59.4/44.1) {
		t.Errorf("ratio %v [%v – %v]; want %v [%v – %v]", c.Ratio, c.RatioMin, c.RatioMax, 57.3/45, 56.4/47, 59.4/44.1)
	}
	c = compare([]float64{2, 4}, []float64{0, 2})
	if c.Ratio != 3 || c.RatioMin != 2 || c.RatioMax != 2 { // medians 3 and 1; the one pair with a ratio: 4/2
		t.Errorf("with a zero reference run: ratio %v [%v – %v]; want 3 [2 – 2]", c.Ratio, c.RatioMin, c.RatioMax)
	}
	if c := compare([]float64{3}, []float64{0}); c.Ratio != 0 || c.RatioMin != 0 || c.RatioMax != 0 {
		t.Errorf("reference 0: ratio %v [%v – %v]; want none", c.Ratio, c.RatioMin, c.RatioMax)
	}
	if got := ratioText(compare([]float64{3}, []float64{0})); got != "-" {
		t.Errorf("ratioText without a ratio = %q, want -", got)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// Runs alternate which implementation goes first: A B, B A, A B.
func TestRunOrder(t *testing.T) {
	impls := [2]string{"this", "ref"}
	var got []string
	for i := range 3 {
		o := runOrder(impls, i)
		got = append(got, o[0], o[1])
	}
	if want := "this ref ref this this ref"; strings.Join(got, " ") != want {
		t.Errorf("order %v, want %s", got, want)
	}
}

// Each implementation's objects count as done on its own signal: this project's Provisioned
// condition, the reference's status.readyToUse.
func TestReady(t *testing.T) {
	provisioned := conditionTrue(cosiapi.ConditionProvisioned)
	obj := func(status map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"status": status}}
	}
	for _, tc := range []struct {
		name       string
		status     map[string]any
		this, refd bool
	}{
		{"no status", nil, false, false},
		{"provisioning", map[string]any{"conditions": []any{
			map[string]any{"type": "Provisioned", "status": "Unknown"}}}, false, false},
		{"provisioned", map[string]any{"conditions": []any{
			map[string]any{"type": "Ready", "status": "False"},
			map[string]any{"type": "Provisioned", "status": "True"}}}, true, false},
		{"ready to use", map[string]any{"readyToUse": true}, false, true},
		{"not ready", map[string]any{"readyToUse": false}, false, false},
		{"malformed", map[string]any{"readyToUse": "true", "conditions": "Provisioned"}, false, false},
	} {
		o := obj(tc.status)
		if got := provisioned(o); got != tc.this {
			t.Errorf("%s: Provisioned = %v, want %v", tc.name, got, tc.this)
		}
		if got := readyToUse(o); got != tc.refd {
			t.Errorf("%s: readyToUse = %v, want %v", tc.name, got, tc.refd)
		}
	}
}

// The objects the benchmark creates are in each implementation's schema, in the same group and
// version.
func TestSideObjects(t *testing.T) {
	this, ref := thisImplementation(), referenceImplementation("/ref")
	for _, im := range []*implementation{this, ref} {
		c, a := im.claim("bench", 7), im.access("bench", 7)
		if c.GetName() != "claim-7" || a.GetName() != "access-7" || c.GetNamespace() != "bench" {
			t.Errorf("%s: claim %s/%s, access %s", im.name, c.GetNamespace(), c.GetName(), a.GetName())
		}
		for _, u := range append(im.classes(), c, a) {
			if u.GroupVersionKind().GroupVersion() != cosiapi.SchemeGroupVersion {
				t.Errorf("%s: %s is %v", im.name, u.GetName(), u.GroupVersionKind())
			}
		}
		claims, _, _ := unstructured.NestedSlice(a.Object, "spec", "bucketClaims")
		if len(claims) != 1 || claims[0].(map[string]any)["bucketClaimName"] != "claim-7" {
			t.Errorf("%s: access's claims %v", im.name, claims)
		}
	}
	refClaims, _, _ := unstructured.NestedSlice(ref.access("bench", 1).Object, "spec", "bucketClaims")
	if refClaims[0].(map[string]any)["accessMode"] != "ReadWrite" {
		t.Errorf("reference access: %v, want accessMode ReadWrite", refClaims[0])
	}
	if auth, _, _ := unstructured.NestedString(ref.classes()[1].Object, "spec", "authenticationType"); auth != "Key" {
		t.Errorf("reference access class: authenticationType %q, want Key", auth)
	}
	if ref.crds[0] != filepath.Join("/ref", RefCRDDir) || this.crds != nil {
		t.Errorf("CRDs: this %v, reference %v", this.crds, ref.crds)
	}
}

func TestLoadReference(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadReference(dir); err == nil || !strings.Contains(err.Error(), "hack/reference/build.sh") {
		t.Errorf("empty directory: %v, want an error naming the build script", err)
	}
	for _, f := range []string{RefController, RefSidecar, RefDriver} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, RefCRDDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, RefCommitFile), []byte("ee00c269\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ref, err := LoadReference(dir)
	if err != nil || ref.Commit != "ee00c269" || ref.Dir != dir {
		t.Errorf("LoadReference = %+v, %v", ref, err)
	}
}

// The requests table has each implementation's requests per claim and per access, writes and
// reads apart, with their totals; medians over the runs, a request absent from a run counting 0.
func TestSideRequests(t *testing.T) {
	runs := []SideRun{
		{Requests: map[string]phaseFigures{"PUT secrets 200": {Accesses: 1}, "GET bucketaccesses 200": {Accesses: 1}}},
		{Requests: map[string]phaseFigures{"PUT secrets 200": {Accesses: 1}}},
		{Requests: map[string]phaseFigures{"PUT secrets 200": {Accesses: 1}, "GET bucketaccesses 200": {Accesses: 2}}},
	}
	m := medianRequests(runs)
	if m["PUT secrets 200"].Accesses != 1 || m["GET bucketaccesses 200"].Accesses != 1 {
		t.Errorf("medians %v", m)
	}
	if !requestIsWrite("PUT secrets 200") || requestIsWrite("GET bucketaccesses 200") {
		t.Error("requestIsWrite: PUT is a write, GET is not")
	}
	var b bytes.Buffer
	m["WATCH buckets 200"] = phaseFigures{}
	printSideRequests(&b, 500, m, sideRequests{"POST secrets 201": {Accesses: 1}, "PUT secrets 200": {Accesses: 2}})
	out := b.String()
	for _, want := range []string{"POST secrets 201", "total writes", "total reads", "GET bucketaccesses 200"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "WATCH buckets") {
		t.Errorf("a request that is 0 for both should be left out:\n%s", out)
	}
	if w, r := strings.Index(out, "PUT secrets"), strings.Index(out, "GET bucketaccesses"); w > r {
		t.Errorf("writes should come before reads:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "total writes") && !strings.Contains(line, "3.000") {
			t.Errorf("reference writes per access should total 3: %q", line)
		}
	}
}
