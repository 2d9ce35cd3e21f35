package sidecar

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
)

// What the sidecar's cache keeps of a grant record. The cache holds one record per access, and the
// record is the largest of the three objects it holds per access (about 1.5 KB in the cache: the
// record's JSON, the ConfigMap's data map, the ConfigMap): a tenth of the sidecar's memory
// (docs/benchmark.md, "Scale"). What is decided on the cache reads a few fields of it: whether the
// access is granted with its account, whether anything is to be refreshed or rotated, which
// Buckets the grant holds, whose access it was. Everything that acts on a record (a revocation, a
// refresh, a rotation, a write of the record) reads it uncached first, in full. So the cache keeps
// only those fields (cachedGrant), and the Buckets' information that the Secrets were written
// against as a digest: the cache only tells whether it changed.
//
// The cache's transform (compactGrantRecord) replaces the record's data with them under
// cachedGrantKey, which no ConfigMap can have (a colon is not allowed in a ConfigMap key): what
// the cache shows under it was put there by the transform, never written by anyone. A
// ConfigMap that the transform did not see (a cache without it, in tests) is read in full.

// cachedGrantKey is the key under which the cache keeps a record's cachedGrant.
const cachedGrantKey = "cosi:cached-grant"

// cachedGrant is what the cache keeps of a grant record.
type cachedGrant struct {
	// UID is the access's UID, from the ConfigMap's name.
	UID         types.UID `json:"-"`
	Namespace   string    `json:"ns"`
	Name        string    `json:"n"`
	AccountID   string    `json:"a"`
	BucketNames []string  `json:"b,omitempty"`
	// BucketInfo is, by Bucket name, the digest of the information the Secrets were written
	// against (bucketInfoDigest).
	BucketInfo map[string]string `json:"i,omitempty"`
	rotationState
}

// newCachedGrant keeps what the cache reads of g.
func newCachedGrant(g grantRecord) cachedGrant {
	c := cachedGrant{
		UID: g.UID, Namespace: g.Namespace, Name: g.Name, AccountID: g.AccountID, BucketNames: g.BucketNames,
		rotationState: g.rotationState,
	}
	if len(g.BucketInfo) > 0 {
		c.BucketInfo = make(map[string]string, len(g.BucketInfo))
		for name, info := range g.BucketInfo {
			c.BucketInfo[name] = bucketInfoDigest(info)
		}
	}
	return c
}

// bucketInfoChanged reports whether info differs from the information the record says the
// Secrets were written against on Bucket name.
func (c *cachedGrant) bucketInfoChanged(name string, info map[string]string) bool {
	return bucketInfoDigest(info) != c.BucketInfo[name]
}

// bucketInfoDigest is a digest of a Bucket's information, empty for none: 128 bits of SHA-256
// over its entries in key order, so that equal maps, and only those, have equal digests.
func bucketInfoDigest(info map[string]string) string {
	if len(info) == 0 {
		return ""
	}
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(info)) {
		// Lengths first: no two maps write the same bytes.
		fmt.Fprintf(h, "%d:%s%d:%s", len(k), k, len(info[k]), info[k])
	}
	return base64.RawStdEncoding.EncodeToString(h.Sum(nil)[:16])
}

// cachedGrantOf reads what the cache holds of the record of a ConfigMap of the store: the
// transform's cachedGrant, or the record itself in a cache without the transform.
func cachedGrantOf(cm *corev1.ConfigMap) (cachedGrant, error) {
	value, ok := cm.Data[cachedGrantKey]
	if !ok {
		g, err := parseGrantRecord(cm)
		if err != nil {
			return cachedGrant{}, err
		}
		return newCachedGrant(g), nil
	}
	var c cachedGrant
	if err := json.Unmarshal([]byte(value), &c); err != nil {
		return c, fmt.Errorf("cached grant record %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	c.UID = grantRecordUID(cm.Name)
	return c, nil
}

// compactGrantRecord is the transform of the cache's ConfigMaps (all of them the driver's grant
// records): it replaces a record with what the cache reads of it. The data of a ConfigMap that
// holds no readable record is dropped: the cache shows it as no record, as it did before.
func compactGrantRecord(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.Data == nil && cm.BinaryData == nil {
		return
	}
	if _, done := cm.Data[cachedGrantKey]; done {
		return // given to the transform again
	}
	cm.BinaryData = nil
	g, err := parseGrantRecord(cm)
	if err != nil {
		cm.Data = nil
		return
	}
	c := newCachedGrant(g)
	value, err := json.Marshal(c)
	if err != nil {
		cm.Data = nil
		return
	}
	// What is kept must read back as it was: a record written by hand may hold times that JSON
	// does not carry through metav1.Time (fractions of a second, the zero time, a year past 9999
	// once in UTC). Such a record is kept whole: cachedGrantOf reads it.
	var back cachedGrant
	if json.Unmarshal(value, &back) != nil {
		return
	}
	back.UID = c.UID
	if !equality.Semantic.DeepEqual(back, c) {
		return
	}
	cm.Data = map[string]string{cachedGrantKey: string(value)}
}

// cached returns what the cache holds of the access's record, or nil.
func (s grantStore) cached(ctx context.Context, uid types.UID) *cachedGrant {
	g, _ := s.cachedRecord(ctx, uid)
	return g
}

// cachedRecord returns what the cache holds of the access's record and its ConfigMap, or nils.
func (s grantStore) cachedRecord(ctx context.Context, uid types.UID) (*cachedGrant, *corev1.ConfigMap) {
	cm := &corev1.ConfigMap{}
	if err := s.client.Get(ctx, types.NamespacedName{Namespace: s.namespace, Name: grantRecordName(uid)}, cm); err != nil {
		return nil, nil
	}
	g, err := cachedGrantOf(cm)
	if err != nil {
		return nil, nil
	}
	return &g, cm
}
