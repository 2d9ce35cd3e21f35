package driver

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

func validGrant() *cosiproto.DriverGrantBucketAccessRequest {
	return &cosiproto.DriverGrantBucketAccessRequest{
		AccountId: "ba-1",
		Buckets: []*cosiproto.AccessedBucket{
			{BucketId: "bc-1", AccessModes: &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}},
		},
		Protocol:           cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
	}
}

func TestValidateRequest(t *testing.T) {
	long := strings.Repeat("x", MaxIDLength+1)
	grant := func(mutate func(*cosiproto.DriverGrantBucketAccessRequest)) *cosiproto.DriverGrantBucketAccessRequest {
		r := validGrant()
		mutate(r)
		return r
	}
	tooMany := map[string]string{}
	for i := range MaxParameters + 1 {
		tooMany[strings.Repeat("k", i+1)] = "v"
	}
	generate := func(name string, protocols ...cosiproto.ObjectProtocol_Type) *cosiproto.DriverGenerateBucketIdRequest {
		return &cosiproto.DriverGenerateBucketIdRequest{Name: name, Protocols: protocols}
	}
	create := func(params map[string]string) *cosiproto.DriverCreateBucketRequest {
		return &cosiproto.DriverCreateBucketRequest{BucketId: "b", Parameters: params}
	}
	type request = cosiproto.DriverGrantBucketAccessRequest
	s3, key := cosiproto.ObjectProtocol_S3, cosiproto.AuthenticationType_KEY
	for _, tc := range []struct {
		name    string
		req     any
		wantErr string // empty: valid
	}{
		{"valid get info", &cosiproto.DriverGetInfoRequest{}, ""},
		{"valid generate bucket id", generate("bc-1", s3), ""},
		{"generate without name", &cosiproto.DriverGenerateBucketIdRequest{}, "name is required"},
		{"generate with unknown protocol", generate("n", cosiproto.ObjectProtocol_UNKNOWN), "protocols[0]"},
		{"generate with out-of-range protocol", generate("n", 9), "protocols[0]"},
		{"generate with a protocol twice", generate("n", s3, s3), "listed twice"},
		{"create without bucket_id", &cosiproto.DriverCreateBucketRequest{}, "bucket_id is required"},
		{"create with a too long bucket_id", &cosiproto.DriverCreateBucketRequest{BucketId: long}, "bucket_id is longer"},
		{"create with too many parameters", create(tooMany), "parameters:"},
		{"create with an empty parameter key", create(map[string]string{"": "v"}), "empty key"},
		{
			"create with a too long parameter value",
			create(map[string]string{"k": strings.Repeat("v", MaxParameterValueLength+1)}),
			`parameters["k"]`,
		},
		{"get without bucket_id", &cosiproto.DriverGetBucketRequest{}, "bucket_id is required"},
		{"delete without bucket_id", &cosiproto.DriverDeleteBucketRequest{}, "bucket_id is required"},
		{"valid grant", validGrant(), ""},
		{"grant without account_id", grant(func(r *request) { r.AccountId = "" }), "account_id is required"},
		{"grant without buckets", grant(func(r *request) { r.Buckets = nil }), "at least one bucket"},
		{
			"grant with a bucket twice",
			grant(func(r *request) { r.Buckets = append(r.Buckets, r.Buckets[0]) }),
			"listed twice",
		},
		{
			"grant without bucket_id",
			grant(func(r *request) { r.Buckets[0].BucketId = "" }),
			"buckets[0].bucket_id is required",
		},
		{
			"grant without access modes",
			grant(func(r *request) { r.Buckets[0].AccessModes = nil }),
			"at least one of object_data",
		},
		{
			"grant with an unknown access mode",
			grant(func(r *request) { r.Buckets[0].AccessModes.BucketMetadata = 7 }),
			"bucket_metadata",
		},
		{"grant without protocol", grant(func(r *request) { r.Protocol = cosiproto.ObjectProtocol_UNKNOWN }), "protocol"},
		{"grant without authentication type", grant(func(r *request) {
			r.AuthenticationType = cosiproto.AuthenticationType_UNKNOWN
		}), "authentication_type"},
		{"grant with a service account for KEY", grant(func(r *request) {
			r.ServiceAccount = &cosiproto.ServiceAccount{Namespace: "ns", Name: "sa"}
		}), "must be empty for KEY"},
		{"grant for SERVICE_ACCOUNT without service account", grant(func(r *request) {
			r.AuthenticationType = cosiproto.AuthenticationType_SERVICE_ACCOUNT
		}), "required for SERVICE_ACCOUNT"},
		{"valid SERVICE_ACCOUNT grant", grant(func(r *request) {
			r.AuthenticationType = cosiproto.AuthenticationType_SERVICE_ACCOUNT
			r.ServiceAccount = &cosiproto.ServiceAccount{Namespace: "ns", Name: "sa"}
		}), ""},
		{
			"generate access without account_name",
			&cosiproto.DriverGenerateBucketAccessIdRequest{Buckets: validGrant().Buckets, Protocol: s3, AuthenticationType: key},
			"account_name is required",
		},
		{
			"revoke without account_id",
			&cosiproto.DriverRevokeBucketAccessRequest{
				Buckets:  []*cosiproto.DriverRevokeBucketAccessRequest_Bucket{{BucketId: "b"}},
				Protocol: s3, AuthenticationType: key,
			},
			"account_id is required",
		},
		{
			"revoke without buckets",
			&cosiproto.DriverRevokeBucketAccessRequest{AccountId: "a", Protocol: s3, AuthenticationType: key},
			"at least one bucket",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateRequest(tc.req)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("valid request refused: %v", err)
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("got %v, want InvalidArgument", err)
			}
			if msg := status.Convert(err).Message(); !strings.Contains(msg, tc.wantErr) {
				t.Errorf("message %q does not contain %q", msg, tc.wantErr)
			}
		})
	}
}

