package controller_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
)

func TestDynamicClaim(t *testing.T) {
	t.Parallel()
	class := bucketClass(cosiapi.DeletionPolicyDelete)
	create(t, class)
	c := claim(class.Name, cosiapi.ProtocolS3)
	create(t, c)
	b := boundBucket(t, c)

	if want := cosiapi.BucketNamePrefix + string(c.UID); c.Status.BoundBucketName != want {
		t.Errorf("boundBucketName = %q, want %q", c.Status.BoundBucketName, want)
	}
	if !controllerutil.ContainsFinalizer(c, cosiapi.FinalizerProtection) {
		t.Error("the claim has no protection finalizer")
	}
	if controllerutil.ContainsFinalizer(b, cosiapi.FinalizerProtection) {
		t.Error("the Bucket was created with the sidecar's protection finalizer: without a sidecar it could not go")
	}
	want := cosiapi.BucketSpec{
		DriverName:     driverName,
		DeletionPolicy: cosiapi.DeletionPolicyDelete,
		Protocols:      []cosiapi.Protocol{cosiapi.ProtocolS3},
		Parameters:     class.Spec.Parameters,
		BucketClaimRef: cosiapi.BucketClaimReference{Name: c.Name, Namespace: c.Namespace, UID: c.UID},
	}
	if b.Spec.DriverName != want.DriverName || b.Spec.DeletionPolicy != want.DeletionPolicy ||
		!slices.Equal(b.Spec.Protocols, want.Protocols) || !maps.Equal(b.Spec.Parameters, want.Parameters) ||
		b.Spec.BucketClaimRef != want.BucketClaimRef {
		t.Errorf("Bucket spec %+v\nwant %+v", b.Spec, want)
	}
	testenv.Condition(
		t,
		env,
		c,
		claimConditions,
		cosiapi.ConditionProvisioned,
		metav1.ConditionUnknown,
		cosiapi.ReasonProvisioning,
	)

	provisionAsSidecar(t, b, metav1.ConditionTrue, cosiapi.ProtocolS3, cosiapi.ProtocolGCS)
	p := testenv.Condition(
		t,
		env,
		c,
		claimConditions,
		cosiapi.ConditionProvisioned,
		metav1.ConditionTrue,
		cosiapi.ReasonProvisioned,
	)
	if p.ObservedGeneration != c.Generation {
		t.Errorf("observedGeneration %d, generation %d", p.ObservedGeneration, c.Generation)
	}
	testenv.Condition(
		t,
		env,
		c,
		claimConditions,
		cosiapi.ConditionResourcesValidated,
		metav1.ConditionTrue,
		cosiapi.ReasonValid,
	)
	if !slices.Equal(c.Status.Protocols, []cosiapi.Protocol{cosiapi.ProtocolS3, cosiapi.ProtocolGCS}) {
		t.Errorf("claim protocols %v, want the Bucket's", c.Status.Protocols)
	}

	// Reconciling a provisioned claim again writes nothing: no new transition times, no write.
	// Condition times have a resolution of one second: let one pass, or a new time would look
	// the same.
	time.Sleep(1100 * time.Millisecond)
	get(t, c)
	c.Annotations = map[string]string{"example.com/touched": "true"} // wakes the reconciler
	if err := env.Client.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	touched := c.ResourceVersion
	testenv.Never(t, time.Second, func() error {
		get(t, c)
		if c.ResourceVersion != touched {
			return fmt.Errorf("a provisioned claim was written again on reconcile: status %+v", c.Status.Conditions)
		}
		return nil
	})
}

