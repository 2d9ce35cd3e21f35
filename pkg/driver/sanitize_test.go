package driver

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/go-logr/logr"
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

// TestStripSecretsInSlogLogs: a logr.Logger on a log/slog handler (the sidecar's and the
// controller's JSON logs) prints the stripped message, not {}: the JSON handler as a JSON object
// whose fields a reader can parse, the text handler as its JSON text; the secret appears in
// neither.
func TestStripSecretsInSlogLogs(t *testing.T) {
	const secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
	resp := &cosiproto.DriverGrantBucketAccessResponse{
		Credentials: &cosiproto.CredentialInfo{
			S3: &cosiproto.S3Credentials{AccessKeyId: "AKIAEXAMPLE", AccessSecretKey: secret},
		},
	}
	var jsonOut, textOut bytes.Buffer
	opts := &slog.HandlerOptions{Level: slog.Level(-LogLevelBodies)}
	for _, h := range []slog.Handler{slog.NewJSONHandler(&jsonOut, opts), slog.NewTextHandler(&textOut, opts)} {
		logr.FromSlogHandler(h).V(LogLevelBodies).Info("response", "response", StripSecrets(resp), "none", StripSecrets(nil))
	}
	var line struct {
		Response struct {
			Credentials struct {
				S3 struct{ AccessKeyID, AccessSecretKey string }
			}
		}
		None any
	}
	if err := json.Unmarshal(jsonOut.Bytes(), &line); err != nil {
		t.Fatalf("the JSON log line does not parse: %v\n%s", err, jsonOut.String())
	}
	if s3 := line.Response.Credentials.S3; s3.AccessKeyID != "AKIAEXAMPLE" || s3.AccessSecretKey != strippedValue {
		t.Errorf("the JSON log's response has credentials %+v, want the key ID and %s\n%s",
			s3, strippedValue, jsonOut.String())
	}
	if line.None != nil {
		t.Errorf("StripSecrets(nil) logged as %v, want null", line.None)
	}
	if !strings.Contains(textOut.String(), "AKIAEXAMPLE") {
		t.Errorf("the text log lacks the response: %s", textOut.String())
	}
	for _, out := range []string{jsonOut.String(), textOut.String()} {
		if strings.Contains(out, secret) {
			t.Errorf("the secret is in the log: %s", out)
		}
	}
}
