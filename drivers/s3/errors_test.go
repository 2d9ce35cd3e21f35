package s3

import (
	"errors"
	"testing"

	"github.com/aws/smithy-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/pkg/driver"
)

// Issue 25, item 23: a store's limit on a policy write is final (the same request can never
// pass), while the same code elsewhere is a quota an admin may raise, and throttling is retried.
// The answers are the stores' error codes as the AWS SDK decodes them, built here for the codes no
// store of the tests answers (PolicyTooLarge); TestPolicyOverStoreLimitIsFinal has Versity answer
// LimitExceeded and Ceph RGW InvalidRange.
func TestPolicyWriteLimitsAreFinal(t *testing.T) {
	apiErr := func(code string) error {
		return &smithy.GenericAPIError{Code: code, Message: "the store's message"}
	}
	cases := []struct {
		name      string
		err       error
		want      codes.Code
		retryable bool
	}{
		{"policy write, IAM LimitExceeded", policyWriteStatus(apiErr("LimitExceeded"), codes.OutOfRange, "setting", "hint"),
			codes.OutOfRange, false},
		{"policy write, S3 PolicyTooLarge", policyWriteStatus(apiErr("PolicyTooLarge"), codes.OutOfRange, "setting", "hint"),
			codes.OutOfRange, false},
		{"policy write, throttled", policyWriteStatus(apiErr("Throttling"), codes.OutOfRange, "setting", "hint"),
			codes.Unavailable, true},
		{"policy write, malformed", policyWriteStatus(apiErr("MalformedPolicyDocument"), codes.OutOfRange, "setting",
			"hint"),
			codes.InvalidArgument, false},
		{"policy write, RGW InvalidRange", policyWriteStatus(apiErr("InvalidRange"), codes.InvalidArgument, "setting",
			"hint"), codes.InvalidArgument, false},
		{"other call, LimitExceeded (a quota)", toStatus(apiErr("LimitExceeded"), "creating a user"),
			codes.ResourceExhausted, true},
	}
	for _, c := range cases {
		if got := status.Code(c.err); got != c.want || driver.Retryable(c.err) != c.retryable {
			t.Errorf("%s: %v (retryable %v), want %v (retryable %v)", c.name, c.err, driver.Retryable(c.err), c.want,
				c.retryable)
		}
	}
	err := policyWriteStatus(apiErr("LimitExceeded"), codes.OutOfRange, "setting", "hint")
	if msg := status.Convert(err).Message(); msg != "setting: the policy exceeds the store's policy limits "+
		"(the object store answered LimitExceeded); hint" {
		t.Errorf("message %q does not say what to do", msg)
	}
	var apiErrOut smithy.APIError
	if !errors.As(err, &apiErrOut) {
		t.Error("the store's error is not kept as the cause")
	}
}
