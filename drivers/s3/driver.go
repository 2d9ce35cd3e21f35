// Package s3 is COSI's driver for S3-compatible object stores. Buckets are created and deleted
// with the S3 API under the driver's admin credentials; each BucketAccess gets its own backend
// identity with one key pair and a policy built from the requested access modes, through one of
// two account back-ends: the AWS IAM API (AWS, the Versity S3 gateway's IAM service) or Ceph
// RGW's Admin Ops API with bucket policies. docs/drivers/s3.md documents configuration,
// parameters and the access-mode table.
package s3

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/pkg/driver"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// DefaultName is the driver's name unless configured otherwise.
const DefaultName = "s3.cosi.kube-cosi.io"

// Bucket parameters (BucketClass.spec.parameters, or Bucket.spec.parameters of a static
// bucket). Unknown keys are refused with InvalidArgument, so that a typo is an error.
const (
	// ParamRegion is the bucket's region (S3 LocationConstraint); default: the driver's region.
	ParamRegion = "region"
	// ParamVersioning ("true" or "false", default "false") enables object versioning.
	ParamVersioning = "versioning"
	// ParamObjectLock ("true" or "false", default "false") creates the bucket with S3 Object
	// Lock enabled, which also enables versioning. It can only be set at creation.
	ParamObjectLock = "objectLock"
	// ParamPurgeOnDelete ("true" or "false", default "false") decides what DriverDeleteBucket
	// does with a bucket that still holds objects: by default it refuses with FailedPrecondition
	// and a message, and deletes nothing; with "true" it deletes every object, version and
	// unfinished upload first. Objects under Object Lock retention cannot be purged.
	ParamPurgeOnDelete = "purgeOnDelete"
)

// Access parameters (BucketAccessClass.spec.parameters). Unknown keys are refused with
// InvalidArgument, so that a typo is an error.
const (
	// ParamAllowObjectLock ("true" or "false", default "false") lets accesses with objectData
	// write also set object retention and legal holds (objectLockActions, and the
	// x-amz-object-lock-* headers of uploads) in buckets with Object Lock. Without it they are
	// refused; on stores that cannot refuse the headers (lockHeadersUnchecked: Ceph RGW),
	// objectData write to a bucket with Object Lock is refused instead. A COMPLIANCE retention
	// keeps the objects, and so the bucket, from being deleted until its date: an admin opts in
	// per class. s3:BypassGovernanceRetention is never granted, with or without it.
	ParamAllowObjectLock = "allowObjectLock"
)

// OwnerTag is the bucket tag that marks buckets this driver created; its value is the driver
// name. A bucket with the generated name but without the tag is not the driver's and is never
// adopted, unless it is owned by the driver's admin identity, untagged and empty (a creation
// the driver started and did not finish).
const OwnerTag = "cosi.kube-cosi.io/driver"

// Accounts is an account back-end: it manages the backend identity, key and policy of each
// BucketAccess. Implementations must be idempotent.
type Accounts interface {
	// Grant creates the identity accountID if missing, sets its access to exactly grants, and
	// returns a key that works. It returns AlreadyExists when accountID exists with another
	// grant or was not created by the driver.
	Grant(ctx context.Context, accountID string, grants []bucketGrant) (Key, error)
	// Revoke deletes the identity's keys, its access to buckets, and the identity. Unknown
	// identities and buckets are already revoked.
	Revoke(ctx context.Context, accountID string, buckets []string) error
	// List returns the identities the driver manages (for tests and operators).
	List(ctx context.Context) ([]string, error)
}

// Key is an S3 key pair.
type Key struct {
	AccessKeyID, SecretAccessKey string
}

// Config configures the driver.
type Config struct {
	// Name is the driver name; empty means DefaultName.
	Name string
	// Endpoint is the S3 endpoint URL the driver uses, e.g. http://127.0.0.1:7070.
	Endpoint string
	// PublicEndpoint is the S3 endpoint URL workloads are given; empty means Endpoint.
	PublicEndpoint string
	// Region is the default region; empty means us-east-1.
	Region string
	// VirtualHostedStyle reports virtual-hosted-style addressing to workloads (the driver itself
	// always uses path style, which every S3 store supports).
	VirtualHostedStyle bool
	// BucketNamePrefix is prepended to every generated bucket name, e.g. a cluster name, so that
	// several clusters can share one object store.
	BucketNamePrefix string
	// Credentials are the admin credentials used for buckets.
	Credentials aws.CredentialsProvider
	// Accounts is the account back-end. Required.
	Accounts Accounts
	// ServiceAccounts enables authenticationType ServiceAccount; nil refuses it with
	// InvalidArgument.
	ServiceAccounts *ServiceAccountAuth
	// HTTPClient is used for every backend call; nil means a default client.
	HTTPClient *http.Client
	// Logger receives the object store's own error for each failed call (gRPC errors carry
	// only the driver's message; see backendError). The zero Logger discards them.
	Logger logr.Logger
}

