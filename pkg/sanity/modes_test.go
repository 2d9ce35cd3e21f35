package sanity_test

import (
	"context"
	"strings"
	"sync"
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

// fivePerBucket is a driver that serves at most five accesses to a bucket at a time and refuses
// the sixth with ResourceExhausted, as the Azure driver must (five stored access policies per
// container).
type fivePerBucket struct {
	*memory.Driver
	mu       sync.Mutex
	accesses map[string]map[string]bool // bucket ID -> account IDs
}

func (d *fivePerBucket) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, b := range req.GetBuckets() {
		if a := d.accesses[b.GetBucketId()]; len(a) >= 5 && !a[req.GetAccountId()] {
			return nil, status.Errorf(codes.ResourceExhausted, "bucket %q has five accesses", b.GetBucketId())
		}
	}
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, req)
	if err != nil {
		return nil, err
	}
	for _, b := range req.GetBuckets() {
		if d.accesses[b.GetBucketId()] == nil {
			d.accesses[b.GetBucketId()] = map[string]bool{}
		}
		d.accesses[b.GetBucketId()][req.GetAccountId()] = true
	}
	return resp, nil
}

func (d *fivePerBucket) DriverRevokeBucketAccess(
	ctx context.Context, req *cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	resp, err := d.Driver.DriverRevokeBucketAccess(ctx, req)
	if err == nil {
		for _, b := range req.GetBuckets() {
			delete(d.accesses[b.GetBucketId()], req.GetAccountId())
		}
	}
	return resp, err
}

// TestDriverWithFiveAccessesPerBucketPasses checks that the suite never holds more than five
// accesses to one bucket at a time, so that a driver whose store limits them (Azure) fails no
// case for it.
func TestDriverWithFiveAccessesPerBucketPasses(t *testing.T) {
	var logs logBuffer
	d := newMemory(t, memory.Config{})
	srv := &fivePerBucket{Driver: d, accesses: map[string]map[string]bool{}}
	results := run(t, memoryConfig(serve(t, srv, logs.logger()), d, &logs))
	if failed := failedOrSkipped(results, sanity.Failed); len(failed) > 0 {
		t.Errorf("failed cases:\n%s", strings.Join(failed, "\n"))
	}
}
