package s3_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/pkg/driver"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

func apiCodeOf(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

func randomName(prefix string) string { return prefix + strings.ToLower(rand.Text()[:10]) }

// policyStatements decodes a bucket policy into its statements as generic JSON, so that two
// policies can be compared by meaning (key order and whitespace aside).
func policyStatements(t *testing.T, doc string) (map[string]any, []any) {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal([]byte(doc), &p); err != nil {
		t.Fatalf("decoding policy %s: %v", doc, err)
	}
	stmts, ok := p["Statement"].([]any)
	if !ok {
		stmts = []any{p["Statement"]}
	}
	return p, stmts
}

func bucketPolicy(t *testing.T, b *backend, bucket string) string {
	t.Helper()
	out, err := b.admin.GetBucketPolicy(t.Context(), &awss3.GetBucketPolicyInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatalf("reading the policy of %s: %v", bucket, err)
	}
	return aws.ToString(out.Policy)
}

func anonymousClient(endpoint string) *awss3.Client {
	return awss3.New(
		awss3.Options{BaseEndpoint: aws.String(endpoint), Region: "us-east-1", Credentials: aws.AnonymousCredentials{},
			UsePathStyle: true, RetryMaxAttempts: 1},
	)
}

// TestForeignPolicyStatementsKept imports a bucket whose policy an admin wrote, with a condition,
// a Deny with NotPrincipal and NotAction, NotResource and a policy Id, grants and revokes access
// to it, and checks that the admin's statements keep their meaning throughout: the IP-restricted
// public read stays restricted (an anonymous read from 127.0.0.1 stays denied), and after revoke
// the policy is the admin's again. (Issue 14, item 1.)
//
// Ceph RGW only: the iam back-end never touches bucket policies, and Versity refuses such a
// policy (no NotPrincipal, principals must be its accounts).
func TestForeignPolicyStatementsKept(t *testing.T) {
	t.Run("ceph-rgw", func(t *testing.T) {
		b := rgwBackend(t)
		ctx := t.Context()
		_, p := serve(t, b.newDriver(t, ""), logr.Discard())
		bucket := randomName("imported-")
		if _, err := b.admin.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.admin.PutObject(
			ctx,
			&awss3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("secret"), Body: strings.NewReader("x")},
		); err != nil {
			t.Fatal(err)
		}
		arn := "arn:aws:s3:::" + bucket
		original := `{"Version":"2012-10-17","Id":"admin-policy","Statement":[` +
			`{"Sid":"OfficeRead","Effect":"Allow","Principal":{"AWS":["*"]},"Action":["s3:GetObject"],` +
			`"Resource":["` + arn + `/*"],` +
			`"Condition":{"IpAddress":{"aws:SourceIp":["10.99.0.0/16"]}}},` +
			`{"Sid":"NoDeleteButAdmin","Effect":"Deny","NotPrincipal":{"AWS":["arn:aws:iam:::user/nobody-at-all"]},` +
			`"Action":["s3:DeleteBucket"],"Resource":["` + arn + `"]},` +
			`{"Sid":"OnlyReads","Effect":"Deny","Principal":{"AWS":["arn:aws:iam:::user/nobody-at-all"]},` +
			`"NotAction":["s3:GetObject"],"NotResource":["` + arn + `/public/*"]}]}`
		if _, err := b.admin.PutBucketPolicy(
			ctx,
			&awss3.PutBucketPolicyInput{Bucket: aws.String(bucket), Policy: aws.String(original)},
		); err != nil {
			t.Fatalf("the store refuses the admin's policy: %v", err)
		}
		stored := bucketPolicy(t, b, bucket)
		_, want := policyStatements(t, stored)

		expectAnonymousDenied := func(when string) {
			t.Helper()
			_, err := anonymousClient(
				b.s3Endpoint,
			).GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("secret")})
			if !denied(err) {
				t.Errorf("%s: an anonymous read from outside the admin's IP range: %v, want AccessDenied", when, err)
			}
		}
		expectAnonymousDenied("before any grant")

		if _, err := p.DriverGetBucket(ctx, &cosiproto.DriverGetBucketRequest{BucketId: bucket}); err != nil {
			t.Fatal(err)
		}
		ro := grant(t, p, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_ONLY}, bucket)
		rw := grant(
			t,
			p,
			&cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE, ObjectMetadata: cosiproto.AccessMode_READ_ONLY},
			bucket,
		)
		expect(t, "ReadOnly get", true, get(ro, bucket, "secret"))
		expect(t, "ReadWrite put", true, put(rw, bucket, "new"))
		expectAnonymousDenied("after two grants")

		top, got := policyStatements(t, bucketPolicy(t, b, bucket))
		if id, _ := top["Id"].(string); id != "admin-policy" {
			t.Errorf("policy Id after grants: %q, want admin-policy", id)
		}
		for _, w := range want {
			if !slices.ContainsFunc(got, func(g any) bool { return reflect.DeepEqual(g, w) }) {
				t.Errorf("the admin's statement %v is gone or changed after grants; policy now %v", w, got)
			}
		}

		revoke(t, p, ro)
		revoke(t, p, rw)
		expectAnonymousDenied("after revoke")
		_, got = policyStatements(t, bucketPolicy(t, b, bucket))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("the policy after revoking every access:\n%v\nwant the admin's:\n%v", got, want)
		}
	})
}

// forbiddenOp is one request a metadata-only access must not be able to make.
type forbiddenOp struct {
	name string
	do   func(ctx context.Context, c *awss3.Client, bucket, key string) error
}

