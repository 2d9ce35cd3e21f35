package sidecar_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

// TestOrphanWithAnOffsetTimeInItsRecordIsRevoked: a grant record whose rotation period started
// at a time written in another zone ("9999-12-31T23:00:00-05:00", as an admin of COSI's
// namespace may write it, which every read of the record accepts) is still the sidecar's record:
// once its access vanishes without the cleanup (a tenant removed the finalizer and deleted it while
// no sidecar ran), the sidecar revokes the grant and removes the record, as it did when its cache
// held whole records. The cache's compact copy writes that time in UTC, year 10000, which it
// cannot read back: the cache shows no record, and the GrantReconciler, which starts only from a
// cached record, never revokes it.
func TestOrphanWithAnOffsetTimeInItsRecordIsRevoked(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	h := newHarness(t, memory.Config{})
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b), accessConditions)
	h.stop()

	key := types.NamespacedName{Namespace: sidecarNamespace, Name: "cosi-grant-" + string(ba.UID)}
	testenv.Eventually(t, func() error {
		record := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, key, record); err != nil {
			return err
		}
		var g map[string]any
		if err := json.Unmarshal([]byte(record.Data["grant.json"]), &g); err != nil {
			return err
		}
		g["periodFrom"] = "9999-12-31T23:00:00-05:00"
		value, err := json.Marshal(g)
		if err != nil {
			return err
		}
		record.Data["grant.json"] = string(value)
		return env.Client.Update(ctx, record)
	})
	// The tenant's deletion, without the sidecar's cleanup.
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ba), ba); err != nil {
			return err
		}
		controllerutil.RemoveFinalizer(ba, cosiapi.FinalizerProtection)
		if err := env.Client.Update(ctx, ba); err != nil {
			return err
		}
		return env.Client.Delete(ctx, ba)
	})
	env.Gone(t, ba)
	if len(h.driver.Backend().Accounts()) == 0 {
		t.Fatal("no account to revoke")
	}

	h.startSidecar()
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		err = env.Client.Get(ctx, key, &corev1.ConfigMap{})
		switch {
		case err == nil:
			err = fmt.Errorf("the record of the vanished access is still there")
		case !apierrors.IsNotFound(err):
		case len(h.driver.Backend().Accounts()) != 0:
			err = fmt.Errorf("the record is gone, the account not revoked: %v", h.driver.Backend().Accounts())
		default:
			return
		}
	}
	t.Fatalf("the grant of a vanished access is not revoked: %v", err)
}
