package v1alpha1s3_test

import (
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/dev/v1alpha1drivers"
	"github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	"github.com/kube-cosi/cosi/pkg/sanity"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// serve starts Versity and the reference v1alpha1 driver on a socket, and returns its endpoint.
func serve(t *testing.T) string {
	t.Helper()
	return v1alpha1drivers.ServeS3(t, "v1alpha1.s3.example.com", nil)
}

// cosi-sanity detects the v1alpha1 driver and runs the v1alpha1 cases, which it passes.
func TestSanity(t *testing.T) {
	endpoint := serve(t)
	results, err := sanity.Run(t.Context(), sanity.Config{
		Endpoint: endpoint,
		Timeout:  20 * time.Second,
		InvalidBucketParameters: map[string]string{
			s3.ParamVersioning: "sometimes",
		},
		IncompatibleBucketParameters: map[string]string{s3.ParamVersioning: "true"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(sanity.V1alpha1Cases()) {
		t.Fatalf("%d results, want the %d v1alpha1 cases", len(results), len(sanity.V1alpha1Cases()))
	}
	for _, r := range results {
		if r.Status != sanity.Passed {
			t.Errorf("%s: %s %s", r.Name, r.Status, r.Message)
		}
	}
}

// The sidecar's driver client detects the protocol and drives the v1alpha1 driver through the
// adapter: two phases, idempotent create, grant with refusals, revoke and delete.
func TestAdapterAgainstDriver(t *testing.T) {
	ctx := t.Context()
	c, err := driverclient.New(serve(t), driverclient.Options{Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := c.Probe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Protocol() != driverclient.ProtocolV1alpha1 || info.GetName() != "v1alpha1.s3.example.com" {
		t.Fatalf("protocol %q, name %q", c.Protocol(), info.GetName())
	}
	s3only := []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}
	gen, err := c.DriverGenerateBucketId(
		ctx,
		&cosiproto.DriverGenerateBucketIdRequest{Name: "bc-adapter-1", Protocols: s3only},
	)
	if err != nil || gen.GetBucketId() != "bc-adapter-1" {
		t.Fatalf("DriverGenerateBucketId: %v, %v", gen, err)
	}
	for range 2 {
		created, err := c.DriverCreateBucket(
			ctx,
			&cosiproto.DriverCreateBucketRequest{BucketId: gen.GetBucketId(), Protocols: s3only},
		)
		if err != nil || created.GetProtocols().GetS3().GetBucketName() != "bc-adapter-1" ||
			created.GetProtocols().GetS3().GetRegion() != "us-east-1" {
			t.Fatalf("DriverCreateBucket: %v, %v", created, err)
		}
	}
	rw := &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}
	accessed := []*cosiproto.AccessedBucket{{BucketId: gen.GetBucketId(), AccessModes: rw}}
	grantReq := &cosiproto.DriverGrantBucketAccessRequest{
		AccountId:          "ba-adapter-1",
		Buckets:            accessed,
		Protocol:           cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
	}
	resp, err := c.DriverGrantBucketAccess(ctx, grantReq)
	if err != nil {
		t.Fatal(err)
	}
	if err := driver.ValidateGrantResponse(grantReq, resp); err != nil {
		t.Errorf("the adapted grant response is incomplete: %v", err)
	}
	refused := []struct {
		modes *cosiproto.AccessModes
		multi bool
		want  codes.Code
	}{
		{&cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_ONLY}, false, codes.InvalidArgument},
		{
			&cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE, BucketMetadata: cosiproto.AccessMode_READ_WRITE},
			false,
			codes.InvalidArgument,
		},
		{rw, true, codes.OutOfRange},
	}
	for _, r := range refused {
		buckets := []*cosiproto.AccessedBucket{{BucketId: gen.GetBucketId(), AccessModes: r.modes}}
		if r.multi {
			buckets = append(buckets, &cosiproto.AccessedBucket{BucketId: "other", AccessModes: r.modes})
		}
		_, err := c.DriverGenerateBucketAccessId(
			ctx,
			&cosiproto.DriverGenerateBucketAccessIdRequest{
				AccountName:        "ba-x",
				Buckets:            buckets,
				Protocol:           cosiproto.ObjectProtocol_S3,
				AuthenticationType: cosiproto.AuthenticationType_KEY,
			},
		)
		if status.Code(err) != r.want {
			t.Errorf("modes %v multi %v: %v, want %v", r.modes, r.multi, err, r.want)
		}
	}
	for range 2 {
		if _, err := c.DriverRevokeBucketAccess(ctx, &cosiproto.DriverRevokeBucketAccessRequest{
			AccountId: "ba-adapter-1",
			Buckets: []*cosiproto.DriverRevokeBucketAccessRequest_Bucket{
				{BucketId: gen.GetBucketId()},
			},
			Protocol:           cosiproto.ObjectProtocol_S3,
			AuthenticationType: cosiproto.AuthenticationType_KEY,
		}); err != nil {
			t.Errorf("revoke: %v", err)
		}
	}
	for range 2 {
		if _, err := c.DriverDeleteBucket(
			ctx,
			&cosiproto.DriverDeleteBucketRequest{BucketId: gen.GetBucketId()},
		); err != nil {
			t.Errorf("delete: %v", err)
		}
	}
}
