package sidecar

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/kube/patch"
	"github.com/kube-cosi/cosi/internal/kube/requeue"
)

// The conditions the sidecar writes: all of them, on Buckets, whose status only the sidecar
// writes, and on BucketAccesses once the controller has handed them off.
var sidecarConditions = []string{
	cosiapi.ConditionProvisioned,
	cosiapi.ConditionProvisionFailed,
	cosiapi.ConditionResourcesValidated,
	cosiapi.ConditionCredentialsRotated,
}

// statusRecorder records on one kind of object what stops its provisioning or grant: a failed
// driver call, or a final problem with the objects or the driver's answer. Both go into conditions
// and a Warning event. The Bucket and BucketAccess reconcilers each have one.
type statusRecorder[T patch.Object] struct {
	client client.Client
	events events.EventRecorder
	// lock: the sidecar alone writes a Bucket's status (NoLock); the controller writes a
	// BucketAccess's too, and a merge patch of the conditions list would otherwise drop its
	// conditions (OptimisticLock).
	lock patch.Lock
	// initial are the conditions a record adds as Unknown when they are missing: a failed call
	// adds them first, a final problem last.
	initial []string
	// invalidEvent and invalidAction are the reason and the action of a final problem's event.
	invalidEvent, invalidAction string
	// invalidUnprovisions: a final problem makes Provisioned False even when it was True.
	invalidUnprovisions bool
	// kind names the objects in events; backoff is their reconciler's rate limiter, which tells
	// when a failed call is tried again (nil: not said).
	kind    string
	backoff workqueue.TypedRateLimiter[reconcile.Request]
}

// status takes a snapshot of obj, whose status the caller then changes and writes with the
// recorder's lock.
func (s statusRecorder[T]) status(obj T) *patch.Status[T] {
	return patch.NewStatus(s.client, obj, sidecarConditions...)
}

// failed records a failed driver call in conditions and a Warning event. Provisioned becomes
// Unknown while the call will be retried, False when it will not, and stays True once the object
// was provisioned (KEP-1979 "Conditions": a failing RPC does not undo a provisioned bucket).
func (s statusRecorder[T]) failed(ctx context.Context, obj T, rpc rpcError, eventReason string) error {
	status := s.status(obj)
	conditions.Init(obj, s.initial...)
	conditions.MarkTrue(obj, cosiapi.ConditionProvisionFailed, cosiapi.ReasonDriverError, rpc.Error())
	if !conditions.IsTrue(obj, cosiapi.ConditionProvisioned) && obj.GetDeletionTimestamp() == nil {
		if rpc.retryable() {
			conditions.MarkUnknown(obj, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioning, "retrying: "+rpc.Error())
		} else {
			conditions.MarkFalse(obj, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioningFailed, rpc.Error())
		}
	}
	// The event says when the call is tried again (kubectl describe shows it); the condition does
	// not, so that a retry that fails the same way writes nothing.
	s.events.Eventf(obj, nil, corev1.EventTypeWarning, eventReason, rpc.method, "%s",
		conditions.Truncate(rpc.Error()+s.next(obj, rpc)))
	if err := status.Patch(ctx, s.lock); err != nil {
		// Retried with backoff whatever the driver's code: a final error not recorded would
		// leave the status saying nothing of it, with nothing retrying (the driver is asked once
		// more, and the answer recorded then).
		return fmt.Errorf("%s (and recording it: %w)", rpc.Error(), err)
	}
	return rpc // result() retries or stops, by the driver's code
}

// next says when a failed call is tried again.
func (s statusRecorder[T]) next(obj T, rpc rpcError) string {
	if !rpc.retryable() {
		return fmt.Sprintf("; not retried until the %s changes", s.kind)
	}
	if s.backoff == nil {
		return ""
	}
	d := requeue.NextBackoff(s.backoff, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
	return fmt.Sprintf("; retrying in %s, at %s", d.Round(time.Millisecond),
		time.Now().Add(d).UTC().Format(time.RFC3339))
}

// invalid records a final problem with the Kubernetes objects (ResourcesValidated False), and
// stops retrying until the object changes.
func (s statusRecorder[T]) invalid(ctx context.Context, obj T, reason, msg string) error {
	return s.final(ctx, obj, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse, reason, msg)
}

// invalidAnswer records a final problem with the driver's answer (ProvisionFailed True), and
// stops retrying until the object changes.
func (s statusRecorder[T]) invalidAnswer(ctx context.Context, obj T, reason, msg string) error {
	return s.final(ctx, obj, cosiapi.ConditionProvisionFailed, metav1.ConditionTrue, reason, msg)
}

// final records a final problem that is not a driver error code: Provisioned False, and the
// condition typ that says what the problem is about.
func (s statusRecorder[T]) final(
	ctx context.Context, obj T, typ string, st metav1.ConditionStatus, reason, msg string,
) error {
	status := s.status(obj)
	if s.invalidUnprovisions || !conditions.IsTrue(obj, cosiapi.ConditionProvisioned) {
		conditions.MarkFalse(obj, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioningFailed, msg)
	}
	conditions.Set(obj, typ, st, reason, msg)
	conditions.Init(obj, s.initial...)
	s.events.Eventf(obj, nil, corev1.EventTypeWarning, s.invalidEvent, s.invalidAction, "%s", conditions.Truncate(msg))
	if err := status.Patch(ctx, s.lock); err != nil {
		return err
	}
	return finalError("%s", msg)
}
