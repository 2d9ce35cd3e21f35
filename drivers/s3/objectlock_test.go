package s3_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/drivers/s3"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// allowObjectLock is the access parameter that lets objectData write lock objects, as admins
// write it in a BucketAccessClass (s3.ParamAllowObjectLock).
const allowObjectLock = "allowObjectLock"

// grantWith grants modes on buckets to a new account, with access parameters; it returns the
// access, or the driver's error.
func grantWith(
	ctx context.Context,
	p cosiproto.ProvisionerClient,
	params map[string]string,
	modes *cosiproto.AccessModes,
	buckets ...string,
) (*access, error) {
	gen := &cosiproto.DriverGenerateBucketAccessIdRequest{
		AccountName:        randomName("ba-"),
		Protocol:           cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
		Parameters:         params,
	}
	for _, b := range buckets {
		gen.Buckets = append(gen.Buckets, &cosiproto.AccessedBucket{BucketId: b, AccessModes: modes})
	}
	id, err := p.DriverGenerateBucketAccessId(ctx, gen)
	if err != nil {
		return nil, err
	}
	resp, err := p.DriverGrantBucketAccess(ctx, &cosiproto.DriverGrantBucketAccessRequest{
		AccountId:          id.GetAccountId(),
		Buckets:            gen.Buckets,
		Protocol:           cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
		Parameters:         params,
	})
	if err != nil {
		return &access{id: id.GetAccountId(), infos: map[string]*cosiproto.ProtocolBucketInfo{}}, err
	}
	a := &access{id: id.GetAccountId(), creds: resp.GetCredentials(), infos: map[string]*cosiproto.ProtocolBucketInfo{}}
	for _, bi := range resp.GetBuckets() {
		a.infos[bi.GetBucketId()] = bi.GetBucketInfo()
	}
	a.client = userClient(a.creds, a.infos[buckets[0]])
	return a, nil
}

// lockOps are the requests that lock an object: retention and legal hold, set on an object
// (key) or with the x-amz-object-lock-* headers of an upload, a copy or a multipart upload.
func lockOps(mode types.ObjectLockRetentionMode) []forbiddenOp {
	until := func() *time.Time { return aws.Time(time.Now().Add(time.Minute).UTC().Truncate(time.Second)) }
	put := func(ctx context.Context, c *awss3.Client, in *awss3.PutObjectInput) error {
		in.Body = strings.NewReader("locked?")
		_, err := c.PutObject(ctx, in)
		return err
	}
	return []forbiddenOp{
		{"PutObjectRetention " + string(mode), func(ctx context.Context, c *awss3.Client, bucket, key string) error {
			_, err := c.PutObjectRetention(ctx, &awss3.PutObjectRetentionInput{Bucket: aws.String(bucket), Key: aws.String(key),
				Retention: &types.ObjectLockRetention{Mode: mode, RetainUntilDate: until()}})
			return err
		}},
		{"PutObjectLegalHold ON", func(ctx context.Context, c *awss3.Client, bucket, key string) error {
			_, err := c.PutObjectLegalHold(ctx, &awss3.PutObjectLegalHoldInput{Bucket: aws.String(bucket), Key: aws.String(key),
				LegalHold: &types.ObjectLockLegalHold{Status: types.ObjectLockLegalHoldStatusOn}})
			return err
		}},
		{"PutObject with x-amz-object-lock-mode " + string(mode), func(
			ctx context.Context, c *awss3.Client, bucket, key string,
		) error {
			return put(ctx, c, &awss3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key + "-retained"),
				ObjectLockMode: types.ObjectLockMode(mode), ObjectLockRetainUntilDate: until()})
		}},
		{"PutObject with x-amz-object-lock-legal-hold ON", func(
			ctx context.Context, c *awss3.Client, bucket, key string,
		) error {
			return put(ctx, c, &awss3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key + "-held"),
				ObjectLockLegalHoldStatus: types.ObjectLockLegalHoldStatusOn})
		}},
		{"CopyObject with object lock headers", func(ctx context.Context, c *awss3.Client, bucket, key string) error {
			_, err := c.CopyObject(ctx, &awss3.CopyObjectInput{Bucket: aws.String(bucket), Key: aws.String(key + "-copy"),
				CopySource: aws.String(bucket + "/" + key), ObjectLockMode: types.ObjectLockMode(mode),
				ObjectLockRetainUntilDate: until(), ObjectLockLegalHoldStatus: types.ObjectLockLegalHoldStatusOn})
			return err
		}},
		{"CreateMultipartUpload with object lock headers", func(
			ctx context.Context, c *awss3.Client, bucket, key string,
		) error {
			out, err := c.CreateMultipartUpload(ctx, &awss3.CreateMultipartUploadInput{Bucket: aws.String(bucket),
				Key: aws.String(key + "-multipart"), ObjectLockMode: types.ObjectLockMode(mode), ObjectLockRetainUntilDate: until(),
				ObjectLockLegalHoldStatus: types.ObjectLockLegalHoldStatusOn})
			if err == nil {
				_, _ = c.AbortMultipartUpload(ctx, &awss3.AbortMultipartUploadInput{Bucket: aws.String(bucket),
					Key: aws.String(key + "-multipart"), UploadId: out.UploadId})
			}
			return err
		}},
	}
}