func TestValidateGrantResponse(t *testing.T) {
	req := validGrant()
	req.Buckets = append(
		req.Buckets,
		&cosiproto.AccessedBucket{
			BucketId:    "bc-2",
			AccessModes: &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_ONLY},
		},
	)
	info := func(id string) *cosiproto.DriverGrantBucketAccessResponse_BucketInfo {
		return &cosiproto.DriverGrantBucketAccessResponse_BucketInfo{BucketId: id, BucketInfo: &cosiproto.ProtocolBucketInfo{
			S3: &cosiproto.S3BucketInfo{BucketName: id, Endpoint: "https://s3.example.com", Region: "us-east-1"}}}
	}
	creds := &cosiproto.CredentialInfo{S3: &cosiproto.S3Credentials{AccessKeyId: "AK", AccessSecretKey: "SECRETVALUE"}}
	// response lists the buckets of a grant's response, with the given credentials.
	response := func(creds *cosiproto.CredentialInfo, buckets ...*cosiproto.DriverGrantBucketAccessResponse_BucketInfo,
	) *cosiproto.DriverGrantBucketAccessResponse {
		return &cosiproto.DriverGrantBucketAccessResponse{Buckets: buckets, Credentials: creds}
	}
	noRegion := info("bc-2")
	noRegion.BucketInfo.S3 = &cosiproto.S3BucketInfo{BucketName: "bc-2", Endpoint: "e"}
	noSecretKey := &cosiproto.CredentialInfo{S3: &cosiproto.S3Credentials{AccessKeyId: "AK"}}
	for _, tc := range []struct {
		name    string
		resp    *cosiproto.DriverGrantBucketAccessResponse
		wantErr string
	}{
		{"complete", response(creds, info("bc-1"), info("bc-2")), ""},
		{"a bucket missing", response(creds, info("bc-1")), `no entry for requested bucket "bc-2"`},
		{"an extra bucket", response(creds, info("bc-1"), info("bc-2"), info("bc-3")), "3 entries for 2"},
		{"no region", response(creds, info("bc-1"), noRegion), "needs bucket_name, endpoint and region"},
		{"no secret key", response(noSecretKey, info("bc-1"), info("bc-2")), "need access_key_id and access_secret_key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateGrantResponse(req, tc.resp)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "SECRETVALUE") {
				t.Errorf("the error shows a credential: %v", err)
			}
		})
	}
}