// dataOps read object data, expose it (ACLs, policies), destroy it (delete, overwrite,
// lifecycle expiry, encryption with a foreign key) or lock it (Object Lock).
var dataOps = []forbiddenOp{
	{"GetObject", func(ctx context.Context, c *awss3.Client, bucket, key string) error {
		out, err := c.GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err == nil {
			out.Body.Close()
		}
		return err
	}},
	{"HeadObject", func(ctx context.Context, c *awss3.Client, bucket, key string) error {
		_, err := c.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		return err
	}},
	{"ListObjectsV2", func(ctx context.Context, c *awss3.Client, bucket, _ string) error {
		_, err := c.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: aws.String(bucket)})
		return err
	}},
	{"PutObject (overwrite)", func(ctx context.Context, c *awss3.Client, bucket, key string) error {
		_, err := c.PutObject(
			ctx,
			&awss3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader("overwritten")},
		)
		return err
	}},
	{"DeleteObject", func(ctx context.Context, c *awss3.Client, bucket, key string) error {
		_, err := c.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		return err
	}},
	{"PutObjectAcl public-read", func(ctx context.Context, c *awss3.Client, bucket, key string) error {
		_, err := c.PutObjectAcl(
			ctx,
			&awss3.PutObjectAclInput{Bucket: aws.String(bucket), Key: aws.String(key), ACL: types.ObjectCannedACLPublicRead},
		)
		return err
	}},
	{"PutBucketAcl public-read", func(ctx context.Context, c *awss3.Client, bucket, _ string) error {
		_, err := c.PutBucketAcl(
			ctx,
			&awss3.PutBucketAclInput{Bucket: aws.String(bucket), ACL: types.BucketCannedACLPublicRead},
		)
		return err
	}},
	{"PutBucketPolicy public read", func(ctx context.Context, c *awss3.Client, bucket, _ string) error {
		_, err := c.PutBucketPolicy(ctx, &awss3.PutBucketPolicyInput{Bucket: aws.String(bucket), Policy: aws.String(
			`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":["s3:GetObject"],` +
				`"Resource":["arn:aws:s3:::` + bucket + `/*"]}]}`,
		)})
		return err
	}},
	{"GetBucketPolicy (names other accesses)", func(ctx context.Context, c *awss3.Client, bucket, _ string) error {
		_, err := c.GetBucketPolicy(ctx, &awss3.GetBucketPolicyInput{Bucket: aws.String(bucket)})
		return err
	}},
	{
		"PutBucketLifecycleConfiguration expiring everything",
		func(ctx context.Context, c *awss3.Client, bucket, _ string) error {
			_, err := c.PutBucketLifecycleConfiguration(
				ctx,
				&awss3.PutBucketLifecycleConfigurationInput{
					Bucket: aws.String(bucket),
					LifecycleConfiguration: &types.BucketLifecycleConfiguration{
						Rules: []types.LifecycleRule{{ID: aws.String("expire-all"),
							Status: types.ExpirationStatusEnabled, Filter: &types.LifecycleRuleFilter{Prefix: aws.String("")},
							Expiration: &types.LifecycleExpiration{Days: aws.Int32(1)}}},
					},
				},
			)
			return err
		},
	},
	{"PutObjectLockConfiguration compliance default", func(ctx context.Context, c *awss3.Client, bucket, _ string) error {
		_, err := c.PutObjectLockConfiguration(ctx, &awss3.PutObjectLockConfigurationInput{Bucket: aws.String(bucket),
			ObjectLockConfiguration: &types.ObjectLockConfiguration{
				ObjectLockEnabled: types.ObjectLockEnabledEnabled,
				Rule: &types.ObjectLockRule{
					DefaultRetention: &types.DefaultRetention{Mode: types.ObjectLockRetentionModeCompliance, Days: aws.Int32(1)},
				},
			}})
		return err
	}},
	{"PutObjectRetention compliance", func(ctx context.Context, c *awss3.Client, bucket, key string) error {
		_, err := c.PutObjectRetention(ctx, &awss3.PutObjectRetentionInput{
			Bucket: aws.String(bucket),
			Key:    aws.String(key),
			Retention: &types.ObjectLockRetention{
				Mode:            types.ObjectLockRetentionModeCompliance,
				RetainUntilDate: aws.Time(time.Now().Add(time.Hour)),
			},
		})
		return err
	}},
	{"PutObjectLegalHold on", func(ctx context.Context, c *awss3.Client, bucket, key string) error {
		_, err := c.PutObjectLegalHold(ctx, &awss3.PutObjectLegalHoldInput{Bucket: aws.String(bucket), Key: aws.String(key),
			LegalHold: &types.ObjectLockLegalHold{Status: types.ObjectLockLegalHoldStatusOn}})
		return err
	}},
	{"PutBucketEncryption", func(ctx context.Context, c *awss3.Client, bucket, _ string) error {
		_, err := c.PutBucketEncryption(ctx, &awss3.PutBucketEncryptionInput{Bucket: aws.String(bucket),
			ServerSideEncryptionConfiguration: &types.ServerSideEncryptionConfiguration{Rules: []types.ServerSideEncryptionRule{
				{
					ApplyServerSideEncryptionByDefault: &types.ServerSideEncryptionByDefault{
						SSEAlgorithm:   types.ServerSideEncryptionAwsKms,
						KMSMasterKeyID: aws.String("arn:aws:kms:us-east-1:000000000000:key/someone-elses"),
					},
				},
			}}})
		return err
	}},
}

// TestMetadataModesCannotReachData grants each metadata mode alone on a bucket with Object Lock
// and checks with the store that the key can do what its mode says and cannot read, expose,
// destroy or lock object data. (Issue 14, item 2.)
func TestMetadataModesCannotReachData(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := t.Context()
		_, p := serve(t, b.newDriver(t, ""), logr.Discard())
		bucket := createBucket(t, p, map[string]string{s3.ParamObjectLock: "true", s3.ParamPurgeOnDelete: "true"})
		const key = "precious"
		if _, err := b.admin.PutObject(
			ctx,
			&awss3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader("data")},
		); err != nil {
			t.Fatal(err)
		}
		ro, wo, rw := cosiproto.AccessMode_READ_ONLY, cosiproto.AccessMode_WRITE_ONLY, cosiproto.AccessMode_READ_WRITE
		tagging := &types.Tagging{TagSet: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}}
		for _, tc := range []struct {
			name  string
			modes *cosiproto.AccessModes
			own   func(c *awss3.Client) error // what the mode is for, which must work
		}{
			{"objectMetadata ReadOnly", &cosiproto.AccessModes{ObjectMetadata: ro}, func(c *awss3.Client) error {
				_, err := c.GetObjectTagging(ctx, &awss3.GetObjectTaggingInput{Bucket: aws.String(bucket), Key: aws.String(key)})
				return err
			}},
			{"objectMetadata WriteOnly", &cosiproto.AccessModes{ObjectMetadata: wo}, func(c *awss3.Client) error {
				_, err := c.PutObjectTagging(ctx, &awss3.PutObjectTaggingInput{
					Bucket: aws.String(bucket), Key: aws.String(key), Tagging: tagging,
				})
				return err
			}},
			{"objectMetadata ReadWrite", &cosiproto.AccessModes{ObjectMetadata: rw}, func(c *awss3.Client) error {
				_, err := c.PutObjectTagging(ctx, &awss3.PutObjectTaggingInput{
					Bucket: aws.String(bucket), Key: aws.String(key), Tagging: tagging,
				})
				return err
			}},
			{"bucketMetadata ReadOnly", &cosiproto.AccessModes{BucketMetadata: ro}, func(c *awss3.Client) error {
				_, err := c.GetBucketVersioning(ctx, &awss3.GetBucketVersioningInput{Bucket: aws.String(bucket)})
				return err
			}},
			{"bucketMetadata WriteOnly", &cosiproto.AccessModes{BucketMetadata: wo}, func(c *awss3.Client) error {
				tags, err := b.admin.GetBucketTagging(ctx, &awss3.GetBucketTaggingInput{Bucket: aws.String(bucket)})
				if err != nil {
					t.Fatal(err)
				}
				_, err = c.PutBucketTagging(ctx, &awss3.PutBucketTaggingInput{
					Bucket: aws.String(bucket), Tagging: &types.Tagging{TagSet: tags.TagSet},
				})
				return err
			}},
			{"bucketMetadata ReadWrite", &cosiproto.AccessModes{BucketMetadata: rw}, func(c *awss3.Client) error {
				_, err := c.GetBucketTagging(ctx, &awss3.GetBucketTaggingInput{Bucket: aws.String(bucket)})
				return err
			}},
			{
				"all metadata ReadWrite",
				&cosiproto.AccessModes{ObjectMetadata: rw, BucketMetadata: rw},
				func(c *awss3.Client) error {
					_, err := c.GetObjectTagging(ctx, &awss3.GetObjectTaggingInput{Bucket: aws.String(bucket), Key: aws.String(key)})
					return err
				},
			},
		} {
			t.Run(tc.name, func(t *testing.T) {
				a := grant(t, p, tc.modes, bucket)
				defer revoke(t, p, a)
				expect(t, tc.name+": what the mode is for", true, tc.own(a.client))
				for _, op := range dataOps {
					err := op.do(ctx, a.client, bucket, key)
					if apiCodeOf(err) == "NotImplemented" {
						continue // the store has no such operation (Versity: ACLs, lifecycle, encryption): nothing to reach
					}
					expect(t, tc.name+": "+op.name, false, err)
				}
			})
		}
		// The data is as the admin left it: readable, unlocked, not public.
		out, err := b.admin.GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatalf("the admin reading the object afterwards: %v", err)
		}
		out.Body.Close()
		_, err = anonymousClient(
			b.s3Endpoint,
		).GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if !denied(err) {
			t.Errorf("anonymous read afterwards: %v, want AccessDenied", err)
		}
	})
}

