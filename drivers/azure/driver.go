// Package azure is COSI's driver for Azure Blob Storage. Each bucket is a container of one
// storage account, created and deleted with the account's Shared Key. Each BucketAccess is a
// stored access policy on its container, holding exactly the SAS permissions its access modes
// map to, and a service SAS bound to that policy (KEP-1979's AZURE_STORAGE_SAS_TOKEN: the
// container's URL with the SAS as its query): deleting the policy revokes the token. Azure allows
// five stored access policies per container, so a container serves at most five accesses at a
// time. docs/drivers/azure.md documents configuration, parameters, the access-mode table and the
// revocation window.
package azure

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/pkg/driver"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// DefaultName is the driver's name unless configured otherwise.
const DefaultName = "azure.cosi.kube-cosi.io"

// Bucket parameters (BucketClass.spec.parameters, or Bucket.spec.parameters of a static
// bucket). Unknown keys are refused with InvalidArgument, so that a typo is an error.
const (
	// ParamPurgeOnDelete ("true" or "false", default "false") decides what DriverDeleteBucket
	// does with a container that still holds blobs: by default it refuses with FailedPrecondition
	// and deletes nothing; with "true" it deletes the container with its blobs.
	ParamPurgeOnDelete = "purgeOnDelete"
)

// Access parameters (BucketAccessClass.spec.parameters). Unknown keys are refused with
// InvalidArgument.
const (
	// ParamSASExpiry (a Go duration, e.g. "720h") makes an access's stored access policy, and so
	// its token, expire that long after the grant; the Secret's
	// AZURE_STORAGE_SAS_TOKEN_EXPIRY_TIMESTAMP says when. A repeated grant (a Secret refresh on
	// request) moves the expiry forward without changing the token. Without it the policy expires
	// on 9999-12-31 and the Secret reports no expiry: revocation is by deleting the policy.
	ParamSASExpiry = "sasExpiry"
)

// BucketParameterKeys and AccessParameterKeys are the parameter keys the driver knows (what a
// vendor declares to cosi-sanity).
var (
	BucketParameterKeys = []string{ParamPurgeOnDelete}
	AccessParameterKeys = []string{ParamSASExpiry}
)

// OwnerMetadata is the container metadata key that marks containers this driver created; its
// value is the driver name. A container with the generated name but without it is not the
// driver's and is never adopted.
const OwnerMetadata = "cosidriver"

// MaxStoredAccessPolicies is Azure's limit of stored access policies per container, and so of
// accesses per bucket at a time. Azurite does not enforce it; the driver does.
const MaxStoredAccessPolicies = 5

// Config configures the driver.
type Config struct {
	// Name is the driver name; empty means DefaultName.
	Name string
	// Endpoint is the account's Blob service URL the driver uses:
	// https://<account>.blob.core.windows.net, or an emulator's path-style
	// http://127.0.0.1:10000/<account>. Required.
	Endpoint string
	// PublicEndpoint is the Blob service URL in the tokens workloads are given; empty means
	// Endpoint.
	PublicEndpoint string
	// Credentials are the account's name and Shared Key. Required.
	Credentials *Credentials
	// ContainerNamePrefix is prepended to every generated container name, e.g. a cluster name,
	// so that several clusters can share one storage account.
	ContainerNamePrefix string
	// HTTPClient is used for every call to the account; nil means the SDK's default.
	HTTPClient *http.Client
	// Logger receives the account's own error for each failed call (gRPC errors carry only the
	// driver's message; see backendError). The zero Logger discards them.
	Logger logr.Logger
}

// Driver is the Azure Blob driver. It implements cosiproto.IdentityServer and
// cosiproto.ProvisionerServer; the credential rotation RPCs answer Unimplemented (see
// docs/drivers/azure.md).
type Driver struct {
	cosiproto.UnimplementedIdentityServer
	cosiproto.UnimplementedProvisionerServer

	cfg     Config
	service *service.Client
	locks   driver.KeyedMutex
}

// New returns a driver. It does no I/O.
func New(cfg Config) (*Driver, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Endpoint == "" {
		return nil, errors.New("azure: no Blob service endpoint")
	}
	if !strings.HasPrefix(cfg.Endpoint, "http://") && !strings.HasPrefix(cfg.Endpoint, "https://") {
		return nil, errors.New("azure: the Blob service endpoint is not an http:// or https:// URL")
	}
	cfg.Endpoint = strings.TrimSuffix(cfg.Endpoint, "/")
	if cfg.PublicEndpoint == "" {
		cfg.PublicEndpoint = cfg.Endpoint
	}
	cfg.PublicEndpoint = strings.TrimSuffix(cfg.PublicEndpoint, "/")
	if cfg.Credentials == nil {
		return nil, errors.New("azure: no account credentials")
	}
	cred, err := cfg.Credentials.current()
	if err != nil {
		return nil, err
	}
	opts := &service.ClientOptions{}
	if cfg.HTTPClient != nil {
		opts.ClientOptions = azcore.ClientOptions{Transport: cfg.HTTPClient}
	}
	// One credential for the driver's life: Credentials.current sets a rotated key into it.
	svc, err := service.NewClientWithSharedKeyCredential(cfg.Endpoint+"/", cred, opts)
	if err != nil {
		return nil, err
	}
	return &Driver{cfg: cfg, service: svc}, nil
}

