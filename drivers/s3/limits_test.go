package s3_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/drivers/s3"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// finalGrantCodes are the codes on which the sidecar stops retrying a grant until the object
// changes (internal/sidecar: rpcError.retryable); every other code is retried with backoff.
var finalGrantCodes = map[codes.Code]bool{
	codes.InvalidArgument: true, codes.AlreadyExists: true, codes.OutOfRange: true, codes.Unimplemented: true,
}

// TestPolicyOverStoreLimitIsFinal checks that a grant whose policy the store refuses as too large
// fails with a final code that says so, not with one the sidecar retries for ever: on the IAM
// service (Versity), whose limit is below the driver's --iam-max-policy-size, the store's
// LimitExceeded on PutUserPolicy; on Ceph RGW, a bucket policy that the access's statements would
// take over the store's largest request body (rgw_max_put_param_size, 1 MiB by default), which
// RGW answers with InvalidRange (HTTP 416). The bucket's policy stays as it was. (Issue 25,
// item 23.)
func TestPolicyOverStoreLimitIsFinal(t *testing.T) {
	rw := &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}
	t.Run("versity-iam", func(t *testing.T) {
		b := versityBackend(t)
		accounts := s3.NewIAMAccounts(
			versityStore.IAMEndpoint,
			credentials.NewStaticCredentialsProvider(versityStore.RootAccessKey, versityStore.RootSecretKey, ""),
			nil,
		)
		accounts.MaxPolicySize = 1 << 20 // above the store's: the store refuses, not the driver
		d, err := s3.New(s3.Config{Endpoint: b.s3Endpoint, Credentials: b.creds, Accounts: accounts})
		if err != nil {
			t.Fatal(err)
		}
		_, p := serve(t, d, logr.Discard())
		buckets := longBuckets(t, b, 12)
		a, err := grantWith(t.Context(), p, nil, rw, buckets...)
		if !finalGrantCodes[status.Code(err)] || !strings.Contains(status.Convert(err).Message(), "policy limits") {
			t.Errorf("a grant whose IAM policy is over the store's limit: %v, want a final code naming the limit", err)
		}
		revokeAll(t, p, a, buckets...)
	})

	t.Run("ceph-rgw", func(t *testing.T) {
		b := rgwBackend(t)
		ctx := t.Context()
		_, p := serve(t, b.newDriver(t, ""), logr.Discard())
		bucket := createBucket(t, p, map[string]string{s3.ParamPurgeOnDelete: "true"})
		// The admin's statements, 512 bytes short of RGW's 1 MiB: room for the policy, not for
		// an access's statements (objectData write: about 2 KiB).
		var stmts []string
		size := len(`{"Version":"2012-10-17","Statement":[]}`)
		for i := 0; ; i++ {
			s := fmt.Sprintf(`{"Sid":"Admin%06d","Effect":"Allow","Principal":{"AWS":["arn:aws:iam:::user/reader%06d"]},`+
				`"Action":["s3:GetObject"],"Resource":["arn:aws:s3:::%s/reports/%06d/*"]}`, i, i, bucket, i)
			if size+len(s)+1 > 1<<20-512 {
				break
			}
			stmts = append(stmts, s)
			size += len(s) + 1
		}
		doc := `{"Version":"2012-10-17","Statement":[` + strings.Join(stmts, ",") + `]}`
		if _, err := b.admin.PutBucketPolicy(
			ctx,
			&awss3.PutBucketPolicyInput{Bucket: aws.String(bucket), Policy: aws.String(doc)},
		); err != nil {
			t.Fatalf("the admin's policy of %d bytes: %v", len(doc), err)
		}
		a, err := grantWith(ctx, p, nil, rw, bucket)
		if !finalGrantCodes[status.Code(err)] || !strings.Contains(status.Convert(err).Message(), "policy limits") {
			t.Errorf("a grant that takes the bucket policy over RGW's limit: %v, want a final code naming the limit", err)
		}
		revokeAll(t, p, a, bucket)
		after := bucketPolicy(t, b, bucket)
		if n := strings.Count(after, `"Sid"`); n != len(stmts) {
			t.Errorf("the bucket policy has %d statements after the refused grant, want the admin's %d", n, len(stmts))
		}
	})
}

// revokeAll revokes access a (of a grant that may have failed halfway) for buckets.
func revokeAll(t *testing.T, p cosiproto.ProvisionerClient, a *access, buckets ...string) {
	t.Helper()
	if a == nil {
		return
	}
	for _, b := range buckets {
		if _, ok := a.infos[b]; !ok {
			a.infos[b] = nil
		}
	}
	revoke(t, p, a)
}
