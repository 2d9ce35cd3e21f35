package controller_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/controller"
)

// operationCount reads cosi_operation_count for the driver, kind and operation, status
// Succeeded, from controller-runtime's registry (shared by every controller of the process).
func operationCount(t *testing.T, driver, kind, operation string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != "cosi_operation_count" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["driver_name"] == driver && l["resource_kind"] == kind && l["operation"] == operation &&
				l["status"] == "Succeeded" {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// Issue 25, item 12: two controllers with leader election against one API server, as the shipped
// Deployment runs them (two replicas): each operation is counted once, by the leader; the other
// replica observes the same objects in its cache and counts nothing.
func TestOnlyTheLeaderCountsMetrics(t *testing.T) {
	t.Parallel()
	api, err := testenv.Start() // an API server of its own: the package's controller does not run here
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Stop() })
	ctx := t.Context()
	for _, ns := range []string{"cosi-system", testNamespace} {
		if err := api.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		runCtx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- controller.Run(runCtx, api.Config, controller.Options{
				Workers: 2, LeaderElection: true, LeaderElectionNamespace: "cosi-system",
				MetricsAddress: "0", HealthAddress: "0", SkipNameValidation: true,
			}, logr.Discard())
		}()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("controller: %v", err)
			}
		})
	}
	testenv.Eventually(t, func() error {
		lease := &coordinationv1.Lease{}
		if err := api.Client.Get(ctx, types.NamespacedName{Namespace: "cosi-system", Name: controller.LeaseName},
			lease); err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return fmt.Errorf("no leader yet")
		}
		return nil
	})

	driver := uniqueName("leader") + ".controller-test.cosi.io"
	class := objects.BucketClass(uniqueName("class"), driver, cosiapi.DeletionPolicyDelete)
	c := objects.BucketClaim(testNamespace, uniqueName("claim"), class.Name, objects.S3)
	for _, o := range []client.Object{class, c} {
		if err := api.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	b := &cosiapi.Bucket{}
	testenv.Eventually(t, func() error {
		if err := api.Client.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		if c.Status.BoundBucketName == "" {
			return fmt.Errorf("not bound")
		}
		b.Name = c.Status.BoundBucketName
		return api.Client.Get(ctx, client.ObjectKeyFromObject(b), b)
	})
	// The sidecar's part: its finalizer, then Provisioned.
	testenv.Eventually(t, func() error {
		if err := api.Client.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		b.Finalizers = []string{cosiapi.FinalizerProtection}
		if err := api.Client.Update(ctx, b); err != nil {
			return err
		}
		b.Status.BucketID, b.Status.Protocols = b.Name, []cosiapi.Protocol{cosiapi.ProtocolS3}
		b.Status.Conditions = []metav1.Condition{{Type: cosiapi.ConditionProvisioned, Status: metav1.ConditionTrue,
			Reason: cosiapi.ReasonProvisioned, Message: "by the test", LastTransitionTime: metav1.Now()}}
		return api.Client.Status().Update(ctx, b)
	})
	counted := func(kind, operation string) {
		t.Helper()
		testenv.Eventually(t, func() error {
			if n := operationCount(t, driver, kind, operation); n == 0 {
				return fmt.Errorf("%s %s not counted", kind, operation)
			}
			return nil
		})
		testenv.Never(t, time.Second, func() error {
			if n := operationCount(t, driver, kind, operation); n != 1 {
				return fmt.Errorf("%s %s counted %v times by two replicas, want once", kind, operation, n)
			}
			return nil
		})
	}
	counted("Bucket", "Create")
	counted("BucketClaim", "Create")

	if err := api.Client.Delete(ctx, c); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		if err := api.Client.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		if b.DeletionTimestamp == nil {
			return fmt.Errorf("the Bucket is not deleting yet")
		}
		b.Finalizers = nil // the sidecar's part
		return api.Client.Update(ctx, b)
	})
	counted("Bucket", "Delete")
	counted("BucketClaim", "Delete")
}

// The Lease's events: client-go's leader election records "became leader" as a core/v1 Event in
// the Lease's namespace. With only the generated roles, the controller must be allowed to write
// it, or every election logs a refused request (and admins lose the event).
func TestLeaderElectionEventsAreAllowed(t *testing.T) {
	t.Parallel()
	api, err := testenv.Start() // an API server of its own: one controller elects a leader there
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Stop() })
	ctx := t.Context()
	cfg, err := api.ServiceAccountConfig(ctx, "config/rbac/controller/role.yaml", "cosi-system", "cosi-controller")
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- controller.Run(runCtx, cfg, controller.Options{
			Workers: 1, LeaderElection: true, LeaderElectionNamespace: "cosi-system",
			MetricsAddress: "0", HealthAddress: "0", SkipNameValidation: true,
		}, logr.Discard())
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("controller: %v", err)
		}
	})
	testenv.Eventually(t, func() error {
		events := &corev1.EventList{}
		if err := api.Client.List(ctx, events, client.InNamespace("cosi-system")); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "Lease" && e.InvolvedObject.Name == controller.LeaseName &&
				e.Reason == "LeaderElection" {
				return nil
			}
		}
		return fmt.Errorf("no LeaderElection event for Lease %s among %d events", controller.LeaseName, len(events.Items))
	})
}
