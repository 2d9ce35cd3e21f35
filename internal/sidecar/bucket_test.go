package sidecar_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// deleteAsController deletes a Bucket the way the controller does for a deleted claim: annotate
// it, then delete it (Delete policy) or leave it (Retain).
func deleteAsController(t *testing.T, b *cosiapi.Bucket) {
	t.Helper()
	markClaimBeingDeleted(t, b)
	if err := env.Client.Delete(t.Context(), b); err != nil {
		t.Fatal(err)
	}
}

func TestDynamicBucket(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy          cosiapi.DeletionPolicy
		wantDriverEmpty bool
	}{
		{cosiapi.DeletionPolicyDelete, true},
		{cosiapi.DeletionPolicyRetain, false},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, memory.Config{})
			b := h.bucket(tc.policy, cosiapi.ProtocolS3)
			h.create(b)
			b = provisioned(t, b, bucketConditions)

			if b.Status.BucketID != b.Name {
				t.Errorf("status.bucketID = %q, want the memory driver's ID %q", b.Status.BucketID, b.Name)
			}
			if !slices.Equal(b.Status.Protocols, []cosiapi.Protocol{cosiapi.ProtocolS3}) {
				t.Errorf("status.protocols = %v", b.Status.Protocols)
			}
			if b.Status.BucketInfo["COSI_S3_BUCKET_NAME"] != b.Name || b.Status.BucketInfo["COSI_S3_ENDPOINT_URL"] == "" ||
				b.Status.BucketInfo[cosiapi.SecretKeyProtocol] != "S3" {
				t.Errorf("status.bucketInfo = %v", b.Status.BucketInfo)
			}
			if !controllerutil.ContainsFinalizer(b, cosiapi.FinalizerProtection) {
				t.Errorf("no protection finalizer: %v", b.Finalizers)
			}
			for _, typ := range []string{cosiapi.ConditionProvisionFailed} {
				if c := testenv.Condition(
					t,
					env,
					b,
					bucketConditions,
					typ,
					metav1.ConditionFalse,
					cosiapi.ReasonDriverSucceeded,
				); c.ObservedGeneration != b.Generation {
					t.Errorf("%s observedGeneration %d, generation %d", typ, c.ObservedGeneration, b.Generation)
				}
			}
			if h.calls.Count("DriverGenerateBucketId") != 1 || h.calls.Count("DriverCreateBucket") != 1 {
				t.Errorf("driver calls %v: want one DriverGenerateBucketId and one DriverCreateBucket", h.calls)
			}

			deleteAsController(t, b)
			env.Gone(t, b)
			if got := h.driver.Backend().BucketExists(b.Status.BucketID); got == tc.wantDriverEmpty {
				t.Errorf("after deleting a %s Bucket the backend bucket exists=%v", tc.policy, got)
			}
			wantDeletes := map[cosiapi.DeletionPolicy]int{
				cosiapi.DeletionPolicyDelete: 1,
				cosiapi.DeletionPolicyRetain: 0,
			}[tc.policy]
			if n := h.calls.Count("DriverDeleteBucket"); n != wantDeletes {
				t.Errorf("DriverDeleteBucket called %d times, want %d", n, wantDeletes)
			}
		})
	}
}

// TestDeletionWaitsForTheClaim: an admin deleting a Bucket whose claim still exists does not lose
// data; the bucket is deprovisioned only once the controller signals the claim is deleting, and
// the annotation alone (no deletion timestamp) deprovisions nothing.
func TestDeletionWaitsForTheClaim(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{})

	annotated := h.bucket(cosiapi.DeletionPolicyDelete)
	h.create(annotated)
	provisioned(t, annotated, bucketConditions)
	markClaimBeingDeleted(t, annotated)

	b := h.bucket(cosiapi.DeletionPolicyDelete)
	h.create(b)
	b = provisioned(t, b, bucketConditions)
	if err := env.Client.Delete(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	c := testenv.Condition(
		t,
		env,
		b,
		bucketConditions,
		cosiapi.ConditionProvisioned,
		metav1.ConditionTrue,
		cosiapi.ReasonDeletionBlocked,
	)
	if !strings.Contains(c.Message, b.Spec.BucketClaimRef.Name) {
		t.Errorf("the condition does not name the claim: %q", c.Message)
	}
	testenv.Never(t, time.Second, func() error {
		if n := h.calls.Count("DriverDeleteBucket"); n != 0 {
			return fmt.Errorf("DriverDeleteBucket called %d times before the claim was deleting", n)
		}
		return nil
	})

	markClaimBeingDeleted(t, b)
	env.Gone(t, b)
	if h.driver.Backend().BucketExists(b.Name) {
		t.Error("the backend bucket exists after deletion")
	}
	if !h.driver.Backend().BucketExists(annotated.Name) {
		t.Error("a Bucket with the annotation but no deletion timestamp was deprovisioned")
	}
}

