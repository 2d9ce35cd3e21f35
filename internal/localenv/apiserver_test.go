package localenv

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// With the controller-manager (make run), the API server behaves like a cluster's: a deleted
// namespace finishes deleting, with what it held, and dependents go with their owner.
func TestControllerManagerDeletesNamespacesAndDependents(t *testing.T) {
	a, err := StartAPIServer(APIServerOptions{ControllerManagerLog: filepath.Join(t.TempDir(), "kcm.log")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := a.Client

	if err := a.CreateNamespace(ctx, "tenant"); err != nil {
		t.Fatal(err)
	}
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "owner"}}
	if err := c.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	dependent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "dependent",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}}}
	if err := c.Create(ctx, dependent); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, owner); err != nil {
		t.Fatal(err)
	}
	waitGone(ctx, t, c, dependent, "the dependent of a deleted owner")

	if err := c.Create(
		ctx,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "content"}},
	); err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}
	start := time.Now()
	if err := c.Delete(ctx, ns); err != nil {
		t.Fatal(err)
	}
	waitGone(ctx, t, c, ns, "the deleted namespace")
	t.Logf("namespace deleted in %s", time.Since(start).Round(time.Millisecond))
}

func waitGone(ctx context.Context, t *testing.T, c client.Client, obj client.Object, what string) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("%s is still there: %v", what, err)
	}
}
