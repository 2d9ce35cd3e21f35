package s3_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/drivers/s3"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// exchange presents token, as it is, at the STS endpoint of creds for the role of creds
// (AssumeRoleWithWebIdentity), with duration seconds of session when it is not zero and the
// session policy sessionPolicy when it is not empty, while the issuer is published.
func (k *keyless) exchange(
	ctx context.Context, creds *cosiproto.CredentialInfo, token string, duration int32, sessionPolicy string,
) (aws.Credentials, error) {
	client := sts.New(sts.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(creds.GetS3().GetStsEndpoint()), RetryMaxAttempts: 1,
	})
	in := &sts.AssumeRoleWithWebIdentityInput{
		RoleArn: aws.String(creds.GetS3().GetRoleArn()), RoleSessionName: aws.String("cosi-attack"),
		WebIdentityToken: aws.String(token),
	}
	if duration != 0 {
		in.DurationSeconds = aws.Int32(duration)
	}
	if sessionPolicy != "" {
		in.Policy = aws.String(sessionPolicy)
	}
	var got aws.Credentials
	err := k.front.Serve(ctx, func(ctx context.Context) error {
		out, err := client.AssumeRoleWithWebIdentity(ctx, in)
		if err != nil {
			return err
		}
		c := out.Credentials
		got = aws.Credentials{
			AccessKeyID: aws.ToString(c.AccessKeyId), SecretAccessKey: aws.ToString(c.SecretAccessKey),
			SessionToken: aws.ToString(c.SessionToken),
		}
		return nil
	})
	return got, err
}

// TestServiceAccountRevokeWhateverTheType revokes an access with the other authentication type
// than it was granted with. This sidecar sends the type it recorded from
// BucketAccess.status.authenticationType, which cannot change once set; but a revoke must not
// depend on it: a record lost or restored, or another sidecar, would leave a role that keeps
// opening the buckets to the ServiceAccount's tokens, or a key user whose key never expires. One
// account ID is one identity, so the driver deletes whichever exists.
func TestServiceAccountRevokeWhateverTheType(t *testing.T) {
	b, k := keylessBackend(t)
	_, p := serve(t, k.driver(t, b), logr.Discard())
	ctx := t.Context()
	bucket := createBucket(t, p, nil)
	ns := uniqueName("team")

	saReq := saGrant(uniqueName("ba"), ns, "app", readWriteData, bucket)
	resp, err := p.DriverGrantBucketAccess(ctx, saReq)
	if err != nil {
		t.Fatal(err)
	}
	asKey := saRevoke(saReq)
	asKey.AuthenticationType, asKey.ServiceAccount = cosiproto.AuthenticationType_KEY, nil
	if _, err := p.DriverRevokeBucketAccess(ctx, asKey); err != nil {
		t.Fatal(err)
	}
	if _, err := k.assume(t, resp.GetCredentials(), ns, "app", s3.DefaultName); err == nil {
		t.Errorf("the ServiceAccount's token opened the role after a revoke of the access as a key access")
	}

	key := grant(t, p, readWriteData, bucket)
	expect(t, "put with the key", true, put(key, bucket, "key"))
	asSA := &cosiproto.DriverRevokeBucketAccessRequest{
		AccountId: key.id, Protocol: cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_SERVICE_ACCOUNT,
		ServiceAccount:     &cosiproto.ServiceAccount{Namespace: ns, Name: "app"},
		Buckets:            []*cosiproto.DriverRevokeBucketAccessRequest_Bucket{{BucketId: bucket}},
	}
	if _, err := p.DriverRevokeBucketAccess(ctx, asSA); err != nil {
		t.Fatal(err)
	}
	expect(t, "put with the key after a revoke of the access as a ServiceAccount access", false,
		put(key, bucket, "after"))

	ids, err := b.newAccount().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if strings.HasSuffix(id, saReq.GetAccountId()) || strings.HasSuffix(id, key.id) {
			t.Errorf("identity %q still exists after its access was revoked", id)
		}
	}
}

