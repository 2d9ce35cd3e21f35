package sidecar

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Accounts that a v1alpha1 driver names itself. v1alpha1 lets a grant answer with an account_id
// other than the name it was given (a random IAM user name, say), and every later call must
// address that account by it. The v1alpha1 adapter passes each such ID, as soon as the driver
// answered and before it returns the credentials, to the recorder the sidecar gives it
// (v1alpha1.WithDriverAccounts): the ID goes into the access's grant record (DriverAccountIDs),
// where tenants cannot write, before any Secret holds the account's credentials; an ID that cannot
// be recorded has its account revoked at once by the adapter. Revocation then addresses every
// recorded ID (revokeRequests), and BucketAccess.status.accountID keeps the ID COSI addresses the
// access by (KEP-1979: phase 1's, the name), while the Provisioned condition names the driver's.
//
// What cannot be recorded is an account that a grant made and whose answer nobody received: the
// sidecar stopped between the driver's answer and the record write, or the call's deadline passed
// while the driver was still at work. A driver that names accounts anew on every call gives the
// next grant another one, and the first is known only to the driver. The sidecar cannot revoke
// it; it says so, as a Warning event (EventDriverAccountMayHaveLeaked) on the access, when a grant
// answers with a new driver-chosen ID after an earlier grant of the access whose answer may have
// been lost, so that an admin can look for it in the store.

// grantOutcomes are, by access UID, the grants this process asked the driver for whose answers
// may have been lost (the call failed with an error that leaves it possibly in flight).
type grantOutcomes struct {
	mu    sync.Mutex
	asked map[types.UID]bool // value: the last answer may have been lost
	// unrecorded are the account IDs a grant of the access answered with that could not be
	// recorded (the API server was away, or refused the write) and whose revocation by the
	// adapter, at once, failed too: a driver that names accounts anew never names the account
	// again, so the ID is kept, recorded before the access's next grant (recordUnrecorded), and
	// revoked with the access (withUnrecorded). A restart loses them, as it loses an answer.
	unrecorded map[types.UID][]string
}

// ended records the end of a grant call of the access with err. An answer that may have been
// lost stays so until a grant succeeds: a later call that fails (a transient INTERNAL) says
// nothing about the earlier one's account.
func (o *grantOutcomes) ended(uid types.UID, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.asked == nil {
		o.asked = map[types.UID]bool{}
	}
	o.asked[uid] = err != nil && (o.asked[uid] || driver.Retryable(err))
}

// mayBeLost reports whether an earlier grant of the access may have been answered without the
// answer reaching this sidecar: one this process made whose call ended possibly in flight, or,
// when this process made none and no credentials of the access may be held (held: a grant for a
// lost Secret, which every earlier grant's account may explain), one an earlier process made
// (existed: the record was there).
func (o *grantOutcomes) mayBeLost(uid types.UID, existed, held bool) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	lost, asked := o.asked[uid]
	return lost || !asked && existed && !held
}

// notRecorded keeps id, an account ID of the access that the driver chose and that could not be
// recorded.
func (o *grantOutcomes) notRecorded(uid types.UID, id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.unrecorded == nil {
		o.unrecorded = map[types.UID][]string{}
	}
	if !slices.Contains(o.unrecorded[uid], id) {
		o.unrecorded[uid] = append(o.unrecorded[uid], id)
	}
}

// recorded forgets ids, recorded (or revoked) since.
func (o *grantOutcomes) recorded(uid types.UID, ids ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	left := slices.DeleteFunc(o.unrecorded[uid], func(id string) bool { return slices.Contains(ids, id) })
	if len(left) == 0 {
		delete(o.unrecorded, uid)
		return
	}
	o.unrecorded[uid] = left
}

// unrecordedOf returns the access's account IDs that could not be recorded.
func (o *grantOutcomes) unrecordedOf(uid types.UID) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.unrecorded[uid])
}

// lost reports whether a grant of the access that this process made may have been answered
// without the answer reaching it, with no grant succeeding since.
func (o *grantOutcomes) lost(uid types.UID) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.asked[uid]
}

// lostAnswerReport is the message of the DriverAccountMayHaveLeaked event of a grant revoked after
// one of its grants' answers may have been lost, with no grant after it that could say so.
func lostAnswerReport(g grantRecord, cm *corev1.ConfigMap) string {
	since := ""
	if cm != nil {
		since = " made since " + cm.CreationTimestamp.UTC().Format("2006-01-02T15:04:05Z")
	}
	return fmt.Sprintf("a grant of this access may have been answered without the answer reaching the sidecar "+
		"(the call timed out, or failed on its way), and a v1alpha1 driver that names its accounts itself may have "+
		"made an account for it that only the driver knows: COSI revoked the accounts it knows (%v). Look in the "+
		"store for another account of bucket(s) %v%s and remove it (docs/v1alpha1-drivers.md)",
		revokedAccounts(g), g.BucketIDs, since)
}

