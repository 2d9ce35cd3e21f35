// Package rgw follows the admin's cost story (issue 44) end to end on Ceph RGW, the store that
// enforces bucket quotas and keeps each bucket's usage: the real controller, sidecar and S3 driver
// (--accounts=rgw) as processes against a real kube-apiserver and a real radosgw (dev/localenv,
// make ceph). A class's quota is refused past its limit to the access's own key, and what the
// bucket holds shows in the Bucket's status, in the sidecar's metrics and in kubectl cosi status.
package rgw

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/test/e2e/framework"
)

var (
	fw  *framework.Framework
	env *localenv.Env
)

// usageInterval is the sidecar's --usage-interval here: short, so that a test sees a change.
const usageInterval = 2 * time.Second

func TestMain(m *testing.M) {
	opts := localenv.Options{
		Store: localenv.StoreRGW, Metrics: true,
		SidecarArgs: []string{"--usage-interval=" + usageInterval.String()},
	}
	testenv.RunSystem(m, opts, func(_ context.Context, e *localenv.Env) error {
		fw, env = framework.New(e, localenv.DriverName, "rgw"), e
		return nil
	})
}

// TestQuotaAndUsage: a claim of a class with maxSize and maxObjects gets a bucket the store
// limits; the access's own key writes up to the limit and is refused past it; the Bucket's status,
// the sidecar's gauges (with the claim's namespace and name) and kubectl cosi status show what the
// bucket holds against its quota; deleting the claim drops its series.
func TestQuotaAndUsage(t *testing.T) {
	ns := fw.Namespace(t)
	class := fw.BucketClass(cosiapi.DeletionPolicyDelete, map[string]string{
		s3.ParamMaxSize: "64Ki", s3.ParamMaxObjects: "3", "purgeOnDelete": "true",
	})
	ac := fw.AccessClass(false)
	claim := framework.Claim(ns, class.Name)
	access := framework.Access(ns, ac.Name, objects.ReadWrite, claim)
	fw.Create(t, class, ac, claim, access)
	fw.Provisioned(t, claim, access)
	c, bucket, _ := fw.SecretClient(t, ns, access.Spec.BucketClaims[0].AccessSecretName)

	for i := range 3 {
		framework.ExpectAllowed(t, fmt.Sprintf("object %d of 3", i+1), put(c, bucket, fmt.Sprintf("o%d", i), 5000))
	}
	if err := refusedPastQuota(c, bucket); err != nil {
		t.Error(err)
	}

	// 3 objects of 5000 bytes: 8 KiB each as RGW counts them.
	want := cosiapi.BucketUsage{SizeBytes: 3 * 8 << 10, ObjectCount: 3, MaxSizeBytes: ptr(64 << 10),
		MaxObjectCount: ptr(3)}
	b := &cosiapi.Bucket{}
	name := bucketName(t, claim)
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, b); err != nil {
			return err
		}
		if !equalUsage(b.Status.Usage, &want) {
			return fmt.Errorf("the Bucket's status.usage is %+v, want %+v", b.Status.Usage, want)
		}
		return nil
	})

	labels := map[string]string{"bucket": b.Name, "claim_namespace": ns, "claim_name": claim.Name,
		"driver_name": localenv.DriverName}
	got := gauges(t, labels)
	for name, v := range map[string]float64{
		"cosi_bucket_usage_bytes": 3 * 8 << 10, "cosi_bucket_usage_objects": 3,
		"cosi_bucket_quota_bytes": 64 << 10, "cosi_bucket_quota_objects": 3,
	} {
		if got[name] != v {
			t.Errorf("%s%v = %v, want %v (scraped: %v)", name, labels, got[name], v, got)
		}
	}

	out := kubectlCosi(t, "status", "claim", claim.Name, "-n", ns)
	if !strings.Contains(out, "usage: 24.0 KiB in 3 objects; quota: 64.0 KiB (37% used), 3 objects (100% used)") {
		t.Errorf("kubectl cosi status claim does not show the usage:\n%s", out)
	}

	fw.Delete(t, access)
	fw.Delete(t, claim)
	testenv.Eventually(t, func() error {
		if got := gauges(t, labels); len(got) > 0 {
			return fmt.Errorf("the deleted Bucket's usage series are still there: %v", got)
		}
		return nil
	})
}

func ptr(n int64) *int64 { return &n }

func equalUsage(a, b *cosiapi.BucketUsage) bool {
	if a == nil || b == nil {
		return a == b
	}
	eq := func(x, y *int64) bool { return x == nil && y == nil || x != nil && y != nil && *x == *y }
	return a.SizeBytes == b.SizeBytes && a.ObjectCount == b.ObjectCount &&
		eq(a.MaxSizeBytes, b.MaxSizeBytes) && eq(a.MaxObjectCount, b.MaxObjectCount)
}

func put(c *awss3.Client, bucket, key string, size int) error {
	_, err := c.PutObject(context.Background(), &awss3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(strings.Repeat("x", size)),
	})
	return err
}

// refusedPastQuota writes a 4th object: the store must refuse it as past the quota. RGW sometimes
// closes the connection before the client read its refusal (HTTP 403, the body lost): up to 3
// tries, until the refusal names QuotaExceeded; a success fails.
func refusedPastQuota(c *awss3.Client, bucket string) error {
	var err error
	for range 3 {
		if err = put(c, bucket, "past", 10); err == nil || strings.Contains(err.Error(), "QuotaExceeded") {
			break
		}
	}
	if err == nil || !strings.Contains(err.Error(), "QuotaExceeded") {
		return fmt.Errorf("a 4th object past maxObjects 3: %w, want the store's QuotaExceeded", err)
	}
	return nil
}

func bucketName(t *testing.T, c *cosiapi.BucketClaim) string {
	t.Helper()
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
		t.Fatal(err)
	}
	return c.Status.BoundBucketName
}

// gauges scrapes the sidecar's /metrics and returns the value of each gauge with a series whose
// labels include labels.
func gauges(t *testing.T, labels map[string]string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + env.Sidecar.MetricsAddress + "/metrics") //nolint:noctx // a test's one request
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for name, f := range families {
		if f.GetType() != dto.MetricType_GAUGE {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				got[name] = m.GetGauge().GetValue()
			}
		}
	}
	return got
}

func matches(m *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := labels[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(labels)
}

// kubectlCosi runs the kubectl-cosi plugin that make build built, as the admin.
func kubectlCosi(t *testing.T, args ...string) string {
	t.Helper()
	root, err := localenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	plugin := filepath.Join(root, "bin", "kubectl-cosi")
	cmd := exec.CommandContext(t.Context(), plugin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl cosi %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
