package kubectlcosi

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kubectlcosi"
)

// TestEnvMasksValues: env shows the variables a Pod gets from the access's Secret, bucket info in
// clear and every credential masked, in every output format and for both users; no credential
// value ever appears.
func TestEnvMasksValues(t *testing.T) {
	claim, ba := healthy(t)
	secret := &corev1.Secret{}
	key := types.NamespacedName{Namespace: namespace, Name: ba.Spec.BucketClaims[0].AccessSecretName}
	if err := env.Client.Get(t.Context(), key, secret); err != nil {
		t.Fatal(err)
	}
	credentials := []string{cosiapi.SecretKeyS3AccessKeyID, cosiapi.SecretKeyS3SecretAccessKey}
	for _, k := range credentials {
		if len(secret.Data[k]) < 8 {
			t.Fatalf("the Secret's %s is too short to search for: %q", k, secret.Data[k])
		}
	}
	bucket := string(secret.Data[cosiapi.SecretKeyS3BucketName])

	for _, cfg := range []*rest.Config{env.Config, viewer} {
		for _, output := range []string{"", "json", "yaml"} {
			args := []string{"env", ba.Name}
			if output != "" {
				args = append(args, "-o", output)
			}
			code, out, errOut := run(t, cfg, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, k := range credentials {
				if strings.Contains(out, string(secret.Data[k])) {
					t.Fatalf("-o %q prints the value of %s:\n%s", output, k, out)
				}
			}
			for _, want := range []string{cosiapi.SecretKeyS3SecretAccessKey, "masked", bucket} {
				if !strings.Contains(out, want) {
					t.Errorf("-o %q lacks %q:\n%s", output, want, out)
				}
			}
			if output == "" && !strings.Contains(out, "BUCKET_NAME="+bucket) {
				t.Errorf("text output lacks the bucket name:\n%s", out)
			}
			if output == "json" {
				r := &kubectlcosi.EnvReport{}
				if err := json.Unmarshal([]byte(out), r); err != nil {
					t.Fatal(err)
				}
				if len(r.Secrets) != 1 || r.Secrets[0].BucketClaim != claim.Name || len(r.Secrets[0].Variables) == 0 {
					t.Errorf("report: %+v", r)
				}
			}
		}
	}
}
