package sidecar

import (
	"context"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/kube/patch"
)

// ensureAccount is phase 1 (KEP-1979 "DriverGenerateBucketAccessId"): without an account ID in
// status, the driver names the account, and the name is persisted with the bucket IDs before
// anything exists in the backend.
//
// An account ID in status that this sidecar has no record of granting is checked: the sidecar
// stopped between phase 1 and the record, or someone who can write status put it there (another
// access's account, say). The driver generates the same ID for the same account name; anything
// else is not this access's account.
func (r *BucketAccessReconciler) ensureAccount(ctx context.Context, ba *cosiapi.BucketAccess, p *preparedGrant) error {
	if ba.Status.AccountID != "" {
		if g := r.Grants.store.cached(ctx, ba.UID); g != nil && g.AccountID == ba.Status.AccountID {
			return nil
		}
	}
	resp, err := r.Driver.DriverGenerateBucketAccessId(ctx, p.req.generate())
	switch {
	case err != nil:
		return driverFailed("DriverGenerateBucketAccessId", err)
	case resp.GetAccountId() == "":
		return invalidAnswer("DriverGenerateBucketAccessId returned an empty account_id")
	case ba.Status.AccountID == resp.GetAccountId():
		return nil
	case ba.Status.AccountID != "":
		return invalidObjects(cosiapi.ReasonInvalidReference,
			"status.accountID is not the account the driver generates for this BucketAccess")
	}
	status := r.record.status(ba)
	ba.Status.AccountID = resp.GetAccountId()
	for i, ab := range ba.Status.AccessedBuckets {
		ba.Status.AccessedBuckets[i].BucketID = p.buckets[ab.BucketClaimName].Status.BucketID
	}
	conditions.Init(ba, cosiapi.ConditionProvisionFailed)
	conditions.MarkUnknown(ba, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioning,
		"account ID generated; granting access")
	return status.Patch(ctx, patch.OptimisticLock)
}
