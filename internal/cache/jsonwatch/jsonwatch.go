// Package jsonwatch lists and watches COSI's custom resources for the caches of controller and
// sidecar with a decoder that reads each object once.
//
// The API server serves custom resources as JSON only, and client-go's decoding of a watch event
// reads its bytes seven times: the framer scans the event to find its end, the event is scanned
// for its kind (json.SimpleMetaFactory.Interpret), validated and decoded into a WatchEvent whose
// object is copied out, and the object is scanned for its kind, validated and decoded again. A
// cache that starts (a restart, a new leader) decodes every object of the cluster that way, and on
// a busy control plane that is most of controller's and sidecar's CPU until they have caught up
// (docs/benchmark.md, "Where the catch-up's CPU goes"). Here an event is one line of the stream
// (the API server ends each with a newline; a line that is not one event is an error, and the
// reflector watches again), validated and decoded into its typed object in one call, the kind
// known from the informer: about a quarter of the CPU (BenchmarkWatchDecode).
//
// Only what client-go's decoder gives the caches is given: typed objects with an empty TypeMeta
// (runtime.WithoutVersionDecoder), and ERROR events as *metav1.Status, so that the reflector
// lists again when its resource version expired. The informers of other kinds, and of COSI's
// kinds when a cache selects by label, field or namespace (which the ListerWatcher controller-
// runtime builds applies and this one would not), stay controller-runtime's.
package jsonwatch

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	kjson "sigs.k8s.io/json"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/scheme"
)

// kind is one resource this package lists and watches.
type kind struct {
	name     string
	resource string
	newList  func() client.ObjectList
	decoder  func(io.ReadCloser) watch.Decoder
}

// kinds are COSI's namespaced and cluster-scoped custom resources, by their Go type (not its
// printed name, which another package's type of the same name would share).
var kinds = map[reflect.Type]kind{
	reflect.TypeFor[*cosiapi.BucketClaim](): {
		"BucketClaim", "bucketclaims", func() client.ObjectList { return &cosiapi.BucketClaimList{} },
		newDecoder[cosiapi.BucketClaim],
	},
	reflect.TypeFor[*cosiapi.Bucket](): {
		"Bucket", "buckets", func() client.ObjectList { return &cosiapi.BucketList{} }, newDecoder[cosiapi.Bucket],
	},
	reflect.TypeFor[*cosiapi.BucketAccess](): {
		"BucketAccess", "bucketaccesses", func() client.ObjectList { return &cosiapi.BucketAccessList{} },
		newDecoder[cosiapi.BucketAccess],
	},
	reflect.TypeFor[*cosiapi.BucketClass](): {
		"BucketClass", "bucketclasses", func() client.ObjectList { return &cosiapi.BucketClassList{} },
		newDecoder[cosiapi.BucketClass],
	},
	reflect.TypeFor[*cosiapi.BucketAccessClass](): {
		"BucketAccessClass", "bucketaccessclasses",
		func() client.ObjectList { return &cosiapi.BucketAccessClassList{} }, newDecoder[cosiapi.BucketAccessClass],
	},
}

// Use sets opts.NewInformer so that the cache's informers of COSI's kinds list and watch with this
// package's decoding; except the kinds opts selects (by namespace, label or field: DefaultNamespaces,
// DefaultLabelSelector, DefaultFieldSelector, or their ByObject entries, whether keyed by a typed,
// unstructured or metadata-only object), whose ListerWatcher controller-runtime builds with the
// selection, and which keep it. opts.NewInformer must be unset.
func Use(cfg *rest.Config, opts *cache.Options) error {
	if opts.NewInformer != nil {
		return errors.New("jsonwatch: the cache options have an informer constructor already")
	}
	if len(opts.DefaultNamespaces) > 0 || opts.DefaultLabelSelector != nil || opts.DefaultFieldSelector != nil ||
		noBookmarks(opts.DefaultEnableWatchBookmarks) {
		return nil // every kind is selected, or watched without bookmarks
	}
	// controller-runtime keeps a cache per kind for the ByObject entries (delegatingByGVKCache): an
	// entry selects its kind's every informer, typed, unstructured or metadata-only, whatever the
	// type of its key.
	s := scheme.New()
	skip := map[schema.GroupKind]bool{}
	for obj, by := range opts.ByObject {
		if len(by.Namespaces) > 0 || by.Label != nil || by.Field != nil || noBookmarks(by.EnableWatchBookmarks) {
			if gvk, err := apiutil.GVKForObject(obj, s); err == nil {
				skip[gvk.GroupKind()] = true
			}
		}
	}
	lists, watches, err := newRESTClients(cfg)
	if err != nil {
		return err
	}
	opts.NewInformer = func(
		lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers,
	) toolscache.SharedIndexInformer {
		if k, ok := kinds[reflect.TypeOf(obj)]; ok && !skip[cosiapi.SchemeGroupVersion.WithKind(k.name).GroupKind()] {
			lw = k.listWatch(lists, watches)
		}
		return toolscache.NewSharedIndexInformer(lw, obj, resync, indexers)
	}
	return nil
}

// noBookmarks says whether a cache option turns watch bookmarks off, which controller-runtime's
// ListerWatcher applies and this package's would not.
func noBookmarks(enable *bool) bool { return enable != nil && !*enable }

