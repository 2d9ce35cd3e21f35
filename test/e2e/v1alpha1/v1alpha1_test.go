// Package v1alpha1 runs KEP-1979's flows against a driver that speaks only the COSI v1alpha1
// protocol (cosi-driver-v1alpha1s3, built on the published
// sigs.k8s.io/container-object-storage-interface/proto module) as a process behind the real
// cosi-sidecar and cosi-controller, with the Versity gateway enforcing the keys it issues. The
// sidecar is not told the protocol: it detects it (docs/v1alpha1-drivers.md).
package v1alpha1

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/test/e2e/framework"
)

const driverName = "v1alpha1.s3.objectstorage.k8s.io"

var (
	fw    *framework.Framework
	env   *localenv.Env
	waits *testenv.Env
	admin *awss3.Client
)

func TestMain(m *testing.M) {
	// Verbosity 5: the driver calls' requests and responses are logged too (TestDriverCallsLogged).
	opts := localenv.Options{Driver: localenv.DriverV1alpha1S3, DriverName: driverName, Verbosity: 5, Metrics: true}
	testenv.RunSystem(m, opts, func(_ context.Context, e *localenv.Env) error {
		fw = framework.New(e, driverName, "v1a1")
		env, waits, admin = fw.Env, fw.Waits, fw.Admin
		return nil
	})
}

// The sidecar detected the protocol, and says so in its metrics.
func TestProtocolDetected(t *testing.T) {
	resp, err := http.Get("http://" + env.Sidecar.MetricsAddress + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	want := `cosi_sidecar_driver_protocol{driver_name="` + driverName + `",protocol="v1alpha1"} 1`
	if !strings.Contains(string(body), want) {
		t.Errorf("sidecar metrics lack %s", want)
	}
}

// A dynamic claim with the Delete policy: the bucket is created under the Bucket's name, a
// read-write key works on it and on nothing else, revocation stops the key, and deleting the claim
// deletes the bucket.
func TestDynamicDelete(t *testing.T) {
	ctx := t.Context()
	ns := namespace(t)
	bc := objects.BucketClass(
		unique("class"),
		driverName,
		cosiapi.DeletionPolicyDelete,
		objects.ClassParameters(map[string]string{s3.ParamPurgeOnDelete: "true"}),
	)
	bac := accessClass()
	c, other := claim(ns, bc.Name), claim(ns, bc.Name)
	create(t, bc, bac, c, other)
	provisioned(t, c, other)
	bucket := backendBucket(t, c)
	if bucket != c.Status.BoundBucketName {
		t.Errorf(
			"bucket ID %q, want the Bucket's name %q (the adapter's deterministic name)",
			bucket,
			c.Status.BoundBucketName,
		)
	}
	if ok, err := storeHasBucket(ctx, bucket); !ok {
		t.Fatalf("bucket %s is not in the store: %v", bucket, err)
	}

	a := access(ns, bac.Name, objects.ReadWrite, c)
	create(t, a)
	provisioned(t, a)
	s3c, name, secret := secretClient(t, ns, a.Spec.BucketClaims[0].AccessSecretName)
	if name != bucket {
		t.Errorf("Secret BUCKET_NAME %q, want %q", name, bucket)
	}
	keys := make([]string, 0, len(secret.Data))
	for k := range secret.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	wantKeys := []string{
		cosiapi.SecretKeyS3AccessKeyID,
		cosiapi.SecretKeyS3EndpointURL,
		cosiapi.SecretKeyS3Region,
		cosiapi.SecretKeyS3SecretAccessKey,
		cosiapi.SecretKeyS3BucketName,
		cosiapi.SecretKeyProtocol,
	}
	slices.Sort(wantKeys)
	if !slices.Equal(keys, wantKeys) {
		t.Errorf("Secret keys %v, want exactly %v", keys, wantKeys)
	}
	expectAllowed(t, "put", put(s3c, bucket, "a"))
	if got, err := get(s3c, bucket, "a"); err != nil || got != "data of a" {
		t.Errorf("get: %q, %v", got, err)
	}
	expectDenied(t, "put into the other claim's bucket", put(s3c, backendBucket(t, other), "a"))

	del(t, a)
	waits.Gone(t, a)
	testenv.Eventually(t, func() error {
		if err := put(s3c, bucket, "b"); !denied(err) {
			return fmt.Errorf("put with the revoked key: %w, want denied", err)
		}
		return nil
	})

	del(t, c)
	waits.Gone(t, c)
	testenv.Eventually(t, func() error {
		if ok, err := storeHasBucket(ctx, bucket); ok || err != nil {
			return fmt.Errorf(
				"bucket %s still in the store (%w) after its claim was deleted with the Delete policy",
				bucket,
				err,
			)
		}
		return nil
	})
	del(t, other)
}

// A dynamic claim with the Retain policy keeps its bucket.
func TestDynamicRetain(t *testing.T) {
	ns := namespace(t)
	bc := objects.BucketClass(unique("class"), driverName, cosiapi.DeletionPolicyRetain)
	c := claim(ns, bc.Name)
	create(t, bc, c)
	provisioned(t, c)
	bucket := backendBucket(t, c)
	del(t, c)
	waits.Gone(t, c)
	testenv.Never(t, 3e9, func() error {
		if ok, err := storeHasBucket(t.Context(), bucket); !ok {
			return fmt.Errorf("bucket %s left the store with the Retain policy: %w", bucket, err)
		}
		return nil
	})
}

// A static claim: v1alpha1 cannot look the bucket up, and the condition says so, on the Bucket and
// its claim; a read-write key works on the existing data; Retain keeps the bucket.
func TestStaticBucket(t *testing.T) {
	ctx := t.Context()
	ns := namespace(t)
	existing := unique("existing")
	if _, err := admin.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(existing)}); err != nil {
		t.Fatal(err)
	}
	if err := put(admin, existing, "report.csv"); err != nil {
		t.Fatal(err)
	}
	bac := accessClass()
	c := &cosiapi.BucketClaim{
		ObjectMeta: metav1.ObjectMeta{Name: unique("legacy"), Namespace: ns},
		Spec: cosiapi.BucketClaimSpec{
			ExistingBucketName: unique("static"),
			Protocols:          []cosiapi.Protocol{cosiapi.ProtocolS3},
		},
	}
	b := &cosiapi.Bucket{
		ObjectMeta: metav1.ObjectMeta{Name: c.Spec.ExistingBucketName},
		Spec: cosiapi.BucketSpec{
			DriverName:       driverName,
			DeletionPolicy:   cosiapi.DeletionPolicyRetain,
			ExistingBucketID: existing,
			Protocols: []cosiapi.Protocol{
				cosiapi.ProtocolS3,
			},
			BucketClaimRef: cosiapi.BucketClaimReference{Name: c.Name, Namespace: ns},
		},
	}
	create(t, bac, b, c)
	unverified(t, b, c)
	a := access(ns, bac.Name, objects.ReadWrite, c)
	create(t, a)
	provisioned(t, a)
	s3c, _, _ := secretClient(t, ns, a.Spec.BucketClaims[0].AccessSecretName)
	if got, err := get(s3c, existing, "report.csv"); err != nil || got != "data of report.csv" {
		t.Errorf("get of the existing data: %q, %v", got, err)
	}
	expectAllowed(t, "put", put(s3c, existing, "new"))
	del(t, a)
	waits.Gone(t, a)
	del(t, c)
	waits.Gone(t, c)
	if ok, err := storeHasBucket(ctx, existing); !ok {
		t.Errorf("the imported bucket left the store (Retain): %v", err)
	}
}

