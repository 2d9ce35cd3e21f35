package kubectlcosi

import (
	"math"
	"testing"

	"k8s.io/utils/ptr"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

func TestUsageDetail(t *testing.T) {
	for _, tc := range []struct {
		u    cosiapi.BucketUsage
		want string
	}{
		{cosiapi.BucketUsage{}, "usage: 0 B in 0 objects; no quota"},
		{
			cosiapi.BucketUsage{SizeBytes: 24 << 10, ObjectCount: 3, MaxSizeBytes: ptr.To[int64](1 << 20),
				MaxObjectCount: ptr.To[int64](10)},
			"usage: 24.0 KiB in 3 objects; quota: 1.0 MiB (2% used), 10 objects (30% used)",
		},
		{
			cosiapi.BucketUsage{SizeBytes: 3 << 29, ObjectCount: 7, MaxSizeBytes: ptr.To[int64](0)},
			"usage: 1.5 GiB in 7 objects; quota: 0 B (100% used)",
		},
		{
			cosiapi.BucketUsage{SizeBytes: 1 << 62, ObjectCount: 1 << 40, MaxObjectCount: ptr.To[int64](1 << 41)},
			"usage: 4.0 EiB in 1099511627776 objects; quota: 2199023255552 objects (50% used)",
		},
	} {
		if got := usageDetail(&tc.u); got != tc.want {
			t.Errorf("usageDetail(%+v) = %q, want %q", tc.u, got, tc.want)
		}
	}
}

// Odd figures a driver may report (status.usage holds any int64 of zero or more): a bucket far past
// a quota set outside COSI, a size just below a unit.
func TestAttack44UsageDetailOddValues(t *testing.T) {
	for _, tc := range []struct {
		u    cosiapi.BucketUsage
		want string
	}{
		{
			cosiapi.BucketUsage{SizeBytes: math.MaxInt64, ObjectCount: math.MaxInt64, MaxSizeBytes: ptr.To[int64](1),
				MaxObjectCount: ptr.To[int64](1)},
			"usage: 8.0 EiB in 9223372036854775807 objects; quota: 1 B (922337203685477580800% used), " +
				"1 objects (922337203685477580800% used)",
		},
		{cosiapi.BucketUsage{SizeBytes: 1<<20 - 1}, "usage: 1.0 MiB in 0 objects; no quota"},
		{cosiapi.BucketUsage{SizeBytes: math.MaxInt64}, "usage: 8.0 EiB in 0 objects; no quota"},
	} {
		if got := usageDetail(&tc.u); got != tc.want {
			t.Errorf("usageDetail(%+v) = %q, want %q", tc.u, got, tc.want)
		}
	}
}
