package admission

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// inUse is a claim as the controller leaves it while accesses reference it.
func inUse(c *cosiapi.BucketClaim) {
	c.Finalizers = []string{cosiapi.FinalizerProtection}
	metav1.SetMetaDataAnnotation(&c.ObjectMeta, cosiapi.AnnotationHasBucketAccessReferences, "true")
}

// protected adds COSI's finalizer, as COSI does to every claim and access.
func protected[T interface{ SetFinalizers([]string) }](o T) {
	o.SetFinalizers([]string{cosiapi.FinalizerProtection})
}

// TestClaimMetadata: cosi-reserved-metadata on BucketClaims. A tenant may neither add, change nor
// remove has-bucketaccess-references or COSI's finalizer, on create or on update; everything else
// on its claims stays the tenant's, deletion included; the controller may do what it does.
func TestClaimMetadata(t *testing.T) {
	waitForPolicies(t)
	build := func() *cosiapi.BucketClaim { return newClaim(tenantNamespace, "standard") }
	runCreates(t, build, []createCase[*cosiapi.BucketClaim]{
		{name: "tenant creates a claim", as: tenant},
		{
			name: "tenant creates a claim with its own labels, annotations and finalizers",
			as:   tenant,
			mutate: func(c *cosiapi.BucketClaim) {
				metav1.SetMetaDataLabel(&c.ObjectMeta, "team", "photos")
				metav1.SetMetaDataAnnotation(&c.ObjectMeta, "example.com/owner", "alice")
				c.Finalizers = []string{"example.com/backup"}
			},
		},
		{
			name:    "tenant creates a claim with COSI's finalizer",
			as:      tenant,
			mutate:  protected[*cosiapi.BucketClaim],
			refused: finalizerReserved,
		},
		{name: "tenant creates a claim that claims to be in use", as: tenant, mutate: func(c *cosiapi.BucketClaim) {
			metav1.SetMetaDataAnnotation(&c.ObjectMeta, cosiapi.AnnotationHasBucketAccessReferences, "true")
		}, refused: claimAnnotationReserved},
		{
			name:    "broad tenant creates a claim with COSI's finalizer",
			as:      broadTenant,
			mutate:  protected[*cosiapi.BucketClaim],
			refused: finalizerReserved,
		},
		{name: "admin creates a claim with COSI's metadata", as: admin, mutate: inUse},
	})
	runUpdates(t, build, []updateCase[*cosiapi.BucketClaim]{
		{name: "tenant removes COSI's finalizer", before: inUse, as: tenant, update: func(c *cosiapi.BucketClaim) {
			controllerutil.RemoveFinalizer(c, cosiapi.FinalizerProtection)
		}, refused: finalizerReserved},
		{
			name:     "tenant removes every finalizer of a deleting claim",
			before:   inUse,
			deleting: true,
			as:       tenant,
			update: func(c *cosiapi.BucketClaim) {
				c.Finalizers = nil
			},
			refused: finalizerReserved,
		},
		{
			name:    "tenant adds COSI's finalizer",
			as:      tenant,
			update:  protected[*cosiapi.BucketClaim],
			refused: finalizerReserved,
		},
		{name: "tenant removes the reference annotation", before: inUse, as: tenant, update: func(c *cosiapi.BucketClaim) {
			delete(c.Annotations, cosiapi.AnnotationHasBucketAccessReferences)
		}, refused: claimAnnotationReserved},
		{name: "tenant changes the reference annotation", before: inUse, as: tenant, update: func(c *cosiapi.BucketClaim) {
			c.Annotations[cosiapi.AnnotationHasBucketAccessReferences] = "false"
		}, refused: claimAnnotationReserved},
		{name: "tenant sets the reference annotation", as: tenant, update: func(c *cosiapi.BucketClaim) {
			metav1.SetMetaDataAnnotation(&c.ObjectMeta, cosiapi.AnnotationHasBucketAccessReferences, "true")
		}, refused: claimAnnotationReserved},
		{
			name:   "broad tenant removes the reference annotation",
			before: inUse,
			as:     broadTenant,
			update: func(c *cosiapi.BucketClaim) {
				delete(c.Annotations, cosiapi.AnnotationHasBucketAccessReferences)
			},
			refused: claimAnnotationReserved,
		},

		{
			name:   "tenant edits its labels and annotations next to COSI's",
			before: inUse,
			as:     tenant,
			update: func(c *cosiapi.BucketClaim) {
				metav1.SetMetaDataLabel(&c.ObjectMeta, "team", "photos")
				metav1.SetMetaDataAnnotation(&c.ObjectMeta, "example.com/owner", "alice")
			},
		},
		{
			name:   "tenant adds its own finalizer next to COSI's",
			before: inUse,
			as:     tenant,
			update: func(c *cosiapi.BucketClaim) {
				controllerutil.AddFinalizer(c, "example.com/backup")
			},
		},
		{name: "tenant removes its own finalizer from a deleting claim", before: func(c *cosiapi.BucketClaim) {
			inUse(c)
			controllerutil.AddFinalizer(c, "example.com/backup")
		}, deleting: true, as: tenant, update: func(c *cosiapi.BucketClaim) {
			controllerutil.RemoveFinalizer(c, "example.com/backup")
		}},
		{
			name:     "tenant edits a label of a deleting claim",
			before:   inUse,
			deleting: true,
			as:       tenant,
			update: func(c *cosiapi.BucketClaim) {
				metav1.SetMetaDataLabel(&c.ObjectMeta, "team", "photos")
			},
		},
		{name: "tenant deletes a claim in use", before: inUse, as: tenant},
		{name: "tenant deletes a claim", as: tenant},

		{name: "controller adds its finalizer and the reference annotation", as: controller, update: inUse},
		{
			name:   "controller removes the reference annotation",
			before: inUse,
			as:     controller,
			update: func(c *cosiapi.BucketClaim) {
				delete(c.Annotations, cosiapi.AnnotationHasBucketAccessReferences)
			},
		},
		{
			name:     "controller removes its finalizer from a deleting claim",
			before:   inUse,
			deleting: true,
			as:       controller,
			update: func(c *cosiapi.BucketClaim) {
				controllerutil.RemoveFinalizer(c, cosiapi.FinalizerProtection)
			},
		},
		{
			name:     "admin removes COSI's finalizer from a deleting claim",
			before:   inUse,
			deleting: true,
			as:       admin,
			update: func(c *cosiapi.BucketClaim) {
				c.Finalizers = nil
			},
		},
	})
}