// TestValidateGrantResponseNamesEveryProblem: a driver's author reads every missing field in one
// refusal, not one per attempt: each empty field of the bucket info and of the credentials,
// together.
func TestValidateGrantResponseNamesEveryProblem(t *testing.T) {
	resp := &cosiproto.DriverGrantBucketAccessResponse{
		Buckets: []*cosiproto.DriverGrantBucketAccessResponse_BucketInfo{{BucketId: "bc-1",
			BucketInfo: &cosiproto.ProtocolBucketInfo{S3: &cosiproto.S3BucketInfo{BucketName: "bc-1"}}}},
		Credentials: &cosiproto.CredentialInfo{S3: &cosiproto.S3Credentials{AccessSecretKey: "SECRETVALUE"}},
	}
	err := ValidateGrantResponse(validGrant(), resp)
	if err == nil {
		t.Fatal("an answer without endpoint, region and access_key_id was accepted")
	}
	for _, want := range []string{"without endpoint, region", "without access_key_id"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "SECRETVALUE") {
		t.Errorf("the error shows a credential: %v", err)
	}
}

// TestValidateServiceAccountGrantResponse checks that the answer to a ServiceAccount grant
// carries no secret: the sidecar would write it into the Secret of a keyless access, where
// nobody expects one (no rotation, no revocation of it, "no key anywhere in the cluster").
func TestValidateServiceAccountGrantResponse(t *testing.T) {
	req := validGrant()
	req.AuthenticationType = cosiproto.AuthenticationType_SERVICE_ACCOUNT
	req.ServiceAccount = &cosiproto.ServiceAccount{Namespace: "team", Name: "app"}
	buckets := []*cosiproto.DriverGrantBucketAccessResponse_BucketInfo{{BucketId: "bc-1",
		BucketInfo: &cosiproto.ProtocolBucketInfo{
			S3: &cosiproto.S3BucketInfo{BucketName: "bc-1", Endpoint: "https://s3.example.com", Region: "us-east-1"}}}}
	for _, tc := range []struct {
		name    string
		creds   *cosiproto.CredentialInfo
		wantErr string
	}{
		{"no credentials", nil, ""},
		{"a role", &cosiproto.CredentialInfo{S3: &cosiproto.S3Credentials{RoleArn: "arn:aws:iam::1:role/r",
			WebIdentityTokenFile: "/var/run/token", StsEndpoint: "https://sts.example.com"}}, ""},
		{"an S3 key", &cosiproto.CredentialInfo{S3: &cosiproto.S3Credentials{AccessKeyId: "AK",
			AccessSecretKey: "SECRETVALUE"}}, "access_secret_key"},
		{"an S3 key ID alone", &cosiproto.CredentialInfo{S3: &cosiproto.S3Credentials{AccessKeyId: "AK"}},
			"access_key_id"},
		{"an Azure token", &cosiproto.CredentialInfo{Azure: &cosiproto.AzureCredentials{AccessToken: "SECRETVALUE"}},
			"access_token"},
		{"a GCS private key", &cosiproto.CredentialInfo{Gcs: &cosiproto.GcsCredentials{PrivateKey: "SECRETVALUE"}},
			"private_key"},
		{"a GCS HMAC secret", &cosiproto.CredentialInfo{Gcs: &cosiproto.GcsCredentials{HmacAccessId: "id",
			HmacSecret: "SECRETVALUE"}}, "hmac_secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateGrantResponse(req, &cosiproto.DriverGrantBucketAccessResponse{Buckets: buckets,
				Credentials: tc.creds})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want an error naming %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "SECRETVALUE") {
				t.Errorf("the error shows a credential: %v", err)
			}
		})
	}
}

func TestValidateDriverName(t *testing.T) {
	for name, valid := range map[string]bool{
		"s3.example.com": true, "memory": true, "A-1.b": true,
		"": false, "-s3.example.com": false, "s3.example.com.": false, "s3_example": false, strings.Repeat("a", 64): false,
	} {
		if err := ValidateDriverName(name); (err == nil) != valid {
			t.Errorf("ValidateDriverName(%q) = %v, want valid=%v", name, err, valid)
		}
	}
}

func TestCheckParameterKeys(t *testing.T) {
	for _, tc := range []struct {
		params  map[string]string
		wantErr string
	}{
		{nil, ""},
		{map[string]string{"region": "x", "versioning": "true"}, ""},
		{map[string]string{"region": "x", "regoin": "y", "zone": "z"}, `unknown key "regoin"`},
	} {
		err := CheckParameterKeys(tc.params, "region", "versioning")
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%v: %v", tc.params, err)
		case tc.wantErr != "" && (status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%v: %v, want InvalidArgument with %q", tc.params, err, tc.wantErr)
		}
	}
}
