// Package azureprobe is a sanity.Probe for drivers of Azure Blob Storage that grant access with
// container SAS tokens: it answers the conformance suite's questions about the storage account by
// asking the account itself, with real Blob service requests, so that an Azure vendor gets the
// suite's enforcement checks (a read-only token cannot write, a revoked token stops working, a
// deleted container is gone) without writing a probe.
//
//	cred, _ := azblob.NewSharedKeyCredential(account, accountKey)
//	p, err := azureprobe.New(azureprobe.Config{
//		Endpoint:   "https://" + account + ".blob.core.windows.net",
//		Credential: cred,
//	})
//	sanity.Test(t, sanity.Config{Endpoint: endpoint, Probe: p.Probe()})
//
// It reads the token as KEP-1979 defines AZURE_STORAGE_SAS_TOKEN: the container's URL with the
// SAS as its query. Backend accounts are stored access policies: a token bound to one (its si
// parameter) authenticates as "<container>/<policy ID>" while the policy exists.
//
// It is a module of its own (github.com/kube-cosi/cosi/pkg/sanity/azureprobe) so that the SDK
// module (github.com/kube-cosi/cosi/pkg) requires no cloud SDK: only a vendor who imports
// azureprobe inherits the Azure SDK for Go.
package azureprobe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"

	"github.com/kube-cosi/cosi/pkg/sanity"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Config says how to reach the storage account as its administrator.
type Config struct {
	// Endpoint is the account's Blob service URL: https://<account>.blob.core.windows.net, or
	// an emulator's path-style http://127.0.0.1:10000/<account>. Required.
	Endpoint string
	// Credential is the account's Shared Key: BucketExists and Accounts ask with it, and Allowed
	// puts with it the blob a read needs and removes what a write created. Required.
	Credential *azblob.SharedKeyCredential
	// HTTPClient makes the requests (a custom CA, a proxy); nil means the SDK's default.
	HTTPClient *http.Client
	// ContainerName maps a COSI bucket_id to the container's name, for BucketExists and for
	// Allowed on a bucket other than the token's; nil means the driver names containers by their
	// bucket ID.
	ContainerName func(bucketID string) string
}

// Probe asks an Azure storage account what the conformance suite needs to know. Its methods are
// those of sanity.Probe; Probe returns them as one.
type Probe struct {
	cfg   Config
	admin *service.Client
}

// New checks cfg and returns the probe. It does no I/O.
func New(cfg Config) (*Probe, error) {
	switch {
	case cfg.Endpoint == "":
		return nil, errors.New("azureprobe: Config.Endpoint is required")
	case !strings.HasPrefix(cfg.Endpoint, "http://") && !strings.HasPrefix(cfg.Endpoint, "https://"):
		return nil, fmt.Errorf("azureprobe: Config.Endpoint %q is not an http:// or https:// URL", cfg.Endpoint)
	case cfg.Credential == nil:
		return nil, errors.New("azureprobe: Config.Credential (the account's Shared Key) is required")
	}
	if cfg.ContainerName == nil {
		cfg.ContainerName = func(id string) string { return id }
	}
	p := &Probe{cfg: cfg}
	var err error
	p.admin, err = service.NewClientWithSharedKeyCredential(strings.TrimSuffix(cfg.Endpoint, "/")+"/", cfg.Credential,
		&service.ClientOptions{ClientOptions: p.clientOptions()})
	if err != nil {
		return nil, fmt.Errorf("azureprobe: %w", err)
	}
	return p, nil
}

// clientOptions make clients that fail at once: a refused request is an answer, not something to
// retry.
func (p *Probe) clientOptions() azcore.ClientOptions {
	o := azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}}
	if p.cfg.HTTPClient != nil {
		o.Transport = p.cfg.HTTPClient
	}
	return o
}

// Probe returns the probe as sanity.Config takes it.
func (p *Probe) Probe() sanity.Probe {
	return sanity.Probe{BucketExists: p.BucketExists, Allowed: p.Allowed, Accounts: p.Accounts, AccountOf: p.AccountOf,
		Put: p.Put, Objects: p.Objects, Empty: p.Empty}
}

// Put writes the blob key (a few bytes) into the check's container with the SAS token, and leaves
// it there; refusals are Allowed's.
func (p *Probe) Put(ctx context.Context, c sanity.AccessCheck, key string) (bool, error) {
	if c.ServiceAccount != nil {
		return false, fmt.Errorf("azureprobe: cannot act as ServiceAccount %s/%s: the probe knows SAS tokens only",
			c.ServiceAccount.GetNamespace(), c.ServiceAccount.GetName())
	}
	user, err := p.userClient(c.Credentials, p.cfg.ContainerName(c.BucketID))
	if err != nil {
		return false, err
	}
	_, err = user.NewBlockBlobClient(key).UploadBuffer(ctx, []byte("cosi-sanity"), nil)
	return outcome(err)
}

