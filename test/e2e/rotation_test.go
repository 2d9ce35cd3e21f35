package e2e

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/internal/sidecar"
)

// rotationGracePeriod is the sidecar's --rotation-grace-period in this suite (TestMain): long
// enough to see the old key work after the Secret changed, short enough to see it refused.
const rotationGracePeriod = 20 * time.Second

// TestRotationKeepsConsumersWorking: an admin rotates an access's credentials with the
// rotate-credentials annotation. A consumer that re-reads its Secret before each request (as a
// workload with a mounted Secret volume does) never fails across the rotation; the new key works
// as soon as the Secret holds it; the old key keeps working during the grace period and the store
// refuses it after.
func TestRotationKeepsConsumersWorking(t *testing.T) {
	ns := namespace(t)
	bc := bucketClass(cosiapi.DeletionPolicyDelete, map[string]string{s3.ParamPurgeOnDelete: "true"})
	bac := accessClass(false)
	c := claim(ns, bc.Name)
	create(t, bc, bac, c)
	provisioned(t, c)
	a := access(ns, bac.Name, readWrite, c)
	create(t, a)
	provisioned(t, a)
	secretName := a.Spec.BucketClaims[0].AccessSecretName
	oldClient, bucket, oldSecret := secretClient(t, ns, secretName)
	expectAllowed(t, "put with the Secret's key", put(oldClient, bucket, "before"))
	oldKey := string(oldSecret.Data[cosiapi.SecretKeyS3AccessKeyID])

	// The consumer: reads the Secret, then puts and gets one object with what it holds.
	var ops, failures atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if err := consume(t, ns, secretName, fmt.Sprintf("consumer-%d", i)); err != nil {
				failures.Add(1)
				firstFailure.CompareAndSwap(nil, err.Error())
			}
			ops.Add(1)
		}
	}()

	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(a), a); err != nil {
		t.Fatal(err)
	}
	metav1.SetMetaDataAnnotation(&a.ObjectMeta, cosiapi.AnnotationRotateCredentials, "e2e-1")
	if err := env.Client.Update(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	var newSecret *corev1.Secret
	testenv.Eventually(t, func() error {
		_, _, s := secretClient(t, ns, secretName)
		if string(s.Data[cosiapi.SecretKeyS3AccessKeyID]) == oldKey {
			return errorf("the Secret still holds the old key")
		}
		newSecret = s
		return nil
	})
	rotatedAt := time.Now()
	newClient, _, _ := secretClient(t, ns, secretName)
	expectAllowed(t, "put with the new key", put(newClient, bucket, "after"))
	if got, err := get(newClient, bucket, "before"); err != nil || got != "data of before" {
		t.Errorf("get with the new key: %q, %v", got, err)
	}
	// The grace period is counted from when every Secret held the new key, a moment before it was
	// seen here: checked only while well inside it.
	err := put(oldClient, bucket, "old-during-grace")
	if time.Since(rotatedAt) < rotationGracePeriod/2 {
		expectAllowed(t, "put with the old key during the grace period", err)
	}
	testenv.Eventually(t, func() error {
		if err := put(oldClient, bucket, "old-after-grace"); !denied(err) {
			return errorf("put with the old key after the grace period: %v, want denied", err)
		}
		return nil
	})
	testenv.Condition(t, waits, a, accessConditions, cosiapi.ConditionCredentialsRotated, metav1.ConditionTrue,
		cosiapi.ReasonRotated)
	event(t, a, cosiapi.EventCredentialsRotated)
	newKey := string(newSecret.Data[cosiapi.SecretKeyS3AccessKeyID])
	if got := newSecret.Annotations[cosiapi.AnnotationCredentialID]; got != newKey {
		t.Errorf("Secret annotation %s = %q, want the new access key ID", cosiapi.AnnotationCredentialID, got)
	}
	close(stop)
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Errorf("the consumer failed %d of %d times across the rotation; first: %v", n, ops.Load(), firstFailure.Load())
	}
	if ops.Load() < 10 {
		t.Errorf("the consumer ran %d times, want at least 10 across the rotation", ops.Load())
	}
	expectAllowed(t, "put with the new key after the rotation", put(newClient, bucket, "done"))
	del(t, a)
	waits.Gone(t, a)
	del(t, c)
	waits.Gone(t, c)
}

