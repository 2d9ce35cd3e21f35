// Package index holds the field indexes of the controller's and the sidecar's caches: which
// objects a watch maps an event to, found without listing every object of a kind.
package index

import (
	"context"
	"fmt"
	"hash/maphash"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// Field is one field index: the values of Name for each Object are what Extract returns.
type Field struct {
	Object  client.Object
	Name    string
	Extract client.IndexerFunc
	// InNamespace says that every lookup of this index names a namespace (client.InNamespace);
	// otherwise no lookup does. Each object is indexed in that one form only (see Register).
	InNamespace bool
	// HashBuckets, when set, says that the values are mostly each object's own (a Bucket's name, a
	// claim's key): each is indexed under its hash modulo HashBuckets, and a lookup keeps the
	// objects the hash finds whose value it is (Field.List). client-go keeps a set of object keys
	// per value of an index, 200 to 300 bytes even for one object: per object for such values,
	// 45 MB of the sidecar's 539 at 80,000 object sets (docs/benchmark.md). Under a hash, the sets
	// are at most HashBuckets, shared by the objects whose values share a hash.
	HashBuckets uint32
	// Has, when set, reports whether value is one of the values Extract returns for the object,
	// without making them: a hashed lookup asks it of every object of the hash (Extract builds
	// strings, and a tenant's accesses may name 64 claims each). TestHasAsExtract checks each.
	Has func(o client.Object, value string) bool
}

// OwnValueBuckets is the HashBuckets of the indexes whose values are each object's own: 4,096
// sets of about 25 objects each at 100,000 objects, which a lookup goes through without copying
// them (Field.List).
const OwnValueBuckets = 4096

// Register adds the indexes to a manager's cache (mgr.GetCache()), under the names
// controller-runtime's cached List looks up for client.MatchingFields.
//
// controller-runtime's own IndexField keeps every value of a namespaced object twice: under its
// namespace and under "all namespaces", so that a lookup can be made either way. Each of COSI's
// lookups is made one way only, and a value that is an object's own (a UID, a Bucket's name, a
// claim's key) costs a whole set in each form: 15 % of a cache's heap (BenchmarkCacheMemory in
// internal/cache/slim). Here each value is kept in the one form the field's lookups use
// (Field.InNamespace): a lookup made the other way would find nothing, so lookups go through
// Field.List, which refuses it. Empty values are
// not indexed: no lookup asks for one (a claim's existing Bucket is empty on every dynamic
// claim, which would put them all in one set).
func Register(ctx context.Context, informers cache.Informers, fields ...Field) error {
	for _, f := range fields {
		informer, err := informers.GetInformer(ctx, f.Object, cache.BlockUntilSynced(false))
		if err != nil {
			return fmt.Errorf("index %s: %w", f.Name, err)
		}
		if err := informer.AddIndexers(toolscache.Indexers{fieldIndexName(f.Name): f.indexFunc}); err != nil {
			return fmt.Errorf("index %s: %w", f.Name, err)
		}
	}
	return nil
}

// Lazy is a field index registered at its first lookup, for an index that only a rare path needs
// (the sidecar's migration of the grants an earlier version recorded on Buckets): a process that
// never takes that path holds no entry for it, about 350 bytes per object for a UID index.
// Registering indexes the objects the cache holds at once (client-go indexes an informer's
// items when an index is added), so the first lookup finds them all.
type Lazy struct {
	field     Field
	informers cache.Informers
	mu        sync.Mutex
	done      bool
}

// NewLazy returns the index f of informers (a manager's cache), registered at its first lookup.
func NewLazy(informers cache.Informers, f Field) *Lazy { return &Lazy{field: f, informers: informers} }

// List registers the index if it is not yet, then is Field.List.
func (l *Lazy) List(
	ctx context.Context, r client.Reader, list client.ObjectList, namespace, value string, opts ...client.ListOption,
) error {
	l.mu.Lock()
	if !l.done {
		if err := Register(ctx, l.informers, l.field); err != nil {
			l.mu.Unlock()
			return err
		}
		l.done = true
	}
	l.mu.Unlock()
	return l.field.List(ctx, r, list, namespace, value, opts...)
}

// List lists into list the objects of the cache r whose field has the value: in namespace when
// the field's lookups name one (InNamespace), else in every namespace (namespace ""). A lookup
// made the other way would find nothing, since each value is indexed in one form (Register): it
// is an error instead. opts may add label selectors; a namespace or field selector in them
// (which List would silently replace by its own) is an error too.
func (f Field) List(
	ctx context.Context, r client.Reader, list client.ObjectList, namespace, value string, opts ...client.ListOption,
) error {
	if (namespace != "") != f.InNamespace {
		return fmt.Errorf("index %s looked up in namespace %q: its lookups are %s", f.Name, namespace,
			map[bool]string{true: "in one namespace", false: "in every namespace"}[f.InNamespace])
	}
	var given client.ListOptions
	given.ApplyOptions(opts)
	if given.Namespace != "" || given.FieldSelector != nil {
		return fmt.Errorf("index %s looked up with namespace %q and fields %v in its options: "+
			"the namespace is an argument of Field.List, and an index lookup selects by one field",
			f.Name, given.Namespace, given.FieldSelector)
	}
	if f.HashBuckets == 0 {
		opts = append(opts, client.InNamespace(namespace), client.MatchingFields{f.Name: value})
		return r.List(ctx, list, opts...)
	}
	// The objects under the value's hash, as the cache holds them (not copied: only read here),
	// then a copy of those whose value it is, as many as a limit in opts asks for (the cache would
	// count the hash's objects). An empty value is not indexed (indexFunc): it finds nothing, as
	// in a set per value, not the objects of its hash that have one.
	if informers, ok := informersOf(r); ok && itemsOf(list) == reflect.TypeOf(f.Object) {
		if done, err := f.listIndexed(ctx, informers, list, namespace, value, given); done || err != nil {
			return err
		}
	}
	opts = append(opts, client.InNamespace(namespace), client.MatchingFields{f.Name: f.hashed(value)},
		client.UnsafeDisableDeepCopy, client.Limit(0))
	if err := r.List(ctx, list, opts...); err != nil {
		return err
	}
	items, err := apimeta.ExtractList(list)
	if err != nil {
		return fmt.Errorf("index %s: %w", f.Name, err)
	}
	kept := make([]runtime.Object, 0, 1)
	for _, item := range items {
		if given.Limit > 0 && int64(len(kept)) == given.Limit {
			break
		}
		obj, ok := item.(client.Object)
		if ok && value != "" && f.has(obj, value) {
			kept = append(kept, obj.DeepCopyObject())
		}
	}
	return apimeta.SetList(list, kept)
}

// listIndexed is Field.List of a hashed field from the informer's indexer itself: the objects
// under the hash as the informer holds them, never copied but those kept. controller-runtime's
// cached List, even without its deep copies, copies each object into the list it returns (a new
// slice of the hash's objects, copied by reflection): at 30,000 accesses, with about 7 objects per
// hash, that was 1.5 CPU-s of the controller's 26 in a restart's catch-up (docs/benchmark.md).
// It returns false, having done nothing, when the objects are not in one informer (a cache of
// several namespaces: the sidecar's of ConfigMaps) or the informer has not synced: the cached
// List is made then.
func (f Field) listIndexed(
	ctx context.Context, informers cache.Informers, list client.ObjectList, namespace, value string,
	given client.ListOptions,
) (bool, error) {
	// The informer, not waited for (in a cache of namespaces that would wait for every
	// namespace's): one not synced yet (a cache not started, or still listing) leaves the lookup
	// to the cached List, which waits for it or says the cache has not started, and so does a
	// continue token, which the cached List refuses. A started manager's informers are synced.
	informer, err := informers.GetInformer(ctx, f.Object, cache.BlockUntilSynced(false))
	if err != nil {
		return false, fmt.Errorf("index %s: %w", f.Name, err)
	}
	indexed, ok := informer.(interface{ GetIndexer() toolscache.Indexer })
	if !ok || !informer.HasSynced() || given.Continue != "" {
		return false, nil
	}
	ns := allNamespaces
	if f.InNamespace {
		ns = namespace
	}
	objs, err := indexed.GetIndexer().ByIndex(fieldIndexName(f.Name), ns+"/"+f.hashed(value))
	if err != nil {
		return false, fmt.Errorf("index %s: %w", f.Name, err)
	}
	kept := make([]runtime.Object, 0, 1)
	for _, o := range objs {
		if given.Limit > 0 && int64(len(kept)) == given.Limit {
			break
		}
		obj, ok := o.(client.Object)
		if !ok || value == "" || !f.has(obj, value) {
			continue
		}
		if given.LabelSelector != nil && !given.LabelSelector.Matches(labels.Set(obj.GetLabels())) {
			continue
		}
		kept = append(kept, obj.DeepCopyObject())
	}
	return true, apimeta.SetList(list, kept)
}

// informersOf returns the informers whose cache r reads: r itself (a manager's cache), or those
// WithInformers gave it.
func informersOf(r client.Reader) (cache.Informers, bool) {
	switch r := r.(type) {
	case readerWithInformers:
		return r.informers, true
	case cache.Informers:
		return r, true
	}
	return nil, false
}

// itemsOf is the type of a typed list's items, as pointers (*corev1.ConfigMap for a
// ConfigMapList); nil for other lists (unstructured, metadata only), which the informers of the
// typed objects do not hold.
func itemsOf(list client.ObjectList) reflect.Type {
	items, err := apimeta.GetItemsPtr(list)
	if err != nil {
		return nil
	}
	t := reflect.TypeOf(items).Elem()
	if t.Kind() != reflect.Slice || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	return reflect.PointerTo(t.Elem())
}

// WithInformers returns c, a manager's client, which reads from the cache of informers
// (mgr.GetCache()), so that Field.List of a hashed field reads their indexers directly.
func WithInformers(c client.Client, informers cache.Informers) client.Client {
	return readerWithInformers{Client: c, informers: informers}
}

type readerWithInformers struct {
	client.Client
	informers cache.Informers
}

// has reports whether value is one of the object's values.
func (f Field) has(obj client.Object, value string) bool {
	if f.Has != nil {
		return f.Has(obj, value)
	}
	return slices.Contains(f.Extract(obj), value)
}

// hashed is the index key of a value under HashBuckets: its hash modulo HashBuckets. The hash is
// seeded at random in each process: a tenant who could compute it could name thousands of its
// claims so that their keys share another tenant's claim's hash, and make each lookup of that
// claim go through them.
func (f Field) hashed(value string) string {
	return "#" + strconv.FormatUint(maphash.String(hashSeed, value)%uint64(f.HashBuckets), 10)
}

var hashSeed = maphash.MakeSeed()

// indexFunc returns the index keys of an object: each value, prefixed as controller-runtime's
// cached List prefixes the value it looks up (its namespace, or "all namespaces").
func (f Field) indexFunc(raw any) ([]string, error) {
	obj, ok := raw.(client.Object)
	if !ok {
		return nil, fmt.Errorf("index %s: %T is not an object", f.Name, raw)
	}
	ns := allNamespaces
	if f.InNamespace {
		ns = obj.GetNamespace()
	}
	var keys []string
	for _, v := range f.Extract(obj) {
		if v == "" {
			continue
		}
		if f.HashBuckets > 0 {
			v = f.hashed(v)
		}
		if key := ns + "/" + v; !slices.Contains(keys, key) {
			keys = append(keys, key)
		}
	}
	return keys, nil
}

// fieldIndexName and allNamespaces are controller-runtime's names (pkg/cache/internal: FieldIndexName,
// KeyToNamespacedKey), which its cached List uses to find a client.MatchingFields value.
func fieldIndexName(field string) string { return "field:" + field }

const allNamespaces = "__all_namespaces"

// ClaimsByClass indexes BucketClaims by their BucketClass.
var ClaimsByClass = Field{
	Object: &cosiapi.BucketClaim{},
	Name:   "spec.bucketClassName",
	Extract: func(o client.Object) []string {
		return []string{o.(*cosiapi.BucketClaim).Spec.BucketClassName}
	},
}

// ClaimsByExistingBucket indexes static BucketClaims by the Bucket they name.
var ClaimsByExistingBucket = Field{
	Object: &cosiapi.BucketClaim{},
	Name:   "spec.existingBucketName",
	Extract: func(o client.Object) []string {
		return []string{o.(*cosiapi.BucketClaim).Spec.ExistingBucketName}
	},
}

// AccessesByClaim indexes BucketAccesses by the claims they name, as "<namespace>/<claim name>"
// (ClaimKey).
var AccessesByClaim = Field{
	Object:      &cosiapi.BucketAccess{},
	Name:        "spec.bucketClaims.bucketClaimName",
	HashBuckets: OwnValueBuckets,
	Extract: func(o client.Object) []string {
		ba := o.(*cosiapi.BucketAccess)
		keys := make([]string, 0, len(ba.Spec.BucketClaims))
		for _, c := range ba.Spec.BucketClaims {
			keys = append(keys, ClaimKey(ba.Namespace, c.BucketClaimName))
		}
		return keys
	},
	Has: func(o client.Object, value string) bool {
		ba := o.(*cosiapi.BucketAccess)
		namespace, name, ok := strings.Cut(value, "/") // neither a namespace nor a name has a "/"
		return ok && namespace == ba.Namespace && slices.ContainsFunc(ba.Spec.BucketClaims,
			func(c cosiapi.BucketClaimAccess) bool { return c.BucketClaimName == name })
	},
}

// ClaimKey is the AccessesByClaim value of a claim.
func ClaimKey(namespace, name string) string { return namespace + "/" + name }

// AccessesByClass indexes BucketAccesses by their BucketAccessClass.
var AccessesByClass = Field{
	Object: &cosiapi.BucketAccess{},
	Name:   "spec.bucketAccessClassName",
	Extract: func(o client.Object) []string {
		return []string{o.(*cosiapi.BucketAccess).Spec.BucketAccessClassName}
	},
}

// AccessesByBucket indexes BucketAccesses by the Buckets they were handed off for.
var AccessesByBucket = Field{
	Object:      &cosiapi.BucketAccess{},
	Name:        "status.accessedBuckets.bucketName",
	HashBuckets: OwnValueBuckets,
	Extract: func(o client.Object) []string {
		var names []string
		for _, b := range o.(*cosiapi.BucketAccess).Status.AccessedBuckets {
			names = append(names, b.BucketName)
		}
		return names
	},
	Has: func(o client.Object, value string) bool {
		return slices.ContainsFunc(o.(*cosiapi.BucketAccess).Status.AccessedBuckets,
			func(b cosiapi.AccessedBucket) bool { return b.BucketName == value })
	},
}

// AccessesByUID indexes BucketAccesses by their UID: a grant recorded by an earlier version names
// its access by UID, and the name it also names may have been written by someone else.
var AccessesByUID = Field{
	Object: &cosiapi.BucketAccess{},
	Name:   "metadata.uid",
	Extract: func(o client.Object) []string {
		return []string{string(o.GetUID())}
	},
}
