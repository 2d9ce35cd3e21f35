package adversarial

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/dev/v1alpha1drivers"
	"github.com/kube-cosi/cosi/drivers/v1alpha1s3"
)

// The tests of issue 25 against a COSI v1alpha1 driver that shows an account's key once
// (v1alpha1drivers.KeyShownOnce around the reference v1alpha1 driver, on Versity): granted again,
// it answers ALREADY_EXISTS. Whether the sidecar may then revoke the account and grant it anew
// depends on whether anyone can hold the account's key.

// newV1alpha1System is a system whose driver is the reference v1alpha1 driver on Versity, as wrap
// makes it; the sidecar detects the protocol and drives it through the v1alpha1 adapter. The
// memory driver's fields (driver, faults, calls) are nil.
func newV1alpha1System(t *testing.T, wrap func(*v1alpha1s3.Driver) v1alpha1drivers.Server) *system {
	t.Helper()
	s := &system{t: t, name: fmt.Sprintf("v1alpha1-%d.adversarial.cosi.io", driverCounter.Add(1))}
	s.endpoint = v1alpha1drivers.ServeS3(t, s.name, wrap)
	s.startSidecar()
	return s
}

// keyShownOnce is newV1alpha1System's wrap for a KeyShownOnce driver, which it stores in d.
func keyShownOnce(d **v1alpha1drivers.KeyShownOnce) func(*v1alpha1s3.Driver) v1alpha1drivers.Server {
	return func(s *v1alpha1s3.Driver) v1alpha1drivers.Server {
		*d = v1alpha1drivers.NewKeyShownOnce(s)
		return *d
	}
}

// keyWorks is nil when the S3 key in the Secret can write an object into the Secret's bucket on
// the store, as a workload holding it would.
func keyWorks(s *corev1.Secret) error {
	c, bucket, err := localenv.S3Client(s)
	if err != nil {
		return err
	}
	_, err = c.PutObject(context.Background(), &awss3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String("workload"), Body: strings.NewReader("data"),
	})
	if err != nil {
		return fmt.Errorf("the key of Secret %s cannot write to bucket %s: %w", s.Name, bucket, err)
	}
	return nil
}

// Issue 25, item 15: the first grant's answer is lost before any Secret was written (the write is
// refused by a ResourceQuota, and the sidecar restarts, losing the answer it kept for the write).
// The driver answers the new sidecar's grant ALREADY_EXISTS and will not return the key. Nobody
// can hold that key, so the account is revoked and granted anew: the access is provisioned, with
// a key that works on the store, once the quota allows the Secret.
func TestV1alpha1LostFirstAnswerIsGrantedAnew(t *testing.T) {
	t.Parallel()
	var drv *v1alpha1drivers.KeyShownOnce
	s := newV1alpha1System(t, keyShownOnce(&drv))
	namespace, tenant, refuse, allow := quotaNamespace(t)
	c := objects.BucketClaim(namespace, uniqueName("claim"), s.bucketClass(cosiapi.DeletionPolicyDelete).Name, objects.S3)
	mustCreate(t, tenant, c)
	waitProvisioned(t, c)
	refuse()
	ba := objects.BucketAccess(namespace, uniqueName("access"), s.accessClass().Name,
		objects.Grant(c.Name, uniqueName("creds"), objects.ReadWrite))
	mustCreate(t, tenant, ba)
	waitCondition(t, ba, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse, cosiapi.ReasonSecretWriteFailed)
	account := ba.Status.AccountID
	if n := drv.Grants(account); n != 1 {
		t.Fatalf("%d grants of account %q before the restart; want 1", n, account)
	}

	s.stopSidecar()
	s.startSidecar()
	testenv.Eventually(t, func() error {
		if n := drv.Grants(account); n < 2 {
			return fmt.Errorf("%d grants: the restarted sidecar has not granted again yet", n)
		}
		return nil
	})
	allow()
	waitProvisioned(t, ba)
	if err := keyWorks(secret(t, ba)); err != nil {
		t.Error(err)
	}
	// The first grant, the one answered ALREADY_EXISTS, and the one after the revocation.
	if n := drv.Grants(account); n != 3 {
		t.Errorf("%d grants of account %q; want 3", n, account)
	}
}