// unverified waits until the static Bucket b and its claim c are Provisioned with the reason that
// says nothing was verified, and checks that the message says why.
func unverified(t *testing.T, b *cosiapi.Bucket, c *cosiapi.BucketClaim) {
	t.Helper()
	cond := testenv.Condition(t, waits, b, func(b *cosiapi.Bucket) []metav1.Condition { return b.Status.Conditions },
		cosiapi.ConditionProvisioned, metav1.ConditionTrue, cosiapi.ReasonImportedUnverified)
	if !strings.Contains(cond.Message, "v1alpha1") || !strings.Contains(cond.Message, "without a check") {
		t.Errorf("static Bucket's Provisioned message %q does not say that nothing was checked", cond.Message)
	}
	testenv.Condition(t, waits, c, framework.ClaimConditions,
		cosiapi.ConditionProvisioned, metav1.ConditionTrue, cosiapi.ReasonImportedUnverified)
}

// A static Bucket whose existingBucketID names no bucket: v1alpha1 cannot look it up, so the Bucket
// and its claim do not say Provisioned as a checked bucket does (ReasonProvisioned) but that
// nothing was verified; the first grant asks the backend, and the access says the bucket is not
// there, with no Secret.
func TestStaticBucketWithAWrongID(t *testing.T) {
	ns := namespace(t)
	missing := unique("missing")
	bac := accessClass()
	c := &cosiapi.BucketClaim{
		ObjectMeta: metav1.ObjectMeta{Name: unique("typo"), Namespace: ns},
		Spec: cosiapi.BucketClaimSpec{
			ExistingBucketName: unique("static"), Protocols: []cosiapi.Protocol{cosiapi.ProtocolS3},
		},
	}
	b := &cosiapi.Bucket{
		ObjectMeta: metav1.ObjectMeta{Name: c.Spec.ExistingBucketName},
		Spec: cosiapi.BucketSpec{
			DriverName: driverName, DeletionPolicy: cosiapi.DeletionPolicyRetain, ExistingBucketID: missing,
			Protocols:      []cosiapi.Protocol{cosiapi.ProtocolS3},
			BucketClaimRef: cosiapi.BucketClaimReference{Name: c.Name, Namespace: ns},
		},
	}
	create(t, bac, b, c)
	unverified(t, b, c)
	a := access(ns, bac.Name, objects.ReadWrite, c)
	create(t, a)
	cond := testenv.Condition(t, waits, a, framework.AccessConditions,
		cosiapi.ConditionProvisionFailed, metav1.ConditionTrue, cosiapi.ReasonDriverError)
	if !strings.Contains(cond.Message, missing) || !strings.Contains(cond.Message, "NotFound") {
		t.Errorf("the access's ProvisionFailed message %q does not say that bucket %s is not there", cond.Message, missing)
	}
	secret := &corev1.Secret{}
	if err := env.Client.Get(t.Context(),
		client.ObjectKey{Namespace: ns, Name: a.Spec.BucketClaims[0].AccessSecretName}, secret); err == nil {
		t.Errorf("a Secret was written for an access to a bucket that does not exist")
	}
	del(t, a)
	waits.Gone(t, a)
	del(t, c)
	waits.Gone(t, c)
}

