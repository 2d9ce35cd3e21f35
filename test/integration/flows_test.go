package integration

import (
	"context"
	"sort"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

// TestDynamicLifecycle: create a bucket and an access, use the credentials, delete both. Delete
// leaves the backend without the bucket and the account; Retain keeps the bucket and its Bucket.
func TestDynamicLifecycle(t *testing.T) {
	t.Parallel()
	for _, policy := range []cosiapi.DeletionPolicy{cosiapi.DeletionPolicyDelete, cosiapi.DeletionPolicyRetain} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			backend := system.driver.Backend()
			class, aclass := bucketClass(policy), accessClass(false)
			create(t, class)
			create(t, aclass)
			c := claim(class.Name)
			create(t, c)
			ba := access(aclass.Name, cosiapi.BucketAccessModeReadWrite, c)
			create(t, ba)
			provisioned(t, c)
			provisioned(t, ba)

			bucketID, creds := secretCredentials(t, ba, 0)
			if !backend.Allowed(creds, bucketID, memory.ObjectData, true) ||
				!backend.Allowed(creds, bucketID, memory.ObjectData, false) {
				t.Fatal("the Secret's credentials do not open the bucket for reading and writing")
			}

			del(t, ba)
			env.Gone(t, ba)
			if backend.Allowed(creds, bucketID, memory.ObjectData, false) {
				t.Error("the credentials still work after the BucketAccess was deleted")
			}
			bucket := &cosiapi.Bucket{}
			bucket.Name = c.Status.BoundBucketName
			del(t, c)
			env.Gone(t, c)
			if policy == cosiapi.DeletionPolicyDelete {
				env.Gone(t, bucket)
				if backend.BucketExists(bucketID) {
					t.Error("the backend bucket exists after deleting a Delete claim")
				}
				return
			}
			if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(bucket), bucket); err != nil {
				t.Fatalf("the Bucket of a Retain claim is gone: %v", err)
			}
			if !backend.BucketExists(bucketID) {
				t.Error("the backend bucket of a Retain claim was deleted")
			}
		})
	}
}

// TestStaticImport: an admin imports an existing bucket for one claim, read-only.
func TestStaticImport(t *testing.T) {
	t.Parallel()
	backend := system.driver.Backend()
	c := &cosiapi.BucketClaim{}
	c.Name, c.Namespace = uniqueName("imported"), namespace
	b := &cosiapi.Bucket{
		Spec: cosiapi.BucketSpec{DriverName: system.driverName, DeletionPolicy: cosiapi.DeletionPolicyRetain,
			ExistingBucketID: "legacy-data", BucketClaimRef: cosiapi.BucketClaimReference{Name: c.Name, Namespace: namespace}},
	}
	b.Name = uniqueName("legacy")
	c.Spec.ExistingBucketName = b.Name
	create(t, b)
	create(t, c)
	aclass := accessClass(false)
	aclass.Spec.DisallowedBucketAccessModes.ObjectData = []cosiapi.BucketAccessMode{
		cosiapi.BucketAccessModeReadWrite,
		cosiapi.BucketAccessModeWriteOnly,
	}
	create(t, aclass)
	ba := access(aclass.Name, cosiapi.BucketAccessModeReadOnly, c)
	create(t, ba)
	provisioned(t, c)
	provisioned(t, ba)

	bucketID, creds := secretCredentials(t, ba, 0)
	if bucketID != "legacy-data" {
		t.Errorf("BUCKET_NAME = %q, want the imported bucket", bucketID)
	}
	if !backend.Allowed(creds, bucketID, memory.ObjectData, false) ||
		backend.Allowed(creds, bucketID, memory.ObjectData, true) {
		t.Error("a ReadOnly access to the imported bucket is not exactly read-only")
	}
	del(t, ba)
	env.Gone(t, ba)
	del(t, c)
	env.Gone(t, c)
	if !backend.BucketExists("legacy-data") {
		t.Error("the imported bucket was deleted")
	}
}

