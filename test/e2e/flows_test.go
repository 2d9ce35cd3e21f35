package e2e

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/drivers/s3"
)

// Install: the five CRDs are established, and every example manifest is accepted by the API
// server as it is (server-side dry run).
func TestInstall(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	crds, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"buckets", "bucketclaims", "bucketclasses", "bucketaccesses", "bucketaccessclasses"} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := crds.Get(t.Context(), client.ObjectKey{Name: kind + "." + cosiapi.GroupName}, crd); err != nil {
			t.Fatalf("CRD %s: %v", kind, err)
		}
		established := false
		for _, c := range crd.Status.Conditions {
			established = established || (c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue)
		}
		if !established {
			t.Errorf("CRD %s is not established", kind)
		}
	}
	files, err := filepath.Glob(filepath.Join(env.RepoRoot, "examples", "*.yaml"))
	if err != nil || len(files) < 8 {
		t.Fatalf("examples: %v %v", files, err)
	}
	azure, err := filepath.Glob(filepath.Join(env.RepoRoot, "examples", "azure", "*.yaml"))
	if err != nil || len(azure) < 4 {
		t.Fatalf("examples/azure: %v %v", azure, err)
	}
	files = append(files, azure...)
	for _, f := range files {
		objs, err := localenv.ReadManifests(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.GetKind() == "Namespace" {
				continue
			}
			o.SetNamespace(map[bool]string{true: "default"}[o.GetNamespace() != ""])
			if err := env.Client.Create(t.Context(), o, client.DryRunAll); err != nil {
				t.Errorf("%s: %s %s is rejected: %v", filepath.Base(f), o.GetKind(), o.GetName(), err)
			}
		}
	}
}

// Create, grant, blocked deletion, revoke, delete with the Delete policy.
func TestDynamicBucketLifecycle(t *testing.T) {
	ctx := t.Context()
	ns := namespace(t)
	bc, bac := bucketClass(
		cosiapi.DeletionPolicyDelete,
		map[string]string{s3.ParamPurgeOnDelete: "true"},
	), accessClass(
		false,
	)
	c, other := claim(ns, bc.Name), claim(ns, bc.Name)
	create(t, bc, bac, c, other)
	provisioned(t, c, other)
	bucket := backendBucket(t, c)
	if ok, err := storeHasBucket(ctx, bucket); !ok {
		t.Fatalf("bucket %s is not in the store after Provisioned: %v", bucket, err)
	}

	// Grant: a Secret with exactly the S3 keys, whose credentials work on this bucket only.
	a := access(ns, bac.Name, readWrite, c)
	create(t, a)
	provisioned(t, a)
	s3c, name, secret := secretClient(t, ns, a.Spec.BucketClaims[0].AccessSecretName)
	wantKeys := []string{
		cosiapi.SecretKeyProtocol,
		cosiapi.SecretKeyS3EndpointURL,
		cosiapi.SecretKeyS3BucketName,
		cosiapi.SecretKeyS3Region,
		cosiapi.SecretKeyS3AddressingStyle,
		cosiapi.SecretKeyS3AccessKeyID,
		cosiapi.SecretKeyS3SecretAccessKey,
	}
	if keys := slices.Sorted(maps.Keys(secret.Data)); !slices.Equal(keys, slices.Sorted(slices.Values(wantKeys))) {
		t.Errorf("Secret keys %v, want %v", keys, wantKeys)
	}
	if name != bucket || string(secret.Data[cosiapi.SecretKeyS3EndpointURL]) != env.Store.S3Endpoint {
		t.Errorf(
			"Secret names bucket %q at %q, want %q at %q",
			name,
			secret.Data[cosiapi.SecretKeyS3EndpointURL],
			bucket,
			env.Store.S3Endpoint,
		)
	}
	expectAllowed(t, "put with the Secret's key", put(s3c, bucket, "hello"))
	if got, err := get(s3c, bucket, "hello"); err != nil || got != "data of hello" {
		t.Errorf("get with the Secret's key: %q, %v", got, err)
	}
	expectDenied(t, "put into another claim's bucket", put(s3c, backendBucket(t, other), "x"))

	// Deleting the claim is blocked while an access uses it; the bucket and data stay.
	del(t, c)
	testenv.Condition(
		t,
		waits,
		c,
		claimConditions,
		cosiapi.ConditionProvisioned,
		metav1.ConditionTrue,
		cosiapi.ReasonDeletionBlocked,
	)
	if _, err := get(s3c, bucket, "hello"); err != nil {
		t.Errorf("the data while deletion is blocked: %v", err)
	}

	// Revoke: the Secret goes, the key stops working.
	del(t, a)
	waits.Gone(t, a)
	waits.Gone(t, secret)
	testenv.Eventually(t, func() error {
		if err := put(s3c, bucket, "after-revoke"); !denied(err) {
			return errorf("put after revoke: %v, want denied", err)
		}
		return nil
	})

	// Then the claim's deletion proceeds, and with Delete the bucket leaves the store.
	waits.Gone(t, c)
	testenv.Eventually(t, func() error {
		if ok, err := storeHasBucket(ctx, bucket); ok || err != nil {
			return errorf("bucket %s still in the store (%v)", bucket, err)
		}
		return nil
	})
}

