package admission

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// TestStatus: cosi-reserved-status. A tenant whose Role includes the status subresources by
// mistake still cannot write them (a forged status.accessedBuckets would ask the sidecar for
// credentials to someone else's bucket); the controller and the sidecar can.
func TestStatus(t *testing.T) {
	waitForPolicies(t)
	forgeAccess := func(ba *cosiapi.BucketAccess) {
		ba.Status.DriverName = "s3.example.com"
		ba.Status.AccessedBuckets = []cosiapi.AccessedBucket{{BucketClaimName: "data", BucketName: "someone-elses"}}
	}
	bindClaim := func(c *cosiapi.BucketClaim) { c.Status.BoundBucketName = "someone-elses" }
	const (
		accessRefused = "status: the status of bucketaccesses is reserved to COSI"
		claimRefused  = "status: the status of bucketclaims is reserved to COSI"
	)

	for _, tc := range []struct {
		name    string
		as      actor
		refused string
	}{
		{name: "broad tenant", as: broadTenant, refused: accessRefused},
		{name: "controller", as: controller},
		{name: "sidecar", as: sidecar},
	} {
		t.Run(tc.name+" writes an access's status", func(t *testing.T) {
			t.Parallel()
			ba := newAccess(tenantNamespace, "read-only")
			if err := env.Client.Create(t.Context(), ba); err != nil {
				t.Fatal(err)
			}
			answer(t, writeStatus(t, tc.as, ba, forgeAccess), tc.refused)
		})
	}
	for _, tc := range []struct {
		name    string
		as      actor
		refused string
	}{
		{name: "broad tenant", as: broadTenant, refused: claimRefused},
		{name: "controller", as: controller},
	} {
		t.Run(tc.name+" writes a claim's status", func(t *testing.T) {
			t.Parallel()
			c := newClaim(tenantNamespace, "standard")
			if err := env.Client.Create(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			answer(t, writeStatus(t, tc.as, c, bindClaim), tc.refused)
		})
	}
}

func writeStatus[T client.Object](t *testing.T, as actor, obj T, mutate func(T)) error {
	t.Helper()
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	mutate(obj)
	return as.Status().Update(t.Context(), obj)
}
