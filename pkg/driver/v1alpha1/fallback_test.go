package v1alpha1_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// The answers of v1alpha1 drivers found in the wild that leave out the S3 endpoint or region, or
// name the key otherwise, through the sidecar's production client against the fake driver
// (fake_test.go) on a real Unix socket.

const (
	classEndpoint = "https://class.s3.example.com"
	classRegion   = "class-1"
	flagEndpoint  = "http://flag.s3.example.com:9000"
	flagRegion    = "flag-1"
	// sessionValue is a value under a key the adapter does not read.
	sessionValue = "session-token-3c9a"
)

// sampleAnswer grants as the upstream v1alpha1 sample driver does: a key, under "accessKeyId",
// and no endpoint or region.
func sampleAnswer(f *fakeV1, secrets map[string]string) func(int, *v1.DriverGrantBucketAccessRequest) (
	*v1.DriverGrantBucketAccessResponse, error,
) {
	return func(_ int, req *v1.DriverGrantBucketAccessRequest) (*v1.DriverGrantBucketAccessResponse, error) {
		f.accounts[req.GetName()] = true
		return &v1.DriverGrantBucketAccessResponse{AccountId: req.GetName(), Credentials: map[string]*v1.CredentialDetails{
			v1alpha1.CredentialsS3: {Secrets: secrets},
		}}, nil
	}
}

// secretsOf is the credentials of one protocol.
func secretsOf(protocol string, secrets map[string]string) map[string]*v1.CredentialDetails {
	return map[string]*v1.CredentialDetails{protocol: {Secrets: secrets}}
}

func sampleSecrets() map[string]string {
	return map[string]string{v1alpha1.S3AccessKeyIDAlias: fakeKeyID, v1alpha1.S3AccessSecretKey: fakeSecret}
}

// withParams is grantRequest with more class parameters.
func withParams(params map[string]string) *cosiproto.DriverGrantBucketAccessRequest {
	req := grantRequest("ba-1", readWrite)
	for k, v := range params {
		req.Parameters[k] = v
	}
	return req
}

func revokeRequest(params map[string]string) *cosiproto.DriverRevokeBucketAccessRequest {
	return &cosiproto.DriverRevokeBucketAccessRequest{
		AccountId: "ba-1", Buckets: []*cosiproto.DriverRevokeBucketAccessRequest_Bucket{{BucketId: "bc-1"}},
		Protocol: cosiproto.ObjectProtocol_S3, AuthenticationType: cosiproto.AuthenticationType_KEY, Parameters: params,
	}
}

// noSecretIn fails t when err shows a value the driver returned as a secret.
func noSecretIn(t *testing.T, err error) {
	t.Helper()
	for _, v := range []string{fakeSecret, fakeKeyID, sessionValue} {
		if err != nil && strings.Contains(err.Error(), v) {
			t.Errorf("the error shows a value the driver returned: %v", err)
		}
	}
}

// The class's endpoint and region complete an answer that has neither, the key is read under its
// alias, and the class's parameters never reach the driver, in grant and revoke alike.
func TestClassFallbackCompletesTheSampleAnswer(t *testing.T) {
	f := newFake()
	f.grant = sampleAnswer(f, sampleSecrets())
	c, _ := serveFake(t, f)
	params := map[string]string{v1alpha1.ParameterS3Endpoint: classEndpoint, v1alpha1.ParameterS3Region: classRegion}
	req := withParams(params)
	resp, err := c.DriverGrantBucketAccess(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	info := resp.GetBuckets()[0].GetBucketInfo().GetS3()
	if info.GetEndpoint() != classEndpoint || info.GetRegion() != classRegion || info.GetBucketName() != "bc-1" {
		t.Errorf("bucket info %v, want the class's endpoint and region", info)
	}
	if s3 := resp.GetCredentials().GetS3(); s3.GetAccessKeyId() != fakeKeyID || s3.GetAccessSecretKey() != fakeSecret {
		t.Errorf("the key under %s was not read", v1alpha1.S3AccessKeyIDAlias)
	}
	if _, err := c.DriverRevokeBucketAccess(t.Context(), revokeRequest(req.GetParameters())); err != nil {
		t.Fatal(err)
	}
	for _, method := range []string{"DriverGrantBucketAccess", "DriverRevokeBucketAccess"} {
		got := f.paramsOf(method)
		if len(got) != 1 {
			t.Fatalf("%s called %d times, want 1", method, len(got))
		}
		if len(got[0]) != 1 || got[0]["policy"] != "rw" {
			t.Errorf("%s got parameters %v, want the class's without the adapter's", method, got[0])
		}
	}
}

// The sidecar's flags complete an answer for every class that says nothing; a class that says
// something wins over them, value by value.
func TestFlagFallbackAndItsPrecedence(t *testing.T) {
	f := newFake()
	f.grant = sampleAnswer(f, sampleSecrets())
	c, _ := serveFakeWith(t, f, v1alpha1.Options{S3Endpoint: flagEndpoint, S3Region: flagRegion})
	for _, tc := range []struct {
		name                   string
		params                 map[string]string
		wantEndpoint, wantRegn string
	}{
		{"no class parameter", nil, flagEndpoint, flagRegion},
		{"the class's endpoint", map[string]string{v1alpha1.ParameterS3Endpoint: classEndpoint}, classEndpoint, flagRegion},
		{"the class's region", map[string]string{v1alpha1.ParameterS3Region: classRegion}, flagEndpoint, classRegion},
		{"both", map[string]string{v1alpha1.ParameterS3Endpoint: classEndpoint, v1alpha1.ParameterS3Region: classRegion},
			classEndpoint, classRegion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.DriverGrantBucketAccess(t.Context(), withParams(tc.params))
			if err != nil {
				t.Fatal(err)
			}
			info := resp.GetBuckets()[0].GetBucketInfo().GetS3()
			if info.GetEndpoint() != tc.wantEndpoint || info.GetRegion() != tc.wantRegn {
				t.Errorf("endpoint %q, region %q; want %q, %q",
					info.GetEndpoint(), info.GetRegion(), tc.wantEndpoint, tc.wantRegn)
			}
		})
	}
}