func TestStaticBucket(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
	static := func(existing string, protocols ...cosiapi.Protocol) *cosiapi.Bucket {
		b := h.bucket(cosiapi.DeletionPolicyRetain, protocols...)
		b.Spec.ExistingBucketID = existing
		b.Spec.BucketClaimRef.UID = ""
		return b
	}

	t.Run("appears later", func(t *testing.T) {
		b := static("legacy-later")
		h.create(b)
		c := testenv.Condition(
			t,
			env,
			b,
			bucketConditions,
			cosiapi.ConditionProvisionFailed,
			metav1.ConditionTrue,
			cosiapi.ReasonDriverError,
		)
		if !strings.Contains(c.Message, "NotFound") {
			t.Errorf("ProvisionFailed message %q does not say NotFound", c.Message)
		}
		testenv.Condition(
			t,
			env,
			b,
			bucketConditions,
			cosiapi.ConditionProvisioned,
			metav1.ConditionUnknown,
			cosiapi.ReasonProvisioning,
		)
		waitForEvent(t, b, cosiapi.EventFailedCreateBucket)
		// The admin creates the bucket in the backend; the sidecar retries with backoff.
		if _, err := h.driver.DriverCreateBucket(
			t.Context(),
			&cosiproto.DriverCreateBucketRequest{BucketId: "legacy-later"},
		); err != nil {
			t.Fatal(err)
		}
		b = provisioned(t, b, bucketConditions)
		if b.Status.BucketID != "legacy-later" {
			t.Errorf("status.bucketID = %q", b.Status.BucketID)
		}
		if h.calls.Count("DriverCreateBucket/OK") != 0 || h.calls.Count("DriverGenerateBucketId") != 0 {
			t.Errorf("a static bucket was created: %v", h.calls)
		}
	})

	t.Run("incompatible is final", func(t *testing.T) {
		if _, err := h.driver.DriverCreateBucket(
			t.Context(),
			&cosiproto.DriverCreateBucketRequest{
				BucketId:   "legacy-versioned",
				Parameters: map[string]string{memory.ParamVersioning: "true"},
			},
		); err != nil {
			t.Fatal(err)
		}
		b := static("legacy-versioned")
		b.Spec.Parameters = map[string]string{memory.ParamVersioning: "false"}
		h.create(b)
		c := testenv.Condition(
			t,
			env,
			b,
			bucketConditions,
			cosiapi.ConditionProvisioned,
			metav1.ConditionFalse,
			cosiapi.ReasonProvisioningFailed,
		)
		if !strings.Contains(c.Message, "AlreadyExists") {
			t.Errorf("Provisioned message %q does not say AlreadyExists", c.Message)
		}
		before := h.calls.Count("DriverGetBucket/AlreadyExists")
		testenv.Never(t, time.Second, func() error {
			if n := h.calls.Count("DriverGetBucket/AlreadyExists"); n != before {
				return fmt.Errorf("a final error was retried: %d calls, then %d", before, n)
			}
			return nil
		})
	})

	t.Run("protocol the bucket lacks is final", func(t *testing.T) {
		if _, err := h.driver.DriverCreateBucket(
			t.Context(),
			&cosiproto.DriverCreateBucketRequest{BucketId: "legacy-s3"},
		); err != nil {
			t.Fatal(err)
		}
		b := static("legacy-s3", cosiapi.ProtocolGCS)
		h.create(b)
		testenv.Condition(
			t,
			env,
			b,
			bucketConditions,
			cosiapi.ConditionProvisioned,
			metav1.ConditionFalse,
			cosiapi.ReasonProvisioningFailed,
		)
	})

	t.Run("Retain never deletes", func(t *testing.T) {
		b := static("legacy-kept")
		if _, err := h.driver.DriverCreateBucket(
			t.Context(),
			&cosiproto.DriverCreateBucketRequest{BucketId: "legacy-kept"},
		); err != nil {
			t.Fatal(err)
		}
		h.create(b)
		provisioned(t, b, bucketConditions)
		deleteAsController(t, b)
		env.Gone(t, b)
		if !h.driver.Backend().BucketExists("legacy-kept") {
			t.Error("a retained imported bucket was deleted in the backend")
		}
	})
}

