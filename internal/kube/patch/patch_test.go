package patch_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/kube/patch"
)

var env *testenv.Env

const namespace = "patch-test"

// TestMain starts a real API server: what a patch does (merge of lists, optimistic locking, the
// status subresource) only shows there.
func TestMain(m *testing.M) {
	var err error
	if env, err = testenv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := 1
	if err := env.CreateNamespace(context.Background(), namespace); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	_ = env.Stop()
	os.Exit(code)
}

var counter atomic.Int64

// newClaim creates a BucketClaim and returns it as stored.
func newClaim(t *testing.T) *cosiapi.BucketClaim {
	t.Helper()
	c := &cosiapi.BucketClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("claim-%d", counter.Add(1))},
		Spec:       cosiapi.BucketClaimSpec{BucketClassName: "class"},
	}
	if err := env.Client.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

func stored(t *testing.T, c *cosiapi.BucketClaim) *cosiapi.BucketClaim {
	t.Helper()
	s := &cosiapi.BucketClaim{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), s); err != nil {
		t.Fatal(err)
	}
	return s
}

var all = []string{cosiapi.ConditionProvisioned, cosiapi.ConditionProvisionFailed, cosiapi.ConditionResourcesValidated}

func TestStatusPatchesOnceWhatChanged(t *testing.T) {
	claim := newClaim(t)
	status := patch.NewStatus(env.Client, claim, all...)
	if changed, err := status.Changed(); err != nil || changed {
		t.Fatalf("Changed before any change: %v, %v", changed, err)
	}
	claim.Status.BoundBucketName = "bc-1"
	conditions.MarkUnknown(claim, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioning, "waiting")
	if !status.ConditionsChanged() {
		t.Error("ConditionsChanged after a condition was set is false")
	}
	if patched, err := status.PatchIfChanged(t.Context(), patch.OptimisticLock); err != nil || !patched {
		t.Fatalf("PatchIfChanged of a changed status: %v, %v", patched, err)
	}
	got := stored(t, claim)
	if got.Status.BoundBucketName != "bc-1" ||
		!conditions.Has(got, cosiapi.ConditionProvisioned, metav1.ConditionUnknown, cosiapi.ReasonProvisioning) {
		t.Errorf("stored status %+v", got.Status)
	}
	if c := conditions.Get(got, cosiapi.ConditionProvisioned); c.ObservedGeneration != got.Generation {
		t.Errorf("observedGeneration %d, want %d", c.ObservedGeneration, got.Generation)
	}

	// The snapshot is now what was written: nothing is left to patch.
	if status.Before().Status.BoundBucketName != "bc-1" || status.ConditionsChanged() {
		t.Errorf("snapshot after Patch: %+v", status.Before().Status)
	}
	rv := claim.ResourceVersion
	conditions.MarkUnknown(claim, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioning, "waiting")
	if patched, err := status.PatchIfChanged(t.Context(), patch.OptimisticLock); err != nil || patched {
		t.Fatalf("PatchIfChanged of an unchanged status: %v, %v", patched, err)
	}
	if got := stored(t, claim); got.ResourceVersion != rv {
		t.Errorf("an unchanged status was written: resourceVersion %s, then %s", rv, got.ResourceVersion)
	}
}

