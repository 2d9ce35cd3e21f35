package azure_test

import (
	"context"
	"crypto/rand"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/drivers/azure"
	"github.com/kube-cosi/cosi/pkg/sanity"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

var (
	readWrite = &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}
	readOnly  = &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_ONLY}
	writeOnly = &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_WRITE_ONLY}
)

// TestSanity runs cosi-sanity against the driver on Azurite, with the probe an Azure vendor
// imports (pkg/sanity/azureprobe), which asks the account itself: does the container exist, does
// a request with the issued token succeed, which stored access policy is the token bound to, and
// which policies exist.
func TestSanity(t *testing.T) {
	a := startAzurite(t)
	var logs logBuffer
	endpoint, p := serve(t, a.newDriver(t, ""), logs.logger())
	static := createBucket(t, p)
	sanity.Test(t, sanity.Config{
		Endpoint: endpoint,
		// The probe leaves a blob in each container it checks: purge on delete.
		BucketParameters:        map[string]string{azure.ParamPurgeOnDelete: "true"},
		InvalidBucketParameters: map[string]string{azure.ParamPurgeOnDelete: "maybe"},
		AccessParameters:        map[string]string{azure.ParamSASExpiry: "1h"},
		InvalidAccessParameters: map[string]string{azure.ParamSASExpiry: "soon"},
		BucketParameterKeys:     azure.BucketParameterKeys,
		AccessParameterKeys:     azure.AccessParameterKeys,
		StaticBucketID:          static,
		DriverLogs:              logs.bytes,
		Probe:                   a.probe.Probe(),
	})
}

// TestTokenModes checks, with the token alone as a workload holds it, that each access gets
// exactly its modes on its own container: READ_ONLY reads and lists but cannot write or delete,
// WRITE_ONLY writes but cannot read or list, READ_WRITE does both, and none reaches another
// container, not even one of the same driver with its own accesses.
func TestTokenModes(t *testing.T) {
	a := startAzurite(t)
	ctx := t.Context()
	_, p := serve(t, a.newDriver(t, ""), logr.Discard())
	bucket, other := createBucket(t, p), createBucket(t, p)
	admin := a.admin.NewContainerClient(bucket)
	if err := put(ctx, admin, "existing", "data"); err != nil {
		t.Fatal(err)
	}
	if err := put(ctx, a.admin.NewContainerClient(other), "existing", "other"); err != nil {
		t.Fatal(err)
	}
	grant(t, p, readWrite, nil, other) // the other container has accesses of its own

	ro, wo, rw := grant(
		t,
		p,
		readOnly,
		nil,
		bucket,
	), grant(
		t,
		p,
		writeOnly,
		nil,
		bucket,
	), grant(
		t,
		p,
		readWrite,
		nil,
		bucket,
	)
	if got, err := get(ctx, ro.client, "existing"); err != nil || got != "data" {
		t.Errorf("READ_ONLY get: %q, %v", got, err)
	}
	if _, err := ro.client.NewListBlobsFlatPager(nil).NextPage(ctx); err != nil {
		t.Errorf("READ_ONLY list: %v", err)
	}
	if err := put(ctx, ro.client, "by-ro", "x"); !refused(err) {
		t.Errorf("READ_ONLY put: %v, want refused (403)", err)
	}
	if _, err := ro.client.NewBlobClient("existing").Delete(ctx, nil); !refused(err) {
		t.Errorf("READ_ONLY delete: %v, want refused (403)", err)
	}
	if err := put(ctx, wo.client, "by-wo", "x"); err != nil {
		t.Errorf("WRITE_ONLY put: %v", err)
	}
	if _, err := get(ctx, wo.client, "existing"); !refused(err) {
		t.Errorf("WRITE_ONLY get: %v, want refused (403)", err)
	}
	if _, err := wo.client.NewListBlobsFlatPager(nil).NextPage(ctx); !refused(err) {
		t.Errorf("WRITE_ONLY list: %v, want refused (403)", err)
	}
	if err := put(ctx, rw.client, "by-rw", "y"); err != nil {
		t.Errorf("READ_WRITE put: %v", err)
	}
	if got, err := get(ctx, rw.client, "by-wo"); err != nil || got != "x" {
		t.Errorf("READ_WRITE get of what WRITE_ONLY wrote: %q, %v", got, err)
	}
	if _, err := rw.client.NewBlobClient("by-wo").Delete(ctx, nil); err != nil {
		t.Errorf("READ_WRITE delete: %v", err)
	}

	// Another container, with each token: the token's query on the other container's URL.
	for name, acc := range map[string]*access{"READ_ONLY": ro, "WRITE_ONLY": wo, "READ_WRITE": rw} {
		u, _ := url.Parse(acc.creds.GetAzure().GetAccessToken())
		u.Path = strings.TrimSuffix(u.Path, bucket) + other
		c := workloadClient(t, u.String())
		if _, err := get(ctx, c, "existing"); !refused(err) {
			t.Errorf("%s token on another container: get %v, want refused (403)", name, err)
		}
		if err := put(ctx, c, "intruder", "x"); !refused(err) {
			t.Errorf("%s token on another container: put %v, want refused (403)", name, err)
		}
	}
	// Nor the container itself: its metadata and access policy stay the admin's.
	if _, err := rw.client.SetAccessPolicy(ctx, nil); !refused(err) {
		t.Errorf("READ_WRITE token: Set Container ACL %v, want refused (403)", err)
	}
	if _, err := rw.client.Delete(ctx, nil); !refused(err) {
		t.Errorf("READ_WRITE token: Delete Container %v, want refused (403)", err)
	}
}

