package controller_test

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/kube/patch"
)

// provisionedClaim returns a claim whose Bucket the "sidecar" provisioned with the protocols.
func provisionedClaim(t *testing.T, protocols ...cosiapi.Protocol) (*cosiapi.BucketClaim, *cosiapi.Bucket) {
	t.Helper()
	class := bucketClass(cosiapi.DeletionPolicyDelete)
	create(t, class)
	c := claim(class.Name)
	create(t, c)
	b := boundBucket(t, c)
	provisionAsSidecar(t, b, metav1.ConditionTrue, protocols...)
	testenv.Condition(
		t,
		env,
		c,
		claimConditions,
		cosiapi.ConditionProvisioned,
		metav1.ConditionTrue,
		cosiapi.ReasonProvisioned,
	)
	return c, b
}

func TestAccessHandOff(t *testing.T) {
	t.Parallel()
	c, b := provisionedClaim(t, cosiapi.ProtocolS3)
	ac := accessClass()
	create(t, ac)
	ba := access(ac.Name, c.Name)
	create(t, ba)

	testenv.Eventually(t, func() error {
		get(t, ba)
		if ba.Status.DriverName == "" {
			return fmt.Errorf("not handed off")
		}
		return nil
	})
	want := cosiapi.AccessedBucket{BucketClaimName: c.Name, BucketName: b.Name, BucketID: b.Status.BucketID}
	if len(ba.Status.AccessedBuckets) != 1 || ba.Status.AccessedBuckets[0] != want {
		t.Errorf("accessedBuckets %+v, want [%+v]", ba.Status.AccessedBuckets, want)
	}
	if ba.Status.DriverName != driverName || ba.Status.AuthenticationType != cosiapi.AuthenticationTypeKey ||
		!maps.Equal(ba.Status.Parameters, ac.Spec.Parameters) {
		t.Errorf("hand-off status %+v", ba.Status)
	}
	if !controllerutil.ContainsFinalizer(ba, cosiapi.FinalizerProtection) {
		t.Error("no protection finalizer on the access")
	}
	get(t, c)
	if c.Annotations[cosiapi.AnnotationHasBucketAccessReferences] == "" {
		t.Errorf("the claim lacks %s", cosiapi.AnnotationHasBucketAccessReferences)
	}
	testenv.Condition(
		t,
		env,
		ba,
		accessConditions,
		cosiapi.ConditionResourcesValidated,
		metav1.ConditionTrue,
		cosiapi.ReasonValid,
	)

	// The class may change or go: the access carries its copy.
	if err := env.Client.Delete(t.Context(), ac); err != nil {
		t.Fatal(err)
	}

	// Claim deletion is blocked while the access exists.
	if err := env.Client.Delete(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	testenv.Condition(
		t,
		env,
		c,
		claimConditions,
		cosiapi.ConditionProvisioned,
		metav1.ConditionTrue,
		cosiapi.ReasonDeletionBlocked,
	)
	testenv.Never(t, time.Second, func() error {
		get(t, c)
		get(t, b)
		if b.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted] != "" {
			return fmt.Errorf("the Bucket of an accessed claim was released")
		}
		return nil
	})

	// The sidecar's phase 1: an account ID in status (an access without one has nothing to clean
	// up, and goes without waiting for the sidecar: TestAccessOfAnUnservedDriverCanBeDeleted).
	testenv.Eventually(t, func() error {
		get(t, ba)
		ba.Status.AccountID = "ba-" + string(ba.UID)
		return env.Client.Status().Update(t.Context(), ba)
	})
	// Deleting the access waits for the sidecar's cleanup, then releases the claim.
	if err := env.Client.Delete(t.Context(), ba); err != nil {
		t.Fatal(err)
	}
	testenv.Never(t, 500*time.Millisecond, func() error {
		get(t, ba)
		if !controllerutil.ContainsFinalizer(ba, cosiapi.FinalizerProtection) {
			return fmt.Errorf("the finalizer went before the sidecar cleaned up")
		}
		return nil
	})
	// The annotation alone, as a tenant could write it, is not enough.
	testenv.Eventually(t, func() error {
		get(t, ba)
		ba.Annotations = map[string]string{cosiapi.AnnotationSidecarCleanupFinished: "true"}
		return env.Client.Update(t.Context(), ba)
	})
	testenv.Never(t, 500*time.Millisecond, func() error {
		get(t, ba)
		if !controllerutil.ContainsFinalizer(ba, cosiapi.FinalizerProtection) {
			return fmt.Errorf("the finalizer went on the annotation alone")
		}
		return nil
	})
	revokeAsSidecar(t, ba)
	env.Gone(t, ba)
	testenv.Eventually(t, func() error {
		get(t, b)
		if b.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted] == "" || b.DeletionTimestamp == nil {
			return fmt.Errorf("the Bucket was not released and deleted after the access: %v", b.Annotations)
		}
		return nil
	})
	finishAsSidecar(t, b)
	env.Gone(t, c)
}

