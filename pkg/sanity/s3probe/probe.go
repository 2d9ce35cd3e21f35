// Package s3probe is a sanity.Probe for drivers of S3-compatible object stores: it answers the
// conformance suite's questions about the store by asking the store itself, with real S3
// requests, so that an S3 vendor gets the suite's enforcement checks (a read-only key cannot
// write, a revoked key stops working, a deleted bucket is gone) without writing a probe.
//
//	p, err := s3probe.New(s3probe.Config{
//		Endpoint:    "http://127.0.0.1:7070",
//		Credentials: credentials.NewStaticCredentialsProvider(adminKey, adminSecret, ""),
//		Accounts:    listUsers, // optional: the store's identities
//	})
//	sanity.Test(t, sanity.Config{Endpoint: endpoint, Probe: p.Probe()})
//
// It is a module of its own (github.com/kube-cosi/cosi/pkg/sanity/s3probe) so that the SDK module
// (github.com/kube-cosi/cosi/pkg) requires no cloud SDK: only a vendor who imports s3probe
// inherits the AWS SDK for Go.
package s3probe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/kube-cosi/cosi/pkg/sanity"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Config says how to reach the store as its administrator.
type Config struct {
	// Endpoint is the store's S3 endpoint, http(s)://host[:port]. Required.
	Endpoint string
	// Region signs the requests; empty means us-east-1.
	Region string
	// Credentials are an administrator's, who can see every bucket: BucketExists asks with them,
	// and Allowed puts with them the object a read needs and removes what a write created.
	// Required.
	Credentials aws.CredentialsProvider
	// HTTPClient makes the requests (a custom CA, a proxy); nil means http.DefaultClient.
	HTTPClient *http.Client
	// VirtualHostedStyle addresses the admin's requests as bucket.host; the default is path
	// style (bucket names in the path), which S3-compatible stores generally serve.
	VirtualHostedStyle bool
	// BucketName maps a COSI bucket_id to the bucket's name on the store, for BucketExists; nil
	// means the driver names buckets by their ID. (Allowed uses the bucket info the driver
	// returned.)
	BucketName func(bucketID string) string
	// Accounts lists every identity of the store that could hold bucket access, including ones
	// without keys (sanity.Probe.Accounts); S3 has no request for it (IAM's ListUsers, Ceph's
	// admin API, ... do). Nil leaves the cases that need it skipped.
	Accounts func(ctx context.Context) ([]string, error)
	// AccountOf says which identity, as Accounts names them, credentials authenticate as
	// (sanity.Probe.AccountOf). Nil means what the store says (see Probe.AccountOf), which must
	// then be how Accounts names identities; a store that names them otherwise must set it, or
	// set NoAccountOf.
	AccountOf func(ctx context.Context, accessKeyID, secretAccessKey string) (string, error)
	// NoAccountOf leaves the probe without AccountOf, and the cases that need it skipped.
	NoAccountOf bool
	// ServiceAccount returns the S3 credentials a workload running as the Kubernetes
	// ServiceAccount namespace/name obtains from the store (for drivers that grant
	// SERVICE_ACCOUNT access), given what the grant returned (creds: for S3 on IAM, the role to
	// assume with the ServiceAccount's token, and the STS endpoint). An error of STS refusing the
	// token (AccessDenied, InvalidIdentityToken, IDPRejectedClaim, ExpiredTokenException, as the
	// AWS SDK's web identity provider returns them) makes Allowed report false: the store gives
	// that ServiceAccount nothing. Nil means Allowed fails such checks, saying so.
	ServiceAccount func(
		ctx context.Context, sa *cosiproto.ServiceAccount, creds *cosiproto.CredentialInfo,
	) (aws.CredentialsProvider, error)
}

// Probe asks an S3 store what the conformance suite needs to know. Its methods are those of
// sanity.Probe; Probe returns them as one.
type Probe struct {
	cfg   Config
	admin *awss3.Client
}