// consume reads the access Secret and puts and gets one object with the key it holds.
func consume(t *testing.T, ns, name, key string) error {
	s := &corev1.Secret{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		return err
	}
	c, bucket, err := localenv.S3Client(s)
	if err != nil {
		return err
	}
	if err := put(c, bucket, key); err != nil {
		return fmt.Errorf("put with key %s: %w", s.Data[cosiapi.SecretKeyS3AccessKeyID], err)
	}
	if got, err := get(c, bucket, key); err != nil || got != "data of "+key {
		return fmt.Errorf("get with key %s: %q, %w", s.Data[cosiapi.SecretKeyS3AccessKeyID], got, err)
	}
	return nil
}

// TestRefreshRetriedAfterARotation: the S3 driver on IAM issues a new key at every grant, and a
// rotation deletes every key of the user but the one it rotates from. A refresh whose grant
// record write is refused keeps the driver's answer for its retry; a rotation that comes before
// the retry deletes the answer's key. The retry must not write that key into the Secret: once both
// are done, the Secret's key works (real S3 requests). internal/sidecar tests the same with the
// memory driver (docs/reliability.md, finding 6).
func TestRefreshRetriedAfterARotation(t *testing.T) {
	ns := namespace(t)
	bc := bucketClass(cosiapi.DeletionPolicyDelete, map[string]string{s3.ParamPurgeOnDelete: "true"})
	bac := accessClass(false)
	c := claim(ns, bc.Name)
	create(t, bc, bac, c)
	provisioned(t, c)
	a := access(ns, bac.Name, readWrite, c)
	create(t, a)
	provisioned(t, a)
	secretName := a.Spec.BucketClaims[0].AccessSecretName
	_, _, s := secretClient(t, ns, secretName)
	first := s.Annotations[cosiapi.AnnotationCredentialID]

	lift := testenv.RefuseUpdates(t, env.Client, sidecar.DefaultGrantNamespace, "cosi-grant-"+string(a.UID))
	annotate(t, a, cosiapi.AnnotationRefreshSecret, "e2e-refresh")
	testenv.Eventually(t, func() error {
		if _, _, s = secretClient(t, ns, secretName); s.Annotations[cosiapi.AnnotationCredentialID] == first {
			return errorf("the Secret still holds credential %s", first)
		}
		return nil
	})
	event(t, a, cosiapi.EventFailedRefresh) // the grant record refused
	// Asked while the record is refused, so that the rotation runs before the refresh's retry.
	annotate(t, a, cosiapi.AnnotationRotateCredentials, "e2e-rotate")
	event(t, a, cosiapi.EventFailedRotateCredentials)
	lift()

	testenv.Condition(t, waits, a, accessConditions, cosiapi.ConditionCredentialsRotated, metav1.ConditionTrue,
		cosiapi.ReasonRotated)
	event(t, a, cosiapi.EventSecretsRefreshed)
	testenv.Eventually(t, func() error {
		cl, bucket, s := secretClient(t, ns, secretName)
		if err := put(cl, bucket, "after"); err != nil {
			return errorf("put with the Secret's key %s: %w", s.Annotations[cosiapi.AnnotationCredentialID], err)
		}
		return nil
	})
	del(t, a)
	waits.Gone(t, a)
	del(t, c)
	waits.Gone(t, c)
}

// annotate sets an annotation of the access, as an admin does.
func annotate(t *testing.T, a *cosiapi.BucketAccess, key, value string) {
	t.Helper()
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(a), a); err != nil {
			return err
		}
		metav1.SetMetaDataAnnotation(&a.ObjectMeta, key, value)
		return env.Client.Update(t.Context(), a)
	})
}
