package s3

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/utils/ptr"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Usage is what a bucket holds and the limits its store enforces on it, as the store accounts
// them.
type Usage struct {
	Size, Objects int64
	// MaxSize and MaxObjects are the bucket's quota; nil: no limit.
	MaxSize, MaxObjects *int64
}

// BucketUsages is implemented by account back-ends whose store keeps each bucket's usage, so that
// it is read in one request whatever the bucket holds (Ceph RGW's bucket statistics). AWS S3 and
// the Versity gateway have no such figure: only listing every object (or CloudWatch's daily
// metrics, outside S3) would tell, so the iam back-end does not implement it and the driver does
// not advertise usage there.
type BucketUsages interface {
	BucketUsage(ctx context.Context, bucket string) (Usage, error)
}

// capabilities are the COSI extensions the driver implements with its account back-end.
func (d *Driver) capabilities() []cosiproto.DriverCapability_Type {
	if _, ok := d.cfg.Accounts.(BucketUsages); ok {
		return []cosiproto.DriverCapability_Type{cosiproto.DriverCapability_BUCKET_USAGE}
	}
	return nil
}

// DriverGetBucketUsage returns what the bucket holds and its quota, from the store's own
// accounting (one Admin Ops request on RGW); UNIMPLEMENTED where the store keeps none.
func (d *Driver) DriverGetBucketUsage(
	ctx context.Context,
	req *cosiproto.DriverGetBucketUsageRequest,
) (_ *cosiproto.DriverGetBucketUsageResponse, err error) {
	defer d.logFailure("DriverGetBucketUsage", &err)
	usages, ok := d.cfg.Accounts.(BucketUsages)
	if !ok {
		return nil, status.Error(codes.Unimplemented,
			"this driver's store (the iam account back-end: AWS S3, the Versity gateway) keeps no bucket usage "+
				"to read without listing every object")
	}
	id := req.GetBucketId()
	if err := checkBucketID(id); err != nil {
		return nil, err
	}
	u, err := usages.BucketUsage(ctx, id)
	if err != nil {
		return nil, err
	}
	return &cosiproto.DriverGetBucketUsageResponse{
		SizeBytes: u.Size, ObjectCount: u.Objects, MaxSizeBytes: u.MaxSize, MaxObjectCount: u.MaxObjects,
	}, nil
}

// BucketUsage reads the bucket's statistics and quota with one Admin Ops request, two for a
// bucket without a quota of its own. The figures are RGW's own, summed over its categories
// (rgw.main, and rgw.multimeta for multipart uploads in progress), as its quota counts them: each
// object's size rounded up to QuotaUnit (size_actual). RGW updates them as it writes; they may lag
// a write by a moment.
//
// The limit is the one RGW holds the bucket to: its own quota when enabled, else its owner's
// bucket quota (radosgw-admin quota set --quota-scope=bucket --uid=..., which caps every bucket of
// the user, and every bucket COSI creates is owned by the driver's identity), as RGW chooses
// (TestAttack44UsageShowsTheQuotaRGWEnforces). Not reported: the owner's user quota, a total over
// all its buckets, and a zonegroup-wide default set with radosgw-admin global quota, which the
// Admin Ops API does not show.
func (a *RGWAccounts) BucketUsage(ctx context.Context, bucket string) (Usage, error) {
	var info rgwBucketInfo
	q := url.Values{"bucket": {bucket}, "stats": {"true"}}
	if err := a.admin(ctx, http.MethodGet, "bucket", q, &info); err != nil {
		return Usage{}, rgwStatus(err, fmt.Sprintf("reading the statistics of bucket %q", bucket))
	}
	var u Usage
	for _, c := range info.Usage {
		u.Size += c.SizeActual
		u.Objects += c.NumObjects
	}
	quota := info.Quota
	if !quota.Enabled && info.Owner != "" {
		q := url.Values{"quota": {""}, "uid": {info.Owner}, "quota-type": {"bucket"}}
		if err := a.admin(ctx, http.MethodGet, "user", q, &quota); err != nil {
			return Usage{}, rgwStatus(err, fmt.Sprintf("reading the bucket quota of the owner of bucket %q", bucket))
		}
	}
	if quota.Enabled {
		// Negative: no limit; zero is a limit of nothing.
		if quota.MaxSize >= 0 {
			u.MaxSize = ptr.To(quota.MaxSize)
		}
		if quota.MaxObjects >= 0 {
			u.MaxObjects = ptr.To(quota.MaxObjects)
		}
	}
	return u, nil
}