// New checks cfg and returns the probe. It does no I/O.
func New(cfg Config) (*Probe, error) {
	switch {
	case cfg.Endpoint == "":
		return nil, errors.New("s3probe: Config.Endpoint is required")
	case !strings.HasPrefix(cfg.Endpoint, "http://") && !strings.HasPrefix(cfg.Endpoint, "https://"):
		return nil, fmt.Errorf("s3probe: Config.Endpoint %q is not an http:// or https:// URL", cfg.Endpoint)
	case cfg.Credentials == nil:
		return nil, errors.New("s3probe: Config.Credentials (the store's administrator) are required")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	p := &Probe{cfg: cfg}
	p.admin = p.client(cfg.Endpoint, cfg.Region, cfg.Credentials, !cfg.VirtualHostedStyle)
	return p, nil
}

// Probe returns the probe as sanity.Config takes it: BucketExists, Allowed, Put, Objects, Empty
// and AccountOf always (AccountOf unless Config.NoAccountOf), Accounts when Config.Accounts is
// set.
func (p *Probe) Probe() sanity.Probe {
	sp := sanity.Probe{BucketExists: p.BucketExists, Allowed: p.Allowed, Accounts: p.cfg.Accounts,
		Put: p.Put, Objects: p.Objects, Empty: p.Empty}
	if !p.cfg.NoAccountOf {
		sp.AccountOf = p.AccountOf
	}
	return sp
}

// client is an S3 client that fails at once: a denied request is an answer, not something to
// retry.
func (p *Probe) client(endpoint, region string, creds aws.CredentialsProvider, pathStyle bool) *awss3.Client {
	opts := awss3.Options{
		BaseEndpoint:               aws.String(endpoint),
		Region:                     region,
		Credentials:                creds,
		UsePathStyle:               pathStyle,
		RetryMaxAttempts:           1,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}
	if p.cfg.HTTPClient != nil {
		opts.HTTPClient = p.cfg.HTTPClient
	}
	return awss3.New(opts)
}

// BucketExists asks the store, as its administrator (HeadBucket), whether the bucket exists.
func (p *Probe) BucketExists(ctx context.Context, bucketID string) (bool, error) {
	name := p.bucketName(bucketID)
	_, err := p.admin.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: aws.String(name)})
	var notFound *types.NotFound
	var noBucket *types.NoSuchBucket
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &notFound), errors.As(err, &noBucket), httpStatus(err) == http.StatusNotFound:
		return false, nil
	}
	return false, fmt.Errorf("s3probe: HeadBucket %q: %w", name, err)
}

// ProbeKey is the object Allowed reads (and tags): the administrator puts it first. Allowed
// writes WrittenKey and removes it afterwards.
const (
	ProbeKey   = "cosi-probe-object"
	WrittenKey = "cosi-probe-written"
)

// Allowed performs one request of the check's category with the credentials (for a
// SERVICE_ACCOUNT grant, Config.ServiceAccount's), addressed as the driver's bucket info says,
// and reports whether the store allowed it:
//   - object data: GetObject of ProbeKey (read), PutObject of WrittenKey (write);
//   - object metadata: GetObjectTagging (read), PutObjectTagging (write) of ProbeKey;
//   - bucket metadata: GetBucketVersioning (read), PutBucketTagging with the bucket's own tags
//     (write: it changes nothing).
//
// AccessDenied, an unknown or deleted key (InvalidAccessKeyId), a bad signature and a missing
// bucket are false with a nil error; other failures are errors.
func (p *Probe) Allowed(ctx context.Context, c sanity.AccessCheck) (bool, error) {
	user, bucket, refused, err := p.user(ctx, c)
	if err != nil || refused {
		return false, err
	}
	if _, err := p.admin.PutObject(ctx, &awss3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(ProbeKey), Body: strings.NewReader("probe"),
	}); err != nil {
		if missingBucket(err) {
			return false, nil
		}
		return false, fmt.Errorf("s3probe: the administrator's PutObject %s/%s: %w", bucket, ProbeKey, err)
	}
	return outcome(p.request(ctx, user, bucket, c))
}

