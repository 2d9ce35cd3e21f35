package jsonwatch

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	restclientwatch "k8s.io/client-go/rest/watch"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/scheme"
)

// accessJSON is a provisioned BucketAccess as the API server sends it (one line).
func accessJSON(t testing.TB) []byte {
	t.Helper()
	data, err := os.ReadFile("../slim/testdata/access.json")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := json.Compact(&out, data); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func stream(events ...string) io.ReadCloser {
	return io.NopCloser(strings.NewReader(strings.Join(events, "")))
}

// clientGoDecoder is how client-go decodes a watch of COSI objects for controller-runtime's caches
// (rest.Request.Watch with controller-runtime's serializer, without its target zeroing).
func clientGoDecoder(t testing.TB, body io.ReadCloser) watch.Decoder {
	t.Helper()
	codecs := serializer.NewCodecFactory(scheme.New())
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		t.Fatal("no JSON serializer")
	}
	objects := serializer.WithoutConversionCodecFactory{CodecFactory: codecs}.DecoderToVersion(
		info.Serializer, cosiapi.SchemeGroupVersion)
	frames := info.StreamSerializer.Framer.NewFrameReader(body)
	return restclientwatch.NewDecoder(streaming.NewDecoder(frames, info.StreamSerializer.Serializer), objects)
}

// Every event decodes to what client-go's decoder gives: the same object, TypeMeta empty.
func TestDecodesAsClientGo(t *testing.T) {
	obj := string(accessJSON(t))
	events := []string{
		`{"type":"ADDED","object":` + obj + "}\n",
		`{"type":"MODIFIED","object":` + obj + "}\n",
		`{"type":"DELETED","object":` + obj + "}\n",
		`{"type":"BOOKMARK","object":{"kind":"BucketAccess","apiVersion":"objectstorage.k8s.io/v1alpha2",` +
			`"metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}}` + "\n",
		`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",` +
			`"message":"too old resource version: 1 (5)","reason":"Expired","code":410}}` + "\n",
	}
	ours := newDecoder[cosiapi.BucketAccess](stream(events...))
	theirs := clientGoDecoder(t, stream(events...))
	for i := range events {
		typ, got, err := ours.Decode()
		wantType, want, wantErr := theirs.Decode()
		if err != nil || wantErr != nil {
			t.Fatalf("event %d: %v (client-go: %v)", i, err, wantErr)
		}
		if typ != wantType {
			t.Errorf("event %d: type %s, want %s", i, typ, wantType)
		}
		if !equal(got, want) {
			t.Errorf("event %d:\n%#v\nwant\n%#v", i, got, want)
		}
	}
	if _, _, err := ours.Decode(); !errors.Is(err, io.EOF) {
		t.Errorf("after the last event: %v, want EOF", err)
	}
}

// equal says whether ours is what client-go gave, and without a kind.
func equal(ours, theirs runtime.Object) bool {
	return ours.GetObjectKind().GroupVersionKind() == (schema.GroupVersionKind{}) && reflect.DeepEqual(ours, theirs)
}

// An expired watch ends with a Status the reflector recognizes (410 Expired: it lists again).
func TestErrorEventIsAStatus(t *testing.T) {
	d := newDecoder[cosiapi.Bucket](stream(`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1",` +
		`"metadata":{},"status":"Failure","message":"too old resource version","reason":"Expired","code":410}}` + "\n"))
	typ, obj, err := d.Decode()
	if err != nil || typ != watch.Error {
		t.Fatalf("%s, %v", typ, err)
	}
	st, ok := obj.(*metav1.Status)
	if !ok || st.Code != http.StatusGone || st.Reason != metav1.StatusReasonExpired {
		t.Fatalf("%#v", obj)
	}
}

// Events longer than the reader's buffer, and the stream's end within an event or between events.
func TestFraming(t *testing.T) {
	big := strings.Repeat("x", 200<<10)
	ev := `{"type":"ADDED","object":{"metadata":{"name":"b","annotations":{"a":"` + big + `"}}}}`
	d := newDecoder[cosiapi.Bucket](stream(ev+"\n", ev+"\n", ev))
	for i := range 2 {
		_, obj, err := d.Decode()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if got := obj.(*cosiapi.Bucket).Annotations["a"]; got != big {
			t.Fatalf("event %d: annotation of %d bytes, want %d", i, len(got), len(big))
		}
	}
	if _, _, err := d.Decode(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("an event cut short: %v, want unexpected EOF", err)
	}
	if _, _, err := newDecoder[cosiapi.Bucket](stream("")).Decode(); !errors.Is(err, io.EOF) {
		t.Fatalf("empty stream: %v, want EOF", err)
	}
	// An event longer than client-go's limit (16 MiB) is refused, not read to its end.
	huge := `{"type":"ADDED","object":{"metadata":{"name":"b","annotations":{"a":"` + strings.Repeat("x", 17<<20)
	if _, _, err := newDecoder[cosiapi.Bucket](stream(huge + `"}}}}` + "\n")).Decode(); err == nil ||
		!strings.Contains(err.Error(), "longer than") {
		t.Fatalf("an event of 17 MiB: %v, want refused", err)
	}
}

