package sidecar

import (
	"context"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/kube/patch"
)

// grantRecorded reports whether the cache holds the access's grant record with its account ID.
func (r *BucketAccessReconciler) grantRecorded(ctx context.Context, ba *cosiapi.BucketAccess) bool {
	g := r.Grants.store.cached(ctx, ba.UID)
	return g != nil && g.AccountID == ba.Status.AccountID
}

// generateAccountID is phase 1: the driver names the account, and the name is persisted with the
// bucket IDs before anything exists in the backend.
func (r *BucketAccessReconciler) generateAccountID(
	ctx context.Context, ba *cosiapi.BucketAccess, buckets map[string]*cosiapi.Bucket, req grantRequest,
) error {
	resp, err := r.Driver.DriverGenerateBucketAccessId(ctx, req.generate())
	if err != nil {
		return driverFailed("DriverGenerateBucketAccessId", err)
	}
	if resp.GetAccountId() == "" {
		return invalidAnswer("DriverGenerateBucketAccessId returned an empty account_id")
	}
	status := r.record.status(ba)
	ba.Status.AccountID = resp.GetAccountId()
	for i, ab := range ba.Status.AccessedBuckets {
		ba.Status.AccessedBuckets[i].BucketID = buckets[ab.BucketClaimName].Status.BucketID
	}
	conditions.Init(ba, cosiapi.ConditionProvisionFailed)
	conditions.MarkUnknown(ba, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioning,
		"account ID generated; granting access")
	return status.Patch(ctx, patch.OptimisticLock)
}

// checkAccountID checks an account ID this sidecar has no record of granting: it stopped between
// phase 1 and the record, or someone who can write status put it there (another access's
// account, say). The driver generates the same ID for the same account name (KEP-1979
// "DriverGenerateBucketAccessId"); anything else is not this access's account.
func (r *BucketAccessReconciler) checkAccountID(ctx context.Context, ba *cosiapi.BucketAccess, req grantRequest) error {
	resp, err := r.Driver.DriverGenerateBucketAccessId(ctx, req.generate())
	if err != nil {
		return driverFailed("DriverGenerateBucketAccessId", err)
	}
	if resp.GetAccountId() != ba.Status.AccountID {
		return invalidObjects(cosiapi.ReasonInvalidReference,
			"status.accountID is not the account the driver generates for this BucketAccess")
	}
	return nil
}

// ensureAccount is phase 1: without an account ID in status, the driver names the account and
// the name is persisted with the bucket IDs before anything exists in the backend; an account ID
// this sidecar has no record of granting is verified with the driver.
func (r *BucketAccessReconciler) ensureAccount(ctx context.Context, ba *cosiapi.BucketAccess, p *preparedGrant) error {
	switch {
	case ba.Status.AccountID == "":
		return r.generateAccountID(ctx, ba, p.buckets, p.req)
	case !r.grantRecorded(ctx, ba):
		return r.checkAccountID(ctx, ba, p.req)
	}
	return nil
}
