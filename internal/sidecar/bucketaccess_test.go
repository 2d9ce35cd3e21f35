package sidecar_test

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// access creates a BucketAccess for the buckets and hands it off to the harness's driver, as the
// controller does: status.driverName, authenticationType, parameters and accessedBuckets. It is
// created in the namespace of the first Bucket's claim.
func (h *harness) access(
	protocol cosiapi.Protocol,
	auth cosiapi.AuthenticationType,
	buckets ...*cosiapi.Bucket,
) *cosiapi.BucketAccess {
	h.t.Helper()
	return h.accessWith(map[string]string{memory.ParamSASExpiry: "1h"}, protocol, auth, buckets...)
}

// accessWith is access with the class parameters params in status, as the controller copies them.
func (h *harness) accessWith(
	params map[string]string,
	protocol cosiapi.Protocol,
	auth cosiapi.AuthenticationType,
	buckets ...*cosiapi.Bucket,
) *cosiapi.BucketAccess {
	h.t.Helper()
	namespace := testNamespace
	if len(buckets) > 0 {
		namespace = buckets[0].Spec.BucketClaimRef.Namespace
	}
	ba := &cosiapi.BucketAccess{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("access"), Namespace: namespace},
		Spec:       cosiapi.BucketAccessSpec{BucketAccessClassName: "standard", Protocol: protocol},
	}
	if auth == cosiapi.AuthenticationTypeServiceAccount {
		ba.Spec.ServiceAccountName = "workload"
	}
	for i, b := range buckets {
		modes := cosiapi.BucketAccessModes{ObjectData: cosiapi.BucketAccessModeReadWrite}
		if i > 0 {
			modes = cosiapi.BucketAccessModes{ObjectData: cosiapi.BucketAccessModeReadOnly}
		}
		ba.Spec.BucketClaims = append(ba.Spec.BucketClaims, cosiapi.BucketClaimAccess{
			BucketClaimName: b.Spec.BucketClaimRef.Name, AccessSecretName: uniqueName("creds"), AccessModes: modes,
		})
	}
	h.create(ba)
	ba.Status = cosiapi.BucketAccessStatus{
		DriverName:         h.name,
		AuthenticationType: auth,
		Parameters:         params,
	}
	for _, b := range buckets {
		ba.Status.AccessedBuckets = append(ba.Status.AccessedBuckets, cosiapi.AccessedBucket{
			BucketClaimName: b.Spec.BucketClaimRef.Name, BucketName: b.Name, BucketID: b.Status.BucketID,
		})
	}
	if err := env.Client.Status().Update(h.t.Context(), ba); err != nil {
		h.t.Fatal(err)
	}
	return ba
}

func (h *harness) provisionedBucket(protocols ...cosiapi.Protocol) *cosiapi.Bucket {
	h.t.Helper()
	b := h.bucket(cosiapi.DeletionPolicyDelete, protocols...)
	h.create(b)
	return provisioned(h.t, b, bucketConditions)
}

// refreshedBucket is provisionedBucket of a class that opts in to the periodic refresh of its
// dynamically provisioned Buckets' information (cosiapi.ParameterRefreshBucketInfo).
func (h *harness) refreshedBucket(protocols ...cosiapi.Protocol) *cosiapi.Bucket {
	h.t.Helper()
	b := h.bucket(cosiapi.DeletionPolicyDelete, protocols...)
	b.Spec.Parameters = map[string]string{cosiapi.ParameterRefreshBucketInfo: "true"}
	h.create(b)
	return provisioned(h.t, b, bucketConditions)
}

func secret(t *testing.T, ba *cosiapi.BucketAccess, i int) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := env.Client.Get(
		t.Context(),
		types.NamespacedName{Namespace: ba.Namespace, Name: ba.Spec.BucketClaims[i].AccessSecretName},
		s,
	); err != nil {
		t.Fatal(err)
	}
	return s
}

func keys(data map[string][]byte) []string { return slices.Sorted(maps.Keys(data)) }

