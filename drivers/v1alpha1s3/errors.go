package v1alpha1s3

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func errInvalid(msg string) error { return status.Error(codes.InvalidArgument, msg) }
