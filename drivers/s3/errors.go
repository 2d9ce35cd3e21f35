package s3

import (
	"context"
	"errors"
	"fmt"
	"net"

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

// toStatus turns a backend error into the gRPC status the COSI spec names, with what failed in
// the message. Backend error messages never contain credentials: S3 and IAM errors name actions,
// resources and request IDs only, and the driver never puts keys into its own messages.
func toStatus(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	what := fmt.Sprintf(format, args...)
	code := codes.Internal
	switch apiCode(err) {
	case "NoSuchBucket", "NoSuchEntity", "NoSuchUser", "NoSuchKey":
		code = codes.NotFound
	case "BucketAlreadyExists", "EntityAlreadyExists", "UserAlreadyExists":
		code = codes.AlreadyExists
	case "InvalidBucketName", "InvalidLocationConstraint", "IllegalLocationConstraintException", "MalformedPolicyDocument",
		"InvalidArgument", "InvalidRequest", "ValidationError":
		code = codes.InvalidArgument
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidClientTokenId", "AuthFailure":
		code = codes.PermissionDenied
	case "SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests":
		code = codes.Unavailable
	case "LimitExceeded", "QuotaExceeded", "TooManyBuckets":
		code = codes.ResourceExhausted
	case "BucketNotEmpty":
		code = codes.FailedPrecondition
	case "NotImplemented", "VersioningNotConfigured", "ObjectLockConfigurationNotAllowed":
		// The store lacks a feature the request asks for: retrying cannot help.
		code = codes.InvalidArgument
	default:
		var netErr net.Error
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			code = codes.DeadlineExceeded
		case errors.Is(err, context.Canceled):
			code = codes.Canceled
		case httpStatus(err) == 501:
			code = codes.InvalidArgument
		case errors.As(err, &netErr), httpStatus(err) >= 500:
			code = codes.Unavailable
		}
	}
	return status.Errorf(code, "%s: %v", what, err)
}