// TestStatusLock: with OptimisticLock, a status computed from a stale copy never lands; without,
// it lands with the whole conditions list as the stale copy had it.
func TestStatusLock(t *testing.T) {
	claim := newClaim(t)
	stale := claim.DeepCopy()

	other := patch.NewStatus(env.Client, claim, all...)
	conditions.MarkTrue(claim, cosiapi.ConditionResourcesValidated, cosiapi.ReasonValid, "by another writer")
	if err := other.Patch(t.Context(), patch.OptimisticLock); err != nil {
		t.Fatal(err)
	}

	locked := patch.NewStatus(env.Client, stale, all...)
	conditions.MarkUnknown(stale, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioning, "stale")
	if err := locked.Patch(t.Context(), patch.OptimisticLock); !apierrors.IsConflict(err) {
		t.Fatalf("a locked patch of a stale copy: %v, want Conflict", err)
	}
	if got := stored(t, claim); conditions.Get(got, cosiapi.ConditionProvisioned) != nil ||
		!conditions.IsTrue(got, cosiapi.ConditionResourcesValidated) {
		t.Errorf("after the refused patch: %+v", got.Status.Conditions)
	}

	if err := locked.Patch(t.Context(), patch.NoLock); err != nil {
		t.Fatalf("an unlocked patch of a stale copy: %v", err)
	}
	got := stored(t, claim)
	if !conditions.Has(got, cosiapi.ConditionProvisioned, metav1.ConditionUnknown, cosiapi.ReasonProvisioning) {
		t.Errorf("the unlocked patch did not land: %+v", got.Status.Conditions)
	}
	if conditions.Get(got, cosiapi.ConditionResourcesValidated) != nil {
		t.Errorf("an unlocked merge patch kept the other writer's condition, which the list it replaced did not have: %+v",
			got.Status.Conditions)
	}
}

// TestStatusOwnedConditions: a component never writes a change of a condition it does not own.
func TestStatusOwnedConditions(t *testing.T) {
	claim := newClaim(t)
	status := patch.NewStatus(env.Client, claim, all...)
	conditions.MarkTrue(claim, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioned, "")
	if err := status.Patch(t.Context(), patch.OptimisticLock); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		change func(*cosiapi.BucketClaim)
	}{
		{"changed", func(c *cosiapi.BucketClaim) {
			conditions.MarkFalse(c, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioningFailed, "")
		}},
		{"added", func(c *cosiapi.BucketClaim) { conditions.Init(c, cosiapi.ConditionProvisionFailed) }},
		{"removed", func(c *cosiapi.BucketClaim) { c.Status.Conditions = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := stored(t, claim)
			onlyRV := patch.NewStatus(env.Client, c, cosiapi.ConditionResourcesValidated)
			conditions.MarkTrue(c, cosiapi.ConditionResourcesValidated, cosiapi.ReasonValid, "")
			tc.change(c)
			err := onlyRV.Patch(t.Context(), patch.NoLock)
			if err == nil || !strings.Contains(err.Error(), "not written by this component") {
				t.Fatalf("a patch that changes a condition the component does not own: %v", err)
			}
			got := stored(t, claim)
			if !conditions.IsTrue(got, cosiapi.ConditionProvisioned) || len(got.Status.Conditions) != 1 {
				t.Errorf("the refused patch was written: %+v", got.Status.Conditions)
			}
		})
	}

	c := stored(t, claim)
	onlyRV := patch.NewStatus(env.Client, c, cosiapi.ConditionResourcesValidated)
	conditions.MarkTrue(c, cosiapi.ConditionResourcesValidated, cosiapi.ReasonValid, "")
	if err := onlyRV.Patch(t.Context(), patch.OptimisticLock); err != nil {
		t.Fatalf("a patch of an owned condition: %v", err)
	}
	if got := stored(t, claim); !conditions.IsTrue(got, cosiapi.ConditionResourcesValidated) ||
		!conditions.IsTrue(got, cosiapi.ConditionProvisioned) {
		t.Errorf("after the patch of an owned condition: %+v", got.Status.Conditions)
	}
}

