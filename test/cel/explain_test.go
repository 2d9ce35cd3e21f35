package cel

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKubectlExplain checks that the field documentation users read with `kubectl explain` reaches
// them: it runs the kubectl this project builds against the API server with the CRDs applied.
func TestKubectlExplain(t *testing.T) {
	kubectl := filepath.Join(env.BinDir, "kubectl")
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
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
