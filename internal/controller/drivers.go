package controller

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
)

// DefaultDriverGrace is how long a new Bucket may wait for a sidecar to pick it up before the
// controller looks for one (driverWatch).
const DefaultDriverGrace = 30 * time.Second

// DefaultDriverRecheck is how often the controller looks again for a sidecar of a driver no
// sidecar serves (Options.DriverRecheck). It looks from its cache (waiting): an object that a
// sidecar picked up in the meantime, or whose WaitingForDriver condition would not change, is not reconciled.
const DefaultDriverRecheck = 30 * time.Second

// driverWatch tells whether a sidecar serves a driver: the sidecars of a driver elect a leader
// with the Lease sidecarLeaseName(driver), in the COSI namespace or one an admin names (readLease).
// It is read live (a GET per driver with objects that wait, at most every leaseAnswerTTL),
// not cached: the controller may not watch Leases cluster-wide, and only unserved objects ask.
type driverWatch struct {
	reader    client.Reader
	namespace string
	others    []string // Options.SidecarLeaseNamespaces
	grace     time.Duration
	recheck   time.Duration // DefaultDriverRecheck unless a test sets it

	// leases keeps each driver's Lease answer for leaseAnswerTTL: many objects that wait for
	// one driver cost one GET, not one each.
	mu     sync.Mutex
	leases map[string]leaseAnswer
}

// leaseAnswerTTL is how long a Lease's answer is reused.
const leaseAnswerTTL = 5 * time.Second

// leaseReadTimeout bounds a Lease read; one that times out is "cannot tell now".
var leaseReadTimeout = 10 * time.Second

// leaseAnswer is what a driver's Lease said at a time.
type leaseAnswer struct {
	at      time.Time
	why     string // "" when a sidecar may serve the driver
	missing bool   // the Lease does not exist
	unknown bool   // the Lease could not be read: what the objects say stays as it is
	again   time.Duration
}

// sidecarLeaseName is sidecar.LeaseName (a test checks that they agree; the controller does not
// import the sidecar).
func sidecarLeaseName(driver string) string { return strings.ToLower(driver) + "-cosi-sidecar" }

// leaseNamespace is where the sidecars' Leases are: the controller's leader election namespace,
// else its Pod's namespace, else cosi-system (the namespace of the generated Roles).
func leaseNamespace(opts Options) string {
	if opts.LeaderElectionNamespace != "" {
		return opts.LeaderElectionNamespace
	}
	if ns, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil &&
		strings.TrimSpace(string(ns)) != "" {
		return strings.TrimSpace(string(ns))
	}
	return "cosi-system"
}

// check marks the claim WaitingForDriver when its Bucket, bound to it, was not picked up by any sidecar (no
// finalizer, no condition: a sidecar adds both before its first driver call) for longer than the
// grace period and nobody holds the driver's Lease. prev is the claim's Provisioned condition
// before its Bucket was mirrored: a WaitingForDriver is kept while the Lease cannot be read, so
// that a failed read does not flip the claim to Provisioning and back. It returns when to look
// again (0: no need).
func (w *driverWatch) check(
	ctx context.Context, claim *cosiapi.BucketClaim, b *cosiapi.Bucket, prev *metav1.Condition,
) time.Duration {
	if w == nil || b == nil || b.DeletionTimestamp != nil || claim.DeletionTimestamp != nil ||
		controllerutil.ContainsFinalizer(b, cosiapi.FinalizerProtection) || len(b.Status.Conditions) > 0 {
		return 0
	}
	if ref := b.Spec.BucketClaimRef; ref.Namespace != claim.Namespace || ref.Name != claim.Name ||
		(ref.UID != "" && ref.UID != claim.UID) {
		return 0 // bound to another claim: this one is refused (bind), it does not wait
	}
	a := w.unserved(ctx, b.Spec.DriverName, b.CreationTimestamp.Time)
	switch {
	case a.why != "":
		conditions.MarkUnknown(claim, cosiapi.ConditionProvisioned, cosiapi.ReasonWaitingForDriver, fmt.Sprintf(
			"no sidecar serves driver %s: its Lease %s; Bucket %s is provisioned as soon as a sidecar of the "+
				"driver runs", b.Spec.DriverName, a.why, b.Name))
	case a.unknown && prev != nil && prev.Reason == cosiapi.ReasonWaitingForDriver:
		conditions.Set(claim, cosiapi.ConditionProvisioned, prev.Status, prev.Reason, prev.Message)
	}
	return a.again
}

