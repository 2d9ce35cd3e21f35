package sidecar_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// usageAnswer answers DriverGetBucketUsage.
type usageAnswer = func(
	context.Context, *cosiproto.DriverGetBucketUsageRequest,
) (*cosiproto.DriverGetBucketUsageResponse, error)

// usageDriver is the memory driver with the BUCKET_USAGE extension: it advertises the capability
// when advertise is set, and answers DriverGetBucketUsage with answer, counting the calls per
// bucket ID.
type usageDriver struct {
	*memory.Driver
	advertise bool

	mu     sync.Mutex
	answer usageAnswer
	calls  map[string]int
}

func (d *usageDriver) DriverGetInfo(
	ctx context.Context, req *cosiproto.DriverGetInfoRequest,
) (*cosiproto.DriverGetInfoResponse, error) {
	resp, err := d.Driver.DriverGetInfo(ctx, req)
	if err == nil && d.advertise {
		resp.Capabilities = append(resp.Capabilities, cosiproto.DriverCapability_BUCKET_USAGE)
	}
	return resp, err
}

func (d *usageDriver) DriverGetBucketUsage(
	ctx context.Context, req *cosiproto.DriverGetBucketUsageRequest,
) (*cosiproto.DriverGetBucketUsageResponse, error) {
	d.mu.Lock()
	d.calls[req.GetBucketId()]++
	answer := d.answer
	d.mu.Unlock()
	if answer == nil {
		return &cosiproto.DriverGetBucketUsageResponse{}, nil
	}
	return answer(ctx, req)
}

func (d *usageDriver) setAnswer(f usageAnswer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.answer = f
}

func (d *usageDriver) callsOf(id string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[id]
}

func (d *usageDriver) allCalls() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.calls {
		n += c
	}
	return n
}

func answerUsage(u *cosiproto.DriverGetBucketUsageResponse) usageAnswer {
	return func(context.Context, *cosiproto.DriverGetBucketUsageRequest) (*cosiproto.DriverGetBucketUsageResponse, error) {
		return u, nil
	}
}

// newUsageHarness is a harness whose driver is a usageDriver, and whose sidecar reads usage every
// interval.
func newUsageHarness(
	t *testing.T, advertise bool, interval time.Duration, set func(*sidecar.Options),
) (*harness, *usageDriver) {
	t.Helper()
	h := &harness{t: t, faults: &memory.Faults{}, calls: &memory.Calls{}, config: sidecarConfig}
	h.name = fmt.Sprintf("memory-usage-%d.sidecar-test.cosi.io", driverCounter.Add(1))
	var err error
	h.driver, err = memory.New(memory.Config{Name: h.name})
	if err != nil {
		t.Fatal(err)
	}
	d := &usageDriver{Driver: h.driver, advertise: advertise, calls: map[string]int{}}
	h.endpoint = "unix://" + filepath.Join(t.TempDir(), "driver.sock")
	testenv.ServeDriver(t, h.endpoint, d, h.calls.Interceptor(), h.faults.Interceptor())
	opts := sidecarOptions(h.endpoint)
	opts.UsageInterval = interval
	if set != nil {
		set(&opts)
	}
	h.stop = testenv.StartSidecar(t, h.config, opts)
	return h, d
}

// usageSeries returns the usage gauges exported for the Bucket named bucket of driver: metric
// name → labels → value.
func usageSeries(t *testing.T, driver, bucket string) map[string]map[string]float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]float64{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "cosi_bucket_usage_") && !strings.HasPrefix(f.GetName(), "cosi_bucket_quota_") {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["driver_name"] != driver || labels["bucket"] != bucket {
				continue
			}
			if got[f.GetName()] == nil {
				got[f.GetName()] = map[string]float64{}
			}
			got[f.GetName()][labelString(m.GetLabel())] = m.GetGauge().GetValue()
		}
	}
	return got
}

func labelString(ls []*dto.LabelPair) string {
	var s []string
	for _, l := range ls {
		s = append(s, l.GetName()+"="+l.GetValue())
	}
	slices.Sort(s)
	return strings.Join(s, ",")
}

func getBucket(t *testing.T, b *cosiapi.Bucket) *cosiapi.Bucket {
	t.Helper()
	fresh := &cosiapi.Bucket{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), fresh); err != nil {
		t.Fatal(err)
	}
	return fresh
}

