package azure_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/go-logr/logr"
)

// TestTokenOperations goes beyond Put, Get, List and Delete (TestTokenModes): every other way a
// token could write, read or reach further than its modes. READ_ONLY cannot write through blocks,
// metadata, properties, tags, snapshots, leases, tiers or copies; WRITE_ONLY cannot read
// properties, block lists or tags; no token reaches the container itself (its properties,
// metadata, policies, lease: a tenant holding the container's lease would block the driver's
// revocations) or the account (list containers, service properties, find by tags); and a token
// whose query is changed (permissions, expiry or resource added) is refused.
func TestTokenOperations(t *testing.T) {
	a := startAzurite(t)
	ctx := t.Context()
	_, p := serve(t, a.newDriver(t, ""), logr.Discard())
	bucket := createBucket(t, p)
	if err := put(ctx, a.admin.NewContainerClient(bucket), "existing", "data"); err != nil {
		t.Fatal(err)
	}
	ro, wo, rw := grant(t, p, readOnly, nil, bucket), grant(t, p, writeOnly, nil, bucket),
		grant(t, p, readWrite, nil, bucket)
	type op func(context.Context, *container.Client) error
	blobOp := func(f func(context.Context, *blockblob.Client) error) op {
		return func(ctx context.Context, c *container.Client) error { return f(ctx, c.NewBlockBlobClient("existing")) }
	}
	// A source in the container, with the token: a copy needs r on it and c or w on the target.
	copySource := func(c *container.Client) string {
		return strings.Replace(c.URL(), "?", "/existing?", 1)
	}
	writes := map[string]op{
		"Put Block": blobOp(func(ctx context.Context, b *blockblob.Client) error {
			_, err := b.StageBlock(ctx, base64.StdEncoding.EncodeToString([]byte("block")),
				streaming.NopCloser(bytes.NewReader([]byte("x"))), nil)
			return err
		}),
		"Put Block List": func(ctx context.Context, c *container.Client) error {
			_, err := c.NewBlockBlobClient("committed").CommitBlockList(ctx, nil, nil)
			return err
		},
		"Set Blob Metadata": blobOp(func(ctx context.Context, b *blockblob.Client) error {
			_, err := b.SetMetadata(ctx, map[string]*string{"k": to.Ptr("v")}, nil)
			return err
		}),
		"Set Blob Properties": blobOp(func(ctx context.Context, b *blockblob.Client) error {
			_, err := b.SetHTTPHeaders(ctx, blob.HTTPHeaders{BlobContentType: to.Ptr("x/y")}, nil)
			return err
		}),
		"Snapshot Blob": blobOp(func(ctx context.Context, b *blockblob.Client) error {
			_, err := b.CreateSnapshot(ctx, nil)
			return err
		}),
		"Lease Blob": blobOp(func(ctx context.Context, b *blockblob.Client) error {
			l, err := lease.NewBlobClient(b, nil)
			if err == nil {
				_, err = l.AcquireLease(ctx, 15, nil)
			}
			if err == nil {
				_, err = l.ReleaseLease(ctx, nil)
			}
			return err
		}),
		"Set Blob Tier": blobOp(func(ctx context.Context, b *blockblob.Client) error {
			_, err := b.SetTier(ctx, blob.AccessTierCool, nil)
			return err
		}),
		"Copy Blob": func(ctx context.Context, c *container.Client) error {
			_, err := c.NewBlockBlobClient("copy").StartCopyFromURL(ctx, copySource(c), nil)
			return err
		},
		"Copy Blob From URL": func(ctx context.Context, c *container.Client) error {
			_, err := c.NewBlockBlobClient("copy-sync").CopyFromURL(ctx, copySource(c), nil)
			return err
		},
	}
	reads := map[string]op{
		"Get Blob Properties": blobOp(func(ctx context.Context, b *blockblob.Client) error {
			_, err := b.GetProperties(ctx, nil)
			return err
		}),
		"Get Block List": blobOp(func(ctx context.Context, b *blockblob.Client) error {
			_, err := b.GetBlockList(ctx, blockblob.BlockListTypeAll, nil)
			return err
		}),
		"List Blobs with metadata": func(ctx context.Context, c *container.Client) error {
			_, err := c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{
				Include: container.ListBlobsInclude{Metadata: true, Snapshots: true}}).NextPage(ctx)
			return err
		},
	}
	tags := map[string]op{
		"Get Blob Tags": blobOp(func(ctx context.Context, b *blockblob.Client) error {
			_, err := b.GetTags(ctx, nil)
			return err
		}),
		"Set Blob Tags": blobOp(func(ctx context.Context, b *blockblob.Client) error {
			_, err := b.SetTags(ctx, map[string]string{"k": "v"}, nil)
			return err
		}),
	}
	containerOps := map[string]op{
		"Get Container Properties": func(ctx context.Context, c *container.Client) error {
			_, err := c.GetProperties(ctx, nil)
			return err
		},
		"Set Container Metadata": func(ctx context.Context, c *container.Client) error {
			_, err := c.SetMetadata(ctx, &container.SetMetadataOptions{Metadata: map[string]*string{"cosidriver": to.Ptr("x")}})
			return err
		},
		"Get Container ACL": func(ctx context.Context, c *container.Client) error {
			_, err := c.GetAccessPolicy(ctx, nil)
			return err
		},
		"Lease Container": func(ctx context.Context, c *container.Client) error {
			l, err := lease.NewContainerClient(c, nil)
			if err == nil {
				_, err = l.AcquireLease(ctx, -1, nil)
			}
			return err
		},
		"Find Blobs by Tags": func(ctx context.Context, c *container.Client) error {
			_, err := c.FilterBlobs(ctx, `"k"='v'`, nil)
			return err
		},
	}
	check := func(who string, c *container.Client, ops map[string]op, allowed bool) {
		t.Helper()
		for name, f := range ops {
			err := f(ctx, c)
			switch {
			case allowed && err != nil:
				t.Errorf("%s: %s: %v", who, name, err)
			case !allowed && !refused(err):
				t.Errorf("%s: %s: %v, want refused (403)", who, name, err)
			}
		}
	}
	check("READ_ONLY", ro.client, writes, false)
	check("READ_ONLY", ro.client, reads, true)
	check("WRITE_ONLY", wo.client, reads, false)
	// A copy reads its source, which WRITE_ONLY cannot. (Azurite checks the source of Copy Blob,
	// not that of Copy Blob From URL: docs/drivers/azure.md.)
	check("WRITE_ONLY", wo.client, map[string]op{"Copy Blob": writes["Copy Blob"]}, false)
	delete(writes, "Copy Blob")
	delete(writes, "Copy Blob From URL")
	check("WRITE_ONLY", wo.client, writes, true)
	for who, acc := range map[string]*access{"READ_ONLY": ro, "WRITE_ONLY": wo, "READ_WRITE": rw} {
		check(who, acc.client, tags, false)
		check(who, acc.client, containerOps, false)
		token, err := url.Parse(acc.creds.GetAzure().GetAccessToken())
		if err != nil {
			t.Fatal(err)
		}
		// The account, with the token's query.
		for _, q := range []string{"comp=list", "restype=service&comp=properties", "comp=blobs&where=%22k%22%3D%27v%27"} {
			u := *token
			u.Path = strings.TrimSuffix(u.Path, "/"+bucket) + "/"
			u.RawQuery = q + "&" + token.RawQuery
			resp, err := http.Get(u.String())
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s: the account's %s with the token: HTTP %d, want 403", who, q, resp.StatusCode)
			}
		}
		// The token's query with more in it.
		for _, extra := range []url.Values{{"sp": {"racwdlt"}}, {"se": {"2099-01-01T00:00:00Z"}}, {"sr": {"b"}},
			{"sp": {"racwdlt"}, "se": {"2099-01-01T00:00:00Z"}}} {
			u := *token
			q := u.Query()
			for k, v := range extra {
				q[k] = v
			}
			u.RawQuery = q.Encode()
			c := workloadClient(t, u.String())
			if _, err := get(ctx, c, "existing"); !refused(err) {
				t.Errorf("%s: get with %v added to the token: %v, want refused (403)", who, extra, err)
			}
			if err := put(ctx, c, "tampered", "x"); !refused(err) {
				t.Errorf("%s: put with %v added to the token: %v, want refused (403)", who, extra, err)
			}
		}
	}
}
