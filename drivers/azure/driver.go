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
	"errors"
	"net/http"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"
	"github.com/go-logr/logr"

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
	locks   keyedMutex
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

// keyedMutex serializes work on one container: the sidecar may work on several accesses of one
// bucket at once, and a read-modify-write of the container's access policy must not lose an
// update.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	sync.Mutex
	users int
}

func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l, ok := k.locks[key]
	if !ok {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.users++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.users--; l.users == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
