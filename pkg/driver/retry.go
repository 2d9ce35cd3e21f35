package driver

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Retryable reports whether a driver call that failed with err may still succeed when repeated
// with the same request: Canceled, DeadlineExceeded, Unavailable, Aborted and ResourceExhausted
// mean the operation may still be in flight or the driver is briefly unable to serve. Every other
// code is final until the request changes. Errors without a gRPC status (a closed connection) are
// retryable.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	s, ok := status.FromError(err)
	if !ok {
		return !errors.Is(err, context.Canceled)
	}
	switch s.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.Unavailable, codes.Aborted, codes.ResourceExhausted:
		return true
	}
	return false
}
