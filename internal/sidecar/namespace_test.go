package sidecar_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

// TestAccessDeletedWhileItsNamespaceIsGone: a namespace can be finished while COSI objects are left
// in it (kube-controller-manager's namespace controller, right after an API server restart, takes
// the not-yet-served COSI resources for empty: docs/reliability.md, "Found by the suite"). The API
// server then refuses every write but deletion to what is left, with NotFound for the namespace.
// The sidecar must not take that for the access or its Secret being gone: once an admin recreates
// the namespace, the access's Secret is deleted, its key revoked and its revocation recorded,
// without anything else changing the access.
func TestAccessDeletedWhileItsNamespaceIsGone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// secretLeft: the namespace is finished before the access is deleted, its Secret still in
		// it (a state the namespace controller does not leave, but an admin can); otherwise it is
		// finished while the sidecar revokes, its Secret deleted already (the race).
		secretLeft bool
	}{
		{name: "during the revocation"},
		{name: "with its Secret", secretLeft: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			h := newHarness(t, memory.Config{})
			ns := uniqueName("gone")
			if err := env.CreateNamespace(ctx, ns); err != nil {
				t.Fatal(err)
			}
			claim := uniqueName("claim")
			b := objects.Bucket("bc-"+claim, h.name, cosiapi.DeletionPolicyDelete,
				objects.BucketProtocols(cosiapi.ProtocolS3), objects.ClaimedBy(ns, claim, types.UID("uid-"+claim)))
			h.create(b)
			b = provisioned(t, b, bucketConditions)
			ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b), accessConditions)
			s := secret(t, ba, 0)
			creds := credentialsFrom(cosiapi.ProtocolS3, s)

			if tc.secretLeft {
				finishNamespace(t, ns)
				if err := env.Client.Delete(ctx, ba); err != nil {
					t.Fatal(err)
				}
			} else {
				// The revocation held in the driver, once done, while the namespace goes.
				h.faults.Pause("DriverRevokeBucketAccess", true)
				if err := env.Client.Delete(ctx, ba); err != nil {
					t.Fatal(err)
				}
				if _, ok := h.faults.WaitPaused(ctx); !ok {
					t.Fatal("no revocation")
				}
				env.Gone(t, s)
				finishNamespace(t, ns)
				h.faults.Release()
			}
			// Whatever the sidecar does now, its writes to the access are refused.
			testenv.Never(t, 3*time.Second, func() error {
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ba), ba); err != nil {
					return err
				}
				if ba.Annotations[cosiapi.AnnotationSidecarCleanupFinished] != "" {
					return fmt.Errorf("the access was written in a namespace that is gone: %v", ba.Annotations)
				}
				return nil
			})

			// The admin's remedy: the namespace again. Nothing touches the access.
			if err := env.CreateNamespace(ctx, ns); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, func() error {
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ba), ba); err != nil {
					return err
				}
				c := meta.FindStatusCondition(ba.Status.Conditions, cosiapi.ConditionProvisioned)
				if ba.Annotations[cosiapi.AnnotationSidecarCleanupFinished] == "" || c == nil ||
					c.Reason != cosiapi.ReasonRevoked {
					return fmt.Errorf("the access's cleanup is not recorded: annotations %v, Provisioned %+v",
						ba.Annotations, c)
				}
				return nil
			})
			env.Gone(t, s)
			if h.driver.Backend().Allowed(creds, b.Status.BucketID, memory.ObjectData, false) {
				t.Errorf("the access's key still reads its bucket (driver calls %v)", h.calls)
			}
			controllerutil.RemoveFinalizer(ba, cosiapi.FinalizerProtection)
			if err := env.Client.Update(ctx, ba); err != nil {
				t.Fatal(err)
			}
			env.Gone(t, ba)
			deleteAsController(t, b)
			env.Gone(t, b)
		})
	}
}

// finishNamespace deletes the namespace and removes its "kubernetes" finalizer (the finalize
// subresource), whatever is still in it, and waits until it is gone.
func finishNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Delete(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ns), ns); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		ns.Spec.Finalizers = nil
		if err := env.Client.SubResource("finalize").Update(t.Context(), ns); err != nil {
			return err
		}
		return fmt.Errorf("namespace %s is still there", name)
	})
}
