package kubectlcosi

import (
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
