package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/kubectlcosi"
)

// viewComponent is the kustomize component of the v1alpha1 view of the Buckets; the cosi chart
// renders it with v1alpha1BucketView.enabled.
const viewComponent = "config/components/v1alpha1-bucket-view"

// bucketsV1alpha1 are the Buckets as the view serves them.
var bucketsV1alpha1 = schema.GroupVersionResource{Group: cosiapi.GroupName, Version: "v1alpha1", Resource: "buckets"}

// v1alpha1Bucket is the Bucket of the COSI v1alpha1 release's Go API
// (sigs.k8s.io/container-object-storage-interface-api, apis/objectstorage/v1alpha1): the fields,
// JSON names and types that a v1alpha1 driver's typed client decodes (it ignores the others).
type v1alpha1Bucket struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		DriverName       string                  `json:"driverName"`
		BucketClassName  string                  `json:"bucketClassName"`
		BucketClaim      *corev1.ObjectReference `json:"bucketClaim"`
		Protocols        []string                `json:"protocols"`
		Parameters       map[string]string       `json:"parameters,omitempty"`
		DeletionPolicy   string                  `json:"deletionPolicy"`
		ExistingBucketID string                  `json:"existingBucketID,omitempty"`
	} `json:"spec,omitempty"`
	Status struct {
		BucketReady bool   `json:"bucketReady"`
		BucketID    string `json:"bucketID,omitempty"`
	} `json:"status,omitempty"`
}

// driverParameters are what Scality's v1alpha1 driver reads from a Bucket's spec.parameters in
// DriverDeleteBucket and DriverRevokeBucketAccess: where the store's credentials are.
var driverParameters = map[string]string{
	"objectStorageSecretName":      "store-credentials",
	"objectStorageSecretNamespace": "storage",
}

