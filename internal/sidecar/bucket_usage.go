package sidecar

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/cmdutil/metricreg"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/kube/patch"
	"github.com/kube-cosi/cosi/pkg/driver"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// DefaultUsageInterval is how often a provisioned Bucket's usage is asked of a driver that
// advertises BUCKET_USAGE, unless Options.UsageInterval says otherwise.
const DefaultUsageInterval = 15 * time.Minute

// usageChecks asks the driver for each provisioned Bucket's usage once per interval, spread by
// the scheduled checks' rate limit (schedule.go), exports it as metrics and records it in the
// Bucket's status when it changed. Only for drivers that advertise the BUCKET_USAGE capability;
// a driver that answers UNIMPLEMENTED anyway is not asked again until the sidecar restarts.
type usageChecks struct {
	interval time.Duration
	checks   secretChecks
	// unimplemented: the driver answered UNIMPLEMENTED.
	unimplemented atomic.Bool
}

// enabled tells whether usage is asked of this driver at all.
func (u *usageChecks) enabled(info *cosiproto.DriverGetInfoResponse) bool {
	return u.interval > 0 && driver.HasCapability(info, cosiproto.DriverCapability_BUCKET_USAGE) &&
		!u.unimplemented.Load()
}

// checkUsage runs a provisioned Bucket's usage check when it is due, or at once when now is set
// (a Bucket just provisioned). Until it is due, the metrics show what the Bucket's status holds,
// so that a restarted sidecar exports them before its first check. A failure is a Warning event
// on the Bucket, and the check runs again at the next interval: usage is information, never a
// reason to hold the Bucket.
func (r *BucketReconciler) checkUsage(ctx context.Context, bucket *cosiapi.Bucket, now bool) error {
	key := client.ObjectKeyFromObject(bucket)
	if !r.usage.enabled(r.Info) {
		return r.usageNotRead(ctx, bucket)
	}
	if !now && r.usage.checks.due(key, bucket.UID, r.usage.interval) > 0 {
		if bucket.Status.Usage != nil {
			usageMetrics().set(r.Info.GetName(), bucket, bucket.Status.Usage)
		}
		return nil
	}
	resp, err := r.Driver.DriverGetBucketUsage(ctx, &cosiproto.DriverGetBucketUsageRequest{
		BucketId:   bucket.Status.BucketID,
		Parameters: driverParameters(bucket.Spec.Parameters, r.Driver.Protocol()),
	})
	if status.Code(err) == codes.Unimplemented {
		r.usage.unimplemented.Store(true)
		r.log.Info("the driver advertises BUCKET_USAGE but answered DriverGetBucketUsage with UNIMPLEMENTED: "+
			"usage is not asked again until the sidecar restarts", "bucket", bucket.Name)
		return r.usageNotRead(ctx, bucket)
	}
	if err == nil {
		err = driver.ValidateUsageResponse(resp)
	}
	if err != nil {
		r.Recorder.Eventf(bucket, nil, corev1.EventTypeWarning, cosiapi.EventFailedUsage, "Usage",
			"%s", conditions.Truncate(rpcError{"DriverGetBucketUsage", err}.Error()))
		r.usage.checks.done(key, bucket.UID)
		return nil
	}
	usage := &cosiapi.BucketUsage{
		SizeBytes: resp.GetSizeBytes(), ObjectCount: resp.GetObjectCount(),
		MaxSizeBytes: resp.MaxSizeBytes, MaxObjectCount: resp.MaxObjectCount,
	}
	usageMetrics().set(r.Info.GetName(), bucket, usage)
	if !equality.Semantic.DeepEqual(usage, bucket.Status.Usage) {
		s := r.record.status(bucket)
		bucket.Status.Usage = usage
		if err := s.Patch(ctx, patch.NoLock); err != nil {
			return err // retried with backoff; the check is still due
		}
	}
	r.usage.checks.done(key, bucket.UID)
	return nil
}

// usageNotRead forgets a Bucket's usage when it is not read (--usage-interval=0, or the driver does
// not report usage): no check, no metrics, and no status.usage, which is documented unset for such
// drivers. Figures left from before (a sidecar that read them, then restarted without) would be
// shown by kubectl cosi status as the bucket's usage for good, with nothing saying how old they are
// (TestAttack44UsageNotReadIsNotShown). One write per such Bucket, once.
func (r *BucketReconciler) usageNotRead(ctx context.Context, bucket *cosiapi.Bucket) error {
	r.forgetUsage(client.ObjectKeyFromObject(bucket), bucket.UID)
	if bucket.Status.Usage == nil {
		return nil
	}
	s := r.record.status(bucket)
	bucket.Status.Usage = nil
	return s.Patch(ctx, patch.NoLock)
}