func TestFinalizersAndAnnotations(t *testing.T) {
	claim := newClaim(t)
	ctx := t.Context()
	for range 2 { // the second time changes nothing
		if err := patch.AddFinalizer(ctx, env.Client, claim); err != nil {
			t.Fatal(err)
		}
		if err := patch.SetAnnotation(ctx, env.Client, claim, cosiapi.AnnotationHasBucketAccessReferences); err != nil {
			t.Fatal(err)
		}
	}
	got := stored(t, claim)
	if len(got.Finalizers) != 1 || got.Finalizers[0] != cosiapi.FinalizerProtection ||
		got.Annotations[cosiapi.AnnotationHasBucketAccessReferences] != "true" {
		t.Fatalf("finalizers %v, annotations %v", got.Finalizers, got.Annotations)
	}

	// Annotations need no lock: a stale copy does not conflict, and other keys stay.
	stale := got.DeepCopy()
	if err := patch.SetAnnotation(ctx, env.Client, got, cosiapi.AnnotationBucketClaimBeingDeleted); err != nil {
		t.Fatal(err)
	}
	if err := patch.RemoveAnnotation(ctx, env.Client, stale, cosiapi.AnnotationHasBucketAccessReferences); err != nil {
		t.Fatalf("removing an annotation from a stale copy: %v", err)
	}
	got = stored(t, claim)
	if _, ok := got.Annotations[cosiapi.AnnotationHasBucketAccessReferences]; ok ||
		got.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted] != "true" {
		t.Errorf("removing the last annotation of a stale copy left %v, want only the other writer's", got.Annotations)
	}

	// Finalizers are a list: a stale copy conflicts rather than overwriting another writer's.
	stale = got.DeepCopy()
	if err := patch.SetAnnotation(ctx, env.Client, got, cosiapi.AnnotationHasBucketAccessReferences); err != nil {
		t.Fatal(err)
	}
	if err := patch.RemoveFinalizer(ctx, env.Client, stale); !apierrors.IsConflict(err) {
		t.Fatalf("removing the finalizer from a stale copy: %v, want Conflict", err)
	}
	if err := patch.RemoveFinalizer(ctx, env.Client, got); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, claim); len(got.Finalizers) != 0 {
		t.Errorf("finalizers %v", got.Finalizers)
	}

	// An object already gone is fine.
	if err := patch.AddFinalizer(ctx, env.Client, got); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	got = stored(t, claim) // deleting
	if err := patch.RemoveFinalizer(ctx, env.Client, got); err != nil {
		t.Fatal(err)
	}
	env.Gone(t, got)
	if err := patch.RemoveFinalizer(ctx, env.Client, got); err != nil {
		t.Errorf("removing the finalizer of an object that is gone: %v", err)
	}
}

// TestFinalizerInANamespaceThatIsGone: a namespace can be finished while objects with finalizers
// are left in it (docs/reliability.md, "Found by the suite"); the API server then refuses every
// write to them with NotFound for the namespace. That is not the object being gone: removing the
// finalizer failed, and must be tried again once the namespace is back.
func TestFinalizerInANamespaceThatIsGone(t *testing.T) {
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("patch-gone-%d", counter.Add(1))}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	claim := &cosiapi.BucketClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "claim", Finalizers: []string{cosiapi.FinalizerProtection}},
		Spec:       cosiapi.BucketClaimSpec{BucketClassName: "class"},
	}
	if err := env.Client.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	// The namespace finished with the claim in it (testenv runs no namespace controller).
	if err := env.Client.Delete(ctx, ns); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ns), ns); err != nil {
			return client.IgnoreNotFound(err)
		}
		ns.Spec.Finalizers = nil
		if err := env.Client.SubResource("finalize").Update(ctx, ns); err != nil {
			return err
		}
		return fmt.Errorf("namespace %s is still there", ns.Name)
	})
	if err := env.Client.Delete(ctx, claim); err != nil {
		t.Fatal(err)
	}
	got := stored(t, claim)
	removed, err := patch.FinalizerRemoved(ctx, env.Client, got)
	if err == nil {
		t.Fatalf("removing the finalizer of a claim whose namespace is gone: removed %v, no error: taken for the "+
			"claim being gone", removed)
	}
	t.Logf("refused as it should be: %v", err)

	// Back once the namespace is.
	ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		got := stored(t, claim)
		removed, err := patch.FinalizerRemoved(ctx, env.Client, got)
		if err != nil || !removed {
			return fmt.Errorf("removed %v: %w", removed, err)
		}
		return nil
	})
	env.Gone(t, claim)
}