// TestV1alpha1BucketView installs config/default with the v1alpha1 view component, as
// docs/v1alpha1-drivers.md tells admins to, into an API server of its own (it changes the Bucket
// CRD): a v1alpha1 driver reads a Bucket that COSI wrote through v1alpha2, with its parameters,
// and nobody writes through v1alpha1, while v1alpha2 works as before and stays the preferred
// version. Without the view, and after it is removed, v1alpha1 is not served.
func TestV1alpha1BucketView(t *testing.T) {
	ctx := t.Context()
	e, kc := ownAPIServer(t)
	view := dynamicClient(t, e.Config).Resource(bucketsV1alpha1)

	// A Bucket as COSI writes it: created by the controller, its status by the sidecar.
	bucket := objects.Bucket("bc-view", "v1alpha1.s3.example.com", cosiapi.DeletionPolicyDelete,
		objects.ClaimedBy("tenant", "photos", "uid-photos"), objects.BucketProtocols(cosiapi.ProtocolS3))
	bucket.Spec.Parameters = driverParameters
	if err := e.Client.Create(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	sidecarStatus(t, e.Client, bucket, "provisioned")

	t.Run("without the view, v1alpha1 is not served", func(t *testing.T) {
		expectNotServed(t, e.Config, view, bucket.Name)
	})

	applyTo(t, kc, "config/default with "+viewComponent, kustomize(t, overlay(t, viewComponent)))
	waitForView(t, view)

	t.Run("v1alpha1 reads return the v1alpha2 object", func(t *testing.T) {
		stored := &unstructured.Unstructured{}
		stored.SetGroupVersionKind(cosiapi.SchemeGroupVersion.WithKind("Bucket"))
		if err := e.Client.Get(ctx, client.ObjectKeyFromObject(bucket), stored); err != nil {
			t.Fatal(err)
		}
		got, err := view.Get(ctx, bucket.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		expectRelabelled(t, "GET", stored, got)
		status, err := view.Get(ctx, bucket.Name, metav1.GetOptions{}, "status")
		if err != nil {
			t.Fatal(err)
		}
		expectRelabelled(t, "GET status", stored, status)
		list, err := view.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 {
			t.Fatalf("LIST: %d Buckets, want 1", len(list.Items))
		}
		expectRelabelled(t, "LIST", stored, &list.Items[0])

		// What a v1alpha1 driver's typed client decodes.
		b := decodeV1alpha1(t, got)
		if !maps.Equal(b.Spec.Parameters, driverParameters) || b.Spec.DriverName != bucket.Spec.DriverName ||
			b.Spec.DeletionPolicy != string(cosiapi.DeletionPolicyDelete) ||
			!slices.Equal(b.Spec.Protocols, []string{string(cosiapi.ProtocolS3)}) || b.Status.BucketID != "bc-view" {
			t.Errorf("a v1alpha1 client decodes %+v", b)
		}
	})

	t.Run("a v1alpha1 watch follows the v1alpha2 writes", func(t *testing.T) {
		w, err := view.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + bucket.Name})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		ev := nextEvent(t, w)
		if ev.Type != watch.Added {
			t.Fatalf("first event %s %v, want ADDED", ev.Type, ev.Object)
		}
		if b := decodeV1alpha1(t, ev.Object.(*unstructured.Unstructured)); !maps.Equal(b.Spec.Parameters, driverParameters) {
			t.Errorf("ADDED: parameters %v, want %v", b.Spec.Parameters, driverParameters)
		}
		sidecarStatus(t, e.Client, bucket, "provisioned again")
		ev = nextEvent(t, w)
		u, _ := ev.Object.(*unstructured.Unstructured)
		conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		if ev.Type != watch.Modified || u.GetAPIVersion() != bucketsV1alpha1.GroupVersion().String() ||
			len(conditions) != 1 || conditions[0].(map[string]any)["message"] != "provisioned again" {
			t.Errorf("after a status write through v1alpha2: %s %s, conditions %v; want MODIFIED %s, the new condition",
				ev.Type, u.GetAPIVersion(), conditions, bucketsV1alpha1.GroupVersion())
		}
	})

	t.Run("writes through v1alpha1 are refused", func(t *testing.T) {
		expectWritesRefused(t, e.Client, view, bucket)
	})

	t.Run("v1alpha2 stays the preferred version", func(t *testing.T) {
		expectV1alpha2Preferred(t, e.Config, kc)
	})

	t.Run("the reader role", func(t *testing.T) {
		expectReaderRole(t, e, bucket.Name)
	})

	t.Run("kubectl cosi doctor", func(t *testing.T) {
		expectDoctorSeesTheView(t, e, kc)
	})

	t.Run("v1alpha2 writes still work", func(t *testing.T) {
		// The one mutable field of the spec, as an admin switches a bucket to Retain.
		before := bucket.DeepCopy()
		bucket.Spec.DeletionPolicy = cosiapi.DeletionPolicyRetain
		if err := e.Client.Patch(ctx, bucket, client.MergeFrom(before)); err != nil {
			t.Fatal(err)
		}
		if err := e.Client.Delete(ctx, bucket); err != nil {
			t.Fatal(err)
		}
		e.Gone(t, bucket)
		// A collection: deleted one by one, each a DELETE of v1alpha2 the policy does not match.
		for _, name := range []string{"bc-collection-1", "bc-collection-2"} {
			b := objects.Bucket(name, "v1alpha1.s3.example.com", cosiapi.DeletionPolicyDelete,
				objects.ClaimedBy("tenant", name, ""))
			b.Labels = map[string]string{"test": "collection"}
			if err := e.Client.Create(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Client.DeleteAllOf(ctx, &cosiapi.Bucket{}, client.MatchingLabels{"test": "collection"}); err != nil {
			t.Fatal(err)
		}
		var left cosiapi.BucketList
		if err := e.Client.List(ctx, &left); err != nil {
			t.Fatal(err)
		}
		if len(left.Items) != 0 {
			t.Errorf("%d Buckets left after a v1alpha2 delete-collection", len(left.Items))
		}
	})

	t.Run("without the component, v1alpha1 is not served again", func(t *testing.T) {
		applyTo(t, kc, "config/default", kustomize(t, "config/default"))
		waitUntilNotServed(t, view)
		expectNotServed(t, e.Config, view, "bc-any")
	})
}

// nextEvent waits for the next event of w.
func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("the watch ended")
		}
		return ev
	case <-time.After(time.Minute):
		t.Fatal("no watch event in a minute")
	}
	return watch.Event{}
}

