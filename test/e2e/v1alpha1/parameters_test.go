package v1alpha1

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/drivers/v1alpha1s3"
	"github.com/kube-cosi/cosi/internal/migrate"
	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
	"github.com/kube-cosi/cosi/test/e2e/framework"
)

// A read-only class of a v1alpha1 driver, as docs/v1alpha1-drivers.md tells admins to write it:
// the driver's own parameter makes it grant read-only keys, and the adapter's reserved parameter
// objectstorage.k8s.io/v1alpha1-access-modes declares that to the sidecar. The sidecar passes the
// declaration to the adapter (not refused as an unknown COSI parameter, not handed to the driver),
// a read-only access gets a key that reads the bucket and that the store refuses a write, and a
// read-write access on the class is refused, never widened.
func TestReadOnlyClass(t *testing.T) {
	ns := namespace(t)
	bc := objects.BucketClass(unique("class"), driverName, cosiapi.DeletionPolicyDelete)
	bac := accessClass()
	bac.Spec.Parameters = map[string]string{
		v1alpha1.ParameterAccessModes: "objectData=ReadOnly",
		v1alpha1s3.ParamReadOnly:      "true",
	}
	c := claim(ns, bc.Name)
	create(t, bc, bac, c)
	provisioned(t, c)
	bucket := backendBucket(t, c)
	if err := put(admin, bucket, "report.csv"); err != nil {
		t.Fatal(err)
	}

	ro := access(ns, bac.Name, objects.ReadOnly, c)
	rw := access(ns, bac.Name, objects.ReadWrite, c)
	create(t, ro, rw)
	provisioned(t, ro)
	s3c, _, _ := secretClient(t, ns, ro.Spec.BucketClaims[0].AccessSecretName)
	if got, err := get(s3c, bucket, "report.csv"); err != nil || got != "data of report.csv" {
		t.Errorf("get with the read-only key: %q, %v", got, err)
	}
	expectDenied(t, "put with the read-only key", put(s3c, bucket, "new"))

	cond := testenv.Condition(t, waits, rw, framework.AccessConditions,
		cosiapi.ConditionProvisioned, metav1.ConditionFalse, cosiapi.ReasonProvisioningFailed)
	if want := "objectData ReadWrite (the class grants ReadOnly)"; !strings.Contains(cond.Message, want) {
		t.Errorf("the read-write access's Provisioned message %q does not say %q", cond.Message, want)
	}
	noSecret(t, rw)

	del(t, ro)
	del(t, rw)
	waits.Gone(t, ro)
	waits.Gone(t, rw)
	testenv.Eventually(t, func() error {
		if _, err := get(s3c, bucket, "report.csv"); !denied(err) {
			return fmt.Errorf("get with the revoked key: %w, want denied", err)
		}
		return nil
	})
	if _, err := admin.DeleteObject(t.Context(),
		&awss3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String("report.csv")}); err != nil {
		t.Fatal(err)
	}
	del(t, c)
	waits.Gone(t, c)
}

// The adapter's S3 fallbacks on a class of the reference driver, which returns the store's
// endpoint and region itself. The sidecar passes the class's objectstorage.k8s.io/v1alpha1-s3-endpoint
// and -s3-region to the adapter (not refused as unknown COSI parameters), the adapter removes them
// before the driver (which refuses keys it does not know), and the driver's values win over them:
// the Secret names the store, and its key writes there.
func TestFallbackParametersLoseToTheDriversValues(t *testing.T) {
	ns := namespace(t)
	bc := objects.BucketClass(unique("class"), driverName, cosiapi.DeletionPolicyDelete,
		objects.ClassParameters(map[string]string{s3.ParamPurgeOnDelete: "true"}))
	bac := accessClass()
	bac.Spec.Parameters = map[string]string{
		v1alpha1.ParameterS3Endpoint: "https://fallback.example.com",
		v1alpha1.ParameterS3Region:   "fallback-1",
	}
	c := claim(ns, bc.Name)
	create(t, bc, bac, c)
	provisioned(t, c)
	a := access(ns, bac.Name, objects.ReadWrite, c)
	create(t, a)
	provisioned(t, a)
	s3c, bucket, secret := secretClient(t, ns, a.Spec.BucketClaims[0].AccessSecretName)
	for _, k := range []string{cosiapi.SecretKeyS3EndpointURL, cosiapi.SecretKeyS3Region} {
		if got := string(secret.Data[k]); got == "" || strings.Contains(got, "fallback") {
			t.Errorf("Secret %s is %q, want the driver's value", k, got)
		}
	}
	expectAllowed(t, "put with the access's key", put(s3c, bucket, "a"))

	del(t, a)
	waits.Gone(t, a)
	del(t, c)
	waits.Gone(t, c)
}