// rotation sets the rotate-credentials annotation to token.
func rotation(token string) func(*cosiapi.BucketAccess) {
	return func(ba *cosiapi.BucketAccess) {
		metav1.SetMetaDataAnnotation(&ba.ObjectMeta, cosiapi.AnnotationRotateCredentials, token)
	}
}

// refresh sets the refresh-secret annotation to token.
func refresh(token string) func(*cosiapi.BucketAccess) {
	return func(ba *cosiapi.BucketAccess) {
		metav1.SetMetaDataAnnotation(&ba.ObjectMeta, cosiapi.AnnotationRefreshSecret, token)
	}
}

// TestAccessMetadata: cosi-reserved-metadata on BucketAccesses. A tenant may not set
// sidecar-cleanup-finished (the forged "revoked" that would skip revocation without the
// reconcilers' own defence), touch COSI's finalizer, or ask for a credential rotation
// (rotate-credentials: admins only); the sidecar and controller may.
func TestAccessMetadata(t *testing.T) {
	waitForPolicies(t)
	build := func() *cosiapi.BucketAccess { return newAccess(tenantNamespace, "read-only") }
	cleanedUp := func(ba *cosiapi.BucketAccess) {
		metav1.SetMetaDataAnnotation(&ba.ObjectMeta, cosiapi.AnnotationSidecarCleanupFinished, "true")
	}
	runCreates(t, build, []createCase[*cosiapi.BucketAccess]{
		{name: "tenant creates an access", as: tenant},
		{
			name:    "tenant creates an access with COSI's finalizer",
			as:      tenant,
			mutate:  protected[*cosiapi.BucketAccess],
			refused: finalizerReserved,
		},
		{
			name:    "tenant creates an access that claims to be cleaned up",
			as:      tenant,
			mutate:  cleanedUp,
			refused: accessAnnotationReserved,
		},
		{
			name:    "tenant creates an access that asks for a credential rotation",
			as:      tenant,
			mutate:  rotation("now"),
			refused: rotationReserved,
		},
		{name: "admin creates an access that asks for a credential rotation", as: admin, mutate: rotation("now")},
		{
			name:    "tenant creates an access that asks for a Secret refresh",
			as:      tenant,
			mutate:  refresh("now"),
			refused: refreshReserved,
		},
		{name: "admin creates an access that asks for a Secret refresh", as: admin, mutate: refresh("now")},
	})
	runUpdates(t, build, []updateCase[*cosiapi.BucketAccess]{
		{
			name:    "tenant sets sidecar-cleanup-finished",
			before:  protected[*cosiapi.BucketAccess],
			as:      tenant,
			update:  cleanedUp,
			refused: accessAnnotationReserved,
		},
		{
			name:     "tenant sets sidecar-cleanup-finished on a deleting access",
			before:   protected[*cosiapi.BucketAccess],
			deleting: true,
			as:       tenant,
			update:   cleanedUp,
			refused:  accessAnnotationReserved,
		},
		{
			name:    "tenant removes sidecar-cleanup-finished",
			before:  func(ba *cosiapi.BucketAccess) { protected(ba); cleanedUp(ba) },
			as:      tenant,
			update:  func(ba *cosiapi.BucketAccess) { delete(ba.Annotations, cosiapi.AnnotationSidecarCleanupFinished) },
			refused: accessAnnotationReserved,
		},
		{
			name:   "tenant removes COSI's finalizer",
			before: protected[*cosiapi.BucketAccess],
			as:     tenant,
			update: func(ba *cosiapi.BucketAccess) {
				controllerutil.RemoveFinalizer(ba, cosiapi.FinalizerProtection)
			},
			refused: finalizerReserved,
		},
		{
			name:     "tenant removes COSI's finalizer from a deleting access",
			before:   protected[*cosiapi.BucketAccess],
			deleting: true,
			as:       tenant,
			update:   func(ba *cosiapi.BucketAccess) { ba.Finalizers = nil },
			refused:  finalizerReserved,
		},
		{
			name:    "tenant adds COSI's finalizer",
			as:      tenant,
			update:  protected[*cosiapi.BucketAccess],
			refused: finalizerReserved,
		},

		{
			name:    "tenant asks for a credential rotation",
			before:  protected[*cosiapi.BucketAccess],
			as:      tenant,
			update:  rotation("2024-01-01"),
			refused: rotationReserved,
		},
		{
			name:    "broad tenant asks for a credential rotation",
			before:  protected[*cosiapi.BucketAccess],
			as:      broadTenant,
			update:  rotation("2024-01-01"),
			refused: rotationReserved,
		},
		{
			name:    "tenant changes the rotation request",
			before:  func(ba *cosiapi.BucketAccess) { protected(ba); rotation("2024-01-01")(ba) },
			as:      tenant,
			update:  rotation("2024-02-01"),
			refused: rotationReserved,
		},
		{
			name:    "tenant removes the rotation request",
			before:  func(ba *cosiapi.BucketAccess) { protected(ba); rotation("2024-01-01")(ba) },
			as:      tenant,
			update:  func(ba *cosiapi.BucketAccess) { delete(ba.Annotations, cosiapi.AnnotationRotateCredentials) },
			refused: rotationReserved,
		},
		{
			name:   "tenant edits its annotations on an access with a rotation request",
			before: func(ba *cosiapi.BucketAccess) { protected(ba); rotation("2024-01-01")(ba) },
			as:     tenant,
			update: func(ba *cosiapi.BucketAccess) {
				metav1.SetMetaDataAnnotation(&ba.ObjectMeta, "example.com/owner", "alice")
			},
		},
		{
			name:    "tenant asks for a Secret refresh",
			before:  protected[*cosiapi.BucketAccess],
			as:      tenant,
			update:  refresh("1"),
			refused: refreshReserved,
		},
		{
			name:    "broad tenant changes the Secret refresh request",
			before:  func(ba *cosiapi.BucketAccess) { protected(ba); refresh("1")(ba) },
			as:      broadTenant,
			update:  refresh("2"),
			refused: refreshReserved,
		},
		{
			name:    "tenant removes the Secret refresh request",
			before:  func(ba *cosiapi.BucketAccess) { protected(ba); refresh("1")(ba) },
			as:      tenant,
			update:  func(ba *cosiapi.BucketAccess) { delete(ba.Annotations, cosiapi.AnnotationRefreshSecret) },
			refused: refreshReserved,
		},
		{
			name:   "tenant edits its annotations on an access with a Secret refresh request",
			before: func(ba *cosiapi.BucketAccess) { protected(ba); refresh("1")(ba) },
			as:     tenant,
			update: func(ba *cosiapi.BucketAccess) {
				metav1.SetMetaDataAnnotation(&ba.ObjectMeta, "example.com/owner", "alice")
			},
		},
		{
			name:   "admin asks for a Secret refresh",
			before: protected[*cosiapi.BucketAccess],
			as:     admin,
			update: refresh("1"),
		},
		{
			name:   "admin asks for a credential rotation",
			before: protected[*cosiapi.BucketAccess],
			as:     admin,
			update: rotation("2024-01-01"),
		},
		{
			name:   "tenant edits its labels and annotations",
			before: protected[*cosiapi.BucketAccess],
			as:     tenant,
			update: func(ba *cosiapi.BucketAccess) {
				metav1.SetMetaDataLabel(&ba.ObjectMeta, "app", "gallery")
				metav1.SetMetaDataAnnotation(&ba.ObjectMeta, "example.com/owner", "alice")
			},
		},
		{
			name:   "tenant adds its own finalizer",
			before: protected[*cosiapi.BucketAccess],
			as:     tenant,
			update: func(ba *cosiapi.BucketAccess) {
				controllerutil.AddFinalizer(ba, "example.com/backup")
			},
		},
		{name: "tenant deletes an access with COSI's finalizer", before: protected[*cosiapi.BucketAccess], as: tenant},

		{name: "controller adds its finalizer", as: controller, update: protected[*cosiapi.BucketAccess]},
		{name: "sidecar adds the finalizer", as: sidecar, update: protected[*cosiapi.BucketAccess]},
		{
			name:     "sidecar sets sidecar-cleanup-finished on a deleting access",
			before:   protected[*cosiapi.BucketAccess],
			deleting: true,
			as:       sidecar,
			update:   cleanedUp,
		},
		{
			name:     "controller removes its finalizer from a deleting access",
			before:   func(ba *cosiapi.BucketAccess) { protected(ba); cleanedUp(ba) },
			deleting: true,
			as:       controller,
			update:   func(ba *cosiapi.BucketAccess) { controllerutil.RemoveFinalizer(ba, cosiapi.FinalizerProtection) },
		},
	})
}

