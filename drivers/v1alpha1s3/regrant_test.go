package v1alpha1s3_test

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/dev/v1alpha1drivers"
	"github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/drivers/v1alpha1s3"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// What ALREADY_EXISTS means to the adapter, against the reference v1alpha1 driver and Versity.

var s3only = []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}

// probed is the sidecar's production client for the driver at endpoint, probed.
func probed(t *testing.T, endpoint string) *driverclient.Client {
	t.Helper()
	c, err := driverclient.New(endpoint, driverclient.Options{Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Probe(t.Context()); err != nil {
		t.Fatal(err)
	}
	return c
}

// A bucket that exists with other parameters: the reference driver answers ALREADY_EXISTS, as the
// v1alpha1 spec says, and the adapter refuses the creation (final) instead of handing the existing
// bucket out as this Bucket's.
func TestCreateIncompatibleBucketIsRefused(t *testing.T) {
	ctx := t.Context()
	c := probed(t, serve(t))
	req := &cosiproto.DriverCreateBucketRequest{BucketId: "bc-incompatible-1", Protocols: s3only}
	if _, err := c.DriverCreateBucket(ctx, req); err != nil {
		t.Fatal(err)
	}
	req.Parameters = map[string]string{s3.ParamVersioning: "true"}
	if _, err := c.DriverCreateBucket(ctx, req); status.Code(err) != codes.AlreadyExists {
		t.Errorf("DriverCreateBucket of an existing bucket with other parameters: %v, want ALREADY_EXISTS", err)
	}
	if _, err := c.DriverDeleteBucket(ctx, &cosiproto.DriverDeleteBucketRequest{BucketId: req.GetBucketId()}); err != nil {
		t.Error(err)
	}
}

// A lost Secret: the sidecar grants the account again. The driver will not return the key twice,
// and the key that workloads still hold keeps working against the store: the adapter revokes
// nothing, and the grant fails, final.
func TestLostSecretKeepsTheKeyWorkloadsHold(t *testing.T) {
	ctx := t.Context()
	endpoint := v1alpha1drivers.ServeS3(t, "v1alpha1.s3.example.com", func(d *v1alpha1s3.Driver) v1alpha1drivers.Server {
		return v1alpha1drivers.NewKeyShownOnce(d)
	})
	c := probed(t, endpoint)
	const bucket = "bc-regrant-1"
	create := &cosiproto.DriverCreateBucketRequest{BucketId: bucket, Protocols: s3only}
	if _, err := c.DriverCreateBucket(ctx, create); err != nil {
		t.Fatal(err)
	}
	grant := &cosiproto.DriverGrantBucketAccessRequest{
		AccountId: "ba-regrant-1",
		Buckets: []*cosiproto.AccessedBucket{{
			BucketId: bucket, AccessModes: &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE},
		}},
		Protocol:           cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
	}
	resp, err := c.DriverGrantBucketAccess(ctx, grant)
	if err != nil {
		t.Fatal(err)
	}
	workload := userClient(resp)
	if err := putObject(workload, bucket, "before"); err != nil {
		t.Fatalf("the granted key cannot put: %v", err)
	}

	// The Secret is lost; the sidecar grants again.
	_, err = c.DriverGrantBucketAccess(ctx, grant)
	if status.Code(err) != codes.AlreadyExists {
		t.Errorf("the second grant, answered ALREADY_EXISTS by the driver: %v, want ALREADY_EXISTS", err)
	}
	if err := putObject(workload, bucket, "after"); err != nil {
		t.Errorf("the key workloads hold stopped working after the second grant: %v", err)
	}

	if _, err := c.DriverRevokeBucketAccess(ctx, &cosiproto.DriverRevokeBucketAccessRequest{
		AccountId:          grant.GetAccountId(),
		Buckets:            []*cosiproto.DriverRevokeBucketAccessRequest_Bucket{{BucketId: bucket}},
		Protocol:           cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
	}); err != nil {
		t.Error(err)
	}
	if _, err := c.DriverDeleteBucket(ctx, &cosiproto.DriverDeleteBucketRequest{
		BucketId: bucket, Parameters: map[string]string{s3.ParamPurgeOnDelete: "true"},
	}); err != nil {
		t.Error(err)
	}
}

// userClient is an S3 client with the granted key, configured from the answer, as a workload's.
func userClient(resp *cosiproto.DriverGrantBucketAccessResponse) *awss3.Client {
	info := resp.GetBuckets()[0].GetBucketInfo().GetS3()
	return awss3.New(awss3.Options{
		BaseEndpoint: aws.String(info.GetEndpoint()),
		Region:       info.GetRegion(),
		Credentials: credentials.NewStaticCredentialsProvider(
			resp.GetCredentials().GetS3().GetAccessKeyId(), resp.GetCredentials().GetS3().GetAccessSecretKey(), ""),
		UsePathStyle:               true,
		RetryMaxAttempts:           1,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

func putObject(c *awss3.Client, bucket, key string) error {
	_, err := c.PutObject(context.Background(),
		&awss3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader("data")})
	return err
}