// Put writes the object key (a few bytes) into the check's bucket with its credentials, and
// leaves it there; refusals are Allowed's.
func (p *Probe) Put(ctx context.Context, c sanity.AccessCheck, key string) (bool, error) {
	user, bucket, refused, err := p.user(ctx, c)
	if err != nil || refused {
		return false, err
	}
	_, err = user.PutObject(ctx, &awss3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader("cosi-sanity"),
	})
	return outcome(err)
}

// user is a client with the check's credentials (for a ServiceAccount, Config.ServiceAccount's),
// addressed as the driver's bucket info says, and the bucket's name; refused is true when STS
// refused the ServiceAccount's token.
func (p *Probe) user(
	ctx context.Context, c sanity.AccessCheck,
) (user *awss3.Client, bucket string, refused bool, err error) {
	s3info := c.BucketInfo.GetS3()
	bucket = s3info.GetBucketName()
	if bucket == "" {
		return nil, "", false, fmt.Errorf("s3probe: the driver returned no S3 bucket name for bucket %q", c.BucketID)
	}
	endpoint, region := s3info.GetEndpoint(), s3info.GetRegion()
	if endpoint == "" {
		endpoint = p.cfg.Endpoint
	}
	if region == "" {
		region = p.cfg.Region
	}
	var creds aws.CredentialsProvider
	switch {
	case c.ServiceAccount != nil && p.cfg.ServiceAccount == nil:
		return nil, "", false, fmt.Errorf("s3probe: cannot act as ServiceAccount %s/%s: set Config.ServiceAccount",
			c.ServiceAccount.GetNamespace(), c.ServiceAccount.GetName())
	case c.ServiceAccount != nil:
		if creds, err = p.cfg.ServiceAccount(ctx, c.ServiceAccount, c.Credentials); stsRefused(err) {
			return nil, "", true, nil
		} else if err != nil {
			return nil, "", false, fmt.Errorf("s3probe: credentials of ServiceAccount %s/%s: %w",
				c.ServiceAccount.GetNamespace(), c.ServiceAccount.GetName(), err)
		}
	default:
		key := c.Credentials.GetS3()
		creds = credentials.NewStaticCredentialsProvider(key.GetAccessKeyId(), key.GetAccessSecretKey(), "")
	}
	user = p.client(endpoint, region, creds, s3info.GetAddressingStyle() != cosiproto.S3AddressingStyle_VIRTUAL)
	return user, bucket, false, nil
}

// bucketName is the store's name of the bucket with this bucket_id.
func (p *Probe) bucketName(bucketID string) string {
	if p.cfg.BucketName != nil {
		return p.cfg.BucketName(bucketID)
	}
	return bucketID
}

// Objects lists the bucket's objects as the administrator (ListObjectsV2, one page); a missing
// bucket has none.
func (p *Probe) Objects(ctx context.Context, bucketID string) ([]string, error) {
	name := p.bucketName(bucketID)
	out, err := p.admin.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: aws.String(name)})
	switch {
	case missingBucket(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("s3probe: ListObjectsV2 %q: %w", name, err)
	}
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	return keys, nil
}

