package chaos

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The harness's own API calls ride out the faults it injects: etcd and the API server go away
// for seconds. Each call is repeated until it gets an answer that repeating cannot change.

// apiPatience is how long the harness keeps trying one API call before it gives up on the run.
const apiPatience = 3 * time.Minute

// retry calls f until it returns nil or an error that is an answer (not found, exists, invalid,
// forbidden), for at most apiPatience.
func retry(ctx context.Context, what string, f func(ctx context.Context) error) error {
	deadline := time.Now().Add(apiPatience)
	for {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := f(callCtx)
		cancel()
		if err == nil || answered(err) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no answer from the API server for %v: %w", what, apiPatience, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func answered(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) || apierrors.IsInvalid(err) ||
		apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) || apierrors.IsConflict(err)
}

// create creates obj; when an earlier attempt created it but its answer was lost, it reads it, so
// that obj has its UID either way.
func (r *run) create(ctx context.Context, obj client.Object) error {
	err := retry(ctx, "creating "+obj.GetName(), func(ctx context.Context) error { return r.client.Create(ctx, obj) })
	if apierrors.IsAlreadyExists(err) {
		return r.get(ctx, obj)
	}
	if err != nil {
		return fmt.Errorf("creating %s: %w", obj.GetName(), err)
	}
	return nil
}

// get reads obj.
func (r *run) get(ctx context.Context, obj client.Object) error {
	return retry(ctx, "reading "+obj.GetName(), func(ctx context.Context) error {
		return r.client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	})
}

// del deletes obj; gone already is deleted.
func (r *run) del(ctx context.Context, obj client.Object) error {
	var opts []client.DeleteOption
	if uid := obj.GetUID(); uid != "" {
		opts = append(opts, client.Preconditions{UID: &uid})
	}
	err := retry(ctx, "deleting "+obj.GetName(), func(ctx context.Context) error {
		return r.client.Delete(ctx, obj, opts...)
	})
	if err = client.IgnoreNotFound(err); err != nil {
		return fmt.Errorf("deleting %s: %w", obj.GetName(), err)
	}
	return nil
}

// list lists into list.
func (r *run) list(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return retry(ctx, "listing", func(ctx context.Context) error { return r.client.List(ctx, list, opts...) })
}
