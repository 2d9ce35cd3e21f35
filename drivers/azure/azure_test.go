package azure_test

import (
	"context"
	"crypto/rand"
	"net/url"
	"regexp"
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
	cfg := sanity.Config{
		Endpoint: endpoint,
		// The driver's default: a container holding blobs (the probe leaves one in each container
		// it checks) is refused with FailedPrecondition, and the suite empties it through the probe.
		InvalidBucketParameters: map[string]string{azure.ParamPurgeOnDelete: "maybe"},
		AccessParameters:        map[string]string{azure.ParamSASExpiry: "1h"},
		InvalidAccessParameters: map[string]string{azure.ParamSASExpiry: "soon"},
		BucketParameterKeys:     azure.BucketParameterKeys,
		AccessParameterKeys:     azure.AccessParameterKeys,
		StaticBucketID:          static,
		DriverLogs:              logs.bytes,
		Probe:                   a.probe.Probe(),
		Sequences:               2, // as drivers/s3's TestSanity
	}
	t.Run("refuse non-empty", func(t *testing.T) { sanity.Test(t, cfg) })
	// With purgeOnDelete the deletion cases see a container deleted with its blobs.
	cfg.BucketParameters = map[string]string{azure.ParamPurgeOnDelete: "true"}
	cfg.Run = regexp.MustCompile(`^(DriverDeleteBucket/|Store/)`)
	t.Run("purgeOnDelete", func(t *testing.T) { sanity.Test(t, cfg) })
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
	if acl, err := a.admin.NewContainerClient(bucket).
		GetAccessPolicy(ctx, nil); err != nil ||
		len(acl.SignedIdentifiers) != 1 {
		t.Errorf("policies after the revoke: %v, %v; want only the other access's", acl.SignedIdentifiers, err)
	}
	// Granted again under the same ID, the access gets a new policy and token: the revoked one
	// stays refused (its policy never comes back).
	req := accessRequest(gone.id, readWrite, nil, bucket)
	again, err := p.DriverGrantBucketAccess(ctx, grantRequest(req, gone.id))
	if err != nil {
		t.Fatal(err)
	}
	if again.GetCredentials().GetAzure().GetAccessToken() == gone.creds.GetAzure().GetAccessToken() {
		t.Error("a grant after the revoke returned the revoked token")
	}
	if err := put(ctx, gone.client, "blob", "z"); !refused(err) {
		t.Errorf("put with the revoked token after a new grant of its account: %v, want refused (403)", err)
	}
	revoke(t, p, gone)
	revoke(t, p, kept)
	revoke(t, p, &access{id: "ba-never", bucket: "no-such-container"})
}

// TestExpiry checks the sasExpiry parameter: the Secret's expiry is the policy's, a token is
// refused once it passed, a repeated grant returns the same token with the same expiry (a grant
// never extends a policy: a copy that expired would work again), and a grant once it expired
// returns a new token, the expired one staying refused.
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
	req := accessRequest(acc.id, readWrite, params, bucket)
	resp, err := p.DriverGrantBucketAccess(ctx, grantRequest(req, acc.id))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetCredentials().GetAzure().GetAccessToken() != acc.creds.GetAzure().GetAccessToken() ||
		!resp.GetCredentials().GetAzure().GetExpiryTimestamp().AsTime().Equal(expiry.AsTime()) ||
		resp.GetCredentialId() != acc.credentialID {
		t.Errorf("a repeated grant before the expiry: another token, expiry or credential_id")
	}

	time.Sleep(time.Until(expiry.AsTime().Add(time.Second)))
	if err := put(ctx, acc.client, "late", "x"); !refused(err) {
		t.Errorf("put after the expiry: %v, want refused (403)", err)
	}
	resp, err = p.DriverGrantBucketAccess(ctx, grantRequest(req, acc.id))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetCredentials().GetAzure().GetAccessToken() == acc.creds.GetAzure().GetAccessToken() {
		t.Fatalf("a grant after the expiry returned the expired token")
	}
	if err := put(ctx, workloadClient(t, resp.GetCredentials().GetAzure().GetAccessToken()), "new", "x"); err != nil {
		t.Errorf("put with the token of the grant after the expiry: %v", err)
	}
	if err := put(ctx, acc.client, "late", "x"); !refused(err) {
		t.Errorf("put with the expired token after a new grant: %v, want refused (403)", err)
	}
	if acl, err := a.admin.NewContainerClient(bucket).GetAccessPolicy(ctx, nil); err != nil ||
		len(acl.SignedIdentifiers) != 1 {
		t.Errorf("the container's policies after the new grant: %v (%v), want the new one only", acl.SignedIdentifiers, err)
	}

	// Without the parameter: no expiry in the Secret, the policy's is far away.
	forever := grant(t, p, readOnly, nil, bucket)
	if ts := forever.creds.GetAzure().GetExpiryTimestamp(); ts != nil {
		t.Errorf("expiry %v without %s, want none", ts.AsTime(), azure.ParamSASExpiry)
	}
}

