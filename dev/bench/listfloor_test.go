package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// A watch-list is read to the bookmark that ends its initial events: its ADDED events counted
// (one longer than the reader's buffer too), other bookmarks and events not, the bytes all; a
// stream that ends before that bookmark is an error, not a list.
func TestReadJSONWatchList(t *testing.T) {
	long := fmt.Sprintf(`{"type":"ADDED","object":{"metadata":{"name":"long","annotations":{"a":%q}}}}`,
		strings.Repeat("x", 200<<10))
	lines := []string{
		`{"type":"ADDED","object":{"metadata":{"name":"a","managedFields":[]}}}`,
		`{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"5"}}}`,
		long,
		`{"type":"MODIFIED","object":{"metadata":{"name":"a"}}}`,
		`{"type":"ADDED","object":{"metadata":{"name":"b"}}}`,
		`{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"7",` +
			`"annotations":{"k8s.io/initial-events-end":"true"}}}}`,
		`{"type":"ADDED","object":{"metadata":{"name":"after the end"}}}`,
	}
	serve := func(lines []string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("sendInitialEvents") != "true" {
				http.Error(w, "not a watch-list", http.StatusBadRequest)
				return
			}
			for _, l := range lines {
				fmt.Fprintln(w, l)
			}
		}))
	}
	srv := serve(lines)
	defer srv.Close()
	js := func(srv *httptest.Server) (listRead, error) {
		return readWatchList(context.Background(), srv.Client(), srv.URL+"?"+watchListQuery("").Encode(),
			runtime.ContentTypeJSON)
	}
	read, err := js(srv)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, l := range lines[:6] {
		want += len(l) + 1
	}
	if read.objects != 3 || read.bytes != int64(want) {
		t.Errorf("read %d objects, %d bytes; want 3 and %d", read.objects, read.bytes, want)
	}
	// The first object is sampled: its managedFields are 2 bytes ([]) of its line.
	if wantShare := 2.0 / float64(len(lines[0])+1); read.managedShare() != wantShare {
		t.Errorf("managedFields share %v, want %v", read.managedShare(), wantShare)
	}

	cut := serve(lines[:5])
	defer cut.Close()
	_, err = js(cut)
	if err == nil {
		t.Error("a stream without the end of its initial events was read as a list")
	}
	if _, err := readWatchList(context.Background(), srv.Client(), srv.URL, runtime.ContentTypeJSON); err == nil {
		t.Error("an answer other than 200 was read as a list")
	}

	failed := serve([]string{lines[0], `{"type":"ERROR","object":{"kind":"Status","code":410}}`, lines[5]})
	defer failed.Close()
	_, err = js(failed)
	if err == nil {
		t.Error("a stream with an ERROR event was read as a list")
	}
}

// A protobuf watch stream (length-prefixed metav1.WatchEvents, as the API server's stream serializer
// writes them) is read the same way.
func TestReadProtobufWatchList(t *testing.T) {
	frame := func(typ watch.EventType, annotations map[string]string) []byte {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: annotations}}
		raw, err := cm.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		ev := metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: raw}}
		data, err := ev.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(data))), data...) //nolint:gosec // small
	}
	end := map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	frames := [][]byte{
		frame(watch.Added, nil), frame(watch.Bookmark, nil), frame(watch.Added, nil), frame(watch.Bookmark, end),
		frame(watch.Added, nil),
	}
	serve := func(frames [][]byte) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			for _, f := range frames {
				_, _ = w.Write(f)
			}
		}))
	}
	srv := serve(frames)
	defer srv.Close()
	pb := func(srv *httptest.Server) (listRead, error) {
		return readWatchList(context.Background(), srv.Client(), srv.URL, runtime.ContentTypeProtobuf)
	}
	read, err := pb(srv)
	if err != nil {
		t.Fatal(err)
	}
	want := len(bytes.Join(frames[:4], nil))
	if read.objects != 2 || read.bytes != int64(want) {
		t.Errorf("read %d objects, %d bytes; want 2 and %d", read.objects, read.bytes, want)
	}
	cut := serve(frames[:3])
	defer cut.Close()
	if _, err := pb(cut); err == nil {
		t.Error("a stream without the end of its initial events was read as a list")
	}
	failed := serve([][]byte{frames[0], frame(watch.Error, nil), frames[3]})
	defer failed.Close()
	if _, err := pb(failed); err == nil {
		t.Error("a stream with an ERROR event was read as a list")
	}
}
