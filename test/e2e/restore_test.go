package e2e

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/sidecar"
)

// TestObjectLevelRestore follows docs/admin.md "Backup and restore of COSI objects" after the
// cluster's COSI objects were lost while COSI did not run (a new cluster, say): the backup's
// Bucket restored as an imported one, its claim by existingBucketName, a new access, and the
// backup's grant record. The data is there for the new access, and the old key, which nothing
// in the cluster names any more, is revoked in the object store because of the restored record.
func TestObjectLevelRestore(t *testing.T) {
	ctx := t.Context()
	ns := namespace(t)
	bc, bac := bucketClass(cosiapi.DeletionPolicyDelete, nil), accessClass(false)
	create(t, bc, bac)
	c := claim(ns, bc.Name)
	a := access(ns, bac.Name, readWrite, c)
	create(t, c, a)
	provisioned(t, c, a)
	oldS3, bucket, _ := secretClient(t, ns, a.Spec.BucketClaims[0].AccessSecretName)
	expectAllowed(t, "put with the access", put(oldS3, bucket, "kept"))

	// The backup: the Bucket (status.bucketID) and the grant record.
	b := &cosiapi.Bucket{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: c.Status.BoundBucketName}, b); err != nil {
		t.Fatal(err)
	}
	record := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: sidecar.DefaultGrantNamespace,
		Name: "cosi-grant-" + string(a.UID)}, record); err != nil {
		t.Fatalf("the grant record of access %s: %v", a.Name, err)
	}

	// The loss: the objects go while COSI does not run, so nothing is revoked or deleted in the
	// object store.
	for _, p := range []*localenv.Component{env.Controller, env.Sidecar} {
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { // the next tests need COSI, whatever failed here
		for _, p := range []*localenv.Component{env.Controller, env.Sidecar} {
			if p.Exited() {
				if err := p.Start(context.Background()); err != nil {
					t.Error(err)
				}
			}
		}
	})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: a.Spec.BucketClaims[0].AccessSecretName}}
	for _, o := range []client.Object{a, secret, c, b, record} {
		lose(t, o)
	}
	if err := env.Controller.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := env.Sidecar.Start(ctx); err != nil {
		t.Fatal(err)
	}
	expectAllowed(t, "put with the old key, which nothing in the cluster names now", put(oldS3, bucket, "lost"))

	// The restore, in the documented order (the classes are still there).
	restoredClaim := claim(ns, "")
	restoredClaim.Spec.BucketClassName = ""
	restoredClaim.Spec.ExistingBucketName = unique("restored")
	restoredBucket := &cosiapi.Bucket{
		ObjectMeta: metav1.ObjectMeta{Name: restoredClaim.Spec.ExistingBucketName},
		Spec: cosiapi.BucketSpec{
			DriverName:       b.Spec.DriverName,
			DeletionPolicy:   cosiapi.DeletionPolicyRetain,
			ExistingBucketID: b.Status.BucketID,
			Protocols:        b.Spec.Protocols,
			BucketClaimRef:   cosiapi.BucketClaimReference{Namespace: ns, Name: restoredClaim.Name},
		},
	}
	create(t, restoredBucket, restoredClaim)
	restoredAccess := access(ns, bac.Name, readWrite, restoredClaim)
	create(t, restoredAccess)
	restoredRecord := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: record.Namespace, Name: record.Name, Labels: record.Labels,
			Annotations: record.Annotations},
		Data: record.Data,
	}
	create(t, restoredRecord)

	provisioned(t, restoredClaim, restoredAccess)
	newS3, newBucket, _ := secretClient(t, ns, restoredAccess.Spec.BucketClaims[0].AccessSecretName)
	if newBucket != bucket {
		t.Errorf("the restored claim's Secret names bucket %q, the backup's is %q", newBucket, bucket)
	}
	for _, key := range []string{"kept", "lost"} {
		if got, err := get(newS3, bucket, key); err != nil || got != "data of "+key {
			t.Errorf("object %s with the restored access: %q, %v", key, got, err)
		}
	}
	testenv.Eventually(t, func() error {
		if err := put(oldS3, bucket, "after-restore"); !denied(err) {
			return fmt.Errorf("the old key still works after its grant record was restored: %w", err)
		}
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(restoredRecord), &corev1.ConfigMap{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("the restored grant record is still there (%w)", err)
		}
		return nil
	})
}

// lose deletes o as a lost cluster would: without any finalizer's work.
func lose(t *testing.T, o client.Object) {
	t.Helper()
	ctx := t.Context()
	if err := env.Client.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), o); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		if len(o.GetFinalizers()) == 0 {
			return fmt.Errorf("%s is still there", o.GetName())
		}
		o.SetFinalizers(nil)
		return env.Client.Update(ctx, o)
	})
}