// longBuckets has the admin create n buckets with 63-character names, for imports.
func longBuckets(t *testing.T, b *backend, n int) []string {
	t.Helper()
	var names []string
	for range n {
		name := randomName("long-")
		name += strings.Repeat("x", 63-len(name))
		if _, err := b.admin.CreateBucket(t.Context(), &awss3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	return names
}

// TestGrantOverPolicySizeLimit grants full access to more buckets than an inline IAM policy can
// hold (AWS: 2,048 characters) and expects a final error that says so, with nothing created;
// and as many buckets as fit are granted. (Issue 14, item 3.)
func TestGrantOverPolicySizeLimit(t *testing.T) {
	b := versityBackend(t)
	ctx := t.Context()
	_, p := serve(t, b.newDriver(t, ""), logr.Discard())
	all := &cosiproto.AccessModes{
		ObjectData:     cosiproto.AccessMode_READ_WRITE,
		ObjectMetadata: cosiproto.AccessMode_READ_WRITE,
		BucketMetadata: cosiproto.AccessMode_READ_WRITE,
	}
	buckets := longBuckets(t, b, 12)

	id := randomName("ba-")
	req := &cosiproto.DriverGrantBucketAccessRequest{
		AccountId:          id,
		Protocol:           cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
	}
	for _, bk := range buckets {
		req.Buckets = append(req.Buckets, &cosiproto.AccessedBucket{BucketId: bk, AccessModes: all})
	}
	_, err := p.DriverGrantBucketAccess(ctx, req)
	if code := status.Code(err); code != codes.OutOfRange || !strings.Contains(status.Convert(err).Message(), "2048") {
		t.Errorf(
			"granting full access to %d buckets with 63-character names: %v, want OutOfRange naming the 2048-character limit",
			len(buckets),
			err,
		)
	}
	users, err := b.newAccount().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(users, id) {
		t.Errorf("the refused grant created IAM user %s", id)
	}

	a := grant(t, p, all, buckets[:5]...)
	for _, bk := range buckets[:5] {
		expect(t, "put into one of five buckets", true, put(a, bk, "k"))
		if _, err := b.admin.DeleteObject(
			ctx,
			&awss3.DeleteObjectInput{Bucket: aws.String(bk), Key: aws.String("k")},
		); err != nil {
			t.Fatal(err)
		}
	}
	revoke(t, p, a)
}

// TestBucketIDsValidated checks that bucket IDs that are no S3 bucket name (wildcards, policy
// variables, paths) are refused with InvalidArgument wherever they enter, before they reach an
// ARN, and that a bucket the driver's identity may not see (403) is never imported or granted.
// (Issue 14, item 4.)
func TestBucketIDsValidated(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := t.Context()
		_, p := serve(t, b.newDriver(t, ""), logr.Discard())
		existing := createBucket(t, p, nil)
		rw := &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}
		for _, bad := range []string{
			"*", "prod-*", "b?cket", "${aws:username}", existing + "/*", "a", "UPPER", strings.Repeat("a", 64),
			"-lead", "a..b", "192.168.1.1", "192.168.001.001",
		} {
			_, err := p.DriverGetBucket(ctx, &cosiproto.DriverGetBucketRequest{BucketId: bad})
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("DriverGetBucket(%q): %v, want InvalidArgument", bad, err)
			}
			_, err = p.DriverGrantBucketAccess(
				ctx,
				&cosiproto.DriverGrantBucketAccessRequest{
					AccountId:          randomName("ba-"),
					Protocol:           cosiproto.ObjectProtocol_S3,
					AuthenticationType: cosiproto.AuthenticationType_KEY,
					Buckets: []*cosiproto.AccessedBucket{
						{BucketId: existing, AccessModes: rw},
						{BucketId: bad, AccessModes: rw},
					},
				},
			)
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("DriverGrantBucketAccess with bucket %q: %v, want InvalidArgument", bad, err)
			}
			_, err = p.DriverDeleteBucket(ctx, &cosiproto.DriverDeleteBucketRequest{BucketId: bad})
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("DriverDeleteBucket(%q): %v, want InvalidArgument", bad, err)
			}
		}
		if exists, err := b.bucketExists(ctx, existing); !exists || err != nil {
			t.Errorf("bucket %s after the refused calls: exists=%v %v", existing, exists, err)
		}
		// A revoke naming such an ID cannot fail for good: it skips it and removes the rest.
		a := grant(t, p, rw, existing)
		_, err := p.DriverRevokeBucketAccess(
			ctx,
			&cosiproto.DriverRevokeBucketAccessRequest{
				AccountId:          a.id,
				Protocol:           cosiproto.ObjectProtocol_S3,
				AuthenticationType: cosiproto.AuthenticationType_KEY,
				Buckets:            []*cosiproto.DriverRevokeBucketAccessRequest_Bucket{{BucketId: existing}, {BucketId: "*"}},
			},
		)
		if err != nil {
			t.Errorf("revoking with a bucket ID \"*\" among the buckets: %v", err)
		}
		expect(t, "put after a revoke naming \"*\"", false, put(a, existing, "k"))

		if b.name != "ceph-rgw" {
			return // Versity's root sees every bucket: TestLimitedAdmin covers it there
		}
		// A bucket of another user that the driver's identity may not see.
		foreign, cleanup := rgwForeignBucket(t, b)
		defer cleanup()
		_, err = p.DriverGetBucket(ctx, &cosiproto.DriverGetBucketRequest{BucketId: foreign})
		if err == nil {
			t.Errorf("DriverGetBucket imported %s, which the driver's identity may not see", foreign)
		}
		_, err = p.DriverGrantBucketAccess(
			ctx,
			&cosiproto.DriverGrantBucketAccessRequest{
				AccountId:          randomName("ba-"),
				Protocol:           cosiproto.ObjectProtocol_S3,
				AuthenticationType: cosiproto.AuthenticationType_KEY,
				Buckets:            []*cosiproto.AccessedBucket{{BucketId: foreign, AccessModes: rw}},
			},
		)
		if err == nil {
			t.Errorf("DriverGrantBucketAccess granted %s, which the driver's identity may not see", foreign)
		}
	})
}