// ownAPIServer starts an API server for one test, with the CRDs of config/crd/bases, and writes
// an admin's kubeconfig for kubectl.
func ownAPIServer(t *testing.T) (*testenv.Env, string) {
	t.Helper()
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
	return e, kc
}

// sidecarStatus records the bucket bc-view as provisioned, as the sidecar does: one merge patch of
// the status subresource, through v1alpha2, with message in the Provisioned condition.
func sidecarStatus(t *testing.T, c client.Client, b *cosiapi.Bucket, message string) {
	t.Helper()
	before := b.DeepCopy()
	b.Status.BucketID = "bc-view"
	b.Status.Protocols = []cosiapi.Protocol{cosiapi.ProtocolS3}
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: cosiapi.ConditionProvisioned,
		Status: metav1.ConditionTrue, Reason: cosiapi.ReasonProvisioned, Message: message,
		ObservedGeneration: b.Generation})
	if err := c.Status().Patch(t.Context(), b, client.MergeFrom(before)); err != nil {
		t.Fatalf("the sidecar's status write through v1alpha2: %v", err)
	}
}

// expectNotServed checks that the API server serves no v1alpha1 Buckets.
func expectNotServed(t *testing.T, cfg *rest.Config, view dynamic.ResourceInterface, name string) {
	t.Helper()
	if _, err := view.Get(t.Context(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("v1alpha1 GET: %v, want NotFound", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dc.ServerResourcesForGroupVersion(bucketsV1alpha1.GroupVersion().String()); !apierrors.IsNotFound(err) {
		t.Errorf("discovery of %s: %v, want NotFound", bucketsV1alpha1.GroupVersion(), err)
	}
}

// waitForView waits until the API server serves v1alpha1 Buckets and enforces the view's policy:
// a dry-run create through v1alpha1 is refused by it.
func waitForView(t *testing.T, view dynamic.ResourceInterface) {
	t.Helper()
	probe := v1alpha1Object("bc-probe")
	testenv.Eventually(t, func() error {
		switch _, err := view.Create(t.Context(), probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); {
		case err == nil:
			return errors.New("the v1alpha1 view is not in force yet: a dry-run create through it was allowed")
		case !strings.Contains(err.Error(), kubectlcosi.V1alpha1BucketViewPolicy):
			return fmt.Errorf("the v1alpha1 view is not in force yet: a dry-run create through it: %w", err)
		}
		return nil
	})
}

// waitUntilNotServed waits until the API server no longer serves v1alpha1 Buckets.
func waitUntilNotServed(t *testing.T, view dynamic.ResourceInterface) {
	t.Helper()
	testenv.Eventually(t, func() error {
		switch _, err := view.List(t.Context(), metav1.ListOptions{}); {
		case err == nil:
			return errors.New("v1alpha1 Buckets are still served")
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("v1alpha1 LIST: %w, want NotFound", err)
		}
		return nil
	})
}

// v1alpha1Object is a Bucket as a v1alpha1 client would write it.
func v1alpha1Object(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": bucketsV1alpha1.GroupVersion().String(),
		"kind":       "Bucket",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"driverName": "v1alpha1.s3.example.com", "deletionPolicy": "Delete", "protocols": []any{"S3"},
			"bucketClaimRef": map[string]any{"namespace": "tenant", "name": name},
			"parameters":     map[string]any{"objectStorageSecretName": "elsewhere"},
		},
	}}
}

// expectRelabelled checks that a v1alpha1 read returned the stored v1alpha2 object as it is, but
// for its apiVersion.
func expectRelabelled(t *testing.T, what string, stored, got *unstructured.Unstructured) {
	t.Helper()
	if got.GetAPIVersion() != bucketsV1alpha1.GroupVersion().String() {
		t.Errorf("%s: apiVersion %s, want %s", what, got.GetAPIVersion(), bucketsV1alpha1.GroupVersion())
	}
	want := stored.DeepCopy()
	want.SetAPIVersion(got.GetAPIVersion())
	if d := diff(t, want.Object, got.Object); d != "" {
		t.Errorf("%s through v1alpha1 differs from the v1alpha2 object (- v1alpha2, + v1alpha1):\n%s", what, d)
	}
}

