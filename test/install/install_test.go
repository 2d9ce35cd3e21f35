package install

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube-cosi/cosi/dev/testenv"
)

var (
	env *testenv.Env
	// kubeconfig is a cluster admin's, for kubectl.
	kubeconfig string
)

func TestMain(m *testing.M) {
	testenv.Run(m, func(_ context.Context, e *testenv.Env) error {
		env = e
		dir, err := os.MkdirTemp("", "cosi-install")
		if err != nil {
			return err
		}
		e.Cleanup(func() error { return os.RemoveAll(dir) })
		kubeconfig = filepath.Join(dir, "kubeconfig")
		return e.WriteAdminKubeconfig(kubeconfig)
	})
}

// TestAppliedToAPIServer installs config/default and config/driver/s3 into the API server as
// `kubectl apply --server-side -k` does, then sends the charts' renderings with a server-side
// dry run: the API server validates every object (CRDs, RBAC, admission policies, Deployments,
// PodDisruptionBudgets, Services) and warns of nothing. cosi-system enforces Pod Security
// "restricted", which the API server checks on Pods only (it merely warns on a Deployment's
// template): a Pod made of each Deployment's template is created there with a dry run too.
func TestAppliedToAPIServer(t *testing.T) {
	ctx := context.Background()
	var deployments []*unstructured.Unstructured
	for _, k := range []string{"config/default", "config/driver/s3"} {
		rendering := kustomize(t, k)
		apply(t, k, rendering)
		deployments = append(deployments, deploymentsOf(t, rendering)...)
	}
	var ns corev1.Namespace
	if err := env.Client.Get(ctx, client.ObjectKey{Name: namespace}, &ns); err != nil {
		t.Fatal(err)
	}
	if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Fatalf("namespace %s enforces Pod Security %q, want restricted", namespace, got)
	}
	for _, c := range []struct{ chart, release string }{{"charts/cosi", "cosi"}, {"charts/cosi-driver", "s3"}} {
		rendering := helmTemplate(t, c.chart, c.release)
		apply(t, c.chart, rendering, "--dry-run=server")
		deployments = append(deployments, deploymentsOf(t, rendering)...)
	}
	if len(deployments) != 4 {
		t.Fatalf("%d Deployments rendered, want 4 (the controller and the S3 driver, each both ways)", len(deployments))
	}

	for _, d := range deployments {
		admittedRestricted(ctx, t, d)
	}
}

// admittedRestricted checks that a Pod made of Deployment d's template is admitted in d's
// namespace, which enforces Pod Security "restricted" (the API server checks Pods only, and merely
// warns on a Deployment's template), with a dry run. The control: the same Pod without its
// securityContexts is refused there, so the check is one.
func admittedRestricted(ctx context.Context, t *testing.T, d *unstructured.Unstructured) {
	t.Helper()
	pod := podOf(t, d)
	if err := env.Client.Create(ctx, pod, client.DryRunAll); err != nil {
		t.Errorf("a Pod of Deployment %s is refused in %s: %v", d.GetName(), d.GetNamespace(), err)
	}
	pod = podOf(t, d)
	pod.Spec.SecurityContext = nil
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].SecurityContext = nil
	}
	err := env.Client.Create(ctx, pod, client.DryRunAll)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "restricted") {
		t.Errorf(
			"a Pod of Deployment %s without securityContext: got %v, want Pod Security restricted to forbid it",
			d.GetName(),
			err,
		)
	}
}

// apply sends a rendering to the API server with server-side apply, as an admin would with
// `kubectl apply --server-side`, and fails on any error or warning.
func apply(t *testing.T, what string, rendering []byte, args ...string) {
	t.Helper()
	applyTo(t, kubeconfig, what, rendering, args...)
}

// applyTo is apply to the API server of the kubeconfig file kc.
func applyTo(t *testing.T, kc, what string, rendering []byte, args ...string) {
	t.Helper()
	args = append(
		[]string{
			"--kubeconfig",
			kc,
			"apply",
			"--server-side",
			"--force-conflicts",
			"--field-manager",
			"cosi-install-test",
			"-f",
			"-",
		},
		args...)
	var stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(env.BinDir, "kubectl"), args...)
	cmd.Stdin, cmd.Stderr = bytes.NewReader(rendering), &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("applying %s: %v\n%s", what, err, stderr.String())
	}
	if strings.Contains(stderr.String(), "Warning") {
		t.Errorf("applying %s: the API server warns:\n%s", what, stderr.String())
	}
}

// deploymentsOf returns the Deployments of a rendering.
func deploymentsOf(t *testing.T, rendering []byte) []*unstructured.Unstructured {
	var objs []*unstructured.Unstructured
	for _, o := range decode(t, rendering) {
		if o.GetKind() == "Deployment" {
			objs = append(objs, o)
		}
	}
	return objs
}

// podOf makes a Pod of a Deployment's template, in the Deployment's namespace.
func podOf(t *testing.T, d *unstructured.Unstructured) *corev1.Pod {
	t.Helper()
	tmpl, ok, err := unstructured.NestedMap(d.Object, "spec", "template")
	if !ok || err != nil {
		t.Fatalf("Deployment %s has no template: %v", d.GetName(), err)
	}
	pod := &corev1.Pod{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, pod); err != nil {
		t.Fatal(err)
	}
	pod.Namespace = d.GetNamespace()
	pod.GenerateName = d.GetName() + "-"
	return pod
}