// Driver is the S3 driver. It implements cosiproto.IdentityServer and cosiproto.ProvisionerServer.
type Driver struct {
	cosiproto.UnimplementedIdentityServer
	cosiproto.UnimplementedProvisionerServer

	cfg Config
	s3  *s3.Client
	// ignorePublicACLs: the buckets the driver creates get IgnorePublicAcls (see
	// publicACLIgnorer).
	ignorePublicACLs bool
	// lockHeadersUnchecked: see the interface of that name.
	lockHeadersUnchecked bool

	locks driver.KeyedMutex
}

// publicACLIgnorer is implemented by account back-ends whose store lets a key that may write
// objects also give them a public ACL in ways no policy the driver writes can refuse (Ceph RGW:
// CopyObject and CreateMultipartUpload with x-amz-acl or x-amz-grant-* headers). The buckets the
// driver creates for them have IgnorePublicAcls set in their public access block.
type publicACLIgnorer interface {
	ignorePublicACLsOnNewBuckets() bool
}

// roleUser is implemented by account back-ends that make key accesses check for roles (that the
// account is not the role of a ServiceAccount access) only while roles are in use: New tells them
// whether ServiceAccount authentication is enabled. Without it the admin identity needs, and may
// have, no role rights at all.
type roleUser interface {
	useRoles(bool)
}

// lockHeadersUnchecked is implemented by account back-ends whose store lets a key with
// s3:PutObject lock what it uploads, with the x-amz-object-lock-* headers, whatever the policy
// says: Ceph RGW 16 checks such an upload against s3:PutObject alone and puts no object-lock
// condition key into the policy's context. On them, objectData write to a bucket with Object
// Lock is granted only with ParamAllowObjectLock.
type lockHeadersUnchecked interface {
	objectLockHeadersUnchecked() bool
}

