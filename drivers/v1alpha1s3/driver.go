// Package v1alpha1s3 is a COSI v1alpha1 driver (gRPC package cosi.v1alpha1, built on the published
// module sigs.k8s.io/container-object-storage-interface/proto) for S3 stores whose identities are
// managed by the AWS IAM API (Versity) or RGW's Admin Ops API. It is the proof that drivers written
// for the v1alpha1 protocol run unchanged behind this project's sidecar (docs/v1alpha1-drivers.md):
// it behaves as the published v1alpha1 drivers do (bucket_id and account_id are the names the
// sidecar passes, credentials come back in credentials["s3"].secrets) and never sees v1alpha2.
//
// The storage work is drivers/s3's, so buckets are tagged, policies scoped and keys enforced
// exactly as for the v1alpha2 driver.
package v1alpha1s3

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"

	"google.golang.org/grpc"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	"github.com/kube-cosi/cosi/drivers/s3"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// ParamReadOnly is the driver's own BucketAccessClass parameter: "true" grants keys that read the
// bucket's objects and cannot write them; "false" (the default) read and write. A v1alpha1 request
// carries no access mode, so v1alpha1 drivers take what they grant from their class, as this one
// does; the class declares the same to the sidecar's adapter
// (objectstorage.k8s.io/v1alpha1-access-modes: objectData=ReadOnly).
const ParamReadOnly = "readOnly"

// Driver serves the v1alpha1 Identity and Provisioner services.
type Driver struct {
	v1.UnimplementedIdentityServer
	v1.UnimplementedProvisionerServer

	s3 *s3.Driver
}

// New returns a v1alpha1 driver over a configured drivers/s3 driver. The S3 driver's bucket name
// prefix must be empty: a v1alpha1 driver creates the bucket by the name it is given.
func New(d *s3.Driver) *Driver { return &Driver{s3: d} }

var s3Only = []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}

// DriverGetInfo returns the driver's name.
func (d *Driver) DriverGetInfo(ctx context.Context, _ *v1.DriverGetInfoRequest) (*v1.DriverGetInfoResponse, error) {
	info, err := d.s3.DriverGetInfo(ctx, &cosiproto.DriverGetInfoRequest{})
	if err != nil {
		return nil, err
	}
	return &v1.DriverGetInfoResponse{Name: info.GetName()}, nil
}

// DriverCreateBucket creates the bucket name: OK when it exists with the same parameters,
// ALREADY_EXISTS when it exists with others (the v1alpha1 contract).
func (d *Driver) DriverCreateBucket(
	ctx context.Context,
	req *v1.DriverCreateBucketRequest,
) (*v1.DriverCreateBucketResponse, error) {
	if req.GetName() == "" {
		return nil, errInvalid("name is required")
	}
	gen, err := d.s3.DriverGenerateBucketId(
		ctx,
		&cosiproto.DriverGenerateBucketIdRequest{Name: req.GetName(), Protocols: s3Only, Parameters: req.GetParameters()},
	)
	if err != nil {
		return nil, err
	}
	resp, err := d.s3.DriverCreateBucket(
		ctx,
		&cosiproto.DriverCreateBucketRequest{BucketId: gen.GetBucketId(), Protocols: s3Only, Parameters: req.GetParameters()},
	)
	if err != nil {
		return nil, err
	}
	return &v1.DriverCreateBucketResponse{
		BucketId: gen.GetBucketId(),
		BucketInfo: &v1.Protocol{
			Type: &v1.Protocol_S3{
				S3: &v1.S3{Region: resp.GetProtocols().GetS3().GetRegion(), SignatureVersion: v1.S3SignatureVersion_S3V4},
			},
		},
	}, nil
}

