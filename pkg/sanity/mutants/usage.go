package mutants

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

const (
	caseUsageUnadvertised = "DriverGetBucketUsage/answers Unimplemented unless BUCKET_USAGE is advertised"
	caseUsageEmpty        = "DriverGetBucketUsage/a new bucket holds nothing"
	caseUsageCounts       = "DriverGetBucketUsage/counts the objects written"
	caseUsageMissing      = "DriverGetBucketUsage/returns NotFound for a missing bucket"
)

// usageMutants break COSI's usage extension (DriverGetBucketUsage): each runs on a memory driver
// that reports usage (memory.Config.Usage).
func usageMutants() []Mutant {
	withUsage := func(c *memory.Config) { c.Usage = true }
	return []Mutant{
		{
			Name: "usage-advertised-unimplemented", MustCatch: true, Memory: withUsage,
			Bug:  "advertises BUCKET_USAGE and answers DriverGetBucketUsage with Unimplemented",
			Case: caseUsageEmpty, Says: "unexpected error Unimplemented",
			New: plain(func(d *memory.Driver) Server { return usageUnimplemented{d} }),
		},
		{
			Name: "usage-missing-bucket-ok", MustCatch: true, Memory: withUsage,
			Bug:  "DriverGetBucketUsage of a bucket that does not exist answers an empty bucket instead of NotFound",
			Case: caseUsageMissing, Says: "returned OK",
			New: plain(func(d *memory.Driver) Server { return usageOfAnything{d} }),
		},
		{
			Name: "usage-counts-nothing", MustCatch: true, Memory: withUsage,
			Bug:  "DriverGetBucketUsage reads a figure the store never updates: zero objects whatever the bucket holds",
			Case: caseUsageCounts, Says: "counts 0 objects",
			New: plain(func(d *memory.Driver) Server { return usageCountsNothing{d} }),
		},
		{
			Name: "usage-negative", MustCatch: true, Memory: withUsage,
			Bug:  "DriverGetBucketUsage passes on the store's -1 (\"not computed yet\") as the size of a new bucket",
			Case: caseUsageEmpty, Says: "size_bytes is negative",
			New: plain(func(d *memory.Driver) Server { return usageNegative{d} }),
		},
		{
			Name: "usage-unadvertised", MustCatch: true, Memory: withUsage,
			Bug:  "implements DriverGetBucketUsage but does not advertise BUCKET_USAGE: COSI never asks",
			Case: caseUsageUnadvertised, Says: "want [Unimplemented]",
			New: plain(func(d *memory.Driver) Server { return usageUnadvertised{d} }),
		},
	}
}

type usageUnimplemented struct{ *memory.Driver }

func (usageUnimplemented) DriverGetBucketUsage(
	context.Context, *cosiproto.DriverGetBucketUsageRequest,
) (*cosiproto.DriverGetBucketUsageResponse, error) {
	return nil, status.Error(codes.Unimplemented, "usage is not implemented")
}

type usageOfAnything struct{ *memory.Driver }

func (d usageOfAnything) DriverGetBucketUsage(
	ctx context.Context, req *cosiproto.DriverGetBucketUsageRequest,
) (*cosiproto.DriverGetBucketUsageResponse, error) {
	resp, err := d.Driver.DriverGetBucketUsage(ctx, req)
	if status.Code(err) == codes.NotFound {
		return &cosiproto.DriverGetBucketUsageResponse{}, nil
	}
	return resp, err
}

type usageCountsNothing struct{ *memory.Driver }

func (d usageCountsNothing) DriverGetBucketUsage(
	ctx context.Context, req *cosiproto.DriverGetBucketUsageRequest,
) (*cosiproto.DriverGetBucketUsageResponse, error) {
	resp, err := d.Driver.DriverGetBucketUsage(ctx, req)
	if err == nil {
		resp.ObjectCount = 0
	}
	return resp, err
}

type usageNegative struct{ *memory.Driver }

func (d usageNegative) DriverGetBucketUsage(
	ctx context.Context, req *cosiproto.DriverGetBucketUsageRequest,
) (*cosiproto.DriverGetBucketUsageResponse, error) {
	resp, err := d.Driver.DriverGetBucketUsage(ctx, req)
	if err == nil && resp.GetObjectCount() == 0 {
		resp.SizeBytes = -1
	}
	return resp, err
}

type usageUnadvertised struct{ *memory.Driver }

func (d usageUnadvertised) DriverGetInfo(
	ctx context.Context, req *cosiproto.DriverGetInfoRequest,
) (*cosiproto.DriverGetInfoResponse, error) {
	info, err := d.Driver.DriverGetInfo(ctx, req)
	if err == nil {
		info.Capabilities = nil
	}
	return info, err
}