// New returns a driver.
func New(cfg Config) (*Driver, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Endpoint == "" {
		return nil, errors.New("s3: no endpoint")
	}
	if cfg.PublicEndpoint == "" {
		cfg.PublicEndpoint = cfg.Endpoint
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.Accounts == nil {
		return nil, errors.New("s3: no account back-end")
	}
	if cfg.Credentials == nil {
		return nil, errors.New("s3: no admin credentials")
	}
	if cfg.ServiceAccounts != nil {
		sa := *cfg.ServiceAccounts
		if err := sa.check(cfg.Name); err != nil {
			return nil, err
		}
		if _, ok := cfg.Accounts.(RoleAccounts); !ok {
			return nil, errors.New("s3: ServiceAccount authentication needs an account back-end with IAM roles " +
				"(the iam back-end)")
		}
		cfg.ServiceAccounts = &sa
	}
	if r, ok := cfg.Accounts.(roleUser); ok {
		r.useRoles(cfg.ServiceAccounts != nil)
	}
	d := &Driver{cfg: cfg, s3: NewS3Client(cfg.Endpoint, cfg.Region, cfg.Credentials, cfg.HTTPClient)}
	if i, ok := cfg.Accounts.(publicACLIgnorer); ok {
		d.ignorePublicACLs = i.ignorePublicACLsOnNewBuckets()
	}
	if u, ok := cfg.Accounts.(lockHeadersUnchecked); ok {
		d.lockHeadersUnchecked = u.objectLockHeadersUnchecked()
	}
	return d, nil
}

// logFailure logs the object store's error behind a failed call, which the gRPC error does not
// carry. Deferred by every RPC.
func (d *Driver) logFailure(method string, errp *error) {
	var be *backendError
	if *errp != nil && errors.As(*errp, &be) && be.cause != nil {
		d.cfg.Logger.Error(
			be.cause,
			"object store call failed",
			"method", method,
			"code", be.st.Code().String(),
			"message", be.st.Message(),
		)
	}
}

// NewS3Client returns a path-style S3 client for endpoint.
func NewS3Client(endpoint, region string, creds aws.CredentialsProvider, httpClient *http.Client) *s3.Client {
	opts := s3.Options{
		BaseEndpoint: aws.String(endpoint),
		Region:       region,
		Credentials:  creds,
		UsePathStyle: true,
		// Checksums only when an operation requires them: not every S3-compatible store
		// understands the newer default checksum headers.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}
	if httpClient != nil {
		opts.HTTPClient = httpClient
	}
	return s3.New(opts)
}

// DriverGetInfo returns the driver's name; it supports S3 only.
func (d *Driver) DriverGetInfo(
	context.Context,
	*cosiproto.DriverGetInfoRequest,
) (*cosiproto.DriverGetInfoResponse, error) {
	return &cosiproto.DriverGetInfoResponse{
		Name:               d.cfg.Name,
		SupportedProtocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3},
		Capabilities:       d.capabilities(),
	}, nil
}

// bucketParams are parsed bucket parameters.
type bucketParams struct {
	region                        string
	versioning, objectLock, purge bool
	versioningSet, objectLockSet  bool
	// quota, when quotaSet, is what the store is to enforce (quota.go).
	quota    Quota
	quotaSet bool
}

func parseBool(params map[string]string, key string) (value, set bool, err error) {
	v, ok := params[key]
	if !ok {
		return false, false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil || (v != "true" && v != "false") {
		return false, true, status.Errorf(codes.InvalidArgument, "parameter %s must be \"true\" or \"false\", not %q", key, v)
	}
	return b, true, nil
}

func (d *Driver) parseBucketParams(params map[string]string) (bucketParams, error) {
	p := bucketParams{region: d.cfg.Region}
	for k, v := range params {
		switch k {
		case ParamRegion:
			if v == "" {
				return p, status.Errorf(codes.InvalidArgument, "parameter %s must not be empty", ParamRegion)
			}
			p.region = v
		case ParamVersioning, ParamObjectLock, ParamPurgeOnDelete, ParamMaxSize, ParamMaxObjects:
		default:
			return p, status.Errorf(codes.InvalidArgument, "unknown bucket parameter %q (known: %s, %s, %s, %s, %s, %s)",
				k, ParamRegion, ParamVersioning, ParamObjectLock, ParamPurgeOnDelete, ParamMaxSize, ParamMaxObjects)
		}
	}
	var err error
	if p.quota, p.quotaSet, err = d.quotaFor(params); err != nil {
		return p, err
	}
	if p.versioning, p.versioningSet, err = parseBool(params, ParamVersioning); err != nil {
		return p, err
	}
	if p.objectLock, p.objectLockSet, err = parseBool(params, ParamObjectLock); err != nil {
		return p, err
	}
	if p.purge, _, err = parseBool(params, ParamPurgeOnDelete); err != nil {
		return p, err
	}
	if p.objectLock && p.versioningSet && !p.versioning {
		return p, status.Errorf(
			codes.InvalidArgument,
			"parameter %s=true needs versioning; %s=false contradicts it",
			ParamObjectLock,
			ParamVersioning,
		)
	}
	return p, nil
}

func checkProtocols(protocols []cosiproto.ObjectProtocol_Type) error {
	for _, p := range protocols {
		if p != cosiproto.ObjectProtocol_S3 {
			return status.Errorf(codes.InvalidArgument, "protocol %v is not supported by this driver (S3 only)", p)
		}
	}
	return nil
}

// DriverGenerateBucketId derives the S3 bucket name from the request name (see BucketName). It
// creates nothing; it fails with AlreadyExists when a bucket of that name exists that the driver
// did not create or that has incompatible parameters.
func (d *Driver) DriverGenerateBucketId(
	ctx context.Context,
	req *cosiproto.DriverGenerateBucketIdRequest,
) (_ *cosiproto.DriverGenerateBucketIdResponse, err error) {
	defer d.logFailure("DriverGenerateBucketId", &err)
	if err := checkProtocols(req.GetProtocols()); err != nil {
		return nil, err
	}
	p, err := d.parseBucketParams(req.GetParameters())
	if err != nil {
		return nil, err
	}
	id := BucketName(d.cfg.BucketNamePrefix, req.GetName())
	exists, err := d.bucketExists(ctx, id)
	if err != nil {
		return nil, err
	}
	if exists {
		if err := d.checkOurs(ctx, id, false); err != nil {
			return nil, err
		}
		if err := d.checkCompatible(ctx, id, p, true); err != nil {
			return nil, err
		}
	}
	return &cosiproto.DriverGenerateBucketIdResponse{BucketId: id}, nil
}

// DriverCreateBucket creates the bucket with its parameters and the owner tag. An existing bucket
// the driver created with compatible parameters is returned as it is.
func (d *Driver) DriverCreateBucket(
	ctx context.Context,
	req *cosiproto.DriverCreateBucketRequest,
) (_ *cosiproto.DriverCreateBucketResponse, err error) {
	defer d.logFailure("DriverCreateBucket", &err)
	if err := checkProtocols(req.GetProtocols()); err != nil {
		return nil, err
	}
	p, err := d.parseBucketParams(req.GetParameters())
	if err != nil {
		return nil, err
	}
	id := req.GetBucketId()
	if err := checkBucketID(id); err != nil {
		return nil, err
	}
	unlock := d.locks.Lock("bucket/" + id)
	defer unlock()

	in := &s3.CreateBucketInput{Bucket: aws.String(id)}
	if p.region != "us-east-1" {
		in.CreateBucketConfiguration = &types.CreateBucketConfiguration{
			LocationConstraint: types.BucketLocationConstraint(p.region),
		}
	}
	if p.objectLock {
		in.ObjectLockEnabledForBucket = aws.Bool(true)
	}
	// Look first: some stores (Ceph RGW) answer CreateBucket for a bucket the caller already owns
	// with success rather than BucketAlreadyOwnedByYou.
	exists, err := d.bucketExists(ctx, id)
	if err != nil {
		return nil, err
	}
	if !exists {
		_, err = d.s3.CreateBucket(ctx, in)
	}
	switch code := apiCode(err); {
	case exists || code == "BucketAlreadyOwnedByYou":
		// Created before: by this driver (a repeated call) or by someone else.
		if err := d.checkOurs(ctx, id, true); err != nil {
			return nil, err
		}
		if err := d.checkCompatible(ctx, id, p, true); err != nil {
			return nil, err
		}
		// A creation that stopped before the public access block or the quota was set (or a
		// bucket created before the driver set them) is finished now.
		if err := d.ensureIgnorePublicACLs(ctx, id); err != nil {
			return nil, err
		}
		if err := d.applyQuota(ctx, id, p.quota, p.quotaSet); err != nil {
			return nil, err
		}
		return &cosiproto.DriverCreateBucketResponse{
			Protocols: d.bucketInfo(id, d.reportedRegion(ctx, id, p, req.GetParameters())),
		}, nil
	case err == nil:
	case code == "BucketAlreadyExists":
		return nil, status.Errorf(codes.AlreadyExists, "bucket %q exists and belongs to another account", id)
	default:
		return nil, toStatus(err, "creating bucket %q", id)
	}

	if err := d.configure(ctx, id, p); err != nil {
		// A bucket that cannot be what the class asks for is removed again (it is new and
		// empty), so that fixing the class and retrying starts clean. After a retryable error it
		// stays: the retry finishes it.
		if !driver.Retryable(err) {
			_, _ = d.s3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(id)})
		}
		return nil, err
	}
	return &cosiproto.DriverCreateBucketResponse{
		Protocols: d.bucketInfo(id, d.reportedRegion(ctx, id, p, req.GetParameters())),
	}, nil
}

