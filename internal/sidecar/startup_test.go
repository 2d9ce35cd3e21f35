package sidecar_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/cmdutil/serving"
	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

func TestDriverDownAtStartup(t *testing.T) {
	t.Parallel()
	t.Run("the sidecar waits for a driver that starts later", func(t *testing.T) {
		t.Parallel()
		h := &harness{t: t, faults: &memory.Faults{}, calls: &memory.Calls{}, config: sidecarConfig}
		h.name = fmt.Sprintf("memory-%d.sidecar-test.cosi.io", driverCounter.Add(1))
		var err error
		if h.driver, err = memory.New(memory.Config{Name: h.name}); err != nil {
			t.Fatal(err)
		}
		h.endpoint = "unix://" + filepath.Join(t.TempDir(), "driver.sock")
		h.startSidecar()
		time.Sleep(500 * time.Millisecond)
		h.startDriver()
		b := h.bucket(cosiapi.DeletionPolicyDelete)
		h.create(b)
		provisioned(t, b, bucketConditions)
	})
	t.Run("a driver that never answers is a clear error", func(t *testing.T) {
		t.Parallel()
		opts := sidecarOptions("unix://" + filepath.Join(t.TempDir(), "missing.sock"))
		opts.DriverStartTimeout = 500 * time.Millisecond
		err := sidecar.Run(t.Context(), sidecarConfig, opts, logr.Discard())
		if err == nil || !strings.Contains(err.Error(), "did not answer") || !strings.Contains(err.Error(), "missing.sock") {
			t.Fatalf("Run without a driver: %v", err)
		}
	})
}

// TestLeastPrivilege asks the API server what the sidecar's ServiceAccount may do: exactly KEP-1979's
// "Minimal Sidecar permissions". The other tests run the sidecar as this ServiceAccount, so a
// missing permission fails them; this test catches an excessive one.
func TestLeastPrivilege(t *testing.T) {
	t.Parallel()
	user := "system:serviceaccount:" + sidecarNamespace + ":" + sidecarSA
	for _, tc := range []struct {
		group, resource, subresource, verb string
		allowed                            bool
	}{
		{"objectstorage.k8s.io", "buckets", "", "get", true},
		{"objectstorage.k8s.io", "buckets", "", "watch", true},
		{"objectstorage.k8s.io", "buckets", "", "patch", true},
		{"objectstorage.k8s.io", "buckets", "status", "patch", true},
		{"objectstorage.k8s.io", "buckets", "", "delete", false},
		{"objectstorage.k8s.io", "buckets", "", "create", false},
		{"objectstorage.k8s.io", "bucketaccesses", "", "update", true},
		{"objectstorage.k8s.io", "bucketaccesses", "status", "update", true},
		{"objectstorage.k8s.io", "bucketaccesses", "", "delete", false},
		{"objectstorage.k8s.io", "bucketaccesses", "", "create", false},
		{"objectstorage.k8s.io", "bucketclaims", "", "get", false},
		{"objectstorage.k8s.io", "bucketclaims", "", "list", false},
		{"objectstorage.k8s.io", "bucketclasses", "", "get", false},
		{"objectstorage.k8s.io", "bucketaccessclasses", "", "get", false},
		{"", "secrets", "", "create", true},
		{"", "secrets", "", "update", true},
		{"", "secrets", "", "patch", true},
		{"", "secrets", "", "delete", true},
		{"", "pods", "", "get", false},
		{"", "configmaps", "", "get", false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group:       tc.group,
				Resource:    tc.resource,
				Subresource: tc.subresource,
				Verb:        tc.verb,
				Namespace:   testNamespace,
			},
		}}
		if err := env.Client.Create(t.Context(), sar); err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != tc.allowed {
			t.Errorf(
				"%s %s/%s %s: allowed=%v, want %v",
				tc.verb,
				tc.group,
				tc.resource,
				tc.subresource,
				sar.Status.Allowed,
				tc.allowed,
			)
		}
	}
}

