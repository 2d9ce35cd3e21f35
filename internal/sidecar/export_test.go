package sidecar

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/patch"
)

// RecordGranted records a grant of ba in its status as the BucketAccess reconciler does after the
// driver answered, writing with c and reading again with live, and returns the UIDs whose Secret
// checks it scheduled.
func RecordGranted(ctx context.Context, c client.Client, live client.Reader, ba *cosiapi.BucketAccess) (
	[]types.UID, error,
) {
	r := &BucketAccessReconciler{Client: c, APIReader: live}
	r.record = statusRecorder[*cosiapi.BucketAccess]{client: c, lock: patch.OptimisticLock, kind: "BucketAccess"}
	err := r.recordGranted(ctx, ba, nil)
	var checked []types.UID
	for _, o := range r.checks.objects {
		checked = append(checked, o.uid)
	}
	return checked, err
}

// CachedGrantKey is the key under which the sidecar's cache keeps what it reads of a grant record.
const CachedGrantKey = cachedGrantKey
