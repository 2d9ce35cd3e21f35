package s3

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// apiCode returns the S3 or IAM error code of err ("NoSuchBucket"), or "".
func apiCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

// httpStatus returns the HTTP status of a failed S3 or IAM call, or 0.
func httpStatus(err error) int {
	var respErr *smithyhttp.ResponseError
	if errors.As(err, &respErr) {
		return respErr.HTTPStatusCode()
	}
	return 0
}

// backendError is a failed call to the object store as the driver answers it: a gRPC status
// whose message the driver wrote, and the store's own error as the cause. gRPC messages end up
// in conditions and events that tenants read, so they never carry the store's text, which can
// name the admin identity (AWS and Versity put the caller's ARN into AccessDenied) or internal
// endpoints; the cause goes to the driver's log (Driver.logFailure) for the operator.
type backendError struct {
	st    *status.Status
	cause error
}

func newBackendError(code codes.Code, cause error, msg string) *backendError {
	return &backendError{st: status.New(code, msg), cause: cause}
}

// Error is the message without the store's text, so that wrapping it cannot leak the cause.
func (e *backendError) Error() string              { return e.st.Message() }
func (e *backendError) GRPCStatus() *status.Status { return e.st }
func (e *backendError) Unwrap() error              { return e.cause }

// policyLimitCodes are the store's answers to a policy write that is over one of its limits (the
// document's size, the number of statements or policies): IAM's LimitExceeded, S3's
// PolicyTooLarge and EntityTooLarge, and Ceph RGW's InvalidRange (HTTP 416), its answer to a
// request body over rgw_max_put_param_size (1 MiB by default). Elsewhere LimitExceeded is a quota
// that an admin may raise (ResourceExhausted, retried); on a policy write it is the request that
// is too big, and the same request can never pass: final.
var policyLimitCodes = map[string]bool{
	"LimitExceeded": true, "PolicyTooLarge": true, "EntityTooLarge": true, "InvalidRange": true,
}

// policyWriteStatus is toStatus for a failed policy write: a limit of the store is code, which
// must be final (OutOfRange or InvalidArgument), saying what exceeds it and what to do (hint).
func policyWriteStatus(err error, code codes.Code, what, hint string) error {
	if err == nil {
		return nil
	}
	if policyLimitCodes[apiCode(err)] || httpStatus(err) == http.StatusRequestEntityTooLarge ||
		httpStatus(err) == http.StatusRequestedRangeNotSatisfiable {
		return newBackendError(code, err, what+": the policy exceeds the store's policy limits ("+describe(err)+"); "+hint)
	}
	return toStatus(err, "%s", what)
}

// adminAuthCodes are the store's answers that mean the driver's own identity was refused: its
// key was rotated or deleted, its token expired, or its permissions were changed. An admin fixes
// these (a new credentials file is picked up while the driver runs), so they are Unavailable,
// retried with backoff, not a final PermissionDenied: calls in flight finish once they are fixed.
var adminAuthCodes = map[string]bool{
	"AccessDenied": true, "AccessDeniedException": true, "InvalidAccessKeyId": true, "SignatureDoesNotMatch": true,
	"InvalidClientTokenId": true, "AuthFailure": true, "ExpiredToken": true, "ExpiredTokenException": true,
	"TokenRefreshRequired": true, "InvalidToken": true, "UnrecognizedClientException": true,
	"MissingAuthenticationToken": true, "InvalidSecurity": true,
}

// toStatus turns a backend error into the gRPC status the COSI spec names, with what failed and
// the store's error code in the message, and nothing else of the store's answer (see
// backendError).
func toStatus(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	what := fmt.Sprintf(format, args...)
	code, answer := codes.Internal, describe(err)
	hint := ""
	switch c := apiCode(err); {
	case c == "NoSuchBucket" || c == "NoSuchEntity" || c == "NoSuchUser" || c == "NoSuchKey":
		code = codes.NotFound
	case c == "BucketAlreadyExists" || c == "EntityAlreadyExists" || c == "UserAlreadyExists":
		code = codes.AlreadyExists
	case c == "InvalidBucketName" || c == "InvalidLocationConstraint" || c == "IllegalLocationConstraintException" ||
		c == "MalformedPolicyDocument" || c == "InvalidArgument" || c == "InvalidRequest" || c == "ValidationError":
		code = codes.InvalidArgument
	case adminAuthCodes[c], c == "" && httpStatus(err) == 403:
		code = codes.Unavailable
		hint = ": the object store refused the driver's own identity; " +
			"the driver's administrator must check its credentials and permissions (the call is retried)"
	case c == "SlowDown" || c == "Throttling" || c == "ThrottlingException" || c == "RequestLimitExceeded" ||
		c == "TooManyRequests":
		code = codes.Unavailable
	case c == "LimitExceeded" || c == "QuotaExceeded" || c == "TooManyBuckets":
		code = codes.ResourceExhausted
	case c == "BucketNotEmpty":
		code = codes.FailedPrecondition
	case c == "NotImplemented" || c == "VersioningNotConfigured" || c == "ObjectLockConfigurationNotAllowed":
		// The store lacks a feature the request asks for: retrying cannot help.
		code = codes.InvalidArgument
	default:
		var netErr net.Error
		var credErr *credentialsError
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			code = codes.DeadlineExceeded
		case errors.Is(err, context.Canceled):
			code = codes.Canceled
		case errors.As(err, &credErr):
			code = codes.Unavailable
			hint = ": the driver's administrator must fix its credentials file (the call is retried)"
		case httpStatus(err) == 501:
			code = codes.InvalidArgument
		case errors.As(err, &netErr), httpStatus(err) >= 500:
			code = codes.Unavailable
		}
	}
	return newBackendError(code, err, what+": "+answer+hint)
}

// describe says what the store answered in words that are safe to show a tenant: the store's
// error code and HTTP status, never its message.
func describe(err error) string {
	var netErr net.Error
	var credErr *credentialsError
	code, httpCode := apiCode(err), httpStatus(err)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "the object store did not answer in time"
	case errors.Is(err, context.Canceled):
		return "the call was cancelled"
	case errors.As(err, &credErr):
		return "the driver's admin credentials cannot be read"
	case code != "" && httpCode != 0:
		return fmt.Sprintf("the object store answered %s (HTTP %d)", code, httpCode)
	case code != "":
		return "the object store answered " + code
	case httpCode != 0:
		return fmt.Sprintf("the object store answered HTTP %d", httpCode)
	case errors.As(err, &netErr):
		return "the object store could not be reached"
	}
	return "the call to the object store failed"
}
