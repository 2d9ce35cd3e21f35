package main

import (
	"context"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	refproto "sigs.k8s.io/container-object-storage-interface/proto"
)

// The responses hold what the reference's sidecar checks before it marks a Bucket or an access
// ready (its translator's validation): a bucket ID, S3 bucket info with endpoint, region and an
// addressing style, an account ID, info for exactly the buckets asked for, and both halves of a
// key for authenticationType Key. hack/reference/build.sh runs this test against the proto of the
// commit it builds.
func TestResponsesPassTheSidecarsChecks(t *testing.T) {
	ctx := context.Background()
	d := newDriver("bench.memory.cosi.io")
	created, err := d.DriverCreateBucket(ctx, &refproto.DriverCreateBucketRequest{
		Name: "bc-1", Protocols: []*refproto.ObjectProtocol{{Type: refproto.ObjectProtocol_S3}}})
	if err != nil {
		t.Fatal(err)
	}
	if created.GetBucketId() != "bc-1" {
		t.Errorf("bucket ID %q, want bc-1", created.GetBucketId())
	}
	checkS3Info(t, created.GetProtocols().GetS3())
	granted, err := d.DriverGrantBucketAccess(ctx, &refproto.DriverGrantBucketAccessRequest{
		AccountName:        "ba-1",
		Protocol:           &refproto.ObjectProtocol{Type: refproto.ObjectProtocol_S3},
		AuthenticationType: &refproto.AuthenticationType{Type: refproto.AuthenticationType_KEY},
		Buckets: []*refproto.DriverGrantBucketAccessRequest_AccessedBucket{
			{BucketId: "bc-1", AccessMode: &refproto.AccessMode{Mode: refproto.AccessMode_READ_WRITE}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if granted.GetAccountId() == "" || len(granted.GetBuckets()) != 1 || granted.GetBuckets()[0].GetBucketId() != "bc-1" {
		t.Fatalf("grant: %v", granted)
	}
	checkS3Info(t, granted.GetBuckets()[0].GetBucketInfo().GetS3())
	creds := granted.GetCredentials().GetS3()
	if creds.GetAccessKeyId() == "" || creds.GetAccessSecretKey() == "" {
		t.Errorf("credentials %v: want an access key ID and a secret key", creds)
	}
	again, err := d.DriverGrantBucketAccess(ctx, &refproto.DriverGrantBucketAccessRequest{
		AccountName: "ba-1", Protocol: &refproto.ObjectProtocol{Type: refproto.ObjectProtocol_S3},
		AuthenticationType: &refproto.AuthenticationType{Type: refproto.AuthenticationType_KEY},
		Buckets:            []*refproto.DriverGrantBucketAccessRequest_AccessedBucket{{BucketId: "bc-1"}},
	})
	if err != nil || again.GetCredentials().GetS3().GetAccessSecretKey() != creds.GetAccessSecretKey() {
		t.Errorf("a repeated grant should return the same key: %v, %v", again, err)
	}
	_, err = d.DriverGrantBucketAccess(ctx, &refproto.DriverGrantBucketAccessRequest{
		AccountName: "ba-2", Protocol: &refproto.ObjectProtocol{Type: refproto.ObjectProtocol_S3},
		Buckets: []*refproto.DriverGrantBucketAccessRequest_AccessedBucket{{BucketId: "missing"}},
	})
	if status.Code(err) != codes.NotFound {
		t.Errorf("grant to a missing bucket: %v, want NotFound", err)
	}
	revoke := &refproto.DriverRevokeBucketAccessRequest{AccountId: "ba-1"}
	if _, err := d.DriverRevokeBucketAccess(ctx, revoke); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DriverDeleteBucket(ctx, &refproto.DriverDeleteBucketRequest{BucketId: "bc-1"}); err != nil {
		t.Fatal(err)
	}
	if b, a, _ := d.counts(); b != 0 || a != 0 {
		t.Errorf("after revoke and delete: %d buckets, %d accounts", b, a)
	}
}

func checkS3Info(t *testing.T, info *refproto.S3BucketInfo) {
	t.Helper()
	if info.GetBucketId() == "" || info.GetEndpoint() == "" || info.GetRegion() == "" ||
		info.GetAddressingStyle().GetStyle() == refproto.S3AddressingStyle_UNKNOWN {
		t.Errorf("S3 bucket info %v: want bucket ID, endpoint, region and addressing style", info)
	}
}

// The driver serves its name and S3 on the socket, as the reference's sidecar asks for them when
// it starts.
func TestServesOnTheSocket(t *testing.T) {
	endpoint := "unix://" + filepath.Join(t.TempDir(), "d.sock")
	errs := make(chan error, 1)
	go func() { errs <- run(endpoint, "bench.memory.cosi.io") }()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	info, err := refproto.NewIdentityClient(conn).DriverGetInfo(context.Background(), &refproto.DriverGetInfoRequest{},
		grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if info.GetName() != "bench.memory.cosi.io" || len(info.GetSupportedProtocols()) != 1 ||
		info.GetSupportedProtocols()[0].GetType() != refproto.ObjectProtocol_S3 {
		t.Errorf("DriverGetInfo = %v", info)
	}
	select {
	case err := <-errs:
		t.Fatalf("driver stopped: %v", err)
	default:
	}
}
