package azure

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// backendError is a failed call to the storage account as the driver answers it: a gRPC status
// whose message the driver wrote, and the account's own error as the cause. gRPC messages end up
// in conditions and events that tenants read, so they carry the account's error code and HTTP
// status, never its message; the cause goes to the driver's log (Driver.logFailure) for the
// operator. (The SDK's errors name the request's URL without its query, so no SAS reaches the
// log either.)
type backendError struct {
	st    *status.Status
	cause error
}

// Error is the message without the account's text, so that wrapping it cannot leak the cause.
func (e *backendError) Error() string              { return e.st.Message() }
func (e *backendError) GRPCStatus() *status.Status { return e.st }
func (e *backendError) Unwrap() error              { return e.cause }

// responseError returns the Blob service's error behind err, or nil.
func responseError(err error) *azcore.ResponseError {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re
	}
	return nil
}

// adminAuthCodes are the account's answers that mean the driver's own key was refused: rotated,
// or the account disabled. An admin fixes these (a new credentials file is picked up while the
// driver runs), so they are Unavailable, retried with backoff, not a final PermissionDenied.
var adminAuthCodes = map[bloberror.Code]bool{
	bloberror.AuthenticationFailed: true, bloberror.AuthorizationFailure: true,
	bloberror.AuthorizationPermissionMismatch: true, bloberror.InsufficientAccountPermissions: true,
	bloberror.AccountIsDisabled: true, bloberror.ContainerDisabled: true,
}

// leaseCodes are the account's answers that mean someone else holds the container's lease: another
// driver changing its stored access policies (holdPolicies), for a few seconds, or its owner.
var leaseCodes = map[bloberror.Code]bool{
	bloberror.LeaseAlreadyPresent: true, bloberror.LeaseIDMissing: true, bloberror.LeaseLost: true,
	bloberror.LeaseIDMismatchWithContainerOperation: true, bloberror.LeaseNotPresentWithContainerOperation: true,
	bloberror.LeaseIsBreakingAndCannotBeAcquired: true,
}

// toStatus turns a Blob service error into the gRPC status the COSI spec names, with what failed
// (format, args) and the account's error code in the message.
func toStatus(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	what := fmt.Sprintf(format, args...)
	code, hint := codes.Internal, ""
	re := responseError(err)
	var credErr *credentialsError
	var netErr net.Error
	switch {
	case re != nil && re.ErrorCode == string(bloberror.ContainerNotFound):
		code = codes.NotFound
	case re != nil && re.ErrorCode == string(bloberror.ContainerAlreadyExists):
		code = codes.AlreadyExists
	case re != nil && re.ErrorCode == string(bloberror.ContainerBeingDeleted):
		// Azure takes a while to delete a container; its name is free again afterwards.
		code, hint = codes.Unavailable, ": a container of that name is being deleted (the call is retried)"
	case re != nil && leaseCodes[bloberror.Code(re.ErrorCode)]:
		code = codes.Unavailable
		hint = ": the container's lease is held by another driver changing its stored access policies, " +
			"or by its owner (the call is retried)"
	case re != nil && (adminAuthCodes[bloberror.Code(re.ErrorCode)] || re.StatusCode == http.StatusForbidden):
		code = codes.Unavailable
		hint = ": the storage account refused the driver's own key; " +
			"the driver's administrator must check its credentials (the call is retried)"
	case re != nil && (re.ErrorCode == string(bloberror.InvalidResourceName) ||
		re.StatusCode == http.StatusBadRequest):
		code = codes.InvalidArgument
	case re != nil && (re.StatusCode >= 500 || re.StatusCode == http.StatusTooManyRequests):
		code = codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.As(err, &credErr):
		code, hint = codes.Unavailable, ": the driver's administrator must fix its credentials file (the call is retried)"
	case errors.As(err, &netErr):
		code = codes.Unavailable
	}
	return &backendError{st: status.New(code, what+": "+describe(err)+hint), cause: err}
}

// describe says what the account answered in words that are safe to show a tenant: the error
// code and HTTP status, never the message.
func describe(err error) string {
	var credErr *credentialsError
	var netErr net.Error
	re := responseError(err)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "the storage account did not answer in time"
	case errors.Is(err, context.Canceled):
		return "the call was cancelled"
	case errors.As(err, &credErr):
		return "the driver's account credentials cannot be read"
	case re != nil && re.ErrorCode != "":
		return fmt.Sprintf("the storage account answered %s (HTTP %d)", re.ErrorCode, re.StatusCode)
	case re != nil:
		return fmt.Sprintf("the storage account answered HTTP %d", re.StatusCode)
	case errors.As(err, &netErr):
		return "the storage account could not be reached"
	}
	return "the call to the storage account failed"
}

// hasCode reports whether err is the Blob service answering code.
func hasCode(err error, code bloberror.Code) bool { return bloberror.HasCode(err, code) }