// Objects lists the container's blobs as the administrator (one page); a missing container has
// none.
func (p *Probe) Objects(ctx context.Context, bucketID string) ([]string, error) {
	pager := p.admin.NewContainerClient(p.cfg.ContainerName(bucketID)).NewListBlobsFlatPager(nil)
	page, err := pager.NextPage(ctx)
	switch {
	case bloberror.HasCode(err, bloberror.ContainerNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("azureprobe: listing the blobs of %q: %w", bucketID, err)
	}
	var names []string
	for _, b := range page.Segment.BlobItems {
		if b.Name != nil {
			names = append(names, *b.Name)
		}
	}
	return names, nil
}

// Empty deletes every blob of the container (with its snapshots) as the administrator; a
// missing container is no error.
func (p *Probe) Empty(ctx context.Context, bucketID string) error {
	admin := p.admin.NewContainerClient(p.cfg.ContainerName(bucketID))
	for range 100 { // pages of five thousand: the suite's containers hold a few blobs
		names, err := p.Objects(ctx, bucketID)
		if err != nil || len(names) == 0 {
			return err
		}
		include := blob.DeleteSnapshotsOptionTypeInclude
		for _, n := range names {
			_, err := admin.NewBlobClient(n).Delete(ctx, &blob.DeleteOptions{DeleteSnapshots: &include})
			if err != nil && !bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound) {
				return fmt.Errorf("azureprobe: deleting blob %s of %q: %w", n, bucketID, err)
			}
		}
	}
	return fmt.Errorf("azureprobe: container %q still holds blobs after deleting 100 pages of them", bucketID)
}

// BucketExists asks the account, as its administrator, whether the container exists.
func (p *Probe) BucketExists(ctx context.Context, bucketID string) (bool, error) {
	_, err := p.admin.NewContainerClient(p.cfg.ContainerName(bucketID)).GetProperties(ctx, nil)
	switch {
	case err == nil:
		return true, nil
	case bloberror.HasCode(err, bloberror.ContainerNotFound):
		return false, nil
	}
	return false, fmt.Errorf("azureprobe: container properties of %q: %w", bucketID, err)
}

// ProbeKey is the blob Allowed reads (and whose metadata it reads and writes): the administrator
// puts it first. Allowed writes WrittenKey and removes it afterwards.
const (
	ProbeKey   = "cosi-probe-object"
	WrittenKey = "cosi-probe-written"
)

// Allowed performs one request of the check's category with the SAS token, on the container of
// the check's bucket, and reports whether the account allowed it:
//   - object data: Get Blob of ProbeKey (read), Put Blob of WrittenKey (write);
//   - object metadata: Get Blob Properties (read), Set Blob Metadata (write) of ProbeKey;
//   - bucket metadata: Get Container Properties (read), Set Container Metadata with the
//     container's own metadata (write: it changes nothing).
//
// A refusal (HTTP 403: a signature that does not match, a revoked policy, a permission the token
// lacks) and a missing container are false with a nil error; other failures are errors.
func (p *Probe) Allowed(ctx context.Context, c sanity.AccessCheck) (bool, error) {
	if c.ServiceAccount != nil {
		return false, fmt.Errorf("azureprobe: cannot act as ServiceAccount %s/%s: the probe knows SAS tokens only",
			c.ServiceAccount.GetNamespace(), c.ServiceAccount.GetName())
	}
	name := p.cfg.ContainerName(c.BucketID)
	user, err := p.userClient(c.Credentials, name)
	if err != nil {
		return false, err
	}
	admin := p.admin.NewContainerClient(name)
	if _, err := admin.NewBlockBlobClient(ProbeKey).UploadBuffer(ctx, []byte("probe"), nil); err != nil {
		if bloberror.HasCode(err, bloberror.ContainerNotFound) {
			return false, nil
		}
		return false, fmt.Errorf("azureprobe: the administrator's Put Blob %s/%s: %w", name, ProbeKey, err)
	}
	return outcome(p.request(ctx, user, admin, c))
}

// userClient is a client of container name with the token's SAS.
func (p *Probe) userClient(creds *cosiproto.CredentialInfo, name string) (*container.Client, error) {
	base, query, err := parseToken(creds.GetAzure().GetAccessToken())
	if err != nil {
		return nil, err
	}
	u := base + "/" + url.PathEscape(name) + "?" + query
	c, err := container.NewClientWithNoCredential(u, &container.ClientOptions{ClientOptions: p.clientOptions()})
	if err != nil {
		return nil, fmt.Errorf("azureprobe: %w", err)
	}
	return c, nil
}