// A driver that does not advertise BUCKET_USAGE is never asked, however short the interval.
func TestAttack44UsageNotAskedWithoutCapability(t *testing.T) {
	t.Parallel()
	h, d := newUsageHarness(t, false, 100*time.Millisecond, nil)
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	time.Sleep(2 * time.Second)
	if n := d.allCalls(); n != 0 {
		t.Errorf("DriverGetBucketUsage called %d times on a driver that does not advertise BUCKET_USAGE", n)
	}
	if u := getBucket(t, b).Status.Usage; u != nil {
		t.Errorf("status.usage %+v written for a driver without BUCKET_USAGE", u)
	}
}

// A driver that advertises BUCKET_USAGE but answers UNIMPLEMENTED is asked once, never again.
func TestAttack44UsageUnimplementedStopsAsking(t *testing.T) {
	t.Parallel()
	h, d := newUsageHarness(t, true, 100*time.Millisecond, nil)
	unimplemented := func(context.Context, *cosiproto.DriverGetBucketUsageRequest) (
		*cosiproto.DriverGetBucketUsageResponse, error,
	) {
		return nil, status.Error(codes.Unimplemented, "no")
	}
	d.setAnswer(unimplemented)
	h.provisionedBucket(cosiapi.ProtocolS3)
	h.provisionedBucket(cosiapi.ProtocolS3)
	time.Sleep(time.Second)
	first := d.allCalls()
	time.Sleep(2 * time.Second)
	if n := d.allCalls(); n > 2 || n != first {
		t.Errorf("DriverGetBucketUsage called %d times (%d a second ago) although it answered UNIMPLEMENTED", n, first)
	}
}

// The usage is written to status when it changes, and only then: no write when nothing changed,
// however many intervals pass; a quota removed is removed from status and from the metrics.
func TestAttack44UsageWrittenOnlyWhenChanged(t *testing.T) {
	t.Parallel()
	h, d := newUsageHarness(t, true, 200*time.Millisecond, nil)
	d.setAnswer(answerUsage(&cosiproto.DriverGetBucketUsageResponse{SizeBytes: 10, ObjectCount: 1,
		MaxSizeBytes: ptr.To[int64](100), MaxObjectCount: ptr.To[int64](5)}))
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	within(t, 10*time.Second, func() error {
		if u := getBucket(t, b).Status.Usage; u == nil || u.SizeBytes != 10 || u.MaxSizeBytes == nil {
			return fmt.Errorf("status.usage %+v", u)
		}
		return nil
	})
	rv := getBucket(t, b).ResourceVersion
	calls := d.callsOf(b.Status.BucketID)
	time.Sleep(2 * time.Second)
	if got := getBucket(t, b).ResourceVersion; got != rv {
		t.Errorf("the Bucket was written (resourceVersion %s → %s) although its usage did not change", rv, got)
	}
	if n := d.callsOf(b.Status.BucketID) - calls; n < 3 || n > 20 {
		t.Errorf("%d usage calls in 2s at an interval of 200ms", n)
	}

	d.setAnswer(answerUsage(&cosiproto.DriverGetBucketUsageResponse{SizeBytes: math.MaxInt64, ObjectCount: 2}))
	within(t, 10*time.Second, func() error {
		u := getBucket(t, b).Status.Usage
		if u == nil || u.SizeBytes != math.MaxInt64 || u.MaxSizeBytes != nil || u.MaxObjectCount != nil {
			return fmt.Errorf("status.usage %+v, want the largest size and no quota", u)
		}
		s := usageSeries(t, h.name, b.Name)
		if len(s["cosi_bucket_quota_bytes"]) != 0 || len(s["cosi_bucket_quota_objects"]) != 0 ||
			len(s["cosi_bucket_usage_bytes"]) != 1 {
			return fmt.Errorf("series %v", s)
		}
		return nil
	})
}

// A negative answer is refused (an event) and the status keeps what it holds.
func TestAttack44UsageNegativeRefused(t *testing.T) {
	t.Parallel()
	h, d := newUsageHarness(t, true, 200*time.Millisecond, nil)
	d.setAnswer(answerUsage(&cosiproto.DriverGetBucketUsageResponse{SizeBytes: 7, ObjectCount: 1}))
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	within(t, 10*time.Second, func() error {
		if u := getBucket(t, b).Status.Usage; u == nil || u.SizeBytes != 7 {
			return fmt.Errorf("status.usage %+v", u)
		}
		return nil
	})
	d.setAnswer(answerUsage(&cosiproto.DriverGetBucketUsageResponse{SizeBytes: -1, ObjectCount: 1,
		MaxObjectCount: ptr.To[int64](-5)}))
	waitForEvent(t, b, cosiapi.EventFailedUsage)
	if u := getBucket(t, b).Status.Usage; u == nil || u.SizeBytes != 7 {
		t.Errorf("status.usage %+v after a negative answer", u)
	}
}