// Delete with the Retain policy: the claim goes, the bucket and its objects stay in the store.
func TestRetain(t *testing.T) {
	ns := namespace(t)
	bc, bac := bucketClass(cosiapi.DeletionPolicyRetain, nil), accessClass(false)
	c := claim(ns, bc.Name)
	create(t, bc, bac, c)
	provisioned(t, c)
	bucket := backendBucket(t, c)
	a := access(ns, bac.Name, readWrite, c)
	create(t, a)
	provisioned(t, a)
	s3c, _, _ := secretClient(t, ns, a.Spec.BucketClaims[0].AccessSecretName)
	expectAllowed(t, "put", put(s3c, bucket, "keep-me"))

	del(t, a)
	waits.Gone(t, a)
	del(t, c)
	waits.Gone(t, c)
	testenv.Never(t, 2*time.Second, func() error {
		out, err := admin.GetObject(
			t.Context(),
			&awss3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("keep-me")},
		)
		if err != nil {
			return errorf("the retained object: %v", err)
		}
		out.Body.Close()
		return nil
	})
}

// Static import: an existing bucket with data, imported as a Bucket and claimed; read-only access
// reads it and cannot write; deleting (Retain) leaves it.
func TestStaticBucket(t *testing.T) {
	ctx := t.Context()
	ns := namespace(t)
	existing := unique("legacy")
	if _, err := admin.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(existing)}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.PutObject(
		ctx,
		&awss3.PutObjectInput{Bucket: aws.String(existing), Key: aws.String("report.csv"), Body: strings.NewReader("a,b")},
	); err != nil {
		t.Fatal(err)
	}
	bac := accessClass(false)
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
			DriverName:       localenv.DriverName,
			DeletionPolicy:   cosiapi.DeletionPolicyRetain,
			ExistingBucketID: existing,
			Protocols: []cosiapi.Protocol{
				cosiapi.ProtocolS3,
			},
			BucketClaimRef: cosiapi.BucketClaimReference{Name: c.Name, Namespace: ns},
		},
	}
	create(t, bac, b, c)
	provisioned(t, c)
	a := access(ns, bac.Name, readOnly, c)
	create(t, a)
	provisioned(t, a)
	s3c, bucket, _ := secretClient(t, ns, a.Spec.BucketClaims[0].AccessSecretName)
	if bucket != existing {
		t.Errorf("Secret BUCKET_NAME %q, want %q", bucket, existing)
	}
	if got, err := get(s3c, existing, "report.csv"); err != nil || got != "a,b" {
		t.Errorf("read-only get of the existing data: %q, %v", got, err)
	}
	expectDenied(t, "read-only put", put(s3c, existing, "x"))

	del(t, a)
	waits.Gone(t, a)
	del(t, c)
	waits.Gone(t, c)
	if ok, err := storeHasBucket(ctx, existing); !ok {
		t.Errorf("the imported bucket left the store after its claim was deleted (Retain): %v", err)
	}
}