// TestRevoke checks that a revoked token is refused at once on Azurite, for every operation it
// had, while another access to the same container keeps working; and that a second revoke, or one
// of a container that is gone, is OK.
func TestRevoke(t *testing.T) {
	a := startAzurite(t)
	ctx := t.Context()
	_, p := serve(t, a.newDriver(t, ""), logr.Discard())
	bucket := createBucket(t, p)
	gone, kept := grant(t, p, readWrite, nil, bucket), grant(t, p, readWrite, nil, bucket)
	if err := put(ctx, gone.client, "blob", "x"); err != nil {
		t.Fatalf("put before revoke: %v", err)
	}
	revoke(t, p, gone)
	if err := put(ctx, gone.client, "blob", "y"); !refused(err) {
		t.Errorf("put with a revoked token: %v, want refused (403)", err)
	}
	if _, err := get(ctx, gone.client, "blob"); !refused(err) {
		t.Errorf("get with a revoked token: %v, want refused (403)", err)
	}
	if got, err := get(ctx, kept.client, "blob"); err != nil || got != "x" {
		t.Errorf("the other access after the revoke: %q, %v", got, err)
	}
	revoke(t, p, gone)
	// Granted again under the same ID (a new policy), the old token works again: it is the
	// same token. COSI never reuses an account ID, so this is the only way back.
	if acl, err := a.admin.NewContainerClient(bucket).
		GetAccessPolicy(ctx, nil); err != nil ||
		len(acl.SignedIdentifiers) != 1 {
		t.Errorf("policies after the revoke: %v, %v; want only the other access's", acl.SignedIdentifiers, err)
	}
	revoke(t, p, kept)
	revoke(t, p, &access{id: "ba-never", bucket: "no-such-container"})
}

// TestExpiry checks the sasExpiry parameter: the Secret's expiry is the policy's, a token is
// refused once it passed, and a repeated grant (a Secret refresh) moves it forward with the same
// token, which then works again.
func TestExpiry(t *testing.T) {
	a := startAzurite(t)
	ctx := t.Context()
	_, p := serve(t, a.newDriver(t, ""), logr.Discard())
	bucket := createBucket(t, p)
	params := map[string]string{azure.ParamSASExpiry: "2s"}
	before := time.Now()
	acc := grant(t, p, readWrite, params, bucket)
	expiry := acc.creds.GetAzure().GetExpiryTimestamp()
	if expiry == nil || expiry.AsTime().Before(before.Add(time.Second)) ||
		expiry.AsTime().After(time.Now().Add(2*time.Second)) {
		t.Fatalf("expiry %v, want about 2 seconds after the grant", expiry)
	}
	acl, err := a.admin.NewContainerClient(bucket).GetAccessPolicy(ctx, nil)
	if err != nil || len(acl.SignedIdentifiers) != 1 ||
		!acl.SignedIdentifiers[0].AccessPolicy.Expiry.Equal(expiry.AsTime()) {
		t.Fatalf("the container's policies %v (%v): want one, expiring at %v", acl.SignedIdentifiers, err, expiry.AsTime())
	}
	time.Sleep(time.Until(expiry.AsTime().Add(time.Second)))
	if err := put(ctx, acc.client, "late", "x"); !refused(err) {
		t.Errorf("put after the expiry: %v, want refused (403)", err)
	}

	req := accessRequest(acc.id, readWrite, params, bucket)
	resp, err := p.DriverGrantBucketAccess(ctx, grantRequest(req, acc.id))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetCredentials().GetAzure().GetAccessToken() != acc.creds.GetAzure().GetAccessToken() {
		t.Errorf("a repeated grant changed the token")
	}
	if !resp.GetCredentials().GetAzure().GetExpiryTimestamp().AsTime().After(expiry.AsTime()) {
		t.Errorf("a repeated grant did not move the expiry forward")
	}
	if err := put(ctx, acc.client, "renewed", "x"); err != nil && time.Now().Before(
		resp.GetCredentials().GetAzure().GetExpiryTimestamp().AsTime()) {
		t.Errorf("put after a renewal: %v", err)
	}

	// Without the parameter: no expiry in the Secret, the policy's is far away.
	forever := grant(t, p, readOnly, nil, bucket)
	if ts := forever.creds.GetAzure().GetExpiryTimestamp(); ts != nil {
		t.Errorf("expiry %v without %s, want none", ts.AsTime(), azure.ParamSASExpiry)
	}
}