// A slow DriverGetBucketUsage (a store that takes long to count, or a driver that hangs) must not
// hold up the grants of the bucket's accesses: usage is information only.
func TestAttack44SlowUsageDoesNotHoldUpGrants(t *testing.T) {
	t.Parallel()
	h, d := newUsageHarness(t, true, time.Hour, func(o *sidecar.Options) { o.DriverTimeout = 3 * time.Second })
	release := make(chan struct{})
	var blocked atomic.Int64
	d.setAnswer(func(context.Context, *cosiproto.DriverGetBucketUsageRequest) (
		*cosiproto.DriverGetBucketUsageResponse, error,
	) {
		// A handler that does not pass its context on: it goes on after the sidecar gave up.
		blocked.Add(1)
		select {
		case <-release:
		case <-time.After(30 * time.Second):
		}
		return &cosiproto.DriverGetBucketUsageResponse{}, nil
	})
	defer close(release)
	b := h.bucket(cosiapi.DeletionPolicyDelete, cosiapi.ProtocolS3)
	h.create(b)
	// The first usage check, at provisioning, blocks; the Bucket is provisioned before it.
	within(t, 10*time.Second, func() error {
		if blocked.Load() == 0 {
			return fmt.Errorf("no usage call yet")
		}
		return nil
	})
	b = getBucket(t, b)
	start := time.Now()
	ba := h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
	within(t, 15*time.Second, func() error {
		got := &cosiapi.BucketAccess{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), got); err != nil {
			return err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == cosiapi.ConditionProvisioned && c.Status == "True" {
				return nil
			}
		}
		return fmt.Errorf("access not provisioned: %+v", got.Status.Conditions)
	})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the access's grant waited %v for a usage call of its bucket", took)
	}
}

// status.usage is documented "unset for other drivers": once usage is no longer read (the sidecar
// restarted with --usage-interval=0, or its driver no longer advertises BUCKET_USAGE), the last
// figures must not stay in the Bucket's status for good, where kubectl cosi status shows them as
// the bucket's usage, with nothing saying how old they are.
func TestAttack44UsageNotReadIsNotShown(t *testing.T) {
	t.Parallel()
	h, d := newUsageHarness(t, true, 200*time.Millisecond, nil)
	d.setAnswer(answerUsage(&cosiproto.DriverGetBucketUsageResponse{SizeBytes: 10, ObjectCount: 1}))
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	within(t, 10*time.Second, func() error {
		if u := getBucket(t, b).Status.Usage; u == nil || u.SizeBytes != 10 {
			return fmt.Errorf("status.usage %+v", u)
		}
		return nil
	})
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) { o.UsageInterval = 0 })
	within(t, 10*time.Second, func() error {
		if u := getBucket(t, b).Status.Usage; u != nil {
			return fmt.Errorf("status.usage %+v stays although usage is no longer read (--usage-interval=0)", u)
		}
		return nil
	})
}

// A Bucket deleted and made again under its name (a new UID) has its series dropped with the old
// one, and the new one's read at once: nothing of the old Bucket is exported under its name.
func TestAttack44UsageOfABucketReplaced(t *testing.T) {
	t.Parallel()
	h, d := newUsageHarness(t, true, time.Hour, nil)
	d.setAnswer(func(_ context.Context, req *cosiproto.DriverGetBucketUsageRequest) (
		*cosiproto.DriverGetBucketUsageResponse, error,
	) {
		return &cosiproto.DriverGetBucketUsageResponse{SizeBytes: int64(len(req.GetBucketId())), ObjectCount: 1,
			MaxSizeBytes: ptr.To[int64](1000)}, nil
	})
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	within(t, 10*time.Second, func() error {
		if s := usageSeries(t, h.name, b.Name); len(s["cosi_bucket_quota_bytes"]) != 1 {
			return fmt.Errorf("series %v", s)
		}
		return nil
	})
	deleteAsController(t, b)
	env.Gone(t, b)
	within(t, 10*time.Second, func() error {
		if s := usageSeries(t, h.name, b.Name); len(s) != 0 {
			return fmt.Errorf("series of a deleted Bucket: %v", s)
		}
		return nil
	})
	// The same name, another claim, and a driver that now reports no quota.
	d.setAnswer(answerUsage(&cosiproto.DriverGetBucketUsageResponse{SizeBytes: 5, ObjectCount: 5}))
	again := h.bucket(cosiapi.DeletionPolicyDelete, cosiapi.ProtocolS3)
	again.Name = b.Name
	h.create(again)
	again = provisioned(t, again, bucketConditions)
	within(t, 10*time.Second, func() error {
		s := usageSeries(t, h.name, b.Name)
		if len(s) != 2 || len(s["cosi_bucket_usage_bytes"]) != 1 {
			return fmt.Errorf("series %v", s)
		}
		for labels, v := range s["cosi_bucket_usage_bytes"] {
			if v != 5 || !strings.Contains(labels, "claim_name="+again.Spec.BucketClaimRef.Name) {
				return fmt.Errorf("series %s = %v", labels, v)
			}
		}
		return nil
	})
}

