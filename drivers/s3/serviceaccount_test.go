package s3_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/dev/issuer"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/pkg/sanity"
	"github.com/kube-cosi/cosi/pkg/sanity/s3probe"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// keyless is a real kube-apiserver whose ServiceAccount issuer the Versity IAM service can fetch
// (dev/issuer), for the tests of ServiceAccount authentication: the tokens they exchange are
// the API server's, from the TokenRequest API, verified by the IAM service against its keys.
type keyless struct {
	front *issuer.Front
	api   *localenv.APIServer
}

var (
	keylessOnce sync.Once
	keylessEnv  *keyless
	keylessErr  error
)

// keylessBackend returns the Versity back-end and the API server, starting the latter once. The
// test is skipped, saying why, on a machine where no issuer can be published that the IAM
// service would fetch.
func keylessBackend(t *testing.T) (*backend, *keyless) {
	t.Helper()
	b := versityBackend(t)
	keylessOnce.Do(func() {
		front, err := issuer.New()
		if err != nil {
			keylessErr = err
			return
		}
		api, err := localenv.StartAPIServer(localenv.APIServerOptions{Issuer: front})
		if err != nil {
			keylessErr = err
			return
		}
		keylessEnv = &keyless{front: front, api: api}
	})
	if errors.Is(keylessErr, issuer.ErrUnavailable) {
		t.Skipf("ServiceAccount authentication cannot be tested on this machine: %v", keylessErr)
	}
	if keylessErr != nil {
		t.Fatalf("starting the API server with a published issuer: %v", keylessErr)
	}
	return b, keylessEnv
}

