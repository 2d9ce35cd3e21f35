package sidecar_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// TestAdapterParameterWithAV1alpha2Driver: the v1alpha1 adapter's class parameters are reserved,
// not unknown. Behind a v1alpha2 driver (whose requests carry the access modes, and whose answers
// the endpoint and region) they are removed before the driver, which refuses keys it does not know
// (the memory driver does), and the access is granted. On a BucketClass the access modes are
// refused, naming the kind of class they belong on.
func TestAdapterParameterWithAV1alpha2Driver(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	params := map[string]string{
		v1alpha1.ParameterAccessModes: v1alpha1.DefaultAccessModes,
		v1alpha1.ParameterS3Endpoint:  "https://s3.example.com",
		v1alpha1.ParameterS3Region:    "us-east-1",
	}
	ba := provisioned(t, h.accessWith(params, cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b), accessConditions)
	if n := h.calls.Count("DriverGrantBucketAccess"); n != 1 {
		t.Errorf("%d DriverGrantBucketAccess calls, want 1", n)
	}
	deleteAccess(t, ba)

	bad := h.bucket(cosiapi.DeletionPolicyDelete, cosiapi.ProtocolS3)
	bad.Spec.Parameters = map[string]string{v1alpha1.ParameterAccessModes: v1alpha1.DefaultAccessModes}
	h.create(bad)
	msg := waitCondition(t, bad, bucketConditions, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse,
		cosiapi.ReasonInvalidParameter)
	if !strings.Contains(msg, "parameters["+v1alpha1.ParameterAccessModes+"]") ||
		!strings.Contains(msg, "BucketAccessClass") {
		t.Errorf("Bucket condition %q does not name the parameter and the kind of class it belongs on", msg)
	}
}
