package cel

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// TestKubectlExplain checks that the field documentation users read with `kubectl explain` reaches
// them: it runs the kubectl this project builds against the API server with the CRDs applied.
func TestKubectlExplain(t *testing.T) {
	kubectl := filepath.Join(env.BinDir, "kubectl")
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteAdminKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		field string
		want  []string
	}{
		{"buckets", []string{"KIND:       Bucket", "represents one bucket in an object store"}},
		{"buckets.spec.deletionPolicy", []string{"Retain: keep this Bucket object", "ENUM:", "Delete"}},
		{"buckets.spec.bucketClaimRef.uid", []string{"COSI sets it when the claim binds"}},
		{"buckets.status.bucketID", []string{"once", "set it cannot change"}},
		{"bucketclaims", []string{"KIND:       BucketClaim", "a user's request for a bucket"}},
		{"bucketclaims.spec.existingBucketName", []string{"imports a", "bucketClaimRef"}},
		{"bucketclaims.status.boundBucketName", []string{"bc-"}},
		{"bucketclasses.spec", []string{"It is immutable", "driverName", "deletionPolicy", "parameters"}},
		{"bucketaccesses.spec.bucketClaims", []string{"accessSecretName", "accessModes", "may appear only once"}},
		{"bucketaccesses.spec.bucketClaims.accessModes.objectData", []string{"reading and writing objects", "ReadOnly"}},
		{"bucketaccesses.status.accountID", []string{"account in the object store"}},
		{"bucketaccessclasses.spec.authenticationType", []string{"ServiceAccount: implicitly", "Key (default)"}},
		{"bucketaccessclasses.spec.disallowedBucketAccessModes", []string{"objectData", "objectMetadata", "bucketMetadata"}},
	}
	for _, tc := range cases {
		t.Run(tc.field, func(t *testing.T) {
			// The API server publishes a new CRD's OpenAPI shortly after the CRD is established;
			// retry until it does.
			var out []byte
			var err error
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
				out, err = exec.CommandContext(t.Context(), kubectl, "--kubeconfig", kubeconfig, "explain", tc.field,
					"--api-version=objectstorage.k8s.io/v1alpha2").CombinedOutput()
				if err == nil {
					break
				}
			}
			if err != nil {
				t.Fatalf("kubectl explain %s: %v\n%s", tc.field, err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("kubectl explain %s does not show %q:\n%s", tc.field, w, out)
				}
			}
		})
	}
}

// TestKubectlGet checks the printer columns: a user sees at a glance whether an object is
// provisioned, by what driver, and for which claim; and `kubectl get cosi` lists every kind.
func TestKubectlGet(t *testing.T) {
	kubectl := filepath.Join(env.BinDir, "kubectl")
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteAdminKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	b := newBucket(uniqueName("printed"))
	if err := env.Client.Create(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	b.Status.BucketID = "backend-" + b.Name
	b.Status.Conditions = []metav1.Condition{{
		Type: cosiapi.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: cosiapi.ReasonProvisioned,
		LastTransitionTime: metav1.Now(),
	}}
	if err := env.Client.Status().Update(t.Context(), b); err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(t.Context(), kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...).
			CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	row := func(out, name string) []string {
		t.Helper()
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			for i, field := range f {
				if field == name || strings.HasSuffix(field, "/"+name) {
					return f[i:]
				}
			}
		}
		t.Fatalf("no row for %s in:\n%s", name, out)
		return nil
	}

	out := run("get", "buckets")
	if !strings.Contains(out, "PROVISIONED") || !strings.Contains(out, "DRIVER") || !strings.Contains(out, "CLAIM") {
		t.Errorf("kubectl get buckets lacks the expected columns:\n%s", out)
	}
	// NAME PROVISIONED DRIVER POLICY CLAIM NAMESPACE CLAIM AGE
	want := []string{b.Name, "True", "s3.example.com", "Delete", "apps", "claim"}
	if got := row(out, b.Name); !slicesHasPrefix(got, want) {
		t.Errorf("kubectl get buckets row = %v, want it to start with %v", got, want)
	}
	if got := row(
		run("get", "buckets", "-o", "wide"),
		b.Name,
	); !strings.Contains(
		strings.Join(got, " "),
		"backend-"+b.Name,
	) {
		t.Errorf("kubectl get buckets -o wide row = %v, want the bucket ID", got)
	}
	// The category lists all COSI kinds, including namespaced ones (short name bc).
	c := newBucketClaim(uniqueName("printed"))
	if err := env.Client.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	out = run("get", "cosi", "-A")
	row(out, b.Name)
	row(out, c.Name)
	row(run("get", "bc", "-n", testNamespace), c.Name)
}

func slicesHasPrefix(s, prefix []string) bool {
	return len(s) >= len(prefix) && slices.Equal(s[:len(prefix)], prefix)
}