// deleteAccess deletes a BucketAccess and waits for the sidecar's cleanup, then removes the
// finalizer as the controller would.
func deleteAccess(t *testing.T, ba *cosiapi.BucketAccess) {
	t.Helper()
	if err := env.Client.Delete(t.Context(), ba); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return err
		}
		if ba.Annotations[cosiapi.AnnotationSidecarCleanupFinished] == "" {
			return fmt.Errorf("no %s annotation yet", cosiapi.AnnotationSidecarCleanupFinished)
		}
		return nil
	})
	controllerutil.RemoveFinalizer(ba, cosiapi.FinalizerProtection)
	if err := env.Client.Update(t.Context(), ba); err != nil {
		t.Fatal(err)
	}
	env.Gone(t, ba)
}

func TestAccessLifecycle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		protocol cosiapi.Protocol
		wantKeys []string
	}{
		{cosiapi.ProtocolS3, []string{
			"AWS_ACCESS_KEY_ID", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_S3_ADDRESSING_STYLE",
			"AWS_SECRET_ACCESS_KEY", "BUCKET_NAME", "COSI_PROTOCOL",
		}},
		{cosiapi.ProtocolAzure, []string{
			"AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_SAS_TOKEN_EXPIRY_TIMESTAMP", "COSI_PROTOCOL",
		}},
		{cosiapi.ProtocolGCS, []string{"BUCKET_NAME", "COSI_PROTOCOL", "HMAC_ACCESS_ID", "HMAC_SECRET", "PROJECT_ID"}},
	} {
		t.Run(string(tc.protocol), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, memory.Config{})
			b := h.provisionedBucket(tc.protocol)
			ba := provisioned(t, h.access(tc.protocol, cosiapi.AuthenticationTypeKey, b), accessConditions)

			if want := cosiapi.AccountNamePrefix + string(ba.UID); ba.Status.AccountID != want {
				t.Errorf(
					"status.accountID = %q, want %q (the memory driver's ID for account_name ba-<uid>)",
					ba.Status.AccountID,
					want,
				)
			}
			if ba.Status.AccessedBuckets[0].BucketID != b.Status.BucketID {
				t.Errorf(
					"status.accessedBuckets[0].bucketID = %q, want %q",
					ba.Status.AccessedBuckets[0].BucketID,
					b.Status.BucketID,
				)
			}
			s := secret(t, ba, 0)
			if got := keys(s.Data); !slices.Equal(got, tc.wantKeys) {
				t.Errorf("Secret keys %v, want exactly %v", got, tc.wantKeys)
			}
			if string(s.Data[cosiapi.SecretKeyProtocol]) != string(tc.protocol) {
				t.Errorf("COSI_PROTOCOL = %q", s.Data[cosiapi.SecretKeyProtocol])
			}
			if !metav1.IsControlledBy(s, ba) || !controllerutil.ContainsFinalizer(s, cosiapi.FinalizerProtection) ||
				s.Annotations[cosiapi.AnnotationBucketAccessReference] != ba.Namespace+"/"+ba.Name ||
				s.Annotations[cosiapi.AnnotationBucketClaimReference] != ba.Namespace+"/"+b.Spec.BucketClaimRef.Name {
				t.Errorf(
					"Secret metadata: owners %v, finalizers %v, annotations %v",
					s.OwnerReferences,
					s.Finalizers,
					s.Annotations,
				)
			}
			creds := credentialsFrom(tc.protocol, s)
			if !h.driver.Backend().Allowed(creds, b.Status.BucketID, memory.ObjectData, true) {
				t.Error("the Secret's credentials do not open the bucket")
			}
			noSecretsIn(t, ba, s)
			if h.calls.Count("DriverGenerateBucketAccessId") != 1 || h.calls.Count("DriverGrantBucketAccess") != 1 {
				t.Errorf("driver calls %v: want one of each access phase", h.calls)
			}

			deleteAccess(t, ba)
			env.Gone(t, s)
			if h.driver.Backend().Allowed(creds, b.Status.BucketID, memory.ObjectData, false) ||
				len(h.driver.Backend().Accounts()) != 0 {
				t.Errorf("the access was not revoked: accounts %v", h.driver.Backend().Accounts())
			}
			deleteAsController(t, b)
			env.Gone(t, b)
			if bs, as := h.driver.Backend().Buckets(), h.driver.Backend().Accounts(); len(bs)+len(as) != 0 {
				t.Errorf("the driver is not empty after deleting everything: buckets %v, accounts %v", bs, as)
			}
		})
	}
}

