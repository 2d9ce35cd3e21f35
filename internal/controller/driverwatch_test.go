package controller_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/controller"
)

// reconciles counts the reconciles that controller-runtime starts, per controller and object:
// its controllers log "Reconciling" at V(5) with the controller's name and the request.
type reconciles struct {
	mu sync.Mutex
	n  map[string]int
}

func newReconciles() *reconciles { return &reconciles{n: map[string]int{}} }

// of returns how many reconciles of obj the controller (bucketclaim, bucketaccess) started.
func (r *reconciles) of(ctrl string, obj client.Object) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[ctrl+"/"+obj.GetNamespace()+"/"+obj.GetName()]
}

func (r *reconciles) logger() logr.Logger { return logr.New(countSink{r: r}) }

// countSink is the LogSink that counts.
type countSink struct {
	r      *reconciles
	values []any
}

func (countSink) Init(logr.RuntimeInfo) {}
func (countSink) Enabled(int) bool      { return true }
func (countSink) Error(error, string, ...any) {
}
func (s countSink) WithName(string) logr.LogSink { return s }
func (s countSink) WithValues(kv ...any) logr.LogSink {
	return countSink{r: s.r, values: append(slices.Clip(s.values), kv...)}
}

func (s countSink) Info(_ int, msg string, kv ...any) {
	if msg != "Reconciling" {
		return
	}
	v := map[string]string{}
	all := append(slices.Clip(s.values), kv...)
	for i := 0; i+1 < len(all); i += 2 {
		if k, ok := all[i].(string); ok {
			if s, ok := all[i+1].(string); ok {
				v[k] = s
			}
		}
	}
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.n[v["controller"]+"/"+v["namespace"]+"/"+v["name"]]++
}

// ownAPIServer starts an API server for one test, with the namespaces the controller uses: the
// package's controller does not run there.
func ownAPIServer(t *testing.T) *testenv.Env {
	t.Helper()
	api, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Stop() })
	for _, ns := range []string{"cosi-system", testNamespace} {
		if err := api.CreateNamespace(t.Context(), ns); err != nil {
			t.Fatal(err)
		}
	}
	return api
}

// runController runs a controller against api until the returned stop is called or the test
// ends.
func runController(t *testing.T, api *testenv.Env, opts controller.Options, log logr.Logger) (stop func()) {
	t.Helper()
	opts.Workers, opts.MetricsAddress, opts.HealthAddress, opts.SkipNameValidation = 2, "0", "0", true
	opts.LeaderElectionNamespace = "cosi-system"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- controller.Run(ctx, api.Config, opts, log) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("controller: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// sidecarLease writes the Lease of driver's sidecars: held and fresh when holder is not "",
// released (held by nobody) when it is.
func sidecarLease(t *testing.T, api *testenv.Env, driver, holder string) {
	t.Helper()
	sidecarLeaseIn(t, api, "cosi-system", driver, holder)
}

// sidecarLeaseIn is sidecarLease for sidecars that elect in namespace.
func sidecarLeaseIn(t *testing.T, api *testenv.Env, namespace, driver, holder string) {
	t.Helper()
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace,
		Name: driver + "-cosi-sidecar"}}
	testenv.Eventually(t, func() error {
		err := api.Client.Get(t.Context(), client.ObjectKeyFromObject(lease), lease)
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		lease.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}
		if holder != "" {
			lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			lease.Spec.LeaseDurationSeconds = ptr.To[int32](3600)
		}
		if err != nil {
			return api.Client.Create(t.Context(), lease)
		}
		return api.Client.Update(t.Context(), lease)
	})
}

// bindingOf waits until the controller bound the claim to its Bucket, and returns the Bucket.
func bindingOf(t *testing.T, api *testenv.Env, c *cosiapi.BucketClaim) *cosiapi.Bucket {
	t.Helper()
	b := &cosiapi.Bucket{}
	testenv.Eventually(t, func() error {
		if err := api.Client.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		if c.Status.BoundBucketName == "" {
			return fmt.Errorf("claim %s not bound yet", c.Name)
		}
		b.Name = c.Status.BoundBucketName
		if err := api.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		if b.Spec.BucketClaimRef.UID == "" {
			return fmt.Errorf("Bucket %s not bound yet", b.Name)
		}
		return nil
	})
	return b
}

