package sidecar

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// renew writes the access's Secrets again from a new grant, before the credentials they hold
// expire. The record is read uncached first: the cache may not show the last renewal yet, and
// renewing twice would ask the driver for nothing.
func (r *BucketAccessReconciler) renew(ctx context.Context, ba *cosiapi.BucketAccess) (time.Duration, error) {
	g, cm, err := r.Grants.store.get(ctx, ba.UID)
	if err != nil || g == nil || g.Rotation != nil && g.Rotation.To != "" && g.Rotation.Written == nil {
		return requeueDelay, err
	}
	renewAt := renewal(g.ExpiryFrom, g.Expiry)
	if renewAt.IsZero() || time.Now().Before(renewAt) {
		return until(renewAt), nil
	}
	if g.Rotation != nil && g.Rotation.Written == nil {
		// A rotation whose driver call has not answered yet (it keeps failing) does not let the
		// credentials the Secrets hold expire: it is given up, and asked again after the renewal
		// (its annotation counts as new, or the period starts over from the renewal). Until it
		// is given up, a grant could leave a credential of the rotation that nobody retires.
		g.Rotation, g.RotateToken = nil, ""
		if err := r.Grants.store.update(ctx, cm, *g); err != nil {
			return 0, err
		}
		r.rotations.forget(ba.UID)
	}
	old, from := g.Expiry.UTC().Format(time.RFC3339), g.ExpiryFrom
	next, err := r.grant(ctx, ba, true)
	if err != nil {
		return 0, err
	}
	g, _, err = r.Grants.store.get(ctx, ba.UID)
	if err != nil || g == nil {
		return until(next), err
	}
	// A grant that wrote the Secrets recorded when (renewals are requeueDelay apart, more than
	// the record's precision); one that did not (a Bucket being provisioned again, the access
	// going) asked the driver nothing: looked at again later, or when the objects change.
	if g.ExpiryFrom != nil && g.ExpiryFrom.Equal(from) {
		return requeueDelay, nil
	}
	switch {
	case g.Expiry == nil:
		r.Recorder.Eventf(ba, nil, corev1.EventTypeNormal, cosiapi.EventSecretsRefreshed, "Refresh",
			"renewed before the credentials' expiry at %s: the new credentials do not expire", old)
	case g.Expiry.UTC().Format(time.RFC3339) > old:
		r.Recorder.Eventf(ba, nil, corev1.EventTypeNormal, cosiapi.EventSecretsRefreshed, "Refresh",
			"renewed before the credentials' expiry at %s: the new credentials expire at %s", old,
			g.Expiry.UTC().Format(time.RFC3339))
	case next.IsZero():
		r.Recorder.Eventf(ba, nil, corev1.EventTypeWarning, cosiapi.EventFailedRefresh, "Refresh",
			"the driver's new credentials expired already, at %s: not renewed again until an admin sets a new "+
				"value of annotation %s", g.Expiry.UTC().Format(time.RFC3339), cosiapi.AnnotationRefreshSecret)
	default:
		r.Recorder.Eventf(ba, nil, corev1.EventTypeWarning, cosiapi.EventFailedRefresh, "Refresh",
			"the driver's new credentials still expire at %s: renewing again at %s", old,
			next.UTC().Format(time.RFC3339))
	}
	return until(next), nil
}