// TestFiveAccessesPerContainer checks Azure's limit of five stored access policies per container,
// which Azurite does not enforce: the sixth access to one bucket is refused with
// ResourceExhausted (retried by the sidecar) and a message saying why, and granted once another
// is revoked. The admin's own policies on an imported container count, and stay.
func TestFiveAccessesPerContainer(t *testing.T) {
	a := startAzurite(t)
	ctx := t.Context()
	_, p := serve(t, a.newDriver(t, ""), logr.Discard())
	bucket := createBucket(t, p)
	admin := a.admin.NewContainerClient(bucket)
	far := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	if _, err := admin.SetAccessPolicy(ctx, &container.SetAccessPolicyOptions{ContainerACL: []*container.SignedIdentifier{
		{ID: to.Ptr("admins-own"), AccessPolicy: &container.AccessPolicy{Expiry: &far, Permission: to.Ptr("r")}},
	}}); err != nil {
		t.Fatal(err)
	}
	var granted []*access
	for range azure.MaxStoredAccessPolicies - 1 {
		granted = append(granted, grant(t, p, readWrite, nil, bucket))
	}
	_, err := tryGrant(t, p, readWrite, nil, bucket)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "limit") {
		t.Fatalf("the sixth policy of a container: %v, want ResourceExhausted naming the limit", err)
	}
	revoke(t, p, granted[0])
	sixth := grant(t, p, readWrite, nil, bucket)
	if err := put(ctx, sixth.client, "blob", "x"); err != nil {
		t.Errorf("the access granted once another was revoked: %v", err)
	}
	if err := put(ctx, granted[0].client, "blob", "y"); !refused(err) {
		t.Errorf("the revoked token, once another access took its place: %v, want refused (403)", err)
	}
	acl, err := admin.GetAccessPolicy(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(
		acl.SignedIdentifiers,
		func(s *container.SignedIdentifier) bool { return *s.ID == "admins-own" },
	) {
		t.Errorf("the admin's own policy is gone: %v", acl.SignedIdentifiers)
	}
}

