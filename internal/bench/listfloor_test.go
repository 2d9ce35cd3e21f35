package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
	read, err := readJSONWatchList(context.Background(), srv.Client(), srv.URL+"?"+watchListQuery().Encode())
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
	_, err = readJSONWatchList(context.Background(), cut.Client(), cut.URL+"?"+watchListQuery().Encode())
	if err == nil {
		t.Error("a stream without the end of its initial events was read as a list")
	}
	if _, err := readJSONWatchList(context.Background(), srv.Client(), srv.URL); err == nil {
		t.Error("an answer other than 200 was read as a list")
	}
}

// The API server's cache checks are counted by resource between two scrapes, those of no
// resource left out.
func TestConsistencyChecks(t *testing.T) {
	parse := func(text string) metrics {
		m, err := parseMetrics(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	const head = "# TYPE apiserver_storage_consistency_checks_total counter\n"
	before := parse(head +
		`apiserver_storage_consistency_checks_total{group="",resource="secrets",status="success"} 2` + "\n" +
		`apiserver_storage_consistency_checks_total{group="objectstorage.k8s.io",resource="buckets",status="success"} 1` +
		"\n")
	after := parse(head +
		`apiserver_storage_consistency_checks_total{group="",resource="secrets",status="success"} 3` + "\n" +
		`apiserver_storage_consistency_checks_total{group="",resource="secrets",status="failure"} 1` + "\n" +
		`apiserver_storage_consistency_checks_total{group="objectstorage.k8s.io",resource="buckets",status="success"} 1` +
		"\n" +
		`apiserver_storage_consistency_checks_total{group="",resource="configmaps",status="success"} 1` + "\n")
	got := consistencyChecks(before, after)
	if len(got) != 2 || got["secrets"] != 2 || got["configmaps"] != 1 {
		t.Errorf("checks between the scrapes: %v, want secrets 2, configmaps 1", got)
	}
	if s := checksOf(got); s != "configmaps, secrets ×2" {
		t.Errorf("printed as %q", s)
	}
	if s := checksOf(consistencyChecks(before, before)); s != "none" {
		t.Errorf("no checks printed as %q", s)
	}
}
