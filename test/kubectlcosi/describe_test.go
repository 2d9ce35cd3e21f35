package kubectlcosi

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

// Issue 22, item 2: every reason COSI is not done shows in kubectl describe, as a condition and an
// event of the object the user looks at.

// visible waits until obj has the condition typ with reason and an event whose "Reason: message"
// starts with event and contains every part of contains.
func visible(t *testing.T, obj client.Object, conds func() []metav1.Condition, typ, reason, event string,
	contains ...string) {
	t.Helper()
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		c := meta.FindStatusCondition(conds(), typ)
		if c == nil || c.Reason != reason {
			return fmt.Errorf("%s: no %s condition with reason %s: %+v", obj.GetName(), typ, reason, conds())
		}
		evs := env.Events(t, obj)
		if !slices.ContainsFunc(evs, func(e string) bool {
			if !strings.HasPrefix(e, event+": ") {
				return false
			}
			for _, part := range contains {
				if !strings.Contains(e, part) {
					return false
				}
			}
			return true
		}) {
			return fmt.Errorf("%s: no event %s with %q: %v", obj.GetName(), event, contains, evs)
		}
		return nil
	})
}

func claimConds(c *cosiapi.BucketClaim) func() []metav1.Condition {
	return func() []metav1.Condition { return c.Status.Conditions }
}

func accessConds(a *cosiapi.BucketAccess) func() []metav1.Condition {
	return func() []metav1.Condition { return a.Status.Conditions }
}

// TestDescribeMissingClass: a claim and an access whose classes do not exist.
func TestDescribeMissingClass(t *testing.T) {
	claim := objects.BucketClaim(namespace, unique("claim"), unique("missing-class"), objects.S3)
	ba := objects.BucketAccess(namespace, unique("access"), unique("missing-accessclass"),
		objects.Grant(claim.Name, claim.Name+"-creds", objects.ReadWrite))
	create(t, claim, ba)
	visible(t, claim, claimConds(claim), cosiapi.ConditionResourcesValidated, cosiapi.ReasonWaitingForResources,
		"WaitingForClass", "BucketClass "+claim.Spec.BucketClassName+" does not exist")
	visible(t, ba, accessConds(ba), cosiapi.ConditionResourcesValidated, cosiapi.ReasonWaitingForResources,
		"WaitingForClass", "BucketAccessClass "+ba.Spec.BucketAccessClassName+" does not exist")
}

// TestDescribeNoSidecar: a class naming a driver that no sidecar serves. The controller sees that
// nobody holds the driver's Lease and says so on the claim.
func TestDescribeNoSidecar(t *testing.T) {
	nobody := "nobody.kubectl.cosi.io"
	class := objects.BucketClass(unique("class"), nobody, cosiapi.DeletionPolicyDelete)
	claim := objects.BucketClaim(namespace, unique("claim"), class.Name, objects.S3)
	create(t, class, claim)
	visible(t, claim, claimConds(claim), cosiapi.ConditionProvisioned, "WaitingForDriver", "WaitingForDriver",
		"no sidecar serves driver "+nobody, "Lease "+cosiNamespace+"/"+nobody+"-cosi-sidecar")
	r := status(t, viewer, "claim", claim.Name)
	if !strings.Contains(r.Diagnosis.Sentence, "no sidecar serves driver "+nobody) ||
		r.Diagnosis.Who != "admin" {
		t.Errorf("diagnosis: %+v", r.Diagnosis)
	}
}

// TestDescribeNoSidecarForAccess: an access handed off to a driver that no sidecar serves (here an
// imported Bucket of such a driver: its sidecar stopped after provisioning, say). The controller
// says so on the access, which is what its user sees.
func TestDescribeNoSidecarForAccess(t *testing.T) {
	nobody := "nobody-access.kubectl.cosi.io"
	claim := &cosiapi.BucketClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: unique("claim")},
		Spec: cosiapi.BucketClaimSpec{ExistingBucketName: unique("static"),
			Protocols: []cosiapi.Protocol{cosiapi.ProtocolS3}}}
	b := objects.Bucket(claim.Spec.ExistingBucketName, nobody, cosiapi.DeletionPolicyRetain,
		objects.ClaimedBy(namespace, claim.Name, ""), objects.BucketProtocols(cosiapi.ProtocolS3),
		func(b *cosiapi.Bucket) { b.Spec.ExistingBucketID = "imported" })
	aclass := objects.BucketAccessClass(unique("accessclass"), nobody)
	ba := objects.BucketAccess(namespace, unique("access"), aclass.Name,
		objects.Grant(claim.Name, unique("creds"), objects.ReadWrite))
	// The Lease a sidecar with leader election leaves when it stops: released. (With no Lease at
	// all the sidecars run without leader election, and the controller says nothing of accesses.)
	empty := ""
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: cosiNamespace, Name: nobody + "-cosi-sidecar"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &empty}}
	create(t, lease, b, claim, aclass, ba)
	visible(t, ba, accessConds(ba), cosiapi.ConditionProvisioned, cosiapi.ReasonWaitingForDriver,
		cosiapi.EventWaitingForDriver, "no sidecar serves driver "+nobody,
		"Lease "+cosiNamespace+"/"+nobody+"-cosi-sidecar")
	if ba.Status.DriverName != nobody {
		t.Errorf("the access waits for a sidecar of %q but was not handed off to it: %+v", nobody, ba.Status)
	}
	r := status(t, viewer, "access", ba.Name)
	if !strings.Contains(r.Diagnosis.Sentence, "no sidecar serves driver "+nobody) || r.Diagnosis.Who != "admin" {
		t.Errorf("diagnosis: %+v", r.Diagnosis)
	}

	// A sidecar of the driver starts: what it reports replaces the wait, and the controller does
	// not put it back.
	startSidecar(t, nobody)
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(ba.Status.Conditions, cosiapi.ConditionProvisioned); c == nil ||
			c.Reason == cosiapi.ReasonWaitingForDriver || c.Reason == cosiapi.ReasonProvisioning &&
			strings.HasPrefix(c.Message, "handed off") {
			return fmt.Errorf("the sidecar of %s did not act on the access: %+v", nobody, c)
		}
		return nil
	})
	// Gone while the sidecar runs: the doctor's test looks for sidecars that stopped.
	for _, o := range []client.Object{ba, claim, b} {
		if err := env.Client.Delete(t.Context(), o); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, func() error {
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s still there (%w): finalizers %v", o.GetName(), err, o.GetFinalizers())
			}
			return nil
		})
	}
}