// actOnBucket does what a sidecar does once its driver created the bucket.
func actOnBucket(t *testing.T, api *testenv.Env, b *cosiapi.Bucket) {
	t.Helper()
	testenv.Eventually(t, func() error {
		if err := api.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		if len(b.Finalizers) == 0 {
			b.Finalizers = []string{cosiapi.FinalizerProtection}
			if err := api.Client.Update(t.Context(), b); err != nil {
				return err
			}
		}
		b.Status.BucketID, b.Status.Protocols = b.Name, []cosiapi.Protocol{cosiapi.ProtocolS3}
		meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: cosiapi.ConditionProvisioned,
			Status: metav1.ConditionTrue, Reason: cosiapi.ReasonProvisioned, Message: "by the test"})
		return api.Client.Status().Update(t.Context(), b)
	})
}

// servedAndWaiting creates a BucketClass and a BucketAccessClass of driver, a claim whose Bucket a
// sidecar acted on with an access handed off for it, and a claim whose Bucket no sidecar acted
// on.
func servedAndWaiting(t *testing.T, api *testenv.Env, driver string) served {
	t.Helper()
	class := objects.BucketClass(uniqueName("class"), driver, cosiapi.DeletionPolicyDelete)
	aclass := objects.BucketAccessClass(uniqueName("accessclass"), driver)
	granted := objects.BucketClaim(testNamespace, uniqueName("claim"), class.Name, objects.S3)
	waiting := objects.BucketClaim(testNamespace, uniqueName("claim"), class.Name, objects.S3)
	for _, o := range []client.Object{class, aclass, granted, waiting} {
		if err := api.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	actOnBucket(t, api, bindingOf(t, api, granted))
	waitingBucket := bindingOf(t, api, waiting)
	ba := objects.BucketAccess(testNamespace, uniqueName("access"), aclass.Name,
		objects.Grant(granted.Name, uniqueName("creds"), objects.ReadWrite))
	if err := api.Client.Create(t.Context(), ba); err != nil {
		t.Fatal(err)
	}
	handedOff(t, api, ba)
	return served{granted: granted, waiting: waiting, waitingBucket: waitingBucket, access: ba}
}

// served is what servedAndWaiting created.
type served struct {
	granted, waiting *cosiapi.BucketClaim
	waitingBucket    *cosiapi.Bucket
	access           *cosiapi.BucketAccess
}

// handedOff waits until the controller handed the access off to its driver.
func handedOff(t *testing.T, api *testenv.Env, ba *cosiapi.BucketAccess) {
	t.Helper()
	testenv.Eventually(t, func() error {
		if err := api.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return err
		}
		if ba.Status.DriverName == "" {
			return fmt.Errorf("access %s not handed off: %+v", ba.Name, ba.Status.Conditions)
		}
		return nil
	})
}

// actOnAccess does what a sidecar does once its driver granted the access.
func actOnAccess(t *testing.T, api *testenv.Env, ba *cosiapi.BucketAccess) {
	t.Helper()
	testenv.Eventually(t, func() error {
		if err := api.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return err
		}
		ba.Status.AccountID = "account-" + ba.Name
		meta.SetStatusCondition(&ba.Status.Conditions, metav1.Condition{Type: cosiapi.ConditionProvisioned,
			Status: metav1.ConditionTrue, Reason: cosiapi.ReasonProvisioned, Message: "by the test"})
		meta.SetStatusCondition(&ba.Status.Conditions, metav1.Condition{Type: cosiapi.ConditionProvisionFailed,
			Status: metav1.ConditionFalse, Reason: cosiapi.ReasonDriverSucceeded, Message: "by the test"})
		return api.Client.Status().Update(t.Context(), ba)
	})
}