// rgwForeignBucket creates a bucket owned by another RGW user, which the driver's admin may not
// see (HeadBucket answers 403), and returns a function that deletes it.
func rgwForeignBucket(t *testing.T, b *backend) (string, func()) {
	t.Helper()
	ctx := t.Context()
	uid := randomName("other")
	out, err := exec.Command("radosgw-admin", "-c", filepath.Join(rgw.dir, "ceph.conf"), "-n", "client.admin",
		"user", "create", "--uid", uid, "--display-name", uid).Output()
	if err != nil {
		t.Fatalf("radosgw-admin user create: %v", err)
	}
	var u struct {
		Keys []struct {
			AccessKey string `json:"access_key"`
			SecretKey string `json:"secret_key"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(out, &u); err != nil || len(u.Keys) == 0 {
		t.Fatalf("radosgw-admin user create: %v %s", err, out)
	}
	owner := s3.NewS3Client(
		b.s3Endpoint,
		"us-east-1",
		credentials.NewStaticCredentialsProvider(u.Keys[0].AccessKey, u.Keys[0].SecretKey, ""),
		nil,
	)
	name := randomName("other-")
	if _, err := owner.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.admin.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: aws.String(name)}); err == nil {
		t.Fatalf("the admin can see %s; the test needs a bucket it cannot see", name)
	}
	return name, func() {
		_, _ = owner.DeleteBucket(context.Background(), &awss3.DeleteBucketInput{Bucket: aws.String(name)})
	}
}

// limitedAdmin creates, with Versity's root, an IAM user that the driver can use as its admin
// identity: allowed policy (a JSON policy document), with one access key.
func limitedAdmin(t *testing.T, policy string) (name string, iamc *iam.Client, key s3.Key) {
	t.Helper()
	b := versityBackend(t)
	ctx := t.Context()
	root := iam.New(
		iam.Options{Region: "us-east-1", Credentials: b.creds, BaseEndpoint: aws.String(versityStore.IAMEndpoint)},
	)
	name = randomName("driver-admin-")
	if _, err := root.CreateUser(ctx, &iam.CreateUserInput{UserName: aws.String(name)}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.PutUserPolicy(
		ctx,
		&iam.PutUserPolicyInput{
			UserName:       aws.String(name),
			PolicyName:     aws.String("admin"),
			PolicyDocument: aws.String(policy),
		},
	); err != nil {
		t.Fatal(err)
	}
	out, err := root.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	return name, root, s3.Key{
		AccessKeyID:     aws.ToString(out.AccessKey.AccessKeyId),
		SecretAccessKey: aws.ToString(out.AccessKey.SecretAccessKey),
	}
}

const limitedAdminPolicy = `{"Version":"2012-10-17","Statement":[` +
	`{"Effect":"Allow","Action":["iam:*"],"Resource":["*"]},` +
	`{"Effect":"Allow","Action":["s3:*"],"Resource":["arn:aws:s3:::lim-*","arn:aws:s3:::lim-*/*"]}]}`

func writeCredentials(t *testing.T, path string, k s3.Key) {
	t.Helper()
	// As Kubernetes updates a mounted Secret: write a new file, then swap it in.
	tmp := path + ".new"
	if err := os.WriteFile(
		tmp,
		[]byte("AWS_ACCESS_KEY_ID="+k.AccessKeyID+"\nAWS_SECRET_ACCESS_KEY="+k.SecretAccessKey+"\n"),
		0o600,
	); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// limitedDriver serves a driver on Versity whose admin identity is the limited user with key k,
// read from a credentials file, and returns the file's path.
func limitedDriver(t *testing.T, k s3.Key, log logr.Logger) (string, cosiproto.ProvisionerClient) {
	t.Helper()
	b := versityBackend(t)
	file := filepath.Join(t.TempDir(), "admin.env")
	writeCredentials(t, file, k)
	creds, err := s3.LoadCredentials(file, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	d, err := s3.New(
		s3.Config{
			Endpoint:         b.s3Endpoint,
			Credentials:      creds,
			Accounts:         s3.NewIAMAccounts(versityStore.IAMEndpoint, creds, nil),
			BucketNamePrefix: "lim-",
			Logger:           log,
		},
	)
	if err != nil {
		t.Fatal(err)
	}
	_, p := serve(t, d, log)
	return file, p
}

// TestLimitedAdmin runs the driver on Versity as a limited IAM user instead of the root: a bucket
// of another owner it may not see is not imported (item 4), the admin's rotated key is picked up
// from the credentials file while the driver runs and its auth failures meanwhile are retryable
// (item 5), and the store's AccessDenied, which names the admin's ARN, does not reach the gRPC
// message but does reach the driver log (item 7).
func TestLimitedAdmin(t *testing.T) {
	b := versityBackend(t)
	ctx := t.Context()

	t.Run("a bucket the driver's identity may not see is not imported", func(t *testing.T) {
		_, _, k := limitedAdmin(t, limitedAdminPolicy)
		_, p := limitedDriver(t, k, logr.Discard())
		mine := createBucket(t, p, nil)
		if _, err := p.DriverGetBucket(ctx, &cosiproto.DriverGetBucketRequest{BucketId: mine}); err != nil {
			t.Fatalf("DriverGetBucket of the limited admin's own bucket: %v", err)
		}
		other := randomName("lim-root-")
		if _, err := b.admin.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(other)}); err != nil {
			t.Fatal(err)
		}
		// The root's bucket matches lim-*, so the identity policy allows it: make the store
		// refuse it with a bucket policy that denies the limited admin.
		deny := `{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Principal":"*","Action":["s3:*"],` +
			`"Resource":["arn:aws:s3:::` + other + `","arn:aws:s3:::` + other + `/*"]}]}`
		if _, err := b.admin.PutBucketPolicy(
			ctx,
			&awss3.PutBucketPolicyInput{Bucket: aws.String(other), Policy: aws.String(deny)},
		); err != nil {
			t.Fatal(err)
		}
		_, err := p.DriverGetBucket(ctx, &cosiproto.DriverGetBucketRequest{BucketId: other})
		if err == nil {
			t.Errorf("DriverGetBucket imported %s, which the driver's identity may not see", other)
		}
		_, err = p.DriverGrantBucketAccess(
			ctx,
			&cosiproto.DriverGrantBucketAccessRequest{
				AccountId:          randomName("ba-"),
				Protocol:           cosiproto.ObjectProtocol_S3,
				AuthenticationType: cosiproto.AuthenticationType_KEY,
				Buckets: []*cosiproto.AccessedBucket{
					{BucketId: other, AccessModes: &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}},
				},
			},
		)
		if err == nil {
			t.Errorf("DriverGrantBucketAccess granted %s, which the driver's identity may not see", other)
		}
	})

	t.Run("the admin key is rotated while the driver runs", func(t *testing.T) {
		name, root, k1 := limitedAdmin(t, limitedAdminPolicy)
		file, p := limitedDriver(t, k1, logr.Discard())
		before := createBucket(t, p, nil)
		grant(t, p, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}, before)

		out, err := root.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: aws.String(name)})
		if err != nil {
			t.Fatal(err)
		}
		k2 := s3.Key{
			AccessKeyID:     aws.ToString(out.AccessKey.AccessKeyId),
			SecretAccessKey: aws.ToString(out.AccessKey.SecretAccessKey),
		}
		if _, err := root.DeleteAccessKey(
			ctx,
			&iam.DeleteAccessKeyInput{UserName: aws.String(name), AccessKeyId: aws.String(k1.AccessKeyID)},
		); err != nil {
			t.Fatal(err)
		}
		// The old key is dead and the file not yet updated: a failure the admin will fix, so
		// retryable, and saying so without the key.
		bucketName := s3.BucketName("lim-", randomName("bc-"))
		_, err = p.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: bucketName})
		if status.Code(err) != codes.Unavailable {
			t.Errorf("a call with the deleted admin key: %v, want Unavailable (retryable)", err)
		}
		if msg := status.Convert(err).
			Message(); strings.Contains(msg, k1.AccessKeyID) ||
			strings.Contains(msg, k1.SecretAccessKey) {
			t.Errorf("the error names the admin key: %s", msg)
		}

		writeCredentials(t, file, k2)
		deadline := time.Now().Add(15 * time.Second)
		for {
			_, err = p.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: bucketName})
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("after the credentials file got the new key: %v", err)
		}
		a := grant(t, p, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}, bucketName)
		expect(t, "put with an access granted after the rotation", true, put(a, bucketName, "k"))
		revoke(t, p, a)
	})

	t.Run("the store's AccessDenied does not name the admin in the gRPC message", func(t *testing.T) {
		// Allowed to manage its buckets, not IAM users: every grant is refused by the store with
		// a message naming the admin's ARN.
		name, _, k := limitedAdmin(t, `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:*"],`+
			`"Resource":["arn:aws:s3:::lim-*","arn:aws:s3:::lim-*/*"]}]}`)
		var logs logBuffer
		_, p := limitedDriver(t, k, logs.logger())
		bucket := createBucket(t, p, nil)
		_, err := p.DriverGrantBucketAccess(
			ctx,
			&cosiproto.DriverGrantBucketAccessRequest{
				AccountId:          randomName("ba-"),
				Protocol:           cosiproto.ObjectProtocol_S3,
				AuthenticationType: cosiproto.AuthenticationType_KEY,
				Buckets: []*cosiproto.AccessedBucket{
					{BucketId: bucket, AccessModes: &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}},
				},
			},
		)
		if err == nil {
			t.Fatal("a grant by an admin without IAM rights succeeded")
		}
		msg := status.Convert(err).Message()
		for _, leak := range []string{name, "arn:", k.AccessKeyID, "RequestID", "api error"} {
			if strings.Contains(msg, leak) {
				t.Errorf("the gRPC message %q contains %q", msg, leak)
			}
		}
		if status.Code(err) != codes.Unavailable {
			t.Errorf("the admin denied by the store: %v, want Unavailable (an admin can fix it)", err)
		}
		logged, _ := logs.bytes()
		if !strings.Contains(string(logged), name) {
			t.Errorf("the driver log does not have the store's error naming the admin:\n%s", logged)
		}
	})
}

