package sidecar

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/kube/lookup"
	"github.com/kube-cosi/cosi/internal/kube/patch"
)

// recordGranted records the grant in status. Once the driver has answered, the result is written
// whatever else changed the object meanwhile (a tenant's label, the controller's condition): a
// conflict here is retried on a fresh copy, never by granting again. The first patch is made on
// ba as it is, locked to its version: the copy that phase 1's patch returned, unless this grant
// had no phase 1 (then it may be the cache's, and a stale one conflicts). An access that a fresh
// copy shows replaced (deleted, and another created under its name) gets nothing: the new one was
// never granted, and the old one's grant record is revoked as its access is gone.
// written is the grant record as the grant left it (nil: none): the condition names the accounts
// a v1alpha1 driver chose itself, which it records.
func (r *BucketAccessReconciler) recordGranted(
	ctx context.Context, ba *cosiapi.BucketAccess, written *corev1.ConfigMap,
) error {
	var g *grantRecord
	if written != nil {
		if rec, err := parseGrantRecord(written); err == nil {
			g = &rec
		}
	}
	fresh := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !fresh {
			live := &cosiapi.BucketAccess{}
			if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(ba), live); err != nil {
				return err
			}
			if live.UID != ba.UID {
				return errReplaced
			}
			*ba = *live
		}
		fresh = false
		status := r.record.status(ba)
		conditions.MarkTrue(ba, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioned, grantedMessage(g))
		conditions.MarkFalse(ba, cosiapi.ConditionProvisionFailed, cosiapi.ReasonDriverSucceeded, "")
		conditions.MarkTrue(ba, cosiapi.ConditionResourcesValidated, cosiapi.ReasonValid, "")
		return status.Patch(ctx, patch.OptimisticLock)
	})
	if err != nil {
		if errors.Is(err, errReplaced) {
			return nil
		}
		return lookup.IgnoreGone(err)
	}
	r.checks.done(client.ObjectKeyFromObject(ba), ba.UID)
	return nil
}

// errReplaced: the object read again under the name is another one (its UID differs).
var errReplaced = errors.New("replaced by another object of the same name")

// secretWriteFailed records that a Secret could not be written after the grant
// (ResourcesValidated False, as KEP-1979 says of Secrets that cannot be written): a ResourceQuota,
// a policy, a server error, or a Secret that someone made unwritable. The write is retried with
// backoff, with the driver's answer kept in memory (answers): never with a new grant.
func secretWriteFailed(name string, err error) error {
	msg := fmt.Sprintf("access granted, but Secret %s cannot be written; retrying the write: %v", name, err)
	return secretNotWritable(msg, fmt.Errorf("writing Secret %s: %w", name, err))
}

// secretUnwritable records that a Secret of the access cannot be written (ResourcesValidated
// False, SecretWriteFailed; Provisioned not True unless it was) with msg, and returns err: the
// write is retried with backoff.
func (r *BucketAccessReconciler) secretUnwritable(
	ctx context.Context, ba *cosiapi.BucketAccess, msg string, err error,
) error {
	status := r.record.status(ba)
	msg = conditions.Truncate(msg)
	conditions.MarkFalse(ba, cosiapi.ConditionResourcesValidated, cosiapi.ReasonSecretWriteFailed, msg)
	if !conditions.IsTrue(ba, cosiapi.ConditionProvisioned) {
		conditions.MarkUnknown(ba, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioning, msg)
	}
	if status.ConditionsChanged() {
		r.Recorder.Eventf(ba, nil, corev1.EventTypeWarning, cosiapi.EventFailedGrantAccess, "WriteSecret", "%s", msg)
		if perr := status.Patch(ctx, patch.OptimisticLock); perr != nil {
			return fmt.Errorf("%w (and recording it: %w)", err, perr)
		}
	}
	return err
}

// secretsWritten records that every Secret of a provisioned access holds its credentials again
// (ResourcesValidated True), after a rotation wrote them or a check found them intact, when the
// condition said that one could not be written (secretUnwritable, secretConflict): reasons only
// the sidecar gives. Nothing is written otherwise.
func (r *BucketAccessReconciler) secretsWritten(ctx context.Context, ba *cosiapi.BucketAccess) error {
	switch {
	case conditions.Has(ba, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse, cosiapi.ReasonSecretWriteFailed),
		conditions.Has(ba, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse, cosiapi.ReasonSecretConflict):
	default:
		return nil
	}
	status := r.record.status(ba)
	conditions.MarkTrue(ba, cosiapi.ConditionResourcesValidated, cosiapi.ReasonValid, "")
	return status.Patch(ctx, patch.OptimisticLock)
}

