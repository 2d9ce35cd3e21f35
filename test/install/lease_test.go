package install

import (
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestSidecarWritesOnlyItsOwnLease installs config/driver/s3 (after config/default) and acts with
// the S3 driver's ServiceAccount, as a compromised sidecar would: it takes and renews its own
// leader election Lease, but cannot update, patch or delete the controller's Lease or another
// driver's sidecar Lease in the namespace (which would stop the controller, or that driver).
func TestSidecarWritesOnlyItsOwnLease(t *testing.T) {
	for _, k := range []string{"config/default", "config/driver/s3"} {
		apply(t, k, kustomize(t, k))
	}
	ctx := t.Context()
	others := []string{"cosi-controller", "other.example.com-cosi-sidecar"}
	for _, name := range others {
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("its-leader")},
		}
		if err := env.Client.Create(ctx, lease); client.IgnoreAlreadyExists(err) != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + namespace + ":s3-cosi-driver"}
	sidecar, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}

	own := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace,
		Name: "s3.cosi.kube-cosi.io-cosi-sidecar"}}
	if err := sidecar.Create(ctx, own); client.IgnoreAlreadyExists(err) != nil {
		t.Fatalf("the sidecar cannot create its own Lease: %v", err)
	}
	if err := sidecar.Get(ctx, client.ObjectKeyFromObject(own), own); err != nil {
		t.Fatalf("the sidecar cannot read its own Lease: %v", err)
	}
	own.Spec.HolderIdentity = ptr.To("s3-cosi-driver-0")
	if err := sidecar.Update(ctx, own); err != nil {
		t.Fatalf("the sidecar cannot renew its own Lease: %v", err)
	}

	for _, name := range others {
		lease := &coordinationv1.Lease{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, lease); err != nil {
			t.Fatal(err)
		}
		lease.Spec.HolderIdentity = ptr.To("s3-cosi-driver-0")
		if err := sidecar.Update(ctx, lease); !apierrors.IsForbidden(err) {
			t.Errorf("the sidecar updates Lease %s: %v, want Forbidden", name, err)
		}
		if err := sidecar.Patch(ctx, lease, client.RawPatch("application/merge-patch+json",
			[]byte(`{"spec":{"holderIdentity":"s3-cosi-driver-0"}}`))); !apierrors.IsForbidden(err) {
			t.Errorf("the sidecar patches Lease %s: %v, want Forbidden", name, err)
		}
		if err := sidecar.Delete(ctx, lease); !apierrors.IsForbidden(err) {
			t.Errorf("the sidecar deletes Lease %s: %v, want Forbidden", name, err)
		}
	}
}
