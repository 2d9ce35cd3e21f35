// Package lookup reads what the COSI reconcilers decide irreversible steps on: whether an object
// is gone, confirmed by the API server and not only by the cache.
package lookup

import (
	"context"

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