// A v1alpha1 installation migrated as docs/v1alpha1-drivers.md says: its objects are in a cluster
// with the v1alpha1 CRDs (internal/migrate/testdata), the cosi-migrate binary prints their
// v1alpha2 equivalents, and kubectl applies them to this cluster, where the same driver runs behind
// the sidecar. The converted access class carries the adapter's reserved parameter (cosi-migrate
// writes it into every class it converts): the migrated access is granted, and its new Secret's key
// reads the data the bucket already held and writes.
func TestMigratedInstallation(t *testing.T) {
	ctx := t.Context()
	ns := namespace(t)
	existing := unique("legacy-data")
	if _, err := admin.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(existing)}); err != nil {
		t.Fatal(err)
	}
	if err := put(admin, existing, "report.csv"); err != nil {
		t.Fatal(err)
	}

	// envtest logs through controller-runtime's global logger, which would otherwise print a stack
	// trace saying it was never set (testenv.Start does the same).
	ctrllog.SetLogger(logr.Discard())
	old, err := localenv.StartAPIServer(localenv.APIServerOptions{
		CRDPaths: []string{filepath.Join(env.RepoRoot, "internal", "migrate", "testdata", "v1alpha1-crds.yaml")},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := old.Stop(); err != nil {
			t.Error(err)
		}
	})
	if err := old.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	bcName, bacName, bucketName := unique("legacy-class"), unique("legacy-access-class"), unique("legacy-bucket")
	for _, o := range []*unstructured.Unstructured{
		v1alpha1Object("BucketClass", "", bcName, map[string]any{
			"driverName": driverName, "deletionPolicy": "Retain",
		}),
		v1alpha1Object("BucketAccessClass", "", bacName, map[string]any{
			"driverName": driverName, "authenticationType": "Key",
		}),
		v1alpha1Object("Bucket", "", bucketName, map[string]any{"spec": map[string]any{
			"driverName": driverName, "bucketClassName": bcName, "protocols": []any{"s3"},
			"deletionPolicy": "Retain", "bucketClaim": map[string]any{"name": "data", "namespace": ns},
		}}),
		v1alpha1Object("BucketClaim", ns, "data", map[string]any{"spec": map[string]any{
			"bucketClassName": bcName, "protocols": []any{"s3"},
		}}),
		v1alpha1Object("BucketAccess", ns, "writer", map[string]any{"spec": map[string]any{
			"bucketClaimName": "data", "bucketAccessClassName": bacName, "credentialsSecretName": "data-creds",
			"protocol": "s3",
		}}),
	} {
		if err := old.Client.Create(ctx, o); err != nil {
			t.Fatalf("creating v1alpha1 %s: %v", o.GetKind(), err)
		}
		if o.GetKind() == "Bucket" {
			status := map[string]any{"bucketReady": true, "bucketID": existing}
			if err := unstructured.SetNestedField(o.Object, status, "status"); err != nil {
				t.Fatal(err)
			}
			if err := old.Client.Status().Update(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	oldKubeconfig := filepath.Join(t.TempDir(), "old.kubeconfig")
	if err := old.WriteAdminKubeconfig(oldKubeconfig); err != nil {
		t.Fatal(err)
	}

	converted := run(t, nil, filepath.Join(env.BinDir, "cosi-migrate"),
		"--from-kubeconfig", oldKubeconfig, "--secret-suffix", "-v2")
	if !strings.Contains(converted, v1alpha1.ParameterAccessModes) {
		t.Fatalf("cosi-migrate's access class does not declare the driver's modes (%s):\n%s",
			v1alpha1.ParameterAccessModes, converted)
	}
	run(t, strings.NewReader(converted), filepath.Join(env.BinDir, "kubectl"),
		"--kubeconfig", env.Kubeconfig, "apply", "-f", "-")

	c := &cosiapi.BucketClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data"}}
	a := &cosiapi.BucketAccess{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "writer"}}
	testenv.Condition(t, waits, c, framework.ClaimConditions,
		cosiapi.ConditionProvisioned, metav1.ConditionTrue, cosiapi.ReasonImportedUnverified)
	provisioned(t, a)
	s3c, name, _ := secretClient(t, ns, "data-creds-v2")
	if name != existing {
		t.Errorf("Secret BUCKET_NAME %q, want the migrated bucket %q", name, existing)
	}
	if got, err := get(s3c, existing, "report.csv"); err != nil || got != "data of report.csv" {
		t.Errorf("get of the data the bucket held before the migration: %q, %v", got, err)
	}
	expectAllowed(t, "put with the migrated access's key", put(s3c, existing, "after-migration"))

	del(t, a)
	waits.Gone(t, a)
	del(t, c)
	waits.Gone(t, c)
	if ok, err := storeHasBucket(ctx, existing); !ok {
		t.Errorf("the migrated bucket left the store (Retain): %v", err)
	}
	for _, o := range []client.Object{
		&cosiapi.BucketClass{ObjectMeta: metav1.ObjectMeta{Name: bcName}},
		&cosiapi.BucketAccessClass{ObjectMeta: metav1.ObjectMeta{Name: bacName}},
	} {
		del(t, o)
	}
}

// v1alpha1Object is an object of the upstream v1alpha1 release, as cosi-migrate reads them.
func v1alpha1Object(kind, ns, name string, fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: fields}
	u.SetGroupVersionKind(migrate.V1alpha1.WithKind(kind))
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// run runs a command with stdin and returns its standard output; it fails t if the command fails.
func run(t *testing.T, stdin *strings.Reader, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// noSecret fails t if the first Secret of access a exists.
func noSecret(t *testing.T, a *cosiapi.BucketAccess) {
	t.Helper()
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: a.Namespace, Name: a.Spec.BucketClaims[0].AccessSecretName}
	if err := env.Client.Get(t.Context(), key, secret); err == nil {
		t.Errorf("%s: a Secret was written for a refused access", a.Name)
	}
}