// sidPrefix is the prefix of the statement IDs the driver gives account id's statements in RGW
// bucket policies, as drivers/s3/rgw.go computes it.
func sidPrefix(id string) string {
	var b strings.Builder
	b.WriteString("Cosi")
	for _, r := range id {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	sum := sha256.Sum256([]byte(id))
	return b.String() + hex.EncodeToString(sum[:4])
}

// TestRGWStatementsOfOthersKept grants two accounts on one bucket whose statement IDs share a
// prefix (the second's ID is the first's followed by the first's hash, so its statement IDs
// start with the first's Sid prefix), next to an admin's statement whose Sid starts with the
// first's prefix, then grants the first again and revokes it. The driver owns exactly the
// statements it wrote: the second account's access and the admin's statement survive.
// (Issue 14, item 1: the driver edits only its own statements, by Sid.)
func TestRGWStatementsOfOthersKept(t *testing.T) {
	b := rgwBackend(t)
	ctx := t.Context()
	_, p := serve(t, b.newDriver(t, ""), logr.Discard())
	bucket := createBucket(t, p, map[string]string{s3.ParamPurgeOnDelete: "true"})
	first := randomName("ba-")
	second := first + strings.TrimPrefix(sidPrefix(first), "Cosi"+strings.ReplaceAll(first, "-", ""))
	if !strings.HasPrefix(sidPrefix(second), sidPrefix(first)) {
		t.Fatalf("the test's IDs do not collide: %s, %s", sidPrefix(first), sidPrefix(second))
	}
	adminSid := sidPrefix(first) + "AdminKeep"
	admin := `{"Version":"2012-10-17","Statement":[{"Sid":"` + adminSid + `","Effect":"Deny",` +
		`"Principal":{"AWS":["arn:aws:iam:::user/nobody-at-all"]},` +
		`"Action":["s3:DeleteBucket"],"Resource":["arn:aws:s3:::` + bucket + `"]}]}`
	if _, err := b.admin.PutBucketPolicy(
		ctx,
		&awss3.PutBucketPolicyInput{Bucket: aws.String(bucket), Policy: aws.String(admin)},
	); err != nil {
		t.Fatal(err)
	}
	adminKept := func(when string) {
		t.Helper()
		if !strings.Contains(bucketPolicy(t, b, bucket), adminSid) {
			t.Errorf("%s: the admin's statement %s is gone: %s", when, adminSid, bucketPolicy(t, b, bucket))
		}
	}
	rw := &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}
	a1 := grantAs(t, p, first, rw, bucket)
	a2 := grantAs(t, p, second, rw, bucket)
	expect(t, "put by the second account", true, put(a2, bucket, "k2"))

	grantAs(t, p, first, rw, bucket) // a repeated grant, as after a sidecar restart
	expect(t, "put by the second account after the first was granted again", true, put(a2, bucket, "k2"))
	adminKept("after the first was granted again")

	revoke(t, p, a1)
	expect(t, "put by the second account after the first was revoked", true, put(a2, bucket, "k2"))
	adminKept("after the first was revoked")
	revoke(t, p, a2)
	adminKept("after both were revoked")
}

// TestForeignPolicyShapesKept imports a bucket whose admin policy uses the grammar's other
// shapes: Statement as a single object rather than a list, Principal "*", Action and Resource as
// strings, no Sid, a condition on a number with more digits than a float64 holds, and values
// with characters JSON encoders like to escape (< > &). After a grant and a revoke the admin's
// statement must mean exactly what it meant (numbers compared as written). (Issue 14, item 1.)
func TestForeignPolicyShapesKept(t *testing.T) {
	b := rgwBackend(t)
	ctx := t.Context()
	_, p := serve(t, b.newDriver(t, ""), logr.Discard())
	bucket := randomName("imported-")
	if _, err := b.admin.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
	original := `{"Version":"2012-10-17","Statement":{"Effect":"Allow","Principal":"*","Action":"s3:ListBucket",` +
		`"Resource":"arn:aws:s3:::` + bucket + `","Condition":{"StringLike":{"s3:prefix":["a<b>&c/*"]},` +
		`"NumericLessThanEquals":{"s3:max-keys":"10.000000000000000000001"}}}}`
	if _, err := b.admin.PutBucketPolicy(
		ctx,
		&awss3.PutBucketPolicyInput{Bucket: aws.String(bucket), Policy: aws.String(original)},
	); err != nil {
		t.Fatalf("the store refuses the admin's policy: %v", err)
	}
	exact := func(doc string) []any {
		t.Helper()
		d := json.NewDecoder(strings.NewReader(doc))
		d.UseNumber()
		var p map[string]any
		if err := d.Decode(&p); err != nil {
			t.Fatalf("decoding %s: %v", doc, err)
		}
		if s, ok := p["Statement"].([]any); ok {
			return s
		}
		return []any{p["Statement"]}
	}
	want := exact(bucketPolicy(t, b, bucket))
	if _, err := p.DriverGetBucket(ctx, &cosiproto.DriverGetBucketRequest{BucketId: bucket}); err != nil {
		t.Fatal(err)
	}
	a := grant(t, p, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_ONLY}, bucket)
	expect(t, "list by the granted access", true, list(a, bucket))
	got := exact(bucketPolicy(t, b, bucket))
	if !slices.ContainsFunc(got, func(g any) bool { return reflect.DeepEqual(g, want[0]) }) {
		t.Errorf("after the grant, the admin's statement\n%v\nis not in\n%v", want[0], got)
	}
	revoke(t, p, a)
	if got := exact(bucketPolicy(t, b, bucket)); !reflect.DeepEqual(got, want) {
		t.Errorf("after the revoke:\n%v\nwant\n%v", got, want)
	}
}

// TestRGWRevokeCutsAccessFirst revokes an access to two buckets while the driver cannot edit the
// policy of one of them (its admin denied the driver's identity s3:GetBucketPolicy there). The
// revoke cannot finish and is retried, but the key must stop working at once, on every bucket:
// a revoke that waits for every policy edit before deleting the user leaves a revoked key working
// for as long as the policy stays out of reach.
func TestRGWRevokeCutsAccessFirst(t *testing.T) {
	b := rgwBackend(t)
	ctx := t.Context()
	_, p := serve(t, b.newDriver(t, ""), logr.Discard())
	open := createBucket(t, p, map[string]string{s3.ParamPurgeOnDelete: "true"})
	locked := createBucket(t, p, map[string]string{s3.ParamPurgeOnDelete: "true"})
	a := grant(t, p, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}, open, locked)
	expect(t, "put before the revoke", true, put(a, open, "k"))

	doc := bucketPolicy(t, b, locked)
	top, stmts := policyStatements(t, doc)
	top["Statement"] = append(stmts, map[string]any{"Sid": "LockOutTheDriver", "Effect": "Deny",
		"Principal": map[string]any{"AWS": []any{"arn:aws:iam:::user/cosi-admin"}}, "Action": []any{"s3:GetBucketPolicy"},
		"Resource": []any{"arn:aws:s3:::" + locked}})
	lockedDoc, _ := json.Marshal(top)
	if _, err := b.admin.PutBucketPolicy(
		ctx,
		&awss3.PutBucketPolicyInput{Bucket: aws.String(locked), Policy: aws.String(string(lockedDoc))},
	); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = b.admin.DeleteBucketPolicy(context.Background(), &awss3.DeleteBucketPolicyInput{Bucket: aws.String(locked)})
	}()
	if _, err := b.admin.GetBucketPolicy(ctx, &awss3.GetBucketPolicyInput{Bucket: aws.String(locked)}); err == nil {
		t.Skip("Ceph RGW lets the bucket owner read a policy that denies it that; no way here to keep the driver out")
	}

	req := &cosiproto.DriverRevokeBucketAccessRequest{
		AccountId:          a.id,
		Protocol:           cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
		Buckets:            []*cosiproto.DriverRevokeBucketAccessRequest_Bucket{{BucketId: locked}, {BucketId: open}},
	}
	_, err := p.DriverRevokeBucketAccess(ctx, req)
	if err != nil && !driver.Retryable(err) {
		t.Errorf("a revoke that cannot edit one policy: %v, want success or a retryable error", err)
	}
	expect(t, "put with the revoked key while one policy is out of reach", false, put(a, open, "k2"))
	expect(t, "get with the revoked key while one policy is out of reach", false, get(a, open, "k"))

	// Once the admin lets the driver in again, the retried revoke finishes the policies.
	if _, err := b.admin.DeleteBucketPolicy(ctx, &awss3.DeleteBucketPolicyInput{Bucket: aws.String(locked)}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DriverRevokeBucketAccess(ctx, req); err != nil {
		t.Fatalf("the revoke retried: %v", err)
	}
	if _, err := b.admin.GetBucketPolicy(
		ctx,
		&awss3.GetBucketPolicyInput{Bucket: aws.String(open)},
	); apiCodeOf(
		err,
	) != "NoSuchBucketPolicy" {
		t.Errorf("the policy of %s after the revoke: %v, want none (the access's statements removed)", open, err)
	}
}

