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

// DriverGenerateBucketAccessId returns the account name as the account ID: the stored access
// policies of the access are named after it. It creates nothing; a container that serves as many
// accesses as it can already refuses the access here, before anything of it exists.
func (d *Driver) DriverGenerateBucketAccessId(
	ctx context.Context,
	req *cosiproto.DriverGenerateBucketAccessIdRequest,
) (_ *cosiproto.DriverGenerateBucketAccessIdResponse, err error) {
	defer d.logFailure("DriverGenerateBucketAccessId", &err)
	if _, _, err := checkAccess(req.GetProtocol(), req.GetAuthenticationType(), req.GetParameters(),
		req.GetBuckets()); err != nil {
		return nil, err
	}
	id := req.GetAccountName()
	if err := checkAccountID(id); err != nil {
		return nil, err
	}
	bucket := req.GetBuckets()[0].GetBucketId()
	if err := checkContainerName(bucket); err != nil {
		return nil, err
	}
	if c, err := d.container(bucket); err == nil {
		// Read without the lease: the grant decides again under it. Anything but a full
		// container is the grant's to say.
		if acl, err := c.GetAccessPolicy(ctx, nil); err == nil {
			ids := policySet(acl.SignedIdentifiers)
			if err := ids.full(bucket, id, len(ids.of(id)) > 0); status.Code(err) == codes.InvalidArgument {
				return nil, err
			}
		}
	}
	return &cosiproto.DriverGenerateBucketAccessIdResponse{AccountId: id}, nil
}

// DriverGrantBucketAccess adds a stored access policy of the access to its container, or finds
// its newest one still valid there, and returns a token bound to it with the policy's ID as
// credential_id. Repeating it returns the same token: a grant never moves a policy's expiry (a
// copy of the token that expired would work again); a new policy is added only when the
// access's policies all expired, and the expired ones are deleted then. Renewal before the
// expiry is a rotation (DriverRotateBucketAccessCredentials).
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
	if err := checkAccountID(id); err != nil {
		return nil, err
	}
	bucket := req.GetBuckets()[0].GetBucketId()
	if err := checkContainerName(bucket); err != nil {
		return nil, err
	}
	var granted *container.SignedIdentifier
	err = d.editPolicies(ctx, bucket, func(ids policySet) (policySet, bool, error) {
		now := time.Now()
		mine := ids.of(id)
		for _, p := range mine {
			if p.AccessPolicy == nil || !samePermissions(deref(p.AccessPolicy.Permission), perms) {
				return nil, false, status.Errorf(codes.AlreadyExists,
					"account %q already has other access modes on container %q", id, bucket)
			}
		}
		if n := len(mine); n > 0 && !expired(mine[n-1], now) {
			granted = mine[n-1] // granted before, as asked
			return ids, false, nil
		}
		// None, or all expired: those are deleted, and a new one added.
		ids = ids.without(func(p *container.SignedIdentifier) bool { return policyOwner(deref(p.ID)) == id })
		if err := ids.full(bucket, id, len(mine) > 0); err != nil {
			return nil, false, err
		}
		granted = newPolicy(id, perms, params, now)
		return append(ids, granted), true, nil
	})
	if err != nil {
		return nil, err
	}
	return d.answer(bucket, granted)
}

// answer is the answer that hands out policy p of container bucket: the bucket's information, a
// token bound to p with p's expiry, and p as credential_id.
func (d *Driver) answer(
	bucket string, p *container.SignedIdentifier,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	creds, err := d.credentials(bucket, p)
	if err != nil {
		return nil, err
	}
	return &cosiproto.DriverGrantBucketAccessResponse{
		Buckets: []*cosiproto.DriverGrantBucketAccessResponse_BucketInfo{
			{BucketId: bucket, BucketInfo: d.bucketInfo()},
		},
		Credentials:  creds,
		CredentialId: credentialID(bucket, *p.ID),
	}, nil
}

// newPolicy is a new stored access policy of account id with permissions perms, made at now.
func newPolicy(id, perms string, params accessParams, now time.Time) *container.SignedIdentifier {
	expiry := NoExpiry
	if params.expiry > 0 {
		expiry = now.UTC().Add(params.expiry).Truncate(time.Second)
	}
	pid := newPolicyID(id, now)
	return &container.SignedIdentifier{
		ID: &pid, AccessPolicy: &container.AccessPolicy{Expiry: &expiry, Permission: &perms},
	}
}

// credentials are the credentials of policy p of container bucket: a token bound to it, and the
// policy's expiry unless it has none (NoExpiry).
func (d *Driver) credentials(bucket string, p *container.SignedIdentifier) (*cosiproto.CredentialInfo, error) {
	token, err := d.token(bucket, *p.ID)
	if err != nil {
		return nil, err
	}
	creds := &cosiproto.AzureCredentials{AccessToken: token}
	if e := p.AccessPolicy.Expiry; e != nil && e.Before(NoExpiry) {
		creds.ExpiryTimestamp = timestamppb.New(*e)
	}
	return &cosiproto.CredentialInfo{Azure: creds}, nil
}

// checkAccountID returns InvalidArgument unless id can name an access's stored access policies.
func checkAccountID(id string) error {
	if !validPolicyID(id) || len(id) > maxAccountID {
		return status.Errorf(codes.InvalidArgument,
			"account ID %q cannot name stored access policies: 1 to %d characters of A-Z a-z 0-9 . _ -", id, maxAccountID)
	}
	return nil
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

// revoke deletes every stored access policy of account id from container bucket.
func (d *Driver) revoke(ctx context.Context, bucket, id string) error {
	err := d.editPolicies(ctx, bucket, func(ids policySet) (policySet, bool, error) {
		kept := ids.without(func(p *container.SignedIdentifier) bool { return policyOwner(deref(p.ID)) == id })
		return kept, len(kept) != len(ids), nil
	})
	if status.Code(err) == codes.NotFound {
		return nil
	}
	return err
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