// What is not one event per line, or not an event this decoder knows, is an error: the watch ends
// and the reflector watches again; nothing is given to the cache.
func TestRefusesWhatIsNotOneEvent(t *testing.T) {
	for name, line := range map[string]string{
		"two events on a line": `{"type":"ADDED","object":{"metadata":{"name":"a"}}}{"type":"ADDED","object":{}}`,
		"an event over lines":  `{"type":"ADDED",`,
		"no object":            `{"type":"ADDED"}`,
		"unknown type":         `{"type":"RENAMED","object":{"metadata":{"name":"a"}}}`,
		"not JSON":             `<html>`,
		"error without status": `{"type":"ERROR"}`,
	} {
		t.Run(name, func(t *testing.T) {
			typ, obj, err := newDecoder[cosiapi.Bucket](stream(line + "\n" + `{"type":"ADDED","object":{}}` + "\n")).Decode()
			if err == nil {
				t.Fatalf("decoded %s %#v", typ, obj)
			}
		})
	}
}

// BenchmarkWatchDecode compares the CPU of decoding a provisioned BucketAccess's watch event with
// client-go's decoder and with this package's.
//
//	go test -run '^$' -bench WatchDecode ./internal/cache/jsonwatch
func BenchmarkWatchDecode(b *testing.B) {
	obj := accessJSON(b)
	line := append(append([]byte(`{"type":"MODIFIED","object":`), obj...), "}\n"...)
	for _, tc := range []struct {
		name string
		new  func(io.ReadCloser) watch.Decoder
	}{
		{"client-go", func(r io.ReadCloser) watch.Decoder { return clientGoDecoder(b, r) }},
		{"jsonwatch", newDecoder[cosiapi.BucketAccess]},
	} {
		b.Run(tc.name, func(b *testing.B) {
			d := tc.new(io.NopCloser(&repeat{line: line}))
			b.SetBytes(int64(len(obj)))
			for b.Loop() {
				if _, _, err := d.Decode(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// repeat reads its line again and again.
type repeat struct {
	line []byte
	off  int
}

func (r *repeat) Read(p []byte) (int, error) {
	n := copy(p, r.line[r.off:])
	r.off = (r.off + n) % len(r.line)
	return n, nil
}

// A watch from a resource version the API server does not have yet ends with the Status
// (504 Timeout, cause ResourceVersionTooLarge, retryAfterSeconds) the reflector recognizes
// (isTooLargeResourceVersionError): the same as client-go's.
func TestTooLargeResourceVersionAsClientGo(t *testing.T) {
	ev := `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",` +
		`"message":"Timeout: Too large resource version: 9, current: 5","reason":"Timeout","details":` +
		`{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],` +
		`"retryAfterSeconds":1},"code":504}}` + "\n"
	typ, got, err := newDecoder[cosiapi.Bucket](stream(ev)).Decode()
	wantType, want, wantErr := clientGoDecoder(t, stream(ev)).Decode()
	if err != nil || wantErr != nil || typ != wantType || !equal(got, want) {
		t.Fatalf("%s %#v %v, client-go %s %#v %v", typ, got, err, wantType, want, wantErr)
	}
}

// An ERROR event decodes to client-go's Status for every kind, whether or not its object would
// decode as one of the kind (a BucketClass has no status, a Bucket's status is not a string).
func TestErrorEventOfEveryKindAsClientGo(t *testing.T) {
	ev := `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{"resourceVersion":"7"},` +
		`"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}` + "\n"
	for name, d := range map[string]watch.Decoder{
		"BucketClaim": newDecoder[cosiapi.BucketClaim](stream(ev)), "Bucket": newDecoder[cosiapi.Bucket](stream(ev)),
		"BucketAccess":      newDecoder[cosiapi.BucketAccess](stream(ev)),
		"BucketClass":       newDecoder[cosiapi.BucketClass](stream(ev)),
		"BucketAccessClass": newDecoder[cosiapi.BucketAccessClass](stream(ev)),
	} {
		typ, got, err := d.Decode()
		wantType, want, wantErr := clientGoDecoder(t, stream(ev)).Decode()
		if err != nil || wantErr != nil || typ != wantType || !equal(got, want) {
			t.Errorf("%s: %s %#v %v, client-go %s %#v %v", name, typ, got, err, wantType, want, wantErr)
		}
	}
}