func credentialsFrom(p cosiapi.Protocol, s *corev1.Secret) *cosiproto.CredentialInfo {
	switch p {
	case cosiapi.ProtocolS3:
		return &cosiproto.CredentialInfo{
			S3: &cosiproto.S3Credentials{
				AccessKeyId:     string(s.Data["AWS_ACCESS_KEY_ID"]),
				AccessSecretKey: string(s.Data["AWS_SECRET_ACCESS_KEY"]),
			},
		}
	case cosiapi.ProtocolAzure:
		return &cosiproto.CredentialInfo{
			Azure: &cosiproto.AzureCredentials{AccessToken: string(s.Data["AZURE_STORAGE_SAS_TOKEN"])},
		}
	default:
		return &cosiproto.CredentialInfo{
			Gcs: &cosiproto.GcsCredentials{
				HmacAccessId: string(s.Data["HMAC_ACCESS_ID"]),
				HmacSecret:   string(s.Data["HMAC_SECRET"]),
			},
		}
	}
}

// noSecretsIn fails if a credential of the Secret appears in the access's conditions or events.
func noSecretsIn(t *testing.T, ba *cosiapi.BucketAccess, s *corev1.Secret) {
	t.Helper()
	var texts []string
	for _, c := range ba.Status.Conditions {
		texts = append(texts, c.Message)
	}
	texts = append(texts, events(t, ba)...)
	for _, k := range []string{"AWS_SECRET_ACCESS_KEY", "AZURE_STORAGE_SAS_TOKEN", "HMAC_SECRET"} {
		v := s.Data[k]
		if len(v) == 0 {
			continue
		}
		for _, text := range texts {
			if bytes.Contains([]byte(text), v) {
				t.Errorf("%s appears in a condition or event", k)
			}
		}
	}
}

func TestMultiBucketAccess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{})
	a, b := h.provisionedBucket(cosiapi.ProtocolS3), h.provisionedBucket(cosiapi.ProtocolS3)
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, a, b), accessConditions)
	sa, sb := secret(t, ba, 0), secret(t, ba, 1)
	if string(sa.Data["BUCKET_NAME"]) != a.Status.BucketID || string(sb.Data["BUCKET_NAME"]) != b.Status.BucketID {
		t.Errorf(
			"BUCKET_NAME %q and %q, want %q and %q",
			sa.Data["BUCKET_NAME"],
			sb.Data["BUCKET_NAME"],
			a.Status.BucketID,
			b.Status.BucketID,
		)
	}
	if !bytes.Equal(sa.Data["AWS_SECRET_ACCESS_KEY"], sb.Data["AWS_SECRET_ACCESS_KEY"]) ||
		!bytes.Equal(sa.Data["AWS_ACCESS_KEY_ID"], sb.Data["AWS_ACCESS_KEY_ID"]) {
		t.Error("the two Secrets carry different credentials; multi-bucket access shares one")
	}
	if n := len(h.driver.Backend().Accounts()); n != 1 {
		t.Errorf("%d backend accounts, want 1", n)
	}
	creds := credentialsFrom(cosiapi.ProtocolS3, sa)
	if !h.driver.Backend().Allowed(creds, b.Status.BucketID, memory.ObjectData, false) ||
		h.driver.Backend().Allowed(creds, b.Status.BucketID, memory.ObjectData, true) {
		t.Error("the second claim's ReadOnly mode is not what the driver granted")
	}
	deleteAccess(t, ba)
	if n := len(h.driver.Backend().Accounts()); n != 0 {
		t.Errorf("%d backend accounts after deletion", n)
	}
}

