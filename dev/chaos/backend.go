package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/store/versity"
	"github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// backend is the object store as the audit sees it from its own side, not through COSI, and
// what the harness does there as the store's admin.
type backend interface {
	// snapshot reads the store's buckets and accounts.
	snapshot(ctx context.Context) (*backendState, error)
	// importBuckets creates buckets, as an admin does before importing them into COSI.
	importBuckets(ctx context.Context, ids []string) error
	// widen grants the account of a provisioned access (account, one of its backend accounts) one
	// more bucket, behind COSI's back (the self-check).
	widen(ctx context.Context, d *driverclient.Client, a *cosiapi.BucketAccess, account, bucketID string) error
	// deleteBucket deletes a provisioned bucket, and whatever it holds, behind COSI's back (the
	// self-check).
	deleteBucket(ctx context.Context, d *driverclient.Client, bucketID string) error
}

// backendState is the store at one moment.
type backendState struct {
	buckets  map[string]bool
	accounts []string
	// grants returns the buckets an account was granted, for the report; nil when unknown.
	grants func(account string) []string
	// allowed reports whether creds open bucketID, reading or writing data; an error means the
	// store did not say.
	allowed func(ctx context.Context, creds *cosiproto.CredentialInfo, bucketID string, write bool) (bool, error)
	// keys returns an account's valid keys, as keyID names them.
	keys func(ctx context.Context, account string) ([]backendKey, error)
	// keyID names the key of creds, as keys does.
	keyID func(creds *cosiproto.CredentialInfo) string
	// credentialID is the credential_id that the driver names the key of creds by: the audit
	// tells keys apart by their material, never by the Secrets' annotation, which anyone who can
	// write the Secret can change.
	credentialID func(creds *cosiproto.CredentialInfo) string
	// reach returns the buckets that the account's grants name; "*" for any.
	reach func(ctx context.Context, account string) ([]string, error)
}

// backendKey is one key of an account.
type backendKey struct {
	// id is compared with backendState.keyID; name is what the report shows (never the secret);
	// credential is the credential ID the driver names it by (backendState.credentialID); account
	// the account it is a key of.
	id, name, credential, account string
	created                       time.Time
}

// memoryBackend is cosi-driver-memory's state file, read as the driver reads it after a restart.
type memoryBackend struct{ r *run }

func (m memoryBackend) snapshot(context.Context) (*backendState, error) {
	d, err := memory.New(memory.Config{StateFile: m.r.stateFile})
	if err != nil {
		return nil, err
	}
	b := d.Backend()
	st := &backendState{buckets: map[string]bool{}, accounts: b.Accounts(), grants: b.AccountBuckets,
		allowed: func(_ context.Context, creds *cosiproto.CredentialInfo, bucketID string, write bool) (bool, error) {
			return b.Allowed(creds, bucketID, memory.ObjectData, write), nil
		},
		// The memory driver derives the key ID from the account: the secret tells keys apart.
		keyID: func(creds *cosiproto.CredentialInfo) string {
			sum := sha256.Sum256([]byte(creds.GetS3().GetAccessKeyId() + "\x00" + creds.GetS3().GetAccessSecretKey()))
			return hex.EncodeToString(sum[:8])
		},
		reach:        func(_ context.Context, account string) ([]string, error) { return b.AccountBuckets(account), nil },
		credentialID: b.CredentialID,
	}
	st.keys = func(_ context.Context, account string) ([]backendKey, error) {
		creds := b.AccountKeys(account)
		var out []backendKey
		for i, c := range creds {
			out = append(out, backendKey{id: st.keyID(c), name: [...]string{"its key", "its previous key"}[min(i, 1)],
				credential: b.CredentialID(c), account: account, created: time.Unix(int64(len(creds)-i), 0)})
		}
		return out, nil
	}
	for _, id := range b.Buckets() {
		st.buckets[id] = true
	}
	return st, nil
}

// importBuckets creates the buckets through the driver: the memory driver has no other door.
func (m memoryBackend) importBuckets(ctx context.Context, ids []string) error {
	d, err := m.r.driverClient(ctx)
	if err != nil {
		return err
	}
	defer d.Close()
	for _, id := range ids {
		if _, err := d.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{
			BucketId: id, Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3},
		}); err != nil {
			return fmt.Errorf("creating the imported bucket %s: %w", id, err)
		}
	}
	return nil
}