// driver returns a driver with ServiceAccount authentication for the API server's issuer.
func (k *keyless) driver(t *testing.T, b *backend) *s3.Driver {
	t.Helper()
	d, err := s3.New(s3.Config{
		Endpoint: b.s3Endpoint, Credentials: b.creds, Accounts: b.newAccount(),
		ServiceAccounts: &s3.ServiceAccountAuth{
			Issuer: k.front.URL, IssuerThumbprints: []string{k.front.Thumbprint}, STSEndpoint: versityStore.IAMEndpoint,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// assume does what a workload's AWS SDK does with the Secret of a ServiceAccount access and its
// Pod's projected token: a web identity credential provider reads a token of the ServiceAccount
// namespace/name for audience from a file and exchanges it at the STS endpoint for temporary
// credentials of the role (AssumeRoleWithWebIdentity), while the issuer is published.
func (k *keyless) assume(
	t *testing.T, creds *cosiproto.CredentialInfo, namespace, name, audience string,
) (aws.Credentials, error) {
	t.Helper()
	return k.assumeIn(t.Context(), t.TempDir(), creds, namespace, name, audience)
}

// assumeIn is assume with the token file in dir, for callers outside the test's goroutine.
func (k *keyless) assumeIn(
	ctx context.Context, dir string, creds *cosiproto.CredentialInfo, namespace, name, audience string,
) (aws.Credentials, error) {
	token, err := k.api.ServiceAccountToken(ctx, namespace, name, audience)
	if err != nil {
		return aws.Credentials{}, err
	}
	file := filepath.Join(dir, namespace+"-"+name+"-token")
	if err := os.WriteFile(file, []byte(token), 0o600); err != nil {
		return aws.Credentials{}, err
	}
	client := sts.New(sts.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(creds.GetS3().GetStsEndpoint()), RetryMaxAttempts: 1,
	})
	provider := stscreds.NewWebIdentityRoleProvider(client, creds.GetS3().GetRoleArn(), stscreds.IdentityTokenFile(file),
		func(o *stscreds.WebIdentityRoleOptions) { o.RoleSessionName = "cosi-test" })
	var got aws.Credentials
	err = k.front.Serve(ctx, func(ctx context.Context) error {
		var err error
		got, err = provider.Retrieve(ctx)
		return err
	})
	return got, err
}

// sessionAccess is an access as a workload holding the role's temporary credentials sees it.
func sessionAccess(creds aws.Credentials, info *cosiproto.ProtocolBucketInfo) *access {
	c := userClient(nil, info)
	return &access{client: awss3.New(c.Options(), func(o *awss3.Options) {
		o.Credentials = credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken)
	})}
}

// saGrant is a ServiceAccount grant of modes on buckets to namespace/name.
func saGrant(id, namespace, name string, modes *cosiproto.AccessModes, buckets ...string,
) *cosiproto.DriverGrantBucketAccessRequest {
	req := &cosiproto.DriverGrantBucketAccessRequest{
		AccountId: id, Protocol: cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_SERVICE_ACCOUNT,
		ServiceAccount:     &cosiproto.ServiceAccount{Namespace: namespace, Name: name},
	}
	for _, b := range buckets {
		req.Buckets = append(req.Buckets, &cosiproto.AccessedBucket{BucketId: b, AccessModes: modes})
	}
	return req
}

func saRevoke(req *cosiproto.DriverGrantBucketAccessRequest) *cosiproto.DriverRevokeBucketAccessRequest {
	r := &cosiproto.DriverRevokeBucketAccessRequest{
		AccountId: req.GetAccountId(), Protocol: req.GetProtocol(), AuthenticationType: req.GetAuthenticationType(),
		ServiceAccount: req.GetServiceAccount(),
	}
	for _, b := range req.GetBuckets() {
		r.Buckets = append(r.Buckets, &cosiproto.DriverRevokeBucketAccessRequest_Bucket{BucketId: b.GetBucketId()})
	}
	return r
}

// readWriteData grants object data read and write.
var readWriteData = &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}

func uniqueName(prefix string) string { return prefix + "-" + strings.ToLower(rand.Text()[:10]) }

// TestServiceAccountAccess grants buckets to ServiceAccounts and checks, with tokens of the API
// server exchanged at the IAM service, that each ServiceAccount's session can do exactly what its
// access modes say, in the granted bucket only, and that the Secret's data holds no key.
func TestServiceAccountAccess(t *testing.T) {
	b, k := keylessBackend(t)
	_, p := serve(t, k.driver(t, b), logr.Discard())
	ctx := t.Context()
	bucket, other := createBucket(t, p, nil), createBucket(t, p, nil)
	for _, bk := range []string{bucket, other} {
		if _, err := b.admin.PutObject(ctx, &awss3.PutObjectInput{
			Bucket: aws.String(bk), Key: aws.String("seed"), Body: strings.NewReader("seed"),
		}); err != nil {
			t.Fatal(err)
		}
	}
	ns := uniqueName("team")

	rwReq := saGrant(uniqueName("ba"), ns, "writer", &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE},
		bucket)
	rwResp, err := p.DriverGrantBucketAccess(ctx, rwReq)
	if err != nil {
		t.Fatal(err)
	}
	creds := rwResp.GetCredentials().GetS3()
	if creds.GetAccessKeyId() != "" || creds.GetAccessSecretKey() != "" {
		t.Errorf("a ServiceAccount grant returned a key pair")
	}
	if !strings.Contains(creds.GetRoleArn(), ":role/") || creds.GetStsEndpoint() != versityStore.IAMEndpoint ||
		creds.GetWebIdentityTokenFile() != s3.DefaultTokenFile {
		t.Errorf("web identity: role %q, STS endpoint %q, token file %q", creds.GetRoleArn(), creds.GetStsEndpoint(),
			creds.GetWebIdentityTokenFile())
	}
	if rwResp.GetCredentialId() != "" {
		t.Errorf("credential_id %q: a ServiceAccount access has no key to rotate", rwResp.GetCredentialId())
	}
	session, err := k.assume(t, rwResp.GetCredentials(), ns, "writer", s3.DefaultName)
	if err != nil {
		t.Fatalf("exchanging the ServiceAccount's token: %v", err)
	}
	rw := sessionAccess(session, rwResp.GetBuckets()[0].GetBucketInfo())
	expect(t, "ReadWrite put", true, put(rw, bucket, "rw"))
	expect(t, "ReadWrite get", true, get(rw, bucket, "rw"))
	expect(t, "ReadWrite list", true, list(rw, bucket))
	expect(t, "ReadWrite delete", true, del(rw, bucket, "rw"))
	expect(t, "ReadWrite put into a bucket it was not granted", false, put(rw, other, "x"))
	expect(t, "ReadWrite get from a bucket it was not granted", false, get(rw, other, "seed"))
	_, err = rw.client.PutBucketTagging(ctx, &awss3.PutBucketTaggingInput{
		Bucket: aws.String(bucket), Tagging: &types.Tagging{TagSet: []types.Tag{}},
	})
	expect(t, "ReadWrite of object data writing bucket metadata", false, err)
	_, err = rw.client.DeleteBucket(ctx, &awss3.DeleteBucketInput{Bucket: aws.String(bucket)})
	expect(t, "ReadWrite deleting the bucket", false, err)

	roReq := saGrant(uniqueName("ba"), ns, "reader", &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_ONLY},
		bucket)
	roResp, err := p.DriverGrantBucketAccess(ctx, roReq)
	if err != nil {
		t.Fatal(err)
	}
	session, err = k.assume(t, roResp.GetCredentials(), ns, "reader", s3.DefaultName)
	if err != nil {
		t.Fatalf("exchanging the ServiceAccount's token: %v", err)
	}
	ro := sessionAccess(session, roResp.GetBuckets()[0].GetBucketInfo())
	expect(t, "ReadOnly get", true, get(ro, bucket, "seed"))
	expect(t, "ReadOnly put", false, put(ro, bucket, "ro"))
	expect(t, "ReadOnly delete", false, del(ro, bucket, "seed"))
	expect(t, "ReadOnly get from a bucket it was not granted", false, get(ro, other, "seed"))

	for _, req := range []*cosiproto.DriverGrantBucketAccessRequest{rwReq, roReq} {
		if _, err := p.DriverRevokeBucketAccess(ctx, saRevoke(req)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestServiceAccountTrustsOnlyItsServiceAccount exchanges tokens that must not open the role: of
// another ServiceAccount of the namespace, of a ServiceAccount of the same name in another
// namespace, and of the ServiceAccount itself for another audience. The IAM service refuses each,
// and the right token still works.
func TestServiceAccountTrustsOnlyItsServiceAccount(t *testing.T) {
	b, k := keylessBackend(t)
	_, p := serve(t, k.driver(t, b), logr.Discard())
	ctx := t.Context()
	bucket := createBucket(t, p, nil)
	ns := uniqueName("team")
	req := saGrant(uniqueName("ba"), ns, "app", readWriteData, bucket)
	resp, err := p.DriverGrantBucketAccess(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.DriverRevokeBucketAccess(context.Background(), saRevoke(req)) })
	for _, tc := range []struct{ what, namespace, name, audience string }{
		{"another ServiceAccount of the namespace", ns, "other", s3.DefaultName},
		{"the same ServiceAccount name in another namespace", uniqueName("elsewhere"), "app", s3.DefaultName},
		{"the ServiceAccount, for another audience", ns, "app", "sts.amazonaws.com"},
	} {
		if _, err := k.assume(t, resp.GetCredentials(), tc.namespace, tc.name, tc.audience); err == nil {
			t.Errorf("a token of %s was exchanged for the role's credentials", tc.what)
		}
	}
	session, err := k.assume(t, resp.GetCredentials(), ns, "app", s3.DefaultName)
	if err != nil {
		t.Fatalf("the ServiceAccount's own token: %v", err)
	}
	ok := sessionAccess(session, resp.GetBuckets()[0].GetBucketInfo())
	expect(t, "put with the ServiceAccount's session", true, put(ok, bucket, "ok"))
}

// TestServiceAccountRevoke revokes a ServiceAccount access: a new exchange of the ServiceAccount's
// token fails, the session obtained before can no longer put, the role is gone from the
// identities the driver lists, and revoking again is OK.
func TestServiceAccountRevoke(t *testing.T) {
	b, k := keylessBackend(t)
	_, p := serve(t, k.driver(t, b), logr.Discard())
	ctx := t.Context()
	bucket := createBucket(t, p, nil)
	ns := uniqueName("team")
	req := saGrant(uniqueName("ba"), ns, "app", readWriteData, bucket)
	resp, err := p.DriverGrantBucketAccess(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	session, err := k.assume(t, resp.GetCredentials(), ns, "app", s3.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	before := sessionAccess(session, resp.GetBuckets()[0].GetBucketInfo())
	expect(t, "put before revoke", true, put(before, bucket, "before"))
	for range 2 {
		if _, err := p.DriverRevokeBucketAccess(ctx, saRevoke(req)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := k.assume(t, resp.GetCredentials(), ns, "app", s3.DefaultName); err == nil {
		t.Errorf("the ServiceAccount's token was exchanged after revoke")
	}
	expect(t, "put with the session obtained before revoke", false, put(before, bucket, "after"))
	ids, err := b.newAccount().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if strings.HasSuffix(id, req.GetAccountId()) {
			t.Errorf("identity %q still exists after revoke", id)
		}
	}
}

// TestServiceAccountGrantIsIdempotent repeats a ServiceAccount grant (the same answer), and
// grants the same account ID otherwise: other access modes, another ServiceAccount, or a key.
// Each of those is AlreadyExists, and the first grant still works.
func TestServiceAccountGrantIsIdempotent(t *testing.T) {
	b, k := keylessBackend(t)
	_, p := serve(t, k.driver(t, b), logr.Discard())
	ctx := t.Context()
	bucket := createBucket(t, p, nil)
	ns := uniqueName("team")
	rw := &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}
	req := saGrant(uniqueName("ba"), ns, "app", rw, bucket)
	first, err := p.DriverGrantBucketAccess(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.DriverRevokeBucketAccess(context.Background(), saRevoke(req)) })
	again, err := p.DriverGrantBucketAccess(ctx, req)
	if err != nil {
		t.Fatalf("repeating the grant: %v", err)
	}
	if first.GetCredentials().GetS3().GetRoleArn() != again.GetCredentials().GetS3().GetRoleArn() {
		t.Errorf("a repeated grant answered role %q, first %q", again.GetCredentials().GetS3().GetRoleArn(),
			first.GetCredentials().GetS3().GetRoleArn())
	}

	readOnly := &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_ONLY}
	otherModes := saGrant(req.GetAccountId(), ns, "app", readOnly, bucket)
	otherSA := saGrant(req.GetAccountId(), ns, "intruder", rw, bucket)
	otherNS := saGrant(req.GetAccountId(), uniqueName("elsewhere"), "app", rw, bucket)
	for what, r := range map[string]*cosiproto.DriverGrantBucketAccessRequest{
		"other access modes": otherModes, "another ServiceAccount": otherSA, "another namespace": otherNS,
	} {
		if _, err := p.DriverGrantBucketAccess(ctx, r); status.Code(err) != codes.AlreadyExists {
			t.Errorf("the account ID granted again with %s: %v, want AlreadyExists", what, err)
		}
	}
	asKey := saGrant(req.GetAccountId(), "", "", rw, bucket)
	asKey.AuthenticationType, asKey.ServiceAccount = cosiproto.AuthenticationType_KEY, nil
	if _, err := p.DriverGrantBucketAccess(ctx, asKey); status.Code(err) != codes.AlreadyExists {
		t.Errorf("the account ID granted again with a key: %v, want AlreadyExists", err)
	}
	keyFirst := grant(t, p, rw, bucket)
	if _, err := p.DriverGrantBucketAccess(ctx, saGrant(keyFirst.id, ns, "app", rw, bucket)); status.Code(err) !=
		codes.AlreadyExists {
		t.Errorf("a key access's account ID granted again to a ServiceAccount: %v, want AlreadyExists", err)
	}
	revoke(t, p, keyFirst)

	session, err := k.assume(t, first.GetCredentials(), ns, "app", s3.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "put with the first grant's role after the refused ones", true,
		put(sessionAccess(session, first.GetBuckets()[0].GetBucketInfo()), bucket, "still"))
	ids, err := b.newAccount().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids = slices.DeleteFunc(ids, func(id string) bool { return !strings.HasSuffix(id, req.GetAccountId()) })
	if n := len(ids); n != 1 {
		t.Errorf("%d identities for account ID %s, want 1", n, req.GetAccountId())
	}
}

// TestServiceAccountRefusedWithoutIssuer checks that a driver not configured for ServiceAccount
// authentication refuses it with InvalidArgument, naming what to configure, and that a
// ServiceAccount grant without the ServiceAccount is InvalidArgument.
func TestServiceAccountRefusedWithoutIssuer(t *testing.T) {
	b := versityBackend(t)
	_, p := serve(t, b.newDriver(t, ""), logr.Discard())
	bucket := createBucket(t, p, nil)
	rw := &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}
	_, err := p.DriverGrantBucketAccess(t.Context(), saGrant(uniqueName("ba"), "team", "app", rw, bucket))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "issuer") {
		t.Errorf("a ServiceAccount grant to a driver without an issuer: %v, want InvalidArgument naming the issuer", err)
	}
	_, k := keylessBackend(t)
	_, p = serve(t, k.driver(t, b), logr.Discard())
	for what, sa := range map[string]*cosiproto.ServiceAccount{
		"no ServiceAccount": nil, "no namespace": {Name: "app"}, "no name": {Namespace: "team"},
		"a name that is no ServiceAccount name": {Namespace: "team", Name: "App*"},
	} {
		req := saGrant(uniqueName("ba"), "", "", rw, bucket)
		req.ServiceAccount = sa
		if _, err := p.DriverGrantBucketAccess(t.Context(), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("a ServiceAccount grant with %s: %v, want InvalidArgument", what, err)
		}
	}
}