func TestTransientErrorsHeal(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{})
	h.faults.Set(0, memory.Fault{Method: "DriverCreateBucket", Code: 14 /* Unavailable */, Count: 3})
	b := h.bucket(cosiapi.DeletionPolicyDelete)
	h.create(b)
	provisioned(t, b, bucketConditions)
	testenv.Condition(
		t,
		env,
		b,
		bucketConditions,
		cosiapi.ConditionProvisionFailed,
		metav1.ConditionFalse,
		cosiapi.ReasonDriverSucceeded,
	)
	if ok, failed := h.calls.Count(
		"DriverCreateBucket/OK",
	), h.calls.Count(
		"DriverCreateBucket/Unavailable",
	); ok != 1 ||
		failed != 3 {
		t.Errorf("DriverCreateBucket: %d OK, %d Unavailable; want 1 and 3", ok, failed)
	}
	if n := h.calls.Count("DriverGenerateBucketId"); n != 1 {
		t.Errorf("DriverGenerateBucketId called %d times: the persisted ID must be reused", n)
	}
}

func TestFinalErrorIsNotRetried(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{})
	b := h.bucket(cosiapi.DeletionPolicyDelete)
	b.Spec.Parameters = map[string]string{memory.ParamVersioning: "maybe"}
	h.create(b)
	c := testenv.Condition(
		t,
		env,
		b,
		bucketConditions,
		cosiapi.ConditionProvisioned,
		metav1.ConditionFalse,
		cosiapi.ReasonProvisioningFailed,
	)
	if !strings.Contains(c.Message, "DriverGenerateBucketId: InvalidArgument") ||
		!strings.Contains(c.Message, "versioning") {
		t.Errorf("the condition does not carry the driver's message: %q", c.Message)
	}
	testenv.Never(t, time.Second, func() error {
		if n := h.calls.Count("DriverGenerateBucketId"); n != 1 {
			return fmt.Errorf("DriverGenerateBucketId called %d times; a final error must not be retried", n)
		}
		return nil
	})
	waitForEvent(t, b, cosiapi.EventFailedCreateBucket+": DriverGenerateBucketId")

	// A final error on a Bucket being deleted before it got an ID: nothing to delete in the backend.
	deleteAsController(t, b)
	env.Gone(t, b)
	if n := h.calls.Count("DriverDeleteBucket"); n != 0 {
		t.Errorf("DriverDeleteBucket called %d times for a bucket that never got an ID", n)
	}
}

// TestRestartBetweenPhases: a sidecar that stops after phase 1 and restarts must use the persisted
// ID: the driver sees one ID and ends with one bucket.
func TestRestartBetweenPhases(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{})
	h.faults.Set(0, memory.Fault{Method: "DriverCreateBucket", Code: 14 /* Unavailable */, Rate: 1})
	b := h.bucket(cosiapi.DeletionPolicyDelete)
	h.create(b)
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		if b.Status.BucketID == "" || h.calls.Count("DriverCreateBucket") == 0 {
			return fmt.Errorf("phase 1 not done yet")
		}
		return nil
	})
	h.stop()
	h.faults.Set(0)
	h.startSidecar()
	provisioned(t, b, bucketConditions)
	if n := h.calls.Count("DriverGenerateBucketId"); n != 1 {
		t.Errorf("DriverGenerateBucketId called %d times across the restart, want 1", n)
	}
	if got := h.driver.Backend().Buckets(); !slices.Equal(got, []string{b.Status.BucketID}) {
		t.Errorf("backend buckets %v, want exactly [%s]", got, b.Status.BucketID)
	}
}

// TestDeletionWaitsForTheGrantsOnIt: a Bucket released for deletion while an access still holds a
// grant on it waits, naming the access, and is deprovisioned once the access is gone. The grants
// are found through the grant records' index (GrantsByBucket, looked up in the grant namespace of
// the sidecar's own cache, which keeps only its driver's records): a lookup that found nothing
// would deprovision a bucket whose key is still handed out.
func TestDeletionWaitsForTheGrantsOnIt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{})
	a, b := h.provisionedBucket(cosiapi.ProtocolS3), h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, a, b), accessConditions)

	deleteAsController(t, b)
	c := testenv.Condition(t, env, b, bucketConditions, cosiapi.ConditionProvisioned, metav1.ConditionTrue,
		cosiapi.ReasonDeletionBlocked)
	if want := ba.Namespace + "/" + ba.Name; !strings.Contains(c.Message, want) {
		t.Errorf("the condition does not name the access %s: %q", want, c.Message)
	}
	if n := h.calls.Count("DriverDeleteBucket"); n != 0 {
		t.Errorf("DriverDeleteBucket called %d times while an access holds the bucket", n)
	}

	deleteAccess(t, ba)
	env.Gone(t, b)
	if h.driver.Backend().BucketExists(b.Name) {
		t.Error("the backend bucket exists after deletion")
	}
}