// widen revokes the account and grants it again with one bucket more: the memory driver has no
// other door, and it refuses to change an account's grant in place.
func (memoryBackend) widen(
	ctx context.Context, d *driverclient.Client, a *cosiapi.BucketAccess, _, bucketID string,
) error {
	req := grantRequest(a)
	revoke := &cosiproto.DriverRevokeBucketAccessRequest{AccountId: req.AccountId, Protocol: req.Protocol,
		AuthenticationType: req.AuthenticationType}
	for _, b := range req.Buckets {
		revoke.Buckets = append(revoke.Buckets, &cosiproto.DriverRevokeBucketAccessRequest_Bucket{BucketId: b.BucketId})
	}
	if _, err := d.DriverRevokeBucketAccess(ctx, revoke); err != nil {
		return err
	}
	req.Buckets = append(req.Buckets, &cosiproto.AccessedBucket{BucketId: bucketID,
		AccessModes: &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_ONLY}})
	_, err := d.DriverGrantBucketAccess(ctx, req)
	return err
}

// deleteBucket deletes the bucket through the driver, which deletes it whatever it holds.
func (memoryBackend) deleteBucket(ctx context.Context, d *driverclient.Client, bucketID string) error {
	_, err := d.DriverDeleteBucket(ctx, &cosiproto.DriverDeleteBucketRequest{BucketId: bucketID})
	return err
}

// s3Backend is the Versity gateway and its IAM service, asked with the root credentials; keys are
// tried with real S3 requests.
type s3Backend struct {
	admin *awss3.Client
	iam   *s3.IAMAccounts
	// iamAdmin asks the IAM service what the driver's own client does not: keys and policies.
	iamAdmin *iam.Client
	// refused remembers the keys the store said it does not know (InvalidAccessKeyId): a deleted
	// key does not come back (COSI never makes a key Inactive), and the converging audit asks
	// again every second. Any other refusal may be transient (a 500 from a gateway or IAM service
	// that restarts, a policy not yet written) and is asked again.
	mu      sync.Mutex
	refused map[string]bool
	// failing are the access key IDs whose next request is answered with a 500 (failNext).
	failing map[string]bool
	// noCredentialIDs: the driver names no credential (a v1alpha1 driver: its protocol has no
	// credential_id), so the sidecar records none and annotates no Secret with one.
	noCredentialIDs bool
}

// failNext has the next request that tries the key answered with a 500, as a gateway that
// restarts would answer (the self-check).
func (b *s3Backend) failNext(accessKeyID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failing[accessKeyID] = true
}

// internalError answers every request with the S3 error InternalError (HTTP 500).
type internalError struct{}

func (internalError) Do(req *http.Request) (*http.Response, error) {
	const body = `<?xml version="1.0" encoding="UTF-8"?>` +
		`<Error><Code>InternalError</Code><Message>We encountered an internal error. Please try again.</Message></Error>`
	return &http.Response{StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error",
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: req, ContentLength: int64(len(body)),
		Header: http.Header{"Content-Type": {"application/xml"}}, Body: io.NopCloser(strings.NewReader(body))}, nil
}

func newS3Backend(store *versity.Store) *s3Backend {
	creds := credentials.NewStaticCredentialsProvider(store.RootAccessKey, store.RootSecretKey, "")
	return &s3Backend{
		admin: s3.NewS3Client(store.S3Endpoint, "us-east-1", creds, nil),
		iam:   s3.NewIAMAccounts(store.IAMEndpoint, creds, nil),
		iamAdmin: iam.New(iam.Options{Region: "us-east-1", Credentials: creds,
			BaseEndpoint: aws.String(store.IAMEndpoint)}),
		refused: map[string]bool{}, failing: map[string]bool{},
	}
}

func (b *s3Backend) snapshot(ctx context.Context) (*backendState, error) {
	// The S3 driver names a key by its access key ID (drivers/s3, rotation.go).
	accessKeyID := func(creds *cosiproto.CredentialInfo) string { return creds.GetS3().GetAccessKeyId() }
	st := &backendState{buckets: map[string]bool{}, allowed: b.allowed, keys: b.keys, reach: b.reach,
		keyID: accessKeyID, credentialID: accessKeyID}
	if b.noCredentialIDs {
		st.credentialID = func(*cosiproto.CredentialInfo) string { return "" }
	}
	out, err := b.admin.ListBuckets(ctx, &awss3.ListBucketsInput{})
	if err != nil {
		return nil, fmt.Errorf("listing the store's buckets: %w", err)
	}
	for _, bucket := range out.Buckets {
		st.buckets[aws.ToString(bucket.Name)] = true
	}
	if st.accounts, err = b.iam.List(ctx); err != nil {
		return nil, fmt.Errorf("listing the store's IAM users: %w", err)
	}
	return st, nil
}

