package sanity

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

func TestRedact(t *testing.T) {
	const (
		key    = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY" // 40 characters, as AWS's
		pem    = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n"
		bucket = "sanity-abcd1234-b12"
		sas    = "https://acct1.blob.core.windows.net/" + bucket + "?sv=2022-11-02&sr=c&sig=0aBcDeFgHiJkLmNoPqRsTuVwXyZ%3D"
	)
	r := newRedactor()
	r.addOpen(bucket) // a name the suite chose
	for _, s := range []string{key, pem, sas, "true", "abc"} {
		r.addSecret(s)
	}
	for _, tc := range []struct {
		name, in, want string
	}{
		{"a secret alone", key, Redacted},
		{"a secret inside a longer string", "account ba-1-" + key + "-x exists",
			"account ba-1-" + Redacted + "-x exists"},
		{"a secret quoted with %q", fmt.Sprintf("bad key %q", pem), `bad key "` + Redacted + `"`},
		{"a secret URL-escaped", "GET /?k=" + url.QueryEscape(key), "GET /?k=" + Redacted},
		{"a secret cut short", "key " + key[:20] + "... refused", "key " + Redacted + "... refused"},
		{"a fragment under fragmentLen characters stays", "key " + key[:fragmentLen-1] + "...",
			"key " + key[:fragmentLen-1] + "..."},
		{"a name the suite chose stays, though a token embeds it", `bucket "` + bucket + `" is gone`,
			`bucket "` + bucket + `" is gone`},
		{"what else of a token is not open goes", "cannot reach https://acct1.blob.core.windows.net",
			"cannot reach " + Redacted},
		{"a short value that is no credential stays", "abc", "abc"},
		{"a short value of four characters goes", "allowed=true", "allowed=" + Redacted},
		{"nothing to hide", "DriverGetBucket returned NotFound", "DriverGetBucket returned NotFound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := r.redact(tc.in); got != tc.want {
				t.Errorf("redact(%q)\n = %q\nwant %q", tc.in, got, tc.want)
			}
		})
	}

	// An open string that holds a secret the driver returns later is open no longer.
	r = newRedactor()
	r.addOpen("https://" + key + ".example.com")
	r.addSecret(key)
	if got := r.redact("endpoint https://" + key[:30]); strings.Contains(got, key[:fragmentLen]) {
		t.Errorf("a fragment of a secret stays because an earlier open string held the secret: %q", got)
	}

	// Whole characters only.
	r = newRedactor()
	r.addSecret("ééééééééééééééé")
	if got := r.redact("xé" + "éééééééééééé"[:fragmentLen] + "y"); !utf8.ValidString(got) {
		t.Errorf("redact cut a character: %q", got)
	}
}

func TestReplyStrings(t *testing.T) {
	secrets, open := replyStrings((&cosiproto.DriverGrantBucketAccessResponse{
		Buckets: []*cosiproto.DriverGrantBucketAccessResponse_BucketInfo{{
			BucketId: "b1",
			BucketInfo: &cosiproto.ProtocolBucketInfo{
				S3: &cosiproto.S3BucketInfo{BucketName: "b1", Endpoint: "https://s3", Region: "r1"},
			},
		}},
		Credentials:  &cosiproto.CredentialInfo{S3: &cosiproto.S3Credentials{AccessKeyId: "AKID", AccessSecretKey: "SECRET"}},
		CredentialId: "cred-1",
	}).ProtoReflect())
	slices.Sort(open)
	if !slices.Equal(secrets, []string{"SECRET"}) ||
		!slices.Equal(open, []string{"AKID", "b1", "b1", "cred-1", "https://s3", "r1"}) {
		t.Errorf("v1alpha2 grant: secrets %q, open %q", secrets, open)
	}

	secrets, open = replyStrings((&v1.DriverGrantBucketAccessResponse{
		AccountId: "acc-1",
		Credentials: map[string]*v1.CredentialDetails{v1alpha1.CredentialsS3: {Secrets: map[string]string{
			v1alpha1.S3AccessKeyID: "AKID", v1alpha1.S3AccessSecretKey: "SECRET", v1alpha1.S3Endpoint: "https://s3",
			v1alpha1.S3Region: "r1", "sessionToken": "TOKEN",
		}}},
	}).ProtoReflect())
	slices.Sort(secrets)
	slices.Sort(open)
	if !slices.Equal(secrets, []string{"SECRET", "TOKEN"}) ||
		!slices.Equal(open, []string{"AKID", "acc-1", "https://s3", "r1"}) {
		t.Errorf("v1alpha1 grant: secrets %q, open %q (every value of secrets is secret but under NonSecretKeys)",
			secrets, open)
	}
}
