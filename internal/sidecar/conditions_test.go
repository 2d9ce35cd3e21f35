package sidecar

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRetryable: KEP-1979 retries create and grant with backoff and always retries delete and
// revoke; only the codes that repeating the same request cannot fix are final.
func TestRetryable(t *testing.T) {
	final := map[codes.Code]bool{
		codes.InvalidArgument: true,
		codes.AlreadyExists:   true,
		codes.OutOfRange:      true,
		codes.Unimplemented:   true,
	}
	for _, method := range []string{
		"DriverGenerateBucketId", "DriverCreateBucket", "DriverGetBucket", "DriverGenerateBucketAccessId",
		"DriverGrantBucketAccess", "DriverRevokeBucketAccess", "DriverDeleteBucket",
	} {
		never := method == "DriverRevokeBucketAccess" || method == "DriverDeleteBucket"
		for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
			want := never || !final[c]
			if got := (rpcError{method, status.Error(c, "x")}).retryable(); got != want {
				t.Errorf("%s %v: retryable=%v, want %v", method, c, got, want)
			}
		}
		if !(rpcError{method, errors.New("connection closed")}).retryable() {
			t.Errorf("%s: an error without a status (a broken connection) is final", method)
		}
	}
}
