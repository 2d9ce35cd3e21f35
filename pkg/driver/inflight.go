package driver

import (
	"context"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// lockKey is one key a driver call holds while it is in flight: a bucket ID or an account ID,
// held alone (exclusive) or together with other calls (shared).
type lockKey struct {
	key       string
	exclusive bool
}

// inFlight keeps driver calls apart per key. A call takes its keys in their sorted order, so that
// calls holding several keys (a grant to several buckets) never wait for each other in a cycle;
// a waiting exclusive call keeps new shared ones out, so that a bucket's deletion is not starved by
// a stream of grants.
type inFlight struct {
	mu   sync.Mutex
	keys map[string]*keyState
}

type keyState struct {
	users   int  // calls holding or waiting for the key; the state is dropped at zero
	shared  int  // calls holding it shared
	held    bool // a call holds it exclusively
	writers int  // exclusive calls waiting for it
	// changed is closed (and replaced) whenever the key is released or a waiting call gives up.
	changed chan struct{}
}

func (s *keyState) broadcast() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// lock takes keys, waiting until ctx is done; it returns the function that releases them. The
// error of a wait that gave up is ctx's, as a gRPC status (DEADLINE_EXCEEDED or CANCELLED), naming
// the key waited for.
func (l *inFlight) lock(ctx context.Context, keys []lockKey) (func(), error) {
	keys = normalize(keys)
	for i, k := range keys {
		if err := l.take(ctx, k); err != nil {
			l.release(keys[:i])
			return nil, status.Errorf(status.FromContextError(err).Code(),
				"waiting for the driver call in flight on %s: %v", k.key, err)
		}
	}
	return func() { l.release(keys) }, nil
}

// normalize sorts keys and merges duplicates (exclusive wins).
func normalize(keys []lockKey) []lockKey {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, func(a, b lockKey) int { return strings.Compare(a.key, b.key) })
	out := keys[:0]
	for _, k := range keys {
		if n := len(out); n > 0 && out[n-1].key == k.key {
			out[n-1].exclusive = out[n-1].exclusive || k.exclusive
			continue
		}
		out = append(out, k)
	}
	return out
}

func (l *inFlight) take(ctx context.Context, k lockKey) error {
	l.mu.Lock()
	if l.keys == nil {
		l.keys = map[string]*keyState{}
	}
	s := l.keys[k.key]
	if s == nil {
		s = &keyState{changed: make(chan struct{})}
		l.keys[k.key] = s
	}
	s.users++
	if k.exclusive {
		s.writers++
	}
	for {
		switch {
		case k.exclusive && !s.held && s.shared == 0:
			s.writers--
			s.held = true
			l.mu.Unlock()
			return nil
		case !k.exclusive && !s.held && s.writers == 0:
			s.shared++
			l.mu.Unlock()
			return nil
		}
		changed := s.changed
		l.mu.Unlock()
		select {
		case <-changed:
			l.mu.Lock()
		case <-ctx.Done():
			l.mu.Lock()
			if k.exclusive {
				s.writers--
				s.broadcast() // shared calls held back by this one may go
			}
			l.drop(k.key, s)
			l.mu.Unlock()
			return ctx.Err()
		}
	}
}

func (l *inFlight) release(keys []lockKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		s := l.keys[k.key]
		if k.exclusive {
			s.held = false
		} else {
			s.shared--
		}
		s.broadcast()
		l.drop(k.key, s)
	}
}

// drop forgets a call's interest in the key, and the key once nobody holds or waits for it.
func (l *inFlight) drop(key string, s *keyState) {
	s.users--
	if s.users == 0 {
		delete(l.keys, key)
	}
}

// size is how many keys are held or waited for (tests).
func (l *inFlight) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

// The keys of each call. KEP-1979 says nothing about concurrent calls; the v1alpha1 spec makes the
// caller ensure "no more than one call in-flight per Bucket". For a v1alpha1 driver (perBucket)
// every call holds its buckets exclusively. For a v1alpha2 driver the client keeps what costs no
// throughput: a bucket's own calls (generate ID, create, get, delete) hold it exclusively, which
// the sidecar's one reconcile per Bucket makes free; access calls hold their buckets shared, so a
// bucket's many accesses are still granted side by side, and their account exclusively.

func bucketKey(id string) string  { return "bucket/" + id }
func accountKey(id string) string { return "account/" + id }

func bucketKeys(ids ...string) []lockKey {
	var keys []lockKey
	for _, id := range ids {
		if id != "" {
			keys = append(keys, lockKey{key: bucketKey(id), exclusive: true})
		}
	}
	return keys
}

func accessKeys(perBucket bool, account string, bucketIDs []string) []lockKey {
	keys := bucketKeys(bucketIDs...)
	if perBucket {
		return keys
	}
	for i := range keys {
		keys[i].exclusive = false
	}
	if account != "" {
		keys = append(keys, lockKey{key: accountKey(account), exclusive: true})
	}
	return keys
}

func accessedIDs(buckets []*cosiproto.AccessedBucket) []string {
	ids := make([]string, 0, len(buckets))
	for _, b := range buckets {
		ids = append(ids, b.GetBucketId())
	}
	return ids
}

func revokedIDs(buckets []*cosiproto.DriverRevokeBucketAccessRequest_Bucket) []string {
	ids := make([]string, 0, len(buckets))
	for _, b := range buckets {
		ids = append(ids, b.GetBucketId())
	}
	return ids
}

// serverKeys are the keys a v1alpha2 call holds in the driver's process (see inFlightInterceptor):
// the same as the sidecar's client takes for it. Calls that name no bucket or account hold none.
func serverKeys(req any) []lockKey {
	switch r := req.(type) {
	case *cosiproto.DriverGenerateBucketIdRequest:
		return bucketKeys(r.GetName())
	case *cosiproto.DriverCreateBucketRequest:
		return bucketKeys(r.GetBucketId())
	case *cosiproto.DriverGetBucketRequest:
		return bucketKeys(r.GetBucketId())
	case *cosiproto.DriverDeleteBucketRequest:
		return bucketKeys(r.GetBucketId())
	case *cosiproto.DriverGenerateBucketAccessIdRequest:
		return accessKeys(false, r.GetAccountName(), accessedIDs(r.GetBuckets()))
	case *cosiproto.DriverGrantBucketAccessRequest:
		return accessKeys(false, r.GetAccountId(), accessedIDs(r.GetBuckets()))
	case *cosiproto.DriverRevokeBucketAccessRequest:
		return accessKeys(false, r.GetAccountId(), revokedIDs(r.GetBuckets()))
	}
	return nil
}

// inFlightInterceptor keeps a driver's calls apart per bucket and account inside the driver's
// process, for as long as the driver's handler runs, whether or not its caller still waits. The
// sidecar's client keeps its own calls apart too, but only until it gives up on a call
// (--driver-timeout): a handler that does not pass its context on to the store goes on after
// that, and a revocation or deletion that overtook it would find nothing to undo, answer OK, and
// leave what the late call then creates to nobody. Here such a revocation or deletion waits for
// the late call (bounded by its own deadline, DEADLINE_EXCEEDED naming the key; the sidecar
// retries it) and then undoes what it did.
func inFlightInterceptor(l *inFlight) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		unlock, err := l.lock(ctx, serverKeys(req))
		if err != nil {
			return nil, err
		}
		defer unlock()
		return handler(ctx, req)
	}
}
