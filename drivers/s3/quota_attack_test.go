package s3_test

// Attacks on the bucket quotas of the S3 driver by a reviewer who did not write them (commit
// f9c1474), against a real Ceph RGW 16.2: each failed on f9c1474. The attacks that found RGW's own
// limits (UploadPartCopy, concurrent writers) are in docs/drivers/s3.md, "Bucket quotas".

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/drivers/s3"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// rgwAdminCall signs an Admin Ops call with the backend's admin credentials.
func rgwAdminCall(ctx context.Context, b *backend, method, resource string, q url.Values) ([]byte, int, error) {
	q.Set("format", "json")
	req, err := http.NewRequestWithContext(ctx, method, b.s3Endpoint+"/admin/"+resource+"?"+q.Encode(), nil)
	if err != nil {
		return nil, 0, err
	}
	creds, err := b.creds.Retrieve(ctx)
	if err != nil {
		return nil, 0, err
	}
	empty := sha256.Sum256(nil)
	h := hex.EncodeToString(empty[:])
	req.Header.Set("X-Amz-Content-Sha256", h)
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, h, "s3", "us-east-1", time.Now()); err != nil {
		return nil, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return body, resp.StatusCode, err
}

// rgwBucketStats is what the Admin Ops API says of a bucket (with stats).
type rgwBucketStats struct {
	Owner string `json:"owner"`
	Quota struct {
		Enabled    bool  `json:"enabled"`
		MaxSize    int64 `json:"max_size"`
		MaxSizeKB  int64 `json:"max_size_kb"`
		MaxObjects int64 `json:"max_objects"`
	} `json:"bucket_quota"`
	Usage map[string]struct {
		Size       int64 `json:"size"`
		NumObjects int64 `json:"num_objects"`
	} `json:"usage"`
}

func bucketStats(t *testing.T, b *backend, bucket string) rgwBucketStats {
	t.Helper()
	body, code, err := rgwAdminCall(t.Context(), b, http.MethodGet, "bucket",
		url.Values{"bucket": {bucket}, "stats": {"true"}})
	if err != nil || code != http.StatusOK {
		t.Fatalf("bucket stats of %s: %v, HTTP %d %s", bucket, err, code, body)
	}
	var s rgwBucketStats
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestQuotaAttackMaxSizeOverflow: a maxSize within 1023 bytes of 2^63-1 (which only a suffixed
// spelling such as 9223372036854775k parses to; plain digits are refused as too large) overflows the KiB rounding
// ((size+1023)/1024 wraps negative): RGW is sent a negative max-size-kb, which is no limit, and the
// read-back check accepts it because it compares with the same wrapped figure.
func TestQuotaAttackMaxSizeOverflow(t *testing.T) {
	b := rgwBackend(t)
	_, p := serve(t, b.newDriver(t, ""), logr.Discard())
	params := map[string]string{s3.ParamMaxSize: "9223372036854775k"} // 9223372036854775000 bytes
	gen, err := p.DriverGenerateBucketId(t.Context(),
		&cosiproto.DriverGenerateBucketIdRequest{Name: "bc-" + strings.ToLower(rand.Text()[:12]), Parameters: params})
	if status.Code(err) == codes.InvalidArgument {
		return // refused, naming the parameter: fine
	}
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.DriverCreateBucket(t.Context(),
		&cosiproto.DriverCreateBucketRequest{BucketId: gen.GetBucketId(), Parameters: params})
	if status.Code(err) == codes.InvalidArgument {
		return // refused, naming the parameter: fine
	}
	if err != nil {
		t.Fatal(err)
	}
	if q := bucketStats(t, b, gen.GetBucketId()).Quota; q.MaxSize <= 0 {
		t.Errorf("maxSize 9223372036854775k accepted, and RGW holds max_size=%d max_size_kb=%d: no size limit at all",
			q.MaxSize, q.MaxSizeKB)
	}
}

// TestQuotaAttackSmallMaxSize: RGW counts every object in whole 4 KiB (rgw_rounded_objsize), so
// a maxSize under 4Ki would hold no object with data: it is refused, saying why (on f9c1474 it was
// accepted, and a bucket of 1Ki refused its first byte).
func TestQuotaAttackSmallMaxSize(t *testing.T) {
	b := rgwBackend(t)
	_, p := serve(t, b.newDriver(t, ""), logr.Discard())
	for _, v := range []string{"1", "1Ki", "4095"} {
		_, err := p.DriverGenerateBucketId(t.Context(), &cosiproto.DriverGenerateBucketIdRequest{Name: "bc-small",
			Parameters: map[string]string{s3.ParamMaxSize: v}})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "at least 4096 bytes") {
			t.Errorf("maxSize %q: %v, want InvalidArgument saying the store counts objects in 4096 bytes", v, err)
		}
	}
	four := createBucket(t, p, map[string]string{s3.ParamMaxSize: "4Ki"})
	if err := putSized(grant(t, p, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}, four),
		four, "one-byte", 1); err != nil {
		t.Errorf("maxSize 4Ki: an object of 1 byte refused: %v", err)
	}
}

// TestQuotaAttackFractionalMaxSize: a fractional byte count is refused as "too large".
func TestQuotaAttackFractionalMaxSize(t *testing.T) {
	b := rgwBackend(t)
	_, p := serve(t, b.newDriver(t, ""), logr.Discard())
	for _, v := range []string{"1.5", "500m"} {
		_, err := p.DriverGenerateBucketId(t.Context(), &cosiproto.DriverGenerateBucketIdRequest{Name: "bc-frac",
			Parameters: map[string]string{s3.ParamMaxSize: v}})
		if status.Code(err) != codes.InvalidArgument || strings.Contains(err.Error(), "too large") {
			t.Errorf("maxSize %q: %v, want InvalidArgument saying it is not a whole number of bytes", v, err)
		}
	}
}

// TestQuotaPutBack: the Bucket's parameters are the limit. A quota an admin changed in RGW by hand
// is put back when the driver next looks at the bucket, and a size limit of zero (RGW: nothing
// may be stored) left on a bucket whose class limits only its objects is not taken for "no size
// limit" (the read that lets a refresh skip its write compares them).
func TestQuotaPutBack(t *testing.T) {
	b := rgwBackend(t)
	_, p := serve(t, b.newDriver(t, ""), logr.Discard())
	params := map[string]string{s3.ParamMaxObjects: "2"}
	bucket := createBucket(t, p, params)
	for _, manual := range []url.Values{
		{"max-objects": {"100"}},
		{"max-objects": {"2"}, "max-size-kb": {"0"}, "max-size": {"0"}},
	} {
		set := url.Values{"quota": {""}, "uid": {bucketStats(t, b, bucket).Owner}, "bucket": {bucket}, "enabled": {"true"}}
		for k, v := range manual {
			set[k] = v
		}
		body, code, err := rgwAdminCall(t.Context(), b, http.MethodPut, "bucket", set)
		if err != nil || code != http.StatusOK {
			t.Fatalf("the admin's quota change: %v, HTTP %d %s", err, code, body)
		}
		if _, err := p.DriverCreateBucket(t.Context(),
			&cosiproto.DriverCreateBucketRequest{BucketId: bucket, Parameters: params}); err != nil {
			t.Fatal(err)
		}
		if q := bucketStats(t, b, bucket).Quota; !q.Enabled || q.MaxObjects != 2 || q.MaxSize >= 0 {
			t.Errorf("after the admin set %v and the driver looked again: quota %+v, want max_objects 2, no size limit",
				manual, q)
		}
	}
}