// TestClaimMirrorsTheBucket: True and False are copied, Unknown is not; ProvisionFailed is
// mirrored and reported as an event; protocols the Bucket lacks invalidate the claim.
func TestClaimMirrorsTheBucket(t *testing.T) {
	t.Parallel()
	class := bucketClass(cosiapi.DeletionPolicyDelete)
	create(t, class)

	t.Run("False is copied, with ProvisionFailed and an event", func(t *testing.T) {
		t.Parallel()
		c := claim(class.Name)
		create(t, c)
		b := boundBucket(t, c)
		testenv.Eventually(t, func() error {
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
				return err
			}
			b.Status.Conditions = []metav1.Condition{
				{
					Type:               cosiapi.ConditionProvisioned,
					Status:             metav1.ConditionFalse,
					Reason:             cosiapi.ReasonProvisioningFailed,
					Message:            "DriverCreateBucket: InvalidArgument: bad region",
					LastTransitionTime: metav1.Now(),
				},
				{
					Type:               cosiapi.ConditionProvisionFailed,
					Status:             metav1.ConditionTrue,
					Reason:             cosiapi.ReasonDriverError,
					Message:            "DriverCreateBucket: InvalidArgument: bad region",
					LastTransitionTime: metav1.Now(),
				},
			}
			return env.Client.Status().Update(t.Context(), b)
		})
		pc := testenv.Condition(
			t,
			env,
			c,
			claimConditions,
			cosiapi.ConditionProvisioned,
			metav1.ConditionFalse,
			cosiapi.ReasonProvisioningFailed,
		)
		if !strings.Contains(pc.Message, "bad region") {
			t.Errorf("claim message %q", pc.Message)
		}
		testenv.Condition(
			t,
			env,
			c,
			claimConditions,
			cosiapi.ConditionProvisionFailed,
			metav1.ConditionTrue,
			cosiapi.ReasonDriverError,
		)
		testenv.Eventually(t, func() error {
			var list corev1.EventList
			if err := env.Client.List(t.Context(), &list, client.InNamespace(testNamespace)); err != nil {
				return err
			}
			for _, e := range list.Items {
				if e.InvolvedObject.Name == c.Name && e.Reason == cosiapi.EventFailedCreateBucket &&
					strings.Contains(e.Message, "bad region") {
					return nil
				}
			}
			return fmt.Errorf("no %s event on the claim", cosiapi.EventFailedCreateBucket)
		})
	})

	t.Run("Unknown is not copied", func(t *testing.T) {
		t.Parallel()
		c := claim(class.Name)
		create(t, c)
		b := boundBucket(t, c)
		provisionAsSidecar(t, b, metav1.ConditionUnknown)
		testenv.Condition(
			t,
			env,
			c,
			claimConditions,
			cosiapi.ConditionProvisioned,
			metav1.ConditionUnknown,
			cosiapi.ReasonProvisioning,
		)
	})

	t.Run("a protocol the Bucket lacks", func(t *testing.T) {
		t.Parallel()
		c := claim(class.Name, cosiapi.ProtocolS3, cosiapi.ProtocolAzure)
		create(t, c)
		provisionAsSidecar(t, boundBucket(t, c), metav1.ConditionTrue, cosiapi.ProtocolS3)
		rv := testenv.Condition(
			t,
			env,
			c,
			claimConditions,
			cosiapi.ConditionResourcesValidated,
			metav1.ConditionFalse,
			cosiapi.ReasonUnsupportedProtocol,
		)
		if !strings.Contains(rv.Message, "Azure") {
			t.Errorf("message %q does not name the missing protocol", rv.Message)
		}
	})
}

func TestClaimWaitsForItsClass(t *testing.T) {
	t.Parallel()
	class := bucketClass(cosiapi.DeletionPolicyDelete)
	c := claim(class.Name)
	create(t, c)
	rv := testenv.Condition(
		t,
		env,
		c,
		claimConditions,
		cosiapi.ConditionResourcesValidated,
		metav1.ConditionUnknown,
		cosiapi.ReasonWaitingForResources,
	)
	if !strings.Contains(rv.Message, class.Name) {
		t.Errorf("message %q does not name the class", rv.Message)
	}
	if c.Status.BoundBucketName != "" {
		t.Errorf("bound to %q without a class", c.Status.BoundBucketName)
	}
	create(t, class) // the class watch wakes the claim
	boundBucket(t, c)
}

