package sidecar

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// TestSecretChecksAccessVanished: an access that vanished without the sidecar seeing its deletion
// (a tenant removed its finalizers and deleted it before the sidecar's next reconcile; the
// GrantReconciler revokes its grant) leaves no check behind. Otherwise each such access, which a
// tenant can create and delete without end, stays in the checks' memory and raises their rate.
func TestSecretChecksAccessVanished(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := cosiapi.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ba := &cosiapi.BucketAccess{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "ba", UID: "uid-ba"},
		Status:     cosiapi.BucketAccessStatus{DriverName: "d"},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(ba).Build()
	r := &BucketAccessReconciler{Client: c, Info: &cosiproto.DriverGetInfoResponse{Name: "d"}}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ba)}
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	r.checks.done(req.NamespacedName, ba.UID) // granted: its Secrets are checked from now on (grant)
	if err := c.Delete(t.Context(), ba); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if len(r.checks.objects) != 0 {
		t.Errorf("the vanished access is still scheduled for checks: %d tracked", len(r.checks.objects))
	}
}

// TestSecretChecksNameReused: an access deleted and created again under the same name, whose
// deletion the sidecar did not see, leaves no check of the old UID behind.
func TestSecretChecksNameReused(t *testing.T) {
	var c secretChecks
	key := types.NamespacedName{Namespace: "tenant", Name: "ba"}
	c.doneAt(key, "old", epoch)
	c.dueAt(key, "old", time.Minute, epoch.Add(time.Minute)) // due: it takes a place or runs
	c.doneAt(key, "new", epoch)
	if o := c.objects[key]; len(c.objects) != 1 || o.uid != "new" || len(c.slots) != 0 {
		t.Errorf("after the name was reused: %d checks tracked (%+v under the name), %d places, want the new one only",
			len(c.objects), o, len(c.slots))
	}
	c.forget(key, "old") // the old one's deletion, seen late: not the new one's
	if len(c.objects) != 1 {
		t.Errorf("the old object's deletion forgot the new one under its name")
	}
	c.forget(key, "new")
	if len(c.objects) != 0 || len(c.slots) != 0 {
		t.Errorf("after forget: %d checks, %d places tracked", len(c.objects), len(c.slots))
	}
}

// TestSecretChecksDeletedBacklog: one tenant's accesses that all fell due together (created at
// once, they come due together an interval later) take their places, then are deleted. The
// places they held do not delay the other tenants' checks: a check that falls due afterwards
// still runs within interval/checkRateFactor, although the rate fell with the accesses
// (600 + 10 accesses checked every minute: 20 per second; 10 left: 10 per second, the least).
func TestSecretChecksDeletedBacklog(t *testing.T) {
	const interval = time.Minute
	var c secretChecks
	mine, others := dueTogether(&c, interval, 2*time.Second)
	for _, uid := range mine {
		c.forget(keyOf(uid), uid)
	}
	for _, uid := range others {
		if wait := c.dueAt(keyOf(uid), uid, interval, epoch.Add(2*time.Second)); wait > interval/checkRateFactor {
			t.Errorf("%s, due now, runs in %v, want at most %v", uid, wait, interval/checkRateFactor)
		}
	}
}

// dueTogether makes one tenant's 600 accesses fall due together at epoch, where each takes its
// place, and 10 other accesses fall due othersLater.
func dueTogether(c *secretChecks, interval, othersLater time.Duration) (mine, others []types.UID) {
	all := uids(610)
	mine, others = all[:600], all[600:]
	for _, uid := range mine {
		c.doneAt(keyOf(uid), uid, epoch.Add(-interval))
	}
	for _, uid := range others {
		c.doneAt(keyOf(uid), uid, epoch.Add(othersLater-interval))
	}
	for _, uid := range mine {
		c.dueAt(keyOf(uid), uid, interval, epoch)
	}
	return mine, others
}