// TestSanityServiceAccount runs cosi-sanity's ServiceAccount cases against the driver with
// ServiceAccount authentication on Versity, with the probe an S3 vendor imports acting as the
// ServiceAccount: it exchanges a token of the API server for the role the grant returned. Each
// case must run and pass: none may be skipped.
func TestSanityServiceAccount(t *testing.T) {
	b, k := keylessBackend(t)
	var logs logBuffer
	endpoint, _ := serve(t, k.driver(t, b), logs.logger())
	dir := t.TempDir()
	probe, err := s3probe.New(s3probe.Config{
		Endpoint: b.s3Endpoint, Credentials: b.creds, Accounts: b.newAccount().List,
		ServiceAccount: func(
			ctx context.Context, sa *cosiproto.ServiceAccount, creds *cosiproto.CredentialInfo,
		) (aws.CredentialsProvider, error) {
			session, err := k.assumeIn(ctx, dir, creds, sa.GetNamespace(), sa.GetName(), s3.DefaultName)
			if err != nil {
				return nil, err
			}
			return credentials.StaticCredentialsProvider{Value: session}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	results, err := sanity.Run(t.Context(), sanity.Config{
		Endpoint:         endpoint,
		Run:              regexp.MustCompile("ServiceAccount"),
		BucketParameters: map[string]string{s3.ParamPurgeOnDelete: "true"},
		DriverLogs:       logs.bytes,
		Probe:            probe.Probe(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) < 4 {
		t.Errorf("%d ServiceAccount cases ran, want at least 4", len(results))
	}
	for _, r := range results {
		if r.Status != sanity.Passed {
			t.Errorf("%s: %s: %s", r.Name, r.Status, r.Message)
		}
	}
}
