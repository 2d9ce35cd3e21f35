package sidecar_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// TestRegionBackAfterARefreshThatAnsweredNone (review of issue 40 item 10): a refresh whose
// answer lacks the region keeps the Secret's region (cc52c75). The driver then answers a new
// region: the Bucket's status has it, and the Secret must take it. The kept value is the Bucket's
// old one, not the access's own; the Secret must not be frozen at it for good.
func TestRegionBackAfterARefreshThatAnsweredNone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
	b := h.refreshedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b), accessConditions)
	region := string(secret(t, ba, 0).Data[cosiapi.SecretKeyS3Region])
	if region == "" {
		t.Fatal("the Secret has no region")
	}
	// A refresh that answers no region: the Secret keeps the old one.
	h.driver.MoveS3("https://s3-moved.memory.invalid", "", "")
	testenv.Eventually(t, func() error {
		if got := string(secret(t, ba, 0).Data[cosiapi.SecretKeyS3EndpointURL]); got != "https://s3-moved.memory.invalid" {
			return fmt.Errorf("Secret endpoint %q, want the moved one", got)
		}
		return nil
	})
	// The driver answers a region again, a new one.
	h.driver.MoveS3("https://s3-moved-again.memory.invalid", "moved-region-1", "")
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		if !slices.Contains(slices.Collect(maps.Values(b.Status.BucketInfo)), "moved-region-1") {
			return fmt.Errorf("Bucket info %v, want the region moved-region-1", b.Status.BucketInfo)
		}
		got := string(secret(t, ba, 0).Data[cosiapi.SecretKeyS3EndpointURL])
		if got != "https://s3-moved-again.memory.invalid" {
			return fmt.Errorf("Secret endpoint %q, want the moved-again one", got)
		}
		return nil
	})
	testenv.Eventually(t, func() error {
		if got := string(secret(t, ba, 0).Data[cosiapi.SecretKeyS3Region]); got != "moved-region-1" {
			return fmt.Errorf("Secret region %q, want the Bucket's new region moved-region-1 (the old was %q)", got, region)
		}
		return nil
	})
}