// What the driver returns wins over the class and the flags: they fill only what it leaves out
// (here the region, as drivers that return an endpoint alone do).
func TestTheDriversValuesWin(t *testing.T) {
	f := newFake()
	f.grant = sampleAnswer(f, map[string]string{
		v1alpha1.S3AccessKeyID: fakeKeyID, v1alpha1.S3AccessSecretKey: fakeSecret,
		v1alpha1.S3Endpoint: "https://driver.s3.example.com",
	})
	c, _ := serveFakeWith(t, f, v1alpha1.Options{S3Endpoint: flagEndpoint, S3Region: flagRegion})
	resp, err := c.DriverGrantBucketAccess(t.Context(), withParams(map[string]string{
		v1alpha1.ParameterS3Endpoint: classEndpoint, v1alpha1.ParameterS3Region: classRegion,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if info := resp.GetBuckets()[0].GetBucketInfo().GetS3(); info.GetEndpoint() != "https://driver.s3.example.com" ||
		info.GetRegion() != classRegion {
		t.Errorf("bucket info %v, want the driver's endpoint and the class's region", info)
	}

	f2 := newFake() // a complete answer: nothing of the class's or the flags'
	c2, _ := serveFakeWith(t, f2, v1alpha1.Options{S3Endpoint: flagEndpoint, S3Region: flagRegion})
	resp, err = c2.DriverGrantBucketAccess(t.Context(), withParams(map[string]string{
		v1alpha1.ParameterS3Endpoint: classEndpoint, v1alpha1.ParameterS3Region: classRegion,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if info := resp.GetBuckets()[0].GetBucketInfo().GetS3(); info.GetEndpoint() != "https://s3.fake.example.com" ||
		info.GetRegion() != "fake-1" {
		t.Errorf("bucket info %v, want the driver's endpoint and region", info)
	}
}

// An invalid fallback parameter is refused, final, naming the parameter, before anything is
// created: neither the account ID nor the grant goes to the driver.
func TestInvalidFallbackParametersAreRefused(t *testing.T) {
	f := newFake()
	c, _ := serveFake(t, f)
	for _, tc := range []struct{ key, value string }{
		{v1alpha1.ParameterS3Endpoint, "s3.example.com"},
		{v1alpha1.ParameterS3Endpoint, "ftp://s3.example.com"},
		{v1alpha1.ParameterS3Endpoint, "https://"},
		{v1alpha1.ParameterS3Endpoint, "https://admin:hunter2@s3.example.com"},
		{v1alpha1.ParameterS3Endpoint, "https://s3.example.com/?x=1"},
		{v1alpha1.ParameterS3Endpoint, ""},
		{v1alpha1.ParameterS3Region, ""},
		{v1alpha1.ParameterS3Region, "us east 1"},
		{v1alpha1.ParameterS3Region, "-us-east-1"},
		{v1alpha1.ParameterS3Region, strings.Repeat("r", 64)},
	} {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			req := withParams(map[string]string{tc.key: tc.value})
			_, err := c.DriverGenerateBucketAccessId(t.Context(), &cosiproto.DriverGenerateBucketAccessIdRequest{
				AccountName: "ba-1", Buckets: req.GetBuckets(), Protocol: req.GetProtocol(),
				AuthenticationType: req.GetAuthenticationType(), Parameters: req.GetParameters(),
			})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.key) {
				t.Errorf("DriverGenerateBucketAccessId: %v, want INVALID_ARGUMENT naming %s", err, tc.key)
			}
			_, err = c.DriverGrantBucketAccess(t.Context(), req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.key) {
				t.Errorf("DriverGrantBucketAccess: %v, want INVALID_ARGUMENT naming %s", err, tc.key)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the refusal repeats a password: %v", err)
			}
		})
	}
	if _, accounts, calls := f.state(); calls["DriverGrantBucketAccess"] != 0 || len(accounts) != 0 {
		t.Errorf("the driver was asked to grant (%v), accounts %v", calls, accounts)
	}
}

// The sidecar's flags are checked as the class's parameters are, naming the flag.
func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		opts v1alpha1.Options
		want string
	}{
		{v1alpha1.Options{}, ""},
		{v1alpha1.Options{S3Endpoint: flagEndpoint, S3Region: flagRegion}, ""},
		{v1alpha1.Options{S3Endpoint: "https://s3.example.com/path"}, ""},
		{v1alpha1.Options{S3Endpoint: "s3.example.com"}, v1alpha1.FlagS3Endpoint},
		{v1alpha1.Options{S3Region: "us/east"}, v1alpha1.FlagS3Region},
	} {
		err := tc.opts.Validate()
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %q", tc.opts, err, tc.want)
		}
	}
}