// configure tags a new bucket as the driver's, sets its public access block (see
// ensureIgnorePublicACLs) and applies its parameters.
func (d *Driver) configure(ctx context.Context, id string, p bucketParams) error {
	if err := d.tagBucket(ctx, id); err != nil {
		return err
	}
	if err := d.ensureIgnorePublicACLs(ctx, id); err != nil {
		return err
	}
	if p.versioning && !p.objectLock {
		_, err := d.s3.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String(id),
			VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}})
		if err != nil {
			return toStatus(err, "enabling versioning of bucket %q", id)
		}
	}
	return d.applyQuota(ctx, id, p.quota, p.quotaSet)
}

// DriverGetBucket finds an existing bucket for static provisioning: NotFound when it does not
// exist, AlreadyExists when parameters given in the request contradict its configuration.
func (d *Driver) DriverGetBucket(
	ctx context.Context,
	req *cosiproto.DriverGetBucketRequest,
) (_ *cosiproto.DriverGetBucketResponse, err error) {
	defer d.logFailure("DriverGetBucket", &err)
	if err := checkProtocols(req.GetProtocols()); err != nil {
		return nil, err
	}
	p, err := d.parseBucketParams(req.GetParameters())
	if err != nil {
		return nil, err
	}
	id := req.GetBucketId()
	if err := checkBucketID(id); err != nil {
		return nil, err
	}
	if err := d.existingBucket(ctx, id); err != nil {
		return nil, err
	}
	if err := d.checkCompatible(ctx, id, p, false); err != nil {
		return nil, err
	}
	// An imported bucket's quota parameters are applied to it as to a new one: the admin who
	// writes them on the Bucket asks the store to enforce them.
	if err := d.applyQuota(ctx, id, p.quota, p.quotaSet); err != nil {
		return nil, err
	}
	return &cosiproto.DriverGetBucketResponse{
		Protocols: d.bucketInfo(id, d.reportedRegion(ctx, id, p, req.GetParameters())),
	}, nil
}