// TestRGWConcurrentGrantsKeepEveryStatement grants and revokes accesses to one bucket at once,
// as the sidecar does for several BucketAccesses of one claim: every bucket-policy edit is a
// read-modify-write, and none may lose another's statements.
func TestRGWConcurrentGrantsKeepEveryStatement(t *testing.T) {
	b := rgwBackend(t)
	_, p := serve(t, b.newDriver(t, ""), logr.Discard())
	bucket := createBucket(t, p, map[string]string{s3.ParamPurgeOnDelete: "true"})
	rw := &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}
	first := make([]*access, 4)
	for i := range first {
		first[i] = grant(t, p, rw, bucket)
	}
	// The calls run in goroutines, which must not call t.Fatal: they report their errors.
	second := make([]*cosiproto.DriverGrantBucketAccessResponse, 4)
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			var err error
			if i < 4 {
				second[i], err = p.DriverGrantBucketAccess(
					t.Context(),
					&cosiproto.DriverGrantBucketAccessRequest{AccountId: randomName("ba-"),
						Protocol: cosiproto.ObjectProtocol_S3, AuthenticationType: cosiproto.AuthenticationType_KEY,
						Buckets: []*cosiproto.AccessedBucket{{BucketId: bucket, AccessModes: rw}}},
				)
			} else {
				_, err = p.DriverRevokeBucketAccess(
					t.Context(),
					&cosiproto.DriverRevokeBucketAccessRequest{AccountId: first[i-4].id,
						Protocol: cosiproto.ObjectProtocol_S3, AuthenticationType: cosiproto.AuthenticationType_KEY,
						Buckets: []*cosiproto.DriverRevokeBucketAccessRequest_Bucket{{BucketId: bucket}}},
				)
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Errorf("a concurrent grant or revoke: %v", err)
		}
	}
	for i, resp := range second {
		if resp != nil {
			a := &access{client: userClient(resp.GetCredentials(), resp.GetBuckets()[0].GetBucketInfo())}
			expect(t, fmt.Sprintf("put by access %d granted concurrently", i), true, put(a, bucket, "k"))
		}
	}
	for i, a := range first {
		expect(t, fmt.Sprintf("put by access %d revoked concurrently", i), false, put(a, bucket, "k"))
	}
	doc := bucketPolicy(t, b, bucket)
	for i, a := range first {
		if strings.Contains(doc, "user/"+a.id+`"`) {
			t.Errorf("the policy still names access %d, revoked concurrently: %s", i, doc)
		}
	}
	_, stmts := policyStatements(t, doc)
	if perAccess := len(stmts) / len(second); len(stmts) != perAccess*len(second) || perAccess < 2 {
		t.Errorf(
			"the policy has %d statements for %d accesses with the same grant, want the same number for each",
			len(stmts),
			len(second),
		)
	}
}

// TestObjectDataWriteCannotShare grants objectData ReadWrite and has the workload upload objects
// with ACLs in the request headers (a canned public-read, grants to all users): the key may
// write data, not decide who else reads it. No such object may be readable anonymously
// afterwards; plain and private uploads keep working. (Ceph RGW checks only s3:PutObject for
// these uploads, not s3:PutObjectAcl as AWS does.) CopyObject and CreateMultipartUpload are
// TestObjectDataWriteCannotShareByCopyOrMultipart.
func TestObjectDataWriteCannotShare(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := t.Context()
		_, p := serve(t, b.newDriver(t, ""), logr.Discard())
		bucket := createBucket(t, p, map[string]string{s3.ParamPurgeOnDelete: "true"})
		a := grant(t, p, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}, bucket)
		body := func() *strings.Reader { return strings.NewReader("data") }
		_, err := a.client.PutObject(
			ctx,
			&awss3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("plain"), Body: body()},
		)
		expect(t, "a plain upload", true, err)
		_, err = a.client.PutObject(
			ctx,
			&awss3.PutObjectInput{
				Bucket: aws.String(bucket),
				Key:    aws.String("private"),
				Body:   body(),
				ACL:    types.ObjectCannedACLPrivate,
			},
		)
		expect(t, "an upload with ACL private", true, err)

		allUsers := aws.String(`uri="http://acs.amazonaws.com/groups/global/AllUsers"`)
		for key, upload := range map[string]func() error{
			"canned-public-read": func() error {
				_, err := a.client.PutObject(ctx, &awss3.PutObjectInput{
					Bucket: aws.String(bucket),
					Key:    aws.String("canned-public-read"),
					Body:   body(),
					ACL:    types.ObjectCannedACLPublicRead,
				})
				return err
			},
			"grant-read-all-users": func() error {
				_, err := a.client.PutObject(ctx, &awss3.PutObjectInput{
					Bucket:    aws.String(bucket),
					Key:       aws.String("grant-read-all-users"),
					Body:      body(),
					GrantRead: allUsers,
				})
				return err
			},
			"grant-full-control-all-users": func() error {
				_, err := a.client.PutObject(ctx, &awss3.PutObjectInput{
					Bucket:           aws.String(bucket),
					Key:              aws.String("grant-full-control-all-users"),
					Body:             body(),
					GrantFullControl: allUsers,
				})
				return err
			},
		} {
			if err := upload(); err != nil && !denied(err) && apiCodeOf(err) != "NotImplemented" {
				t.Errorf("upload %s: %v, want success or AccessDenied", key, err)
			}
			_, err := anonymousClient(
				b.s3Endpoint,
			).GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
			if !denied(err) && apiCodeOf(err) != "NoSuchKey" {
				t.Errorf(
					"an anonymous read of %s, uploaded by the workload with an ACL: %v, want AccessDenied (or no such object)",
					key,
					err,
				)
			}
		}
	})
}