// checkAccess marks a handed-off access WaitingForDriver when no sidecar has acted on it
// (untouchedBySidecar) for longer than the grace period and nobody holds its driver's Lease: the
// sidecar that provisioned its Buckets has stopped since. It returns when to look again (0: no
// need).
func (w *driverWatch) checkAccess(ctx context.Context, ba *cosiapi.BucketAccess) time.Duration {
	if w == nil || !untouchedBySidecar(ba) {
		return 0
	}
	a := w.unserved(ctx, ba.Status.DriverName, ba.CreationTimestamp.Time)
	if a.missing {
		// Its Buckets were provisioned by a sidecar of the driver: with no Lease at all, the
		// sidecars run without leader election, and one that is busy cannot be told from none.
		return 0
	}
	if a.why != "" {
		conditions.MarkUnknown(ba, cosiapi.ConditionProvisioned, cosiapi.ReasonWaitingForDriver, fmt.Sprintf(
			"no sidecar serves driver %s: its Lease %s; the access is granted as soon as a sidecar of the "+
				"driver runs", ba.Status.DriverName, a.why))
	}
	return a.again
}

// untouchedBySidecar reports whether no sidecar has acted on a handed-off access yet: no account
// ID, no driver error, and Provisioned is still what the hand-off (or checkAccess) wrote.
func untouchedBySidecar(ba *cosiapi.BucketAccess) bool {
	if ba.Status.DriverName == "" || ba.Status.AccountID != "" || ba.DeletionTimestamp != nil {
		return false
	}
	pf, p := conditions.Get(ba, cosiapi.ConditionProvisionFailed), conditions.Get(ba, cosiapi.ConditionProvisioned)
	return pf != nil && pf.Reason == cosiapi.ReasonPending && p != nil && p.Status == metav1.ConditionUnknown &&
		(p.Reason == cosiapi.ReasonWaitingForDriver ||
			p.Reason == cosiapi.ReasonProvisioning && strings.HasPrefix(p.Message, handedOffMessage))
}

// handedOffMessage starts the Provisioned message of a hand-off.
const handedOffMessage = "handed off to driver "

// unserved tells why no sidecar serves driver (why "" when one may: its Lease is held and fresh,
// the Lease cannot be read, or the object is younger than the grace period), whether the Lease
// does not exist at all or could not be read, and when to look again.
func (w *driverWatch) unserved(ctx context.Context, driver string, created time.Time) leaseAnswer {
	if age := time.Since(created); age < w.grace {
		return leaseAnswer{again: w.grace - age + time.Second}
	}
	w.mu.Lock()
	a, ok := w.leases[driver]
	w.mu.Unlock()
	if !ok || time.Since(a.at) > leaseAnswerTTL {
		a = w.readLease(ctx, driver)
		w.mu.Lock()
		if w.leases == nil {
			w.leases = map[string]leaseAnswer{}
		}
		w.leases[driver] = a
		w.mu.Unlock()
	}
	return a
}

// readLease reads the Lease of driver's sidecars: in the controller's namespace, else in the
// namespaces where an admin installed drivers (Options.SidecarLeaseNamespaces; sidecars elect in
// their own Pod's namespace). Never in any other: a tenant may create a Lease of that name in
// their own namespace, and would have an unserved driver reported served.
func (w *driverWatch) readLease(ctx context.Context, driver string) leaseAnswer {
	now := time.Now()
	name := sidecarLeaseName(driver)
	// Bounded: every look of a kind waits for this answer, and a read that hangs must not stop them.
	ctx, cancel := context.WithTimeout(ctx, leaseReadTimeout)
	defer cancel()
	lease := &coordinationv1.Lease{}
	var err error
	for _, ns := range append([]string{w.namespace}, w.others...) {
		if err = w.reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, lease); !apierrors.IsNotFound(err) {
			break
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		where := w.namespace + "/" + name
		if len(w.others) > 0 {
			where += " (nor in " + strings.Join(w.others, ", ") + ")"
		}
		return leaseAnswer{at: now, why: where + " does not exist", missing: true, again: w.recheck}
	case apierrors.IsForbidden(err):
		// Cannot tell (no Role to read Leases there): say nothing rather than something wrong.
		return leaseAnswer{at: now}
	case err != nil:
		return leaseAnswer{at: now, unknown: true, again: w.recheck} // cannot tell now; the status stays what it was
	}
	why := leaseProblem(lease, now)
	if why == "" {
		return leaseAnswer{at: now, again: w.recheck} // a sidecar runs; it has not acted yet
	}
	return leaseAnswer{at: now, why: lease.Namespace + "/" + name + " " + why, again: w.recheck}
}

// leaseProblem tells why nobody holds the lease at now, "" when somebody does.
func leaseProblem(lease *coordinationv1.Lease, now time.Time) string {
	switch {
	case lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "":
		return "is held by nobody"
	case lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil:
		return "was never renewed"
	}
	expiry := lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
	if now.Before(expiry) {
		return ""
	}
	return "expired at " + expiry.UTC().Format(time.RFC3339)
}
