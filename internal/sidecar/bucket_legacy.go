package sidecar

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/patch"
)

// migrateLegacyGrants moves the grants that an earlier version recorded in the Bucket's
// annotations to grant records, and removes the annotations. Whoever may write Buckets could have
// written them, so each is verified first: the driver must generate the recorded account ID for
// the recorded access (KEP-1979: the same ID for the same account name), else the record names an
// account that is not the access's, and is dropped with a Warning event. A verified record whose
// access is gone is then revoked like any other (GrantReconciler), which deletes only Secrets that
// carry the access's UID, and only those the live access with the UID names.
func (r *BucketReconciler) migrateLegacyGrants(ctx context.Context, bucket *cosiapi.Bucket) error {
	for key, g := range legacyGrantRecords(bucket) {
		if err := r.migrateLegacyGrant(ctx, bucket, g); err != nil {
			return err
		}
		if err := patch.Annotation(ctx, r.Client, bucket, key, ""); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

func (r *BucketReconciler) migrateLegacyGrant(ctx context.Context, bucket *cosiapi.Bucket, g grantRecord) error {
	if g.UID == "" || g.AccountID == "" || len(g.BucketIDs) == 0 {
		return nil // unreadable, or nothing granted
	}
	existing, _, err := r.Grants.store.get(ctx, g.UID)
	if err != nil {
		return err
	}
	if existing != nil && existing.AccountID == g.AccountID {
		if slices.Contains(existing.BucketNames, bucket.Name) {
			return nil
		}
		existing.BucketNames = append(existing.BucketNames, bucket.Name)
		written, _, err := r.Grants.store.put(ctx, *existing)
		r.Grants.pend(bucket, written) // the Bucket's deletion may come next (bucket_fence.go)
		return err
	}
	resp, err := r.Driver.DriverGenerateBucketAccessId(ctx, g.generateRequest())
	if err != nil {
		return rpcError{"DriverGenerateBucketAccessId", err}
	}
	if resp.GetAccountId() != g.AccountID {
		r.Recorder.Eventf(bucket, nil, corev1.EventTypeWarning, cosiapi.EventFailedRevokeAccess, "MigrateGrant",
			"ignored a grant recorded in the annotations of this Bucket for BucketAccess %s/%s (UID %s): "+
				"the driver does not generate its account ID for that access", g.Namespace, g.Name, g.UID)
		return nil
	}
	// The account is the access's; the name and Secrets of the access are taken from the live
	// access with the UID, if there is one, not from the annotation.
	var list cosiapi.BucketAccessList
	if err := r.AccessesByUID.List(ctx, r.Client, &list, "", string(g.UID)); err != nil {
		return err
	}
	if len(list.Items) == 1 {
		live := &list.Items[0]
		g.Namespace, g.Name, g.SecretNames = live.Namespace, live.Name, secretNames(live)
	} else {
		// No access has the UID: the annotation's names cannot be verified, and its Secrets are
		// not deleted with the grant. Those of an access that is gone are Kubernetes' garbage
		// collector's (the access owns them); names taken from the annotation could be anyone's.
		g.SecretNames = nil
	}
	g.BucketNames = []string{bucket.Name}
	written, _, err := r.Grants.store.put(ctx, g)
	r.Grants.pend(bucket, written) // the Bucket's deletion may come next (bucket_fence.go)
	return err
}

// legacyGrantRecords returns the grants recorded on a Bucket in annotations, by annotation key.
// Unreadable ones are returned as zero records, to be dropped.
func legacyGrantRecords(b *cosiapi.Bucket) map[string]grantRecord {
	out := map[string]grantRecord{}
	for _, k := range slices.Sorted(maps.Keys(b.Annotations)) {
		if !strings.HasPrefix(k, legacyGrantAnnotationPrefix) {
			continue
		}
		var g grantRecord
		if json.Unmarshal([]byte(b.Annotations[k]), &g) != nil ||
			string(g.UID) != strings.TrimPrefix(k, legacyGrantAnnotationPrefix) {
			g = grantRecord{}
		}
		out[k] = g
	}
	return out
}