// Issue 21: a claim and an access that a sidecar picks up within the grace period are not
// reconciled again when the grace period ends. The controller used to requeue each object it
// handed to a sidecar, which controller-runtime cannot take back: one no-op reconcile per claim
// and per access.
func TestNoRecheckOnceASidecarActed(t *testing.T) {
	t.Parallel()
	api := ownAPIServer(t)
	const grace = 2 * time.Second
	count := newReconciles()
	runController(t, api, controller.Options{DriverGrace: grace}, count.logger())
	// A sidecar serves the driver: should the test act after the grace period on a slow machine,
	// the controller finds it and marks nothing.
	driver := uniqueName("acted") + ".controller-test.cosi.io"
	sidecarLease(t, api, driver, "sidecar-0")

	class := objects.BucketClass(uniqueName("class"), driver, cosiapi.DeletionPolicyDelete)
	aclass := objects.BucketAccessClass(uniqueName("accessclass"), driver)
	c := objects.BucketClaim(testNamespace, uniqueName("claim"), class.Name, objects.S3)
	for _, o := range []client.Object{class, aclass, c} {
		if err := api.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	actOnBucket(t, api, bindingOf(t, api, c))
	testenv.Condition(t, api, c, claimConditions, cosiapi.ConditionProvisioned, metav1.ConditionTrue,
		cosiapi.ReasonProvisioned)

	ba := objects.BucketAccess(testNamespace, uniqueName("access"), aclass.Name,
		objects.Grant(c.Name, uniqueName("creds"), objects.ReadWrite))
	if err := api.Client.Create(t.Context(), ba); err != nil {
		t.Fatal(err)
	}
	handedOff(t, api, ba)
	actOnAccess(t, api, ba)

	claims, accesses := count.of("bucketclaim", c), count.of("bucketaccess", ba)
	// Past the grace period of both, with a margin: nothing wakes them.
	testenv.Never(t, 2*grace+2*time.Second, func() error { return nil })
	if n, m := count.of("bucketclaim", c), count.of("bucketaccess", ba); n != claims || m != accesses {
		t.Errorf("reconciled again after the sidecar acted: claim %d → %d, access %d → %d", claims, n, accesses, m)
	}
	t.Logf("reconciles: claim %d, access %d", claims, accesses)
}

// A claim and an access whose driver no sidecar serves are marked WaitingForDriver by a
// controller that started after they were handed off (the one that handed them off stopped
// within the grace period), with leader election; a sidecar that starts later replaces the wait,
// and the controller does not put it back.
func TestWaitingForDriverAfterARestart(t *testing.T) {
	t.Parallel()
	api := ownAPIServer(t)
	driver := uniqueName("unserved") + ".controller-test.cosi.io"
	// The Lease a sidecar with leader election leaves when it stops: released. (With no Lease at
	// all the sidecars run without leader election, and the controller says nothing of accesses.)
	sidecarLease(t, api, driver, "")

	// The first controller's grace period does not end while it runs.
	stop := runController(t, api, controller.Options{DriverGrace: time.Hour}, logr.Discard())
	// The sidecar provisioned the access's Bucket, then stopped.
	objs := servedAndWaiting(t, api, driver)
	granted, waiting, waitingBucket, ba := objs.granted, objs.waiting, objs.waitingBucket, objs.access
	stop()

	opts := controller.Options{DriverGrace: time.Second, DriverRecheck: 2 * time.Second, LeaderElection: true}
	runController(t, api, opts, logr.Discard())
	for _, got := range []metav1.Condition{
		testenv.Condition(t, api, waiting, claimConditions, cosiapi.ConditionProvisioned, metav1.ConditionUnknown,
			cosiapi.ReasonWaitingForDriver),
		testenv.Condition(t, api, ba, accessConditions, cosiapi.ConditionProvisioned, metav1.ConditionUnknown,
			cosiapi.ReasonWaitingForDriver),
	} {
		if want := "no sidecar serves driver " + driver; len(got.Message) < len(want) || got.Message[:len(want)] != want {
			t.Errorf("WaitingForDriver message %q, want it to start with %q", got.Message, want)
		}
	}
	testenv.Condition(t, api, granted, claimConditions, cosiapi.ConditionProvisioned, metav1.ConditionTrue,
		cosiapi.ReasonProvisioned)

	// A sidecar of the driver starts: the claim no longer says that none serves it (the access
	// does until the sidecar acts: its WaitingForDriver is the sidecar's to replace). Then the
	// sidecar acts: what it reports replaces the wait.
	sidecarLease(t, api, driver, "sidecar-0")
	testenv.Condition(t, api, waiting, claimConditions, cosiapi.ConditionProvisioned, metav1.ConditionUnknown,
		cosiapi.ReasonProvisioning)
	actOnBucket(t, api, waitingBucket)
	actOnAccess(t, api, ba)
	testenv.Condition(t, api, waiting, claimConditions, cosiapi.ConditionProvisioned, metav1.ConditionTrue,
		cosiapi.ReasonProvisioned)
	testenv.Never(t, 3*time.Second, func() error {
		for _, o := range []struct {
			obj   client.Object
			conds func() []metav1.Condition
		}{
			{waiting, func() []metav1.Condition { return waiting.Status.Conditions }},
			{ba, func() []metav1.Condition { return ba.Status.Conditions }},
		} {
			if err := api.Client.Get(t.Context(), client.ObjectKeyFromObject(o.obj), o.obj); err != nil {
				return err
			}
			if c := meta.FindStatusCondition(o.conds(), cosiapi.ConditionProvisioned); c == nil ||
				c.Status != metav1.ConditionTrue {
				return fmt.Errorf("%s: Provisioned %+v after the sidecar acted", o.obj.GetName(), c)
			}
		}
		return nil
	})
}

// TestServedFromAnotherNamespace: the sidecars of a driver installed in another namespace than the
// controller's elect their leader there (their Pod's namespace): the controller, told of that
// namespace, must find their Lease, and not report the driver unserved.
func TestServedFromAnotherNamespace(t *testing.T) {
	t.Parallel()
	api := ownAPIServer(t)
	driver := uniqueName("elsewhere") + ".controller-test.cosi.io"
	if err := api.CreateNamespace(t.Context(), "driver-ns"); err != nil {
		t.Fatal(err)
	}
	sidecarLeaseIn(t, api, "driver-ns", driver, "sidecar-0")
	runController(t, api, controller.Options{DriverGrace: time.Second, DriverRecheck: time.Second,
		SidecarLeaseNamespaces: []string{"driver-ns"}}, logr.Discard())
	objs := servedAndWaiting(t, api, driver)
	testenv.Never(t, 5*time.Second, func() error {
		if err := api.Client.Get(t.Context(), client.ObjectKeyFromObject(objs.waiting), objs.waiting); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(objs.waiting.Status.Conditions, cosiapi.ConditionProvisioned); c != nil &&
			c.Reason == cosiapi.ReasonWaitingForDriver {
			return fmt.Errorf("a served driver reported unserved: %s", c.Message)
		}
		return nil
	})

	// Its sidecars stop: released there, the driver is unserved, and the message names that Lease.
	sidecarLeaseIn(t, api, "driver-ns", driver, "")
	c := testenv.Condition(t, api, objs.waiting, claimConditions, cosiapi.ConditionProvisioned,
		metav1.ConditionUnknown, cosiapi.ReasonWaitingForDriver)
	if want := "driver-ns/" + driver + "-cosi-sidecar is held by nobody"; !strings.Contains(c.Message, want) {
		t.Errorf("WaitingForDriver message %q, want it to contain %q", c.Message, want)
	}
}

// TestTenantLeaseDoesNotFakeServed: no sidecar serves the driver anywhere; a tenant who may create
// Leases in their own namespace (and nothing of COSI's) creates one named <driver>-cosi-sidecar,
// held and fresh. The controller must still report the driver's claims WaitingForDriver: it reads
// sidecar Leases only in its own namespace and those an admin names (found by a reviewer of the
// first fix, which looked in every namespace).
func TestTenantLeaseDoesNotFakeServed(t *testing.T) {
	t.Parallel()
	api := ownAPIServer(t)
	driver := uniqueName("faked") + ".controller-test.cosi.io"
	for _, ns := range []string{"tenant-ns", "driver-ns"} {
		if err := api.CreateNamespace(t.Context(), ns); err != nil {
			t.Fatal(err)
		}
	}
	sidecarLeaseIn(t, api, "tenant-ns", driver, "tenant-pretends")
	runController(t, api, controller.Options{DriverGrace: time.Second, DriverRecheck: time.Second,
		SidecarLeaseNamespaces: []string{"driver-ns"}}, logr.Discard())
	class := objects.BucketClass(uniqueName("class"), driver, cosiapi.DeletionPolicyDelete)
	c := objects.BucketClaim(testNamespace, uniqueName("claim"), class.Name, objects.S3)
	for _, o := range []client.Object{class, c} {
		if err := api.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	cond := testenv.Condition(t, api, c, claimConditions, cosiapi.ConditionProvisioned,
		metav1.ConditionUnknown, cosiapi.ReasonWaitingForDriver)
	want := "cosi-system/" + driver + "-cosi-sidecar (nor in driver-ns) does not exist"
	if !strings.Contains(cond.Message, want) {
		t.Errorf("WaitingForDriver message %q, want it to contain %q", cond.Message, want)
	}
}