// TestObjectDataWriteCannotShareByCopyOrMultipart is TestObjectDataWriteCannotShare for the two
// other requests that create an object with an ACL from headers: CopyObject (to a new key and
// onto the source itself) and CreateMultipartUpload (then UploadPart and
// CompleteMultipartUpload). The workload has objectData ReadWrite; no object it creates that way
// may be readable anonymously afterwards, whether the store refuses the request or ignores the
// ACL. Plain copies and multipart uploads keep working.
//
// On Ceph RGW 16 the store does not evaluate the conditions of the driver's Deny statements for
// these two requests, so both create public objects; what keeps them private is IgnorePublicAcls,
// which the driver sets on the buckets it creates. Not covered: a grant to a named RGW user
// (x-amz-grant-read: id="...") on these requests, which IgnorePublicAcls does not concern (see
// docs/drivers/s3.md).
func TestObjectDataWriteCannotShareByCopyOrMultipart(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := t.Context()
		_, p := serve(t, b.newDriver(t, ""), logr.Discard())
		bucket := createBucket(t, p, map[string]string{s3.ParamPurgeOnDelete: "true"})
		a := grant(t, p, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}, bucket)
		allUsers := aws.String(`uri="http://acs.amazonaws.com/groups/global/AllUsers"`)

		put := func(key string) {
			t.Helper()
			_, err := a.client.PutObject(
				ctx,
				&awss3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader("data")},
			)
			expect(t, "a plain upload of "+key, true, err)
		}
		copyObject := func(in *awss3.CopyObjectInput) error {
			in.Bucket = aws.String(bucket)
			if in.CopySource == nil {
				in.CopySource = aws.String(bucket + "/source")
			}
			_, err := a.client.CopyObject(ctx, in)
			return err
		}
		multipart := func(in *awss3.CreateMultipartUploadInput) error {
			in.Bucket = aws.String(bucket)
			up, err := a.client.CreateMultipartUpload(ctx, in)
			if err != nil {
				return err
			}
			part, err := a.client.UploadPart(
				ctx,
				&awss3.UploadPartInput{Bucket: aws.String(bucket), Key: in.Key, UploadId: up.UploadId,
					PartNumber: aws.Int32(1), Body: strings.NewReader("data")},
			)
			if err != nil {
				return fmt.Errorf("upload part: %w", err)
			}
			complete := &awss3.CompleteMultipartUploadInput{
				Bucket:   aws.String(bucket),
				Key:      in.Key,
				UploadId: up.UploadId,
				MultipartUpload: &types.CompletedMultipartUpload{
					Parts: []types.CompletedPart{{ETag: part.ETag, PartNumber: aws.Int32(1)}},
				},
			}
			// Ceph RGW answers 200 at once and sends its answer's body when the upload is complete;
			// a connection lost meanwhile (seen once under CI's load: "use of closed network
			// connection" reading the 200) says nothing of the outcome. The completion is asked
			// again (the same upload ID), and NoSuchUpload then means the first one completed it:
			// the anonymous read below checks what it created either way.
			_, err = a.client.CompleteMultipartUpload(ctx, complete)
			for attempt := 1; err != nil && apiCodeOf(err) == "" && !denied(err) && attempt < 3; attempt++ {
				t.Logf("%s: complete: %v; asking again", *in.Key, err)
				if _, err = a.client.CompleteMultipartUpload(ctx, complete); apiCodeOf(err) == "NoSuchUpload" {
					err = nil // the completion whose answer was lost went through
				}
			}
			if err != nil {
				return fmt.Errorf("complete: %w", err)
			}
			return nil
		}

		put("source")
		expect(t, "a plain copy", true, copyObject(&awss3.CopyObjectInput{Key: aws.String("plain-copy")}))
		expect(
			t,
			"a plain multipart upload",
			true,
			multipart(&awss3.CreateMultipartUploadInput{Key: aws.String("plain-multipart")}),
		)
		put("in-place")

		for _, c := range []struct {
			key    string
			create func(key string) error
		}{
			{"copy-canned-public-read", func(key string) error {
				return copyObject(&awss3.CopyObjectInput{Key: aws.String(key), ACL: types.ObjectCannedACLPublicRead})
			}},
			{"copy-grant-read-all-users", func(key string) error {
				return copyObject(&awss3.CopyObjectInput{Key: aws.String(key), GrantRead: allUsers})
			}},
			{"in-place", func(key string) error { // the object onto itself, with a new ACL
				return copyObject(&awss3.CopyObjectInput{
					Key:               aws.String(key),
					CopySource:        aws.String(bucket + "/" + key),
					MetadataDirective: types.MetadataDirectiveReplace,
					Metadata:          map[string]string{"x": "y"},
					ACL:               types.ObjectCannedACLPublicRead,
				})
			}},
			{"multipart-canned-public-read", func(key string) error {
				return multipart(&awss3.CreateMultipartUploadInput{Key: aws.String(key), ACL: types.ObjectCannedACLPublicRead})
			}},
			{"multipart-grant-read-all-users", func(key string) error {
				return multipart(&awss3.CreateMultipartUploadInput{Key: aws.String(key), GrantRead: allUsers})
			}},
		} {
			if err := c.create(c.key); err != nil && !denied(err) && apiCodeOf(err) != "NotImplemented" {
				t.Errorf("%s: %v, want success or AccessDenied", c.key, err)
			}
			out, err := anonymousClient(
				b.s3Endpoint,
			).GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(c.key)})
			if err == nil {
				out.Body.Close()
			}
			if !denied(err) && apiCodeOf(err) != "NoSuchKey" {
				t.Errorf(
					"an anonymous read of %s, created by the workload with an ACL: %v, want AccessDenied (or no such object)",
					c.key,
					err,
				)
			}
		}
	})
}

// publicAccessBlock returns the public access block of bucket as the admin reads it, as four
// booleans: BlockPublicAcls, IgnorePublicAcls, BlockPublicPolicy, RestrictPublicBuckets.
func publicAccessBlock(t *testing.T, b *backend, bucket string) [4]bool {
	t.Helper()
	out, err := b.admin.GetPublicAccessBlock(t.Context(), &awss3.GetPublicAccessBlockInput{Bucket: aws.String(bucket)})
	if apiCodeOf(err) == "NoSuchPublicAccessBlockConfiguration" {
		return [4]bool{}
	}
	if err != nil {
		t.Fatalf("reading the public access block of %s: %v", bucket, err)
	}
	c := out.PublicAccessBlockConfiguration
	if c == nil {
		return [4]bool{}
	}
	return [4]bool{
		aws.ToBool(c.BlockPublicAcls),
		aws.ToBool(c.IgnorePublicAcls),
		aws.ToBool(c.BlockPublicPolicy),
		aws.ToBool(c.RestrictPublicBuckets),
	}
}

func putPublicAccessBlock(t *testing.T, b *backend, bucket string, v [4]bool) {
	t.Helper()
	_, err := b.admin.PutPublicAccessBlock(t.Context(), &awss3.PutPublicAccessBlockInput{
		Bucket: aws.String(bucket),
		PublicAccessBlockConfiguration: &types.PublicAccessBlockConfiguration{
			BlockPublicAcls:       aws.Bool(v[0]),
			IgnorePublicAcls:      aws.Bool(v[1]),
			BlockPublicPolicy:     aws.Bool(v[2]),
			RestrictPublicBuckets: aws.Bool(v[3]),
		},
	})
	if err != nil {
		t.Fatalf("setting the public access block of %s: %v", bucket, err)
	}
}

