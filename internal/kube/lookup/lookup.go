// Package lookup reads what the COSI reconcilers decide irreversible steps on: whether an object
// is gone, confirmed by the API server and not only by the cache, and not mistaken for its
// namespace being gone.
package lookup

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ConfirmGone reports whether the object at key is gone: not found, or replaced by another object
// of the same name (same reports false for it). The cache answers "it exists"; "gone" is confirmed
// by the live reader, because the cache may not have an object created a moment ago. Decisions
// that delete or revoke are made on it.
func ConfirmGone(
	ctx context.Context,
	cache, live client.Reader,
	key client.ObjectKey,
	obj client.Object,
	same func() bool,
) (bool, error) {
	for _, reader := range []client.Reader{cache, live} {
		err := reader.Get(ctx, key, obj)
		if client.IgnoreNotFound(err) != nil {
			return false, err
		}
		if err == nil && same() {
			return false, nil
		}
	}
	return true, nil
}

// NamespaceGone reports whether err is the API server's refusal of a write to an object whose
// namespace no longer exists. A namespace can be finished while objects with finalizers are left
// in it (kube-controller-manager's namespace controller takes a resource that is not served for a
// moment, right after an API server restart, for empty: docs/reliability.md). The object is still
// there and can be read and deleted, but the NamespaceLifecycle admission plugin refuses every
// other write to it with NotFound, for the namespace: it is not the object that is gone. The
// write succeeds once an admin recreates the namespace.
func NamespaceGone(err error) bool {
	var st apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &st) {
		return false
	}
	d := st.Status().Details
	return d != nil && d.Group == "" && d.Kind == "namespaces"
}

// IgnoreGone is client.IgnoreNotFound for writes: nil when the object written is gone, but not
// when the write was refused because the object's namespace is gone (NamespaceGone): that object
// may still wait for the write.
func IgnoreGone(err error) error {
	if apierrors.IsNotFound(err) && !NamespaceGone(err) {
		return nil
	}
	return err
}