// Issue 25, item 15, the other side: a tenant deletes the Secret of a provisioned access. The
// driver answers the grant that would write it again ALREADY_EXISTS; workloads may hold the key
// the Secret had, so the account is not revoked, before or after a restart of the sidecar: the
// grant fails, final, and the key keeps working.
func TestV1alpha1LostSecretKeepsTheKeyWorkloadsHold(t *testing.T) {
	t.Parallel()
	var drv *v1alpha1drivers.KeyShownOnce
	s := newV1alpha1System(t, keyShownOnce(&drv))
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	ba := s.provisionedAccess(s.accessClass().Name, c)
	old := secret(t, ba)
	if err := keyWorks(old); err != nil {
		t.Fatal(err)
	}

	mustDelete(t, tenant, old)
	waitCondition(t, ba, cosiapi.ConditionProvisionFailed, metav1.ConditionTrue, cosiapi.ReasonDriverError)
	if err := keyWorks(old); err != nil {
		t.Errorf("after the grant answered ALREADY_EXISTS: %v", err)
	}
	s.stopSidecar()
	s.startSidecar()
	testenv.Eventually(t, func() error {
		if n := drv.Grants(ba.Status.AccountID); n < 3 {
			return fmt.Errorf("%d grants: the restarted sidecar has not granted again yet", n)
		}
		return nil
	})
	holds(t, func() error { return keyWorks(old) })
	if n := drv.Grants(ba.Status.AccountID); n != 3 {
		t.Errorf("%d grants of account %q; want 3", n, ba.Status.AccountID)
	}
}

// createsFail fails DriverCreateBucket UNAVAILABLE while fail is set, as a store that is down.
type createsFail struct {
	v1alpha1drivers.Server
	fail atomic.Bool
}

func (d *createsFail) DriverCreateBucket(
	ctx context.Context, req *v1.DriverCreateBucketRequest,
) (*v1.DriverCreateBucketResponse, error) {
	if d.fail.Load() {
		return nil, status.Error(codes.Unavailable, "the store is down")
	}
	return d.Server.DriverCreateBucket(ctx, req)
}

// Issue 25, item 15: a provisioned access whose lost Secret waits for its Bucket (no longer
// provisioned, as a Bucket admin may leave it, while the store is down) stays Provisioned, so
// that the failed grant which follows (ALREADY_EXISTS) leaves a record of the grant in its status:
// a restarted sidecar must not take the access for one whose Secrets were never written, and
// revoke the key workloads hold.
func TestV1alpha1LostSecretWaitingForItsBucketKeepsTheKey(t *testing.T) {
	t.Parallel()
	var drv *v1alpha1drivers.KeyShownOnce
	var store *createsFail
	s := newV1alpha1System(t, func(d *v1alpha1s3.Driver) v1alpha1drivers.Server {
		store = &createsFail{Server: keyShownOnce(&drv)(d)}
		return store
	})
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	ba := s.provisionedAccess(s.accessClass().Name, c)
	old := secret(t, ba)
	if err := keyWorks(old); err != nil {
		t.Fatal(err)
	}

	s.stopSidecar()
	store.fail.Store(true)
	b := boundBucket(t, c)
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{
			Type: cosiapi.ConditionProvisioned, Status: metav1.ConditionUnknown, Reason: cosiapi.ReasonProvisioning,
		})
		return env.Client.Status().Update(t.Context(), b)
	})
	mustDelete(t, tenant, old)
	s.startSidecar()
	env.WaitForEvent(t, ba, cosiapi.EventWaitingForBucket+": waiting for Buckets ["+b.Name+"]")
	store.fail.Store(false)
	waitCondition(t, ba, cosiapi.ConditionProvisionFailed, metav1.ConditionTrue, cosiapi.ReasonDriverError)
	if n := drv.Grants(ba.Status.AccountID); n != 2 {
		t.Fatalf("%d grants of account %q; want 2", n, ba.Status.AccountID)
	}

	s.stopSidecar()
	s.startSidecar()
	testenv.Eventually(t, func() error {
		if n := drv.Grants(ba.Status.AccountID); n < 3 {
			return fmt.Errorf("%d grants: the restarted sidecar has not granted again yet", n)
		}
		return nil
	})
	holds(t, func() error { return keyWorks(old) })
	if n := drv.Grants(ba.Status.AccountID); n != 3 {
		t.Errorf("%d grants of account %q; want 3", n, ba.Status.AccountID)
	}
}