// TestClaimStaysReferencedWhileAnotherAccessExists: the reference annotation goes only with the
// last access.
func TestClaimStaysReferencedWhileAnotherAccessExists(t *testing.T) {
	t.Parallel()
	c, _ := provisionedClaim(t, cosiapi.ProtocolS3)
	ac := accessClass()
	create(t, ac)
	first, second := access(ac.Name, c.Name), access(ac.Name, c.Name)
	second.Spec.BucketClaims[0].AccessSecretName = "second-creds"
	create(t, first)
	create(t, second)
	testenv.Condition(
		t,
		env,
		first,
		accessConditions,
		cosiapi.ConditionResourcesValidated,
		metav1.ConditionTrue,
		cosiapi.ReasonValid,
	)
	testenv.Condition(
		t,
		env,
		second,
		accessConditions,
		cosiapi.ConditionResourcesValidated,
		metav1.ConditionTrue,
		cosiapi.ReasonValid,
	)
	for i, ba := range []*cosiapi.BucketAccess{first, second} {
		if err := env.Client.Delete(t.Context(), ba); err != nil {
			t.Fatal(err)
		}
		revokeAsSidecar(t, ba)
		env.Gone(t, ba)
		// The claim follows its accesses through a watch: it may take a moment to drop the
		// reference, and it must never drop it while an access remains.
		referenced := func() error {
			get(t, c)
			if r := c.Annotations[cosiapi.AnnotationHasBucketAccessReferences] != ""; r != (i == 0) {
				return fmt.Errorf("after deleting access %d of 2 the claim is referenced=%v", i+1, r)
			}
			return nil
		}
		if i == 0 {
			testenv.Never(t, 500*time.Millisecond, referenced)
		} else {
			testenv.Eventually(t, referenced)
		}
	}
}