func TestBucketWentMissing(t *testing.T) {
	t.Parallel()
	class := bucketClass(cosiapi.DeletionPolicyDelete)
	create(t, class)
	c := claim(class.Name)
	create(t, c)
	b := boundBucket(t, c)
	provisionAsSidecar(t, b, metav1.ConditionTrue, cosiapi.ProtocolS3)
	testenv.Condition(
		t,
		env,
		c,
		claimConditions,
		cosiapi.ConditionResourcesValidated,
		metav1.ConditionTrue,
		cosiapi.ReasonValid,
	)

	if err := env.Client.Delete(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	finishAsSidecar(t, b) // an admin forced it away
	env.Gone(t, b)
	rv := testenv.Condition(
		t,
		env,
		c,
		claimConditions,
		cosiapi.ConditionResourcesValidated,
		metav1.ConditionFalse,
		cosiapi.ReasonInvalidReference,
	)
	if !strings.Contains(rv.Message, "went missing") {
		t.Errorf("message %q", rv.Message)
	}
	testenv.Never(t, time.Second, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), &cosiapi.Bucket{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the missing Bucket was re-created: %w", err)
		}
		return nil
	})
}

func staticBucket(claimName string) *cosiapi.Bucket {
	return &cosiapi.Bucket{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("static")},
		Spec: cosiapi.BucketSpec{
			DriverName:       driverName,
			DeletionPolicy:   cosiapi.DeletionPolicyRetain,
			ExistingBucketID: "legacy",
			BucketClaimRef:   cosiapi.BucketClaimReference{Name: claimName, Namespace: testNamespace},
		},
	}
}

func TestStaticClaim(t *testing.T) {
	t.Parallel()
	t.Run("binds to a Bucket that appears later", func(t *testing.T) {
		t.Parallel()
		c := &cosiapi.BucketClaim{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("claim"), Namespace: testNamespace}}
		b := staticBucket(c.Name)
		c.Spec.ExistingBucketName = b.Name
		create(t, c)
		testenv.Condition(
			t,
			env,
			c,
			claimConditions,
			cosiapi.ConditionResourcesValidated,
			metav1.ConditionUnknown,
			cosiapi.ReasonWaitingForResources,
		)
		create(t, b) // the Bucket watch wakes the claim
		testenv.Eventually(t, func() error {
			get(t, b)
			if b.Spec.BucketClaimRef.UID != c.UID {
				return fmt.Errorf("bucket claimRef uid %q, want %q", b.Spec.BucketClaimRef.UID, c.UID)
			}
			return nil
		})
		// The claim's status is written after the Bucket's UID, in the same reconcile.
		testenv.Eventually(t, func() error {
			get(t, c)
			if c.Status.BoundBucketName != b.Name {
				return fmt.Errorf("boundBucketName %q, want %q", c.Status.BoundBucketName, b.Name)
			}
			return nil
		})
		provisionAsSidecar(t, b, metav1.ConditionTrue, cosiapi.ProtocolS3)
		testenv.Condition(
			t,
			env,
			c,
			claimConditions,
			cosiapi.ConditionProvisioned,
			metav1.ConditionTrue,
			cosiapi.ReasonProvisioned,
		)
	})
	t.Run("does not bind to a Bucket reserved for another claim", func(t *testing.T) {
		t.Parallel()
		b := staticBucket("someone-else")
		create(t, b)
		c := &cosiapi.BucketClaim{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("claim"), Namespace: testNamespace},
			Spec: cosiapi.BucketClaimSpec{ExistingBucketName: b.Name}}
		create(t, c)
		rv := testenv.Condition(
			t,
			env,
			c,
			claimConditions,
			cosiapi.ConditionResourcesValidated,
			metav1.ConditionFalse,
			cosiapi.ReasonInvalidReference,
		)
		if !strings.Contains(rv.Message, "someone-else") {
			t.Errorf("message %q", rv.Message)
		}
		testenv.Condition(
			t,
			env,
			c,
			claimConditions,
			cosiapi.ConditionProvisioned,
			metav1.ConditionFalse,
			cosiapi.ReasonProvisioningFailed,
		)
		get(t, b)
		if b.Spec.BucketClaimRef.UID != "" {
			t.Errorf("the other claim's Bucket was bound: uid %q", b.Spec.BucketClaimRef.UID)
		}
		// The claim that never bound can be deleted, and leaves the Bucket alone.
		if err := env.Client.Delete(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		env.Gone(t, c)
		get(t, b)
		if _, ok := b.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted]; ok || b.DeletionTimestamp != nil {
			t.Errorf("deleting an unbound claim touched the Bucket: %v", b.Annotations)
		}
	})
}