// TestStaticImport checks an existing container the driver did not create: DriverGetBucket finds
// it (NotFound for a missing one), grants and revokes add and remove only their own policies and
// keep the container's public access level, and DriverGenerateBucketId never adopts it.
func TestStaticImport(t *testing.T) {
	a := startAzurite(t)
	ctx := t.Context()
	_, p := serve(t, a.newDriver(t, ""), logr.Discard())
	name := "static-" + strings.ToLower(rand8())
	admin := a.admin.NewContainerClient(name)
	public := container.PublicAccessTypeBlob
	if _, err := admin.Create(ctx, &container.CreateOptions{Access: &public}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Delete(context.Background(), nil) })
	far := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	if _, err := admin.SetAccessPolicy(ctx, &container.SetAccessPolicyOptions{Access: &public,
		ContainerACL: []*container.SignedIdentifier{
			{ID: to.Ptr("admins-own"), AccessPolicy: &container.AccessPolicy{Expiry: &far, Permission: to.Ptr("rl")}},
		}}); err != nil {
		t.Fatal(err)
	}
	if err := put(ctx, admin, "existing", "data"); err != nil {
		t.Fatal(err)
	}

	get := &cosiproto.DriverGetBucketRequest{
		BucketId:  name,
		Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_AZURE},
	}
	resp, err := p.DriverGetBucket(ctx, get)
	if err != nil || resp.GetProtocols().GetAzure().GetStorageAccount() != a.Account {
		t.Fatalf("DriverGetBucket of an existing container: %v, %v", resp, err)
	}
	if _, err := p.DriverGetBucket(
		ctx,
		&cosiproto.DriverGetBucketRequest{BucketId: "missing-" + name},
	); status.Code(
		err,
	) != codes.NotFound {
		t.Errorf("DriverGetBucket of a missing container: %v, want NotFound", err)
	}
	acc := grant(t, p, readOnly, nil, name)
	if got, err := getBlob(t, acc, "existing"); err != nil || got != "data" {
		t.Errorf("get with a token for the imported container: %q, %v", got, err)
	}
	acl, err := admin.GetAccessPolicy(ctx, nil)
	if err != nil || acl.BlobPublicAccess == nil || *acl.BlobPublicAccess != public || len(acl.SignedIdentifiers) != 2 {
		t.Errorf("after a grant: public access %v, policies %d (%v); want blob, 2", acl.BlobPublicAccess,
			len(acl.SignedIdentifiers), err)
	}
	revoke(t, p, acc)
	acl, err = admin.GetAccessPolicy(ctx, nil)
	if err != nil || acl.BlobPublicAccess == nil || *acl.BlobPublicAccess != public || len(acl.SignedIdentifiers) != 1 ||
		*acl.SignedIdentifiers[0].ID != "admins-own" {
		t.Errorf("after the revoke: public access %v, policies %v (%v); want blob and the admin's own",
			acl.BlobPublicAccess, acl.SignedIdentifiers, err)
	}

	// The driver never takes a container it did not create for a new bucket of that name.
	d := a.newDriver(t, "")
	if _, err := d.DriverCreateBucket(
		ctx,
		&cosiproto.DriverCreateBucketRequest{BucketId: name},
	); status.Code(
		err,
	) != codes.AlreadyExists {
		t.Errorf("DriverCreateBucket of a container the driver did not create: %v, want AlreadyExists", err)
	}
	if _, err := d.DriverGenerateBucketId(
		ctx,
		&cosiproto.DriverGenerateBucketIdRequest{Name: name},
	); status.Code(
		err,
	) != codes.AlreadyExists {
		t.Errorf("DriverGenerateBucketId naming a container the driver did not create: %v, want AlreadyExists", err)
	}
}

func getBlob(t *testing.T, a *access, name string) (string, error) {
	t.Helper()
	return get(t.Context(), a.client, name)
}

// TestDeleteBucket checks deletion: a container with blobs is refused with FailedPrecondition and
// kept, unless purgeOnDelete; an empty one is deleted; a missing one is already deleted; a
// repeated creation of the driver's own container is OK.
func TestDeleteBucket(t *testing.T) {
	a := startAzurite(t)
	ctx := t.Context()
	_, p := serve(t, a.newDriver(t, ""), logr.Discard())
	gen, err := p.DriverGenerateBucketId(ctx, &cosiproto.DriverGenerateBucketIdRequest{Name: "bc-" + rand8()})
	if err != nil {
		t.Fatal(err)
	}
	id := gen.GetBucketId()
	for range 2 {
		if _, err := p.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: id}); err != nil {
			t.Fatalf("DriverCreateBucket (repeated): %v", err)
		}
	}
	if err := put(ctx, a.admin.NewContainerClient(id), "blob", "x"); err != nil {
		t.Fatal(err)
	}
	_, err = p.DriverDeleteBucket(ctx, &cosiproto.DriverDeleteBucketRequest{BucketId: id})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), azure.ParamPurgeOnDelete) {
		t.Errorf("deleting a container with a blob: %v, want FailedPrecondition naming %s", err, azure.ParamPurgeOnDelete)
	}
	if exists, err := a.probe.BucketExists(ctx, id); !exists || err != nil {
		t.Fatalf("the refused deletion deleted the container: %v, %v", exists, err)
	}
	purge := map[string]string{azure.ParamPurgeOnDelete: "true"}
	for range 2 {
		if _, err := p.DriverDeleteBucket(
			ctx,
			&cosiproto.DriverDeleteBucketRequest{BucketId: id, Parameters: purge},
		); err != nil {
			t.Errorf("deleting with %s (repeated): %v", azure.ParamPurgeOnDelete, err)
		}
	}
	if exists, err := a.probe.BucketExists(ctx, id); exists || err != nil {
		t.Errorf("the container after its deletion: %v, %v", exists, err)
	}
	empty := createBucket(t, p)
	if _, err := p.DriverDeleteBucket(ctx, &cosiproto.DriverDeleteBucketRequest{BucketId: empty}); err != nil {
		t.Errorf("deleting an empty container: %v", err)
	}
}