// An answer still incomplete after the fallbacks is refused, final (INVALID_ARGUMENT), naming
// every missing value and the keys the driver returned, never a value; and what completes it.
// When nobody holds the account's credentials the account is revoked at once; otherwise it stays
// (DriverGrantBucketAccess's rule for every answer it refuses).
func TestIncompleteAnswerNamesEveryMissingValue(t *testing.T) {
	for _, held := range []bool{false, true} {
		f := newFake()
		f.grant = sampleAnswer(f, map[string]string{
			v1alpha1.S3AccessKeyIDAlias: fakeKeyID, "sessionToken": sessionValue, "empty": "",
		})
		c, logs := serveFake(t, f)
		ctx := unheld(t)
		if held {
			ctx = t.Context()
		}
		resp, err := c.DriverGrantBucketAccess(ctx, grantRequest("ba-1", readWrite))
		if resp != nil || status.Code(err) != codes.InvalidArgument || !finalForGrant(err) {
			t.Fatalf("held %v: %v, %v; want a final INVALID_ARGUMENT and no answer", held, resp, err)
		}
		msg := status.Convert(err).Message()
		for _, want := range []string{
			"without accessSecretKey, endpoint, region",
			"it returned accessKeyId, sessionToken;",
			v1alpha1.ParameterS3Endpoint, v1alpha1.ParameterS3Region, v1alpha1.FlagS3Endpoint, v1alpha1.FlagS3Region,
		} {
			if !strings.Contains(msg, want) {
				t.Errorf("%q does not say %q", msg, want)
			}
		}
		noSecretIn(t, err)
		if strings.Contains(logs.String(), fakeSecret) {
			t.Errorf("the client's log holds the secret")
		}
		_, accounts, _ := f.state()
		if held && len(accounts) != 1 || !held && len(accounts) != 0 {
			t.Errorf("held %v: accounts %v after the refusal", held, accounts)
		}
	}
}

// Only the endpoint missing: the message names it alone, and only the endpoint's remedies.
func TestIncompleteAnswerWithoutEndpoint(t *testing.T) {
	f := newFake()
	f.grant = sampleAnswer(f, map[string]string{
		v1alpha1.S3AccessKeyID: fakeKeyID, v1alpha1.S3AccessSecretKey: fakeSecret, v1alpha1.S3Region: "r",
	})
	c, _ := serveFake(t, f)
	_, err := c.DriverGrantBucketAccess(t.Context(), grantRequest("ba-1", readWrite))
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(msg, "without endpoint (") ||
		!strings.Contains(msg, v1alpha1.ParameterS3Endpoint) || strings.Contains(msg, v1alpha1.ParameterS3Region) {
		t.Errorf("%v: want INVALID_ARGUMENT naming the endpoint and its remedies only", err)
	}
	noSecretIn(t, err)
}

