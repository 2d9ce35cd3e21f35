package localenv

import (
	"context"
	"fmt"
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

// Crash kills etcd and kube-apiserver and starts them again with their data: what was written
// before is there after, and every crash, the first (taking over from envtest) and the later
// ones, ends with an API server that answers, with the same address and certificates.
func TestCrash(t *testing.T) {
	dir := t.TempDir()
	a, err := StartAPIServer(APIServerOptions{EtcdDir: filepath.Join(dir, "etcd"), LogDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for i, name := range []string{Etcd, KubeAPIServer, Etcd, KubeAPIServer} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("before-%d", i)}}
		if err := a.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		if err := a.Crash(ctx, name, 100*time.Millisecond); err != nil {
			t.Fatalf("crash %d of %s: %v", i, name, err)
		}
		if err := a.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
			t.Errorf("after crash %d of %s: %v", i, name, err)
		}
	}
	if err := a.Crash(ctx, "kube-scheduler", 0); err == nil {
		t.Error("crashed a process that is not part of the control plane")
	}
}
