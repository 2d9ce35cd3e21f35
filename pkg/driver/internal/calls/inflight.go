// Package calls holds what both ends of a driver call share: the SDK's server (package driver) and
// the sidecar's client (package driverclient). It keeps calls on the same bucket or account apart
// (InFlight), measures them (OperationMetrics) and logs them (Observe). A driver binary links it
// through package driver; it holds no client code.
package calls

import (
	"context"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc/status"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// LockKey is one key a driver call holds while it is in flight: a bucket ID or an account ID,
// held alone (exclusive) or together with other calls (shared).
type LockKey struct {
	Key       string
	Exclusive bool
}

// InFlight keeps driver calls apart per key. A call takes its keys in their sorted order, so that
// calls holding several keys (a grant to several buckets) never wait for each other in a cycle;
// a waiting exclusive call keeps new shared ones out, so that a bucket's deletion is not starved by
// a stream of grants.
type InFlight struct {
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

// Lock takes keys, waiting until ctx is done; it returns the function that releases them. The
// error of a wait that gave up is ctx's, as a gRPC status (DEADLINE_EXCEEDED or CANCELLED), naming
// the key waited for.
func (l *InFlight) Lock(ctx context.Context, keys []LockKey) (func(), error) {
	keys = normalize(keys)
	for i, k := range keys {
		if err := l.take(ctx, k); err != nil {
			l.release(keys[:i])
			return nil, status.Errorf(status.FromContextError(err).Code(),
				"waiting for the driver call in flight on %s: %v", k.Key, err)
		}
	}
	return func() { l.release(keys) }, nil
}

// normalize sorts keys and merges duplicates (exclusive wins).
func normalize(keys []LockKey) []LockKey {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, func(a, b LockKey) int { return strings.Compare(a.Key, b.Key) })
	out := keys[:0]
	for _, k := range keys {
		if n := len(out); n > 0 && out[n-1].Key == k.Key {
			out[n-1].Exclusive = out[n-1].Exclusive || k.Exclusive
			continue
		}
		out = append(out, k)
	}
	return out
}

func (l *InFlight) take(ctx context.Context, k LockKey) error {
	l.mu.Lock()
	if l.keys == nil {
		l.keys = map[string]*keyState{}
	}
	s := l.keys[k.Key]
	if s == nil {
		s = &keyState{changed: make(chan struct{})}
		l.keys[k.Key] = s
	}
	s.users++
	if k.Exclusive {
		s.writers++
	}
	for {
		switch {
		case k.Exclusive && !s.held && s.shared == 0:
			s.writers--
			s.held = true
			l.mu.Unlock()
			return nil
		case !k.Exclusive && !s.held && s.writers == 0:
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
			if k.Exclusive {
				s.writers--
				s.broadcast() // shared calls held back by this one may go
			}
			l.drop(k.Key, s)
			l.mu.Unlock()
			return ctx.Err()
		}
	}
}

func (l *InFlight) release(keys []LockKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		s := l.keys[k.Key]
		if k.Exclusive {
			s.held = false
		} else {
			s.shared--
		}
		s.broadcast()
		l.drop(k.Key, s)
	}
}

// drop forgets a call's interest in the key, and the key once nobody holds or waits for it.
func (l *InFlight) drop(key string, s *keyState) {
	s.users--
	if s.users == 0 {
		delete(l.keys, key)
	}
}

// Size is how many keys are held or waited for (tests).
func (l *InFlight) Size() int {
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

// BucketKeys are the keys of calls on the buckets ids themselves: each held exclusively.
func BucketKeys(ids ...string) []LockKey {
	var keys []LockKey
	for _, id := range ids {
		if id != "" {
			keys = append(keys, LockKey{Key: bucketKey(id), Exclusive: true})
		}
	}
	return keys
}

// AccessKeys are the keys of an access call (generate ID, grant, revoke) of account on bucketIDs:
// for a v1alpha1 driver (perBucket) its buckets exclusively; else its buckets shared and its
// account exclusively.
func AccessKeys(perBucket bool, account string, bucketIDs []string) []LockKey {
	keys := BucketKeys(bucketIDs...)
	if perBucket {
		return keys
	}
	for i := range keys {
		keys[i].Exclusive = false
	}
	if account != "" {
		keys = append(keys, LockKey{Key: accountKey(account), Exclusive: true})
	}
	return keys
}

// AccessedIDs are the bucket IDs of a grant.
func AccessedIDs(buckets []*cosiproto.AccessedBucket) []string {
	ids := make([]string, 0, len(buckets))
	for _, b := range buckets {
		ids = append(ids, b.GetBucketId())
	}
	return ids
}

// RevokedIDs are the bucket IDs of a revocation.
func RevokedIDs(buckets []*cosiproto.DriverRevokeBucketAccessRequest_Bucket) []string {
	ids := make([]string, 0, len(buckets))
	for _, b := range buckets {
		ids = append(ids, b.GetBucketId())
	}
	return ids
}
