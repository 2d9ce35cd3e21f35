package azure_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/drivers/azure"
)

// TestUpgradeFiveAccesses: the previous driver served five accesses per container, each one
// stored access policy named exactly like its account ID (expiry moved by renewals). After the
// upgrade, once such a token expires, the grant that renews it must replace the access's own
// expired policy: the access already holds a slot, it is no new (fifth) access. On c1d62b2 it was
// refused for good (InvalidArgument "already serves 4 accesses"), so every access of an upgraded
// five-access container lost its credentials at its expiry and never got new ones.
func TestUpgradeFiveAccesses(t *testing.T) {
	a := startAzurite(t)
	ctx := t.Context()
	_, p := serve(t, a.newDriver(t, ""), logr.Discard())
	bucket := createBucket(t, p)
	admin := a.admin.NewContainerClient(bucket)
	expiry := time.Now().Add(2 * time.Second).UTC().Truncate(time.Second)
	var ids []*container.SignedIdentifier
	for i := range 5 {
		id := fmt.Sprintf("ba-old-%d", i)
		ids = append(ids, &container.SignedIdentifier{ID: to.Ptr(id),
			AccessPolicy: &container.AccessPolicy{Expiry: &expiry, Permission: to.Ptr("racwdl")}})
	}
	if _, err := admin.SetAccessPolicy(ctx, &container.SetAccessPolicyOptions{ContainerACL: ids}); err != nil {
		t.Fatal(err)
	}
	params := map[string]string{azure.ParamSASExpiry: "1h"}
	time.Sleep(time.Until(expiry.Add(time.Second)))
	req := accessRequest("ba-old-0", readWrite, params, bucket)
	_, err := p.DriverGrantBucketAccess(ctx, grantRequest(req, "ba-old-0"))
	if err != nil {
		t.Fatalf("renewing (by grant, after its expiry) an access granted by the earlier driver on a container "+
			"it filled: %v (code %v, final for the sidecar); want its own expired policy replaced", err, status.Code(err))
	}
}

// TestAdminPolicyAfterGrant: the same refusal (on c1d62b2) without an upgrade. Four accesses fill a
// container; the admin then adds a stored access policy of their own (an imported container). An
// access whose token expired must get a new one from the renewing grant: it only replaces its own
// policy, and the container's policy count does not grow.
func TestAdminPolicyAfterGrant(t *testing.T) {
	a := startAzurite(t)
	ctx := t.Context()
	_, p := serve(t, a.newDriver(t, ""), logr.Discard())
	bucket := createBucket(t, p)
	params := map[string]string{azure.ParamSASExpiry: "2s"}
	var granted []*access
	for range azure.AccessSlots {
		granted = append(granted, grant(t, p, readWrite, params, bucket))
	}
	admin := a.admin.NewContainerClient(bucket)
	acl, err := admin.GetAccessPolicy(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	far := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	ids := append(acl.SignedIdentifiers, &container.SignedIdentifier{ID: to.Ptr("admins-own"),
		AccessPolicy: &container.AccessPolicy{Expiry: &far, Permission: to.Ptr("r")}})
	if _, err := admin.SetAccessPolicy(ctx, &container.SetAccessPolicyOptions{ContainerACL: ids}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	req := accessRequest(granted[0].id, readWrite, params, bucket)
	if _, err := p.DriverGrantBucketAccess(ctx, grantRequest(req, granted[0].id)); err != nil {
		t.Fatalf("renewing an expired access after the admin added a policy: %v (code %v); want its own policy "+
			"replaced", err, status.Code(err))
	}
}