// reportedRegion is the region bucket info states for bucket id: the region parameter when the
// class sets one, else the region the store reports (Ceph RGW names its zonegroup, "default"),
// else the driver's. DriverCreateBucket, DriverGetBucket and DriverGrantBucketAccess all report
// it, so that Bucket.status and the workload's Secret agree (cosi-sanity compares them).
func (d *Driver) reportedRegion(ctx context.Context, id string, p bucketParams, params map[string]string) string {
	if _, set := params[ParamRegion]; set {
		return p.region
	}
	if r, err := d.bucketRegion(ctx, id); err == nil && r != "" {
		return r
	}
	return p.region
}

// DriverDeleteBucket deletes the bucket. A bucket that holds objects is refused with
// FailedPrecondition unless the parameter purgeOnDelete is "true". A missing bucket is already
// deleted.
func (d *Driver) DriverDeleteBucket(
	ctx context.Context,
	req *cosiproto.DriverDeleteBucketRequest,
) (_ *cosiproto.DriverDeleteBucketResponse, err error) {
	defer d.logFailure("DriverDeleteBucket", &err)
	p, err := d.parseBucketParams(req.GetParameters())
	if err != nil {
		return nil, err
	}
	id := req.GetBucketId()
	if err := checkBucketID(id); err != nil {
		return nil, err
	}
	unlock := d.locks.Lock("bucket/" + id)
	defer unlock()

	if p.purge {
		if err := d.purge(ctx, id); err != nil {
			return nil, err
		}
	}
	_, err = d.s3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(id)})
	switch apiCode(err) {
	case "":
		if err != nil {
			return nil, toStatus(err, "deleting bucket %q", id)
		}
	case "NoSuchBucket":
	case "BucketNotEmpty":
		return nil, status.Errorf(
			codes.FailedPrecondition,
			"bucket %q is not empty: nothing was deleted; "+
				"delete its objects, or set the bucket parameter %s to \"true\" to let the driver delete them",
			id,
			ParamPurgeOnDelete,
		)
	default:
		return nil, toStatus(err, "deleting bucket %q", id)
	}
	return &cosiproto.DriverDeleteBucketResponse{}, nil
}

// bucketInfo is what workloads need to reach bucket id.
func (d *Driver) bucketInfo(id, region string) *cosiproto.ProtocolBucketInfo {
	style := cosiproto.S3AddressingStyle_PATH
	if d.cfg.VirtualHostedStyle {
		style = cosiproto.S3AddressingStyle_VIRTUAL
	}
	return &cosiproto.ProtocolBucketInfo{
		S3: &cosiproto.S3BucketInfo{BucketName: id, Endpoint: d.cfg.PublicEndpoint, Region: region, AddressingStyle: style},
	}
}

// DriverGenerateBucketAccessId returns the account name as the account ID: the name of the
// backend identity DriverGrantBucketAccess creates. It creates nothing.
func (d *Driver) DriverGenerateBucketAccessId(
	_ context.Context,
	req *cosiproto.DriverGenerateBucketAccessIdRequest,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	if _, err := d.checkAccess(req); err != nil {
		return nil, err
	}
	if !validAccountName(req.GetAccountName()) {
		return nil, status.Errorf(
			codes.InvalidArgument,
			"account_name %q is not a valid user name: 1 to 64 characters of A-Z a-z 0-9 + = , . @ _ -",
			req.GetAccountName(),
		)
	}
	return &cosiproto.DriverGenerateBucketAccessIdResponse{AccountId: req.GetAccountName()}, nil
}