// decodeV1alpha1 decodes an object as a v1alpha1 driver's typed client does.
func decodeV1alpha1(t *testing.T, u *unstructured.Unstructured) *v1alpha1Bucket {
	t.Helper()
	data, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	b := &v1alpha1Bucket{}
	if err := json.Unmarshal(data, b); err != nil {
		t.Fatalf("a v1alpha1 client cannot decode the Bucket: %v\n%s", err, data)
	}
	return b
}

// expectWritesRefused tries every kind of write through v1alpha1, on bucket and on a new Bucket:
// each is refused by the view's policy with its message, and changes nothing.
func expectWritesRefused(t *testing.T, c client.Client, view dynamic.ResourceInterface, bucket *cosiapi.Bucket) {
	ctx := t.Context()
	current := func() *cosiapi.Bucket {
		t.Helper()
		b := &cosiapi.Bucket{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(bucket), b); err != nil {
			t.Fatalf("the Bucket after a refused write: %v", err)
		}
		return b
	}
	changed := func() *unstructured.Unstructured {
		t.Helper()
		u, err := view.Get(ctx, bucket.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = unstructured.SetNestedField(u.Object, "elsewhere", "spec", "parameters", "objectStorageSecretName")
		if err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedField(u.Object, "bc-other", "status", "bucketID"); err != nil {
			t.Fatal(err)
		}
		return u
	}
	apply := func(name string) []byte {
		t.Helper()
		data, err := json.Marshal(v1alpha1Object(name).Object)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	const manager = "v1alpha1-client"
	force := true
	for _, w := range []struct {
		name string
		// creates: the write would create a Bucket of this name.
		creates string
		write   func() error
	}{
		{"create", "bc-created", func() error {
			_, err := view.Create(ctx, v1alpha1Object("bc-created"), metav1.CreateOptions{})
			return err
		}},
		{"server-side apply of a new Bucket", "bc-applied", func() error {
			_, err := view.Patch(ctx, "bc-applied", types.ApplyPatchType, apply("bc-applied"),
				metav1.PatchOptions{FieldManager: manager, Force: &force})
			return err
		}},
		{"update", "", func() error {
			_, err := view.Update(ctx, changed(), metav1.UpdateOptions{})
			return err
		}},
		{"merge patch", "", func() error {
			_, err := view.Patch(ctx, bucket.Name, types.MergePatchType,
				[]byte(`{"spec":{"parameters":{"objectStorageSecretName":"elsewhere"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"JSON patch", "", func() error {
			_, err := view.Patch(ctx, bucket.Name, types.JSONPatchType,
				[]byte(`[{"op":"remove","path":"/spec/parameters"}]`), metav1.PatchOptions{})
			return err
		}},
		{"server-side apply", "", func() error {
			_, err := view.Patch(ctx, bucket.Name, types.ApplyPatchType, apply(bucket.Name),
				metav1.PatchOptions{FieldManager: manager, Force: &force})
			return err
		}},
		{"metadata patch (a finalizer)", "", func() error {
			_, err := view.Patch(ctx, bucket.Name, types.MergePatchType,
				[]byte(`{"metadata":{"finalizers":["example.com/hold"]}}`), metav1.PatchOptions{})
			return err
		}},
		{"status update", "", func() error {
			_, err := view.UpdateStatus(ctx, changed(), metav1.UpdateOptions{})
			return err
		}},
		{"status merge patch", "", func() error {
			_, err := view.Patch(ctx, bucket.Name, types.MergePatchType, []byte(`{"status":{"bucketID":"bc-other"}}`),
				metav1.PatchOptions{}, "status")
			return err
		}},
		{"status server-side apply", "", func() error {
			_, err := view.Patch(ctx, bucket.Name, types.ApplyPatchType,
				[]byte(`{"apiVersion":"`+bucketsV1alpha1.GroupVersion().String()+`","kind":"Bucket","metadata":{"name":"`+
					bucket.Name+`"},"status":{"bucketID":"bc-other"}}`),
				metav1.PatchOptions{FieldManager: manager, Force: &force}, "status")
			return err
		}},
		{"delete", "", func() error {
			return view.Delete(ctx, bucket.Name, metav1.DeleteOptions{})
		}},
		{"delete collection", "", func() error {
			return view.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		}},
	} {
		t.Run(w.name, func(t *testing.T) {
			before := current()
			err := w.write()
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "is a read-only view of the v1alpha2 Buckets") ||
				!strings.Contains(err.Error(), kubectlcosi.V1alpha1BucketViewPolicy) {
				t.Errorf("got %v, want it refused by %s", err, kubectlcosi.V1alpha1BucketViewPolicy)
			}
			if after := current(); after.ResourceVersion != before.ResourceVersion || after.DeletionTimestamp != nil {
				t.Errorf("the Bucket changed: resourceVersion %s → %s, deletionTimestamp %v", before.ResourceVersion,
					after.ResourceVersion, after.DeletionTimestamp)
			}
			if w.creates != "" {
				err := c.Get(ctx, client.ObjectKey{Name: w.creates}, &cosiapi.Bucket{})
				if !apierrors.IsNotFound(err) {
					t.Errorf("Bucket %s: %v, want NotFound", w.creates, err)
				}
			}
		})
	}
}

// expectV1alpha2Preferred checks that the group's preferred version is still v1alpha2, so that
// kubectl and every client that asks discovery get v1alpha2 Buckets, and that kubectl gets
// v1alpha1 only when asked for it by name.
func expectV1alpha2Preferred(t *testing.T, cfg *rest.Config, kc string) {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := dc.ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups.Groups {
		if g.Name != cosiapi.GroupName {
			continue
		}
		var versions []string
		for _, v := range g.Versions {
			versions = append(versions, v.Version)
		}
		if g.PreferredVersion.Version != cosiapi.SchemeGroupVersion.Version || !slices.Contains(versions, "v1alpha1") {
			t.Errorf("group %s: versions %v, preferred %s; want v1alpha1 served and v1alpha2 preferred", g.Name,
				versions, g.PreferredVersion.Version)
		}
	}
	cache := t.TempDir() // kubectl's discovery cache of this API server only
	for resource, want := range map[string]string{
		"buckets":                               cosiapi.SchemeGroupVersion.String(),
		"bucket":                                cosiapi.SchemeGroupVersion.String(),
		"buckets.objectstorage.k8s.io":          cosiapi.SchemeGroupVersion.String(),
		"buckets.v1alpha1.objectstorage.k8s.io": bucketsV1alpha1.GroupVersion().String(),
	} {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(filepath.Join(env.BinDir, "kubectl"), "--kubeconfig", kc, "--cache-dir", cache,
			"get", resource, "-o", "jsonpath={.items[*].apiVersion}")
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Errorf("kubectl get %s: %v\n%s", resource, err, stderr.String())
			continue
		}
		if got := strings.Fields(stdout.String()); len(got) == 0 || slices.ContainsFunc(got, func(v string) bool {
			return v != want
		}) {
			t.Errorf("kubectl get %s returns Buckets of %v, want %s", resource, got, want)
		}
	}
}

// expectReaderRole binds a driver's ServiceAccount to cosi-v1alpha1-bucket-reader, as
// docs/v1alpha1-drivers.md shows: it may read Buckets through v1alpha1, nothing else.
func expectReaderRole(t *testing.T, e *testenv.Env, name string) {
	t.Helper()
	ctx := t.Context()
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:storage:v1alpha1-driver",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:storage", "system:authenticated"},
	}
	dyn := dynamicClient(t, cfg)
	asDriver := dyn.Resource(bucketsV1alpha1)
	if _, err := asDriver.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the driver's GET before its binding: %v, want Forbidden", err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "cosi-v1alpha1-bucket-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cosi-v1alpha1-bucket-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "v1alpha1-driver", Namespace: "storage"}},
	}
	if err := e.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		b, err := asDriver.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("the driver's v1alpha1 GET: %w", err)
		}
		if got := decodeV1alpha1(t, b).Spec.Parameters; !maps.Equal(got, driverParameters) {
			t.Fatalf("the driver reads parameters %v, want %v", got, driverParameters)
		}
		return nil
	})
	if _, err := asDriver.List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the driver's v1alpha1 LIST: %v", err)
	}
	w, err := asDriver.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("the driver's v1alpha1 WATCH: %v", err)
	} else {
		w.Stop()
	}
	for what, err := range map[string]error{
		"a v1alpha2 Bucket update": func() error {
			_, err := dyn.Resource(cosiapi.SchemeGroupVersion.WithResource("buckets")).Patch(ctx, name,
				types.MergePatchType, []byte(`{"spec":{"deletionPolicy":"Retain"}}`), metav1.PatchOptions{})
			return err
		}(),
		"a Secret": func() error {
			_, err := dyn.Resource(corev1.SchemeGroupVersion.WithResource("secrets")).Namespace("storage").
				Get(ctx, "store-credentials", metav1.GetOptions{})
			return err
		}(),
		"the BucketClaims": func() error {
			_, err := dyn.Resource(cosiapi.SchemeGroupVersion.WithResource("bucketclaims")).List(ctx, metav1.ListOptions{})
			return err
		}(),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("the driver's role gives %s: %v, want Forbidden", what, err)
		}
	}
}