func TestClaimDeletion(t *testing.T) {
	t.Parallel()
	for _, policy := range []cosiapi.DeletionPolicy{cosiapi.DeletionPolicyDelete, cosiapi.DeletionPolicyRetain} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			class := bucketClass(policy)
			create(t, class)
			c := claim(class.Name)
			create(t, c)
			b := boundBucket(t, c)
			provisionAsSidecar(t, b, metav1.ConditionTrue, cosiapi.ProtocolS3)
			testenv.Condition(
				t,
				env,
				c,
				claimConditions,
				cosiapi.ConditionProvisioned,
				metav1.ConditionTrue,
				cosiapi.ReasonProvisioned,
			)
			// The class may be gone: the Bucket carries what deletion needs.
			if err := env.Client.Delete(t.Context(), class); err != nil {
				t.Fatal(err)
			}

			if err := env.Client.Delete(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, func() error {
				get(t, b)
				if b.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted] == "" {
					return fmt.Errorf("the Bucket lacks the %s annotation", cosiapi.AnnotationBucketClaimBeingDeleted)
				}
				if deleting := b.DeletionTimestamp != nil; deleting != (policy == cosiapi.DeletionPolicyDelete) {
					return fmt.Errorf("%s policy: Bucket deleting=%v", policy, deleting)
				}
				return nil
			})
			if policy == cosiapi.DeletionPolicyDelete {
				// The claim waits until the sidecar has deleted the bucket.
				testenv.Condition(t, env, c, claimConditions, cosiapi.ConditionProvisioned, metav1.ConditionTrue,
					cosiapi.ReasonDeleting)
				finishAsSidecar(t, b)
			}
			env.Gone(t, c)
		})
	}
}

// TestAdminDeletesABucket: a Bucket deleted while its claim exists waits; it is released for
// deprovisioning when the claim goes, or at once when it has no claim.
func TestAdminDeletesABucket(t *testing.T) {
	t.Parallel()
	class := bucketClass(cosiapi.DeletionPolicyRetain)
	create(t, class)
	c := claim(class.Name)
	create(t, c)
	b := boundBucket(t, c)
	provisionAsSidecar(t, b, metav1.ConditionTrue, cosiapi.ProtocolS3)
	if err := env.Client.Delete(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	testenv.Never(t, time.Second, func() error {
		get(t, b)
		if b.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted] != "" {
			return fmt.Errorf("the Bucket was released while its claim exists")
		}
		return nil
	})
	if err := env.Client.Delete(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		get(t, b)
		if b.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted] == "" {
			return fmt.Errorf("not released after the claim was deleted")
		}
		return nil
	})

	orphan := staticBucket("never-created")
	orphan.Finalizers = []string{cosiapi.FinalizerProtection}
	create(t, orphan)
	if err := env.Client.Delete(t.Context(), orphan); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		get(t, orphan)
		if orphan.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted] == "" {
			return fmt.Errorf("a deleted Bucket without a claim was not released")
		}
		return nil
	})
	finishAsSidecar(t, orphan)
	finishAsSidecar(t, b)
}

// TestUnprovisionedBucketIsCreatedAgain: a bound Bucket that disappears before it was provisioned
// is created again, with the same name (so the driver sees the same bucket ID).
func TestUnprovisionedBucketIsCreatedAgain(t *testing.T) {
	t.Parallel()
	class := bucketClass(cosiapi.DeletionPolicyDelete)
	create(t, class)
	c := claim(class.Name)
	create(t, c)
	b := boundBucket(t, c)
	oldUID := b.UID
	if err := env.Client.Delete(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	finishAsSidecar(t, b)
	testenv.Eventually(t, func() error {
		again := &cosiapi.Bucket{}
		again.Name = b.Name
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(again), again); err != nil {
			return err
		}
		if again.UID == oldUID {
			return fmt.Errorf("not created again yet")
		}
		return nil
	})
}