// TestRotation checks credential rotation, which the sidecar also renews expiring tokens with:
// the rotation's token is bound to a new policy, with a new expiry; the old token works until it
// is retired, then is refused for good; a repeated rotation returns the same new token; retiring
// the access's only policy is FailedPrecondition; a credential of another account or container is
// NotFound; retiring one twice is OK.
func TestRotation(t *testing.T) {
	a := startAzurite(t)
	ctx := t.Context()
	_, p := serve(t, a.newDriver(t, ""), logr.Discard())
	bucket := createBucket(t, p)
	params := map[string]string{azure.ParamSASExpiry: "1h"}
	acc := grant(t, p, readWrite, params, bucket)
	if acc.credentialID == "" {
		t.Fatal("the grant named no credential_id: its token cannot rotate")
	}
	rotate := func(from string) (*cosiproto.DriverRotateBucketAccessCredentialsResponse, error) {
		req := accessRequest(acc.id, readWrite, params, bucket)
		return p.DriverRotateBucketAccessCredentials(ctx, &cosiproto.DriverRotateBucketAccessCredentialsRequest{
			AccountId: acc.id, Buckets: req.Buckets, Protocol: req.Protocol,
			AuthenticationType: req.AuthenticationType, Parameters: params, CredentialId: from,
		})
	}
	retire := func(id string) error {
		_, err := p.DriverRetireBucketAccessCredentials(ctx, &cosiproto.DriverRetireBucketAccessCredentialsRequest{
			AccountId: acc.id, CredentialId: id, Protocol: cosiproto.ObjectProtocol_AZURE,
		})
		return err
	}
	if err := retire(acc.credentialID); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("retiring the only credential: %v, want FailedPrecondition", err)
	}
	time.Sleep(time.Second) // the new policy's expiry is a second later, at least
	rot, err := rotate(acc.credentialID)
	if err != nil {
		t.Fatal(err)
	}
	token := rot.GetCredentials().GetAzure().GetAccessToken()
	if token == acc.creds.GetAzure().GetAccessToken() || rot.GetCredentialId() == acc.credentialID {
		t.Fatal("the rotation returned the old token")
	}
	if !rot.GetCredentials().GetAzure().GetExpiryTimestamp().AsTime().After(
		acc.creds.GetAzure().GetExpiryTimestamp().AsTime()) {
		t.Error("the rotation's token expires no later than the old one")
	}
	again, err := rotate(acc.credentialID)
	if err != nil || again.GetCredentialId() != rot.GetCredentialId() ||
		again.GetCredentials().GetAzure().GetAccessToken() != token {
		t.Errorf("a repeated rotation: %v, %q; want the same token, credential %q", err, again.GetCredentialId(),
			rot.GetCredentialId())
	}
	rotated := workloadClient(t, token)
	for what, c := range map[string]*container.Client{"old": acc.client, "new": rotated} {
		if err := put(ctx, c, "blob-"+what, "x"); err != nil {
			t.Errorf("put with the %s token before the retirement: %v", what, err)
		}
	}
	for _, id := range []string{"", "elsewhere/" + acc.id, bucket + "/ba-someone-else.0000000000000", "garbage"} {
		if _, err := rotate(id); err == nil {
			t.Errorf("rotation from credential %q: OK, want refused", id)
		}
	}
	if err := retire(acc.credentialID); err != nil {
		t.Fatal(err)
	}
	if err := put(ctx, acc.client, "blob-old", "y"); !refused(err) {
		t.Errorf("put with the retired token: %v, want refused (403)", err)
	}
	if err := put(ctx, rotated, "blob-new", "y"); err != nil {
		t.Errorf("put with the new token after the retirement: %v", err)
	}
	if err := retire(acc.credentialID); err != nil {
		t.Errorf("retiring it again: %v, want OK", err)
	}
	if _, err := rotate(acc.credentialID); status.Code(err) != codes.NotFound {
		t.Errorf("rotation from the retired credential: %v, want NotFound", err)
	}
	// A grant repeated now returns the newest token, and the retired one stays refused.
	req := accessRequest(acc.id, readWrite, params, bucket)
	resp, err := p.DriverGrantBucketAccess(ctx, grantRequest(req, acc.id))
	if err != nil || resp.GetCredentials().GetAzure().GetAccessToken() != token {
		t.Errorf("a grant after the rotation: %v; want the rotation's token", err)
	}
	revoke(t, p, acc)
	if err := put(ctx, rotated, "blob-new", "z"); !refused(err) {
		t.Errorf("put with the rotated token after the revoke: %v, want refused (403)", err)
	}
}