// forgetUsage drops a Bucket's usage check and its metrics (deleted, or no longer provisioned).
func (r *BucketReconciler) forgetUsage(key types.NamespacedName, uid types.UID) {
	r.usage.checks.forget(key, uid)
	usageMetrics().drop(r.Info.GetName(), key.Name)
}

// bucketUsageMetrics are the usage gauges, one series per Bucket, labelled with its driver, its
// name and its claim's namespace and name, so that dashboards sum them per namespace.
type bucketUsageMetrics struct {
	size, objects, maxSize, maxObjects *prometheus.GaugeVec
	// mu guards exported: the labels each Bucket's series were last exported with, by driver and
	// Bucket name.
	mu       sync.Mutex
	exported map[[2]string]prometheus.Labels
}

var (
	usageMetricsOnce sync.Once
	usageGauges      *bucketUsageMetrics
)

func usageMetrics() *bucketUsageMetrics {
	usageMetricsOnce.Do(func() {
		labels := []string{"driver_name", "bucket", "claim_namespace", "claim_name"}
		gauge := func(name, help string) *prometheus.GaugeVec {
			return metricreg.Register(ctrlmetrics.Registry, prometheus.NewGaugeVec(prometheus.GaugeOpts{
				Name: name, Help: help,
			}, labels))
		}
		usageGauges = &bucketUsageMetrics{
			exported: map[[2]string]prometheus.Labels{},
			size: gauge("cosi_bucket_usage_bytes",
				"Bytes a provisioned bucket holds, as its object store accounts them against a quota (drivers with "+
					"the BUCKET_USAGE capability), read every --usage-interval."),
			objects: gauge("cosi_bucket_usage_objects",
				"Objects a provisioned bucket holds, as its object store counts them, read every --usage-interval."),
			maxSize: gauge("cosi_bucket_quota_bytes",
				"The size limit the object store enforces on a bucket (no series: none)."),
			maxObjects: gauge("cosi_bucket_quota_objects",
				"The object count limit the object store enforces on a bucket (no series: none)."),
		}
	})
	return usageGauges
}

func (m *bucketUsageMetrics) set(driverName string, bucket *cosiapi.Bucket, u *cosiapi.BucketUsage) {
	l := prometheus.Labels{
		"driver_name": driverName, "bucket": bucket.Name,
		"claim_namespace": bucket.Spec.BucketClaimRef.Namespace, "claim_name": bucket.Spec.BucketClaimRef.Name,
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// A Bucket's claim never changes, but a series left under other labels would count twice.
	// Series under the same labels are set in place, never dropped and made again: a scrape
	// between the two would miss them, and Prometheus would mark them stale
	// (TestAttack44UsageSeriesNeverMissingFromAScrape).
	key := [2]string{driverName, bucket.Name}
	if old, ok := m.exported[key]; ok && !maps.Equal(old, l) {
		m.dropLocked(driverName, bucket.Name)
	}
	m.exported[key] = l
	m.size.With(l).Set(float64(u.SizeBytes))
	m.objects.With(l).Set(float64(u.ObjectCount))
	if u.MaxSizeBytes != nil {
		m.maxSize.With(l).Set(float64(ptr.Deref(u.MaxSizeBytes, 0)))
	} else {
		m.maxSize.Delete(l)
	}
	if u.MaxObjectCount != nil {
		m.maxObjects.With(l).Set(float64(ptr.Deref(u.MaxObjectCount, 0)))
	} else {
		m.maxObjects.Delete(l)
	}
}

func (m *bucketUsageMetrics) drop(driverName, bucket string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropLocked(driverName, bucket)
}

func (m *bucketUsageMetrics) dropLocked(driverName, bucket string) {
	delete(m.exported, [2]string{driverName, bucket})
	l := prometheus.Labels{"driver_name": driverName, "bucket": bucket}
	for _, g := range []*prometheus.GaugeVec{m.size, m.objects, m.maxSize, m.maxObjects} {
		g.DeletePartialMatch(l)
	}
}
