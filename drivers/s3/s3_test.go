package s3_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/pkg/sanity"
	"github.com/kube-cosi/cosi/pkg/sanity/s3probe"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// TestSanity runs cosi-sanity against the driver on each real store, with the probe an S3 vendor
// imports (pkg/sanity/s3probe), which asks the store itself: does the bucket exist (admin
// HeadBucket), does a request with the issued key succeed, whom do the keys authenticate as
// (ListBuckets' owner); and which identities exist (the account back-end's list).
func TestSanity(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		var logs logBuffer
		d := b.newDriver(t, "")
		endpoint, _ := serve(t, d, logs.logger())
		probe, err := s3probe.New(s3probe.Config{
			Endpoint: b.s3Endpoint, Credentials: b.creds, Accounts: b.newAccount().List,
		})
		if err != nil {
			t.Fatal(err)
		}
		cfg := sanity.Config{
			Endpoint: endpoint,
			// The driver's default: a bucket holding objects (the probe leaves one in each bucket it
			// checks) is refused with FailedPrecondition, and the suite empties it through the probe.
			BucketParameters:             map[string]string{s3.ParamVersioning: "false"},
			InvalidBucketParameters:      map[string]string{s3.ParamVersioning: "maybe"},
			IncompatibleBucketParameters: map[string]string{s3.ParamVersioning: "true"},
			InvalidAccessParameters:      map[string]string{"nope": "x"},
			DriverLogs:                   logs.bytes,
			Probe:                        probe.Probe(),
			// Two generated sequences, not four: each takes a minute on RGW; pkg/sanity runs the
			// full set against the memory driver and its mutants.
			Sequences: 2,
		}
		t.Run("refuse non-empty", func(t *testing.T) { sanity.Test(t, cfg) })
		// With purgeOnDelete the deletion cases see a bucket deleted with its objects.
		cfg.BucketParameters = map[string]string{s3.ParamVersioning: "false", s3.ParamPurgeOnDelete: "true"}
		cfg.Run = regexp.MustCompile(`^(DriverDeleteBucket/|Store/)`)
		t.Run("purgeOnDelete", func(t *testing.T) { sanity.Test(t, cfg) })
	})
}

// access is one granted access, as a workload sees it.
type access struct {
	id     string
	creds  *cosiproto.CredentialInfo
	infos  map[string]*cosiproto.ProtocolBucketInfo
	client *awss3.Client
}

func grant(t *testing.T, p cosiproto.ProvisionerClient, modes *cosiproto.AccessModes, buckets ...string) *access {
	t.Helper()
	return grantAs(t, p, "ba-"+strings.ToLower(rand.Text()[:12]), modes, buckets...)
}

// grantAs grants with the account name name.
func grantAs(
	t *testing.T,
	p cosiproto.ProvisionerClient,
	name string,
	modes *cosiproto.AccessModes,
	buckets ...string,
) *access {
	t.Helper()
	ctx := t.Context()
	req := &cosiproto.DriverGenerateBucketAccessIdRequest{
		AccountName:        name,
		Protocol:           cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
	}
	greq := &cosiproto.DriverGrantBucketAccessRequest{
		Protocol:           cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
	}
	for _, b := range buckets {
		req.Buckets = append(req.Buckets, &cosiproto.AccessedBucket{BucketId: b, AccessModes: modes})
	}
	greq.Buckets = req.Buckets
	gen, err := p.DriverGenerateBucketAccessId(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	greq.AccountId = gen.GetAccountId()
	resp, err := p.DriverGrantBucketAccess(ctx, greq)
	if err != nil {
		t.Fatal(err)
	}
	a := &access{id: gen.GetAccountId(), creds: resp.GetCredentials(), infos: map[string]*cosiproto.ProtocolBucketInfo{}}
	for _, bi := range resp.GetBuckets() {
		a.infos[bi.GetBucketId()] = bi.GetBucketInfo()
	}
	a.client = userClient(a.creds, a.infos[buckets[0]])
	return a
}

func revoke(t *testing.T, p cosiproto.ProvisionerClient, a *access) {
	t.Helper()
	req := &cosiproto.DriverRevokeBucketAccessRequest{
		AccountId:          a.id,
		Protocol:           cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
	}
	for b := range a.infos {
		req.Buckets = append(req.Buckets, &cosiproto.DriverRevokeBucketAccessRequest_Bucket{BucketId: b})
	}
	if _, err := p.DriverRevokeBucketAccess(t.Context(), req); err != nil {
		t.Fatal(err)
	}
}

func createBucket(t *testing.T, p cosiproto.ProvisionerClient, params map[string]string) string {
	t.Helper()
	gen, err := p.DriverGenerateBucketId(
		t.Context(),
		&cosiproto.DriverGenerateBucketIdRequest{Name: "bc-" + strings.ToLower(rand.Text()[:12]), Parameters: params},
	)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DriverCreateBucket(
		t.Context(),
		&cosiproto.DriverCreateBucketRequest{BucketId: gen.GetBucketId(), Parameters: params},
	); err != nil {
		t.Fatal(err)
	}
	return gen.GetBucketId()
}

// The operations the issue names, with the issued credentials.
func put(a *access, bucket, key string) error {
	_, err := a.client.PutObject(
		context.Background(),
		&awss3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader("data of " + key)},
	)
	return err
}

