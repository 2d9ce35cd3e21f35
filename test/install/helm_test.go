package install

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/kubectlcosi"
)

// TestHelmLifecycle installs, uninstalls, installs again and upgrades the cosi chart with helm,
// in an API server of its own (TestAppliedToAPIServer installs the same objects without Helm):
// the CRDs, the admission policies and the COSI objects survive `helm uninstall`, a new install
// adopts them, and an upgrade changes the image and keeps the objects. A cosi-driver release
// installs and uninstalls next to it.
func TestHelmLifecycle(t *testing.T) {
	ctx := context.Background()
	e, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Error(err)
		}
	})
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := e.WriteAdminKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	// The API server's harness installed the CRDs, as a cluster where they predate Helm: remove
	// them so that the chart installs its own.
	e.RemoveCRDs(t, cosiapi.GroupName)

	helmDo := func(args ...string) {
		t.Helper()
		if _, err := helm(append(args, "--kubeconfig", kc, "--namespace", namespace)...); err != nil {
			t.Fatal(err)
		}
	}
	chart := filepath.Join(env.RepoRoot, "charts", "cosi")
	// As docs/install.md does: the namespace enforces Pod Security before the first Pod.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   namespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}
	if err := e.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	helmDo("install", "cosi", chart)

	class := objects.BucketClass("standard", "s3.cosi.kube-cosi.io", cosiapi.DeletionPolicyRetain)
	if err := wait.PollUntilContextTimeout(
		ctx,
		100*time.Millisecond,
		time.Minute,
		true,
		func(ctx context.Context) (bool, error) {
			return e.Client.Create(ctx, class) == nil, nil // until the CRD is established
		},
	); err != nil {
		t.Fatalf("creating a BucketClass after helm install: %v", err)
	}

	policies := admissionObjects(ctx, t, e.Client)
	if len(policies) == 0 {
		t.Fatal("helm install made no ValidatingAdmissionPolicy or binding")
	}

	helmDo("uninstall", "cosi")
	// The admission policies stay with the objects they protect: without them, tenants could name
	// forbidden classes and edit COSI's reserved metadata until COSI is installed again.
	if got := admissionObjects(ctx, t, e.Client); !slices.Equal(got, policies) {
		t.Errorf("admission policies and bindings after helm uninstall: %v, want %v", got, policies)
	}
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(crdGVK)
	if err := e.Client.Get(ctx, client.ObjectKey{Name: "buckets.objectstorage.k8s.io"}, crd); err != nil {
		t.Errorf("the Bucket CRD after helm uninstall: %v", err)
	}
	if err := e.Client.Get(ctx, client.ObjectKeyFromObject(class), &cosiapi.BucketClass{}); err != nil {
		t.Errorf("the BucketClass after helm uninstall: %v", err)
	}
	if err := e.Client.Get(
		ctx,
		client.ObjectKey{Name: "cosi-controller"},
		&rbacv1.ClusterRole{},
	); !apierrors.IsNotFound(
		err,
	) {
		t.Errorf("the ClusterRole after helm uninstall: got %v, want it deleted", err)
	}

	helmDo("install", "cosi", chart) // adopts the CRDs and the admission policies
	if got := admissionObjects(ctx, t, e.Client); !slices.Equal(got, policies) {
		t.Errorf("admission policies and bindings after the second helm install: %v, want %v", got, policies)
	}
	helmDo("upgrade", "cosi", chart, "--reset-then-reuse-values", "--set", "image.tag=v0.2.0")
	var d appsv1.Deployment
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "cosi-controller"}, &d); err != nil {
		t.Fatal(err)
	}
	if got := d.Spec.Template.Spec.Containers[0].Image; got != "ghcr.io/kube-cosi/cosi-controller:v0.2.0" {
		t.Errorf("image after helm upgrade: %s", got)
	}
	if err := e.Client.Get(ctx, client.ObjectKeyFromObject(class), &cosiapi.BucketClass{}); err != nil {
		t.Errorf("the BucketClass after install and upgrade: %v", err)
	}

	// A driver release next to it, and gone again.
	helmDo("install", "s3", filepath.Join(env.RepoRoot, "charts", "cosi-driver"))
	if err := e.Client.Get(ctx, client.ObjectKey{Name: "s3-cosi-sidecar"}, &rbacv1.ClusterRole{}); err != nil {
		t.Errorf("the driver's ClusterRole after helm install: %v", err)
	}
	helmDo("uninstall", "s3")

	// The v1alpha1 view of the Buckets turned on, and off again (TestV1alpha1BucketView tests
	// what it does).
	helmDo("upgrade", "cosi", chart, "--reset-then-reuse-values", "--set", "v1alpha1BucketView.enabled=true",
		"--set", "v1alpha1BucketView.serviceAccounts[0].name=v1alpha1-driver")
	view := dynamicClient(t, e.Config).Resource(bucketsV1alpha1)
	waitForView(t, view)
	binding := &rbacv1.ClusterRoleBinding{}
	if err := e.Client.Get(ctx, client.ObjectKey{Name: "cosi-v1alpha1-bucket-reader"}, binding); err != nil {
		t.Fatalf("the view's ClusterRoleBinding after helm upgrade: %v", err)
	}
	want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "v1alpha1-driver", Namespace: namespace}}
	if !slices.Equal(binding.Subjects, want) || binding.RoleRef.Name != "cosi-v1alpha1-bucket-reader" {
		t.Errorf("the view's ClusterRoleBinding binds %v to %s, want %v to cosi-v1alpha1-bucket-reader",
			binding.Subjects, binding.RoleRef.Name, want)
	}
	helmDo("upgrade", "cosi", chart, "--reset-then-reuse-values", "--set", "v1alpha1BucketView.enabled=false")
	waitUntilNotServed(t, view)
	for _, o := range []client.Object{&rbacv1.ClusterRole{}, &rbacv1.ClusterRoleBinding{}} {
		if err := e.Client.Get(ctx, client.ObjectKey{Name: "cosi-v1alpha1-bucket-reader"}, o); !apierrors.IsNotFound(err) {
			t.Errorf("the view's %T after it was turned off: %v, want it deleted", o, err)
		}
	}
	// Kept as the other policies (helm.sh/resource-policy): inert without the version it matches.
	if got := admissionObjects(ctx, t, e.Client); !slices.Contains(got,
		"ValidatingAdmissionPolicy/"+kubectlcosi.V1alpha1BucketViewPolicy) {
		t.Errorf("admission policies after the view was turned off: %v, want %s kept", got,
			kubectlcosi.V1alpha1BucketViewPolicy)
	}
}

// admissionObjects returns "Kind/name" of every ValidatingAdmissionPolicy and binding, sorted.
func admissionObjects(ctx context.Context, t *testing.T, c client.Client) []string {
	t.Helper()
	var names []string
	var ps admissionregistrationv1.ValidatingAdmissionPolicyList
	if err := c.List(ctx, &ps); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps.Items {
		names = append(names, "ValidatingAdmissionPolicy/"+p.Name)
	}
	var bs admissionregistrationv1.ValidatingAdmissionPolicyBindingList
	if err := c.List(ctx, &bs); err != nil {
		t.Fatal(err)
	}
	for _, b := range bs.Items {
		names = append(names, "ValidatingAdmissionPolicyBinding/"+b.Name)
	}
	slices.Sort(names)
	return names
}

var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}
