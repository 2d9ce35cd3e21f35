package sidecar

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// bucketFence orders the deletion of a backend bucket against the grants this sidecar makes on
// it. Each side checks the other in the cache, which may lag: a grant could check a Bucket whose
// deletion the cache does not show yet, and the deletion then look for grant records before the
// cache shows the grant's (TestAttackClaimVanishesDuringHandOff saw a bucket deleted 8 ms after a
// grant on it; TestBucketDeletionWaitsForAGrantTheCacheDoesNotShow). Both sides run in this
// process (one leader per driver, as for inFlight), so a process-local fence is enough:
//
//   - a grant enters before it records anything or asks the driver, unless a Bucket of it is
//     doomed; when it leaves, the record it wrote stays pending for its Buckets until the cache
//     shows it naming them (what the deletion's look at the records reads);
//   - a deletion dooms the Bucket before it looks at the records, and only when no grant on it is
//     inside and none of its pending records is missing from the cache (one it finds deleted, by
//     an uncached read, is no longer pending).
//
// Whichever comes first, the other sees it. Buckets are known by UID: a Bucket made again under
// a name is another Bucket.
type bucketFence struct {
	mu       sync.Mutex
	granting map[types.UID]int
	pending  map[types.UID][]pendingRecord
	doomed   map[types.UID]time.Time // since when the Bucket's deletion runs, as last looked
}

// pendingRecord is a grant record that the cache did not show naming bucket when its grant left.
type pendingRecord struct {
	key    types.NamespacedName
	bucket string
}

// doomedFor is how long a Bucket stays doomed after its deletion last looked: longer than any
// grant takes from its look at the Bucket in the cache to the fence (a reconcile ends within
// operationTimeout). A grant that looks later finds the deletion in the cache, or the Bucket gone.
const doomedFor = 10 * time.Minute

// enterFence lets a grant on the Buckets in, unless one of them is doomed: then leave is nil and
// doomed names it. leave takes the record the grant wrote (nil when it wrote none).
func (b *grantBook) enterFence(buckets map[string]*cosiapi.Bucket) (leave func(*corev1.ConfigMap), doomed string) {
	f := &b.fence
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, bucket := range buckets {
		if since, ok := f.doomed[bucket.UID]; ok && time.Since(since) <= doomedFor {
			return nil, bucket.Name
		}
	}
	if f.granting == nil {
		f.granting = map[types.UID]int{}
	}
	for _, bucket := range buckets {
		f.granting[bucket.UID]++
	}
	var once sync.Once
	return func(written *corev1.ConfigMap) {
		once.Do(func() { b.leaveFence(buckets, written) })
	}, ""
}

// leaveFence lets the grant out, its record pending for its Buckets until the cache shows it.
// Records pending for them that the cache now shows are no longer pending.
func (b *grantBook) leaveFence(buckets map[string]*cosiapi.Bucket, written *corev1.ConfigMap) {
	f := &b.fence
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, bucket := range buckets {
		if f.granting[bucket.UID]--; f.granting[bucket.UID] <= 0 {
			delete(f.granting, bucket.UID)
		}
		b.pendLocked(bucket, written)
	}
}

// pend keeps a record written for the Bucket outside a grant (the migration of an earlier
// version's grants, bucket_legacy.go) pending until the cache shows it.
func (b *grantBook) pend(bucket *cosiapi.Bucket, written *corev1.ConfigMap) {
	b.fence.mu.Lock()
	defer b.fence.mu.Unlock()
	b.pendLocked(bucket, written)
}

// pendLocked adds written, unless the cache shows it, to the Bucket's pending records, and drops
// those the cache now shows. The cache is read in memory: nothing here waits on the API server.
func (b *grantBook) pendLocked(bucket *cosiapi.Bucket, written *corev1.ConfigMap) {
	f := &b.fence
	left := slices.DeleteFunc(f.pending[bucket.UID], func(p pendingRecord) bool {
		return b.store.showsNaming(p.key, p.bucket)
	})
	if written != nil {
		p := pendingRecord{types.NamespacedName{Namespace: written.Namespace, Name: written.Name}, bucket.Name}
		if !b.store.showsNaming(p.key, p.bucket) && !slices.Contains(left, p) {
			left = append(left, p)
		}
	}
	if len(left) == 0 {
		delete(f.pending, bucket.UID)
		return
	}
	if f.pending == nil {
		f.pending = map[types.UID][]pendingRecord{}
	}
	f.pending[bucket.UID] = left
}

// doom marks the Bucket as being deleted, unless a grant on it is inside or a record of one is
// missing from the cache: then false, and the deletion waits.
func (b *grantBook) doom(ctx context.Context, bucket *cosiapi.Bucket) (bool, error) {
	f := &b.fence
	f.mu.Lock()
	if f.granting[bucket.UID] > 0 {
		f.mu.Unlock()
		return false, nil
	}
	pending := slices.Clone(f.pending[bucket.UID])
	f.mu.Unlock()

	settled := map[pendingRecord]bool{}
	for _, p := range pending {
		if b.store.showsNaming(p.key, p.bucket) {
			settled[p] = true
			continue
		}
		// Not in the cache: not seen yet, or deleted (revoked) or changed since so that the look
		// at the records would not find it for this Bucket anyway.
		cm := &corev1.ConfigMap{}
		err := b.reader.Get(ctx, p.key, cm)
		switch {
		case apierrors.IsNotFound(err):
			settled[p] = true
		case err != nil:
			return false, err
		case !b.store.names(cm, p.bucket):
			settled[p] = true
		}
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	left := slices.DeleteFunc(f.pending[bucket.UID], func(p pendingRecord) bool { return settled[p] })
	if len(left) == 0 {
		delete(f.pending, bucket.UID)
	} else {
		f.pending[bucket.UID] = left
	}
	if f.granting[bucket.UID] > 0 || len(left) > 0 {
		return false, nil
	}
	now := time.Now()
	maps.DeleteFunc(f.doomed, func(_ types.UID, since time.Time) bool { return now.Sub(since) > doomedFor })
	if f.doomed == nil {
		f.doomed = map[types.UID]time.Time{}
	}
	f.doomed[bucket.UID] = now
	return true, nil
}

// showsNaming reports whether the cache holds the record key naming the Bucket bucket: what the
// Bucket's look at its records (forBucket) finds.
func (s grantStore) showsNaming(key types.NamespacedName, bucket string) bool {
	cm := &corev1.ConfigMap{}
	if err := s.client.Get(context.Background(), key, cm); err != nil {
		return false
	}
	return s.names(cm, bucket)
}

// names reports whether cm is one of the driver's grant records and names the Bucket bucket.
func (s grantStore) names(cm *corev1.ConfigMap, bucket string) bool {
	if cm.Labels[cosiapi.LabelGrantDriver] != s.driver {
		return false
	}
	g, err := cachedGrantOf(cm)
	return err == nil && slices.Contains(g.BucketNames, bucket)
}