func TestAccessValidation(t *testing.T) {
	t.Parallel()
	c1, _ := provisionedClaim(t, cosiapi.ProtocolS3)
	c2, _ := provisionedClaim(t, cosiapi.ProtocolS3)
	gcsOnly, _ := provisionedClaim(t, cosiapi.ProtocolGCS)
	for _, tc := range []struct {
		name       string
		class      func(*cosiapi.BucketAccessClass)
		access     func(*cosiapi.BucketAccess)
		claims     []string
		wantReason string
		wantText   string
	}{
		{
			name:       "several claims, class without an opinion",
			claims:     []string{c1.Name, c2.Name},
			wantReason: cosiapi.ReasonForbiddenByClass,
			wantText:   "one BucketClaim per BucketAccess",
		},
		{
			name: "several claims, SingleBucket class",
			class: func(c *cosiapi.BucketAccessClass) {
				c.Spec.MultiBucketAccess = cosiapi.MultiBucketAccessSingleBucket
			},
			claims:     []string{c1.Name, c2.Name},
			wantReason: cosiapi.ReasonForbiddenByClass,
			wantText:   "references 2",
		},
		{
			name: "several claims, MultipleBuckets class",
			class: func(c *cosiapi.BucketAccessClass) {
				c.Spec.MultiBucketAccess = cosiapi.MultiBucketAccessMultipleBuckets
			},
			claims:     []string{c1.Name, c2.Name},
			wantReason: cosiapi.ReasonValid,
		},
		{
			name: "disallowed object data mode",
			class: func(c *cosiapi.BucketAccessClass) {
				c.Spec.DisallowedBucketAccessModes.ObjectData = []cosiapi.BucketAccessMode{
					cosiapi.BucketAccessModeReadWrite,
					cosiapi.BucketAccessModeWriteOnly,
				}
			},
			claims:     []string{c1.Name},
			wantReason: cosiapi.ReasonForbiddenByClass,
			wantText:   "objectData access mode ReadWrite",
		},
		{
			name: "disallowed bucket metadata mode",
			class: func(c *cosiapi.BucketAccessClass) {
				c.Spec.DisallowedBucketAccessModes.BucketMetadata = []cosiapi.BucketAccessMode{
					cosiapi.BucketAccessModeWriteOnly,
				}
			},
			access: func(a *cosiapi.BucketAccess) {
				a.Spec.BucketClaims[0].AccessModes.BucketMetadata = cosiapi.BucketAccessModeWriteOnly
			},
			claims:     []string{c1.Name},
			wantReason: cosiapi.ReasonForbiddenByClass,
			wantText:   "bucketMetadata",
		},
		{
			name: "allowed mode next to a disallowed one",
			class: func(c *cosiapi.BucketAccessClass) {
				c.Spec.DisallowedBucketAccessModes.ObjectData = []cosiapi.BucketAccessMode{
					cosiapi.BucketAccessModeWriteOnly,
				}
			},
			claims:     []string{c1.Name},
			wantReason: cosiapi.ReasonValid,
		},
		{
			name: "ServiceAccount class without serviceAccountName",
			class: func(c *cosiapi.BucketAccessClass) {
				c.Spec.AuthenticationType = cosiapi.AuthenticationTypeServiceAccount
			},
			claims:     []string{c1.Name},
			wantReason: cosiapi.ReasonForbiddenByClass,
			wantText:   "serviceAccountName",
		},
		{
			name:       "protocol the claim does not support",
			claims:     []string{gcsOnly.Name},
			wantReason: cosiapi.ReasonUnsupportedProtocol,
			wantText:   "GCS",
		},
		{
			name:       "class of another driver",
			class:      func(c *cosiapi.BucketAccessClass) { c.Spec.DriverName = "other.example.com" },
			claims:     []string{c1.Name},
			wantReason: cosiapi.ReasonInvalidReference,
			wantText:   "other.example.com",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mutate []func(*cosiapi.BucketAccessClass)
			if tc.class != nil {
				mutate = append(mutate, tc.class)
			}
			ac := accessClass(mutate...)
			create(t, ac)
			ba := access(ac.Name, tc.claims...)
			if tc.access != nil {
				tc.access(ba)
			}
			create(t, ba)
			if tc.wantReason == cosiapi.ReasonValid {
				testenv.Condition(
					t,
					env,
					ba,
					accessConditions,
					cosiapi.ConditionResourcesValidated,
					metav1.ConditionTrue,
					cosiapi.ReasonValid,
				)
				return
			}
			rv := testenv.Condition(
				t,
				env,
				ba,
				accessConditions,
				cosiapi.ConditionResourcesValidated,
				metav1.ConditionFalse,
				tc.wantReason,
			)
			if !strings.Contains(rv.Message, tc.wantText) {
				t.Errorf("message %q does not contain %q", rv.Message, tc.wantText)
			}
			testenv.Condition(
				t,
				env,
				ba,
				accessConditions,
				cosiapi.ConditionProvisioned,
				metav1.ConditionFalse,
				cosiapi.ReasonProvisioningFailed,
			)
			get(t, ba)
			if ba.Status.DriverName != "" {
				t.Errorf("a rejected access was handed off to %s", ba.Status.DriverName)
			}
			// A rejected access that was never handed off is deleted without the sidecar.
			if err := env.Client.Delete(t.Context(), ba); err != nil {
				t.Fatal(err)
			}
			env.Gone(t, ba)
		})
	}
}

func TestAccessWaitsForClassAndClaim(t *testing.T) {
	t.Parallel()
	ac := accessClass()
	c := claim("class-of-" + uniqueName("later"))
	ba := access(ac.Name, c.Name)
	create(t, ba)
	rv := testenv.Condition(
		t,
		env,
		ba,
		accessConditions,
		cosiapi.ConditionResourcesValidated,
		metav1.ConditionUnknown,
		cosiapi.ReasonWaitingForResources,
	)
	if !strings.Contains(rv.Message, ac.Name) {
		t.Errorf("message %q does not name the class", rv.Message)
	}
	create(t, ac)
	testenv.Eventually(t, func() error {
		get(t, ba)
		if rv := meta.FindStatusCondition(
			ba.Status.Conditions,
			cosiapi.ConditionResourcesValidated,
		); rv == nil ||
			!strings.Contains(rv.Message, "BucketClaim "+c.Name+" does not exist") {
			return fmt.Errorf("not waiting for the claim: %+v", ba.Status.Conditions)
		}
		return nil
	})
	class := bucketClass(cosiapi.DeletionPolicyDelete)
	class.Name = c.Spec.BucketClassName
	create(t, class)
	create(t, c)
	provisionAsSidecar(t, boundBucket(t, c), metav1.ConditionTrue, cosiapi.ProtocolS3)
	testenv.Condition(
		t,
		env,
		ba,
		accessConditions,
		cosiapi.ConditionResourcesValidated,
		metav1.ConditionTrue,
		cosiapi.ReasonValid,
	)
}