// Issue 25, item 7: a BucketClass naming a driver that no sidecar serves (none serves driverName
// in these tests) leaves no undeletable Bucket: the Bucket goes with its claim (Delete), or when
// an admin deletes it (Retain).
func TestClaimOfAnUnservedDriverCanBeDeleted(t *testing.T) {
	t.Parallel()
	for _, policy := range []cosiapi.DeletionPolicy{cosiapi.DeletionPolicyDelete, cosiapi.DeletionPolicyRetain} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			class := bucketClass(policy)
			create(t, class)
			c := claim(class.Name)
			create(t, c)
			b := boundBucket(t, c)
			if err := env.Client.Delete(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			env.Gone(t, c)
			if policy == cosiapi.DeletionPolicyRetain {
				get(t, b)
				if b.DeletionTimestamp != nil || b.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted] == "" {
					t.Fatalf("retained Bucket: deleting=%v annotations %v", b.DeletionTimestamp != nil, b.Annotations)
				}
				if err := env.Client.Delete(t.Context(), b); err != nil { // the admin's clean-up
					t.Fatal(err)
				}
			}
			env.Gone(t, b)
		})
	}
}

// Issue 25, item 10: a static claim whose bound Bucket goes missing keeps reporting the loss
// (ResourcesValidated False) instead of going back to waiting, and keeps its Provisioned status.
func TestStaticClaimKeepsReportingALostBucket(t *testing.T) {
	t.Parallel()
	c := &cosiapi.BucketClaim{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("claim"), Namespace: testNamespace}}
	b := staticBucket(c.Name)
	c.Spec.ExistingBucketName = b.Name
	create(t, b)
	create(t, c)
	testenv.Eventually(t, func() error {
		get(t, b)
		if b.Spec.BucketClaimRef.UID != c.UID {
			return fmt.Errorf("not bound yet")
		}
		return nil
	})
	provisionAsSidecar(t, b, metav1.ConditionTrue, cosiapi.ProtocolS3)
	testenv.Condition(t, env, c, claimConditions, cosiapi.ConditionProvisioned, metav1.ConditionTrue,
		cosiapi.ReasonProvisioned)

	if err := env.Client.Delete(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	finishAsSidecar(t, b) // an admin forced it away
	env.Gone(t, b)
	rv := testenv.Condition(t, env, c, claimConditions, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse,
		cosiapi.ReasonInvalidReference)
	if !strings.Contains(rv.Message, "went missing") {
		t.Errorf("message %q", rv.Message)
	}
	testenv.Never(t, time.Second, func() error {
		get(t, c)
		if !meta.IsStatusConditionTrue(c.Status.Conditions, cosiapi.ConditionProvisioned) ||
			!meta.IsStatusConditionFalse(c.Status.Conditions, cosiapi.ConditionResourcesValidated) {
			return fmt.Errorf("the claim stopped reporting the loss: %+v", c.Status.Conditions)
		}
		return nil
	})
}

// occurrences counts how often an event with the reason and message start was recorded about
// obj: an event recorded again is written once, with a count (events.k8s.io series).
func occurrences(t *testing.T, obj client.Object, reason, message string) int {
	t.Helper()
	var list corev1.EventList
	if err := env.Client.List(t.Context(), &list, client.InNamespace(obj.GetNamespace())); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range list.Items {
		if ev.InvolvedObject.UID != obj.GetUID() || ev.Reason != reason || !strings.HasPrefix(ev.Message, message) {
			continue
		}
		count := max(1, int(ev.Count))
		if ev.Series != nil {
			count = max(count, int(ev.Series.Count))
		}
		n += count
	}
	return n
}