// accessParams are parsed access parameters.
type accessParams struct {
	allowObjectLock bool
	// subject is the ServiceAccount's token subject, for ServiceAccount authentication.
	subject string
}

// accessRequest is what checkAccess reads of a request that describes an access.
type accessRequest interface {
	GetProtocol() cosiproto.ObjectProtocol_Type
	GetAuthenticationType() cosiproto.AuthenticationType_Type
	GetServiceAccount() *cosiproto.ServiceAccount
	GetParameters() map[string]string
}

// checkAccess checks what an access asks for and parses its parameters.
func (d *Driver) checkAccess(req accessRequest) (accessParams, error) {
	var p accessParams
	if protocol := req.GetProtocol(); protocol != cosiproto.ObjectProtocol_S3 {
		return p, status.Errorf(codes.InvalidArgument, "protocol %v is not supported by this driver (S3 only)", protocol)
	}
	if req.GetAuthenticationType() == cosiproto.AuthenticationType_SERVICE_ACCOUNT {
		if d.cfg.ServiceAccounts == nil {
			return p, status.Error(
				codes.InvalidArgument,
				"ServiceAccount authentication is not enabled in this driver: it needs the cluster's ServiceAccount "+
					"issuer (--service-account-issuer) and the iam account back-end; use authenticationType Key",
			)
		}
		var err error
		if p.subject, err = serviceAccountSubject(req.GetServiceAccount()); err != nil {
			return p, err
		}
	}
	params := req.GetParameters()
	for k := range params {
		if k != ParamAllowObjectLock {
			return p, status.Errorf(codes.InvalidArgument, "unknown access parameter %q (known: %s)", k, ParamAllowObjectLock)
		}
	}
	var err error
	p.allowObjectLock, _, err = parseBool(params, ParamAllowObjectLock)
	return p, err
}

// DriverGrantBucketAccess creates the access's identity, key and policy for all its buckets.
// Repeating it returns a working key (see the account back-ends for which one).
func (d *Driver) DriverGrantBucketAccess(
	ctx context.Context,
	req *cosiproto.DriverGrantBucketAccessRequest,
) (_ *cosiproto.DriverGrantBucketAccessResponse, err error) {
	defer d.logFailure("DriverGrantBucketAccess", &err)
	params, err := d.checkAccess(req)
	if err != nil {
		return nil, err
	}
	id := req.GetAccountId()
	if !validAccountName(id) {
		return nil, status.Errorf(codes.InvalidArgument, "account_id %q is not a valid user name", id)
	}
	// Every ID is checked before any call: none may reach a policy ARN unchecked.
	for _, b := range req.GetBuckets() {
		if err := checkBucketID(b.GetBucketId()); err != nil {
			return nil, err
		}
	}
	var grants []bucketGrant
	resp := &cosiproto.DriverGrantBucketAccessResponse{}
	for _, b := range req.GetBuckets() {
		if err := d.existingBucket(ctx, b.GetBucketId()); err != nil {
			return nil, err
		}
		g := grantFor(b, params)
		if err := d.checkLockHeaders(ctx, g); err != nil {
			return nil, err
		}
		region, err := d.bucketRegion(ctx, b.GetBucketId())
		if err != nil || region == "" {
			region = d.cfg.Region
		}
		grants = append(grants, g)
		resp.Buckets = append(
			resp.Buckets,
			&cosiproto.DriverGrantBucketAccessResponse_BucketInfo{
				BucketId:   b.GetBucketId(),
				BucketInfo: d.bucketInfo(b.GetBucketId(), region),
			},
		)
	}

	unlock := d.locks.Lock("account/" + id)
	defer unlock()
	if params.subject != "" {
		sa := d.cfg.ServiceAccounts
		trust := WebIdentityTrust{Issuer: sa.Issuer, Audience: sa.Audience, Thumbprints: sa.IssuerThumbprints,
			Subject: params.subject}
		//nolint:forcetypeassert // New checked it
		role, err := d.cfg.Accounts.(RoleAccounts).GrantRole(ctx, id, trust, grants)
		if err != nil {
			return nil, err
		}
		// No key and no credential_id: the workload gets its credentials itself, and there is
		// nothing to rotate.
		resp.Credentials = &cosiproto.CredentialInfo{S3: &cosiproto.S3Credentials{
			RoleArn: role, WebIdentityTokenFile: sa.TokenFile, StsEndpoint: sa.STSEndpoint,
		}}
		return resp, nil
	}
	key, err := d.cfg.Accounts.Grant(ctx, id, grants)
	if err != nil {
		return nil, err
	}
	resp.Credentials = &cosiproto.CredentialInfo{
		S3: &cosiproto.S3Credentials{AccessKeyId: key.AccessKeyID, AccessSecretKey: key.SecretAccessKey},
	}
	if _, ok := d.cfg.Accounts.(KeyRotation); ok {
		resp.CredentialId = key.AccessKeyID
	}
	return resp, nil
}