func get(a *access, bucket, key string) error {
	out, err := a.client.GetObject(
		context.Background(),
		&awss3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)},
	)
	if err != nil {
		return err
	}
	defer out.Body.Close()
	_, err = io.ReadAll(out.Body)
	return err
}

func list(a *access, bucket string) error {
	_, err := a.client.ListObjectsV2(context.Background(), &awss3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	return err
}

func del(a *access, bucket, key string) error {
	_, err := a.client.DeleteObject(
		context.Background(),
		&awss3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)},
	)
	return err
}

// expect checks that op succeeds (want true) or is refused with AccessDenied/InvalidAccessKeyId.
func expect(t *testing.T, what string, want bool, err error) {
	t.Helper()
	switch {
	case want && err != nil:
		t.Errorf("%s: %v, want success", what, err)
	case !want && err == nil:
		t.Errorf("%s succeeded, want AccessDenied", what)
	case !want && !denied(err):
		t.Errorf("%s: %v, want AccessDenied or InvalidAccessKeyId", what, err)
	}
}

// TestEnforcement checks with a real S3 client and the issued keys that the store allows exactly
// what was granted.
func TestEnforcement(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, p := serve(t, b.newDriver(t, ""), logr.Discard())
		ctx := t.Context()
		bucket, other := createBucket(t, p, nil), createBucket(t, p, nil)
		if _, err := b.admin.PutObject(
			ctx,
			&awss3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("seed"), Body: strings.NewReader("seed")},
		); err != nil {
			t.Fatal(err)
		}

		rw := grant(t, p, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}, bucket)
		expect(t, "ReadWrite put", true, put(rw, bucket, "rw"))
		expect(t, "ReadWrite get", true, get(rw, bucket, "rw"))
		expect(t, "ReadWrite list", true, list(rw, bucket))
		expect(t, "ReadWrite delete", true, del(rw, bucket, "rw"))
		expect(t, "ReadWrite put into a bucket it was not granted", false, put(rw, other, "x"))
		expect(t, "ReadWrite list of a bucket it was not granted", false, list(rw, other))
		expect(t, "ReadWrite get from a bucket it was not granted", false, get(rw, other, "seed"))
		_, err := rw.client.CreateBucket(
			ctx,
			&awss3.CreateBucketInput{Bucket: aws.String("cosi-own-" + strings.ToLower(rand.Text()[:8]))},
		)
		expect(t, "ReadWrite creating a bucket of its own", false, err)
		_, err = rw.client.PutBucketPolicy(
			ctx,
			&awss3.PutBucketPolicyInput{
				Bucket: aws.String(bucket),
				Policy: aws.String(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*",` +
					`"Action":"s3:*","Resource":"arn:aws:s3:::` + bucket + `/*"}]}`),
			},
		)
		expect(t, "ReadWrite widening its access with a bucket policy", false, err)
		_, err = rw.client.DeleteBucket(ctx, &awss3.DeleteBucketInput{Bucket: aws.String(bucket)})
		expect(t, "ReadWrite deleting the bucket", false, err)

		ro := grant(t, p, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_ONLY}, bucket)
		expect(t, "ReadOnly get", true, get(ro, bucket, "seed"))
		expect(t, "ReadOnly list", true, list(ro, bucket))
		expect(t, "ReadOnly put", false, put(ro, bucket, "ro"))
		expect(t, "ReadOnly delete", false, del(ro, bucket, "seed"))
		expect(t, "ReadOnly get from a bucket it was not granted", false, get(ro, other, "seed"))

		wo := grant(t, p, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_WRITE_ONLY}, bucket)
		expect(t, "WriteOnly put", true, put(wo, bucket, "wo"))
		expect(t, "WriteOnly delete", true, del(wo, bucket, "wo"))
		expect(t, "WriteOnly get", false, get(wo, bucket, "seed"))
		expect(t, "WriteOnly list", false, list(wo, bucket))
		expect(t, "WriteOnly put into a bucket it was not granted", false, put(wo, other, "x"))

		multi := grant(t, p, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}, bucket, other)
		for _, bk := range []string{bucket, other} {
			expect(t, "multi-bucket put into "+bk, true, put(multi, bk, "multi"))
			expect(t, "multi-bucket get from "+bk, true, get(multi, bk, "multi"))
			expect(t, "multi-bucket list of "+bk, true, list(multi, bk))
			expect(t, "multi-bucket delete in "+bk, true, del(multi, bk, "multi"))
		}
		third := createBucket(t, p, nil)
		expect(t, "multi-bucket put into a third bucket", false, put(multi, third, "x"))

		// Revoking one access leaves the others working.
		for _, a := range []*access{rw, ro, wo, multi} {
			revoke(t, p, a)
		}
		expect(t, "put after revoke", false, put(rw, bucket, "after"))
		expect(t, "get after revoke", false, get(ro, bucket, "seed"))
		expect(t, "put after revoke (WriteOnly)", false, put(wo, bucket, "after"))
		expect(t, "multi-bucket get after revoke", false, get(multi, other, "seed"))
		accounts, err := b.newAccount().List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []*access{rw, ro, wo, multi} {
			if slices.Contains(accounts, a.id) {
				t.Errorf("identity %s still exists after revoke", a.id)
			}
		}
	})
}