// TestServiceAccountSubjectsDoNotCollide grants namespace N-x ServiceAccount y-z and exchanges
// tokens whose subjects differ from the granted one only around a separator, or by a prefix or a
// suffix: namespace N-x-y ServiceAccount z (the same characters, the colon moved), the name's
// prefix y, and the longer names y-z-w and y-z.w. The trust policy compares the whole subject
// (StringEquals), so each is refused.
func TestServiceAccountSubjectsDoNotCollide(t *testing.T) {
	b, k := keylessBackend(t)
	_, p := serve(t, k.driver(t, b), logr.Discard())
	ctx := t.Context()
	bucket := createBucket(t, p, nil)
	ns := uniqueName("team")
	req := saGrant(uniqueName("ba"), ns+"-x", "y-z", readWriteData, bucket)
	resp, err := p.DriverGrantBucketAccess(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.DriverRevokeBucketAccess(context.Background(), saRevoke(req)) })
	for _, sa := range [][2]string{{ns + "-x-y", "z"}, {ns + "-x", "y"}, {ns + "-x", "y-z-w"}, {ns + "-x", "y-z.w"}} {
		if _, err := k.assume(t, resp.GetCredentials(), sa[0], sa[1], s3.DefaultName); err == nil {
			t.Errorf("a token of %s/%s opened the role of %s/y-z", sa[0], sa[1], ns+"-x")
		}
	}
	if _, err := k.assume(t, resp.GetCredentials(), ns+"-x", "y-z", s3.DefaultName); err != nil {
		t.Errorf("the granted ServiceAccount's own token: %v", err)
	}
}

