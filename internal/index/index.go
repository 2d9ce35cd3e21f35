// Package index holds the field indexes of the controller's and the sidecar's caches: which
// objects a watch maps an event to, found without listing every object of a kind.
package index

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// Field is one field index: the values of Name for each Object are what Extract returns.
type Field struct {
	Object  client.Object
	Name    string
	Extract client.IndexerFunc
}

// Register adds the indexes to a manager's field indexer (mgr.GetFieldIndexer()).
func Register(ctx context.Context, indexer client.FieldIndexer, fields ...Field) error {
	for _, f := range fields {
		if err := indexer.IndexField(ctx, f.Object, f.Name, f.Extract); err != nil {
			return fmt.Errorf("index %s: %w", f.Name, err)
		}
	}
	return nil
}

// ClaimsByClass indexes BucketClaims by their BucketClass.
var ClaimsByClass = Field{&cosiapi.BucketClaim{}, "spec.bucketClassName", func(o client.Object) []string {
	return []string{o.(*cosiapi.BucketClaim).Spec.BucketClassName}
}}

// ClaimsByExistingBucket indexes static BucketClaims by the Bucket they name.
var ClaimsByExistingBucket = Field{&cosiapi.BucketClaim{}, "spec.existingBucketName", func(o client.Object) []string {
	return []string{o.(*cosiapi.BucketClaim).Spec.ExistingBucketName}
}}

// AccessesByClaim indexes BucketAccesses by the claims they name, as "<namespace>/<claim name>"
// (ClaimKey).
var AccessesByClaim = Field{
	&cosiapi.BucketAccess{},
	"spec.bucketClaims.bucketClaimName",
	func(o client.Object) []string {
		ba := o.(*cosiapi.BucketAccess)
		keys := make([]string, 0, len(ba.Spec.BucketClaims))
		for _, c := range ba.Spec.BucketClaims {
			keys = append(keys, ClaimKey(ba.Namespace, c.BucketClaimName))
		}
		return keys
	},
}

// ClaimKey is the AccessesByClaim value of a claim.
func ClaimKey(namespace, name string) string { return namespace + "/" + name }

// AccessesByClass indexes BucketAccesses by their BucketAccessClass.
var AccessesByClass = Field{&cosiapi.BucketAccess{}, "spec.bucketAccessClassName", func(o client.Object) []string {
	return []string{o.(*cosiapi.BucketAccess).Spec.BucketAccessClassName}
}}

// AccessesByBucket indexes BucketAccesses by the Buckets they were handed off for.
var AccessesByBucket = Field{
	&cosiapi.BucketAccess{},
	"status.accessedBuckets.bucketName",
	func(o client.Object) []string {
		var names []string
		for _, b := range o.(*cosiapi.BucketAccess).Status.AccessedBuckets {
			names = append(names, b.BucketName)
		}
		return names
	},
}

// AccessesByUID indexes BucketAccesses by their UID: a grant recorded by an earlier version names
// its access by UID, and the name it also names may have been written by someone else.
var AccessesByUID = Field{&cosiapi.BucketAccess{}, "metadata.uid", func(o client.Object) []string {
	return []string{string(o.GetUID())}
}}