func TestNoAccessToADeletingClaim(t *testing.T) {
	t.Parallel()
	c, b := provisionedClaim(t, cosiapi.ProtocolS3)
	// Hold the claim in deletion with a foreign finalizer, as if its deletion were in progress.
	testenv.Eventually(t, func() error { // the controller writes the claim too: retry conflicts
		get(t, c)
		c.Finalizers = append(c.Finalizers, "example.com/hold")
		return env.Client.Update(t.Context(), c)
	})
	if err := env.Client.Delete(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	ac := accessClass()
	create(t, ac)
	ba := access(ac.Name, c.Name)
	create(t, ba)
	rv := testenv.Condition(
		t,
		env,
		ba,
		accessConditions,
		cosiapi.ConditionResourcesValidated,
		metav1.ConditionFalse,
		cosiapi.ReasonInvalidReference,
	)
	if !strings.Contains(rv.Message, "being deleted") {
		t.Errorf("message %q", rv.Message)
	}
	testenv.Eventually(t, func() error {
		get(t, c)
		c.Finalizers = nil
		return env.Client.Update(t.Context(), c)
	})
	finishAsSidecar(t, b)
}

// TestControllerLeastPrivilege asks the API server what the controller's ServiceAccount may do.
func TestControllerLeastPrivilege(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		group, resource, subresource, verb string
		allowed                            bool
	}{
		{"objectstorage.k8s.io", "buckets", "", "create", true},
		{"objectstorage.k8s.io", "buckets", "", "delete", true},
		{"objectstorage.k8s.io", "bucketclaims", "", "patch", true},
		{"objectstorage.k8s.io", "bucketclaims", "status", "patch", true},
		{"objectstorage.k8s.io", "bucketclaims", "", "create", false},
		{"objectstorage.k8s.io", "bucketclaims", "", "delete", false},
		{"objectstorage.k8s.io", "bucketaccesses", "status", "patch", true},
		{"objectstorage.k8s.io", "bucketaccesses", "", "delete", false},
		{"objectstorage.k8s.io", "bucketclasses", "", "watch", true},
		{"objectstorage.k8s.io", "bucketclasses", "", "update", false},
		{"objectstorage.k8s.io", "bucketaccessclasses", "", "update", false},
		{"", "secrets", "", "get", false},
		{"", "secrets", "", "create", false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:serviceaccount:cosi-system:cosi-controller",
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group:       tc.group,
				Resource:    tc.resource,
				Subresource: tc.subresource,
				Verb:        tc.verb,
				Namespace:   testNamespace,
			},
		}}
		create(t, sar)
		if sar.Status.Allowed != tc.allowed {
			t.Errorf(
				"%s %s/%s %s: allowed=%v, want %v",
				tc.verb,
				tc.group,
				tc.resource,
				tc.subresource,
				sar.Status.Allowed,
				tc.allowed,
			)
		}
	}
}

// An access publishes its reference on its claims itself, before anything else: also when it waits
// for its class or its class forbids it. The claims are not woken by an access's creation.
func TestWaitingAndRefusedAccessesReferenceTheirClaims(t *testing.T) {
	t.Parallel()
	waitingFor, _ := provisionedClaim(t, cosiapi.ProtocolS3)
	refusedBy, _ := provisionedClaim(t, cosiapi.ProtocolS3)
	forbidding := accessClass(func(c *cosiapi.BucketAccessClass) {
		c.Spec.DisallowedBucketAccessModes.ObjectData = []cosiapi.BucketAccessMode{cosiapi.BucketAccessModeReadWrite}
	})
	create(t, forbidding)
	waiting := access(uniqueName("missing-class"), waitingFor.Name)
	refused := access(forbidding.Name, refusedBy.Name)
	create(t, waiting)
	create(t, refused)
	for _, c := range []*cosiapi.BucketClaim{waitingFor, refusedBy} {
		testenv.Eventually(t, func() error {
			get(t, c)
			if c.Annotations[cosiapi.AnnotationHasBucketAccessReferences] == "" {
				return fmt.Errorf("claim %s lacks %s", c.Name, cosiapi.AnnotationHasBucketAccessReferences)
			}
			return nil
		})
	}
	// Their deletion releases the claims.
	for i, ba := range []*cosiapi.BucketAccess{waiting, refused} {
		if err := env.Client.Delete(t.Context(), ba); err != nil {
			t.Fatal(err)
		}
		env.Gone(t, ba)
		c := []*cosiapi.BucketClaim{waitingFor, refusedBy}[i]
		testenv.Eventually(t, func() error {
			get(t, c)
			if c.Annotations[cosiapi.AnnotationHasBucketAccessReferences] != "" {
				return fmt.Errorf("claim %s still referenced", c.Name)
			}
			return nil
		})
	}
}

