package driver_test

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/pkg/driver"
)

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{status.Error(codes.Unavailable, ""), true},
		{status.Error(codes.DeadlineExceeded, ""), true},
		{status.Error(codes.Canceled, ""), true},
		{status.Error(codes.Aborted, ""), true},
		{status.Error(codes.ResourceExhausted, ""), true},
		{status.Error(codes.InvalidArgument, ""), false},
		{status.Error(codes.AlreadyExists, ""), false},
		{status.Error(codes.OutOfRange, ""), false},
		{status.Error(codes.Unimplemented, ""), false},
		{status.Error(codes.NotFound, ""), false},
		{status.Error(codes.Internal, ""), false},
		{errors.New("connection reset"), true},
		{fmt.Errorf("wrapped: %w", status.Error(codes.Unavailable, "")), true},
	} {
		if got := driver.Retryable(tc.err); got != tc.want {
			t.Errorf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