// Empty deletes every object of the bucket as the administrator: every version and delete
// marker where the store keeps versions (else every object), and every unfinished multipart
// upload. A missing bucket is no error.
func (p *Probe) Empty(ctx context.Context, bucketID string) error {
	name := aws.String(p.bucketName(bucketID))
	uploads, err := p.admin.ListMultipartUploads(ctx, &awss3.ListMultipartUploadsInput{Bucket: name})
	switch {
	case missingBucket(err):
		return nil
	case err == nil:
		for _, u := range uploads.Uploads {
			if _, err := p.admin.AbortMultipartUpload(ctx, &awss3.AbortMultipartUploadInput{
				Bucket: name, Key: u.Key, UploadId: u.UploadId,
			}); err != nil {
				return fmt.Errorf("s3probe: AbortMultipartUpload %s/%s: %w", *name, aws.ToString(u.Key), err)
			}
		}
	}
	for range 100 { // pages of a thousand: the suite's buckets hold a few objects
		versions, err := p.admin.ListObjectVersions(ctx, &awss3.ListObjectVersionsInput{Bucket: name})
		var objects []types.ObjectIdentifier
		switch {
		case missingBucket(err):
			return nil
		case err == nil:
			for _, v := range versions.Versions {
				objects = append(objects, types.ObjectIdentifier{Key: v.Key, VersionId: v.VersionId})
			}
			for _, m := range versions.DeleteMarkers {
				objects = append(objects, types.ObjectIdentifier{Key: m.Key, VersionId: m.VersionId})
			}
		default: // a store without versions
			keys, err := p.Objects(ctx, bucketID)
			if err != nil {
				return err
			}
			for _, k := range keys {
				objects = append(objects, types.ObjectIdentifier{Key: aws.String(k)})
			}
		}
		if len(objects) == 0 {
			return nil
		}
		for _, o := range objects {
			if _, err := p.admin.DeleteObject(ctx, &awss3.DeleteObjectInput{
				Bucket: name, Key: o.Key, VersionId: o.VersionId,
			}); err != nil && !missingBucket(err) {
				return fmt.Errorf("s3probe: DeleteObject %s/%s: %w", *name, aws.ToString(o.Key), err)
			}
		}
	}
	return fmt.Errorf("s3probe: bucket %q still holds objects after deleting 100 pages of them", *name)
}

func (p *Probe) request(ctx context.Context, user *awss3.Client, bucket string, c sanity.AccessCheck) error {
	switch {
	case c.Category == sanity.ObjectData && !c.Write:
		out, err := user.GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(ProbeKey)})
		if err == nil {
			_ = out.Body.Close()
		}
		return err
	case c.Category == sanity.ObjectData:
		_, err := user.PutObject(ctx, &awss3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String(WrittenKey), Body: strings.NewReader("w"),
		})
		_, _ = p.admin.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(WrittenKey)})
		return err
	case c.Category == sanity.ObjectMetadata && !c.Write:
		_, err := user.GetObjectTagging(ctx, &awss3.GetObjectTaggingInput{
			Bucket: aws.String(bucket), Key: aws.String(ProbeKey),
		})
		return err
	case c.Category == sanity.ObjectMetadata:
		_, err := user.PutObjectTagging(ctx, &awss3.PutObjectTaggingInput{
			Bucket: aws.String(bucket), Key: aws.String(ProbeKey),
			Tagging: &types.Tagging{TagSet: []types.Tag{{Key: aws.String("cosi-probe"), Value: aws.String("yes")}}},
		})
		return err
	case !c.Write:
		_, err := user.GetBucketVersioning(ctx, &awss3.GetBucketVersioningInput{Bucket: aws.String(bucket)})
		return err
	}
	// A write that changes nothing: the bucket's own tags, written back.
	var tagSet []types.Tag
	tags, err := p.admin.GetBucketTagging(ctx, &awss3.GetBucketTaggingInput{Bucket: aws.String(bucket)})
	switch {
	case err == nil:
		tagSet = tags.TagSet
	case apiCode(err) != "NoSuchTagSet" && apiCode(err) != "NoSuchTagSetError":
		return fmt.Errorf("s3probe: the administrator's GetBucketTagging %s: %w", bucket, err)
	}
	if len(tagSet) == 0 {
		// PutBucketTagging needs a tag; an untagged bucket gets the probe's own, and loses it again.
		tagSet = []types.Tag{{Key: aws.String("cosi-probe"), Value: aws.String("yes")}}
		defer func() {
			_, _ = p.admin.DeleteBucketTagging(ctx, &awss3.DeleteBucketTaggingInput{Bucket: aws.String(bucket)})
		}()
	}
	_, err = user.PutBucketTagging(ctx, &awss3.PutBucketTaggingInput{
		Bucket: aws.String(bucket), Tagging: &types.Tagging{TagSet: tagSet},
	})
	return err
}

