package s3

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Bucket quota parameters (BucketClass.spec.parameters, or Bucket.spec.parameters of a static
// bucket): the store refuses writes past them. Only stores that enforce bucket quotas take them
// (Ceph RGW: --accounts=rgw); elsewhere they are refused with InvalidArgument, never ignored.
const (
	// ParamMaxSize is the most bytes the bucket may hold, a Kubernetes quantity ("10Gi", "500M").
	ParamMaxSize = "maxSize"
	// ParamMaxObjects is the most objects the bucket may hold, a positive integer.
	ParamMaxObjects = "maxObjects"
)

// Quota is what a bucket may hold; zero is no limit.
type Quota struct {
	MaxSize, MaxObjects int64
}

// BucketQuotas is implemented by account back-ends whose store enforces a bucket quota.
type BucketQuotas interface {
	// SetBucketQuota makes the store refuse writes that would take bucket past q (zero fields:
	// no limit), and checks that it took it.
	SetBucketQuota(ctx context.Context, bucket string, q Quota) error
	// QuotaUnit is the unit in which the store counts each object's size against a quota: a
	// smaller maxSize would hold no object with data.
	QuotaUnit() int64
}

// maxQuotaSize is the largest maxSize: its size rounded up to KiB, in bytes, still fits an int64.
const maxQuotaSize = math.MaxInt64 - 1023

// parseQuota parses the quota parameters; set is false when neither is given.
func parseQuota(params map[string]string) (q Quota, set bool, err error) {
	if v, ok := params[ParamMaxSize]; ok {
		n, perr := resource.ParseQuantity(v)
		if perr != nil || n.Sign() <= 0 {
			return q, true, status.Errorf(codes.InvalidArgument,
				"parameter %s must be a positive quantity of bytes such as 10Gi, not %q", ParamMaxSize, v)
		}
		size, ok := n.AsInt64()
		switch {
		case !ok && n.AsApproximateFloat64() < maxQuotaSize:
			return q, true, status.Errorf(codes.InvalidArgument,
				"parameter %s must be a whole number of bytes, not %q", ParamMaxSize, v)
		case !ok || size > maxQuotaSize:
			return q, true, status.Errorf(codes.InvalidArgument, "parameter %s %q is too large", ParamMaxSize, v)
		}
		q.MaxSize, set = size, true
	}
	if v, ok := params[ParamMaxObjects]; ok {
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n <= 0 {
			return q, true, status.Errorf(codes.InvalidArgument,
				"parameter %s must be a positive integer, not %q", ParamMaxObjects, v)
		}
		q.MaxObjects, set = n, true
	}
	return q, set, nil
}

// quotaFor checks that the driver's store can enforce the quota parameters, before anything is
// created: a store without bucket quotas refuses them, naming the parameter and the store.
func (d *Driver) quotaFor(params map[string]string) (Quota, bool, error) {
	q, set, err := parseQuota(params)
	if err != nil || !set {
		return q, set, err
	}
	quotas, ok := d.cfg.Accounts.(BucketQuotas)
	if !ok {
		name := ParamMaxSize
		if _, ok := params[ParamMaxSize]; !ok {
			name = ParamMaxObjects
		}
		return q, true, status.Errorf(codes.InvalidArgument,
			"parameter %s: this driver's store (the iam account back-end: AWS S3, the Versity gateway) does not "+
				"enforce bucket quotas, and the driver does not pretend to; Ceph RGW (--accounts=rgw) does", name)
	}
	if unit := quotas.QuotaUnit(); q.MaxSize > 0 && q.MaxSize < unit {
		return q, true, status.Errorf(codes.InvalidArgument, "parameter %s %q: the store counts each object as at "+
			"least %d bytes, so a bucket this small could hold no object with data", ParamMaxSize, params[ParamMaxSize], unit)
	}
	return q, true, nil
}

// applyQuota makes the store enforce q on bucket id, when the parameters set one.
func (d *Driver) applyQuota(ctx context.Context, id string, q Quota, set bool) error {
	if !set {
		return nil
	}
	return d.cfg.Accounts.(BucketQuotas).SetBucketQuota(ctx, id, q)
}

// rgwBucketInfo is what the Admin Ops API says of a bucket.
type rgwBucketInfo struct {
	Owner string   `json:"owner"`
	Quota rgwQuota `json:"bucket_quota"`
	// Usage is per category (rgw.main, rgw.multimeta): size is the objects' bytes, size_actual
	// each rounded up to QuotaUnit, as the quota counts them.
	Usage map[string]struct {
		Size       int64 `json:"size"`
		SizeActual int64 `json:"size_actual"`
		NumObjects int64 `json:"num_objects"`
	} `json:"usage"`
}

// rgwQuota is a quota as the Admin Ops API says it: a bucket's, or a user's for its buckets.
// Negative figures are no limit; zero is a limit of nothing.
type rgwQuota struct {
	Enabled    bool  `json:"enabled"`
	MaxSize    int64 `json:"max_size"`
	MaxObjects int64 `json:"max_objects"`
}

// QuotaUnit is 4 KiB: RGW counts each object's size rounded up to it (rgw_rounded_objsize).
func (a *RGWAccounts) QuotaUnit() int64 { return 4096 }

// SetBucketQuota sets the bucket's quota with the Admin Ops API and reads it back: an RGW that
// answered without taking it would otherwise leave the bucket without the limit its class asks.
func (a *RGWAccounts) SetBucketQuota(ctx context.Context, bucket string, q Quota) error {
	var info rgwBucketInfo
	if err := a.admin(ctx, http.MethodGet, "bucket", url.Values{"bucket": {bucket}}, &info); err != nil {
		return rgwStatus(err, fmt.Sprintf("reading bucket %q", bucket))
	}
	// RGW before 17 (Debian bookworm's 16.2) reads the size in KiB only (max-size-kb), later
	// ones in bytes too (max-size): both are sent, the KiB rounded up. -1 is no limit.
	kib := int64(-1)
	if q.MaxSize > 0 {
		kib = (q.MaxSize + 1023) / 1024
	}
	if holds(info, q, kib) {
		return nil // as asked already: a refresh costs one read
	}
	set := url.Values{
		"quota": {""}, "uid": {info.Owner}, "bucket": {bucket}, "enabled": {"true"},
		"max-size": {strconv.FormatInt(atLeast(q.MaxSize), 10)}, "max-size-kb": {strconv.FormatInt(kib, 10)},
		"max-objects": {strconv.FormatInt(atLeast(q.MaxObjects), 10)},
	}
	if err := a.admin(ctx, http.MethodPut, "bucket", set, nil); err != nil {
		return rgwStatus(err, fmt.Sprintf("setting the quota of bucket %q", bucket))
	}
	if err := a.admin(ctx, http.MethodGet, "bucket", url.Values{"bucket": {bucket}}, &info); err != nil {
		return rgwStatus(err, fmt.Sprintf("reading bucket %q", bucket))
	}
	if got := info.Quota; !holds(info, q, kib) {
		return status.Errorf(codes.Internal, "bucket %q: RGW holds the quota enabled=%t max_size=%d max_objects=%d "+
			"after it was set to max_size=%d max_objects=%d", bucket, got.Enabled, got.MaxSize, got.MaxObjects,
			atLeast(q.MaxSize), atLeast(q.MaxObjects))
	}
	return nil
}

// holds reports whether the bucket's quota in info is q (its size in KiB: kib, -1 for no limit).
func holds(info rgwBucketInfo, q Quota, kib int64) bool {
	got := info.Quota
	// No limit is a negative figure in RGW; zero is a limit of nothing.
	sizeTaken := q.MaxSize > 0 && (got.MaxSize == q.MaxSize || got.MaxSize == kib*1024) ||
		q.MaxSize <= 0 && got.MaxSize < 0
	objectsTaken := q.MaxObjects > 0 && got.MaxObjects == q.MaxObjects || q.MaxObjects <= 0 && got.MaxObjects < 0
	return got.Enabled && sizeTaken && objectsTaken
}

// atLeast is n, or -1 (RGW's "no limit") for zero.
func atLeast(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}