// expectDoctorSeesTheView checks kubectl cosi doctor: the served v1alpha1 is the view, with
// nothing to migrate; without the policy's binding, a failure.
func expectDoctorSeesTheView(t *testing.T, e *testenv.Env, kc string) {
	t.Helper()
	doctor := func() []kubectlcosi.Check {
		t.Helper()
		var out, errOut bytes.Buffer
		kubectlcosi.Main(t.Context(), kubectlcosi.Config{REST: e.Config, Namespace: namespace},
			[]string{"doctor", "-o", "json", "--probe-tokens=false"}, &out, &errOut)
		r := &kubectlcosi.DoctorReport{}
		if err := json.Unmarshal(out.Bytes(), r); err != nil {
			t.Fatalf("%v: %s%s", err, out.String(), errOut.String())
		}
		var checks []kubectlcosi.Check
		for _, c := range r.Checks {
			if c.Name == "v1alpha1/Bucket" {
				checks = append(checks, c)
			}
		}
		return checks
	}
	if got := doctor(); len(got) != 1 || got[0].Status != kubectlcosi.CheckOK ||
		!strings.Contains(got[0].Message, "read-only view") {
		t.Errorf("doctor with the view: %+v, want one ok check v1alpha1/Bucket naming the read-only view", got)
	}
	if err := e.Client.Delete(t.Context(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
		"metadata": map[string]any{"name": kubectlcosi.V1alpha1BucketViewPolicy},
	}}); err != nil {
		t.Fatal(err)
	}
	if got := doctor(); len(got) != 1 || got[0].Status != kubectlcosi.CheckFailed ||
		!strings.Contains(got[0].Message, "not bound") {
		t.Errorf("doctor with the view's policy unbound: %+v, want one failed check v1alpha1/Bucket", got)
	}
	// Bound again, as the component installs it.
	applyTo(t, kc, "config/default with "+viewComponent, kustomize(t, overlay(t, viewComponent)))
	waitForView(t, dynamicClient(t, e.Config).Resource(bucketsV1alpha1))
}

