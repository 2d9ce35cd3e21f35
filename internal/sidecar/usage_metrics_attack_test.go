package sidecar

import (
	"sync"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// A Bucket's usage series are exported again at every reconcile of the Bucket (from its status,
// until the next check): a scrape in the meantime must find them. A series missing from one
// scrape is a staleness marker in Prometheus, and COSIBucketNearQuota, pending for 30 minutes,
// starts again from nothing.
func TestAttack44UsageSeriesNeverMissingFromAScrape(t *testing.T) {
	const driver = "scrape-race.sidecar-test.cosi.io"
	bucket := &cosiapi.Bucket{ObjectMeta: metav1.ObjectMeta{Name: "bc-scraped"},
		Spec: cosiapi.BucketSpec{BucketClaimRef: cosiapi.BucketClaimReference{Namespace: "ns", Name: "claim"}}}
	usage := &cosiapi.BucketUsage{SizeBytes: 95, ObjectCount: 1, MaxSizeBytes: ptr.To[int64](100)}
	m := usageMetrics()
	m.set(driver, bucket, usage)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 200000 && !stop.Load(); i++ {
			m.set(driver, bucket, usage)
		}
		stop.Store(true)
	}()
	missing, scrapes := 0, 0
	for !stop.Load() {
		families, err := ctrlmetrics.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		scrapes++
		found := 0
		for _, f := range families {
			switch f.GetName() {
			case "cosi_bucket_usage_bytes", "cosi_bucket_quota_bytes":
				for _, s := range f.GetMetric() {
					for _, l := range s.GetLabel() {
						if l.GetName() == "driver_name" && l.GetValue() == driver {
							found++
						}
					}
				}
			}
		}
		if found != 2 {
			missing++
		}
	}
	wg.Wait()
	m.drop(driver, bucket.Name)
	if missing > 0 {
		t.Errorf("%d of %d scrapes missed a series of a Bucket whose usage did not change", missing, scrapes)
	}
}
