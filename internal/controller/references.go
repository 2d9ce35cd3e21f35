package controller

import (
	"context"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/index"
)

// References between COSI objects are derived from the live objects, never taken from what is
// written on them: a tenant can edit the annotations and finalizers of their BucketClaims and
// BucketAccesses, so an annotation is only COSI's published view (KEP-1979 requires it), and a
// decision that could lose data or leave credentials valid (deleting a claim or a bucket) is made
// from an uncached list of the objects themselves.

// holdsReference reports whether an access still holds its claims and Buckets: until the
// controller has removed its protection finalizer after the sidecar's cleanup, it may have
// credentials in the backend.
func holdsReference(ba *cosiapi.BucketAccess) bool {
	return ba.DeletionTimestamp == nil || controllerutil.ContainsFinalizer(ba, cosiapi.FinalizerProtection)
}

func namesClaim(ba *cosiapi.BucketAccess, claim string) bool {
	return slices.ContainsFunc(ba.Spec.BucketClaims,
		func(c cosiapi.BucketClaimAccess) bool { return c.BucketClaimName == claim })
}

func namesBucket(ba *cosiapi.BucketAccess, bucket string) bool {
	return slices.ContainsFunc(ba.Status.AccessedBuckets,
		func(b cosiapi.AccessedBucket) bool { return b.BucketName == bucket })
}

// referencingAccesses returns the names of the accesses that hold a reference to the claim. With
// live, it lists the API server, not the cache: the cache may not have an access created a moment
// ago, and deciding from it could delete a bucket that access is about to use.
func (r *BucketClaimReconciler) referencingAccesses(
	ctx context.Context, claim *cosiapi.BucketClaim, live bool,
) ([]string, error) {
	var list cosiapi.BucketAccessList
	var err error
	if live {
		err = r.APIReader.List(ctx, &list, client.InNamespace(claim.Namespace))
	} else {
		key := index.ClaimKey(claim.Namespace, claim.Name)
		err = r.Client.List(ctx, &list, client.InNamespace(claim.Namespace),
			client.MatchingFields{index.AccessesByClaim.Name: key})
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for i := range list.Items {
		if ba := &list.Items[i]; namesClaim(ba, claim.Name) && holdsReference(ba) {
			names = append(names, ba.Name)
		}
	}
	return names, nil
}

// accessesOfBucket returns the accesses, in any namespace, that were handed off for the Bucket
// and still hold it. With live, it lists the API server (see referencingAccesses).
func accessesOfBucket(ctx context.Context, c client.Reader, bucket string, live bool) ([]string, error) {
	var list cosiapi.BucketAccessList
	var opts []client.ListOption
	if !live {
		opts = append(opts, client.MatchingFields{index.AccessesByBucket.Name: bucket})
	}
	if err := c.List(ctx, &list, opts...); err != nil {
		return nil, err
	}
	var names []string
	for i := range list.Items {
		if ba := &list.Items[i]; namesBucket(ba, bucket) && holdsReference(ba) {
			names = append(names, ba.Namespace+"/"+ba.Name)
		}
	}
	return names, nil
}