// Issue 25, item 10: the "went missing" event is recorded once, not on every reconcile.
func TestBucketWentMissingIsReportedOnce(t *testing.T) {
	t.Parallel()
	class := bucketClass(cosiapi.DeletionPolicyDelete)
	create(t, class)
	c := claim(class.Name)
	create(t, c)
	b := boundBucket(t, c)
	provisionAsSidecar(t, b, metav1.ConditionTrue, cosiapi.ProtocolS3)
	testenv.Condition(t, env, c, claimConditions, cosiapi.ConditionProvisioned, metav1.ConditionTrue,
		cosiapi.ReasonProvisioned)
	if err := env.Client.Delete(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	finishAsSidecar(t, b)
	testenv.Condition(t, env, c, claimConditions, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse,
		cosiapi.ReasonInvalidReference)
	// Each new access to the claim reconciles it again.
	ac := accessClass()
	create(t, ac)
	for range 3 {
		ba := access(ac.Name, c.Name)
		create(t, ba)
		testenv.Condition(t, env, ba, accessConditions, cosiapi.ConditionResourcesValidated, metav1.ConditionUnknown,
			cosiapi.ReasonWaitingForResources)
	}
	testenv.Eventually(t, func() error {
		if n := occurrences(t, c, cosiapi.EventFailedCreateBucket, "bound Bucket"); n == 0 {
			return fmt.Errorf("no event says the Bucket went missing")
		}
		return nil
	})
	testenv.Never(t, time.Second, func() error {
		if n := occurrences(t, c, cosiapi.EventFailedCreateBucket, "bound Bucket"); n != 1 {
			return fmt.Errorf("the Bucket's loss was reported %d times, want once", n)
		}
		return nil
	})
}

// Issue 25, item 10: a blocked deletion keeps the claim's Provisioned status (here False, from a
// Bucket that failed), with reason DeletionBlocked, on every reconcile: it does not turn Unknown.
func TestBlockedDeletionKeepsConditions(t *testing.T) {
	t.Parallel()
	class := bucketClass(cosiapi.DeletionPolicyDelete)
	create(t, class)
	c := claim(class.Name)
	create(t, c)
	b := boundBucket(t, c)
	provisionAsSidecar(t, b, metav1.ConditionFalse)
	testenv.Condition(t, env, c, claimConditions, cosiapi.ConditionProvisioned, metav1.ConditionFalse,
		cosiapi.ReasonProvisioningFailed)
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
	testenv.Condition(t, env, c, claimConditions, cosiapi.ConditionProvisioned, metav1.ConditionFalse,
		cosiapi.ReasonDeletionBlocked)
	other := access(ac.Name, c.Name) // refused, and reconciles the claim again
	create(t, other)
	testenv.Never(t, 1500*time.Millisecond, func() error {
		get(t, c)
		if p := meta.FindStatusCondition(c.Status.Conditions, cosiapi.ConditionProvisioned); p == nil ||
			p.Status != metav1.ConditionFalse || p.Reason != cosiapi.ReasonDeletionBlocked {
			return fmt.Errorf("a blocked deletion changed Provisioned: %+v", p)
		}
		return nil
	})
	for _, a := range []*cosiapi.BucketAccess{ba, other} {
		if err := env.Client.Delete(t.Context(), a); err != nil {
			t.Fatal(err)
		}
	}
	revokeAsSidecar(t, ba)
	finishAsSidecar(t, b)
	env.Gone(t, c)
}

// Issue 25, item 18: deleting a claim and releasing a Bucket whose claim is gone do not list the
// BucketAccesses of the namespace or cluster uncached.
func TestDeletionListsNoAccessesUncached(t *testing.T) {
	t.Parallel()
	before := uncachedAccessLists.Load()
	c, b := provisionedClaim(t, cosiapi.ProtocolS3)
	ac := accessClass()
	create(t, ac)
	ba := access(ac.Name, c.Name)
	create(t, ba)
	testenv.Condition(t, env, ba, accessConditions, cosiapi.ConditionResourcesValidated, metav1.ConditionTrue,
		cosiapi.ReasonValid)
	for _, o := range []client.Object{ba, c} {
		if err := env.Client.Delete(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	revokeAsSidecar(t, ba)
	finishAsSidecar(t, b)
	env.Gone(t, c)

	// A claim whose finalizer a user removed: its Bucket is released by the Bucket reconciler.
	c2, b2 := provisionedClaim(t, cosiapi.ProtocolS3)
	testenv.Eventually(t, func() error {
		get(t, c2)
		c2.Finalizers = nil
		return env.Client.Update(t.Context(), c2)
	})
	if err := env.Client.Delete(t.Context(), c2); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		get(t, b2)
		if b2.DeletionTimestamp == nil {
			return fmt.Errorf("the Bucket of a claim that is gone was not released")
		}
		return nil
	})
	finishAsSidecar(t, b2)
	if n := uncachedAccessLists.Load() - before; n > 0 {
		t.Errorf("the controller listed BucketAccesses uncached %d times", n)
	}
}

// Issue 25, item 12: a claim's deletion is counted once, by the reconcile that removed its
// finalizer, not again by a reconcile that ran on a stale copy of the claim (a cache that has
// not seen it go yet, held here): the finalizer's removal finds the claim gone, which is not a
// removal.
func TestClaimDeletionIsCountedOnce(t *testing.T) {
	t.Parallel()
	driver := uniqueName("count") + ".controller-test.cosi.io"
	class := objects.BucketClass(uniqueName("class"), driver, cosiapi.DeletionPolicyRetain)
	create(t, class)
	c := claim(class.Name, cosiapi.ProtocolS3)
	create(t, c)
	b := boundBucket(t, c)
	provisionAsSidecar(t, b, metav1.ConditionTrue, cosiapi.ProtocolS3)
	heldDeletions.hold(t, c.Name)
	if err := env.Client.Delete(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	env.Gone(t, c)
	testenv.Eventually(t, func() error {
		if n := operationCount(t, driver, "BucketClaim", "Delete"); n != 1 {
			return fmt.Errorf("BucketClaim Delete counted %v times", n)
		}
		return nil
	})
	// A change of its Bucket wakes the claim's reconcile, on the copy the cache still has:
	// deleting, with its finalizer. It fences an access that names the claim (an event shows that
	// it ran), then removes the finalizer again.
	ac := accessClass()
	create(t, ac)
	ba := access(ac.Name, c.Name)
	create(t, ba)
	// Changed until the reconcile ran: the first change may reach the cache before the access.
	protocols := [][]cosiapi.Protocol{{cosiapi.ProtocolS3}, {cosiapi.ProtocolS3, cosiapi.ProtocolGCS}}
	changes := 0
	testenv.Eventually(t, func() error {
		if occurrences(t, ba, cosiapi.EventFailedGrantAccess, "BucketClaim "+c.Name+" (uid") == 0 {
			changes++
			provisionAsSidecar(t, b, metav1.ConditionTrue, protocols[changes%2]...)
			return fmt.Errorf("the claim's stale reconcile did not run yet")
		}
		return nil
	})
	testenv.Never(t, time.Second, func() error {
		if n := operationCount(t, driver, "BucketClaim", "Delete"); n != 1 {
			return fmt.Errorf("BucketClaim Delete counted %v times, want once", n)
		}
		return nil
	})
}

// TestControllerKeepsBucketInfo: the controller's cache holds no bucketInfo, and its writes of a
// Bucket (binding it, marking its claim's deletion) leave the sidecar's bucketInfo as it was.
func TestControllerKeepsBucketInfo(t *testing.T) {
	t.Parallel()
	c := &cosiapi.BucketClaim{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("claim"), Namespace: testNamespace}}
	b := staticBucket(c.Name)
	c.Spec.ExistingBucketName = b.Name
	create(t, b)
	provisionAsSidecar(t, b, metav1.ConditionTrue, cosiapi.ProtocolS3)
	info := map[string]string{"COSI_PROTOCOL": "S3", "COSI_S3_BUCKET_NAME": b.Name, "COSI_S3_DEFAULT_REGION": "r1"}
	testenv.Eventually(t, func() error {
		get(t, b)
		b.Status.BucketInfo = info
		return env.Client.Status().Update(t.Context(), b)
	})
	create(t, c)
	testenv.Condition(t, env, c, claimConditions, cosiapi.ConditionProvisioned, metav1.ConditionTrue,
		cosiapi.ReasonProvisioned)
	get(t, b)
	if b.Spec.BucketClaimRef.UID != c.UID {
		t.Fatalf("bucket claimRef uid %q, want %q", b.Spec.BucketClaimRef.UID, c.UID)
	}
	if !maps.Equal(b.Status.BucketInfo, info) {
		t.Errorf("after binding: bucketInfo %v, want %v", b.Status.BucketInfo, info)
	}
	if err := env.Client.Delete(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	env.Gone(t, c)
	get(t, b)
	if b.Annotations[cosiapi.AnnotationBucketClaimBeingDeleted] == "" {
		t.Fatalf("the Bucket lacks the %s annotation", cosiapi.AnnotationBucketClaimBeingDeleted)
	}
	if !maps.Equal(b.Status.BucketInfo, info) {
		t.Errorf("after the claim's deletion: bucketInfo %v, want %v", b.Status.BucketInfo, info)
	}
}