// allowed tries the key: a read lists the bucket, a write puts an object. The store's refusal is
// an answer. A server error (5xx: a gateway or IAM service that restarts) is none: the request is
// tried again, a few times; a request that got no answer is an error.
func (b *s3Backend) allowed(
	ctx context.Context,
	creds *cosiproto.CredentialInfo,
	bucketID string,
	write bool,
) (bool, error) {
	key := fmt.Sprintf("%s/%s/%s/%v", creds.GetS3().GetAccessKeyId(), creds.GetS3().GetAccessSecretKey(), bucketID,
		write)
	b.mu.Lock()
	refused := b.refused[key]
	b.mu.Unlock()
	if refused {
		return false, nil
	}
	var err error
	for attempt := range 5 {
		if attempt > 0 {
			sleep(ctx, time.Duration(attempt)*200*time.Millisecond)
		}
		if err = b.try(ctx, creds, bucketID, write); !serverError(err) {
			break
		}
	}
	var apiErr smithy.APIError
	switch {
	case err == nil:
		return true, nil
	case serverError(err):
	case errors.As(err, &apiErr):
		if apiErr.ErrorCode() == "InvalidAccessKeyId" {
			b.mu.Lock()
			b.refused[key] = true
			b.mu.Unlock()
		}
		return false, nil
	}
	return false, fmt.Errorf("trying key %s on bucket %s: %w", creds.GetS3().GetAccessKeyId(), bucketID, err)
}

// try sends one request with the key.
func (b *s3Backend) try(ctx context.Context, creds *cosiproto.CredentialInfo, bucketID string, write bool) error {
	opts := awss3.Options{
		BaseEndpoint: b.admin.Options().BaseEndpoint, Region: "us-east-1", UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(creds.GetS3().GetAccessKeyId(),
			creds.GetS3().GetAccessSecretKey(), ""),
		RetryMaxAttempts:           1,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}
	b.mu.Lock()
	if b.failing[creds.GetS3().GetAccessKeyId()] {
		delete(b.failing, creds.GetS3().GetAccessKeyId())
		opts.HTTPClient = internalError{}
	}
	b.mu.Unlock()
	c := awss3.New(opts)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var err error
	if write {
		_, err = c.PutObject(ctx, &awss3.PutObjectInput{Bucket: aws.String(bucketID), Key: aws.String("cosi-chaos"),
			Body: strings.NewReader("chaos")})
	} else {
		_, err = c.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: aws.String(bucketID), MaxKeys: aws.Int32(1)})
	}
	return err
}

// serverError reports whether the store answered with a server error (HTTP 5xx).
func serverError(err error) bool {
	var resp *smithyhttp.ResponseError
	return errors.As(err, &resp) && resp.HTTPStatusCode() >= http.StatusInternalServerError
}

// importBuckets creates the buckets with the store's root credentials, as an admin does.
func (b *s3Backend) importBuckets(ctx context.Context, ids []string) error {
	for _, id := range ids {
		if _, err := b.admin.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(id)}); err != nil {
			return fmt.Errorf("creating the imported bucket %s: %w", id, err)
		}
	}
	return nil
}

// deleteBucket empties the bucket with the store's root credentials, then deletes it through the
// driver, which refuses to delete a bucket that holds objects: the audit put one with every kept
// access's key that may write.
func (b *s3Backend) deleteBucket(ctx context.Context, d *driverclient.Client, bucketID string) error {
	pages := awss3.NewListObjectsV2Paginator(b.admin, &awss3.ListObjectsV2Input{Bucket: aws.String(bucketID)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("listing the objects of bucket %s: %w", bucketID, err)
		}
		for _, o := range page.Contents {
			if _, err := b.admin.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: aws.String(bucketID),
				Key: o.Key}); err != nil {
				return fmt.Errorf("deleting object %s of bucket %s: %w", aws.ToString(o.Key), bucketID, err)
			}
		}
	}
	_, err := d.DriverDeleteBucket(ctx, &cosiproto.DriverDeleteBucketRequest{BucketId: bucketID})
	return err
}

