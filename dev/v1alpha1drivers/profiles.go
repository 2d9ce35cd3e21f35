package v1alpha1drivers

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
)

// The behaviours of public COSI v1alpha1 drivers that the reference driver does not have, each a
// wrapper around any v1alpha1 driver over its real store (docs/v1alpha1-drivers.md, "Known
// drivers"): RandomAccounts (randomaccounts.go), SampleAnswers, BucketReader and
// InternalOnMissingBucket.

// SampleAnswers mimics the drivers that follow the upstream sample: a grant answers only the key
// pair, under "accessKeyId" and "accessSecretKey", without endpoint or region (the upstream
// v1alpha1 sidecar wrote fixed values for those).
type SampleAnswers struct{ Server }

// DriverGrantBucketAccess grants with the wrapped driver and answers the sample's keys only.
func (d SampleAnswers) DriverGrantBucketAccess(
	ctx context.Context, req *v1.DriverGrantBucketAccessRequest,
) (*v1.DriverGrantBucketAccessResponse, error) {
	resp, err := d.Server.DriverGrantBucketAccess(ctx, req)
	if err != nil {
		return nil, err
	}
	s := resp.GetCredentials()[v1alpha1.CredentialsS3].GetSecrets()
	resp.Credentials = map[string]*v1.CredentialDetails{v1alpha1.CredentialsS3: {Secrets: map[string]string{
		"accessKeyId":     s[v1alpha1.S3AccessKeyID],
		"accessSecretKey": s[v1alpha1.S3AccessSecretKey],
	}}}
	return resp, nil
}

// BucketV1alpha1 is the v1alpha1 Bucket as drivers that read it through the Kubernetes API see it.
var BucketV1alpha1 = schema.GroupVersionKind{Group: "objectstorage.k8s.io", Version: "v1alpha1", Kind: "Bucket"}

// BucketReader mimics the drivers that read the v1alpha1 Bucket object through the Kubernetes API
// in DriverDeleteBucket and DriverRevokeBucketAccess, to find the store's credentials in its
// spec.parameters (a Secret's name), instead of using delete_context or revoke_access_context: it
// gets the Bucket named bucket_id through objectstorage.k8s.io/v1alpha1 with Client (as the
// driver's ServiceAccount), requires Parameter in its spec.parameters, and answers INTERNAL when
// either fails, as such drivers do. Everything else is the wrapped driver's.
type BucketReader struct {
	Server
	Client    client.Reader
	Parameter string

	mu    sync.Mutex
	reads int
}

// DriverCreateBucket creates with the wrapped driver; Parameter is this driver's own, read here.
func (d *BucketReader) DriverCreateBucket(
	ctx context.Context, req *v1.DriverCreateBucketRequest,
) (*v1.DriverCreateBucketResponse, error) {
	return d.Server.DriverCreateBucket(ctx, &v1.DriverCreateBucketRequest{
		Name: req.GetName(), Parameters: d.without(req.GetParameters()),
	})
}

// DriverDeleteBucket reads the Bucket, then deletes with the wrapped driver.
func (d *BucketReader) DriverDeleteBucket(
	ctx context.Context, req *v1.DriverDeleteBucketRequest,
) (*v1.DriverDeleteBucketResponse, error) {
	if err := d.read(ctx, req.GetBucketId()); err != nil {
		return nil, err
	}
	return d.Server.DriverDeleteBucket(ctx, &v1.DriverDeleteBucketRequest{
		BucketId: req.GetBucketId(), DeleteContext: d.without(req.GetDeleteContext()),
	})
}

// DriverRevokeBucketAccess reads the Bucket, then revokes with the wrapped driver.
func (d *BucketReader) DriverRevokeBucketAccess(
	ctx context.Context, req *v1.DriverRevokeBucketAccessRequest,
) (*v1.DriverRevokeBucketAccessResponse, error) {
	if err := d.read(ctx, req.GetBucketId()); err != nil {
		return nil, err
	}
	return d.Server.DriverRevokeBucketAccess(ctx, req)
}

// without are params without Parameter.
func (d *BucketReader) without(params map[string]string) map[string]string {
	out := maps.Clone(params)
	delete(out, d.Parameter)
	return out
}

func (d *BucketReader) read(ctx context.Context, name string) error {
	b := &unstructured.Unstructured{}
	b.SetGroupVersionKind(BucketV1alpha1)
	if err := d.Client.Get(ctx, client.ObjectKey{Name: name}, b); err != nil {
		return status.Errorf(codes.Internal, "failed to get bucket object from kubernetes: %v", err)
	}
	v, _, _ := unstructured.NestedString(b.Object, "spec", "parameters", d.Parameter)
	if v == "" {
		return status.Errorf(codes.Internal, "bucket %s: spec.parameters has no %s", name, d.Parameter)
	}
	d.mu.Lock()
	d.reads++
	d.mu.Unlock()
	return nil
}

// Reads is the number of Bucket reads that found the parameter.
func (d *BucketReader) Reads() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.reads
}

// InternalOnMissingBucket mimics the drivers that answer DriverDeleteBucket of a bucket that does
// not exist INTERNAL (the store's NoSuchBucket passed on as an error), not OK as both specs ask:
// a deletion repeated after its answer was lost never succeeds.
type InternalOnMissingBucket struct {
	Server

	mu      sync.Mutex
	deleted map[string]bool
	// AfterDelete, when set, is called after a deletion the wrapped driver made, before the answer
	// is returned: a test holds the answer there.
	AfterDelete func(ctx context.Context, bucketID string)
}

// DriverDeleteBucket deletes with the wrapped driver once; a bucket it deleted before is INTERNAL.
func (d *InternalOnMissingBucket) DriverDeleteBucket(
	ctx context.Context, req *v1.DriverDeleteBucketRequest,
) (*v1.DriverDeleteBucketResponse, error) {
	d.mu.Lock()
	gone := d.deleted[req.GetBucketId()]
	d.mu.Unlock()
	if gone {
		return nil, status.Error(codes.Internal, fmt.Sprintf("NoSuchBucket: %s", req.GetBucketId()))
	}
	resp, err := d.Server.DriverDeleteBucket(ctx, req)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.deleted == nil {
		d.deleted = map[string]bool{}
	}
	d.deleted[req.GetBucketId()] = true
	d.mu.Unlock()
	if d.AfterDelete != nil {
		d.AfterDelete(ctx, req.GetBucketId())
	}
	return resp, nil
}