// revokedAccounts are the account IDs that the revocation of g addresses.
func revokedAccounts(g grantRecord) []string {
	var ids []string
	for _, req := range g.revokeRequests() {
		ids = append(ids, req.GetAccountId())
	}
	return ids
}

func (o *grantOutcomes) forget(uid types.UID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.asked, uid)
}

// withDriverAccounts is the context of a grant of the access whose record is written (as put
// returned it; existed: it was there before the grant): the adapter of a v1alpha1 driver records
// the account IDs the driver chooses itself through it. held is whether the access's credentials
// may be held (preparedGrant.held).
func (r *BucketAccessReconciler) withDriverAccounts(
	ctx context.Context, ba *cosiapi.BucketAccess, written *corev1.ConfigMap, existed, held bool,
) context.Context {
	g, err := parseGrantRecord(written)
	if err != nil {
		return ctx // no record to add to: the adapter refuses an ID other than the name
	}
	// After a restart, an earlier process's grant may have been answered without the answer being
	// recorded, unless the access's status shows that process recorded a final answer (a refused
	// one: the adapter recorded and revoked its account), which it does only after the call.
	answered := conditions.Has(ba, cosiapi.ConditionProvisioned, metav1.ConditionFalse, cosiapi.ReasonProvisioningFailed)
	mayBeLost := r.Grants.outcomes.mayBeLost(ba.UID, existed && !answered, held)
	report := func(what string) {
		r.Recorder.Eventf(ba, nil, corev1.EventTypeWarning, cosiapi.EventDriverAccountMayHaveLeaked,
			"DriverGrantBucketAccess", "%s", what)
	}
	return v1alpha1.WithDriverAccounts(ctx, v1alpha1.DriverAccounts{
		Forget: func(ctx context.Context, id string) error {
			r.Grants.outcomes.recorded(ba.UID, id)
			return r.Grants.store.forgetDriverAccount(ctx, written, id)
		},
		Lost: func(_ context.Context, what string) {
			report(fmt.Sprintf("%s: COSI cannot revoke it. Look in the store for an account of bucket(s) %v made "+
				"since %s and remove it (docs/v1alpha1-drivers.md)", what, g.BucketIDs,
				written.CreationTimestamp.UTC().Format("2006-01-02T15:04:05Z")))
		},
		Known: slices.Clone(g.DriverAccountIDs),
		Record: func(ctx context.Context, id string) error {
			if err := r.Grants.store.addDriverAccount(ctx, written, id); err != nil {
				r.Grants.outcomes.notRecorded(ba.UID, id)
				return err
			}
			if mayBeLost {
				report(fmt.Sprintf(
					"the driver named this grant's account %q itself; an earlier grant of this access may have been "+
						"answered without the answer reaching the sidecar (it stopped, or the call timed out), and an "+
						"account that grant made is known only to the driver: COSI cannot revoke it. Look in the store "+
						"for an account of bucket(s) %v made since %s other than %v (docs/v1alpha1-drivers.md)",
					id, g.BucketIDs, written.CreationTimestamp.UTC().Format("2006-01-02T15:04:05Z"),
					append(slices.Clone(g.DriverAccountIDs), id)))
			}
			return nil
		},
	})
}

// recordUnrecorded records in the access's record written (as put returned it, before the grant)
// the account IDs the driver chose for its earlier grants that could not be recorded then
// (grantOutcomes.unrecorded): before the driver is asked again, so that they are revoked with the
// access, and, when nobody holds their credentials, by the adapter once the grant succeeds.
func (r *BucketAccessReconciler) recordUnrecorded(ctx context.Context, uid types.UID, written *corev1.ConfigMap) error {
	for _, id := range r.Grants.outcomes.unrecordedOf(uid) {
		if err := r.Grants.store.addDriverAccount(ctx, written, id); err != nil {
			return err
		}
		r.Grants.outcomes.recorded(uid, id)
	}
	return nil
}

// withUnrecorded is the record g with the account IDs of its access that could not be recorded
// (grantOutcomes.unrecorded), for its revocation; forgetUnrecorded forgets them once it succeeded.
// A record that names no account of the driver's is revoked by its account ID too, as it would be
// without them.
func (b *grantBook) withUnrecorded(g grantRecord) grantRecord {
	ids := b.outcomes.unrecordedOf(g.UID)
	if len(ids) == 0 {
		return g
	}
	known := g.DriverAccountIDs
	if len(known) == 0 {
		known = []string{g.AccountID}
	}
	g.DriverAccountIDs = append(slices.Clone(known), ids...)
	return g
}

