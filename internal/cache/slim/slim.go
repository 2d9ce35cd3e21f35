// Package slim holds what the controller's and the sidecar's caches do to each object before
// keeping it: drop its managed fields and share the strings many objects repeat.
//
// An informer decodes every object into strings of its own: 100,000 Buckets hold 100,000 copies
// of the driver's name, of each condition's type, reason and message, of each bucketInfo key and of
// the namespace of each claim. Objects in a cache are read-only (a Get returns a copy), and Go
// strings are immutable, so objects may share one copy of each: Transform gives each such field
// the copy package unique holds of its value. Nothing keeps the handles, so package unique
// forgets each copy at the next garbage collection (objects keep theirs) and makes a new one
// after it: sharing is among the objects decoded between two collections (a catch-up decodes
// most objects within a few), and values a tenant makes up (labels, annotations) take no memory
// beyond their objects'. Values that are each object's own (names, UIDs, resource
// versions, timestamps) are left as decoded: sharing them saves nothing.
package slim

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// Transform is the caches' DefaultTransform: no managed fields (COSI never reads them, and they
// would take much of its memory), what a process never reads dropped (unread: fields it sets to
// their zero value), and the repeated strings and maps shared (Share).
func Transform(unread ...func(obj any)) toolscache.TransformFunc {
	strip := cache.TransformStripManagedFields()
	return func(in any) (any, error) {
		out, err := strip(in)
		if err != nil {
			return out, err
		}
		for _, drop := range unread {
			drop(out)
		}
		Share(out)
		return out, nil
	}
}

// Share replaces the strings of obj that many objects repeat with the copies package unique
// holds. Objects of other types (classes: few of them) are left alone.
func Share(obj any) {
	switch o := obj.(type) {
	case *cosiapi.BucketClaim:
		meta(&o.TypeMeta, &o.ObjectMeta)
		str(&o.Spec.BucketClassName)
		strs(o.Spec.Protocols)
		strs(o.Status.Protocols)
		o.Status.Conditions = conditions(o.Status.Conditions)
	case *cosiapi.Bucket:
		meta(&o.TypeMeta, &o.ObjectMeta)
		str(&o.Spec.DriverName)
		str(&o.Spec.DeletionPolicy)
		strs(o.Spec.Protocols)
		o.Spec.Parameters = sharedMap(o.Spec.Parameters)
		str(&o.Spec.BucketClaimRef.Namespace)
		strs(o.Status.Protocols)
		// A driver's bucket ID and the bucket name in bucketInfo are often the Bucket's name.
		own(o.Name, &o.Status.BucketID)
		o.Status.BucketInfo = stringMap(o.Status.BucketInfo)
		for k, v := range o.Status.BucketInfo {
			if v == o.Name {
				o.Status.BucketInfo[k] = o.Name
			}
		}
		o.Status.Conditions = conditions(o.Status.Conditions)
	case *cosiapi.BucketAccess:
		meta(&o.TypeMeta, &o.ObjectMeta)
		for i := range o.Spec.BucketClaims {
			m := &o.Spec.BucketClaims[i].AccessModes
			str(&m.ObjectData)
			str(&m.ObjectMetadata)
			str(&m.BucketMetadata)
		}
		str(&o.Spec.BucketAccessClassName)
		str(&o.Spec.Protocol)
		str(&o.Spec.ServiceAccountName)
		for i := range o.Status.AccessedBuckets {
			b := &o.Status.AccessedBuckets[i]
			own(b.BucketName, &b.BucketID)
		}
		str(&o.Status.DriverName)
		str(&o.Status.AuthenticationType)
		o.Status.Parameters = sharedMap(o.Status.Parameters)
		o.Status.Conditions = conditions(o.Status.Conditions)
	case *corev1.ConfigMap:
		meta(&o.TypeMeta, &o.ObjectMeta)
		o.Data = stringMap(o.Data)
	}
}