// secretConflict records that an access Secret's name is taken (ResourcesValidated False,
// SecretConflict) and retries later: the sidecar cannot watch Secrets, so it looks again after a
// while rather than waiting for an event.
func (r *BucketAccessReconciler) secretConflict(ctx context.Context, ba *cosiapi.BucketAccess, msg string) error {
	status := r.record.status(ba)
	conditions.MarkFalse(ba, cosiapi.ConditionResourcesValidated, cosiapi.ReasonSecretConflict, msg)
	if !conditions.IsTrue(ba, cosiapi.ConditionProvisioned) {
		conditions.MarkUnknown(ba, cosiapi.ConditionProvisioned, cosiapi.ReasonWaitingForResources, msg)
	}
	if status.ConditionsChanged() {
		r.Recorder.Eventf(ba, nil, corev1.EventTypeWarning, cosiapi.EventFailedGrantAccess, "WriteSecret", "%s", msg)
		if err := status.Patch(ctx, patch.OptimisticLock); err != nil {
			return err
		}
	}
	return errRequeue(msg)
}

// The steps of a grant decide; recordProblem alone writes what stopped one into the access's
// status. A step returns a grantProblem (invalidObjects, invalidAnswer, driverFailed,
// waitingForBuckets, secretTaken, secretNotWritable) and the grant records it on its way out,
// whichever step it came from.

// problemKind is what stopped a grant.
type problemKind int

const (
	// problemInvalid: the objects cannot be granted as they are (ResourcesValidated False); final.
	problemInvalid problemKind = iota
	// problemInvalidAnswer: the driver's answer is unusable (ProvisionFailed True); final.
	problemInvalidAnswer
	// problemFailed: a driver call failed; retried or final by its code.
	problemFailed
	// problemWaiting: Buckets of the access are not provisioned yet; their watch wakes it.
	problemWaiting
	// problemConflict: an access Secret's name is taken by a Secret that is not the access's.
	problemConflict
	// problemUnwritable: an access Secret cannot be written; retried.
	problemUnwritable
)

// grantProblem is what stopped a grant, as a step returns it.
type grantProblem struct {
	kind        problemKind
	reason, msg string
	rpc         rpcError
	// err is returned once the problem is recorded (problemUnwritable).
	err error
}

func (p grantProblem) Error() string {
	if p.kind == problemFailed {
		return p.rpc.Error()
	}
	return p.msg
}

func invalidObjects(reason, msg string) error {
	return grantProblem{kind: problemInvalid, reason: reason, msg: msg}
}

func invalidAnswer(msg string) error {
	return grantProblem{kind: problemInvalidAnswer, reason: cosiapi.ReasonProvisioningFailed, msg: msg}
}

func driverFailed(method string, err error) error {
	return grantProblem{kind: problemFailed, rpc: rpcError{method, err}}
}

func waitingForBuckets(names []string) error {
	return grantProblem{kind: problemWaiting, msg: fmt.Sprintf("waiting for Buckets %v to be provisioned", names)}
}

func secretTaken(conflict errSecretConflict) error {
	return grantProblem{kind: problemConflict, msg: conflict.Error()}
}

func secretNotWritable(msg string, err error) error {
	return grantProblem{kind: problemUnwritable, msg: msg, err: err}
}

// recordProblem records in the access's status the problem that stopped a grant, and returns what
// its reconcile hands to controller-runtime: a final error, a driver error retried by its code, a
// wait, or nil while the access waits for a watched object. Other errors are returned as they are.
func (r *BucketAccessReconciler) recordProblem(ctx context.Context, ba *cosiapi.BucketAccess, err error) error {
	var p grantProblem
	if !errors.As(err, &p) {
		return err
	}
	switch p.kind {
	case problemInvalid:
		return r.record.invalid(ctx, ba, p.reason, p.msg)
	case problemInvalidAnswer:
		return r.record.invalidAnswer(ctx, ba, p.reason, p.msg)
	case problemFailed:
		return r.record.failed(ctx, ba, p.rpc, cosiapi.EventFailedGrantAccess)
	case problemWaiting:
		return r.waitForBuckets(ctx, ba, p.msg)
	case problemConflict:
		return r.secretConflict(ctx, ba, p.msg)
	default:
		return r.secretUnwritable(ctx, ba, p.msg, p.err)
	}
}

// waitForBuckets records that the access waits for its Buckets to be provisioned. A granted access
// whose lost Secret waits for its Bucket stays provisioned: its key works, and Provisioned True is
// what keeps its next grant from revoking it (granted).
func (r *BucketAccessReconciler) waitForBuckets(ctx context.Context, ba *cosiapi.BucketAccess, msg string) error {
	status := r.record.status(ba)
	if conditions.IsTrue(ba, cosiapi.ConditionProvisioned) {
		conditions.MarkUnknown(ba, cosiapi.ConditionResourcesValidated, cosiapi.ReasonWaitingForResources, msg)
	} else {
		conditions.MarkUnknown(ba, cosiapi.ConditionProvisioned, cosiapi.ReasonWaitingForResources, msg)
	}
	if !status.ConditionsChanged() {
		return nil
	}
	r.Recorder.Eventf(ba, nil, corev1.EventTypeNormal, cosiapi.EventWaitingForBucket, "Grant", msg)
	return status.Patch(ctx, patch.OptimisticLock)
}