// TestServiceAccountForgedTokens exchanges tokens signed with the API server's own ServiceAccount
// key but with claims the TokenRequest API would not issue now: expired, not valid yet, of
// another issuer, and with two audiences. Each is refused. So is a token with the right claims
// signed by another key under the API server's key ID. The same signer's token with the right
// claims opens the role: the refusals are the claims', not the signing's; the same claims
// unsigned (alg none) do not.
func TestServiceAccountForgedTokens(t *testing.T) {
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
	now := time.Now().Unix()
	claims := func(change func(c map[string]any)) map[string]any {
		c := map[string]any{
			"iss": k.front.URL, "sub": "system:serviceaccount:" + ns + ":app", "aud": []string{s3.DefaultName},
			"iat": now - 60, "nbf": now - 60, "exp": now + 600,
		}
		if change != nil {
			change(c)
		}
		return c
	}
	for what, c := range map[string]map[string]any{
		// Versity allows five minutes of clock skew past exp, as AWS does.
		"expired an hour ago": claims(func(c map[string]any) {
			c["iat"], c["nbf"], c["exp"] = now-7200, now-7200, now-3600
		}),
		"valid from in an hour": claims(func(c map[string]any) { c["nbf"] = now + 3600 }),
		"of another issuer":     claims(func(c map[string]any) { c["iss"] = "https://issuer.example.com" }),
		"for two audiences":     claims(func(c map[string]any) { c["aud"] = []string{s3.DefaultName, "other"} }),
		"without iat":           claims(func(c map[string]any) { delete(c, "iat") }),
	} {
		token, err := k.api.SignServiceAccountToken(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := k.exchange(ctx, resp.GetCredentials(), token, 0, ""); err == nil {
			t.Errorf("a token %s opened the role", what)
		}
	}
	token, err := k.api.SignServiceAccountToken(claims(nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.exchange(ctx, resp.GetCredentials(), token, 0, ""); err != nil {
		t.Fatalf("a token of the API server's key with the right claims: %v", err)
	}
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	header, err := base64.RawURLEncoding.DecodeString(strings.Split(token, ".")[0])
	if err != nil {
		t.Fatal(err)
	}
	var kid struct{ Kid string }
	if err := json.Unmarshal(header, &kid); err != nil || kid.Kid == "" {
		t.Fatalf("the header of the API server's token %s: no kid (%v)", header, err)
	}
	forged, err := localenv.SignToken(other, kid.Kid, claims(nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.exchange(ctx, resp.GetCredentials(), forged, 0, ""); err == nil {
		t.Errorf("a token signed by another key under the API server's key ID opened the role")
	}
	unsigned := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"`+kid.Kid+`"}`)) + "." +
		strings.Split(token, ".")[1] + "."
	if _, err := k.exchange(ctx, resp.GetCredentials(), unsigned, 0, ""); err == nil {
		t.Errorf("an unsigned token (alg none) with the right claims opened the role")
	}
}

// TestServiceAccountSessionCannotWidenItself uses a ReadWrite session of a ServiceAccount
// access against everything beyond its mode that would widen or outlast it: the bucket's policy
// and ACL, an object ACL, and the IAM service itself (its own role's policy and trust, a user
// with a key of its own); asks for a twelve-hour session, beyond the role's hour; and, with a
// ReadOnly access, a session policy allowing all of S3.
func TestServiceAccountSessionCannotWidenItself(t *testing.T) {
	b, k := keylessBackend(t)
	_, p := serve(t, k.driver(t, b), logr.Discard())
	ctx := t.Context()
	bucket := createBucket(t, p, map[string]string{s3.ParamPurgeOnDelete: "true"})
	ns := uniqueName("team")
	req := saGrant(uniqueName("ba"), ns, "app", readWriteData, bucket)
	resp, err := p.DriverGrantBucketAccess(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.DriverRevokeBucketAccess(context.Background(), saRevoke(req)) })
	token, err := k.api.ServiceAccountToken(ctx, ns, "app", s3.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.exchange(ctx, resp.GetCredentials(), token, 12*3600, ""); err == nil {
		t.Errorf("a twelve-hour session was issued for a role of at most one hour")
	}
	session, err := k.exchange(ctx, resp.GetCredentials(), token, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	rw := sessionAccess(session, resp.GetBuckets()[0].GetBucketInfo())
	expect(t, "put", true, put(rw, bucket, "obj"))
	policy := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject",` +
		`"Resource":"arn:aws:s3:::` + bucket + `/*"}]}`
	_, err = rw.client.PutBucketPolicy(ctx, &awss3.PutBucketPolicyInput{Bucket: aws.String(bucket), Policy: &policy})
	expect(t, "PutBucketPolicy", false, err)
	_, err = rw.client.DeleteBucketPolicy(ctx, &awss3.DeleteBucketPolicyInput{Bucket: aws.String(bucket)})
	expect(t, "DeleteBucketPolicy", false, err)
	_, err = rw.client.PutBucketAcl(ctx, &awss3.PutBucketAclInput{Bucket: aws.String(bucket),
		ACL: s3types.BucketCannedACLPublicReadWrite})
	expect(t, "PutBucketAcl", false, err)
	_, err = rw.client.PutObjectAcl(ctx, &awss3.PutObjectAclInput{Bucket: aws.String(bucket), Key: aws.String("obj"),
		ACL: s3types.ObjectCannedACLPublicRead})
	expect(t, "PutObjectAcl", false, err)
	_, err = rw.client.PutBucketVersioning(ctx, &awss3.PutBucketVersioningInput{Bucket: aws.String(bucket),
		VersioningConfiguration: &s3types.VersioningConfiguration{Status: s3types.BucketVersioningStatusSuspended}})
	expect(t, "PutBucketVersioning", false, err)

	// A session policy only narrows the role (AWS: the intersection): asking for everything gets
	// no more than the role, here with a ReadOnly access.
	other := createBucket(t, p, map[string]string{s3.ParamPurgeOnDelete: "true"})
	roReq := saGrant(uniqueName("ba"), ns, "reader", &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_ONLY},
		bucket)
	roResp, err := p.DriverGrantBucketAccess(ctx, roReq)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.DriverRevokeBucketAccess(context.Background(), saRevoke(roReq)) })
	roToken, err := k.api.ServiceAccountToken(ctx, ns, "reader", s3.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	allOfS3 := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}`
	if wide, err := k.exchange(ctx, roResp.GetCredentials(), roToken, 0, allOfS3); err == nil {
		ro := sessionAccess(wide, roResp.GetBuckets()[0].GetBucketInfo())
		expect(t, "get with a session policy of all of S3", true, get(ro, bucket, "obj"))
		expect(t, "put with a ReadOnly role and a session policy of all of S3", false, put(ro, bucket, "wide"))
		expect(t, "put into another bucket with a session policy of all of S3", false, put(ro, other, "wide"))
		expect(t, "get from another bucket with a session policy of all of S3", false, get(ro, other, "x"))
	} else {
		t.Logf("the IAM service refused the session policy: %v", err)
	}

	roleName := resp.GetCredentials().GetS3().GetRoleArn()[strings.LastIndex(resp.GetCredentials().GetS3().GetRoleArn(),
		"/")+1:]
	ic := iam.New(iam.Options{Region: "us-east-1", BaseEndpoint: aws.String(versityStore.IAMEndpoint),
		Credentials: credentials.NewStaticCredentialsProvider(session.AccessKeyID, session.SecretAccessKey,
			session.SessionToken), RetryMaxAttempts: 1})
	everything := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}`
	for what, call := range map[string]func() error{
		"PutRolePolicy on its own role": func() error {
			_, err := ic.PutRolePolicy(ctx, &iam.PutRolePolicyInput{RoleName: &roleName,
				PolicyName: aws.String("cosi-bucket-access"), PolicyDocument: &everything})
			return err
		},
		"UpdateAssumeRolePolicy on its own role": func() error {
			trust := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"*"},` +
				`"Action":"sts:AssumeRole"}]}`
			_, err := ic.UpdateAssumeRolePolicy(ctx, &iam.UpdateAssumeRolePolicyInput{RoleName: &roleName,
				PolicyDocument: &trust})
			return err
		},
		"DeleteRolePolicy on its own role": func() error {
			_, err := ic.DeleteRolePolicy(ctx, &iam.DeleteRolePolicyInput{RoleName: &roleName,
				PolicyName: aws.String("cosi-bucket-access")})
			return err
		},
		"CreateUser": func() error {
			_, err := ic.CreateUser(ctx, &iam.CreateUserInput{UserName: aws.String(uniqueName("mine"))})
			return err
		},
		"AddClientIDToOpenIDConnectProvider": func() error {
			out, err := ic.ListOpenIDConnectProviders(ctx, &iam.ListOpenIDConnectProvidersInput{})
			if err != nil {
				return err
			}
			for _, pr := range out.OpenIDConnectProviderList {
				if _, err := ic.AddClientIDToOpenIDConnectProvider(ctx, &iam.AddClientIDToOpenIDConnectProviderInput{
					OpenIDConnectProviderArn: pr.Arn, ClientID: aws.String("sts.amazonaws.com"),
				}); err == nil {
					return nil
				}
			}
			return errors.New("refused")
		},
	} {
		if err := call(); err == nil {
			t.Errorf("the session's %s succeeded", what)
		}
	}
	expect(t, "put after the refused calls", true, put(rw, bucket, "still"))
}

// TestServiceAccountInterruptedGrant leaves a role as a driver stopped between CreateRole and
// PutRolePolicy would: its trust, no policy. The ServiceAccount's session opens nothing then; the
// repeated grant completes it; a revoke of such a role deletes it.
func TestServiceAccountInterruptedGrant(t *testing.T) {
	b, k := keylessBackend(t)
	_, p := serve(t, k.driver(t, b), logr.Discard())
	ctx := t.Context()
	bucket := createBucket(t, p, map[string]string{s3.ParamPurgeOnDelete: "true"})
	ns := uniqueName("team")
	req := saGrant(uniqueName("ba"), ns, "app", readWriteData, bucket)
	resp, err := p.DriverGrantBucketAccess(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.DriverRevokeBucketAccess(context.Background(), saRevoke(req)) })
	admin := iam.New(iam.Options{Region: "us-east-1", Credentials: b.creds,
		BaseEndpoint: aws.String(versityStore.IAMEndpoint)})
	if _, err := admin.DeleteRolePolicy(ctx, &iam.DeleteRolePolicyInput{RoleName: aws.String(req.GetAccountId()),
		PolicyName: aws.String("cosi-bucket-access")}); err != nil {
		t.Fatal(err)
	}
	session, err := k.assume(t, resp.GetCredentials(), ns, "app", s3.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	half := sessionAccess(session, resp.GetBuckets()[0].GetBucketInfo())
	expect(t, "put with the session of a role without its policy", false, put(half, bucket, "half"))
	expect(t, "list with the session of a role without its policy", false, list(half, bucket))
	if _, err := p.DriverGrantBucketAccess(ctx, req); err != nil {
		t.Fatalf("the repeated grant: %v", err)
	}
	expect(t, "put once the repeated grant completed the role", true, put(half, bucket, "whole"))

	if _, err := admin.DeleteRolePolicy(ctx, &iam.DeleteRolePolicyInput{RoleName: aws.String(req.GetAccountId()),
		PolicyName: aws.String("cosi-bucket-access")}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DriverRevokeBucketAccess(ctx, saRevoke(req)); err != nil {
		t.Fatalf("revoking a role without its policy: %v", err)
	}
	if _, err := k.assume(t, resp.GetCredentials(), ns, "app", s3.DefaultName); err == nil {
		t.Errorf("the token opened a role revoked half-granted")
	}
}

// TestServiceAccountTokenOutlivesItsObjects pins what docs/drivers/s3.md says a token can still
// do once its objects are gone: the IAM service verifies a token offline (signature, issuer,
// audience, subject, expiry), and knows nothing of the ServiceAccount's or the Pod's UID. So a
// token of a ServiceAccount deleted and created again under its name, and a token bound to a Pod
// that has been deleted, still open the role until they expire. The API server itself would
// refuse both. If this test fails because the IAM service refuses them, the docs are to be
// updated.
func TestServiceAccountTokenOutlivesItsObjects(t *testing.T) {
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
	c := k.api.Client
	old, err := k.api.ServiceAccountToken(ctx, ns, "app", s3.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
	if err := c.Get(ctx, client.ObjectKeyFromObject(sa), sa); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "workload"},
		Spec:       corev1.PodSpec{ServiceAccountName: "app", Containers: []corev1.Container{{Name: "c", Image: "none"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	tenMinutes := int64(600)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{s3.DefaultName}, ExpirationSeconds: &tenMinutes,
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	if _, err := k.exchange(ctx, resp.GetCredentials(), tr.Status.Token, 0, ""); err != nil {
		t.Errorf("the token of a deleted Pod was refused (%v): docs/drivers/s3.md says it opens the role until "+
			"it expires", err)
	}
	if err := c.Delete(ctx, sa); err != nil {
		t.Fatal(err)
	}
	if _, err := k.api.ServiceAccountToken(ctx, ns, "app", s3.DefaultName); err != nil { // created again
		t.Fatal(err)
	}
	if _, err := k.exchange(ctx, resp.GetCredentials(), old, 0, ""); err != nil {
		t.Errorf("the token of a deleted ServiceAccount was refused (%v): docs/drivers/s3.md says it opens the "+
			"role until it expires", err)
	}
}

// TestServiceAccountRotation asks to rotate and retire credentials of a ServiceAccount access:
// InvalidArgument saying there is no key, and, asked as a key access, no key is created for the
// account; retiring changes nothing. The role still opens for the ServiceAccount afterwards.
func TestServiceAccountRotation(t *testing.T) {
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
	rot := &cosiproto.DriverRotateBucketAccessCredentialsRequest{
		AccountId: req.GetAccountId(), Buckets: req.GetBuckets(), Protocol: req.GetProtocol(),
		AuthenticationType: req.GetAuthenticationType(), ServiceAccount: req.GetServiceAccount(),
		CredentialId: "AKIAANYTHING", // the SDK refuses a request without one (InvalidArgument) first
	}
	_, err = p.DriverRotateBucketAccessCredentials(ctx, rot)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "ServiceAccount") {
		t.Errorf("rotating a ServiceAccount access: %v, want InvalidArgument saying it is a ServiceAccount access", err)
	}
	rot.AuthenticationType, rot.ServiceAccount = cosiproto.AuthenticationType_KEY, nil
	if out, err := p.DriverRotateBucketAccessCredentials(ctx, rot); err == nil {
		t.Errorf("rotating a ServiceAccount access as a key access issued credential %q", out.GetCredentialId())
	}
	if _, err := p.DriverRetireBucketAccessCredentials(ctx, &cosiproto.DriverRetireBucketAccessCredentialsRequest{
		AccountId: req.GetAccountId(), CredentialId: "AKIAANYTHING", Protocol: req.GetProtocol(),
	}); err != nil {
		t.Errorf("retiring a credential of a ServiceAccount access: %v, want OK (nothing to retire)", err)
	}
	ids, err := b.newAccount().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if id == req.GetAccountId() {
			t.Errorf("a user %q exists next to the role after the rotation requests", id)
		}
	}
	if _, err := k.assume(t, resp.GetCredentials(), ns, "app", s3.DefaultName); err != nil {
		t.Errorf("the ServiceAccount's token after the rotation requests: %v", err)
	}
}

// TestServiceAccountNamesAreNotPatterns grants to ServiceAccount names and namespaces that would
// widen or break the trust policy if they reached it: IAM wildcards, a policy variable, quotes, a
// colon (the subject's separator), non-ASCII, upper case, white space, and names one character
// too long. Each is InvalidArgument naming the field, and no identity is created.
func TestServiceAccountNamesAreNotPatterns(t *testing.T) {
	b, k := keylessBackend(t)
	_, p := serve(t, k.driver(t, b), logr.Discard())
	ctx := t.Context()
	bucket := createBucket(t, p, nil)
	var ids []string
	for _, tc := range []struct{ namespace, name, field string }{
		{"team", "*", "service_account.name"},
		{"team", "?", "service_account.name"},
		{"team", "app*", "service_account.name"},
		{"team", "a?p", "service_account.name"},
		{"team", "${aws:username}", "service_account.name"},
		{"team", `app"`, "service_account.name"},
		{"team", "app:x", "service_account.name"},
		{"team", "äpp", "service_account.name"},
		{"team", "App", "service_account.name"},
		{"team", "app ", "service_account.name"},
		{"team", strings.Repeat("a", 254), "service_account"}, // the SDK's length check comes first
		{"*", "app", "service_account.namespace"},
		{"te:am", "app", "service_account.namespace"},
		{"team.x", "app", "service_account.namespace"},
		{strings.Repeat("a", 64), "app", "service_account.namespace"},
	} {
		req := saGrant(uniqueName("ba"), tc.namespace, tc.name, readWriteData, bucket)
		ids = append(ids, req.GetAccountId())
		_, err := p.DriverGrantBucketAccess(ctx, req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.field) {
			t.Errorf("a grant to %q/%q: %v, want InvalidArgument naming %s", tc.namespace, tc.name, err, tc.field)
		}
	}
	listed, err := b.newAccount().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range listed {
		for _, refused := range ids {
			if strings.HasSuffix(id, refused) {
				t.Errorf("identity %q exists after its grant was refused", id)
			}
		}
	}
}