// TestRefusals checks the requests the driver refuses before it calls Azure, with the codes the
// spec names.
func TestRefusals(t *testing.T) {
	a := startAzurite(t)
	ctx := t.Context()
	_, p := serve(t, a.newDriver(t, ""), logr.Discard())
	bucket, other := createBucket(t, p), createBucket(t, p)
	for _, tc := range []struct {
		name string
		req  *cosiproto.DriverGenerateBucketAccessIdRequest
		want codes.Code
	}{
		{"two buckets", accessRequest("ba-x", readWrite, nil, bucket, other), codes.OutOfRange},
		{"bucket metadata", accessRequest("ba-x", &cosiproto.AccessModes{BucketMetadata: cosiproto.AccessMode_READ_ONLY},
			nil, bucket), codes.InvalidArgument},
		{"object data READ_ONLY, object metadata WRITE_ONLY", accessRequest("ba-x", &cosiproto.AccessModes{
			ObjectData: cosiproto.AccessMode_READ_ONLY, ObjectMetadata: cosiproto.AccessMode_WRITE_ONLY}, nil, bucket),
			codes.InvalidArgument},
		{"sasExpiry not a duration", accessRequest("ba-x", readWrite, map[string]string{azure.ParamSASExpiry: "soon"},
			bucket), codes.InvalidArgument},
		{"account name no policy ID", accessRequest("ba/x", readWrite, nil, bucket), codes.InvalidArgument},
	} {
		_, err := p.DriverGenerateBucketAccessId(ctx, tc.req)
		if status.Code(err) != tc.want {
			t.Errorf("%s: DriverGenerateBucketAccessId: %v, want %v", tc.name, err, tc.want)
		}
		if _, err := p.DriverGrantBucketAccess(ctx, grantRequest(tc.req, tc.req.AccountName)); status.Code(err) != tc.want {
			t.Errorf("%s: DriverGrantBucketAccess: %v, want %v", tc.name, err, tc.want)
		}
	}
	sa := accessRequest("ba-x", readWrite, nil, bucket)
	sa.AuthenticationType = cosiproto.AuthenticationType_SERVICE_ACCOUNT
	sa.ServiceAccount = &cosiproto.ServiceAccount{Namespace: "ns", Name: "sa"}
	if _, err := p.DriverGenerateBucketAccessId(ctx, sa); status.Code(err) != codes.InvalidArgument {
		t.Errorf("ServiceAccount access: %v, want InvalidArgument", err)
	}
	acc := grant(t, p, readWrite, nil, bucket)
	if _, err := p.DriverGrantBucketAccess(
		ctx,
		grantRequest(accessRequest(acc.id, readOnly, nil, bucket), acc.id),
	); status.Code(
		err,
	) != codes.AlreadyExists {
		t.Errorf("a repeated grant with other modes: %v, want AlreadyExists", err)
	}
	if _, err := p.DriverCreateBucket(
		ctx,
		&cosiproto.DriverCreateBucketRequest{BucketId: "Not_A-Container"},
	); status.Code(
		err,
	) != codes.InvalidArgument {
		t.Errorf("DriverCreateBucket with an invalid container name: %v, want InvalidArgument", err)
	}
	missing := accessRequest("ba-y", readWrite, nil, "missing-"+bucket)
	if _, err := p.DriverGrantBucketAccess(ctx, grantRequest(missing, "ba-y")); status.Code(err) != codes.NotFound {
		t.Errorf("a grant to a missing container: %v, want NotFound", err)
	}
}

func rand8() string { return strings.ToLower(rand.Text()[:8]) }

// TestContainerNamePrefix checks that two clusters sharing an account, each with its own prefix,
// get different containers for buckets of the same name.
func TestContainerNamePrefix(t *testing.T) {
	a := startAzurite(t)
	ctx := t.Context()
	name := "bc-" + rand8()
	var ids []string
	for _, prefix := range []string{"cluster-a-", "cluster-b-"} {
		d := a.newDriver(t, prefix)
		gen, err := d.DriverGenerateBucketId(ctx, &cosiproto.DriverGenerateBucketIdRequest{Name: name})
		if err != nil || gen.GetBucketId() != prefix+name {
			t.Fatalf("DriverGenerateBucketId with prefix %q: %v, %v; want %q", prefix, gen, err, prefix+name)
		}
		_, err = d.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: gen.GetBucketId()})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, gen.GetBucketId())
		t.Cleanup(func() {
			_, _ = d.DriverDeleteBucket(context.Background(), &cosiproto.DriverDeleteBucketRequest{BucketId: gen.GetBucketId()})
		})
	}
	for _, id := range ids {
		if exists, err := a.probe.BucketExists(ctx, id); !exists || err != nil {
			t.Errorf("container %q: exists %v, %v", id, exists, err)
		}
	}
}