// Two names of one value: the same value under both is read; different values are ambiguous and
// refused, final, naming both keys and neither value.
func TestAliases(t *testing.T) {
	for _, tc := range []struct {
		name    string
		secrets map[string]string
		want    string // empty: granted
	}{
		{"secretAccessKey", map[string]string{v1alpha1.S3AccessKeyID: fakeKeyID, v1alpha1.S3AccessSecretKeyAlias: fakeSecret},
			""},
		{"both names, one value", map[string]string{v1alpha1.S3AccessKeyID: fakeKeyID, v1alpha1.S3AccessKeyIDAlias: fakeKeyID,
			v1alpha1.S3AccessSecretKey: fakeSecret, v1alpha1.S3AccessSecretKeyAlias: fakeSecret}, ""},
		{"an empty alias", map[string]string{v1alpha1.S3AccessKeyID: fakeKeyID, v1alpha1.S3AccessKeyIDAlias: "",
			v1alpha1.S3AccessSecretKey: fakeSecret}, ""},
		{"two key IDs", map[string]string{v1alpha1.S3AccessKeyID: fakeKeyID, v1alpha1.S3AccessKeyIDAlias: "AKIDOTHER",
			v1alpha1.S3AccessSecretKey: fakeSecret}, "accessKeyID and accessKeyId hold different values"},
		{"two secret keys", map[string]string{v1alpha1.S3AccessKeyID: fakeKeyID, v1alpha1.S3AccessSecretKey: fakeSecret,
			v1alpha1.S3AccessSecretKeyAlias: sessionValue}, "accessSecretKey and secretAccessKey hold different values"},
		{"another program's name", map[string]string{v1alpha1.S3AccessKeyID: fakeKeyID,
			"AWS_SECRET_ACCESS_KEY": fakeSecret}, "without accessSecretKey"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.grant = sampleAnswer(f, tc.secrets)
			c, _ := serveFakeWith(t, f, v1alpha1.Options{S3Endpoint: flagEndpoint, S3Region: flagRegion})
			resp, err := c.DriverGrantBucketAccess(t.Context(), grantRequest("ba-1", readWrite))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if s3 := resp.GetCredentials().GetS3(); s3.GetAccessKeyId() != fakeKeyID || s3.GetAccessSecretKey() != fakeSecret {
					t.Errorf("the key was not read")
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: want INVALID_ARGUMENT saying %q", err, tc.want)
			}
			noSecretIn(t, err)
			if strings.Contains(err.Error(), "AKIDOTHER") {
				t.Errorf("the refusal shows a value: %v", err)
			}
		})
	}
}

// Azure and GCS answers are checked by the adapter too, every missing value named. Azure has no
// fallback: the storage account is the bucket's (fallback.go).
func TestIncompleteAzureAndGCSAnswers(t *testing.T) {
	for _, tc := range []struct {
		protocol cosiproto.ObjectProtocol_Type
		creds    map[string]*v1.CredentialDetails
		want     string
	}{
		{cosiproto.ObjectProtocol_AZURE, secretsOf(v1alpha1.CredentialsAzure, map[string]string{
			v1alpha1.AzureAccessToken: "sv=2022&sig=" + fakeSecret,
		}), "without the storage account (it returned accessToken;"},
		{cosiproto.ObjectProtocol_AZURE, secretsOf(v1alpha1.CredentialsAzure, map[string]string{
			"token": fakeSecret,
		}), "without accessToken (it returned token)"},
		{cosiproto.ObjectProtocol_GCS, secretsOf(v1alpha1.CredentialsGCS, map[string]string{
			v1alpha1.GCSHMACAccessID: fakeKeyID,
		}), "without privateKey, or hmacAccessId and hmacSecret (it returned hmacAccessId)"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			f := newFake()
			f.grant = func(_ int, req *v1.DriverGrantBucketAccessRequest) (*v1.DriverGrantBucketAccessResponse, error) {
				return &v1.DriverGrantBucketAccessResponse{AccountId: req.GetName(), Credentials: tc.creds}, nil
			}
			c, _ := serveFakeWith(t, f, v1alpha1.Options{Protocols: []cosiproto.ObjectProtocol_Type{tc.protocol}})
			req := grantRequest("ba-1", readWrite)
			req.Protocol = tc.protocol
			_, err := c.DriverGrantBucketAccess(t.Context(), req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: want INVALID_ARGUMENT saying %q", err, tc.want)
			}
			noSecretIn(t, err)
		})
	}
}
