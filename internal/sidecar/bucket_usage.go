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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

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

// usageWorkers is how many Buckets' usage is read at once: on workers of the usage controller's
// own, so that a slow or hung read (until --driver-timeout) never holds up a Bucket's
// provisioning or deletion, whose workers are the Bucket controller's.
const usageWorkers = 2

// setupUsage registers the usage controller of this driver's Buckets: its checks when the driver
// advertises BUCKET_USAGE, and otherwise the removal of figures left from before (usageNotRead).
func (r *BucketReconciler) setupUsage(mgr ctrl.Manager, opts controller.Options, ours predicate.Predicate) error {
	r.usage.interval = r.UsageInterval
	enabled := r.usage.enabled(r.Info)
	if !enabled {
		// Only the Buckets that hold figures to remove: a restart does not go through every
		// Bucket for nothing.
		ours = predicate.And(ours, predicate.NewPredicateFuncs(func(obj client.Object) bool {
			b, ok := obj.(*cosiapi.Bucket)
			return ok && b.Status.Usage != nil
		}))
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("sidecar-bucket-usage").
		For(&cosiapi.Bucket{}, builder.WithPredicates(ours))
	if enabled {
		r.usage.checks.countDecisions(scheduledCheckMetric(), r.Info.GetName(), scheduledCheckUsage)
		// The usage checks that fall due.
		b = b.WatchesRawSource(r.usage.checks.wakeChecks(r.usage.interval))
	}
	opts.MaxConcurrentReconciles = usageWorkers
	return b.WithOptions(opts).Complete(reconcile.Func(r.reconcileUsage))
}

// reconcileUsage reads a provisioned Bucket's usage when due; it forgets the usage of a Bucket
// that is gone, being deleted or not provisioned.
func (r *BucketReconciler) reconcileUsage(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	// No finishOnShutdown: a usage read changes nothing, so a stopping sidecar cancels it rather
	// than wait for it (until --driver-timeout when the store hangs).
	bucket := &cosiapi.Bucket{}
	if err := r.Client.Get(ctx, req.NamespacedName, bucket); err != nil {
		if apierrors.IsNotFound(err) {
			r.usage.checks.gone(req.NamespacedName)
			usageMetrics().drop(r.Info.GetName(), req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if bucket.Spec.DriverName != r.Info.GetName() {
		return reconcile.Result{}, nil
	}
	if bucket.DeletionTimestamp != nil || bucket.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted] != "" ||
		!conditions.IsTrue(bucket, cosiapi.ConditionProvisioned) || bucket.Status.BucketID == "" {
		r.forgetUsage(req.NamespacedName, bucket.UID)
		return reconcile.Result{}, nil
	}
	if err := r.checkUsage(ctx, bucket, r.newlyProvisioned(bucket)); err != nil {
		return r.result(bucket, cosiapi.EventFailedUsage, err)
	}
	return reconcile.Result{}, nil
}

// newlyProvisioned tells whether the Bucket was provisioned less than an interval ago and has no
// usage yet: its first read is made at once rather than placed in the interval, as a long-standing
// Bucket's is after a restart (a sidecar that starts reading usage on many Buckets spreads them).
func (r *BucketReconciler) newlyProvisioned(bucket *cosiapi.Bucket) bool {
	c := conditions.Get(bucket, cosiapi.ConditionProvisioned)
	return bucket.Status.Usage == nil && !r.usage.checks.scheduled(client.ObjectKeyFromObject(bucket), bucket.UID) &&
		c != nil && time.Since(c.LastTransitionTime.Time) < r.usage.interval
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