// The claim is not woken when an access publishes its reference, but it is when someone else adds
// the annotation to a claim no access references: the controller removes it.
func TestUnreferencedClaimLosesAnAddedReference(t *testing.T) {
	t.Parallel()
	c, _ := provisionedClaim(t, cosiapi.ProtocolS3)
	key := cosiapi.AnnotationHasBucketAccessReferences
	if err := patch.Annotation(t.Context(), env.Client, c, key, "true"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		get(t, c)
		if _, ok := c.Annotations[cosiapi.AnnotationHasBucketAccessReferences]; ok {
			return fmt.Errorf("claim %s keeps an annotation no access backs", c.Name)
		}
		return nil
	})
}

// TestClaimDeletionPastAccessesRefusedForGood: an access handed off and refused for good before
// phase 1 (no account ID) has no credentials, and the sidecar grants it nothing until it changes:
// it does not hold its claim, whatever refused it: COSI for an invalid class parameter, or the
// driver with a final code (InvalidArgument, OutOfRange) when asked for the account ID. A claim
// whose deletion waited on it goes on as soon as the refusal is written.
func TestClaimDeletionPastAccessesRefusedForGood(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		refused func(*cosiapi.BucketAccess)
	}{
		{"invalid class parameter", func(ba *cosiapi.BucketAccess) {
			meta.SetStatusCondition(&ba.Status.Conditions, metav1.Condition{
				Type: cosiapi.ConditionResourcesValidated, Status: metav1.ConditionFalse,
				Reason: cosiapi.ReasonInvalidParameter, Message: "parameters[objectstorage.k8s.io/x]: unknown",
			})
		}},
		{"driver refused the account", func(ba *cosiapi.BucketAccess) {
			meta.SetStatusCondition(&ba.Status.Conditions, metav1.Condition{
				Type: cosiapi.ConditionProvisionFailed, Status: metav1.ConditionTrue,
				Reason: cosiapi.ReasonDriverError, Message: "DriverGenerateBucketAccessId: InvalidArgument: no",
			})
			meta.SetStatusCondition(&ba.Status.Conditions, metav1.Condition{
				Type: cosiapi.ConditionProvisioned, Status: metav1.ConditionFalse,
				Reason: cosiapi.ReasonProvisioningFailed, Message: "DriverGenerateBucketAccessId: InvalidArgument: no",
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, b := provisionedClaim(t, cosiapi.ProtocolS3)
			ac := accessClass()
			create(t, ac)
			ba := access(ac.Name, c.Name)
			create(t, ba)
			testenv.Eventually(t, func() error {
				get(t, ba)
				if ba.Status.DriverName == "" {
					return fmt.Errorf("not handed off")
				}
				return nil
			})
			if err := env.Client.Delete(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			// The claim's deletion waits on the access, which the sidecar refuses afterwards: that
			// wakes the claim (nothing else would until the informer's resync, hours later).
			testenv.Condition(t, env, c, claimConditions, cosiapi.ConditionProvisioned, metav1.ConditionTrue,
				cosiapi.ReasonDeletionBlocked)
			testenv.Eventually(t, func() error {
				get(t, ba)
				tc.refused(ba)
				return env.Client.Status().Update(t.Context(), ba)
			})
			testenv.Eventually(t, func() error {
				get(t, b)
				if b.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted] == "" {
					return fmt.Errorf("the Bucket is not released: the refused access %s holds the claim", ba.Name)
				}
				return nil
			})
		})
	}
}