func TestOutOfRange(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{SingleBucketAccess: true})
	ba := h.access(
		cosiapi.ProtocolS3,
		cosiapi.AuthenticationTypeKey,
		h.provisionedBucket(cosiapi.ProtocolS3),
		h.provisionedBucket(cosiapi.ProtocolS3),
	)
	c := testenv.Condition(
		t,
		env,
		ba,
		accessConditions,
		cosiapi.ConditionProvisioned,
		metav1.ConditionFalse,
		cosiapi.ReasonProvisioningFailed,
	)
	if !strings.Contains(c.Message, "OutOfRange") {
		t.Errorf("Provisioned message %q does not say OutOfRange", c.Message)
	}
	testenv.Never(t, time.Second, func() error {
		if n := h.calls.Count("DriverGenerateBucketAccessId"); n != 1 {
			return fmt.Errorf("DriverGenerateBucketAccessId called %d times; OutOfRange is final", n)
		}
		return nil
	})
	deleteAccess(t, ba) // never granted: cleanup still finishes
}

func TestServiceAccountAuthentication(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{})
	ba := provisioned(
		t,
		h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeServiceAccount, h.provisionedBucket(cosiapi.ProtocolS3)),
		accessConditions,
	)
	s := secret(t, ba, 0)
	if _, ok := s.Data["AWS_SECRET_ACCESS_KEY"]; ok {
		t.Errorf("a ServiceAccount access got keys: %v", keys(s.Data))
	}
	if string(s.Data["BUCKET_NAME"]) == "" {
		t.Errorf("a ServiceAccount access lacks bucket info: %v", keys(s.Data))
	}
}

func TestPrecreatedSecretIsNotOverwritten(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{})
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	userSecret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("mine"), Namespace: testNamespace},
		StringData: map[string]string{"password": "user data"},
	}
	h.create(userSecret)

	ba := &cosiapi.BucketAccess{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("access"), Namespace: testNamespace},
		Spec: cosiapi.BucketAccessSpec{
			BucketAccessClassName: "standard",
			Protocol:              cosiapi.ProtocolS3,
			BucketClaims: []cosiapi.BucketClaimAccess{
				{
					BucketClaimName:  b.Spec.BucketClaimRef.Name,
					AccessSecretName: userSecret.Name,
					AccessModes:      cosiapi.BucketAccessModes{ObjectData: cosiapi.BucketAccessModeReadWrite},
				},
			},
		},
	}
	h.create(ba)
	ba.Status = cosiapi.BucketAccessStatus{DriverName: h.name, AuthenticationType: cosiapi.AuthenticationTypeKey,
		AccessedBuckets: []cosiapi.AccessedBucket{{BucketClaimName: b.Spec.BucketClaimRef.Name, BucketName: b.Name}}}
	if err := env.Client.Status().Update(t.Context(), ba); err != nil {
		t.Fatal(err)
	}
	c := testenv.Condition(
		t,
		env,
		ba,
		accessConditions,
		cosiapi.ConditionResourcesValidated,
		metav1.ConditionFalse,
		cosiapi.ReasonSecretConflict,
	)
	if !strings.Contains(c.Message, userSecret.Name) {
		t.Errorf("the condition does not name the Secret: %q", c.Message)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(userSecret), userSecret); err != nil {
		t.Fatal(err)
	}
	if got := keys(userSecret.Data); !slices.Equal(got, []string{"password"}) || len(userSecret.OwnerReferences) != 0 {
		t.Errorf("the user's Secret was changed: keys %v, owners %v", got, userSecret.OwnerReferences)
	}
	deleteAccess(t, ba)
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(userSecret), userSecret); err != nil {
		t.Errorf("the user's Secret was deleted with the BucketAccess: %v", err)
	}
}

func TestAccessWaitsForTheBucket(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{})
	h.faults.Set(0, memory.Fault{Method: "DriverCreateBucket", Code: 14 /* Unavailable */, Rate: 1})
	b := h.bucket(cosiapi.DeletionPolicyDelete, cosiapi.ProtocolS3)
	h.create(b)
	ba := h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
	testenv.Condition(
		t,
		env,
		ba,
		accessConditions,
		cosiapi.ConditionProvisioned,
		metav1.ConditionUnknown,
		cosiapi.ReasonWaitingForResources,
	)
	waitForEvent(t, ba, cosiapi.EventWaitingForBucket)
	h.faults.Set(0) // the backend recovers; the Bucket provisions; the watch wakes the access
	provisioned(t, ba, accessConditions)
}