// parseToken splits a token (a container URL with a SAS query) into the account's Blob service
// URL and the SAS query. It never puts the token into an error.
func parseToken(token string) (base, query string, err error) {
	if token == "" {
		return "", "", errors.New("azureprobe: no Azure SAS token (access_token) to ask with")
	}
	u, err := url.Parse(token)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "", "", errors.New("azureprobe: the access_token is not a URL with the resource URI and the SAS " +
			"(KEP-1979's AZURE_STORAGE_SAS_TOKEN)")
	}
	if u.Query().Get("sig") == "" {
		return "", "", errors.New("azureprobe: the access_token's URL has no SAS signature (sig)")
	}
	path := strings.TrimSuffix(u.EscapedPath(), "/")
	i := strings.LastIndex(path, "/")
	if i < 0 || i == len(path)-1 {
		return "", "", errors.New("azureprobe: the access_token's URL names no container")
	}
	return u.Scheme + "://" + u.Host + path[:i], u.RawQuery, nil
}

func (p *Probe) request(ctx context.Context, user, admin *container.Client, c sanity.AccessCheck) error {
	switch {
	case c.Category == sanity.ObjectData && !c.Write:
		resp, err := user.NewBlobClient(ProbeKey).DownloadStream(ctx, nil)
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	case c.Category == sanity.ObjectData:
		_, err := user.NewBlockBlobClient(WrittenKey).UploadBuffer(ctx, []byte("w"), nil)
		_, _ = admin.NewBlobClient(WrittenKey).Delete(ctx, nil)
		return err
	case c.Category == sanity.ObjectMetadata && !c.Write:
		_, err := user.NewBlobClient(ProbeKey).GetProperties(ctx, nil)
		return err
	case c.Category == sanity.ObjectMetadata:
		v := "yes"
		_, err := user.NewBlobClient(ProbeKey).SetMetadata(ctx, map[string]*string{"cosiprobe": &v}, nil)
		return err
	case !c.Write:
		_, err := user.GetProperties(ctx, nil)
		return err
	}
	props, err := admin.GetProperties(ctx, nil)
	if err != nil {
		return fmt.Errorf("azureprobe: the administrator's Get Container Properties: %w", err)
	}
	_, err = user.SetMetadata(ctx, &container.SetMetadataOptions{Metadata: props.Metadata})
	return err
}

// Accounts lists every stored access policy of every container in the account, as
// "<container>/<policy ID>".
func (p *Probe) Accounts(ctx context.Context) ([]string, error) {
	var out []string
	pager := p.admin.NewListContainersPager(nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("azureprobe: listing containers: %w", err)
		}
		for _, item := range page.ContainerItems {
			if item.Name == nil {
				continue
			}
			acl, err := p.admin.NewContainerClient(*item.Name).GetAccessPolicy(ctx, nil)
			if bloberror.HasCode(err, bloberror.ContainerNotFound) {
				continue // deleted since it was listed
			}
			if err != nil {
				return nil, fmt.Errorf("azureprobe: stored access policies of %q: %w", *item.Name, err)
			}
			for _, id := range acl.SignedIdentifiers {
				if id.ID != nil {
					out = append(out, *item.Name+"/"+*id.ID)
				}
			}
		}
	}
	return out, nil
}

// AccountOf reports the stored access policy the token is bound to, as "<container>/<policy ID>",
// while the policy exists on the container, and "" once it is gone (revoked, or the container
// deleted). A token bound to no policy is an error: only its expiry could end it.
func (p *Probe) AccountOf(ctx context.Context, creds *cosiproto.CredentialInfo) (string, error) {
	token := creds.GetAzure().GetAccessToken()
	if _, _, err := parseToken(token); err != nil {
		return "", err
	}
	u, _ := url.Parse(token)
	si := u.Query().Get("si")
	if si == "" {
		return "", errors.New("azureprobe: the SAS is bound to no stored access policy (no si parameter): " +
			"nothing but its expiry revokes it")
	}
	path := strings.TrimSuffix(u.Path, "/")
	name := path[strings.LastIndex(path, "/")+1:]
	acl, err := p.admin.NewContainerClient(name).GetAccessPolicy(ctx, nil)
	switch {
	case bloberror.HasCode(err, bloberror.ContainerNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("azureprobe: stored access policies of %q: %w", name, err)
	}
	for _, id := range acl.SignedIdentifiers {
		if id.ID != nil && *id.ID == si {
			return name + "/" + si, nil
		}
	}
	return "", nil
}

// outcome turns the result of a request into allowed (nil error), refused, or an error.
func outcome(err error) (bool, error) {
	var re *azcore.ResponseError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &re) && re.StatusCode == http.StatusForbidden:
		return false, nil
	case bloberror.HasCode(err, bloberror.ContainerNotFound):
		return false, nil
	}
	return false, fmt.Errorf("azureprobe: %w", err)
}