// widen gives the account's IAM user a second inline policy, as an admin would.
func (b *s3Backend) widen(
	ctx context.Context, _ *driverclient.Client, _ *cosiapi.BucketAccess, account, bucketID string,
) error {
	doc := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:ListBucket"],` +
		`"Resource":"arn:aws:s3:::` + bucketID + `"}]}`
	_, err := b.iamAdmin.PutUserPolicy(ctx, &iam.PutUserPolicyInput{UserName: aws.String(account),
		PolicyName: aws.String("planted"), PolicyDocument: aws.String(doc)})
	return err
}

// keys lists the user's active access keys.
func (b *s3Backend) keys(ctx context.Context, user string) ([]backendKey, error) {
	out, err := b.iamAdmin.ListAccessKeys(ctx, &iam.ListAccessKeysInput{UserName: aws.String(user)})
	if noSuchEntity(err) {
		return nil, nil // revoked since the users were listed
	}
	if err != nil {
		return nil, fmt.Errorf("listing the access keys of IAM user %s: %w", user, err)
	}
	var keys []backendKey
	for _, k := range out.AccessKeyMetadata {
		if k.Status == iamtypes.StatusTypeInactive {
			continue
		}
		id := aws.ToString(k.AccessKeyId)
		keys = append(keys, backendKey{id: id, name: id, credential: id, account: user,
			created: aws.ToTime(k.CreateDate)})
	}
	return keys, nil
}

// reach reads every inline policy of the user and returns the buckets their Allow statements
// name. A policy that cannot be read names "(unreadable policy NAME)": it may grant anything.
func (b *s3Backend) reach(ctx context.Context, user string) ([]string, error) {
	var names []string
	pages := iam.NewListUserPoliciesPaginator(b.iamAdmin, &iam.ListUserPoliciesInput{UserName: aws.String(user)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if noSuchEntity(err) {
			return nil, nil // revoked since the users were listed
		}
		if err != nil {
			return nil, fmt.Errorf("listing the policies of IAM user %s: %w", user, err)
		}
		names = append(names, page.PolicyNames...)
	}
	reach := map[string]bool{}
	for _, name := range names {
		out, err := b.iamAdmin.GetUserPolicy(ctx, &iam.GetUserPolicyInput{UserName: aws.String(user),
			PolicyName: aws.String(name)})
		if noSuchEntity(err) {
			continue // deleted since it was listed
		}
		if err != nil {
			return nil, fmt.Errorf("reading the policy %s of IAM user %s: %w", name, user, err)
		}
		doc := aws.ToString(out.PolicyDocument)
		if unescaped, err := url.QueryUnescape(doc); err == nil {
			doc = unescaped // IAM returns the document URL-encoded
		}
		buckets, ok := policyBuckets(doc)
		if !ok {
			reach["(unreadable policy "+name+")"] = true
		}
		for _, bucket := range buckets {
			reach[bucket] = true
		}
	}
	return slices.Sorted(maps.Keys(reach)), nil
}

// policyBuckets returns the buckets that an identity policy's Allow statements name: the bucket of
// each S3 ARN in Resource, "*" for a wildcard or a NotResource. Resource and Action may be a
// string or a list.
func policyBuckets(doc string) ([]string, bool) {
	var p struct {
		Statement []struct {
			Effect      string
			Resource    json.RawMessage
			NotResource json.RawMessage
		}
	}
	if err := json.Unmarshal([]byte(doc), &p); err != nil {
		return nil, false
	}
	var out []string
	for _, st := range p.Statement {
		if st.Effect != "Allow" {
			continue
		}
		if len(st.NotResource) > 0 {
			out = append(out, "*")
			continue
		}
		var resources []string
		if json.Unmarshal(st.Resource, &resources) != nil {
			var one string
			if json.Unmarshal(st.Resource, &one) != nil {
				return nil, false
			}
			resources = []string{one}
		}
		for _, r := range resources {
			bucket, _, _ := strings.Cut(strings.TrimPrefix(r, "arn:aws:s3:::"), "/")
			if bucket == "" || strings.ContainsAny(bucket, "*?") || !strings.HasPrefix(r, "arn:aws:s3:::") {
				bucket = "*"
			}
			out = append(out, bucket)
		}
	}
	return out, true
}

// noSuchEntity reports whether IAM answered that the user or policy does not exist: the audit
// reads the store while COSI still revokes, until it converges.
func noSuchEntity(err error) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "NoSuchEntity"
}