func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestLeaderElectionHealthAndMetrics runs two sidecars for one driver: they share one Lease named
// after the driver and one of them provisions; the leader serves /readyz while its driver
// answers; the KEP's sidecar metrics carry the driver name; the driver's own /metrics (on
// loopback) is relayed at /metrics/driver.
func TestLeaderElectionHealthAndMetrics(t *testing.T) {
	t.Parallel()
	h := &harness{t: t, faults: &memory.Faults{}, calls: &memory.Calls{}, config: sidecarConfig}
	h.name = fmt.Sprintf("memory-%d.sidecar-test.cosi.io", driverCounter.Add(1))
	var err error
	if h.driver, err = memory.New(memory.Config{Name: h.name}); err != nil {
		t.Fatal(err)
	}
	h.endpoint = "unix://" + filepath.Join(t.TempDir(), "driver.sock")
	h.startDriver()

	health, metricsAddress := freeAddress(t), freeAddress(t)
	driverMetrics := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "cosi_driver_relay_test 1\n")
	}))
	t.Cleanup(driverMetrics.Close)
	for i := range 2 {
		opts := sidecarOptions(h.endpoint)
		opts.LeaderElection, opts.LeaderElectionNamespace = true, sidecarNamespace
		if i == 0 {
			opts.HealthAddress, opts.MetricsAddress = health, metricsAddress
			opts.DriverMetricsURL = driverMetrics.URL + "/metrics"
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- sidecar.Run(ctx, sidecarConfig, opts, logr.Discard()) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Logf("sidecar %d stopped: %v", i, err)
			}
		})
	}

	lease := &coordinationv1.Lease{}
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(
			t.Context(),
			types.NamespacedName{Namespace: sidecarNamespace, Name: sidecar.LeaseName(h.name)},
			lease,
		); err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return fmt.Errorf("lease has no holder")
		}
		return nil
	})
	b := h.bucket(cosiapi.DeletionPolicyDelete)
	h.create(b)
	provisioned(t, b, bucketConditions)
	if n := h.calls.Count("DriverCreateBucket"); n != 1 {
		t.Errorf("DriverCreateBucket called %d times by two sidecars, want 1 (one leader)", n)
	}

	testenv.Eventually(t, func() error {
		for _, path := range []string{"/healthz", "/readyz"} {
			resp, err := http.Get("http://" + health + path)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", path, resp.Status)
			}
		}
		return nil
	})

	testenv.Eventually(t, func() error {
		resp, err := http.Get("http://" + metricsAddress + serving.DriverMetricsPath)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "cosi_driver_relay_test 1") {
			return fmt.Errorf("%s: %s %.200s", serving.DriverMetricsPath, resp.Status, body)
		}
		return nil
	})

	const metric = "cosi_sidecar_operation_duration_seconds"
	if n, err := testutil.GatherAndCount(metrics.Registry, metric); err != nil || n == 0 {
		t.Fatalf("%s: %d series, %v", metric, n, err)
	}
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["driver_name"] == h.name && labels["method_name"] == "DriverCreateBucket" &&
				labels["grpc_status_code"] == "OK" {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("no %s series for driver %s, DriverCreateBucket, OK", metric, h.name)
	}
}

// TestStopFinishesTheGrantInFlight: a sidecar stopped while the driver grants records the grant,
// so the next sidecar does not grant again.
func TestStopFinishesTheGrantInFlight(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{})
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	h.faults.Set(time.Second) // every call now takes a second
	ba := h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
	testenv.Eventually(t, func() error {
		if h.calls.Count("DriverGenerateBucketAccessId") == 0 {
			return fmt.Errorf("phase 1 not done yet")
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond) // DriverGrantBucketAccess is in flight
	h.stop()
	h.faults.Set(0)
	h.startSidecar()
	provisioned(t, ba, accessConditions)
	if n := h.calls.Count("DriverGrantBucketAccess"); n != 1 {
		t.Errorf("DriverGrantBucketAccess called %d times across the stop, want 1: %v", n, h.calls)
	}
}
