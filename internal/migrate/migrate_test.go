package migrate_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/migrate"
	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Run(m, func(_ context.Context, e *testenv.Env) error { env = e; return nil })
}

func obj(kind, ns, name string, fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: fields}
	u.SetGroupVersionKind(migrate.V1alpha1.WithKind(kind))
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// The migration as an admin runs it: v1alpha1 objects in the API server (v1alpha1 CRDs), read and
// converted; dry-run changes nothing; after the CRDs are replaced by v1alpha2's, the converted
// objects are accepted by the v1alpha2 API (its CEL rules) and created.
func TestMigrate(t *testing.T) {
	ctx := t.Context()
	root, err := localenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	scheme := env.Scheme
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	env.RemoveCRDs(t, cosiapi.GroupName)
	if _, err := envtest.InstallCRDs(
		env.Config,
		envtest.CRDInstallOptions{Paths: []string{filepath.Join("testdata", "v1alpha1-crds.yaml")}, MaxTime: time.Minute},
	); err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{}
	ns.Name = "app"
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, o := range []*unstructured.Unstructured{
		obj("BucketClass", "", "standard", map[string]any{
			"driverName": "s3.vendor.example.com", "deletionPolicy": "Delete", "parameters": map[string]any{"tier": "gold"},
		}),
		obj("BucketAccessClass", "", "keys", map[string]any{
			"driverName": "s3.vendor.example.com", "authenticationType": "Key",
		}),
		obj("Bucket", "", "bc-1234", map[string]any{"spec": map[string]any{
			"driverName": "s3.vendor.example.com", "bucketClassName": "standard", "protocols": []any{"s3"},
			"deletionPolicy": "Delete", "bucketClaim": map[string]any{"name": "data", "namespace": "app"},
		}}),
		obj("BucketClaim", "app", "data", map[string]any{"spec": map[string]any{
			"bucketClassName": "standard", "protocols": []any{"s3"},
		}}),
		obj("BucketClaim", "app", "pending", map[string]any{"spec": map[string]any{
			"bucketClassName": "standard", "protocols": []any{"s3"},
		}}),
		obj("BucketAccess", "app", "writer", map[string]any{"spec": map[string]any{
			"bucketClaimName": "data", "bucketAccessClassName": "keys", "credentialsSecretName": "data-creds", "protocol": "s3",
		}}),
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating v1alpha1 %s: %v", o.GetKind(), err)
		}
		if o.GetKind() == "Bucket" {
			if err := unstructured.SetNestedField(
				o.Object,
				map[string]any{"bucketReady": true, "bucketID": "bc-1234"},
				"status",
			); err != nil {
				t.Fatal(err)
			}
			if err := c.Status().Update(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}

	res, err := migrate.Read(ctx, c, migrate.Options{SecretSuffix: "-v2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Objects) != 5 || len(res.Skipped) != 1 {
		t.Fatalf("%d objects, skipped %v; want 5 and the unprovisioned claim", len(res.Objects), res.Skipped)
	}
	var bucket *cosiapi.Bucket
	var access *cosiapi.BucketAccess
	var accessClass *cosiapi.BucketAccessClass
	for _, o := range res.Objects {
		switch o := o.(type) {
		case *cosiapi.Bucket:
			bucket = o
		case *cosiapi.BucketAccess:
			access = o
		case *cosiapi.BucketAccessClass:
			accessClass = o
		}
	}
	if bucket.Spec.ExistingBucketID != "bc-1234" || bucket.Spec.DeletionPolicy != cosiapi.DeletionPolicyRetain ||
		bucket.Spec.BucketClaimRef.Name != "data" {
		t.Errorf("Bucket: %+v", bucket.Spec)
	}
	if access.Spec.BucketClaims[0].AccessSecretName != "data-creds-v2" ||
		access.Spec.BucketClaims[0].AccessModes.ObjectData != cosiapi.BucketAccessModeReadWrite {
		t.Errorf("BucketAccess: %+v", access.Spec)
	}
	if accessClass.Spec.Parameters[v1alpha1.ParameterAccessModes] != v1alpha1.DefaultAccessModes {
		t.Errorf("BucketAccessClass parameters %v lack the declared access modes", accessClass.Spec.Parameters)
	}

	// The v1alpha2 CRDs replace the v1alpha1 ones (the old objects go with them), then the objects
	// are created: a server-side dry run first, which stores nothing.
	env.RemoveCRDs(t, cosiapi.GroupName)
	if _, err := envtest.InstallCRDs(
		env.Config,
		envtest.CRDInstallOptions{Paths: []string{filepath.Join(root, "config", "crd", "bases")}, MaxTime: time.Minute},
	); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error { return migrate.Apply(ctx, c, res.Objects, true) })
	list := &cosiapi.BucketList{}
	if err := c.List(ctx, list); err != nil || len(list.Items) != 0 {
		t.Fatalf("after a dry run: %d Buckets, %v; want none", len(list.Items), err)
	}
	if err := migrate.Apply(ctx, c, res.Objects, false); err != nil {
		t.Fatal(err)
	}
	got := &cosiapi.Bucket{}
	if err := c.Get(ctx, client.ObjectKey{Name: "bc-1234"}, got); err != nil || got.Spec.ExistingBucketID != "bc-1234" {
		t.Errorf("v1alpha2 Bucket: %v, %+v", err, got.Spec)
	}
}