func TestNoAccessToADeletingBucket(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{})
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	markClaimBeingDeleted(t, b)
	ba := h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
	c := testenv.Condition(
		t,
		env,
		ba,
		accessConditions,
		cosiapi.ConditionResourcesValidated,
		metav1.ConditionFalse,
		cosiapi.ReasonInvalidReference,
	)
	if !strings.Contains(c.Message, "being deleted") {
		t.Errorf("condition message %q", c.Message)
	}
	if n := h.calls.Count("DriverGenerateBucketAccessId") + h.calls.Count("DriverGrantBucketAccess"); n != 0 {
		t.Errorf("%d access calls for a deleting bucket", n)
	}
}

func TestLostSecretIsWrittenAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{})
	ba := provisioned(
		t,
		h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, h.provisionedBucket(cosiapi.ProtocolS3)),
		accessConditions,
	)
	s := secret(t, ba, 0)
	before := s.Data["AWS_SECRET_ACCESS_KEY"]
	// Deleted as a user would: the Secret keeps COSI's finalizer until the sidecar lets it go.
	if err := env.Client.Delete(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		again := &corev1.Secret{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(s), again); err != nil {
			return err
		}
		if again.UID == s.UID || !bytes.Equal(again.Data["AWS_SECRET_ACCESS_KEY"], before) {
			return fmt.Errorf("not written again yet")
		}
		return nil
	})
}

func TestAccessRestartBetweenPhases(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{})
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	h.faults.Set(0, memory.Fault{Method: "DriverGrantBucketAccess", Code: 14 /* Unavailable */, Rate: 1})
	ba := h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return err
		}
		if ba.Status.AccountID == "" || h.calls.Count("DriverGrantBucketAccess") == 0 {
			return fmt.Errorf("phase 1 not done yet")
		}
		return nil
	})
	h.stop()
	h.faults.Set(0)
	h.startSidecar()
	provisioned(t, ba, accessConditions)
	if n := h.calls.Count("DriverGenerateBucketAccessId"); n != 1 {
		t.Errorf("DriverGenerateBucketAccessId called %d times across the restart, want 1", n)
	}
	if got := h.driver.Backend().Accounts(); !slices.Equal(got, []string{ba.Status.AccountID}) {
		t.Errorf("backend accounts %v, want exactly [%s]", got, ba.Status.AccountID)
	}
}

// A grant record in the shared namespace that another driver's sidecar wrote for the same access
// is that sidecar's way to revoke what it granted: this sidecar never overwrites it, and grants
// nothing while it is there.
func TestAnotherDriversGrantRecordIsNotOverwritten(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{})
	b := h.provisionedBucket(cosiapi.ProtocolS3)
	h.faults.Set(0, memory.Fault{Method: "DriverGenerateBucketAccessId", Code: 14 /* Unavailable */, Rate: 1})
	ba := h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return err
		}
		if ba.UID == "" || h.calls.Count("DriverGenerateBucketAccessId") == 0 {
			return fmt.Errorf("phase 1 not tried yet")
		}
		return nil
	})
	theirs := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: "cosi-grant-" + string(ba.UID), Namespace: sidecarNamespace,
			Labels: map[string]string{cosiapi.LabelGrantDriver: "other.driver.example.com"},
		},
		Data: map[string]string{"grant.json": `{"accountID":"theirs"}`},
	}
	h.create(theirs)
	h.faults.Set(0)
	testenv.Never(t, 3*time.Second, func() error {
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(theirs), cm); err != nil {
			return err
		}
		if !maps.Equal(cm.Data, theirs.Data) || !maps.Equal(cm.Labels, theirs.Labels) {
			return fmt.Errorf("the other driver's grant record was overwritten: labels %v, data %v", cm.Labels, cm.Data)
		}
		if n := h.calls.Count("DriverGrantBucketAccess"); n != 0 {
			return fmt.Errorf("DriverGrantBucketAccess called %d times without a record of its own", n)
		}
		return nil
	})
}
