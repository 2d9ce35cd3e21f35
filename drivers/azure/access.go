package azure

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// NoExpiry is the expiry of a stored access policy without ParamSASExpiry: Azure needs one on the
// policy or in the token, and the token must not carry one (it would then outlive nothing the
// driver controls). The Secret reports no expiry for it.
var NoExpiry = time.Date(9999, time.December, 31, 23, 59, 59, 0, time.UTC)

// accessParams are parsed access parameters.
type accessParams struct {
	// expiry is how long a policy lasts after a grant; zero means NoExpiry.
	expiry time.Duration
}

// checkAccess checks what an access asks for and returns its parameters and the SAS permissions
// of its one bucket.
func checkAccess(
	protocol cosiproto.ObjectProtocol_Type,
	auth cosiproto.AuthenticationType_Type,
	params map[string]string,
	buckets []*cosiproto.AccessedBucket,
) (accessParams, string, error) {
	var p accessParams
	if protocol != cosiproto.ObjectProtocol_AZURE {
		return p, "", status.Errorf(codes.InvalidArgument, "protocol %v is not supported by this driver (Azure only)",
			protocol)
	}
	if auth == cosiproto.AuthenticationType_SERVICE_ACCOUNT {
		return p, "", status.Error(codes.InvalidArgument, "ServiceAccount authentication is not supported by this "+
			"driver: it grants shared access signatures (authenticationType Key)")
	}
	for k, v := range params {
		if k != ParamSASExpiry {
			return p, "", status.Errorf(codes.InvalidArgument, "unknown access parameter %q (known: %s)", k, ParamSASExpiry)
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Second {
			return p, "", status.Errorf(codes.InvalidArgument,
				"parameter %s must be a duration of a second or more, such as \"720h\", not %q", ParamSASExpiry, v)
		}
		p.expiry = d
	}
	switch len(buckets) {
	case 0:
		return p, "", status.Error(codes.InvalidArgument, "no bucket to grant access to")
	case 1:
	default:
		return p, "", status.Errorf(codes.OutOfRange, "an Azure shared access signature opens one container: "+
			"this driver cannot give %d buckets one credential; use one BucketAccess per bucket", len(buckets))
	}
	perms, err := permissions(buckets[0].GetBucketId(), buckets[0].GetAccessModes())
	return p, perms, err
}

// permissions maps access modes to the SAS permissions of a container's stored access policy
// (docs/drivers/azure.md has the table):
//   - object data read: r (Get Blob) and l (List Blobs); write: a, c, w (Put Blob, Put Block,
//     Append Block) and d (Delete Blob);
//   - object metadata read: r (Get Blob Properties and Metadata); write: w (Set Blob Metadata
//     and Properties); READ_WRITE also t (Get and Set Blob Tags, which Azure grants together);
//   - bucket metadata: nothing; a service SAS never reaches the container's own properties,
//     metadata or ACL, so any request for it is refused.
//
// Azure ties some of them together (r reads a blob and its metadata, w writes both): a request
// whose modes would need a permission that also grants what another of its modes denies is
// refused with InvalidArgument, naming the permission, rather than granted more or less than it
// asks. Permissions are never x, i, m, e, o, p or f.
func permissions(bucket string, m *cosiproto.AccessModes) (string, error) {
	od, om := m.GetObjectData(), m.GetObjectMetadata()
	reads := func(mode cosiproto.AccessMode_Mode) bool {
		return mode == cosiproto.AccessMode_READ_WRITE || mode == cosiproto.AccessMode_READ_ONLY
	}
	writes := func(mode cosiproto.AccessMode_Mode) bool {
		return mode == cosiproto.AccessMode_READ_WRITE || mode == cosiproto.AccessMode_WRITE_ONLY
	}
	if m.GetBucketMetadata() != cosiproto.AccessMode_UNSPECIFIED {
		return "", status.Errorf(codes.InvalidArgument,
			"bucket %q: bucket metadata access (%v) cannot be granted: an Azure shared access signature for a "+
				"container reaches its blobs, never the container's own properties, metadata or access policy; "+
				"leave bucketMetadata unset", bucket, m.GetBucketMetadata())
	}
	r := reads(od) || reads(om)
	w := writes(od) || writes(om)
	if !r && !w {
		return "", status.Errorf(codes.InvalidArgument, "bucket %q: no access mode requested", bucket)
	}
	if r && (od == cosiproto.AccessMode_WRITE_ONLY || om == cosiproto.AccessMode_WRITE_ONLY) {
		return "", status.Errorf(codes.InvalidArgument,
			"bucket %q: object data %v with object metadata %v cannot be granted: reading either needs the SAS "+
				"permission r, which reads both blobs and their metadata", bucket, od, om)
	}
	if w && (od == cosiproto.AccessMode_READ_ONLY || om == cosiproto.AccessMode_READ_ONLY) {
		return "", status.Errorf(codes.InvalidArgument,
			"bucket %q: object data %v with object metadata %v cannot be granted: writing either needs the SAS "+
				"permission w, which writes both blobs and their metadata", bucket, od, om)
	}
	// Azure's order: r a c w d x l t ...
	var b strings.Builder
	add := func(on bool, p byte) {
		if on {
			b.WriteByte(p)
		}
	}
	add(r, 'r')
	add(writes(od), 'a')
	add(writes(od), 'c')
	add(w, 'w')
	add(writes(od), 'd')
	add(reads(od), 'l')
	add(om == cosiproto.AccessMode_READ_WRITE, 't')
	return b.String(), nil
}

// samePermissions compares permission strings as sets: Azure may answer them in its own order.
func samePermissions(a, b string) bool {
	x, y := []byte(a), []byte(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// DriverGenerateBucketAccessId returns the account name as the account ID: the ID of the stored
// access policy DriverGrantBucketAccess creates. It creates nothing.
func (d *Driver) DriverGenerateBucketAccessId(
	_ context.Context,
	req *cosiproto.DriverGenerateBucketAccessIdRequest,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	if _, _, err := checkAccess(req.GetProtocol(), req.GetAuthenticationType(), req.GetParameters(),
		req.GetBuckets()); err != nil {
		return nil, err
	}
	if !validPolicyID(req.GetAccountName()) {
		return nil, status.Errorf(codes.InvalidArgument,
			"account_name %q is not a valid stored access policy ID: 1 to 64 characters of A-Z a-z 0-9 . _ -",
			req.GetAccountName())
	}
	return &cosiproto.DriverGenerateBucketAccessIdResponse{AccountId: req.GetAccountName()}, nil
}

// DriverGrantBucketAccess adds the access's stored access policy to its container (or finds it
// there) and returns a token bound to it. Repeating it returns the same token, with the policy's
// expiry moved forward when ParamSASExpiry is set.
func (d *Driver) DriverGrantBucketAccess(
	ctx context.Context,
	req *cosiproto.DriverGrantBucketAccessRequest,
) (_ *cosiproto.DriverGrantBucketAccessResponse, err error) {
	defer d.logFailure("DriverGrantBucketAccess", &err)
	params, perms, err := checkAccess(req.GetProtocol(), req.GetAuthenticationType(), req.GetParameters(),
		req.GetBuckets())
	if err != nil {
		return nil, err
	}
	id := req.GetAccountId()
	if !validPolicyID(id) {
		return nil, status.Errorf(codes.InvalidArgument, "account_id %q is not a valid stored access policy ID", id)
	}
	bucket := req.GetBuckets()[0].GetBucketId()
	if err := checkContainerName(bucket); err != nil {
		return nil, err
	}
	expiry := NoExpiry
	if params.expiry > 0 {
		expiry = time.Now().UTC().Add(params.expiry).Truncate(time.Second)
	}

	unlock := d.locks.Lock(bucket)
	defer unlock()
	c, err := d.container(bucket)
	if err != nil {
		return nil, err
	}
	leaseID, release, err := d.holdPolicies(ctx, c, bucket)
	if err != nil {
		return nil, err
	}
	defer release()
	acl, err := c.GetAccessPolicy(ctx, nil)
	if err != nil {
		return nil, toStatus(err, "reading the stored access policies of container %q", bucket)
	}
	ids := acl.SignedIdentifiers
	i := slices.IndexFunc(ids, func(s *container.SignedIdentifier) bool { return s.ID != nil && *s.ID == id })
	write := true
	switch {
	case i >= 0 && (ids[i].AccessPolicy == nil || !samePermissions(deref(ids[i].AccessPolicy.Permission), perms)):
		return nil, status.Errorf(codes.AlreadyExists,
			"account %q already has other access modes on container %q", id, bucket)
	case i >= 0 && ids[i].AccessPolicy.Expiry != nil && ids[i].AccessPolicy.Expiry.Equal(expiry):
		write = false // granted before, as asked
	case i >= 0:
		ids[i].AccessPolicy.Expiry = &expiry
	case len(ids) >= MaxStoredAccessPolicies:
		return nil, status.Errorf(codes.ResourceExhausted,
			"container %q already has %d stored access policies, Azure's limit: each access to an Azure bucket "+
				"is one, so the bucket serves at most %d accesses at a time; the grant is retried, and succeeds "+
				"once another access to the bucket is deleted", bucket, len(ids), MaxStoredAccessPolicies)
	default:
		ids = append(ids, &container.SignedIdentifier{
			ID:           &id,
			AccessPolicy: &container.AccessPolicy{Expiry: &expiry, Permission: &perms},
		})
	}
	if write {
		if err := setPolicies(ctx, c, leaseID, acl, ids); err != nil {
			return nil, toStatus(err, "writing the stored access policies of container %q", bucket)
		}
	}
	token, err := d.token(bucket, id)
	if err != nil {
		return nil, err
	}
	creds := &cosiproto.AzureCredentials{AccessToken: token}
	if params.expiry > 0 {
		creds.ExpiryTimestamp = timestamppb.New(expiry)
	}
	return &cosiproto.DriverGrantBucketAccessResponse{
		Buckets: []*cosiproto.DriverGrantBucketAccessResponse_BucketInfo{
			{BucketId: bucket, BucketInfo: d.bucketInfo()},
		},
		Credentials: &cosiproto.CredentialInfo{Azure: creds},
	}, nil
}

// setPolicies writes the container's stored access policies, keeping its public access level
// (Set Container ACL sets both; without the level it would make a public container private). With
// leaseID (holdPolicies) it fails unless the driver still holds the container's lease.
func setPolicies(
	ctx context.Context, c *container.Client, leaseID *string,
	acl container.GetAccessPolicyResponse, ids []*container.SignedIdentifier,
) error {
	opts := &container.SetAccessPolicyOptions{Access: acl.BlobPublicAccess, ContainerACL: ids}
	if leaseID != nil {
		opts.AccessConditions = &container.AccessConditions{
			LeaseAccessConditions: &container.LeaseAccessConditions{LeaseID: leaseID},
		}
	}
	_, err := c.SetAccessPolicy(ctx, opts)
	return err
}

// PolicyLeaseSeconds is how long the driver leases a container while it changes the container's
// stored access policies: Azure's shortest lease. The driver releases it as soon as it is done; one
// that stops holding it blocks the others no longer than that.
const PolicyLeaseSeconds = 15

// releaseTimeout bounds giving a lease back, also when the call that took it was cancelled.
const releaseTimeout = 10 * time.Second

// holdPolicies leases container c (bucket) while the driver changes its stored access policies:
// Set Container ACL replaces all of them, so a change is a read and a write, and two drivers each
// writing back what they read would undo each other's change, bringing back a policy that was
// deleted and so a revoked token (two replicas around a leader change, or two clusters that
// imported one container; the driver's lock orders only its own calls). Whoever takes the lease
// first goes first; the write names the lease, so it fails if the lease expired meanwhile. A
// container leased by someone else is Unavailable (retried), except one with an infinite lease,
// which the driver never takes: its owner's (protecting an imported container from deletion),
// which it leaves alone and changes the policies without a lease. The container missing is
// NotFound. release gives the lease back.
func (d *Driver) holdPolicies(ctx context.Context, c *container.Client, bucket string) (*string, func(), error) {
	lc, err := lease.NewContainerClient(c, nil) // a new random lease ID
	if err != nil {
		return nil, nil, status.Errorf(codes.Internal, "leasing container %q: %v", bucket, err)
	}
	_, err = lc.AcquireLease(ctx, PolicyLeaseSeconds, nil)
	switch {
	case err == nil:
		release := func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
			defer cancel()
			if _, err := lc.ReleaseLease(ctx, nil); err != nil {
				d.cfg.Logger.Error(err, "releasing the lease of a container: it expires on its own",
					"container", bucket, "seconds", PolicyLeaseSeconds)
			}
		}
		return lc.LeaseID(), release, nil
	case hasCode(err, bloberror.LeaseAlreadyPresent):
		props, perr := c.GetProperties(ctx, nil)
		if perr != nil {
			return nil, nil, toStatus(perr, "looking up the lease of container %q", bucket)
		}
		if props.LeaseDuration != nil && *props.LeaseDuration == lease.DurationTypeInfinite {
			return nil, func() {}, nil
		}
	}
	return nil, nil, toStatus(err, "leasing container %q to change its stored access policies", bucket)
}

// token is the service SAS bound to the stored access policy id of container name, with the
// container's URL (KEP-1979's AZURE_STORAGE_SAS_TOKEN includes the resource URI). It names no
// permissions and no expiry: the policy holds them, so deleting the policy revokes the token. The
// signature covers the account, the container, the policy ID and the service version, so the
// same access always gets the same token.
func (d *Driver) token(name, id string) (string, error) {
	cred, err := d.cfg.Credentials.current()
	if err != nil {
		return "", toStatus(err, "reading the credentials")
	}
	protocol := sas.ProtocolHTTPS
	if strings.HasPrefix(d.cfg.PublicEndpoint, "http://") {
		protocol = sas.ProtocolHTTPSandHTTP // an emulator, or a gateway without TLS
	}
	q, err := sas.BlobSignatureValues{Protocol: protocol, ContainerName: name, Identifier: id}.SignWithSharedKey(cred)
	if err != nil {
		return "", status.Errorf(codes.Internal, "signing the token of container %q", name)
	}
	return d.cfg.PublicEndpoint + "/" + name + "?" + q.Encode(), nil
}

// DriverRevokeBucketAccess deletes the access's stored access policy from its container, which
// revokes its token. A missing container or policy is already revoked.
func (d *Driver) DriverRevokeBucketAccess(
	ctx context.Context,
	req *cosiproto.DriverRevokeBucketAccessRequest,
) (_ *cosiproto.DriverRevokeBucketAccessResponse, err error) {
	defer d.logFailure("DriverRevokeBucketAccess", &err)
	id := req.GetAccountId()
	if !validPolicyID(id) {
		return &cosiproto.DriverRevokeBucketAccessResponse{}, nil // never granted
	}
	for _, b := range req.GetBuckets() {
		bucket := b.GetBucketId()
		// A grant never accepted an invalid ID, so nothing of this access is there. Revoking
		// must not fail for good on it: skip it and revoke the rest.
		if !validContainerName(bucket) {
			d.cfg.Logger.Info("revoke: skipping a bucket ID that is no container name", "accountID", id, "bucketID", bucket)
			continue
		}
		if err := d.revoke(ctx, bucket, id); err != nil {
			return nil, err
		}
	}
	return &cosiproto.DriverRevokeBucketAccessResponse{}, nil
}

func (d *Driver) revoke(ctx context.Context, bucket, id string) error {
	unlock := d.locks.Lock(bucket)
	defer unlock()
	c, err := d.container(bucket)
	if err != nil {
		return err
	}
	leaseID, release, err := d.holdPolicies(ctx, c, bucket)
	switch {
	case status.Code(err) == codes.NotFound:
		return nil
	case err != nil:
		return err
	}
	defer release()
	acl, err := c.GetAccessPolicy(ctx, nil)
	switch {
	case hasCode(err, bloberror.ContainerNotFound):
		return nil
	case err != nil:
		return toStatus(err, "reading the stored access policies of container %q", bucket)
	}
	ids := slices.DeleteFunc(slices.Clone(acl.SignedIdentifiers),
		func(s *container.SignedIdentifier) bool { return s.ID != nil && *s.ID == id })
	if len(ids) == len(acl.SignedIdentifiers) {
		return nil
	}
	err = setPolicies(ctx, c, leaseID, acl, ids)
	if err != nil && !hasCode(err, bloberror.ContainerNotFound) {
		return toStatus(err, "writing the stored access policies of container %q", bucket)
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
