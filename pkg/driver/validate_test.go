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
		AccountId:          "ba-1",
		Buckets:            []*cosiproto.AccessedBucket{{BucketId: "bc-1", AccessModes: &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}}},
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
	for _, tc := range []struct {
		name    string
		req     any
		wantErr string // empty: valid
	}{
		{"valid get info", &cosiproto.DriverGetInfoRequest{}, ""},
		{"valid generate bucket id", &cosiproto.DriverGenerateBucketIdRequest{Name: "bc-1", Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}}, ""},
		{"generate without name", &cosiproto.DriverGenerateBucketIdRequest{}, "name is required"},
		{"generate with unknown protocol", &cosiproto.DriverGenerateBucketIdRequest{Name: "n", Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_UNKNOWN}}, "protocols[0]"},
		{"generate with out-of-range protocol", &cosiproto.DriverGenerateBucketIdRequest{Name: "n", Protocols: []cosiproto.ObjectProtocol_Type{9}}, "protocols[0]"},
		{"generate with a protocol twice", &cosiproto.DriverGenerateBucketIdRequest{Name: "n", Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3, cosiproto.ObjectProtocol_S3}}, "listed twice"},
		{"create without bucket_id", &cosiproto.DriverCreateBucketRequest{}, "bucket_id is required"},
		{"create with a too long bucket_id", &cosiproto.DriverCreateBucketRequest{BucketId: long}, "bucket_id is longer"},
		{"create with too many parameters", &cosiproto.DriverCreateBucketRequest{BucketId: "b", Parameters: tooMany}, "parameters:"},
		{"create with an empty parameter key", &cosiproto.DriverCreateBucketRequest{BucketId: "b", Parameters: map[string]string{"": "v"}}, "empty key"},
		{"create with a too long parameter value", &cosiproto.DriverCreateBucketRequest{BucketId: "b", Parameters: map[string]string{"k": strings.Repeat("v", MaxParameterValueLength+1)}}, `parameters["k"]`},
		{"get without bucket_id", &cosiproto.DriverGetBucketRequest{}, "bucket_id is required"},
		{"delete without bucket_id", &cosiproto.DriverDeleteBucketRequest{}, "bucket_id is required"},
		{"valid grant", validGrant(), ""},
		{"grant without account_id", grant(func(r *cosiproto.DriverGrantBucketAccessRequest) { r.AccountId = "" }), "account_id is required"},
		{"grant without buckets", grant(func(r *cosiproto.DriverGrantBucketAccessRequest) { r.Buckets = nil }), "at least one bucket"},
		{"grant with a bucket twice", grant(func(r *cosiproto.DriverGrantBucketAccessRequest) { r.Buckets = append(r.Buckets, r.Buckets[0]) }), "listed twice"},
		{"grant without bucket_id", grant(func(r *cosiproto.DriverGrantBucketAccessRequest) { r.Buckets[0].BucketId = "" }), "buckets[0].bucket_id is required"},
		{"grant without access modes", grant(func(r *cosiproto.DriverGrantBucketAccessRequest) { r.Buckets[0].AccessModes = nil }), "at least one of object_data"},
		{"grant with an unknown access mode", grant(func(r *cosiproto.DriverGrantBucketAccessRequest) { r.Buckets[0].AccessModes.BucketMetadata = 7 }), "bucket_metadata"},
		{"grant without protocol", grant(func(r *cosiproto.DriverGrantBucketAccessRequest) { r.Protocol = cosiproto.ObjectProtocol_UNKNOWN }), "protocol"},
		{"grant without authentication type", grant(func(r *cosiproto.DriverGrantBucketAccessRequest) {
			r.AuthenticationType = cosiproto.AuthenticationType_UNKNOWN
		}), "authentication_type"},
		{"grant with a service account for KEY", grant(func(r *cosiproto.DriverGrantBucketAccessRequest) {
			r.ServiceAccount = &cosiproto.ServiceAccount{Namespace: "ns", Name: "sa"}
		}), "must be empty for KEY"},
		{"grant for SERVICE_ACCOUNT without service account", grant(func(r *cosiproto.DriverGrantBucketAccessRequest) {
			r.AuthenticationType = cosiproto.AuthenticationType_SERVICE_ACCOUNT
		}), "required for SERVICE_ACCOUNT"},
		{"valid SERVICE_ACCOUNT grant", grant(func(r *cosiproto.DriverGrantBucketAccessRequest) {
			r.AuthenticationType = cosiproto.AuthenticationType_SERVICE_ACCOUNT
			r.ServiceAccount = &cosiproto.ServiceAccount{Namespace: "ns", Name: "sa"}
		}), ""},
		{"generate access without account_name", &cosiproto.DriverGenerateBucketAccessIdRequest{Buckets: validGrant().Buckets, Protocol: cosiproto.ObjectProtocol_S3, AuthenticationType: cosiproto.AuthenticationType_KEY}, "account_name is required"},
		{"revoke without account_id", &cosiproto.DriverRevokeBucketAccessRequest{Buckets: []*cosiproto.DriverRevokeBucketAccessRequest_Bucket{{BucketId: "b"}}, Protocol: cosiproto.ObjectProtocol_S3, AuthenticationType: cosiproto.AuthenticationType_KEY}, "account_id is required"},
		{"revoke without buckets", &cosiproto.DriverRevokeBucketAccessRequest{AccountId: "a", Protocol: cosiproto.ObjectProtocol_S3, AuthenticationType: cosiproto.AuthenticationType_KEY}, "at least one bucket"},
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
	req.Buckets = append(req.Buckets, &cosiproto.AccessedBucket{BucketId: "bc-2", AccessModes: &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_ONLY}})
	info := func(id string) *cosiproto.DriverGrantBucketAccessResponse_BucketInfo {
		return &cosiproto.DriverGrantBucketAccessResponse_BucketInfo{BucketId: id, BucketInfo: &cosiproto.ProtocolBucketInfo{
			S3: &cosiproto.S3BucketInfo{BucketName: id, Endpoint: "https://s3.example.com", Region: "us-east-1"}}}
	}
	creds := &cosiproto.CredentialInfo{S3: &cosiproto.S3Credentials{AccessKeyId: "AK", AccessSecretKey: "SECRETVALUE"}}
	for _, tc := range []struct {
		name    string
		resp    *cosiproto.DriverGrantBucketAccessResponse
		wantErr string
	}{
		{"complete", &cosiproto.DriverGrantBucketAccessResponse{Buckets: []*cosiproto.DriverGrantBucketAccessResponse_BucketInfo{info("bc-1"), info("bc-2")}, Credentials: creds}, ""},
		{"a bucket missing", &cosiproto.DriverGrantBucketAccessResponse{Buckets: []*cosiproto.DriverGrantBucketAccessResponse_BucketInfo{info("bc-1")}, Credentials: creds}, `no entry for requested bucket "bc-2"`},
		{"an extra bucket", &cosiproto.DriverGrantBucketAccessResponse{Buckets: []*cosiproto.DriverGrantBucketAccessResponse_BucketInfo{info("bc-1"), info("bc-2"), info("bc-3")}, Credentials: creds}, "3 entries for 2"},
		{"no region", &cosiproto.DriverGrantBucketAccessResponse{Buckets: []*cosiproto.DriverGrantBucketAccessResponse_BucketInfo{info("bc-1"), {BucketId: "bc-2", BucketInfo: &cosiproto.ProtocolBucketInfo{S3: &cosiproto.S3BucketInfo{BucketName: "bc-2", Endpoint: "e"}}}}, Credentials: creds}, "needs bucket_name, endpoint and region"},
		{"no secret key", &cosiproto.DriverGrantBucketAccessResponse{Buckets: []*cosiproto.DriverGrantBucketAccessResponse_BucketInfo{info("bc-1"), info("bc-2")}, Credentials: &cosiproto.CredentialInfo{S3: &cosiproto.S3Credentials{AccessKeyId: "AK"}}}, "need access_key_id and access_secret_key"},
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