// startSidecar runs a memory driver named name and its sidecar until the test ends.
func startSidecar(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	endpoint := "unix://" + filepath.Join(t.TempDir(), "driver.sock")
	d, err := memory.New(memory.Config{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := driver.NewServer(ctx, driver.Options{Endpoint: endpoint, Identity: d, Provisioner: d,
		Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ctx) })
	wg.Go(func() { _ = sidecar.Run(ctx, sidecarCfg, sidecarOptions(endpoint), logr.Discard()) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// TestDescribeDriverError: a driver error that is retried says when; a final one says it is not.
func TestDescribeDriverError(t *testing.T) {
	down := objects.BucketClass(unique("class"), driverName, cosiapi.DeletionPolicyDelete,
		objects.ClassParameters(map[string]string{memory.ParamRegion: unavailable}))
	invalid := objects.BucketClass(unique("class"), driverName, cosiapi.DeletionPolicyDelete,
		objects.ClassParameters(map[string]string{memory.ParamVersioning: "maybe"}))
	retried := objects.BucketClaim(namespace, unique("claim"), down.Name, objects.S3)
	final := objects.BucketClaim(namespace, unique("claim"), invalid.Name, objects.S3)
	create(t, down, invalid, retried, final)
	visible(t, retried, claimConds(retried), cosiapi.ConditionProvisionFailed, cosiapi.ReasonDriverError,
		cosiapi.EventFailedCreateBucket, "Unavailable", "the object store does not answer")
	visible(t, final, claimConds(final), cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioningFailed,
		cosiapi.EventFailedCreateBucket, "InvalidArgument")
	// The Bucket's events, which the sidecar records, say when the call is tried again.
	for _, c := range []struct {
		claim *cosiapi.BucketClaim
		want  string
	}{{retried, "; retrying in "}, {final, "; not retried until the Bucket changes"}} {
		b := &cosiapi.Bucket{ObjectMeta: metav1.ObjectMeta{Name: c.claim.Status.BoundBucketName}}
		visible(t, b, func() []metav1.Condition { return b.Status.Conditions }, cosiapi.ConditionProvisionFailed,
			cosiapi.ReasonDriverError, cosiapi.EventFailedCreateBucket, c.want)
	}
}

// TestDescribeRefusalsAndWaits: what already had a condition and an event keeps both: an access
// refused by its class, an access waiting for its Bucket, a Secret in the way.
func TestDescribeRefusalsAndWaits(t *testing.T) {
	class := objects.BucketClass(unique("class"), driverName, cosiapi.DeletionPolicyDelete)
	strict := objects.BucketAccessClass(unique("accessclass"), driverName, func(c *cosiapi.BucketAccessClass) {
		c.Spec.DisallowedBucketAccessModes.ObjectData = []cosiapi.BucketAccessMode{cosiapi.BucketAccessModeReadWrite}
	})
	aclass := objects.BucketAccessClass(unique("accessclass"), driverName)
	claim := objects.BucketClaim(namespace, unique("claim"), class.Name, objects.S3)
	refused := objects.BucketAccess(namespace, unique("access"), strict.Name,
		objects.Grant(claim.Name, unique("creds"), objects.ReadWrite))
	create(t, class, strict, aclass, claim, refused)
	visible(t, refused, accessConds(refused), cosiapi.ConditionResourcesValidated, cosiapi.ReasonForbiddenByClass,
		cosiapi.EventFailedGrantAccess, "ReadWrite")

	later := objects.BucketClaim(namespace, unique("claim"), unique("later-class"), objects.S3)
	waiting := objects.BucketAccess(namespace, unique("access"), aclass.Name,
		objects.Grant(later.Name, unique("creds"), objects.ReadWrite))
	create(t, later, waiting)
	visible(t, waiting, accessConds(waiting), cosiapi.ConditionProvisioned, cosiapi.ReasonWaitingForResources,
		cosiapi.EventWaitingForBucket, later.Name)
}
