package s3_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/utils/ptr"

	"github.com/kube-cosi/cosi/drivers/s3"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// TestBucketQuota: a class's quota parameters are enforced by a store that has bucket quotas
// (Ceph RGW: writes past them are refused to the access's own key), refused with InvalidArgument
// naming the parameter and the store where it has none (the Versity gateway), and refused when
// malformed, before anything is created.
func TestBucketQuota(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, p := serve(t, b.newDriver(t, ""), logr.Discard())
		ctx := t.Context()
		for _, params := range []map[string]string{
			{s3.ParamMaxSize: "-1Gi"}, {s3.ParamMaxSize: "lots"}, {s3.ParamMaxSize: "0"},
			{s3.ParamMaxObjects: "0"}, {s3.ParamMaxObjects: "1.5"}, {s3.ParamMaxObjects: "-3"},
		} {
			_, err := p.DriverGenerateBucketId(ctx, &cosiproto.DriverGenerateBucketIdRequest{Name: "bc-bad-quota",
				Parameters: params})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "parameter max") {
				t.Errorf("quota parameters %v: %v, want InvalidArgument naming the parameter", params, err)
			}
		}
		if b.name == "versity-iam" {
			for _, param := range []string{s3.ParamMaxSize, s3.ParamMaxObjects} {
				id := "cosi-quota-" + strings.ToLower(param)
				_, err := p.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: id,
					Parameters: map[string]string{param: "10"}})
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "parameter "+param) ||
					!strings.Contains(err.Error(), "does not enforce bucket quotas") {
					t.Errorf("%s on a store without bucket quotas: %v, want InvalidArgument naming it and the store", param, err)
				}
				if exists, err := b.bucketExists(ctx, id); err != nil || exists {
					t.Errorf("a bucket was created for a class whose quota the store cannot enforce: %v, %v", exists, err)
				}
			}
			return
		}

		rw := &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}
		counted := createBucket(t, p, map[string]string{s3.ParamMaxObjects: "2"})
		a := grant(t, p, rw, counted)
		expect(t, "the first object", true, put(a, counted, "one"))
		expect(t, "the second object", true, put(a, counted, "two"))
		refused(t, "a third object past maxObjects 2", func() error { return putSized(a, counted, "three", 10) })
		// A repeated creation applies the quota again, and keeps it.
		if _, err := p.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: counted,
			Parameters: map[string]string{s3.ParamMaxObjects: "2"}}); err != nil {
			t.Fatal(err)
		}
		refused(t, "a third object after the repeated creation", func() error { return putSized(a, counted, "three", 10) })

		sized := createBucket(t, p, map[string]string{s3.ParamMaxSize: "4Ki"})
		s := grant(t, p, rw, sized)
		expect(t, "3 KiB in a bucket of 4 KiB", true, putSized(s, sized, "small", 3<<10))
		refused(t, "3 KiB more, past maxSize 4Ki", func() error { return putSized(s, sized, "more", 3<<10) })
		refused(t, "one object of 8 KiB", func() error { return putSized(s, sized, "large", 8<<10) })
	})
}

// putSized writes size bytes as key with a's key.
func putSized(a *access, bucket, key string, size int) error {
	_, err := a.client.PutObject(context.Background(), &awss3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(strings.Repeat("x", size)),
	})
	return err
}

// refused fails unless write is refused by the store as a write past a quota. RGW sometimes
// closes the connection before the client has read its refusal (HTTP 403, the body lost): the
// write is tried again, up to 3 times, until the refusal names QuotaExceeded; any success fails.
func refused(t *testing.T, what string, write func() error) {
	t.Helper()
	var err error
	for range 3 {
		if err = write(); err == nil || strings.Contains(err.Error(), "QuotaExceeded") {
			break
		}
	}
	if err == nil || !strings.Contains(err.Error(), "QuotaExceeded") {
		t.Errorf("%s: %v, want the store's QuotaExceeded", what, err)
	}
}

// TestBucketUsage: where the store keeps each bucket's usage (Ceph RGW), the driver advertises
// BUCKET_USAGE and answers with what the store counts against the quota, and the quota; where it
// keeps none (the Versity gateway), it advertises nothing and answers UNIMPLEMENTED.
func TestBucketUsage(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		d := b.newDriver(t, "")
		_, p := serve(t, d, logr.Discard())
		ctx := t.Context()
		info, err := d.DriverGetInfo(ctx, &cosiproto.DriverGetInfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		advertised := slices.Contains(info.GetCapabilities(), cosiproto.DriverCapability_BUCKET_USAGE)
		if b.name == "versity-iam" {
			if advertised {
				t.Error("BUCKET_USAGE is advertised by a driver whose store keeps no usage")
			}
			_, err := p.DriverGetBucketUsage(ctx, &cosiproto.DriverGetBucketUsageRequest{BucketId: "cosi-any"})
			if status.Code(err) != codes.Unimplemented {
				t.Errorf("DriverGetBucketUsage on the iam back-end: %v, want Unimplemented", err)
			}
			return
		}
		if !advertised {
			t.Fatalf("capabilities %v: BUCKET_USAGE is not advertised on RGW", info.GetCapabilities())
		}
		if _, err := p.DriverGetBucketUsage(ctx, &cosiproto.DriverGetBucketUsageRequest{
			BucketId: "cosi-never-created",
		}); status.Code(err) != codes.NotFound {
			t.Errorf("a bucket that does not exist: %v, want NotFound", err)
		}
		plain := createBucket(t, p, nil)
		u, err := p.DriverGetBucketUsage(ctx, &cosiproto.DriverGetBucketUsageRequest{BucketId: plain})
		if err != nil {
			t.Fatal(err)
		}
		if u.GetSizeBytes() != 0 || u.GetObjectCount() != 0 || u.MaxSizeBytes != nil || u.MaxObjectCount != nil {
			t.Errorf("an empty bucket without a quota: %v", u)
		}

		limited := createBucket(t, p, map[string]string{s3.ParamMaxSize: "1Mi", s3.ParamMaxObjects: "10"})
		a := grant(t, p, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}, limited)
		for i, size := range []int{1, 5000, 10 << 10} {
			expect(t, fmt.Sprintf("object %d", i), true, putSized(a, limited, fmt.Sprintf("o%d", i), size))
		}
		// RGW counts each object rounded up to 4 KiB: 4 + 8 + 12 KiB.
		want := &cosiproto.DriverGetBucketUsageResponse{
			SizeBytes: 24 << 10, ObjectCount: 3, MaxSizeBytes: ptr.To[int64](1 << 20), MaxObjectCount: ptr.To[int64](10),
		}
		var got *cosiproto.DriverGetBucketUsageResponse
		for range 50 { // RGW updates its statistics as it writes, a moment later at most
			if got, err = p.DriverGetBucketUsage(ctx, &cosiproto.DriverGetBucketUsageRequest{BucketId: limited}); err != nil {
				t.Fatal(err)
			}
			if proto.Equal(got, want) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("usage %v, want %v", got, want)
	})
}