// Multi-bucket grant: one key in one Secret per bucket, working on both and nothing else.
func TestMultiBucketAccess(t *testing.T) {
	ns := namespace(t)
	bc, bac := bucketClass(
		cosiapi.DeletionPolicyDelete,
		map[string]string{s3.ParamPurgeOnDelete: "true"},
	), accessClass(
		true,
	)
	one, two, three := claim(ns, bc.Name), claim(ns, bc.Name), claim(ns, bc.Name)
	create(t, bc, bac, one, two, three)
	provisioned(t, one, two, three)
	a := access(ns, bac.Name, readWrite, one, two)
	create(t, a)
	provisioned(t, a)
	c1, b1, s1 := secretClient(t, ns, a.Spec.BucketClaims[0].AccessSecretName)
	c2, b2, s2 := secretClient(t, ns, a.Spec.BucketClaims[1].AccessSecretName)
	if string(s1.Data[cosiapi.SecretKeyS3AccessKeyID]) != string(s2.Data[cosiapi.SecretKeyS3AccessKeyID]) || b1 == b2 {
		t.Errorf("want one key and two buckets; have buckets %s, %s", b1, b2)
	}
	expectAllowed(t, "put into the first bucket", put(c1, b1, "x"))
	expectAllowed(t, "put into the second bucket", put(c2, b2, "x"))
	expectDenied(t, "put into a third bucket", put(c1, backendBucket(t, three), "x"))

	// A class that allows one bucket per access refuses two, and the driver is never asked.
	single := accessClass(false)
	create(t, single)
	refused := access(ns, single.Name, readWrite, one, two)
	create(t, refused)
	testenv.Condition(
		t,
		waits,
		refused,
		accessConditions,
		cosiapi.ConditionResourcesValidated,
		metav1.ConditionFalse,
		cosiapi.ReasonForbiddenByClass,
	)
	if refused.Status.AccountID != "" {
		t.Errorf("the refused access has an account %q", refused.Status.AccountID)
	}
}

// A class that disallows writes refuses a ReadWrite access with a condition naming the mode.
func TestDisallowedAccessMode(t *testing.T) {
	ns := namespace(t)
	bc := bucketClass(cosiapi.DeletionPolicyDelete, nil)
	bac := accessClass(false)
	bac.Spec.DisallowedBucketAccessModes.ObjectData = []cosiapi.BucketAccessMode{
		cosiapi.BucketAccessModeReadWrite,
		cosiapi.BucketAccessModeWriteOnly,
	}
	c := claim(ns, bc.Name)
	create(t, bc, bac, c)
	provisioned(t, c)
	a := access(ns, bac.Name, readWrite, c)
	create(t, a)
	cond := testenv.Condition(
		t,
		waits,
		a,
		accessConditions,
		cosiapi.ConditionResourcesValidated,
		metav1.ConditionFalse,
		cosiapi.ReasonForbiddenByClass,
	)
	if !strings.Contains(cond.Message, "ReadWrite") {
		t.Errorf("condition message %q does not name the disallowed mode", cond.Message)
	}
	ok := access(ns, bac.Name, readOnly, c)
	create(t, ok)
	provisioned(t, ok)
}

// A driver error reaches the user: a class with a misspelt parameter leaves the claim failed,
// with the driver's message in the condition and an event, and nothing in the store.
func TestDriverErrorIsVisible(t *testing.T) {
	ns := namespace(t)
	bc := bucketClass(cosiapi.DeletionPolicyDelete, map[string]string{"versoning": "true"})
	c := claim(ns, bc.Name)
	create(t, bc, c)
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		for _, cond := range c.Status.Conditions {
			if cond.Type == cosiapi.ConditionProvisioned && cond.Status == metav1.ConditionFalse &&
				strings.Contains(cond.Message, "versoning") {
				return nil
			}
		}
		return errorf("claim conditions %+v do not name the parameter", c.Status.Conditions)
	})
	b := &cosiapi.Bucket{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: c.Status.BoundBucketName}, b); err != nil {
		t.Fatal(err)
	}
	if note := event(t, b, cosiapi.EventFailedCreateBucket); !strings.Contains(note, "versoning") {
		t.Errorf("event %q does not name the parameter", note)
	}
	del(t, c)
	waits.Gone(t, c)
}

