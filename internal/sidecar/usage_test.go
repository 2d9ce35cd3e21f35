package sidecar_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// A driver that advertises BUCKET_USAGE is asked for a provisioned Bucket's usage at once and
// then every interval; the Bucket's status follows what the bucket holds, and is not written
// while nothing changed.
func TestUsageChecks(t *testing.T) {
	h := newHarness(t, memory.Config{Usage: true})
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) { o.UsageInterval = time.Second })
	b := h.bucket(cosiapi.DeletionPolicyDelete)
	h.create(b)
	provisioned(t, b, bucketConditions)
	get := func() *cosiapi.Bucket {
		fresh := &cosiapi.Bucket{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), fresh); err != nil {
			t.Fatal(err)
		}
		return fresh
	}
	testenv.Eventually(t, func() error {
		if u := get().Status.Usage; u == nil || u.ObjectCount != 0 || u.SizeBytes != 0 {
			return fmt.Errorf("status.usage %+v, want an empty bucket's", u)
		}
		return nil
	})
	rv, asked := get().ResourceVersion, h.calls.Count("DriverGetBucketUsage")
	testenv.Never(t, 3500*time.Millisecond, func() error {
		if got := get().ResourceVersion; got != rv {
			return fmt.Errorf("the Bucket was written (resourceVersion %s, then %s) while its usage did not change", rv, got)
		}
		return nil
	})
	if again := h.calls.Count("DriverGetBucketUsage"); again <= asked {
		t.Errorf("DriverGetBucketUsage called %d times, then %d in 3.5 intervals: not asked again", asked, again)
	}

	// An object in the bucket: the next check records it.
	id := get().Status.BucketID
	ctx := context.Background()
	rw := &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}
	buckets := []*cosiproto.AccessedBucket{{BucketId: id, AccessModes: rw}}
	gen, err := h.driver.DriverGenerateBucketAccessId(ctx, &cosiproto.DriverGenerateBucketAccessIdRequest{
		AccountName: "writer", Buckets: buckets, Protocol: cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
	})
	if err != nil {
		t.Fatal(err)
	}
	grant, err := h.driver.DriverGrantBucketAccess(ctx, &cosiproto.DriverGrantBucketAccessRequest{
		AccountId: gen.GetAccountId(), Buckets: buckets, Protocol: cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !h.driver.Backend().Put(grant.GetCredentials(), id, "object") {
		t.Fatal("the grant could not write")
	}
	testenv.Eventually(t, func() error {
		if u := get().Status.Usage; u == nil || u.ObjectCount != 1 {
			return fmt.Errorf("status.usage %+v, want 1 object", u)
		}
		return nil
	})
}

// A driver that does not advertise BUCKET_USAGE is never asked, and its Buckets get no usage.
func TestUsageNotAskedWithoutTheCapability(t *testing.T) {
	h := newHarness(t, memory.Config{})
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) { o.UsageInterval = time.Second })
	b := h.bucket(cosiapi.DeletionPolicyDelete)
	h.create(b)
	provisioned(t, b, bucketConditions)
	testenv.Never(t, 3*time.Second, func() error {
		if n := h.calls.Count("DriverGetBucketUsage"); n > 0 {
			return fmt.Errorf("DriverGetBucketUsage called %d times", n)
		}
		fresh := &cosiapi.Bucket{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), fresh); err != nil {
			return err
		}
		if fresh.Status.Usage != nil {
			return fmt.Errorf("status.usage %+v", fresh.Status.Usage)
		}
		return nil
	})

	// Figures left by a sidecar whose driver reported usage are removed: a change, and a restart.
	for _, restart := range []bool{false, true} {
		if restart {
			h.stop()
			h.stop = func() {}
		}
		fresh := &cosiapi.Bucket{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), fresh); err != nil {
			t.Fatal(err)
		}
		fresh.Status.Usage = &cosiapi.BucketUsage{SizeBytes: 4096, ObjectCount: 1}
		if err := env.Client.Status().Update(t.Context(), fresh); err != nil {
			t.Fatal(err)
		}
		if restart {
			h.restartSidecar(sidecarConfig, func(o *sidecar.Options) { o.UsageInterval = time.Second })
		}
		testenv.Eventually(t, func() error {
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), fresh); err != nil {
				return err
			}
			if fresh.Status.Usage != nil {
				return fmt.Errorf("status.usage %+v left (restart: %v)", fresh.Status.Usage, restart)
			}
			return nil
		})
	}
}