// putObject uploads key with c and returns its version.
func putObject(t *testing.T, c *awss3.Client, bucket, key string) string {
	t.Helper()
	out, err := c.PutObject(
		t.Context(),
		&awss3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader("data")},
	)
	if err != nil {
		t.Fatalf("plain PutObject of %s: %v, want success", key, err)
	}
	return aws.ToString(out.VersionId)
}

// TestObjectLockNeedsOptIn checks that objectData write lets a workload write objects in a
// bucket with Object Lock but not lock them (a COMPLIANCE retention would keep the objects and
// the bucket from being deleted until its date), unless its BucketAccessClass opts in with
// allowObjectLock; that no access can bypass a GOVERNANCE retention; and that the parameter is
// validated. On Ceph RGW, which cannot refuse the object lock headers of uploads, objectData
// write to such a bucket is refused without the opt-in. (Issue 25, item 5.)
func TestObjectLockNeedsOptIn(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := t.Context()
		_, p := serve(t, b.newDriver(t, ""), logr.Discard())
		bucket := createBucket(t, p, map[string]string{s3.ParamObjectLock: "true"})
		rw := &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}
		wo := &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_WRITE_ONLY}
		ro := &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_ONLY}

		t.Run("without allowObjectLock", func(t *testing.T) {
			for _, params := range []map[string]string{nil, {allowObjectLock: "false"}} {
				if b.name == "ceph-rgw" {
					for _, modes := range []*cosiproto.AccessModes{rw, wo} {
						_, err := grantWith(ctx, p, params, modes, bucket)
						if status.Code(err) != codes.InvalidArgument ||
							!strings.Contains(status.Convert(err).Message(), allowObjectLock) {
							t.Errorf("objectData %v on RGW with parameters %v: %v, want InvalidArgument naming %s",
								modes.GetObjectData(), params, err, allowObjectLock)
						}
					}
					a, err := grantWith(ctx, p, params, ro, bucket)
					if err != nil {
						t.Fatalf("objectData ReadOnly: %v, want it granted", err)
					}
					revoke(t, p, a)
					continue
				}
				a, err := grantWith(ctx, p, params, rw, bucket)
				if err != nil {
					t.Fatal(err)
				}
				key := randomName("plain-")
				putObject(t, a.client, bucket, key)
				expect(t, "GetObject", true, get(a, bucket, key))
				for _, op := range lockOps(types.ObjectLockRetentionModeCompliance) {
					expect(t, op.name, false, op.do(ctx, a.client, bucket, key))
				}
				revoke(t, p, a)
			}
		})

		t.Run("with allowObjectLock", func(t *testing.T) {
			// objectMetadata ReadOnly to read the retention back.
			modes := &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE,
				ObjectMetadata: cosiproto.AccessMode_READ_ONLY}
			a, err := grantWith(ctx, p, map[string]string{allowObjectLock: "true"}, modes, bucket)
			if err != nil {
				t.Fatal(err)
			}
			defer revoke(t, p, a)
			key := randomName("locked-")
			putObject(t, a.client, bucket, key)
			for _, op := range lockOps(types.ObjectLockRetentionModeGovernance) {
				expect(t, op.name, true, op.do(ctx, a.client, bucket, key))
			}
			retention, err := a.client.GetObjectRetention(
				ctx,
				&awss3.GetObjectRetentionInput{Bucket: aws.String(bucket), Key: aws.String(key + "-retained")},
			)
			if err != nil || retention.Retention == nil || retention.Retention.Mode != types.ObjectLockRetentionModeGovernance {
				t.Errorf("the retention of the object uploaded with x-amz-object-lock-mode: %+v, %v; want GOVERNANCE",
					retention, err)
			}

			// A GOVERNANCE retention stays: s3:BypassGovernanceRetention is granted to nobody.
			version := putObject(t, a.client, bucket, key+"-governed")
			if _, err := a.client.PutObjectRetention(ctx, &awss3.PutObjectRetentionInput{Bucket: aws.String(bucket),
				Key: aws.String(key + "-governed"), VersionId: aws.String(version),
				Retention: &types.ObjectLockRetention{Mode: types.ObjectLockRetentionModeGovernance,
					RetainUntilDate: aws.Time(time.Now().Add(time.Hour).UTC().Truncate(time.Second))}}); err != nil {
				t.Fatalf("setting a GOVERNANCE retention with the opt-in: %v", err)
			}
			_, err = a.client.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: aws.String(bucket),
				Key: aws.String(key + "-governed"), VersionId: aws.String(version), BypassGovernanceRetention: aws.Bool(true)})
			expect(t, "DeleteObject of a GOVERNANCE version with x-amz-bypass-governance-retention", false, err)
			_, err = a.client.PutObjectRetention(ctx, &awss3.PutObjectRetentionInput{Bucket: aws.String(bucket),
				Key: aws.String(key + "-governed"), VersionId: aws.String(version), BypassGovernanceRetention: aws.Bool(true),
				Retention: &types.ObjectLockRetention{Mode: types.ObjectLockRetentionModeGovernance,
					RetainUntilDate: aws.Time(time.Now().Add(2 * time.Second).UTC().Truncate(time.Second))}})
			expect(t, "shortening a GOVERNANCE retention with x-amz-bypass-governance-retention", false, err)
			if _, err := a.client.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String(bucket),
				Key: aws.String(key + "-governed"), VersionId: aws.String(version)}); err != nil {
				t.Errorf("the GOVERNANCE version after the bypass attempts: %v, want it kept", err)
			}
		})

		t.Run("invalid values", func(t *testing.T) {
			for _, v := range []string{"", "yes", "True", "1"} {
				_, err := grantWith(ctx, p, map[string]string{allowObjectLock: v}, rw, bucket)
				if status.Code(err) != codes.InvalidArgument {
					t.Errorf("%s=%q: %v, want InvalidArgument", allowObjectLock, v, err)
				}
			}
			// A misspelt key is refused, not ignored (which would grant without the admin's intent
			// being read).
			_, err := grantWith(ctx, p, map[string]string{"allowObjectlock": "true"}, rw, bucket)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "allowObjectlock") {
				t.Errorf("unknown access parameter allowObjectlock: %v, want InvalidArgument naming it", err)
			}
		})
	})
}