// DriverDeleteBucket deletes the bucket; OK when it is gone. delete_context holds the bucket's
// parameters (purgeOnDelete).
func (d *Driver) DriverDeleteBucket(
	ctx context.Context,
	req *v1.DriverDeleteBucketRequest,
) (*v1.DriverDeleteBucketResponse, error) {
	if _, err := d.s3.DriverDeleteBucket(
		ctx,
		&cosiproto.DriverDeleteBucketRequest{BucketId: req.GetBucketId(), Parameters: req.GetDeleteContext()},
	); err != nil {
		return nil, err
	}
	return &v1.DriverDeleteBucketResponse{}, nil
}

// DriverGrantBucketAccess creates the identity name with access to the bucket's objects (read and
// write, or read only with ParamReadOnly) and returns account_id = name and the key in
// credentials["s3"].secrets.
func (d *Driver) DriverGrantBucketAccess(
	ctx context.Context,
	req *v1.DriverGrantBucketAccessRequest,
) (*v1.DriverGrantBucketAccessResponse, error) {
	if req.GetName() == "" || req.GetBucketId() == "" {
		return nil, errInvalid("name and bucket_id are required")
	}
	if req.GetAuthenticationType() != v1.AuthenticationType_Key {
		return nil, errInvalid("only Key authentication is supported")
	}
	mode := cosiproto.AccessMode_READ_WRITE
	params := maps.Clone(req.GetParameters())
	switch v, ok := params[ParamReadOnly]; {
	case !ok || v == "false":
	case v == "true":
		mode = cosiproto.AccessMode_READ_ONLY
	default:
		return nil, errInvalid(fmt.Sprintf("parameter %s: %q is not true or false", ParamReadOnly, v))
	}
	delete(params, ParamReadOnly)
	resp, err := d.s3.DriverGrantBucketAccess(ctx, &cosiproto.DriverGrantBucketAccessRequest{
		AccountId: req.GetName(),
		Buckets: []*cosiproto.AccessedBucket{{BucketId: req.GetBucketId(), AccessModes: &cosiproto.AccessModes{
			ObjectData: mode,
		}}},
		Protocol:           cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
		Parameters:         params,
	})
	if err != nil {
		return nil, err
	}
	info := resp.GetBuckets()[0].GetBucketInfo().GetS3()
	return &v1.DriverGrantBucketAccessResponse{
		AccountId: req.GetName(),
		Credentials: map[string]*v1.CredentialDetails{"s3": {Secrets: map[string]string{
			"accessKeyID":     resp.GetCredentials().GetS3().GetAccessKeyId(),
			"accessSecretKey": resp.GetCredentials().GetS3().GetAccessSecretKey(),
			"endpoint":        info.GetEndpoint(),
			"region":          info.GetRegion(),
		}}},
	}, nil
}

// DriverRevokeBucketAccess deletes the identity's key, policy and identity; OK when gone.
func (d *Driver) DriverRevokeBucketAccess(
	ctx context.Context,
	req *v1.DriverRevokeBucketAccessRequest,
) (*v1.DriverRevokeBucketAccessResponse, error) {
	_, err := d.s3.DriverRevokeBucketAccess(ctx, &cosiproto.DriverRevokeBucketAccessRequest{
		AccountId:          req.GetAccountId(),
		Buckets:            []*cosiproto.DriverRevokeBucketAccessRequest_Bucket{{BucketId: req.GetBucketId()}},
		Protocol:           cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
	})
	if err != nil {
		return nil, err
	}
	return &v1.DriverRevokeBucketAccessResponse{}, nil
}

// Serve serves the driver on endpoint (unix:///path/to/driver.sock) until ctx is done, as a
// v1alpha1 driver does: a plain gRPC server, no reflection, no v1alpha2 service.
func Serve(ctx context.Context, endpoint string, d *Driver) error {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "unix" || u.Path == "" {
		return fmt.Errorf("endpoint %q is not unix:///path/to/driver.sock", endpoint)
	}
	if err := os.Remove(u.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the old socket: %w", err)
	}
	lis, err := net.Listen("unix", u.Path)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	v1.RegisterIdentityServer(srv, d)
	v1.RegisterProvisionerServer(srv, d)
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	return srv.Serve(lis)
}
