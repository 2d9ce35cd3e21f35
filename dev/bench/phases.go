package bench

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
)

// restarts provisions claims and then accesses while restarting controller and sidecar once a
// third of each is done, and counts the driver calls per object: the persisted IDs must keep it at
// one DriverCreateBucket and one DriverGrantBucketAccess per object.
func (s *system) restarts(ctx context.Context, r *RunResult) error {
	n := s.cfg.RestartSize
	ns := fmt.Sprintf("restart-%d", time.Now().UnixNano())
	if err := s.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	before, err := s.scrape(ctx)
	if err != nil {
		return err
	}
	var all []client.Object
	for _, newObj := range []func(string, int) client.Object{claimObject, accessObject} {
		objs := make2(n, ns, newObj)
		uids, _, err := s.create(ctx, objs)
		if err != nil {
			return err
		}
		all = append(all, objs...)
		for {
			_, done := s.watch.times(s.watch.provisioned, uids)
			if done >= n/3 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		for _, p := range []*localenv.Component{s.env.Controller, s.env.Sidecar} {
			if err := s.env.Restart(ctx, p); err != nil {
				return err
			}
		}
		if _, err := s.watch.waitFor(ctx, s.watch.provisioned, uids, 10*time.Minute); err != nil {
			return err
		}
	}
	time.Sleep(500 * time.Millisecond)
	after, err := s.scrape(ctx)
	if err != nil {
		return err
	}
	r.RestartCreateRPCs = rpcs(before.driver, after.driver, "DriverCreateBucket") / float64(n)
	r.RestartGrantRPCs = rpcs(before.driver, after.driver, "DriverGrantBucketAccess") / float64(n)
	if err := s.parallel(
		len(all),
		func(i int) error { return client.IgnoreNotFound(s.client.Delete(ctx, all[len(all)-1-i])) },
	); err != nil {
		return err
	}
	return s.waitDriverEmpty(ctx)
}

func make2(n int, ns string, f func(string, int) client.Object) []client.Object {
	objs := make([]client.Object, n)
	for i := range objs {
		objs[i] = f(ns, i)
	}
	return objs
}

// memory provisions many claims and measures the resident memory of controller and sidecar.
func (s *system) memory(ctx context.Context, r *RunResult) error {
	n := s.cfg.RSSClaims
	ns := "memory"
	if err := s.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	uids, _, err := s.create(ctx, make2(n, ns, claimObject))
	if err != nil {
		return err
	}
	if _, err := s.watch.waitFor(ctx, s.watch.provisioned, uids, 30*time.Minute); err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // settle
	if _, _, r.ControllerRSS, err = procStats(s.env.Controller.Pid()); err != nil {
		return err
	}
	_, _, r.SidecarRSS, err = procStats(s.env.Sidecar.Pid())
	return err
}

// namespaceDeletion provisions N claims with one access each in a namespace, then deletes them all
// at once, as the namespace controller does when a namespace is deleted (a collection delete per
// resource), and measures the time until the driver is empty and the API server's reads of
// BucketAccesses meanwhile: releasing a Bucket and deleting a claim must not list every access
// per object (issue 25, item 18).
func (s *system) namespaceDeletion(ctx context.Context, r *RunResult) error {
	n := s.cfg.NamespaceDeletionSize
	ns := fmt.Sprintf("nsdelete-%d", time.Now().UnixNano())
	if err := s.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	for _, newObj := range []func(string, int) client.Object{claimObject, accessObject} {
		uids, _, err := s.create(ctx, make2(n, ns, newObj))
		if err != nil {
			return err
		}
		if _, err := s.watch.waitFor(ctx, s.watch.provisioned, uids, 10*time.Minute); err != nil {
			return err
		}
	}
	time.Sleep(500 * time.Millisecond)
	before, err := scrapeAPIServer(ctx, s.rest)
	if err != nil {
		return err
	}
	start := time.Now()
	errs := make(chan error, 2)
	for _, obj := range []client.Object{&cosiapi.BucketAccess{}, &cosiapi.BucketClaim{}} {
		go func() { errs <- s.deleteCollection(ctx, obj, ns) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			return err
		}
	}
	if err := s.waitDriverEmpty(ctx); err != nil {
		return err
	}
	r.NamespaceDeletionSec = time.Since(start).Seconds()
	after, err := scrapeAPIServer(ctx, s.rest)
	if err != nil {
		return err
	}
	reads := func(verb string) float64 {
		sel := map[string]string{"verb": verb, "resource": "bucketaccesses", "subresource": ""}
		return (after.sum("apiserver_request_total", sel) - before.sum("apiserver_request_total", sel)) / float64(n)
	}
	r.NamespaceDeletionAccessLists = reads("LIST")
	r.NamespaceDeletionAccessGets = reads("GET")
	return nil
}

// deleteCollection deletes every object of obj's kind in namespace, and again after an error, as
// the namespace controller does: the API server deletes a collection one object at a time, and a
// large one can outlast its request timeout (a minute) on a busy machine.
func (s *system) deleteCollection(ctx context.Context, obj client.Object, namespace string) error {
	var err error
	for range 10 {
		if err = s.client.DeleteAllOf(ctx, obj, client.InNamespace(namespace)); err == nil || ctx.Err() != nil {
			return err
		}
		s.cfg.logf("deleting the %T of %s again: %v", obj, namespace, err)
	}
	return err
}