// TestFiveAccessesPerContainer checks Azure's limit of five stored access policies per container,
// which Azurite does not enforce: a container serves four accesses, the fifth slot kept for a
// renewal or rotation. The fifth access is refused for good (InvalidArgument, before anything of it
// exists: DriverGenerateBucketAccessId already says so), naming the limit; a rotation of one of the
// four takes the free slot, and a second at the same time waits (ResourceExhausted, retried) until
// the first's old policy is retired. The admin's own policies on an imported container count as
// accesses, and stay.
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
	for range azure.AccessSlots - 1 {
		granted = append(granted, grant(t, p, readWrite, nil, bucket))
	}
	_, err := tryGrant(t, p, readWrite, nil, bucket)
	if msg := status.Convert(err).Message(); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(msg, "at most 4 accesses") {
		t.Fatalf("the fifth access to a container: %v, want InvalidArgument naming the limit", err)
	}
	req := accessRequest("ba-fifth", readWrite, nil, bucket)
	if _, err := p.DriverGrantBucketAccess(ctx, grantRequest(req, "ba-fifth")); status.Code(err) != codes.InvalidArgument {
		t.Errorf("the fifth access's grant, past DriverGenerateBucketAccessId: %v, want InvalidArgument", err)
	}

	rotate := func(acc *access) (*cosiproto.DriverRotateBucketAccessCredentialsResponse, error) {
		req := accessRequest(acc.id, readWrite, nil, bucket)
		return p.DriverRotateBucketAccessCredentials(ctx, &cosiproto.DriverRotateBucketAccessCredentialsRequest{
			AccountId: acc.id, Buckets: req.Buckets, Protocol: req.Protocol,
			AuthenticationType: req.AuthenticationType, CredentialId: acc.credentialID,
		})
	}
	if _, err := rotate(granted[0]); err != nil {
		t.Fatalf("a rotation in the free slot: %v", err)
	}
	if _, err := rotate(granted[1]); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a second rotation while the first one's old policy is there: %v, want ResourceExhausted", err)
	}
	if _, err := p.DriverRetireBucketAccessCredentials(ctx, &cosiproto.DriverRetireBucketAccessCredentialsRequest{
		AccountId: granted[0].id, CredentialId: granted[0].credentialID, Protocol: cosiproto.ObjectProtocol_AZURE,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := rotate(granted[1]); err != nil {
		t.Errorf("the second rotation once the first one's old policy is retired: %v", err)
	}

	revoke(t, p, granted[0])
	fifth := grant(t, p, readWrite, nil, bucket)
	if err := put(ctx, fifth.client, "blob", "x"); err != nil {
		t.Errorf("an access granted once another was revoked: %v", err)
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
	// The S3 driver's quota parameters: refused, saying the store has no container quota.
	for _, param := range []string{"maxSize", "maxObjects"} {
		_, err := p.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{
			BucketId: "quota-" + rand8(), Parameters: map[string]string{param: "10"},
		})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "parameter "+param+": Azure") {
			t.Errorf("a bucket with %s: %v, want InvalidArgument naming it and the store", param, err)
		}
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
