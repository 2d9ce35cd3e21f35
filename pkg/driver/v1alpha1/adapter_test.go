package v1alpha1

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

const (
	rw = cosiproto.AccessMode_READ_WRITE
	ro = cosiproto.AccessMode_READ_ONLY
)

func TestCheckAccessModes(t *testing.T) {
	cases := []struct {
		declared  string
		requested *cosiproto.AccessModes
		ok        bool
	}{
		{"", &cosiproto.AccessModes{ObjectData: rw}, true},
		{"", &cosiproto.AccessModes{ObjectData: ro}, false}, // never widened to the driver's read-write
		{"", &cosiproto.AccessModes{ObjectData: rw, ObjectMetadata: rw}, false},
		{"", &cosiproto.AccessModes{}, false},
		{"objectData=ReadOnly", &cosiproto.AccessModes{ObjectData: ro}, true},
		{"objectData=ReadOnly", &cosiproto.AccessModes{ObjectData: rw}, false}, // never narrowed silently either
		{"objectData=ReadWrite,objectMetadata=ReadOnly", &cosiproto.AccessModes{ObjectMetadata: ro}, true},
		{"objectData=ReadWrite,bucketMetadata=ReadWrite", &cosiproto.AccessModes{ObjectData: rw, BucketMetadata: rw}, true},
	}
	for _, tc := range cases {
		declared, err := ParseAccessModes(tc.declared)
		if err != nil {
			t.Fatal(err)
		}
		err = CheckAccessModes(declared, tc.requested)
		if (err == nil) != tc.ok {
			t.Errorf("declared %q, requested %v: %v, want ok=%v", tc.declared, tc.requested, err, tc.ok)
		}
		if err != nil && status.Code(err) != codes.InvalidArgument {
			t.Errorf("declared %q: code %v, want InvalidArgument (final in the sidecar)", tc.declared, status.Code(err))
		}
	}
	for _, bad := range []string{"objectData", "objectData=rw", "data=ReadWrite"} {
		if _, err := ParseAccessModes(bad); err == nil {
			t.Errorf("ParseAccessModes(%q) accepted", bad)
		}
	}
}

func TestDriverParametersDropTheAdaptersOwn(t *testing.T) {
	got := driverParameters(map[string]string{ParameterAccessModes: "objectData=ReadOnly", "tier": "gold"})
	if len(got) != 1 || got["tier"] != "gold" {
		t.Errorf("driverParameters: %v", got)
	}
}

func TestMapCredentials(t *testing.T) {
	const secret = "s3cr3t-value"
	a := New(nil, Options{})
	info, creds, err := a.mapCredentials(
		cosiproto.ObjectProtocol_S3,
		"bc-1",
		nil,
		map[string]*v1.CredentialDetails{"s3": {Secrets: map[string]string{
			S3AccessKeyID:     "AKID",
			S3AccessSecretKey: secret,
			S3Endpoint:        "https://s3.example.com",
			S3Region:          "eu-1",
			"sessionToken":    "extra",
		}}},
	)
	if err != nil {
		t.Fatal(err)
	}
	if s := info.GetS3(); s.GetBucketName() != "bc-1" || s.GetEndpoint() != "https://s3.example.com" ||
		s.GetRegion() != "eu-1" {
		t.Errorf("S3 info %v", s)
	}
	if c := creds.GetS3(); c.GetAccessKeyId() != "AKID" || c.GetAccessSecretKey() != secret {
		t.Errorf("S3 credentials mapped wrongly")
	}
	if strings.Contains(info.String()+creds.String(), "extra") {
		t.Errorf("a key outside the mapping was copied")
	}

	info, creds, err = a.mapCredentials(
		cosiproto.ObjectProtocol_AZURE,
		"c",
		nil,
		map[string]*v1.CredentialDetails{"azure": {Secrets: map[string]string{
			AzureAccessToken: "https://acct1.blob.core.windows.net/c?sv=x&sig=" + secret,
			AzureExpiry:      "2030-01-02 03:04:05 +0000 UTC",
		}}},
	)
	if err != nil {
		t.Fatal(err)
	}
	if info.GetAzure().GetStorageAccount() != "acct1" || creds.GetAzure().GetExpiryTimestamp().AsTime().Year() != 2030 {
		t.Errorf("Azure: %v", info.GetAzure())
	}

	_, _, err = a.mapCredentials(
		cosiproto.ObjectProtocol_S3,
		"b",
		nil,
		map[string]*v1.CredentialDetails{"azure": {Secrets: map[string]string{AzureAccessToken: secret}}},
	)
	if status.Code(err) != codes.Internal || strings.Contains(err.Error(), secret) {
		t.Errorf("missing s3 credentials: %v (must name keys, never values)", err)
	}
}

func TestBucketInfo(t *testing.T) {
	a := New(nil, Options{})
	got := a.bucketInfo(
		"bc-1",
		&v1.Protocol{Type: &v1.Protocol_S3{S3: &v1.S3{Region: "r1", SignatureVersion: v1.S3SignatureVersion_S3V4}}},
		nil,
	)
	if got.GetS3().GetRegion() != "r1" || got.GetS3().GetBucketName() != "bc-1" || got.GetAzure() != nil {
		t.Errorf("S3 bucket_info: %v", got)
	}
	if got := a.bucketInfo("bc-1", nil, nil); got.GetS3().GetBucketName() != "bc-1" {
		t.Errorf("no bucket_info: %v, want the configured S3 with the name", got)
	}
}

// TestRotationUnimplemented: v1alpha1 has no rotation; the sidecar must hear Unimplemented, the
// code that makes it stop asking, without any call to the driver (the adapter has no connection).
func TestRotationUnimplemented(t *testing.T) {
	a := New(nil, Options{})
	_, err := a.DriverRotateBucketAccessCredentials(t.Context(), &cosiproto.DriverRotateBucketAccessCredentialsRequest{
		AccountId: "ba-1", CredentialId: "key-1",
	})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("DriverRotateBucketAccessCredentials: %v, want Unimplemented", err)
	}
	_, err = a.DriverRetireBucketAccessCredentials(t.Context(), &cosiproto.DriverRetireBucketAccessCredentialsRequest{
		AccountId: "ba-1", CredentialId: "key-1",
	})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("DriverRetireBucketAccessCredentials: %v, want Unimplemented", err)
	}
}