// Each Bucket's usage is asked once per interval, not once per wake-up: Buckets whose information
// is refreshed too (woken every second by that schedule), and accesses that wake their Buckets, do
// not add calls.
func TestAttack44UsageCallsPerInterval(t *testing.T) {
	t.Parallel()
	const interval = 2 * time.Second
	h, d := newUsageHarness(t, true, interval, nil)
	d.setAnswer(answerUsage(&cosiproto.DriverGetBucketUsageResponse{SizeBytes: 1, ObjectCount: 1}))
	var buckets []*cosiapi.Bucket
	for i := range 10 {
		if i%2 == 0 {
			buckets = append(buckets, h.refreshedBucket(cosiapi.ProtocolS3))
		} else {
			buckets = append(buckets, h.provisionedBucket(cosiapi.ProtocolS3))
		}
	}
	for _, b := range buckets[:3] {
		h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
	}
	before := map[string]int{}
	for _, b := range buckets {
		before[b.Status.BucketID] = d.callsOf(b.Status.BucketID)
	}
	const window = 8 * time.Second
	time.Sleep(window)
	for _, b := range buckets {
		// At most one per interval, and one more for a check late within the window.
		if n := d.callsOf(b.Status.BucketID) - before[b.Status.BucketID]; n > int(window/interval)+1 || n < 2 {
			t.Errorf("Bucket %s: %d usage calls in %v at an interval of %v", b.Name, n, window, interval)
		}
	}
}

// A driver that answers NOT_FOUND (the bucket was removed behind COSI's back) or another error: a
// FailedUsage event, the Bucket stays Provisioned with the usage it holds, and the driver is asked
// again at the next interval, not at once.
func TestAttack44UsageErrorsAskAgainAtTheInterval(t *testing.T) {
	t.Parallel()
	const interval = time.Second
	h, d := newUsageHarness(t, true, interval, nil)
	d.setAnswer(answerUsage(&cosiproto.DriverGetBucketUsageResponse{SizeBytes: 3, ObjectCount: 3}))
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	within(t, 10*time.Second, func() error {
		if u := getBucket(t, b).Status.Usage; u == nil || u.SizeBytes != 3 {
			return fmt.Errorf("status.usage %+v", u)
		}
		return nil
	})
	notFound := func(context.Context, *cosiproto.DriverGetBucketUsageRequest) (
		*cosiproto.DriverGetBucketUsageResponse, error,
	) {
		return nil, status.Error(codes.NotFound, "no such bucket")
	}
	d.setAnswer(notFound)
	waitForEvent(t, b, cosiapi.EventFailedUsage)
	calls := d.callsOf(b.Status.BucketID)
	time.Sleep(4 * interval)
	if n := d.callsOf(b.Status.BucketID) - calls; n > 5 || n < 2 {
		t.Errorf("%d usage calls in %v at an interval of %v after NOT_FOUND", n, 4*interval, interval)
	}
	got := getBucket(t, b)
	if u := got.Status.Usage; u == nil || u.SizeBytes != 3 {
		t.Errorf("status.usage %+v after NOT_FOUND, want the last figures", u)
	}
	for _, c := range got.Status.Conditions {
		if c.Type == cosiapi.ConditionProvisioned && c.Status != "True" {
			t.Errorf("a failed usage read changed Provisioned: %+v", c)
		}
	}
}