// AccountOf reports which identity the credentials authenticate as: Config.AccountOf's answer,
// or else what the store says when asked with them. ListBuckets names its caller as the owner
// (Owner.ID, else Owner.DisplayName); a store that refuses it with AWS's "User: arn:...:user/NAME
// is not authorized" names the caller in its refusal (NAME). Credentials the store does not know
// (never issued, deleted, revoked) authenticate as none: "".
func (p *Probe) AccountOf(ctx context.Context, creds *cosiproto.CredentialInfo) (string, error) {
	key := creds.GetS3()
	if key.GetAccessKeyId() == "" {
		return "", fmt.Errorf("s3probe: AccountOf: no S3 credentials (an access key ID) to ask with")
	}
	if p.cfg.AccountOf != nil {
		return p.cfg.AccountOf(ctx, key.GetAccessKeyId(), key.GetAccessSecretKey())
	}
	user := p.client(p.cfg.Endpoint, p.cfg.Region,
		credentials.NewStaticCredentialsProvider(key.GetAccessKeyId(), key.GetAccessSecretKey(), ""),
		!p.cfg.VirtualHostedStyle)
	out, err := user.ListBuckets(ctx, &awss3.ListBucketsInput{})
	switch {
	case err == nil:
	case unknownKey(err):
		return "", nil
	default:
		if name := refusedUser(err); name != "" {
			return name, nil
		}
		return "", fmt.Errorf("s3probe: ListBuckets with the credentials (to learn whom they authenticate as; "+
			"set Config.AccountOf or NoAccountOf): %w", err)
	}
	if out.Owner != nil && aws.ToString(out.Owner.ID) != "" {
		return aws.ToString(out.Owner.ID), nil
	}
	if out.Owner != nil && aws.ToString(out.Owner.DisplayName) != "" {
		return aws.ToString(out.Owner.DisplayName), nil
	}
	return "", errors.New("s3probe: the store's ListBuckets names no owner: set Config.AccountOf or NoAccountOf")
}

// refusedUserRE is the caller in AWS's refusals: "User: arn:aws:iam::123456789012:user/path/name
// is not authorized to perform: ...".
var refusedUserRE = regexp.MustCompile(`User: arn:[^:\s]+:iam::[^:\s]*:user/(?:[^\s]*/)?([^/\s]+) is not authorized`)

// refusedUser is the user an AccessDenied names as the caller, or "".
func refusedUser(err error) string {
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "AccessDenied" {
		return ""
	}
	if m := refusedUserRE.FindStringSubmatch(apiErr.ErrorMessage()); m != nil {
		return m[1]
	}
	return ""
}

// outcome turns the result of a request into allowed (nil error), denied, or an error.
func outcome(err error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case denied(err), missingBucket(err):
		return false, nil
	}
	return false, fmt.Errorf("s3probe: %w", err)
}

// denied reports whether err is the store refusing the credentials: AccessDenied, an unknown key
// or a bad signature, or a bare 403 (a store may close the connection on a refused upload before
// the client reads the error body; Ceph RGW does).
func denied(err error) bool {
	return httpStatus(err) == http.StatusForbidden || unknownKey(err) || apiCode(err) == "AccessDenied"
}

// unknownKey reports whether err says the store does not know the key: never issued, deleted or
// revoked.
func unknownKey(err error) bool {
	switch apiCode(err) {
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidClientTokenId":
		return true
	}
	return false
}

// missingBucket reports whether err says the bucket does not exist: NoSuchBucket, or a bare 404
// to a request whose object need not exist (a store may close the connection before the client
// reads the error body; Ceph RGW does on a refused upload).
func missingBucket(err error) bool {
	var noBucket *types.NoSuchBucket
	return errors.As(err, &noBucket) || apiCode(err) == "NoSuchBucket" ||
		(apiCode(err) == "" && httpStatus(err) == http.StatusNotFound)
}

func apiCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

func httpStatus(err error) int {
	var respErr interface{ HTTPStatusCode() int }
	if errors.As(err, &respErr) {
		return respErr.HTTPStatusCode()
	}
	return 0
}

// stsRefused reports whether err is STS refusing a web identity token: the store maps no
// identity to the ServiceAccount (any more).
func stsRefused(err error) bool {
	switch apiCode(err) {
	case "AccessDenied", "InvalidIdentityToken", "IDPRejectedClaim", "ExpiredTokenException", "ExpiredToken":
		return true
	}
	return false
}
