package s3_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/go-logr/logr"
	"google.golang.org/protobuf/proto"
	"k8s.io/utils/ptr"

	"github.com/kube-cosi/cosi/drivers/s3"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// radosgwAdmin runs radosgw-admin against the test's RGW.
func radosgwAdmin(t *testing.T, args ...string) []byte {
	t.Helper()
	args = append([]string{"-c", filepath.Join(rgw.dir, "ceph.conf"), "-n", "client.admin"}, args...)
	out, err := exec.Command("radosgw-admin", args...).Output()
	if err != nil {
		t.Fatalf("radosgw-admin %v: %v %s", args, err, out)
	}
	return out
}

// TestAttack44UsageShowsTheQuotaRGWEnforces: RGW enforces on a bucket without a quota of its own
// the bucket quota its owner's user holds (radosgw-admin quota set --quota-scope=bucket --uid=...,
// which an RGW admin sets to cap every bucket of a user). Every bucket COSI creates is owned by the
// driver's identity: with such a quota on it, writes are refused QuotaExceeded while
// DriverGetBucketUsage reports no limit, kubectl cosi status says "no quota" and
// COSIBucketNearQuota can never fire. The usage must report the limit RGW holds the bucket to.
func TestAttack44UsageShowsTheQuotaRGWEnforces(t *testing.T) {
	b := rgwBackend(t)
	// An admin identity of its own, so that its user quota touches no other test's buckets.
	uid := randomName("quota-owner")
	out := radosgwAdmin(t, "user", "create", "--uid", uid, "--display-name", uid,
		"--caps", "users=*;buckets=*;metadata=*;usage=*")
	var u struct {
		Keys []struct {
			AccessKey string `json:"access_key"`
			SecretKey string `json:"secret_key"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(out, &u); err != nil || len(u.Keys) == 0 {
		t.Fatalf("radosgw-admin user create: %v %s", err, out)
	}
	creds := credentials.NewStaticCredentialsProvider(u.Keys[0].AccessKey, u.Keys[0].SecretKey, "")
	admin := s3.NewS3Client(b.s3Endpoint, "us-east-1", creds, nil)
	d, err := s3.New(s3.Config{Endpoint: b.s3Endpoint, Credentials: creds,
		Accounts: s3.NewRGWAccounts(b.s3Endpoint, "/admin", "us-east-1", creds, nil, admin)})
	if err != nil {
		t.Fatal(err)
	}
	_, p := serve(t, d, logr.Discard())
	radosgwAdmin(t, "quota", "set", "--quota-scope=bucket", "--uid", uid, "--max-objects=2", "--max-size=1048576")
	radosgwAdmin(t, "quota", "enable", "--quota-scope=bucket", "--uid", uid)

	plain := createBucket(t, p, nil)
	a := grant(t, p, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}, plain)
	for i := range 2 {
		expect(t, fmt.Sprintf("object %d of 2", i+1), true, putSized(a, plain, fmt.Sprintf("o%d", i), 10))
	}
	refused(t, "a third object past the owner's bucket quota", func() error { return putSized(a, plain, "o3", 10) })

	want := &cosiproto.DriverGetBucketUsageResponse{SizeBytes: 8 << 10, ObjectCount: 2,
		MaxSizeBytes: ptr.To[int64](1 << 20), MaxObjectCount: ptr.To[int64](2)}
	var got *cosiproto.DriverGetBucketUsageResponse
	req := &cosiproto.DriverGetBucketUsageRequest{BucketId: plain}
	for range 50 {
		if got, err = p.DriverGetBucketUsage(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		if proto.Equal(got, want) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !proto.Equal(got, want) {
		t.Errorf("RGW refuses writes past its owner's bucket quota, but the usage says %v, want %v", got, want)
	}

	// A class's own quota wins over the owner's, whole: RGW holds the bucket to 5 objects and no
	// size limit, not to the owner's 1 MiB.
	own := createBucket(t, p, map[string]string{s3.ParamMaxObjects: "5"})
	o := grant(t, p, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}, own)
	for i := range 3 {
		expect(t, fmt.Sprintf("object %d of 600 KiB", i+1), true, putSized(o, own, fmt.Sprintf("o%d", i), 600<<10))
	}
	got, err = p.DriverGetBucketUsage(t.Context(), &cosiproto.DriverGetBucketUsageRequest{BucketId: own})
	if err != nil {
		t.Fatal(err)
	}
	if got.MaxObjectCount == nil || *got.MaxObjectCount != 5 || got.MaxSizeBytes != nil {
		t.Errorf("a bucket with a quota of its own: %v, want max_object_count 5 and no size limit", got)
	}
}
