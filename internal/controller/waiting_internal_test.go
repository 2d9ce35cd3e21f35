package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
)

// The objects that wait for a sidecar leave the controller's waits when they go, and a claim
// leaves when a sidecar picks its Bucket up: at 100,000 objects, nothing stays behind.
func TestWaitsForgetObjects(t *testing.T) {
	t.Parallel()
	// The grace period does not end during the test: every handed-off object waits.
	const ns = "apps"
	api, claims, accesses := startWaitsController(t, ns, Options{DriverGrace: time.Hour}, nil)
	ctx := t.Context()

	driver := "waits.controller-test.cosi.io"
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "cosi-system", Name: sidecarLeaseName(driver)},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("")}}
	class := objects.BucketClass("class", driver, cosiapi.DeletionPolicyDelete)
	aclass := objects.BucketAccessClass("accessclass", driver)
	acted := objects.BucketClaim(ns, "acted", class.Name, objects.S3)
	gone := objects.BucketClaim(ns, "gone", class.Name, objects.S3)
	ba := objects.BucketAccess(ns, "access", aclass.Name, objects.Grant(gone.Name, "creds", objects.ReadWrite))
	for _, o := range []client.Object{lease, class, aclass, acted, gone, ba} {
		if err := api.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	waits := func(w *waiting, want int) func() error {
		return func() error {
			if n, looks := w.len(); n != want || looks != want {
				return fmt.Errorf("%d objects wait, %d looks are due; want %d", n, looks, want)
			}
			return nil
		}
	}
	testenv.Eventually(t, waits(claims.waits, 2))
	testenv.Eventually(t, waits(accesses.waits, 1))

	// A sidecar picks up the Bucket of one claim.
	testenv.Eventually(t, func() error {
		if err := api.Client.Get(ctx, client.ObjectKeyFromObject(acted), acted); err != nil {
			return err
		}
		b := &cosiapi.Bucket{ObjectMeta: metav1.ObjectMeta{Name: acted.Status.BoundBucketName}}
		if err := api.Client.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		b.Finalizers = []string{cosiapi.FinalizerProtection}
		if err := api.Client.Update(ctx, b); err != nil {
			return err
		}
		meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: cosiapi.ConditionProvisioned,
			Status: metav1.ConditionTrue, Reason: cosiapi.ReasonProvisioned, Message: "by the test"})
		return api.Client.Status().Update(ctx, b)
	})
	testenv.Eventually(t, waits(claims.waits, 1))

	// The access and the other claim go (nothing was granted, nothing provisioned).
	for _, o := range []client.Object{ba, gone} {
		if err := api.Client.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
		api.Gone(t, o)
	}
	testenv.Eventually(t, waits(accesses.waits, 0))
	testenv.Eventually(t, waits(claims.waits, 0))
}

// The looks come due in time order; a later time never postpones an earlier look, an earlier one
// advances it, and a removed object is not looked at.
func TestWaitingOrder(t *testing.T) {
	w := newWaiting(nil)
	a, b, c := types.NamespacedName{Name: "a"}, types.NamespacedName{Name: "b"}, types.NamespacedName{Name: "c"}
	now := time.Now()
	w.add(a, 3*time.Hour)
	w.add(b, time.Hour)
	w.add(c, 4*time.Hour)
	w.add(a, 5*time.Hour) // kept at 3 h
	w.add(c, 2*time.Hour) // advanced to 2 h
	w.remove(b)
	if n, looks := w.len(); n != 2 || looks != 2 {
		t.Fatalf("%d objects, %d looks; want 2, 2", n, looks)
	}
	keys, next := w.next(now.Add(150 * time.Minute))
	if !slices.Equal(keys, []types.NamespacedName{c}) || next.Before(now.Add(3*time.Hour)) ||
		next.After(now.Add(3*time.Hour+time.Minute)) {
		t.Errorf("due at 2.5 h: %v, next at %v; want [c], next at 3 h", keys, next.Sub(now))
	}
	keys, next = w.next(now.Add(6 * time.Hour))
	if !slices.Equal(keys, []types.NamespacedName{a}) || !next.IsZero() {
		t.Errorf("due at 6 h: %v, next at %v; want [a], none", keys, next)
	}
	if n, looks := w.len(); n != 0 || looks != 0 {
		t.Errorf("%d objects, %d looks left; want none", n, looks)
	}
}

// startWaitsController starts an API server of its own (the test reads the waits of the
// controller on it) with the namespaces cosi-system and ns, and a controller with opts and two
// workers; before, when not nil, runs between the reconcilers' setup and the start. The
// controller stops when the test ends.
func startWaitsController(
	t *testing.T, ns string, opts Options, before func(*BucketClaimReconciler),
) (*testenv.Env, *BucketClaimReconciler, *BucketAccessReconciler) {
	t.Helper()
	api, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Stop() })
	for _, n := range []string{"cosi-system", ns} {
		if err := api.CreateNamespace(t.Context(), n); err != nil {
			t.Fatal(err)
		}
	}
	opts.Workers, opts.MetricsAddress, opts.HealthAddress = 2, "0", "0"
	opts.SkipNameValidation, opts.LeaderElectionNamespace = true, "cosi-system"
	mgr, err := newManager(api.Config, opts, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	claims, accesses, err := setup(runCtx, mgr, opts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if before != nil {
		before(claims)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("controller: %v", err)
		}
	})
	return api, claims, accesses
}
