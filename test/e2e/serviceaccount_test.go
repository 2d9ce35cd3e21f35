package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
)

// workload is what a Pod running as a ServiceAccount, with a BucketAccess Secret in envFrom and
// its projected token, reaches the bucket with: the Secret's endpoint and bucket, and credentials
// its AWS SDK's web identity provider gets by exchanging a token of the ServiceAccount for the
// Secret's role at the Secret's STS endpoint.
type workload struct {
	client *awss3.Client
	bucket string
	creds  aws.CredentialsProvider
}

// secretOf reads the Secret ns/name.
func secretOf(t *testing.T, ns, name string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// workloadOf builds the workload of ServiceAccount namespace/sa with the Secret s and a token the
// API server issued for audience, as the kubelet projects one. No exchange happens yet.
func workloadOf(t *testing.T, s *corev1.Secret, namespace, sa, audience string) *workload {
	t.Helper()
	token, err := env.ServiceAccountToken(t.Context(), namespace, sa, audience)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	creds, err := localenv.WebIdentityCredentials(s, file)
	if err != nil {
		t.Fatal(err)
	}
	c, bucket, err := localenv.S3ClientWith(s, creds)
	if err != nil {
		t.Fatal(err)
	}
	return &workload{client: c, bucket: bucket, creds: creds}
}

// exchange gets the workload's credentials (AssumeRoleWithWebIdentity) while the issuer is
// published, as the SDK does at the first request.
func (w *workload) exchange(t *testing.T) error {
	t.Helper()
	return front.Serve(t.Context(), func(ctx context.Context) error {
		_, err := w.creds.Retrieve(ctx)
		return err
	})
}

// TestServiceAccountAccess follows KEP-1979's ServiceAccount flow end to end: a BucketAccess of a
// ServiceAccount class names the workload's ServiceAccount; its Secret holds the bucket info and
// the role, no key; a workload of that ServiceAccount, with only the Secret and a token from the
// API server, puts and gets within its mode and is refused outside it; tokens of another
// ServiceAccount, of the same name in another namespace, or for another audience are refused;
// once the BucketAccess is deleted, the ServiceAccount's token is refused too and the session it
// had can no longer write.
func TestServiceAccountAccess(t *testing.T) {
	if noIssuer != nil {
		t.Skipf("no ServiceAccount issuer the store's IAM service can fetch here: %v", noIssuer)
	}
	ns := namespace(t)
	class := bucketClass(cosiapi.DeletionPolicyDelete, nil)
	saClass := accessClass(false)
	saClass.Spec.AuthenticationType = cosiapi.AuthenticationTypeServiceAccount
	c := claim(ns, class.Name)
	writer := access(ns, saClass.Name, readWrite, c)
	writer.Spec.ServiceAccountName = "writer"
	reader := access(ns, saClass.Name, readOnly, c)
	reader.Spec.ServiceAccountName = "reader"
	create(t, class, saClass, c, writer, reader)
	provisioned(t, c, writer, reader)

	s := secretOf(t, ns, writer.Name+"-0")
	for _, k := range []string{cosiapi.SecretKeyS3AccessKeyID, cosiapi.SecretKeyS3SecretAccessKey} {
		if _, ok := s.Data[k]; ok {
			t.Errorf("the Secret of a ServiceAccount access has %s", k)
		}
	}
	for _, k := range []string{cosiapi.SecretKeyS3RoleARN, cosiapi.SecretKeyS3WebIdentityTokenFile,
		cosiapi.SecretKeyS3STSEndpointURL, cosiapi.SecretKeyS3EndpointURL, cosiapi.SecretKeyS3BucketName} {
		if len(s.Data[k]) == 0 {
			t.Errorf("the Secret of a ServiceAccount access has no %s", k)
		}
	}

	audience := localenv.DriverName
	w := workloadOf(t, s, ns, "writer", audience)
	if err := w.exchange(t); err != nil {
		t.Fatalf("the writer's token exchange: %v", err)
	}
	expectAllowed(t, "the writer's put", put(w.client, w.bucket, "by-writer"))
	_, err := get(w.client, w.bucket, "by-writer")
	expectAllowed(t, "the writer's get", err)

	r := workloadOf(t, secretOf(t, ns, reader.Name+"-0"), ns, "reader", audience)
	if err := r.exchange(t); err != nil {
		t.Fatalf("the reader's token exchange: %v", err)
	}
	got, err := get(r.client, r.bucket, "by-writer")
	expectAllowed(t, "the reader's get", err)
	if got != "data of by-writer" {
		t.Errorf("the reader read %q", got)
	}
	expectDenied(t, "the reader's put", put(r.client, r.bucket, "by-reader"))

	for _, tc := range []struct{ what, namespace, sa, audience string }{
		{"another ServiceAccount of the namespace", ns, "reader", audience},
		{"the same name in another namespace", namespace(t), "writer", audience},
		{"the writer, for another audience", ns, "writer", "sts.amazonaws.com"},
	} {
		if err := workloadOf(t, s, tc.namespace, tc.sa, tc.audience).exchange(t); err == nil {
			t.Errorf("a token of %s was exchanged for the writer's role", tc.what)
		}
	}

	del(t, writer)
	waits.Gone(t, writer)
	if err := workloadOf(t, s, ns, "writer", audience).exchange(t); err == nil {
		t.Errorf("the writer's token was exchanged after its BucketAccess was deleted")
	}
	expectDenied(t, "the writer's put with the session it had before the deletion", put(w.client, w.bucket, "late"))
	_, err = get(r.client, r.bucket, "by-writer")
	expectAllowed(t, "the reader's get after the writer's access was deleted", err)
}