// TestObjectLockRightsOfEarlierGrants checks that an IAM user granted by an earlier version of
// the driver, whose policy gave objectData write s3:PutObjectRetention and s3:PutObjectLegalHold,
// is the same grant for a repeated DriverGrantBucketAccess (not AlreadyExists), which narrows its
// policy: the key can no longer lock objects. (Issue 25, item 5.)
func TestObjectLockRightsOfEarlierGrants(t *testing.T) {
	b := versityBackend(t)
	ctx := t.Context()
	_, p := serve(t, b.newDriver(t, ""), logr.Discard())
	bucket := createBucket(t, p, map[string]string{s3.ParamObjectLock: "true"})
	id := randomName("ba-")
	root := iam.New(
		iam.Options{Region: "us-east-1", Credentials: b.creds, BaseEndpoint: aws.String(versityStore.IAMEndpoint)},
	)
	user := &iam.CreateUserInput{UserName: aws.String(id), Path: aws.String(s3.IAMPath)}
	if _, err := root.CreateUser(ctx, user); err != nil {
		t.Fatal(err)
	}
	// The policy the driver wrote for objectData ReadWrite before issue 25.
	arn := "arn:aws:s3:::" + bucket
	old, err := json.Marshal(s3.Policy{Version: "2012-10-17", Statement: []s3.Statement{
		{Effect: "Allow", Action: []string{"s3:ListBucket", "s3:ListBucketMultipartUploads", "s3:ListBucketVersions"},
			Resource: []string{arn}},
		{Effect: "Allow", Action: []string{"s3:AbortMultipartUpload", "s3:DeleteObject", "s3:DeleteObjectVersion",
			"s3:GetObject", "s3:GetObjectAttributes", "s3:GetObjectVersion", "s3:GetObjectVersionAttributes",
			"s3:ListMultipartUploadParts", "s3:PutObject", "s3:PutObjectLegalHold", "s3:PutObjectRetention",
			"s3:RestoreObject"}, Resource: []string{arn + "/*"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.PutUserPolicy(ctx, &iam.PutUserPolicyInput{UserName: aws.String(id),
		PolicyName: aws.String("cosi-bucket-access"), PolicyDocument: aws.String(string(old))}); err != nil {
		t.Fatal(err)
	}
	a := grantAs(t, p, id, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}, bucket)
	defer revoke(t, p, a)
	key := randomName("k-")
	putObject(t, a.client, bucket, key)
	for _, op := range lockOps(types.ObjectLockRetentionModeCompliance) {
		expect(t, op.name, false, op.do(ctx, a.client, bucket, key))
	}
}
