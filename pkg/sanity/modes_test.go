package sanity_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/pkg/driver/memory"
	"github.com/kube-cosi/cosi/pkg/sanity"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// noBucketMetadata is a driver that cannot grant access to bucket metadata and says so with
// InvalidArgument, as KEP-1979 asks of a driver that cannot honour a mode (Azure's container SAS
// reaches blobs only, never the container's own properties).
type noBucketMetadata struct{ *memory.Driver }

func (d noBucketMetadata) refuse(buckets []*cosiproto.AccessedBucket) error {
	for _, b := range buckets {
		if b.GetAccessModes().GetBucketMetadata() != cosiproto.AccessMode_UNSPECIFIED {
			return status.Errorf(codes.InvalidArgument, "bucket %q: bucket metadata access cannot be granted",
				b.GetBucketId())
		}
	}
	return nil
}

func (d noBucketMetadata) DriverGenerateBucketAccessId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketAccessIdRequest,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	if err := d.refuse(req.GetBuckets()); err != nil {
		return nil, err
	}
	return d.Driver.DriverGenerateBucketAccessId(ctx, req)
}

func (d noBucketMetadata) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	if err := d.refuse(req.GetBuckets()); err != nil {
		return nil, err
	}
	return d.Driver.DriverGrantBucketAccess(ctx, req)
}

// TestDriverThatRefusesAModePasses checks that a driver refusing, with InvalidArgument, a mode it
// cannot honour fails no case: the cases that grant every mode to look at every category ask for
// the widest modes the driver grants instead.
func TestDriverThatRefusesAModePasses(t *testing.T) {
	var logs logBuffer
	d := newMemory(t, memory.Config{})
	results := run(t, memoryConfig(serve(t, noBucketMetadata{d}, logs.logger()), d, &logs))
	if failed := failedOrSkipped(results, sanity.Failed); len(failed) > 0 {
		t.Errorf("failed cases:\n%s", strings.Join(failed, "\n"))
	}
}