func TestMultiBucketAccess(t *testing.T) {
	t.Parallel()
	backend := system.driver.Backend()
	class, aclass := bucketClass(cosiapi.DeletionPolicyDelete), accessClass(true)
	create(t, class)
	create(t, aclass)
	a, b := claim(class.Name), claim(class.Name)
	create(t, a)
	create(t, b)
	ba := access(aclass.Name, cosiapi.BucketAccessModeReadWrite, a, b)
	create(t, ba)
	provisioned(t, ba)
	idA, credsA := secretCredentials(t, ba, 0)
	idB, credsB := secretCredentials(t, ba, 1)
	if idA == idB || credsA.GetS3().GetAccessSecretKey() != credsB.GetS3().GetAccessSecretKey() {
		t.Errorf("two Secrets: buckets %q and %q, same credentials=%v; want two buckets, one credential", idA, idB,
			credsA.GetS3().GetAccessSecretKey() == credsB.GetS3().GetAccessSecretKey())
	}
	for _, id := range []string{idA, idB} {
		if !backend.Allowed(credsA, id, memory.ObjectData, true) {
			t.Errorf("the shared credential does not open %s", id)
		}
	}
	del(t, ba)
	env.Gone(t, ba)
	for _, c := range []*cosiapi.BucketClaim{a, b} {
		del(t, c)
		env.Gone(t, c)
	}
	for _, id := range []string{idA, idB} {
		testenv.Eventually(t, func() error {
			if backend.BucketExists(id) {
				return errorf("bucket %s still exists in the backend", id)
			}
			return nil
		})
	}
}

// TestClaimDeletionWaitsForItsAccess: a claim in use is not deleted, nor its bucket, until the
// access goes.
func TestClaimDeletionWaitsForItsAccess(t *testing.T) {
	t.Parallel()
	backend := system.driver.Backend()
	class, aclass := bucketClass(cosiapi.DeletionPolicyDelete), accessClass(false)
	create(t, class)
	create(t, aclass)
	c := claim(class.Name)
	create(t, c)
	ba := access(aclass.Name, cosiapi.BucketAccessModeReadWrite, c)
	create(t, ba)
	provisioned(t, ba)
	bucketID, creds := secretCredentials(t, ba, 0)

	del(t, c)
	time.Sleep(time.Second) // a property that must hold for a while, not a speed check
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(c), c); err != nil {
		t.Fatalf("a claim in use was deleted: %v", err)
	}
	if !backend.BucketExists(bucketID) || !backend.Allowed(creds, bucketID, memory.ObjectData, true) {
		t.Fatal("the bucket of a claim in use was deleted")
	}
	del(t, ba)
	env.Gone(t, ba)
	env.Gone(t, c)
	testenv.Eventually(t, func() error {
		if backend.BucketExists(bucketID) {
			return errorf("bucket %s still exists in the backend", bucketID)
		}
		return nil
	})
}

// BenchmarkClaimLifecycle measures, one claim at a time, the time from creating a BucketClaim to
// its Provisioned condition, and from deleting it to its disappearance (Delete policy), with the
// in-memory driver. It reports medians; run with -benchtime=20x or more.
func BenchmarkClaimLifecycle(b *testing.B) {
	class := bucketClass(cosiapi.DeletionPolicyDelete)
	create(b, class)
	var provision, deletion []time.Duration
	for b.Loop() {
		c := claim(class.Name)
		start := time.Now()
		create(b, c)
		provisioned(b, c)
		provision = append(provision, time.Since(start))
		start = time.Now()
		del(b, c)
		env.Gone(b, c)
		deletion = append(deletion, time.Since(start))
	}
	b.ReportMetric(median(provision).Seconds()*1000, "ms-to-provisioned-p50")
	b.ReportMetric(median(deletion).Seconds()*1000, "ms-to-gone-p50")
}

func median(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}