// What a v1alpha1 grant cannot express is refused with a final condition, never widened: a
// read-only access (the class declares the driver's read-write), and an access to two buckets.
func TestRefusedAccesses(t *testing.T) {
	ns := namespace(t)
	bc := objects.BucketClass(unique("class"), driverName, cosiapi.DeletionPolicyDelete)
	bac, multi := accessClass(), accessClass()
	objects.MultiBucket(multi)
	one, two := claim(ns, bc.Name), claim(ns, bc.Name)
	create(t, bc, bac, multi, one, two)
	provisioned(t, one, two)

	ro := access(ns, bac.Name, objects.ReadOnly, one)
	both := access(ns, multi.Name, objects.ReadWrite, one, two)
	create(t, ro, both)
	for _, tc := range []struct {
		a    *cosiapi.BucketAccess
		want string
	}{{ro, "objectData ReadOnly (the class grants ReadWrite)"}, {both, "OutOfRange"}} {
		cond := testenv.Condition(
			t,
			waits,
			tc.a,
			func(a *cosiapi.BucketAccess) []metav1.Condition { return a.Status.Conditions },
			cosiapi.ConditionProvisioned,
			metav1.ConditionFalse,
			cosiapi.ReasonProvisioningFailed,
		)
		if !strings.Contains(cond.Message, tc.want) {
			t.Errorf("%s: Provisioned message %q, want it to contain %q", tc.a.Name, cond.Message, tc.want)
		}
		secret := &corev1.Secret{}
		if err := env.Client.Get(
			t.Context(),
			client.ObjectKey{Namespace: ns, Name: tc.a.Spec.BucketClaims[0].AccessSecretName},
			secret,
		); err == nil {
			t.Errorf("%s: a Secret was written for a refused access", tc.a.Name)
		}
	}
	del(t, ro)
	del(t, both)
	waits.Gone(t, ro)
	waits.Gone(t, both)
	del(t, one)
	del(t, two)
}

// The suite's names for the framework (test/e2e/framework), shared with test/e2e.

var (
	unique        = framework.Unique
	claim         = framework.Claim
	access        = framework.Access
	put, get      = framework.Put, framework.Get
	denied        = framework.Denied
	expectAllowed = framework.ExpectAllowed
	expectDenied  = framework.ExpectDenied
)

func namespace(t *testing.T) string                   { return fw.Namespace(t) }
func create(t *testing.T, objs ...client.Object)      { t.Helper(); fw.Create(t, objs...) }
func del(t *testing.T, o client.Object)               { t.Helper(); fw.Delete(t, o) }
func provisioned(t *testing.T, objs ...client.Object) { t.Helper(); fw.Provisioned(t, objs...) }
func accessClass() *cosiapi.BucketAccessClass         { return fw.AccessClass(false) }

func backendBucket(t *testing.T, c *cosiapi.BucketClaim) string { return fw.BackendBucket(t, c) }

func storeHasBucket(ctx context.Context, bucket string) (bool, error) {
	return fw.StoreHasBucket(ctx, bucket)
}

func secretClient(t *testing.T, ns, name string) (*awss3.Client, string, *corev1.Secret) {
	t.Helper()
	return fw.SecretClient(t, ns, name)
}