// container is the admin client of container name, after a look at the credentials file.
func (d *Driver) container(name string) (*container.Client, error) {
	if _, err := d.cfg.Credentials.current(); err != nil {
		return nil, toStatus(err, "reading the credentials")
	}
	return d.service.NewContainerClient(name), nil
}

// logFailure logs the account's error behind a failed call, which the gRPC error does not carry.
// Deferred by every RPC.
func (d *Driver) logFailure(method string, errp *error) {
	var be *backendError
	if *errp != nil && errors.As(*errp, &be) && be.cause != nil {
		d.cfg.Logger.Error(be.cause, "storage account call failed",
			"method", method, "code", be.st.Code().String(), "message", be.st.Message())
	}
}

// DriverGetInfo returns the driver's name; it supports Azure only.
func (d *Driver) DriverGetInfo(
	context.Context,
	*cosiproto.DriverGetInfoRequest,
) (*cosiproto.DriverGetInfoResponse, error) {
	return &cosiproto.DriverGetInfoResponse{
		Name:               d.cfg.Name,
		SupportedProtocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_AZURE},
	}, nil
}

// bucketParams are parsed bucket parameters.
type bucketParams struct {
	purge bool
}

func parseBool(params map[string]string, key string) (bool, error) {
	v, ok := params[key]
	if !ok {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil || (v != "true" && v != "false") {
		return false, status.Errorf(codes.InvalidArgument, "parameter %s must be \"true\" or \"false\", not %q", key, v)
	}
	return b, nil
}

func parseBucketParams(params map[string]string) (bucketParams, error) {
	var p bucketParams
	for k := range params {
		switch k {
		case ParamPurgeOnDelete:
		case "maxSize", "maxObjects":
			// The S3 driver's bucket quota parameters (drivers/s3 quota.go): a class moved from it
			// is told why, not only that the key is unknown.
			return p, status.Errorf(codes.InvalidArgument, "parameter %s: Azure Blob Storage has no quota per "+
				"container, and the driver does not pretend to enforce one", k)
		default:
			return p, status.Errorf(codes.InvalidArgument, "unknown bucket parameter %q (known: %s)", k, ParamPurgeOnDelete)
		}
	}
	var err error
	p.purge, err = parseBool(params, ParamPurgeOnDelete)
	return p, err
}

func checkProtocols(protocols []cosiproto.ObjectProtocol_Type) error {
	for _, p := range protocols {
		if p != cosiproto.ObjectProtocol_AZURE {
			return status.Errorf(codes.InvalidArgument, "protocol %v is not supported by this driver (Azure only)", p)
		}
	}
	return nil
}

// bucketInfo is what workloads need besides the token: the storage account.
func (d *Driver) bucketInfo() *cosiproto.ProtocolBucketInfo {
	return &cosiproto.ProtocolBucketInfo{Azure: &cosiproto.AzureBucketInfo{StorageAccount: d.cfg.Credentials.Account()}}
}

// DriverGenerateBucketId derives the container name from the request name (see ContainerName).
// It creates nothing; it fails with AlreadyExists when a container of that name exists that the
// driver did not create.
func (d *Driver) DriverGenerateBucketId(
	ctx context.Context,
	req *cosiproto.DriverGenerateBucketIdRequest,
) (_ *cosiproto.DriverGenerateBucketIdResponse, err error) {
	defer d.logFailure("DriverGenerateBucketId", &err)
	if err := checkProtocols(req.GetProtocols()); err != nil {
		return nil, err
	}
	if _, err := parseBucketParams(req.GetParameters()); err != nil {
		return nil, err
	}
	id := ContainerName(d.cfg.ContainerNamePrefix, req.GetName())
	c, err := d.container(id)
	if err != nil {
		return nil, err
	}
	props, err := c.GetProperties(ctx, nil)
	switch {
	case hasCode(err, bloberror.ContainerNotFound):
	case err != nil:
		return nil, toStatus(err, "looking up container %q", id)
	case !d.owns(props.Metadata):
		return nil, status.Errorf(codes.AlreadyExists, "container %q exists and was not created by this driver", id)
	}
	return &cosiproto.DriverGenerateBucketIdResponse{BucketId: id}, nil
}

// owns reports whether container metadata marks the container as this driver's. Metadata names
// are case-insensitive.
func (d *Driver) owns(metadata map[string]*string) bool {
	for k, v := range metadata {
		if strings.EqualFold(k, OwnerMetadata) && v != nil && *v == d.cfg.Name {
			return true
		}
	}
	return false
}

// DriverCreateBucket creates the container, marked as the driver's. An existing container the
// driver created is returned as it is.
func (d *Driver) DriverCreateBucket(
	ctx context.Context,
	req *cosiproto.DriverCreateBucketRequest,
) (_ *cosiproto.DriverCreateBucketResponse, err error) {
	defer d.logFailure("DriverCreateBucket", &err)
	if err := checkProtocols(req.GetProtocols()); err != nil {
		return nil, err
	}
	if _, err := parseBucketParams(req.GetParameters()); err != nil {
		return nil, err
	}
	id := req.GetBucketId()
	if err := checkContainerName(id); err != nil {
		return nil, err
	}
	unlock := d.locks.Lock(id)
	defer unlock()
	c, err := d.container(id)
	if err != nil {
		return nil, err
	}
	name := d.cfg.Name
	// The mark is set with the creation, in one request: there is no container of the driver's
	// without it.
	_, err = c.Create(ctx, &container.CreateOptions{Metadata: map[string]*string{OwnerMetadata: &name}})
	switch {
	case err == nil:
	case hasCode(err, bloberror.ContainerAlreadyExists):
		props, err := c.GetProperties(ctx, nil)
		if err != nil {
			return nil, toStatus(err, "looking up container %q", id)
		}
		if !d.owns(props.Metadata) {
			return nil, status.Errorf(codes.AlreadyExists, "container %q exists and was not created by this driver", id)
		}
	default:
		return nil, toStatus(err, "creating container %q", id)
	}
	return &cosiproto.DriverCreateBucketResponse{Protocols: d.bucketInfo()}, nil
}

// DriverGetBucket finds an existing container for static provisioning, whoever created it:
// NotFound when it does not exist.
func (d *Driver) DriverGetBucket(
	ctx context.Context,
	req *cosiproto.DriverGetBucketRequest,
) (_ *cosiproto.DriverGetBucketResponse, err error) {
	defer d.logFailure("DriverGetBucket", &err)
	if err := checkProtocols(req.GetProtocols()); err != nil {
		return nil, err
	}
	if _, err := parseBucketParams(req.GetParameters()); err != nil {
		return nil, err
	}
	id := req.GetBucketId()
	if err := checkContainerName(id); err != nil {
		return nil, err
	}
	c, err := d.container(id)
	if err != nil {
		return nil, err
	}
	if _, err := c.GetProperties(ctx, nil); err != nil {
		return nil, toStatus(err, "looking up container %q", id)
	}
	return &cosiproto.DriverGetBucketResponse{Protocols: d.bucketInfo()}, nil
}

// DriverDeleteBucket deletes the container. One that holds blobs is refused with
// FailedPrecondition unless the parameter purgeOnDelete is "true" (Azure's Delete Container takes
// the blobs with it, so the driver looks first). A missing container is already deleted.
func (d *Driver) DriverDeleteBucket(
	ctx context.Context,
	req *cosiproto.DriverDeleteBucketRequest,
) (_ *cosiproto.DriverDeleteBucketResponse, err error) {
	defer d.logFailure("DriverDeleteBucket", &err)
	p, err := parseBucketParams(req.GetParameters())
	if err != nil {
		return nil, err
	}
	id := req.GetBucketId()
	if err := checkContainerName(id); err != nil {
		return nil, err
	}
	unlock := d.locks.Lock(id)
	defer unlock()
	c, err := d.container(id)
	if err != nil {
		return nil, err
	}
	if !p.purge {
		one := int32(1)
		page, err := c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{MaxResults: &one}).NextPage(ctx)
		switch {
		case hasCode(err, bloberror.ContainerNotFound):
			return &cosiproto.DriverDeleteBucketResponse{}, nil
		case err != nil:
			return nil, toStatus(err, "listing container %q", id)
		case page.Segment != nil && len(page.Segment.BlobItems) > 0:
			return nil, status.Errorf(
				codes.FailedPrecondition,
				"container %q is not empty: nothing was deleted; "+
					"delete its blobs, or set the bucket parameter %s to \"true\" to let the driver delete them",
				id,
				ParamPurgeOnDelete,
			)
		}
	}
	_, err = c.Delete(ctx, nil)
	switch {
	case err == nil, hasCode(err, bloberror.ContainerNotFound), hasCode(err, bloberror.ContainerBeingDeleted):
		return &cosiproto.DriverDeleteBucketResponse{}, nil
	}
	return nil, toStatus(err, "deleting container %q", id)
}