// newRESTClients are the clients of the lists and the watches of COSI's kinds: the lists
// throttled by the configuration's rate limit, as controller-runtime's are; the watches not, as
// client-go never throttles a watch (rest.Request.Watch; Stream would).
func newRESTClients(cfg *rest.Config) (lists, watches rest.Interface, err error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &cosiapi.SchemeGroupVersion
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	// Errors (a Status) are decoded by client-go's machinery; only the objects are not.
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme.New()).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	httpClient, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, nil, err
	}
	if lists, err = rest.RESTClientForConfigAndClient(c, httpClient); err != nil {
		return nil, nil, err
	}
	w := rest.CopyConfig(c)
	w.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	if watches, err = rest.RESTClientForConfigAndClient(w, httpClient); err != nil {
		return nil, nil, err
	}
	return lists, watches, nil
}

// listWatch lists and watches the kind's objects cluster-wide.
func (k kind) listWatch(lists, watches rest.Interface) *toolscache.ListWatch {
	return &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			body, err := lists.Get().Resource(k.resource).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Raw()
			if err != nil {
				return nil, err
			}
			list := k.newList()
			if err := kjson.UnmarshalCaseSensitivePreserveInts(body, list); err != nil {
				return nil, fmt.Errorf("decoding the list of %s: %w", k.resource, err)
			}
			list.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch = true
			for attempt := 0; ; attempt++ {
				req := watches.Get().Resource(k.resource).VersionedParams(&opts, metav1.ParameterCodec)
				body, err := req.Stream(ctx)
				switch {
				case err == nil:
					return watch.NewStreamWatcherWithLogger(klog.FromContext(ctx), k.decoder(body), reporter{}), nil
				case !utilnet.IsProbableEOF(err) && !utilnet.IsTimeout(err):
					return nil, err
				case attempt == watchRetries:
					return watch.NewEmptyWatch(), nil
				}
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(time.Second):
				}
			}
		},
	}
}

// watchRetries is how often a watch whose connection ended before its response (a probable EOF,
// or a timeout) is sent again, a second apart, as client-go's Request.Watch does (rest.Request's
// Stream does not): a connection the API server or a proxy closed does not end the watch with an
// error, on which the reflector would list (stream) every object again. After them an empty
// watch, as client-go's.
const watchRetries = 10

// reporter turns a decoding error into the ERROR event that ends the watch, as client-go's does.
type reporter struct{}

func (reporter) AsObject(err error) runtime.Object {
	return &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusInternalServerError, Reason: metav1.StatusReasonInternalError,
		Message: fmt.Sprintf("decoding a watch event: %v", err),
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: "ClientWatchDecoding", Message: err.Error()}}},
	}
}

// event is a watch event whose object is of a known type.
type event[T any] struct {
	Type   watch.EventType `json:"type"`
	Object *T              `json:"object"`
}

// decoder reads one event per line of the stream.
type decoder[T any, PT interface {
	*T
	runtime.Object
}] struct {
	body io.ReadCloser
	r    *bufio.Reader
	// line holds an event longer than the reader's buffer.
	line []byte
	once sync.Once
}

func newDecoder[T any, PT interface {
	*T
	runtime.Object
}](body io.ReadCloser) watch.Decoder {
	return &decoder[T, PT]{body: body, r: bufio.NewReaderSize(body, 64<<10)}
}

// Decode implements watch.Decoder.
func (d *decoder[T, PT]) Decode() (watch.EventType, runtime.Object, error) {
	data, err := d.next()
	if err != nil {
		return "", nil, err
	}
	var ev event[T]
	err = kjson.UnmarshalCaseSensitivePreserveInts(data, &ev)
	if err != nil || ev.Type == watch.Error {
		// An ERROR event's object is a Status, which need not decode as a T.
		var st event[metav1.Status]
		if kjson.UnmarshalCaseSensitivePreserveInts(data, &st) == nil && st.Type == watch.Error {
			if st.Object == nil {
				return "", nil, errors.New("an ERROR watch event without a status")
			}
			st.Object.TypeMeta = metav1.TypeMeta{}
			return watch.Error, st.Object, nil
		}
	}
	if err != nil {
		return "", nil, fmt.Errorf("a watch event that is not one JSON object: %w", err)
	}
	switch ev.Type {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
		if ev.Object == nil {
			return "", nil, fmt.Errorf("a %s watch event without an object", ev.Type)
		}
		obj := PT(ev.Object)
		obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
		return ev.Type, obj, nil
	}
	return "", nil, fmt.Errorf("a watch event of type %q", ev.Type)
}

// maxEventBytes bounds an event, as client-go's streaming decoder does (16 MiB; an object in etcd
// is at most 1.5 MiB).
const maxEventBytes = 16 << 20

// next returns the next event's bytes: a line, without its newline. At the end of the stream it
// returns io.EOF (the watch ended) or io.ErrUnexpectedEOF (it ended within an event).
func (d *decoder[T, PT]) next() ([]byte, error) {
	d.line = d.line[:0]
	for {
		chunk, err := d.r.ReadSlice('\n')
		switch {
		case err == nil && len(d.line) == 0:
			return chunk[:len(chunk)-1], nil
		case err == nil:
			d.line = append(d.line, chunk[:len(chunk)-1]...)
			return d.line, nil
		case errors.Is(err, bufio.ErrBufferFull) && len(d.line)+len(chunk) > maxEventBytes:
			return nil, fmt.Errorf("a watch event longer than %d bytes", maxEventBytes)
		case errors.Is(err, bufio.ErrBufferFull):
			d.line = append(d.line, chunk...)
		case errors.Is(err, io.EOF) && len(d.line)+len(bytes.TrimSpace(chunk)) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// Close implements watch.Decoder.
func (d *decoder[T, PT]) Close() {
	d.once.Do(func() { _ = d.body.Close() })
}
