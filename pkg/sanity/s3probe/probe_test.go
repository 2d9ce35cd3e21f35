package s3probe

import (
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/smithy-go"
)

// Against a real store, TestS3Probe and TestSanity (drivers/s3) check the probe on Versity and
// Ceph RGW. Here: what needs no store.

func TestNewRefusesIncompleteConfig(t *testing.T) {
	creds := credentials.NewStaticCredentialsProvider("a", "b", "")
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Credentials: creds}, "Config.Endpoint is required"},
		{Config{Endpoint: "127.0.0.1:7070", Credentials: creds}, "not an http:// or https:// URL"},
		{Config{Endpoint: "http://127.0.0.1:7070"}, "Config.Credentials"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v, want an error naming %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := New(Config{Endpoint: "https://s3.example.com", Credentials: creds}); err != nil {
		t.Errorf("New with endpoint and credentials: %v", err)
	}
}

// An AWS-style refusal names its caller, which is whom the credentials authenticate as.
func TestRefusedUser(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&smithy.GenericAPIError{Code: "AccessDenied", Message: "User: arn:aws:iam::000000000000:user/cosi/ba-x1 " +
			"is not authorized to perform: s3:ListAllMyBuckets on resource: \"arn:aws:s3:::*\""}, "ba-x1"},
		{&smithy.GenericAPIError{Code: "AccessDenied", Message: "User: arn:aws:iam::123456789012:user/alice " +
			"is not authorized to perform: iam:GetUser"}, "alice"},
		{&smithy.GenericAPIError{Code: "AccessDenied", Message: "Access Denied"}, ""},
		{&smithy.GenericAPIError{Code: "InvalidAccessKeyId", Message: "User: arn:aws:iam::1:user/x is not authorized"}, ""},
		{errors.New("User: arn:aws:iam::1:user/x is not authorized"), ""},
	} {
		if got := refusedUser(tc.err); got != tc.want {
			t.Errorf("refusedUser(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
