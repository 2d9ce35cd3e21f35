package sidecar

import (
	"context"
	"errors"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/kube/lookup"
	"github.com/kube-cosi/cosi/internal/kube/patch"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
)

// delete removes the Secrets, revokes the access, and tells the controller (KEP-1979 "Deleting a
// BucketAccess", step 3). The Secrets go first, before the credentials in them stop working.
//
// The annotation alone does not end it: a tenant can set it on their own access before deleting
// it. The sidecar records the revocation in status first (Provisioned False, Revoked), which a
// tenant cannot write, and the controller waits for both.
func (r *BucketAccessReconciler) delete(ctx context.Context, ba *cosiapi.BucketAccess) error {
	if revoked(ba) {
		if ba.Annotations[cosiapi.AnnotationSidecarCleanupFinished] != "" {
			return nil
		}
		return lookup.IgnoreGone(patch.SetAnnotation(ctx, r.Client, ba, cosiapi.AnnotationSidecarCleanupFinished))
	}
	if err := r.deleteSecrets(ctx, ba); err != nil {
		return err
	}
	r.Grants.answers.forget(ba.UID)
	lost := r.Grants.outcomes.lost(ba.UID) && r.Driver.Protocol() == driverclient.ProtocolV1alpha1
	r.Grants.outcomes.forget(ba.UID)
	// Revoked from the sidecar's own record of the grant, not from status, which someone who can
	// write it could point at another access's account, nor from the Buckets, which an admin can
	// delete or replace. The record is written before the grant.
	rec, cm, err := r.Grants.store.get(ctx, ba.UID)
	if err != nil {
		return err
	}
	if rec == nil {
		if rec, err = r.unrecordedGrant(ctx, ba); err != nil {
			return err
		}
	}
	if rec != nil && rec.AccountID != "" && len(rec.BucketIDs) > 0 {
		g := r.Grants.withUnrecorded(*rec)
		if err := revokeGrant(ctx, r.Driver, r.Grants.store, g, cm); err != nil {
			return r.record.failed(ctx, ba, rpcError{"DriverRevokeBucketAccess", err}, cosiapi.EventFailedRevokeAccess)
		}
		r.Grants.forgetUnrecorded(g)
		// A grant whose answer may have been lost, with no grant after it to say so
		// (access_driveraccounts.go), is reported now.
		if lost {
			r.Recorder.Eventf(ba, nil, corev1.EventTypeWarning, cosiapi.EventDriverAccountMayHaveLeaked,
				"DriverRevokeBucketAccess", "%s", lostAnswerReport(g, cm))
		}
	}
	if cm != nil {
		if err := r.Grants.store.remove(ctx, cm); err != nil {
			return err
		}
	}
	if err := r.forgetLegacyGrant(ctx, ba); err != nil {
		return err
	}
	status := r.record.status(ba)
	conditions.MarkFalse(ba, cosiapi.ConditionProvisioned, cosiapi.ReasonRevoked, "access revoked; Secrets deleted")
	if err := status.Patch(ctx, patch.OptimisticLock); err != nil {
		return lookup.IgnoreGone(err)
	}
	return lookup.IgnoreGone(patch.SetAnnotation(ctx, r.Client, ba, cosiapi.AnnotationSidecarCleanupFinished))
}

// revoked reports whether the sidecar recorded the access's revocation in status.
func revoked(ba *cosiapi.BucketAccess) bool {
	return conditions.Has(ba, cosiapi.ConditionProvisioned, metav1.ConditionFalse, cosiapi.ReasonRevoked)
}

// unrecordedGrant returns what revokes an access that has no grant record: it was granted by a
// version that recorded grants in Bucket annotations, or stopped between phase 1 and the record.
// Without an account ID in status (phase 1 persists it before anything is recorded or granted)
// nothing was granted. Otherwise the account revoked is the one the driver generates for this
// access (KEP-1979: the same ID for the same account name), never one that status names: whoever
// can write status could point it at another access's account. The buckets are those of status
// and of the Buckets it names.
func (r *BucketAccessReconciler) unrecordedGrant(ctx context.Context, ba *cosiapi.BucketAccess) (*grantRecord, error) {
	if ba.Status.AccountID == "" {
		return nil, nil
	}
	g := newGrantRecord(ba, driverParameters(ba.Status.Parameters, r.Driver.Protocol()))
	for _, ab := range ba.Status.AccessedBuckets {
		b := &cosiapi.Bucket{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: ab.BucketName}, b); err == nil &&
			b.Status.BucketID != "" && !slices.Contains(g.BucketIDs, b.Status.BucketID) {
			g.BucketIDs = append(g.BucketIDs, b.Status.BucketID)
			g.Modes = append(g.Modes, claimModes(ba, ab.BucketClaimName))
		}
	}
	if len(g.BucketIDs) == 0 {
		return nil, nil
	}
	resp, err := r.Driver.DriverGenerateBucketAccessId(ctx, g.generateRequest())
	if err != nil {
		// Retried whatever the code, as the revocation it serves: recorded, then returned as an
		// error that is not final.
		failed := r.record.failed(ctx, ba, rpcError{"DriverGenerateBucketAccessId", err}, cosiapi.EventFailedRevokeAccess)
		return nil, errors.New(failed.Error())
	}
	if resp.GetAccountId() == "" {
		return nil, errRequeue("DriverGenerateBucketAccessId returned an empty account_id; the access cannot be revoked")
	}
	g.AccountID = resp.GetAccountId()
	return &g, nil
}

// forgetLegacyGrant removes the grant of the access that an earlier version recorded in its
// Buckets' annotations, once the access is revoked.
func (r *BucketAccessReconciler) forgetLegacyGrant(ctx context.Context, ba *cosiapi.BucketAccess) error {
	key := legacyGrantAnnotationPrefix + string(ba.UID)
	for _, ab := range ba.Status.AccessedBuckets {
		b := &cosiapi.Bucket{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: ab.BucketName}, b); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return err
		}
		if _, ok := b.Annotations[key]; !ok {
			continue
		}
		if err := patch.Annotation(ctx, r.Client, b, key, ""); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}