// TestRepeatedGrant checks that granting the same access again returns working credentials and
// keeps the ones handed out before working, with one identity.
func TestRepeatedGrant(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, p := serve(t, b.newDriver(t, ""), logr.Discard())
		bucket := createBucket(t, p, nil)
		first := grant(t, p, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}, bucket)
		req := &cosiproto.DriverGrantBucketAccessRequest{
			AccountId:          first.id,
			Protocol:           cosiproto.ObjectProtocol_S3,
			AuthenticationType: cosiproto.AuthenticationType_KEY,
			Buckets: []*cosiproto.AccessedBucket{
				{BucketId: bucket, AccessModes: &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}},
			},
		}
		resp, err := p.DriverGrantBucketAccess(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		second := &access{
			id:     first.id,
			creds:  resp.GetCredentials(),
			infos:  first.infos,
			client: userClient(resp.GetCredentials(), first.infos[bucket]),
		}
		expect(t, "put with the first key after a repeated grant", true, put(first, bucket, "a"))
		expect(t, "put with the second key", true, put(second, bucket, "b"))
		revoke(t, p, first)
		expect(t, "the first key after revoke", false, put(first, bucket, "c"))
		expect(t, "the second key after revoke", false, put(second, bucket, "c"))
	})
}

// TestBuckets checks bucket naming, ownership, parameters, static buckets and deletion.
func TestBuckets(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := t.Context()
		_, p := serve(t, b.newDriver(t, "test-"), logr.Discard())

		t.Run("generated names are deterministic, prefixed and valid", func(t *testing.T) {
			name := "bc-3f1e9a52-7c1d-4c3e-9d4e-UPPER"
			one, err := p.DriverGenerateBucketId(ctx, &cosiproto.DriverGenerateBucketIdRequest{Name: name})
			if err != nil {
				t.Fatal(err)
			}
			two, _ := p.DriverGenerateBucketId(ctx, &cosiproto.DriverGenerateBucketIdRequest{Name: name})
			if one.GetBucketId() != two.GetBucketId() || !strings.HasPrefix(one.GetBucketId(), "test-bc-") ||
				one.GetBucketId() != strings.ToLower(one.GetBucketId()) {
				t.Errorf("bucket IDs %q, %q", one.GetBucketId(), two.GetBucketId())
			}
			if exists, _ := b.bucketExists(ctx, one.GetBucketId()); exists {
				t.Error("DriverGenerateBucketId created the bucket")
			}
		})

		t.Run("a bucket the driver did not create is AlreadyExists and untouched", func(t *testing.T) {
			name := "bc-foreign-" + strings.ToLower(rand.Text()[:8])
			id := s3.BucketName("test-", name)
			if _, err := b.admin.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(id)}); err != nil {
				t.Fatal(err)
			}
			if _, err := b.admin.PutObject(
				ctx,
				&awss3.PutObjectInput{Bucket: aws.String(id), Key: aws.String("precious"), Body: strings.NewReader("x")},
			); err != nil {
				t.Fatal(err)
			}
			_, err := p.DriverGenerateBucketId(ctx, &cosiproto.DriverGenerateBucketIdRequest{Name: name})
			if status.Code(err) != codes.AlreadyExists {
				t.Errorf("DriverGenerateBucketId for a foreign bucket: %v, want AlreadyExists", err)
			}
			_, err = p.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: id})
			if status.Code(err) != codes.AlreadyExists {
				t.Errorf("DriverCreateBucket for a foreign bucket: %v, want AlreadyExists", err)
			}
			if _, err := b.admin.HeadObject(
				ctx,
				&awss3.HeadObjectInput{Bucket: aws.String(id), Key: aws.String("precious")},
			); err != nil {
				t.Errorf("the foreign bucket's object: %v", err)
			}
		})

		t.Run("an interrupted creation (empty, untagged, the admin's) is adopted", func(t *testing.T) {
			id := s3.BucketName("test-", "bc-interrupted-"+strings.ToLower(rand.Text()[:8]))
			if _, err := b.admin.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(id)}); err != nil {
				t.Fatal(err)
			}
			if _, err := p.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: id}); err != nil {
				t.Fatalf("DriverCreateBucket after an interrupted creation: %v", err)
			}
			tags, err := b.admin.GetBucketTagging(ctx, &awss3.GetBucketTaggingInput{Bucket: aws.String(id)})
			if err != nil ||
				!slices.ContainsFunc(tags.TagSet, func(tag types.Tag) bool { return aws.ToString(tag.Key) == s3.OwnerTag }) {
				t.Errorf("the adopted bucket has no %s tag: %v %v", s3.OwnerTag, tags, err)
			}
		})

		t.Run("versioning and object lock parameters", func(t *testing.T) {
			versioned := createBucket(t, p, map[string]string{s3.ParamVersioning: "true"})
			v, err := b.admin.GetBucketVersioning(ctx, &awss3.GetBucketVersioningInput{Bucket: aws.String(versioned)})
			if err != nil || v.Status != types.BucketVersioningStatusEnabled {
				t.Errorf("versioning=true: status %v, %v", v, err)
			}
			_, err = p.DriverCreateBucket(
				ctx,
				&cosiproto.DriverCreateBucketRequest{
					BucketId:   versioned,
					Parameters: map[string]string{s3.ParamVersioning: "false"},
				},
			)
			if status.Code(err) != codes.AlreadyExists {
				t.Errorf("re-creating a versioned bucket unversioned: %v, want AlreadyExists", err)
			}
			locked := createBucket(t, p, map[string]string{s3.ParamObjectLock: "true"})
			lock, err := b.admin.GetObjectLockConfiguration(
				ctx,
				&awss3.GetObjectLockConfigurationInput{Bucket: aws.String(locked)},
			)
			if err != nil || lock.ObjectLockConfiguration == nil ||
				lock.ObjectLockConfiguration.ObjectLockEnabled != types.ObjectLockEnabledEnabled {
				t.Errorf("objectLock=true: %v, %v", lock, err)
			}
			_, err = p.DriverCreateBucket(
				ctx,
				&cosiproto.DriverCreateBucketRequest{
					BucketId:   "x-" + locked,
					Parameters: map[string]string{s3.ParamObjectLock: "true", s3.ParamVersioning: "false"},
				},
			)
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("objectLock=true with versioning=false: %v, want InvalidArgument", err)
			}
			_, err = p.DriverCreateBucket(
				ctx,
				&cosiproto.DriverCreateBucketRequest{BucketId: "x-" + locked, Parameters: map[string]string{"versoning": "true"}},
			)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "versoning") {
				t.Errorf("a misspelt parameter: %v, want InvalidArgument naming it", err)
			}
		})

		t.Run("static buckets", func(t *testing.T) {
			id := "static-" + strings.ToLower(rand.Text()[:10])
			_, err := p.DriverGetBucket(ctx, &cosiproto.DriverGetBucketRequest{BucketId: id})
			if status.Code(err) != codes.NotFound {
				t.Errorf("DriverGetBucket of a missing bucket: %v, want NotFound", err)
			}
			if _, err := b.admin.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(id)}); err != nil {
				t.Fatal(err)
			}
			resp, err := p.DriverGetBucket(ctx, &cosiproto.DriverGetBucketRequest{BucketId: id})
			if err != nil {
				t.Fatal(err)
			}
			if s := resp.GetProtocols().
				GetS3(); s.GetBucketName() != id || s.GetEndpoint() != b.s3Endpoint ||
				s.GetRegion() == "" {
				t.Errorf("bucket info %v", s)
			}
			_, err = p.DriverGetBucket(
				ctx,
				&cosiproto.DriverGetBucketRequest{BucketId: id, Parameters: map[string]string{s3.ParamVersioning: "true"}},
			)
			if status.Code(err) != codes.AlreadyExists {
				t.Errorf("DriverGetBucket asking for versioning of an unversioned bucket: %v, want AlreadyExists", err)
			}
			a := grant(t, p, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}, id)
			expect(t, "put into a static bucket", true, put(a, id, "k"))
			revoke(t, p, a)
		})

		t.Run("a non-empty bucket is not deleted unless purgeOnDelete", func(t *testing.T) {
			id := createBucket(t, p, map[string]string{s3.ParamVersioning: "true"})
			for _, key := range []string{"a", "a", "b/c"} { // two versions of a
				if _, err := b.admin.PutObject(
					ctx,
					&awss3.PutObjectInput{Bucket: aws.String(id), Key: aws.String(key), Body: strings.NewReader("x")},
				); err != nil {
					t.Fatal(err)
				}
			}
			_, err := p.DriverDeleteBucket(
				ctx,
				&cosiproto.DriverDeleteBucketRequest{BucketId: id, Parameters: map[string]string{s3.ParamVersioning: "true"}},
			)
			if status.Code(err) != codes.FailedPrecondition ||
				!strings.Contains(status.Convert(err).Message(), s3.ParamPurgeOnDelete) {
				t.Errorf("deleting a non-empty bucket: %v, want FailedPrecondition naming %s", err, s3.ParamPurgeOnDelete)
			}
			if _, err := b.admin.HeadObject(
				ctx,
				&awss3.HeadObjectInput{Bucket: aws.String(id), Key: aws.String("b/c")},
			); err != nil {
				t.Errorf("an object after the refused delete: %v", err)
			}
			_, err = p.DriverDeleteBucket(
				ctx,
				&cosiproto.DriverDeleteBucketRequest{
					BucketId:   id,
					Parameters: map[string]string{s3.ParamVersioning: "true", s3.ParamPurgeOnDelete: "true"},
				},
			)
			if err != nil {
				t.Fatalf("deleting with purgeOnDelete: %v", err)
			}
			if exists, err := b.bucketExists(ctx, id); exists || err != nil {
				t.Errorf("the purged bucket exists=%v (%v)", exists, err)
			}
		})
	})
}