// TestLegacyGrantTakesTheLiveAccessNames: a grant an earlier version recorded on a Bucket names
// its access by UID and by a name that whoever may write Buckets could have written. Once the
// driver verified the account, the record migrated to a grant record takes the namespace, name and
// Secrets of the live access with that UID (found through the sidecar's UID index, registered at
// its first lookup), not the annotation's.
func TestLegacyGrantTakesTheLiveAccessNames(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{})
	b := h.bucket(cosiapi.DeletionPolicyDelete, cosiapi.ProtocolS3)
	h.create(b)
	b = provisioned(t, b, bucketConditions)
	// An access this sidecar never granted (nothing hands it off: no controller runs here).
	live := objects.BucketAccess(testNamespace, uniqueName("live"), "class",
		objects.Grant("claim", "creds-live", objects.ReadWrite))
	h.create(live)
	forged, err := json.Marshal(map[string]any{
		"namespace": testNamespace, "name": "no-such-access", "uid": live.UID,
		"accountID": cosiapi.AccountNamePrefix + string(live.UID), "protocol": "S3", "authenticationType": "Key",
		"bucketIDs": []string{b.Status.BucketID}, "secretNames": []string{"someone-elses"},
	})
	if err != nil {
		t.Fatal(err)
	}
	key := cosiapi.GroupName + "/grant-" + string(live.UID)
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		metav1.SetMetaDataAnnotation(&b.ObjectMeta, key, string(forged))
		return env.Client.Update(t.Context(), b)
	})
	record := &corev1.ConfigMap{}
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		if _, ok := b.Annotations[key]; ok {
			return fmt.Errorf("the annotation is still on the Bucket")
		}
		return env.Client.Get(t.Context(),
			client.ObjectKey{Namespace: sidecarNamespace, Name: "cosi-grant-" + string(live.UID)}, record)
	})
	var got struct {
		Namespace   string   `json:"namespace"`
		Name        string   `json:"name"`
		SecretNames []string `json:"secretNames"`
		BucketNames []string `json:"bucketNames"`
	}
	if err := json.Unmarshal([]byte(record.Data["grant.json"]), &got); err != nil {
		t.Fatal(err)
	}
	if got.Namespace != testNamespace || got.Name != live.Name || !slices.Equal(got.SecretNames, []string{"creds-live"}) ||
		!slices.Equal(got.BucketNames, []string{b.Name}) {
		t.Errorf("migrated record names %s/%s, Secrets %v, Buckets %v; want %s/%s, [creds-live], [%s]",
			got.Namespace, got.Name, got.SecretNames, got.BucketNames, testNamespace, live.Name, b.Name)
	}
}

// TestLegacyGrantDeletesNoOtherSecret: whoever may write Buckets, and nothing else, writes a
// legacy grant annotation naming a Secret of another namespace's workload and the UID of that
// Secret's owner (a ConfigMap here; a Deployment would do): the driver generates the account ID
// for any UID, so the record verifies. Its access does not exist, and the grant is revoked as an
// orphan: the workload's Secret must survive (it neither names the access in its label nor is
// owned by a BucketAccess, and the annotation's Secret names are not the sidecar's to trust).
func TestLegacyGrantDeletesNoOtherSecret(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{})
	b := h.bucket(cosiapi.DeletionPolicyDelete, cosiapi.ProtocolS3)
	h.create(b)
	b = provisioned(t, b, bucketConditions)
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: uniqueName("owner")}}
	h.create(owner)
	victim := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNamespace, Name: uniqueName("workload-secret"),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
			}},
		},
		StringData: map[string]string{"password": "kept"},
	}
	h.create(victim)
	forged, err := json.Marshal(map[string]any{
		"namespace": testNamespace, "name": "no-such-access", "uid": owner.UID,
		"accountID": cosiapi.AccountNamePrefix + string(owner.UID), "protocol": "S3", "authenticationType": "Key",
		"bucketIDs": []string{b.Status.BucketID}, "secretNames": []string{victim.Name},
	})
	if err != nil {
		t.Fatal(err)
	}
	key := cosiapi.GroupName + "/grant-" + string(owner.UID)
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		metav1.SetMetaDataAnnotation(&b.ObjectMeta, key, string(forged))
		return env.Client.Update(t.Context(), b)
	})
	// Migrated, then revoked as an orphan: the annotation and the record go.
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		if _, ok := b.Annotations[key]; ok {
			return fmt.Errorf("the annotation is still on the Bucket")
		}
		err := env.Client.Get(t.Context(),
			client.ObjectKey{Namespace: sidecarNamespace, Name: "cosi-grant-" + string(owner.UID)}, &corev1.ConfigMap{})
		if err == nil {
			return fmt.Errorf("the migrated record is not revoked yet")
		}
		return client.IgnoreNotFound(err)
	})
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(victim), victim); err != nil {
		t.Errorf("the workload's Secret, owned by a ConfigMap with the forged UID: %v", err)
	}
}