// TestBucketMetadata: cosi-reserved-bucket-metadata. bucketclaim-being-deleted, the gate to deleting
// a bucket's data, is the controller's: an admin who may manage Buckets but is not COSI may
// neither set nor remove it; everything else on Buckets stays the admin's.
func TestBucketMetadata(t *testing.T) {
	waitForPolicies(t)
	released := func(b *cosiapi.Bucket) {
		metav1.SetMetaDataAnnotation(&b.ObjectMeta, cosiapi.AnnotationBucketClaimBeingDeleted, "true")
	}
	runCreates(t, newBucket, []createCase[*cosiapi.Bucket]{
		{name: "bucket admin imports a bucket", as: bucketAdmin, mutate: func(b *cosiapi.Bucket) {
			b.Spec.ExistingBucketID, b.Spec.DeletionPolicy = "legacy", cosiapi.DeletionPolicyRetain
		}},
		{
			name:    "bucket admin creates a released Bucket",
			as:      bucketAdmin,
			mutate:  released,
			refused: bucketAnnotationReserved,
		},
		{name: "controller creates a Bucket with its finalizer", as: controller, mutate: protected[*cosiapi.Bucket]},
		{name: "admin creates a Bucket with a legacy grant", as: admin, mutate: legacyGrant,
			refused: grantAnnotationReserved},
	})
	runUpdates(t, newBucket, []updateCase[*cosiapi.Bucket]{
		{
			name:    "bucket admin sets bucketclaim-being-deleted",
			before:  protected[*cosiapi.Bucket],
			as:      bucketAdmin,
			update:  released,
			refused: bucketAnnotationReserved,
		},
		{
			name:     "bucket admin sets bucketclaim-being-deleted on a deleting Bucket",
			before:   protected[*cosiapi.Bucket],
			deleting: true,
			as:       bucketAdmin,
			update:   released,
			refused:  bucketAnnotationReserved,
		},
		{
			name:   "bucket admin removes bucketclaim-being-deleted",
			before: released,
			as:     bucketAdmin,
			update: func(b *cosiapi.Bucket) {
				delete(b.Annotations, cosiapi.AnnotationBucketClaimBeingDeleted)
			},
			refused: bucketAnnotationReserved,
		},
		{
			name:   "bucket admin edits labels and annotations",
			before: protected[*cosiapi.Bucket],
			as:     bucketAdmin,
			update: func(b *cosiapi.Bucket) {
				metav1.SetMetaDataLabel(&b.ObjectMeta, "team", "photos")
				metav1.SetMetaDataAnnotation(&b.ObjectMeta, "example.com/owner", "alice")
			},
		},
		{
			name:   "bucket admin switches a Bucket to Retain",
			before: protected[*cosiapi.Bucket],
			as:     bucketAdmin,
			update: func(b *cosiapi.Bucket) {
				b.Spec.DeletionPolicy = cosiapi.DeletionPolicyRetain
			},
		},
		{name: "bucket admin deletes a Bucket", before: protected[*cosiapi.Bucket], as: bucketAdmin},
		{
			name:   "controller sets bucketclaim-being-deleted",
			before: protected[*cosiapi.Bucket],
			as:     controller,
			update: released,
		},
		{name: "admin sets bucketclaim-being-deleted", as: admin, update: released},
		{name: "bucket admin adds a legacy grant", as: bucketAdmin, update: legacyGrant, refused: grantAnnotationReserved},
		{name: "controller adds a legacy grant", as: controller, update: legacyGrant, refused: grantAnnotationReserved},
		{name: "admin adds a legacy grant", as: admin, update: legacyGrant, refused: grantAnnotationReserved},
	})
}

// legacyGrant records a grant on a Bucket as an earlier version of COSI did.
func legacyGrant(b *cosiapi.Bucket) {
	metav1.SetMetaDataAnnotation(&b.ObjectMeta, cosiapi.GroupName+"/grant-0f3c", `{"uid":"0f3c","accountID":"ba-0f3c"}`)
}