func dynamicClient(t *testing.T, cfg *rest.Config) *dynamic.DynamicClient {
	t.Helper()
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestV1alpha1BucketViewValues renders the cosi chart with v1alpha1BucketView off (the default)
// and on: off, the Bucket CRD has v1alpha2 only and nothing of the view is rendered; on, the CRD
// also serves v1alpha1, never stored, the ServiceAccounts named are bound to the reader role, and
// without crds.install the chart refuses it. TestRenderingsAgree checks that the objects are those
// of the kustomize component, TestV1alpha1BucketView what they do, TestHelmLifecycle an upgrade
// that turns the view on and off.
func TestV1alpha1BucketViewValues(t *testing.T) {
	versions := func(t *testing.T, objs map[string]*unstructured.Unstructured) []string {
		t.Helper()
		crd, ok := objs["CustomResourceDefinition/buckets.objectstorage.k8s.io"]
		if !ok {
			t.Fatal("no Bucket CRD rendered")
		}
		vs, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		var got []string
		for _, v := range vs {
			v := v.(map[string]any)
			got = append(got, fmt.Sprintf("%s served=%v storage=%v", v["name"], v["served"], v["storage"]))
		}
		return got
	}
	view := []string{"ClusterRole/cosi-v1alpha1-bucket-reader", "ClusterRoleBinding/cosi-v1alpha1-bucket-reader",
		"ValidatingAdmissionPolicy/" + kubectlcosi.V1alpha1BucketViewPolicy,
		"ValidatingAdmissionPolicyBinding/" + kubectlcosi.V1alpha1BucketViewPolicy}
	rendered := func(objs map[string]*unstructured.Unstructured) []string {
		var got []string
		for _, key := range view {
			if _, ok := objs[key]; ok {
				got = append(got, key)
			}
		}
		return got
	}

	off := index(t, helmTemplate(t, "charts/cosi", "cosi"))
	if got, want := versions(t, off), []string{"v1alpha2 served=true storage=true"}; !slices.Equal(got, want) {
		t.Errorf("default values: Bucket CRD versions %v, want %v", got, want)
	}
	if got := rendered(off); len(got) > 0 {
		t.Errorf("default values render %v", got)
	}

	on := index(t, helmTemplate(t, "charts/cosi", "cosi", "--set", "v1alpha1BucketView.enabled=true"))
	want := []string{"v1alpha2 served=true storage=true", "v1alpha1 served=true storage=false"}
	if got := versions(t, on); !slices.Equal(got, want) {
		t.Errorf("v1alpha1BucketView.enabled: Bucket CRD versions %v, want %v", got, want)
	}
	if got, want := rendered(on), slices.DeleteFunc(slices.Clone(view), func(key string) bool {
		return key == "ClusterRoleBinding/cosi-v1alpha1-bucket-reader" // no ServiceAccounts named
	}); !slices.Equal(got, want) {
		t.Errorf("v1alpha1BucketView.enabled renders %v, want %v", got, want)
	}

	bound := index(t, helmTemplate(t, "charts/cosi", "cosi", "--set", "v1alpha1BucketView.enabled=true",
		"--set", "v1alpha1BucketView.serviceAccounts[0].name=driver-a",
		"--set", "v1alpha1BucketView.serviceAccounts[1].name=driver-b",
		"--set", "v1alpha1BucketView.serviceAccounts[1].namespace=storage"))
	b, ok := bound["ClusterRoleBinding/cosi-v1alpha1-bucket-reader"]
	if !ok {
		t.Fatal("v1alpha1BucketView.serviceAccounts renders no ClusterRoleBinding")
	}
	binding := &rbacv1.ClusterRoleBinding{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(b.Object, binding); err != nil {
		t.Fatal(err)
	}
	wantSubjects := []rbacv1.Subject{
		{Kind: rbacv1.ServiceAccountKind, Name: "driver-a", Namespace: namespace},
		{Kind: rbacv1.ServiceAccountKind, Name: "driver-b", Namespace: "storage"},
	}
	if !slices.Equal(binding.Subjects, wantSubjects) || binding.RoleRef.Name != "cosi-v1alpha1-bucket-reader" {
		t.Errorf("the ClusterRoleBinding binds %v to %s, want %v to cosi-v1alpha1-bucket-reader", binding.Subjects,
			binding.RoleRef.Name, wantSubjects)
	}

	_, err := helm("template", "cosi", filepath.Join(env.RepoRoot, "charts", "cosi"),
		"--set", "v1alpha1BucketView.enabled=true,crds.install=false")
	if err == nil || !strings.Contains(err.Error(), "needs crds.install") {
		t.Errorf("v1alpha1BucketView.enabled without crds.install: got %v, want it refused", err)
	}
}