// TestServiceAccountAudienceOfAnotherDriver runs two drivers on one IAM service and issuer with
// different audiences: they share the issuer's OIDC provider, whose client ID list then names
// both audiences. A token of the ServiceAccount for the other driver's audience still does not
// open this driver's role (the trust policy's aud condition), and the other way round.
func TestServiceAccountAudienceOfAnotherDriver(t *testing.T) {
	b, k := keylessBackend(t)
	_, p := serve(t, k.driver(t, b), logr.Discard())
	d2, err := s3.New(s3.Config{
		Name: "other.cosi.example.com", Endpoint: b.s3Endpoint, Credentials: b.creds, Accounts: b.newAccount(),
		ServiceAccounts: &s3.ServiceAccountAuth{
			Issuer: k.front.URL, IssuerThumbprints: []string{k.front.Thumbprint}, STSEndpoint: versityStore.IAMEndpoint,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, p2 := serve(t, d2, logr.Discard())
	ctx := t.Context()
	bucket := createBucket(t, p, nil)
	ns := uniqueName("team")
	req := saGrant(uniqueName("ba"), ns, "app", readWriteData, bucket)
	resp, err := p.DriverGrantBucketAccess(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.DriverRevokeBucketAccess(context.Background(), saRevoke(req)) })
	req2 := saGrant(uniqueName("ba"), ns, "app", readWriteData, bucket)
	resp2, err := p2.DriverGrantBucketAccess(ctx, req2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p2.DriverRevokeBucketAccess(context.Background(), saRevoke(req2)) })
	if _, err := k.assume(t, resp.GetCredentials(), ns, "app", "other.cosi.example.com"); err == nil {
		t.Errorf("a token for the other driver's audience opened this driver's role")
	}
	if _, err := k.assume(t, resp2.GetCredentials(), ns, "app", s3.DefaultName); err == nil {
		t.Errorf("a token for this driver's audience opened the other driver's role")
	}
	if _, err := k.assume(t, resp2.GetCredentials(), ns, "app", "other.cosi.example.com"); err != nil {
		t.Errorf("the other driver's own token: %v", err)
	}
}

// TestServiceAccountAudienceIsNotTheAPIServers: the token the kubelet mounts into every Pod
// (kube-api-access, a TokenRequest without audiences) is for the API server's audiences, which
// default to the issuer, and workloads send it to the API server and to whatever asks for it. It
// must not open a role: with the driver's audience it does not, and a driver configured with an
// audience of the API server (the issuer, or https://kubernetes.default.svc[.cluster.local], the
// usual --api-audiences) refuses to start. Configured so before, it granted roles that the
// token of every Pod of the ServiceAccount opened.
func TestServiceAccountAudienceIsNotTheAPIServers(t *testing.T) {
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
	if _, err := k.api.ServiceAccountToken(ctx, ns, "app", s3.DefaultName); err != nil { // creates the ServiceAccount
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
	tr := &authenticationv1.TokenRequest{}
	if err := k.api.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatal(err)
	}
	if _, err := k.exchange(ctx, resp.GetCredentials(), tr.Status.Token, 0, ""); err == nil {
		t.Errorf("a token for the API server's audiences opened the role")
	}

	for _, audience := range []string{
		k.front.URL, "https://kubernetes.default.svc", "https://kubernetes.default.svc.cluster.local",
	} {
		_, err := s3.New(s3.Config{
			Endpoint: b.s3Endpoint, Credentials: b.creds, Accounts: b.newAccount(),
			ServiceAccounts: &s3.ServiceAccountAuth{Issuer: k.front.URL, Audience: audience,
				IssuerThumbprints: []string{k.front.Thumbprint}, STSEndpoint: versityStore.IAMEndpoint},
		})
		if err == nil || !strings.Contains(err.Error(), "audience") {
			t.Errorf("a driver with the API server's audience %q: %v, want an error naming the audience", audience, err)
		}
	}
}

// TestServiceAccountSessionAfterRevoke checks what docs/drivers/s3.md says a session obtained
// before the revoke can do after it: nothing in the bucket (get, list, put, delete), even with
// its credentials still unexpired, and even once an access of the same ServiceAccount is granted
// again (a new role: the old session stays bound to the deleted one).
func TestServiceAccountSessionAfterRevoke(t *testing.T) {
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
	old := sessionAccess(session, resp.GetBuckets()[0].GetBucketInfo())
	expect(t, "put before revoke", true, put(old, bucket, "obj"))
	if _, err := p.DriverRevokeBucketAccess(ctx, saRevoke(req)); err != nil {
		t.Fatal(err)
	}
	// The same account ID granted again (a BucketAccess's grant after its revoke never happens in
	// COSI; the strongest case for the old session): a new role of the same name and trust.
	if _, err := p.DriverGrantBucketAccess(ctx, req); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.DriverRevokeBucketAccess(context.Background(), saRevoke(req)) })
	expect(t, "get with a session of the revoked role", false, get(old, bucket, "obj"))
	expect(t, "list with a session of the revoked role", false, list(old, bucket))
	expect(t, "put with a session of the revoked role", false, put(old, bucket, "after"))
	expect(t, "delete with a session of the revoked role", false, del(old, bucket, "obj"))
}

