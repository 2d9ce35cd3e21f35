package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/lookup"
	"github.com/kube-cosi/cosi/internal/kube/patch"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// The sidecar may not read Secrets: its RBAC is KEP-1979's minimum, create, update, patch and
// delete, because whoever holds its token (it shares a Pod with the vendor's driver) could
// otherwise read every Secret of the cluster, ServiceAccount tokens included. It finds out about
// an access Secret by patching it with a JSON patch whose only operation tests that the Secret
// carries the access's UID label: the API server applies nothing, writes nothing (a patch that
// changes nothing is not stored), and answers with the Secret only when the test passes, that is
// only when the Secret is COSI's own. A Secret of the user's fails the test, and its contents
// never leave the API server.

// slotState is what is at an access Secret's name.
type slotState int

const (
	// slotFree: no Secret has the name.
	slotFree slotState = iota
	// slotOurs: the access's Secret, not being deleted.
	slotOurs
	// slotDeleting: the access's Secret, being deleted (someone deleted it; COSI's finalizer
	// keeps it until the sidecar lets it go).
	slotDeleting
	// slotForeign: a Secret that is not the access's: COSI never writes or deletes it.
	slotForeign
)

// probeSecret tells what is at the name of an access Secret, and returns the Secret when it is
// the access's own.
func (r *BucketAccessReconciler) probeSecret(
	ctx context.Context, ba *cosiapi.BucketAccess, name string,
) (slotState, *corev1.Secret, error) {
	return probeSecret(ctx, r.Client, ba.Namespace, name, ba.UID, false)
}

