package driver

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

func TestStripSecrets(t *testing.T) {
	const secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
	for _, tc := range []struct {
		name     string
		msg      proto.Message
		wantKept []string // values that are not secret and must stay readable
	}{
		{
			name: "S3 credentials in a grant response",
			msg: &cosiproto.DriverGrantBucketAccessResponse{
				Buckets: []*cosiproto.DriverGrantBucketAccessResponse_BucketInfo{{
					BucketId: "bc-1",
					BucketInfo: &cosiproto.ProtocolBucketInfo{
						S3: &cosiproto.S3BucketInfo{BucketName: "bc-1", Endpoint: "https://s3.example.com"},
					},
				}},
				Credentials: &cosiproto.CredentialInfo{
					S3: &cosiproto.S3Credentials{AccessKeyId: "AKIAEXAMPLE", AccessSecretKey: secret},
				},
			},
			wantKept: []string{"AKIAEXAMPLE", "https://s3.example.com", "bc-1"},
		},
		{
			name: "Azure token",
			msg: &cosiproto.CredentialInfo{
				Azure: &cosiproto.AzureCredentials{AccessToken: "sv=2024&sig=" + secret, ExpiryTimestamp: timestamppb.Now()},
			},
			wantKept: []string{"expiryTimestamp"},
		},
		{
			name: "GCS private key and HMAC secret",
			msg: &cosiproto.GcsCredentials{
				ClientEmail: "sa@example.iam", PrivateKey: "-----BEGIN " + secret,
				HmacAccessId: "GOOG1EXAMPLE", HmacSecret: secret,
			},
			wantKept: []string{"sa@example.iam", "GOOG1EXAMPLE"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := proto.Clone(tc.msg)
			out := StripSecrets(tc.msg).String()
			if strings.Contains(out, secret) {
				t.Errorf("the secret survived: %s", out)
			}
			if !strings.Contains(out, strippedValue) {
				t.Errorf("no %s marker in %s", strippedValue, out)
			}
			for _, kept := range tc.wantKept {
				if !strings.Contains(out, kept) {
					t.Errorf("%q was lost: %s", kept, out)
				}
			}
			if !proto.Equal(before, tc.msg) {
				t.Errorf("StripSecrets changed the message itself")
			}
		})
	}
	if got := StripSecrets(nil).String(); got != "null" {
		t.Errorf("StripSecrets(nil) = %q", got)
	}
}