// TestKeyAccessesWithoutRoleRights runs a driver without ServiceAccount authentication as an
// admin with the IAM rights docs/drivers/s3.md lists for key accesses only (users, their keys and
// policies; no role or OIDC provider rights): key grants, rotations and revokes work. The
// ServiceAccount checks a key access makes (is the account a role?) must not need role rights
// that nobody gave it.
func TestKeyAccessesWithoutRoleRights(t *testing.T) {
	const userRights = `{"Version":"2012-10-17","Statement":[` +
		`{"Effect":"Allow","Action":["iam:*User","iam:*UserPolicy","iam:ListUsers","iam:*AccessKey","iam:ListAccessKeys",` +
		`"iam:TagUser","iam:ListUserTags","iam:ListUserPolicies"],"Resource":["*"]},` +
		`{"Effect":"Allow","Action":["s3:*"],"Resource":["arn:aws:s3:::lim-*","arn:aws:s3:::lim-*/*"]}]}`
	_, _, k := limitedAdmin(t, userRights)
	_, p := limitedDriver(t, k, logr.Discard())
	bucket := createBucket(t, p, nil)
	a := grant(t, p, readWriteData, bucket)
	expect(t, "put with the key", true, put(a, bucket, "obj"))
	revoke(t, p, a)
	expect(t, "put with the key after revoke", false, put(a, bucket, "after"))
}