// probeSecret tells what is at namespace/name for the access with the UID. With owned, a Secret
// whose first owner reference is the access also counts as the access's, even without the label
// (a tenant may have removed it): for deleting, never for writing. The reference must name a
// BucketAccess of COSI's API as well as the UID: a UID alone could be any object's (a Deployment
// that owns a Secret), and whoever may write a grant record's UID would make COSI delete that
// Secret.
func probeSecret(
	ctx context.Context, c client.Client, namespace, name string, uid types.UID, owned bool,
) (slotState, *corev1.Secret, error) {
	tests := [][]map[string]string{
		{{"op": "test", "path": "/metadata/labels/" + jsonPointerEscape(cosiapi.LabelBucketAccessUID), "value": string(uid)}},
	}
	if owned {
		tests = append(tests, []map[string]string{
			{"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": string(uid)},
			{"op": "test", "path": "/metadata/ownerReferences/0/kind", "value": "BucketAccess"},
			{"op": "test", "path": "/metadata/ownerReferences/0/apiVersion", "value": cosiapi.SchemeGroupVersion.String()},
		})
	}
	for _, ops := range tests {
		test, err := json.Marshal(ops)
		if err != nil {
			return 0, nil, err
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
		err = c.Patch(ctx, s, client.RawPatch(types.JSONPatchType, test))
		switch {
		case lookup.NamespaceGone(err):
			// The Secret is there (a missing one is NotFound before admission) but cannot be
			// written until the namespace is recreated: not free, and not deleted yet.
			return 0, nil, err
		case apierrors.IsNotFound(err):
			return slotFree, nil, nil
		case apierrors.IsInvalid(err):
			continue // the test failed: the label (or owner) is missing or names another access
		case err != nil:
			return 0, nil, err
		case s.DeletionTimestamp != nil:
			return slotDeleting, s, nil
		}
		return slotOurs, s, nil
	}
	return slotForeign, nil, nil
}

// deleteAccessSecrets deletes the Secrets of the access with the UID: COSI's finalizer removed,
// then deleted with a UID precondition. Secrets that are not the access's are never touched.
func deleteAccessSecrets(ctx context.Context, c client.Client, namespace string, uid types.UID, names []string) error {
	for _, name := range names {
		s, released, err := releaseAccessSecret(ctx, c, namespace, name, uid)
		if err != nil {
			return err
		}
		if !released {
			state, probed, err := probeSecret(ctx, c, namespace, name, uid, true)
			if err != nil {
				return err
			}
			if state != slotOurs && state != slotDeleting {
				continue
			}
			if err := patch.RemoveFinalizer(ctx, c, probed); err != nil {
				return err
			}
			s = probed
		}
		if s == nil {
			continue // no Secret has the name
		}
		if err := c.Delete(ctx, s, client.Preconditions{UID: &s.UID}); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

// releaseAccessSecret removes COSI's finalizer from the Secret namespace/name in the request that
// finds it the access's, the common case: a JSON patch whose tests pass only when the Secret
// carries the access's UID label and COSI's finalizer alone, applied atomically. released is
// true when the patch applied (s is the Secret), or no Secret has the name (s is nil); false
// when a test failed (another finalizer, none, no such label): probeSecret then decides, as
// before.
func releaseAccessSecret(
	ctx context.Context, c client.Client, namespace, name string, uid types.UID,
) (s *corev1.Secret, released bool, err error) {
	ops, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/labels/" + jsonPointerEscape(cosiapi.LabelBucketAccessUID), "value": string(uid)},
		{"op": "test", "path": "/metadata/finalizers", "value": []string{cosiapi.FinalizerProtection}},
		{"op": "remove", "path": "/metadata/finalizers"},
	})
	if err != nil {
		return nil, false, err
	}
	s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	err = c.Patch(ctx, s, client.RawPatch(types.JSONPatchType, ops))
	switch {
	case lookup.NamespaceGone(err):
		return nil, false, err // there, but not writable until the namespace is recreated
	case apierrors.IsNotFound(err):
		return nil, true, nil
	case apierrors.IsInvalid(err):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return s, true, nil
}

// jsonPointerEscape escapes a map key for a JSON pointer (RFC 6901).
func jsonPointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// secretsReady reports whether every Secret of the access can be written: each name is free or
// holds the access's own Secret. A Secret of the access that someone deleted is let go (COSI's
// finalizer removed) so that it can be written again; ready is false until it is gone, and stuck
// says so when finalizers of others keep it. A foreign Secret makes it false too, and is named in
// conflict. present reports whether any name holds a Secret of the access's own, being deleted or
// not: its credentials may be in a workload.
func (r *BucketAccessReconciler) secretsReady(
	ctx context.Context, ba *cosiapi.BucketAccess,
) (ready, present bool, conflict, stuck string, err error) {
	ready = true
	for _, claim := range ba.Spec.BucketClaims {
		state, s, err := r.probeSecret(ctx, ba, claim.AccessSecretName)
		if err != nil {
			return false, false, "", "", err
		}
		present = present || state == slotOurs || state == slotDeleting
		switch {
		case state == slotForeign:
			return false, present, claim.AccessSecretName, "", nil
		case state == slotDeleting:
			if err := r.releaseSecret(ctx, s); err != nil {
				return false, present, "", "", err
			}
			if others := slices.DeleteFunc(slices.Clone(s.Finalizers),
				func(f string) bool { return f == cosiapi.FinalizerProtection }); len(others) > 0 {
				stuck = fmt.Sprintf("Secret %s is being deleted and held by finalizers %v; it is written again once "+
					"they are removed and it is gone", s.Name, others)
			}
			ready = false
		case state == slotOurs && (s.Immutable != nil && *s.Immutable || s.Type != corev1.SecretTypeOpaque):
			// Made immutable, or of another type, by someone: it could never be written again.
			// Replaced, before anything is granted, so that a grant is never made for a write that
			// must fail.
			if err := deleteAccessSecrets(ctx, r.Client, ba.Namespace, ba.UID, []string{s.Name}); err != nil {
				return false, present, "", "", err
			}
			ready = false
		}
	}
	return ready, present, "", stuck, nil
}

// releaseSecret removes COSI's finalizer from a Secret of the access, so that a deletion goes
// through. The patch is locked to the version probeSecret saw, so it cannot touch a Secret that
// replaced it since.
func (r *BucketAccessReconciler) releaseSecret(ctx context.Context, s *corev1.Secret) error {
	return patch.RemoveFinalizer(ctx, r.Client, s)
}

// deleteSecrets deletes the access's Secrets (KEP-1979 "Deleting a BucketAccess", steps 3.1 and
// 3.2). Secrets that are not the access's are never touched.
func (r *BucketAccessReconciler) deleteSecrets(ctx context.Context, ba *cosiapi.BucketAccess) error {
	return deleteAccessSecrets(ctx, r.Client, ba.Namespace, ba.UID, secretNames(ba))
}

// writeSecret creates the Secret of one claim, or updates the access's own Secret. A Secret that
// is not the access's is never overwritten: the user may have created it, and its data is theirs.
// credentialID, when set, is the credential_id of the credential in data (AnnotationCredentialID).
func (r *BucketAccessReconciler) writeSecret(
	ctx context.Context, ba *cosiapi.BucketAccess, claim cosiapi.BucketClaimAccess, data map[string][]byte,
	credentialID string,
) error {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      claim.AccessSecretName,
			Namespace: ba.Namespace,
			Labels:    map[string]string{cosiapi.LabelBucketAccessUID: string(ba.UID)},
			Annotations: map[string]string{
				cosiapi.AnnotationBucketAccessReference: ba.Namespace + "/" + ba.Name,
				cosiapi.AnnotationBucketClaimReference:  ba.Namespace + "/" + claim.BucketClaimName,
				cosiapi.AnnotationSecretDataKeys:        strings.Join(slices.Sorted(maps.Keys(data)), ","),
				cosiapi.AnnotationSecretCheckInterval:   r.SecretCheckInterval.String(),
			},
			Finalizers: []string{cosiapi.FinalizerProtection},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	if credentialID != "" {
		secret.Annotations[cosiapi.AnnotationCredentialID] = credentialID
	}
	if err := controllerutil.SetControllerReference(ba, secret, r.Client.Scheme()); err != nil {
		return err
	}
	err := r.Client.Create(ctx, secret)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	state, existing, err := r.probeSecret(ctx, ba, secret.Name)
	switch {
	case err != nil:
		return err
	case state == slotFree:
		return fmt.Errorf("secret %s was deleted while being written; writing it again", secret.Name)
	case state == slotForeign:
		return errSecretConflict{secret.Name}
	case state == slotDeleting:
		// Let go (COSI's finalizer removed), so that it goes and is written again.
		if err := r.releaseSecret(ctx, existing); err != nil {
			return err
		}
		return fmt.Errorf("secret %s is being deleted; writing it again when it is gone", secret.Name)
	case existing.Immutable != nil && *existing.Immutable || existing.Type != corev1.SecretTypeOpaque:
		// Made immutable, or of another type, by someone: it cannot be written in place, and is
		// replaced (as secretsReady does before a grant).
		if err := deleteAccessSecrets(ctx, r.Client, ba.Namespace, ba.UID, []string{secret.Name}); err != nil {
			return err
		}
		return fmt.Errorf("secret %s was made immutable or of another type; writing it again when it is gone",
			secret.Name)
	}
	orig := existing.DeepCopy()
	existing.Data = data
	if existing.Labels == nil {
		existing.Labels = map[string]string{}
	}
	if existing.Annotations == nil {
		existing.Annotations = map[string]string{}
	}
	for k, v := range secret.Labels {
		existing.Labels[k] = v
	}
	delete(existing.Annotations, cosiapi.AnnotationCredentialID)
	for k, v := range secret.Annotations {
		existing.Annotations[k] = v
	}
	controllerutil.AddFinalizer(existing, cosiapi.FinalizerProtection)
	return r.Client.Patch(ctx, existing, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}

// errSecretConflict: an access Secret's name is taken by a Secret that is not the access's.
type errSecretConflict struct{ name string }

func (e errSecretConflict) Error() string {
	return fmt.Sprintf("Secret %s exists and does not belong to this BucketAccess; COSI will not overwrite it, "+
		"and grants the access once it is gone (accessSecretName cannot change: delete or rename that Secret, "+
		"or delete this BucketAccess and create one with another accessSecretName)", e.name)
}

// writeSecrets writes the Secret of each claim from the driver's answer.
func (r *BucketAccessReconciler) writeSecrets(
	ctx context.Context,
	ba *cosiapi.BucketAccess,
	buckets map[string]*cosiapi.Bucket,
	protocol cosiproto.ObjectProtocol_Type,
	resp *cosiproto.DriverGrantBucketAccessResponse,
) error {
	for _, claim := range ba.Spec.BucketClaims {
		bucketID := buckets[claim.BucketClaimName].Status.BucketID
		var info *cosiproto.ProtocolBucketInfo
		for _, b := range resp.GetBuckets() {
			if b.GetBucketId() == bucketID {
				info = b.GetBucketInfo()
			}
		}
		data := secretData(protocol, info, resp.GetCredentials(), resp.GetCertificateAuthority())
		if err := r.writeSecret(ctx, ba, claim, data, resp.GetCredentialId()); err != nil {
			var conflict errSecretConflict
			if errors.As(err, &conflict) {
				return secretTaken(conflict)
			}
			return secretWriteFailed(claim.AccessSecretName, err)
		}
	}
	return nil
}
