package kubectlcosi

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
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

// TestEnvForeignSecret: the access's Secret name is taken by a Secret of the user's own. A Pod
// that mounts it gets that Secret, not COSI's credentials: env must say so instead of listing it
// as what the access gives.
func TestEnvForeignSecret(t *testing.T) {
	class := objects.BucketClass(unique("class"), driverName, cosiapi.DeletionPolicyDelete)
	aclass := objects.BucketAccessClass(unique("accessclass"), driverName)
	claim := objects.BucketClaim(namespace, unique("claim"), class.Name, objects.S3)
	ba := objects.BucketAccess(namespace, unique("access"), aclass.Name,
		objects.Grant(claim.Name, claim.Name+"-creds", objects.ReadWrite))
	mine := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: claim.Name + "-creds"},
		StringData: map[string]string{cosiapi.SecretKeyS3AccessKeyID: "mine", cosiapi.SecretKeyS3BucketName: "old"}}
	create(t, mine, class, aclass, claim, ba)
	for _, output := range []string{"", "json"} {
		code, out, errOut := run(t, viewer, "env", ba.Name, "-o", output)
		if code != 0 || !strings.Contains(strings.ToLower(out), "not written by cosi") {
			t.Errorf("env -o %q (exit %d) does not say that the Secret is not COSI's:\n%s%s", output, code, out, errOut)
		}
	}
}

// TestTextOutputEscapesControlCharacters: a tenant may write anything into the values of their
// Secrets and the messages of events in their namespace. Control characters in them (terminal
// escape sequences, carriage returns, newlines) must not reach an admin's terminal: they could
// hide or fake what the plugin prints.
func TestTextOutputEscapesControlCharacters(t *testing.T) {
	claim, ba := healthy(t)
	const evil = "http://x\x1b[2J\x1b[31mowned\x1b[0m\r\nAWS_SECRET_ACCESS_KEY=fake"
	key := types.NamespacedName{Namespace: namespace, Name: ba.Spec.BucketClaims[0].AccessSecretName}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := &corev1.Secret{}
		if err := env.Client.Get(t.Context(), key, s); err != nil {
			return err
		}
		s.Data[cosiapi.SecretKeyS3EndpointURL] = []byte(evil)
		return env.Client.Update(t.Context(), s)
	}); err != nil {
		t.Fatal(err)
	}
	create(t, &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: unique("event")},
		InvolvedObject: corev1.ObjectReference{Kind: "BucketClaim", APIVersion: cosiapi.SchemeGroupVersion.String(),
			Namespace: namespace, Name: claim.Name, UID: claim.UID},
		Reason: "Hello", Message: evil, Type: corev1.EventTypeNormal, LastTimestamp: metav1.Now(),
		Source: corev1.EventSource{Component: "tenant"},
	})
	for _, args := range [][]string{{"env", ba.Name}, {"status", "claim", claim.Name}} {
		_, out, _ := run(t, env.Config, args...)
		if strings.ContainsAny(out, "\x1b\r") || strings.Contains(out, "\nAWS_SECRET_ACCESS_KEY=fake") {
			t.Errorf("kubectl cosi %s prints control characters:\n%q", strings.Join(args, " "), out)
		}
	}
}