// TestRotation checks key rotation with a real S3 client: the old key works until it is retired
// and is refused after; the new one works from the start and after; a repeated rotation leaves
// one new key; retiring twice is OK; the last key is never retired.
func TestRotation(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		_, p := serve(t, b.newDriver(t, ""), logr.Discard())
		bucket := createBucket(t, p, nil)
		rw := &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}
		old := grant(t, p, rw, bucket)
		defer revoke(t, p, old)
		grantResp, err := p.DriverGrantBucketAccess(t.Context(), &cosiproto.DriverGrantBucketAccessRequest{
			AccountId: old.id, Protocol: cosiproto.ObjectProtocol_S3, AuthenticationType: cosiproto.AuthenticationType_KEY,
			Buckets: []*cosiproto.AccessedBucket{{BucketId: bucket, AccessModes: rw}},
		})
		if err != nil {
			t.Fatal(err)
		}
		// The grant again, as a lost Secret asks it: its key is the one the Secrets hold now.
		old = &access{id: old.id, creds: grantResp.GetCredentials(), infos: old.infos,
			client: userClient(grantResp.GetCredentials(), old.infos[bucket])}
		if grantResp.GetCredentialId() != grantResp.GetCredentials().GetS3().GetAccessKeyId() {
			t.Fatalf("credential_id %q, want the access key ID", grantResp.GetCredentialId())
		}
		rotate := &cosiproto.DriverRotateBucketAccessCredentialsRequest{
			AccountId: old.id, Protocol: cosiproto.ObjectProtocol_S3, AuthenticationType: cosiproto.AuthenticationType_KEY,
			Buckets: []*cosiproto.AccessedBucket{{BucketId: bucket, AccessModes: rw}}, CredentialId: grantResp.GetCredentialId(),
		}
		first, err := p.DriverRotateBucketAccessCredentials(t.Context(), rotate)
		if err != nil {
			t.Fatal(err)
		}
		// Repeated, as after a lost answer: one new key, working.
		resp, err := p.DriverRotateBucketAccessCredentials(t.Context(), rotate)
		if err != nil {
			t.Fatal(err)
		}
		newKey := &access{id: old.id, creds: resp.GetCredentials(), infos: old.infos,
			client: userClient(resp.GetCredentials(), old.infos[bucket])}
		if resp.GetCredentialId() != first.GetCredentialId() {
			firstKey := &access{client: userClient(first.GetCredentials(), old.infos[bucket])}
			expect(t, "the key of the first of two rotations for the same key", false, put(firstKey, bucket, "x"))
		}
		expect(t, "put with the old key during the grace period", true, put(old, bucket, "a"))
		expect(t, "get with the new key", true, get(newKey, bucket, "a"))
		expect(t, "put with the new key", true, put(newKey, bucket, "b"))
		if b.name == "ceph-rgw" {
			// RGW returns a user's keys, so the same key comes back each time: the first call's,
			// and, for a grant repeated during the grace period (a lost Secret), the newest key.
			if resp.GetCredentialId() != first.GetCredentialId() ||
				resp.GetCredentials().GetS3().GetAccessSecretKey() != first.GetCredentials().GetS3().GetAccessSecretKey() {
				t.Errorf("a repeated rotation issued credential %q, want the first call's %q",
					resp.GetCredentialId(), first.GetCredentialId())
			}
			keys, err := s3.RGWKeyIDs(t.Context(), b.newAccount().(*s3.RGWAccounts), old.id)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(keys)
			want := []string{grantResp.GetCredentialId(), resp.GetCredentialId()}
			slices.Sort(want)
			if !slices.Equal(keys, want) {
				t.Errorf("after two rotations for the same key, the RGW user holds keys %v, want %v", keys, want)
			}
			again, err := p.DriverGrantBucketAccess(t.Context(), &cosiproto.DriverGrantBucketAccessRequest{
				AccountId: old.id, Protocol: cosiproto.ObjectProtocol_S3, AuthenticationType: cosiproto.AuthenticationType_KEY,
				Buckets: []*cosiproto.AccessedBucket{{BucketId: bucket, AccessModes: rw}},
			})
			if err != nil {
				t.Fatal(err)
			}
			if again.GetCredentialId() != resp.GetCredentialId() {
				t.Errorf("a grant during the grace period returned credential %q, want the rotated %q",
					again.GetCredentialId(), resp.GetCredentialId())
			}
		}

		retire := &cosiproto.DriverRetireBucketAccessCredentialsRequest{
			AccountId: old.id, CredentialId: grantResp.GetCredentialId(), Protocol: cosiproto.ObjectProtocol_S3,
		}
		for range 2 {
			if _, err := p.DriverRetireBucketAccessCredentials(t.Context(), retire); err != nil {
				t.Fatal(err)
			}
		}
		testenv.Eventually(t, func() error {
			switch err := get(old, bucket, "b"); {
			case err == nil:
				return errors.New("get with the retired key succeeded, want AccessDenied or InvalidAccessKeyId")
			case !denied(err):
				return fmt.Errorf("get with the retired key: %w, want AccessDenied or InvalidAccessKeyId", err)
			}
			return nil
		})
		expect(t, "get with the new key after the retirement", true, get(newKey, bucket, "a"))
		retire.CredentialId = resp.GetCredentialId()
		_, err = p.DriverRetireBucketAccessCredentials(t.Context(), retire)
		if status.Code(err) != codes.FailedPrecondition {
			t.Errorf("retiring the only key: %v, want FailedPrecondition", err)
		}
		if _, err := p.DriverRotateBucketAccessCredentials(t.Context(), rotate); status.Code(err) != codes.NotFound {
			t.Errorf("rotating from a retired key: %v, want NotFound", err)
		}
	})
}