func (b *grantBook) forgetUnrecorded(g grantRecord) {
	b.outcomes.recorded(g.UID, g.DriverAccountIDs...)
}

// addDriverAccount records the account ID id, which the driver chose, in the record written (as
// put returned it), locked to its version; a record that changed meanwhile is read again,
// uncached. written is updated in place.
func (s grantStore) addDriverAccount(ctx context.Context, written *corev1.ConfigMap, id string) error {
	return s.editDriverAccounts(ctx, written, func(ids []string) []string {
		if slices.Contains(ids, id) {
			return ids
		}
		return append(ids, id)
	})
}

// forgetDriverAccount removes the account ID id, revoked, from the record written, as
// addDriverAccount adds one.
func (s grantStore) forgetDriverAccount(ctx context.Context, written *corev1.ConfigMap, id string) error {
	return s.editDriverAccounts(ctx, written, func(ids []string) []string {
		return slices.DeleteFunc(ids, func(k string) bool { return k == id })
	})
}

// editDriverAccounts writes edit's DriverAccountIDs into the record written, locked to its
// version; a record that changed meanwhile is read again, uncached, and edited anew. written is
// updated in place.
func (s grantStore) editDriverAccounts(
	ctx context.Context, written *corev1.ConfigMap, edit func([]string) []string,
) error {
	first := true
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm := written
		if !first {
			fresh := &corev1.ConfigMap{}
			key := types.NamespacedName{Namespace: written.Namespace, Name: written.Name}
			if err := s.reader.Get(ctx, key, fresh); err != nil {
				return err
			}
			if fresh.UID != written.UID {
				return apierrors.NewConflict(corev1.Resource("configmaps"), written.Name,
					fmt.Errorf("grant record %s/%s was replaced", written.Namespace, written.Name))
			}
			cm = fresh
		}
		first = false
		g, err := parseGrantRecord(cm)
		if err != nil {
			return err
		}
		ids := edit(slices.Clone(g.DriverAccountIDs))
		if slices.Equal(ids, g.DriverAccountIDs) {
			return nil
		}
		g.DriverAccountIDs = ids
		if len(ids) == 0 {
			g.DriverAccountIDs = nil
		}
		if err := s.update(ctx, cm, g); err != nil {
			return err
		}
		if cm != written {
			cm.DeepCopyInto(written)
		}
		return nil
	})
}

// revokeRequests are the driver requests that revoke the recorded grant: one for the account
// COSI addresses the access by, or, when a v1alpha1 driver named its accounts itself, one for each
// account it named (its accounts are not named after the access, so there is nothing to revoke by
// the name).
func (g grantRecord) revokeRequests() []*cosiproto.DriverRevokeBucketAccessRequest {
	if len(g.DriverAccountIDs) == 0 {
		return []*cosiproto.DriverRevokeBucketAccessRequest{g.revokeRequest()}
	}
	out := make([]*cosiproto.DriverRevokeBucketAccessRequest, 0, len(g.DriverAccountIDs))
	for _, id := range g.DriverAccountIDs {
		req := g.revokeRequest()
		req.AccountId = id
		out = append(out, req)
	}
	return out
}

// revokeGrant revokes every account of the recorded grant in drv. With several accounts (a
// v1alpha1 driver that names them itself), each is tried, and each revoked one is removed from
// the record cm (when given), so that a retry does not revoke it again: a driver may answer the
// revocation of an account that is gone with an error. The first failure is returned.
func revokeGrant(
	ctx context.Context, drv *driverclient.Client, store grantStore, g grantRecord, cm *corev1.ConfigMap,
) error {
	reqs := g.revokeRequests()
	var failed error
	for _, req := range reqs {
		if _, err := drv.DriverRevokeBucketAccess(ctx, req); err != nil {
			if failed == nil {
				failed = err
			}
			continue
		}
		if len(g.DriverAccountIDs) > 0 && cm != nil {
			if err := store.forgetDriverAccount(ctx, cm, req.GetAccountId()); err != nil && failed == nil {
				failed = err
			}
		}
	}
	return failed
}

// grantedMessage is the Provisioned condition's message of a granted access whose record is g.
func grantedMessage(g *grantRecord) string {
	const msg = "access granted; Secrets written"
	if g == nil || len(g.DriverAccountIDs) == 0 {
		return msg
	}
	return fmt.Sprintf("%s; the driver's account: %q", msg, g.DriverAccountIDs[len(g.DriverAccountIDs)-1])
}
