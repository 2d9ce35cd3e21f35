package sanity_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/pkg/driver/memory"
	"github.com/kube-cosi/cosi/pkg/sanity"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// noRotation is a driver that does not rotate credentials.
type noRotation struct{ *memory.Driver }

func (noRotation) DriverRotateBucketAccessCredentials(
	context.Context, *cosiproto.DriverRotateBucketAccessCredentialsRequest,
) (*cosiproto.DriverRotateBucketAccessCredentialsResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method DriverRotateBucketAccessCredentials not implemented")
}

func (noRotation) DriverRetireBucketAccessCredentials(
	context.Context, *cosiproto.DriverRetireBucketAccessCredentialsRequest,
) (*cosiproto.DriverRetireBucketAccessCredentialsResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method DriverRetireBucketAccessCredentials not implemented")
}

// TestRotationIsOptional checks that a driver without rotation skips the rotation cases, with the
// reason, and fails none.
func TestRotationIsOptional(t *testing.T) {
	var logs logBuffer
	d := newMemory(t, memory.Config{})
	cfg := memoryConfig(serve(t, noRotation{d}, logs.logger()), d, &logs)
	cfg.Run = regexp.MustCompile("^DriverR(otate|etire)BucketAccessCredentials/")
	results := run(t, cfg)
	if len(results) == 0 {
		t.Fatal("no rotation case ran")
	}
	for name, r := range results {
		if r.Status != sanity.Skipped || !strings.Contains(r.Message, "Unimplemented") {
			t.Errorf("%s: %s (%q), want skipped because the driver answers Unimplemented", name, r.Status, r.Message)
		}
	}
}
