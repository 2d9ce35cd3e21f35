package sidecar_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

// TestFirstGrantOnAStaleCopy: a first grant takes the cached copy of the access as current, and
// phase 1's status write, locked to that copy's version, is what proves it (liveAccess). An access
// that its tenant deletes (finalizers removed), or deletes and creates again under its name, while
// phase 1 is in the driver gets nothing: no grant, no account, no grant record left; the new one
// under the name is granted on its own.
func TestFirstGrantOnAStaleCopy(t *testing.T) {
	t.Parallel()
	for _, replace := range []bool{false, true} {
		t.Run(fmt.Sprintf("replaced=%t", replace), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, memory.Config{})
			b := h.provisionedBucket(cosiapi.ProtocolS3)
			h.faults.Pause("DriverGenerateBucketAccessId", false)
			old := h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			if _, ok := h.faults.WaitPaused(ctx); !ok {
				t.Fatal("phase 1 never reached the driver")
			}
			vanish(t, old)
			var fresh *cosiapi.BucketAccess
			if replace {
				fresh = &cosiapi.BucketAccess{
					ObjectMeta: metav1.ObjectMeta{Name: old.Name, Namespace: old.Namespace},
					Spec:       old.Spec,
				}
				h.create(fresh)
				fresh.Status = cosiapi.BucketAccessStatus{
					DriverName: old.Status.DriverName, AuthenticationType: old.Status.AuthenticationType,
					Parameters: old.Status.Parameters, AccessedBuckets: old.Status.AccessedBuckets,
				}
				if err := env.Client.Status().Update(t.Context(), fresh); err != nil {
					t.Fatal(err)
				}
			}
			h.faults.Release()
			if fresh != nil {
				testenv.Eventually(t, func() error {
					if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(fresh), fresh); err != nil {
						return err
					}
					if !conditions.IsTrue(fresh, cosiapi.ConditionProvisioned) {
						return fmt.Errorf("the new access under the name is not provisioned: %v", fresh.Status.Conditions)
					}
					return nil
				})
			}
			testenv.Never(t, 5*time.Second, func() error {
				if i := slices.IndexFunc(h.driver.Backend().Accounts(), func(a string) bool {
					return strings.Contains(a, string(old.UID))
				}); i >= 0 {
					return fmt.Errorf("the deleted access was granted: account %s", h.driver.Backend().Accounts()[i])
				}
				return recordGone(t, old.UID)
			})
		})
	}
}

// vanish deletes ba as a tenant can: its finalizers removed first, so that it is gone at once.
func vanish(t *testing.T, ba *cosiapi.BucketAccess) {
	t.Helper()
	if err := env.Client.Delete(t.Context(), ba); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		live := &cosiapi.BucketAccess{}
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), live)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		live.Finalizers = nil
		if err := env.Client.Update(t.Context(), live); err != nil {
			return err
		}
		return fmt.Errorf("still there")
	})
}

// recordGone fails while a grant record of the access with uid exists.
func recordGone(t *testing.T, uid types.UID) error {
	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: sidecarNamespace, Name: "cosi-grant-" + string(uid)}
	err := env.Client.Get(t.Context(), key, cm)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	return fmt.Errorf("grant record %s of the deleted access is left", cm.Name)
}