// checkLockHeaders refuses with InvalidArgument a grant of objectData write without
// ParamAllowObjectLock to a bucket with Object Lock, on a store where the key could lock objects
// anyway (lockHeadersUnchecked). Object Lock is enabled only when a bucket is created (RGW
// refuses it later with InvalidBucketState), so the answer stays true for the bucket.
func (d *Driver) checkLockHeaders(ctx context.Context, g bucketGrant) error {
	if !d.lockHeadersUnchecked || !g.writesObjects() || g.LockObjects {
		return nil
	}
	locked, err := d.objectLockEnabled(ctx, g.Bucket)
	if err != nil {
		return err
	}
	if locked {
		return status.Errorf(
			codes.InvalidArgument,
			"bucket %q has Object Lock enabled, and this object store cannot refuse the object lock headers "+
				"of uploads: a key that may write objects there could lock them (a COMPLIANCE retention keeps them "+
				"and the bucket from being deleted until its date). Object data write access to it is granted only "+
				"by a BucketAccessClass with the parameter %s: \"true\"",
			g.Bucket,
			ParamAllowObjectLock,
		)
	}
	return nil
}

// DriverRevokeBucketAccess deletes the access's key, policy and identity: its user and its role
// (ServiceAccount authentication) with their policies, whichever the request's authentication
// type names.
func (d *Driver) DriverRevokeBucketAccess(
	ctx context.Context,
	req *cosiproto.DriverRevokeBucketAccessRequest,
) (_ *cosiproto.DriverRevokeBucketAccessResponse, err error) {
	defer d.logFailure("DriverRevokeBucketAccess", &err)
	id := req.GetAccountId()
	if !validAccountName(id) {
		return &cosiproto.DriverRevokeBucketAccessResponse{}, nil // never created
	}
	var buckets []string
	for _, b := range req.GetBuckets() {
		// A grant never accepted an invalid ID, so nothing of this access is there. Revoking must
		// not fail for good on it (the sidecar would retry forever, and the identity, which is
		// what gives access, would stay): skip it and delete the rest.
		if !validBucketID(b.GetBucketId()) {
			d.cfg.Logger.Info(
				"revoke: skipping a bucket ID that is no bucket name",
				"accountID", id,
				"bucketID", b.GetBucketId(),
			)
			continue
		}
		buckets = append(buckets, b.GetBucketId())
	}
	unlock := d.locks.Lock("account/" + id)
	defer unlock()
	// Both kinds of identity, whatever authentication type the request names: one account ID is
	// one identity (a grant of the other kind is AlreadyExists), so nothing else can be deleted,
	// and a revoke whose type is not the grant's (a sidecar's record lost or restored, another
	// sidecar) would otherwise leave a role that keeps opening the buckets to the ServiceAccount's
	// tokens, or a user whose key never expires. The role of a ServiceAccount access goes whether
	// or not ServiceAccount authentication is still enabled; a key access's revoke looks for a
	// role only while it is (the admin identity has role rights only then); a back-end without
	// roles never granted one.
	saRevoke := req.GetAuthenticationType() == cosiproto.AuthenticationType_SERVICE_ACCOUNT
	if roles, ok := d.cfg.Accounts.(RoleAccounts); ok && (saRevoke || d.cfg.ServiceAccounts != nil) {
		if err := roles.RevokeRole(ctx, id); err != nil {
			return nil, err
		}
	}
	if err := d.cfg.Accounts.Revoke(ctx, id, buckets); err != nil {
		return nil, err
	}
	return &cosiproto.DriverRevokeBucketAccessResponse{}, nil
}