// meta shares the type and the metadata fields objects repeat: not the name, UID, resource
// version or generate name.
func meta(t *metav1.TypeMeta, m *metav1.ObjectMeta) {
	str(&t.APIVersion)
	str(&t.Kind)
	str(&m.Namespace)
	m.Labels = sharedMap(m.Labels)
	m.Annotations = sharedMap(m.Annotations)
	strs(m.Finalizers)
	for i := range m.OwnerReferences {
		str(&m.OwnerReferences[i].APIVersion)
		str(&m.OwnerReferences[i].Kind)
	}
}

// conditions shares the conditions' strings and returns them without spare capacity: a decoder
// grows a slice by doubling, so three conditions (COSI's objects have three) take the room of four.
func conditions(cs []metav1.Condition) []metav1.Condition {
	if cap(cs) > len(cs) {
		cs = slices.Clone(cs)
	}
	for i := range cs {
		str(&cs[i].Type)
		str(&cs[i].Status)
		str(&cs[i].Reason)
		str(&cs[i].Message)
	}
	return cs
}

// maxShared is the longest string shared: a longer one (a kubectl last-applied annotation, a
// long message) is more likely each object's own, and would be copied for nothing.
const maxShared = 256

// str replaces *s with the canonical copy of its value.
func str[T ~string](s *T) {
	if n := len(*s); n > 0 && n <= maxShared {
		*s = T(unique.Make(string(*s)).Value())
	}
}

func strs[T ~string](s []T) {
	for i := range s {
		str(&s[i])
	}
}

// own replaces *s with owner when they are equal: one copy for both.
func own(owner string, s *string) {
	if *s == owner {
		*s = owner
	}
}

// stringMap returns m with its keys and values shared: a new map, since a key cannot be replaced
// in place.
func stringMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		str(&k)
		str(&v)
		out[k] = v
	}
	return out
}

// Maps many objects repeat whole (the grant records' label, the has-bucketaccess-references
// annotation of every claim an access uses, a class's parameters copied to each Bucket and access)
// are shared too: even a map of one entry takes 336 bytes (Go 1.26). A map cannot be made immutable,
// but a cached object is never written to: a reader gets a deep copy (controller-runtime's cache
// reader copies every object it returns), and event handlers only read.
const (
	// maxSharedMap is the most entries a shared map has; larger ones are more likely each object's
	// own.
	maxSharedMap = 8
	// maxSharedMaps bounds the maps held for sharing: when it is reached they are all let go
	// (objects keep theirs). Maps a tenant makes up can so hold at most 1,024 maps of 8 entries of
	// 256-byte strings beyond their objects' lives (about 8 MB at worst; a few KB as COSI's
	// objects are), and flushing the table only lowers the sharing.
	maxSharedMaps = 1024
)

var sharedMaps = struct {
	sync.Mutex
	m map[string]map[string]string
}{m: map[string]map[string]string{}}

// sharedMap returns the map held for sharing that equals m, holding m (its strings shared) if
// none does. Maps with more than maxSharedMap entries or a key or value longer than maxShared are
// only given shared strings (stringMap).
func sharedMap(m map[string]string) map[string]string {
	if len(m) == 0 || len(m) > maxSharedMap {
		return stringMap(m)
	}
	keys := make([]string, 0, len(m))
	size := 0
	for k, v := range m {
		if len(k) > maxShared || len(v) > maxShared {
			return stringMap(m)
		}
		keys = append(keys, k)
		size += len(k) + len(v) + 2
	}
	slices.Sort(keys)
	var b strings.Builder
	b.Grow(size)
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	id := b.String()
	sharedMaps.Lock()
	defer sharedMaps.Unlock()
	// A value may hold a NUL, so two maps may have one id: a held map is only returned equal.
	if held, ok := sharedMaps.m[id]; ok && maps.Equal(held, m) {
		return held
	}
	if _, taken := sharedMaps.m[id]; !taken && len(sharedMaps.m) >= maxSharedMaps {
		clear(sharedMaps.m)
	}
	held := stringMap(m)
	sharedMaps.m[id] = held
	return held
}