// TestRGWCreatedBucketsIgnorePublicACLs checks the public access block of the buckets the driver
// creates on Ceph RGW: IgnorePublicAcls and nothing else (BlockPublicAcls refuses every upload on
// RGW 16); a repeated DriverCreateBucket keeps it, sets it again when it is off (a creation that
// stopped before it, or a bucket from a driver that did not set it), and keeps the other settings
// an admin chose; an imported bucket keeps the admin's settings.
func TestRGWCreatedBucketsIgnorePublicACLs(t *testing.T) {
	t.Run("ceph-rgw", func(t *testing.T) {
		b := rgwBackend(t)
		ctx := t.Context()
		_, p := serve(t, b.newDriver(t, ""), logr.Discard())
		bucket := createBucket(t, p, nil)
		want := [4]bool{false, true, false, false}
		if got := publicAccessBlock(t, b, bucket); got != want {
			t.Fatalf("a new bucket's public access block "+
				"(BlockPublicAcls, IgnorePublicAcls, BlockPublicPolicy, RestrictPublicBuckets) = %v, want %v", got, want)
		}
		recreate := func(when string) {
			t.Helper()
			if _, err := p.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: bucket}); err != nil {
				t.Fatalf("DriverCreateBucket again, %s: %v", when, err)
			}
		}
		recreate("unchanged")
		if got := publicAccessBlock(t, b, bucket); got != want {
			t.Errorf("after a repeated DriverCreateBucket: %v, want %v", got, want)
		}

		if _, err := b.admin.DeletePublicAccessBlock(
			ctx,
			&awss3.DeletePublicAccessBlockInput{Bucket: aws.String(bucket)},
		); err != nil {
			t.Fatal(err)
		}
		recreate("without a public access block")
		if got := publicAccessBlock(t, b, bucket); got != want {
			t.Errorf("a repeated DriverCreateBucket of a bucket without the block: %v, want %v", got, want)
		}

		// Not BlockPublicPolicy: RGW 16 takes every Allow statement for public then, and refuses
		// the driver's grants.
		putPublicAccessBlock(t, b, bucket, [4]bool{false, false, false, true})
		recreate("with IgnorePublicAcls off and RestrictPublicBuckets on")
		if got, want := publicAccessBlock(t, b, bucket), [4]bool{false, true, false, true}; got != want {
			t.Errorf("a repeated DriverCreateBucket of a bucket with IgnorePublicAcls off: "+
				"%v, want %v (the admin's other settings kept)", got, want)
		}

		// The workload's uploads work with the block: it ignores ACLs, it refuses nothing.
		a := grant(t, p, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}, bucket)
		expect(t, "an upload to a bucket with the block", true, put(a, bucket, "k"))
		expect(t, "a read of it", true, get(a, bucket, "k"))
		expect(t, "a delete of it", true, del(a, bucket, "k"))

		// An imported bucket is the admin's: the driver leaves its block alone.
		imported := randomName("imported-")
		if _, err := b.admin.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(imported)}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_, _ = b.admin.DeleteBucket(context.Background(), &awss3.DeleteBucketInput{Bucket: aws.String(imported)})
		}()
		if _, err := p.DriverGetBucket(ctx, &cosiproto.DriverGetBucketRequest{BucketId: imported}); err != nil {
			t.Fatal(err)
		}
		ia := grant(t, p, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}, imported)
		defer revoke(t, p, ia)
		if got := publicAccessBlock(t, b, imported); got != ([4]bool{}) {
			t.Errorf("an imported bucket's public access block after import and grant: %v, want the admin's (none)", got)
		}
	})
}

// TestNoModeChangesPublicAccessBlock grants each mode, and all of them, on a bucket the driver
// created and checks that the key can neither change nor delete the bucket's public access
// block (s3:PutBucketPublicAccessBlock is never granted), and that on RGW the block is as the
// driver set it afterwards. Versity has no public access block (NotImplemented).
func TestNoModeChangesPublicAccessBlock(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := t.Context()
		_, p := serve(t, b.newDriver(t, ""), logr.Discard())
		bucket := createBucket(t, p, nil)
		rw := cosiproto.AccessMode_READ_WRITE
		for _, tc := range []struct {
			name  string
			modes *cosiproto.AccessModes
		}{
			{"objectData ReadOnly", &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_ONLY}},
			{"objectData ReadWrite", &cosiproto.AccessModes{ObjectData: rw}},
			{"objectMetadata ReadWrite", &cosiproto.AccessModes{ObjectMetadata: rw}},
			{"bucketMetadata ReadOnly", &cosiproto.AccessModes{BucketMetadata: cosiproto.AccessMode_READ_ONLY}},
			{"bucketMetadata ReadWrite", &cosiproto.AccessModes{BucketMetadata: rw}},
			{"all ReadWrite", &cosiproto.AccessModes{ObjectData: rw, ObjectMetadata: rw, BucketMetadata: rw}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				a := grant(t, p, tc.modes, bucket)
				defer revoke(t, p, a)
				_, err := a.client.PutPublicAccessBlock(ctx, &awss3.PutPublicAccessBlockInput{
					Bucket: aws.String(bucket),
					PublicAccessBlockConfiguration: &types.PublicAccessBlockConfiguration{
						BlockPublicAcls:       aws.Bool(false),
						IgnorePublicAcls:      aws.Bool(false),
						BlockPublicPolicy:     aws.Bool(false),
						RestrictPublicBuckets: aws.Bool(false),
					},
				})
				if apiCodeOf(err) != "NotImplemented" {
					expect(t, tc.name+": PutPublicAccessBlock all off", false, err)
				}
				_, err = a.client.DeletePublicAccessBlock(ctx, &awss3.DeletePublicAccessBlockInput{Bucket: aws.String(bucket)})
				if apiCodeOf(err) != "NotImplemented" {
					expect(t, tc.name+": DeletePublicAccessBlock", false, err)
				}
				if b.name == "ceph-rgw" {
					if got, want := publicAccessBlock(t, b, bucket), [4]bool{false, true, false, false}; got != want {
						t.Errorf("the public access block after the attempts of %s: %v, want %v", tc.name, got, want)
					}
				}
			})
		}
	})
}

// TestRGWRepeatedGrantWithOtherModes checks that an account granted again with other access
// modes is refused with AlreadyExists, leaving its statements as they were, while the same
// grant passes, also over the statements an earlier version of the driver wrote (without the
// denials), which it writes anew.
func TestRGWRepeatedGrantWithOtherModes(t *testing.T) {
	b := rgwBackend(t)
	ctx := t.Context()
	_, p := serve(t, b.newDriver(t, ""), logr.Discard())
	bucket := createBucket(t, p, map[string]string{s3.ParamPurgeOnDelete: "true"})
	rw := &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}
	a := grant(t, p, rw, bucket)
	defer revoke(t, p, a)

	// The statements without the denials, as the driver wrote them before issue 14.
	doc, stmts := policyStatements(t, bucketPolicy(t, b, bucket))
	var allows []any
	for _, s := range stmts {
		if s.(map[string]any)["Effect"] == "Allow" {
			allows = append(allows, s)
		}
	}
	if len(allows) == len(stmts) {
		t.Fatalf("the grant wrote no denials: %v", stmts)
	}
	doc["Statement"] = allows
	earlier, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.admin.PutBucketPolicy(ctx, &awss3.PutBucketPolicyInput{Bucket: aws.String(bucket),
		Policy: aws.String(string(earlier))}); err != nil {
		t.Fatal(err)
	}
	grantAs(t, p, a.id, rw, bucket)
	if _, again := policyStatements(t, bucketPolicy(t, b, bucket)); len(again) != len(stmts) {
		t.Errorf("the same grant over the earlier statements left %d statements, want %d", len(again), len(stmts))
	}

	before := bucketPolicy(t, b, bucket)
	_, err = p.DriverGrantBucketAccess(ctx, &cosiproto.DriverGrantBucketAccessRequest{
		AccountId: a.id, Protocol: cosiproto.ObjectProtocol_S3, AuthenticationType: cosiproto.AuthenticationType_KEY,
		Buckets: []*cosiproto.AccessedBucket{{BucketId: bucket,
			AccessModes: &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_ONLY}}},
	})
	if status.Code(err) != codes.AlreadyExists {
		t.Errorf("a repeated grant with READ_ONLY instead of READ_WRITE: %v, want AlreadyExists", err)
	}
	if after := bucketPolicy(t, b, bucket); after != before {
		t.Errorf("the refused grant changed the policy:\n%s\nwas\n%s", after, before)
	}
	expect(t, "put after the refused grant", true, put(a, bucket, "k"))
}