// Classes deleted after provisioning: the claim and access keep working, and deletion still
// follows the policy the Bucket recorded.
func TestClassDeletedAfterProvisioning(t *testing.T) {
	ctx := t.Context()
	ns := namespace(t)
	bc, bac := bucketClass(
		cosiapi.DeletionPolicyDelete,
		map[string]string{s3.ParamPurgeOnDelete: "true"},
	), accessClass(
		false,
	)
	c := claim(ns, bc.Name)
	create(t, bc, bac, c)
	provisioned(t, c)
	a := access(ns, bac.Name, readWrite, c)
	create(t, a)
	provisioned(t, a)
	bucket := backendBucket(t, c)
	del(t, bc)
	del(t, bac)
	waits.Gone(t, bc)
	waits.Gone(t, bac)

	s3c, _, _ := secretClient(t, ns, a.Spec.BucketClaims[0].AccessSecretName)
	expectAllowed(t, "put after the classes are gone", put(s3c, bucket, "x"))
	del(t, a)
	waits.Gone(t, a)
	del(t, c)
	waits.Gone(t, c)
	testenv.Eventually(t, func() error {
		if ok, err := storeHasBucket(ctx, bucket); ok || err != nil {
			return errorf("bucket %s still in the store (%v)", bucket, err)
		}
		return nil
	})
}

// Restarting each process while objects are provisioned and deleted changes nothing visible
// but time: every claim and access ends Provisioned with working credentials, every deletion
// completes, and the store holds exactly one bucket per claim.
func TestRestartsMidFlow(t *testing.T) {
	ctx := t.Context()
	ns := namespace(t)
	bc, bac := bucketClass(
		cosiapi.DeletionPolicyDelete,
		map[string]string{s3.ParamPurgeOnDelete: "true"},
	), accessClass(
		false,
	)
	create(t, bc, bac)
	var claims []*cosiapi.BucketClaim
	var accesses []*cosiapi.BucketAccess
	for range 6 {
		c := claim(ns, bc.Name)
		claims = append(claims, c)
		accesses = append(accesses, access(ns, bac.Name, readWrite, c))
	}
	for i, p := range []*localenv.Component{env.Driver, env.Sidecar, env.Controller} {
		create(t, claims[2*i], accesses[2*i], claims[2*i+1], accesses[2*i+1])
		if err := env.Restart(ctx, p); err != nil {
			t.Fatalf("restarting %s: %v", p.Name, err)
		}
	}
	for i := range claims {
		provisioned(t, claims[i], accesses[i])
		s3c, bucket, _ := secretClient(t, ns, accesses[i].Spec.BucketClaims[0].AccessSecretName)
		expectAllowed(t, "put with access "+accesses[i].Name, put(s3c, bucket, "x"))
	}
	out, err := admin.ListBuckets(ctx, &awss3.ListBucketsInput{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		n := 0
		for _, b := range out.Buckets {
			if aws.ToString(b.Name) == backendBucket(t, c) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("claim %s has %d buckets in the store, want 1", c.Name, n)
		}
	}

	// Delete everything with restarts in between.
	for i, p := range []*localenv.Component{env.Controller, env.Sidecar, env.Driver} {
		for _, o := range []client.Object{accesses[2*i], accesses[2*i+1], claims[2*i], claims[2*i+1]} {
			del(t, o)
		}
		if err := env.Restart(ctx, p); err != nil {
			t.Fatalf("restarting %s: %v", p.Name, err)
		}
	}
	for i := range claims {
		waits.Gone(t, accesses[i])
		waits.Gone(t, claims[i])
	}
	secrets := &corev1.SecretList{}
	if err := env.Client.List(ctx, secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 {
		t.Errorf("%d Secrets left in %s", len(secrets.Items), ns)
	}
}
