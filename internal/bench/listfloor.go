package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// The list floor: after a size's restart, the benchmark opens the same initial lists that the
// informers of controller and sidecar open when they start (client-go's watch-list streams:
// watch=1&sendInitialEvents=true, every object an ADDED event, then a bookmark that ends them), all
// at once as a start does, and reads each to that bookmark without decoding an object (the
// ConfigMaps in protobuf, as the sidecar asks for them). What the API server takes to serve them is
// the part of a catch-up that no change in controller or sidecar can remove, short of listing less:
// on this machine, the floor of "restart → caught up". Then each stream alone, for its own cost.

// ListFloor is the initial lists of a catch-up served to the benchmark.
type ListFloor struct {
	// Sec is the time from opening every stream at once to the last one's end of its initial
	// events; CPU the CPU seconds of each process meanwhile, by command name; ConsistencyChecks
	// the API server's own checks of its caches that ended meanwhile. Of the fastest of Rounds.
	Sec               float64            `json:"sec"`
	CPU               map[string]float64 `json:"cpu"`
	ConsistencyChecks map[string]float64 `json:"consistencyChecks,omitempty"`
	// Rounds are each time the streams were served at once (listFloorRounds), in turn.
	Rounds []ListRound `json:"rounds"`
	// Streams are the lists, each also served alone.
	Streams []ListStream `json:"streams"`
}

// ListRound is one serving of every stream at once.
type ListRound struct {
	Sec               float64            `json:"sec"`
	CPU               map[string]float64 `json:"cpu"`
	ConsistencyChecks map[string]float64 `json:"consistencyChecks,omitempty"`
}

// listFloorRounds is how often the streams are served at once: the fastest is the floor, the
// others show how much the API server's own work (its cache checks, its garbage collection)
// moves it.
const listFloorRounds = 3

// ListStream is one informer's initial list.
type ListStream struct {
	// Who opens it (controller or sidecar) and what it lists.
	Who      string `json:"who"`
	Resource string `json:"resource"`
	// Objects and Bytes it carried (events, framing included); of the bytes of every 64th object,
	// the share of its metadata.managedFields (JSON streams only); Sec and APIServerCPU when alone.
	Objects       int     `json:"objects"`
	Bytes         int64   `json:"bytes"`
	ManagedFields float64 `json:"managedFields,omitempty"`
	Sec           float64 `json:"sec"`
	APIServerCPU  float64 `json:"apiServerCPU"`
}

// listStream opens one initial list and reads it to its end.
type listStream struct {
	ListStream
	open func(ctx context.Context) (listRead, error)
}

// catchUpStreams are the initial lists of the informers of controller and sidecar: COSI's kinds
// cluster-wide (the controller's five, the sidecar's Buckets and accesses), and the sidecar's
// grant records (ConfigMaps of its driver in the grant namespace, selected by label).
func (s *system) catchUpStreams(ctx context.Context) ([]listStream, error) {
	httpClient, err := rest.HTTPClientFor(s.rest)
	if err != nil {
		return nil, err
	}
	custom := func(who, resource string) listStream {
		u := strings.TrimSuffix(s.rest.Host, "/") + "/apis/" + cosiapi.SchemeGroupVersion.String() + "/" + resource +
			"?" + watchListQuery().Encode()
		return listStream{
			ListStream: ListStream{Who: who, Resource: resource},
			open: func(ctx context.Context) (listRead, error) {
				return readJSONWatchList(ctx, httpClient, u)
			},
		}
	}
	var out []listStream
	for _, r := range []string{"bucketclaims", "buckets", "bucketaccesses", "bucketclasses", "bucketaccessclasses"} {
		out = append(out, custom("controller", r))
	}
	out = append(out, custom("sidecar", "buckets"), custom("sidecar", "bucketaccesses"))

	// The grant records: their namespace and driver label as the sidecar wrote them.
	var records corev1.ConfigMapList
	if err := s.client.List(ctx, &records, client.HasLabels{cosiapi.LabelGrantDriver}, client.Limit(1)); err != nil {
		return nil, err
	}
	if len(records.Items) == 0 {
		return nil, errors.New("no grant record to take the sidecar's selection from")
	}
	record := records.Items[0]
	pb := rest.CopyConfig(s.rest)
	pb.ContentType = runtime.ContentTypeProtobuf
	pb.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cs, err := kubernetes.NewForConfigAndClient(pb, httpClient)
	if err != nil {
		return nil, err
	}
	selector := cosiapi.LabelGrantDriver + "=" + record.Labels[cosiapi.LabelGrantDriver]
	out = append(out, listStream{
		ListStream: ListStream{Who: "sidecar", Resource: "configmaps"},
		open: func(ctx context.Context) (listRead, error) {
			opts := watchListOptions()
			opts.LabelSelector = selector
			w, err := cs.CoreV1().ConfigMaps(record.Namespace).Watch(ctx, opts)
			if err != nil {
				return listRead{}, err
			}
			defer w.Stop()
			return readWatchList(ctx, w)
		},
	})
	return out, nil
}

// watchListOptions are a reflector's options for its initial list as a stream (client-go's
// WatchListClient, on by default).
func watchListOptions() metav1.ListOptions {
	sendInitialEvents := true
	return metav1.ListOptions{
		Watch:                true,
		SendInitialEvents:    &sendInitialEvents,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		AllowWatchBookmarks:  true,
	}
}

func watchListQuery() url.Values {
	return url.Values{
		"watch":                {"true"},
		"sendInitialEvents":    {"true"},
		"resourceVersionMatch": {string(metav1.ResourceVersionMatchNotOlderThan)},
		"allowWatchBookmarks":  {"true"},
	}
}

// initialEventsEnd is the annotation of the bookmark that ends a watch-list's initial events.
var initialEventsEnd = []byte(`"` + metav1.InitialEventsAnnotationKey + `":"true"`)

// listRead is what reading a watch-list found.
type listRead struct {
	objects int
	bytes   int64
	// sampled are the bytes of every managedFieldsSample-th object's event, managed those of its
	// metadata.managedFields.
	sampled, managed int64
}

// managedFieldsSample is how often an object's managedFields are measured: the decoding is the
// benchmark's CPU, on the machine the API server serves from.
const managedFieldsSample = 64

// managedShare is the share of managedFields in the sampled objects' bytes (0: none sampled).
func (r listRead) managedShare() float64 {
	if r.sampled == 0 {
		return 0
	}
	return float64(r.managed) / float64(r.sampled)
}

// readJSONWatchList reads a JSON watch stream (one event per line) to the bookmark that ends its
// initial events, counting the ADDED events and the bytes; it decodes only every
// managedFieldsSample-th object's metadata.
func readJSONWatchList(ctx context.Context, c *http.Client, u string) (out listRead, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return out, err
	}
	req.Header.Set("Accept", runtime.ContentTypeJSON)
	resp, err := c.Do(req)
	if err != nil {
		return out, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return out, fmt.Errorf("watch-list %s: %s: %s", u, resp.Status, body)
	}
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	added := []byte(`{"type":"ADDED"`)
	bookmark := []byte(`{"type":"BOOKMARK"`)
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		out.bytes += int64(len(chunk))
		if errors.Is(err, bufio.ErrBufferFull) {
			line = append(line, chunk...)
			continue
		}
		if err != nil {
			return out, fmt.Errorf("watch-list %s ended before its initial events did: %w", u, err)
		}
		if len(line) > 0 {
			chunk = append(line, chunk...)
			line = line[:0]
		}
		switch {
		case bytes.HasPrefix(chunk, added):
			if out.objects%managedFieldsSample == 0 {
				var ev struct {
					Object struct {
						Metadata struct {
							ManagedFields json.RawMessage `json:"managedFields"`
						} `json:"metadata"`
					} `json:"object"`
				}
				if err := json.Unmarshal(chunk, &ev); err != nil {
					return out, fmt.Errorf("watch-list %s: an event that is not JSON: %w", u, err)
				}
				out.sampled += int64(len(chunk))
				out.managed += int64(len(ev.Object.Metadata.ManagedFields))
			}
			out.objects++
		case bytes.HasPrefix(chunk, bookmark) && bytes.Contains(chunk, initialEventsEnd):
			return out, nil
		}
	}
}

// readWatchList reads a decoded watch to the bookmark that ends its initial events; the bytes are
// not known.
func readWatchList(ctx context.Context, w watch.Interface) (out listRead, err error) {
	for {
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return out, errors.New("watch-list ended before its initial events did")
			}
			switch ev.Type {
			case watch.Added:
				out.objects++
			case watch.Bookmark:
				if m, err := metaOf(ev.Object); err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
					return out, nil
				}
			case watch.Error:
				return out, fmt.Errorf("watch-list: %v", ev.Object)
			}
		}
	}
}

func metaOf(obj runtime.Object) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("a %T has no object metadata", obj)
	}
	return m, nil
}

// listFloor serves the catch-up's initial lists to the benchmark: all at once, then each alone.
func (s *system) listFloor(ctx context.Context, n int) (*ListFloor, error) {
	streams, err := s.catchUpStreams(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	f := &ListFloor{}
	var profile sync.WaitGroup
	if s.cfg.Profiles != "" && s.cfg.ProfileCPU > 0 {
		// The API server's CPU while it serves them at once (kube-apiserver-<N>-lists.pprof);
		// the streams alone wait for its end.
		profile.Go(func() {
			file := filepath.Join(s.cfg.Profiles, fmt.Sprintf("kube-apiserver-%d-lists.pprof", n))
			c, err := rest.HTTPClientFor(s.rest)
			if err == nil {
				err = saveProfile(ctx, c, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d",
					strings.TrimSuffix(s.rest.Host, "/"), int(s.cfg.ProfileCPU.Seconds())), file)
			}
			if err != nil {
				s.cfg.logf("profile %s: %v", file, err)
			}
		})
	}
	for round := range listFloorRounds {
		if round == 1 {
			profile.Wait() // the profile is of the first round
		}
		r, err := s.serveAtOnce(ctx, streams)
		if err != nil {
			return nil, err
		}
		f.Rounds = append(f.Rounds, r)
		if round == 0 || r.Sec < f.Sec {
			f.Sec, f.CPU, f.ConsistencyChecks = r.Sec, r.CPU, r.ConsistencyChecks
		}
	}
	profile.Wait()
	for i := range streams {
		cpu0, t0 := childCPU(), time.Now()
		if _, err := streams[i].open(ctx); err != nil {
			return nil, err
		}
		streams[i].Sec = time.Since(t0).Seconds()
		streams[i].APIServerCPU = cpuDelta(cpu0, childCPU())["kube-apiserver"]
		f.Streams = append(f.Streams, streams[i].ListStream)
	}
	return f, nil
}

// serveAtOnce opens every stream at once and reads each to its end.
func (s *system) serveAtOnce(ctx context.Context, streams []listStream) (r ListRound, err error) {
	api0, err := scrapeAPIServer(ctx, s.rest)
	if err != nil {
		return r, err
	}
	errs := make([]error, len(streams))
	cpu0 := childCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			var read listRead
			read, errs[i] = streams[i].open(ctx)
			streams[i].Objects, streams[i].Bytes, streams[i].ManagedFields = read.objects, read.bytes, read.managedShare()
		})
	}
	wg.Wait()
	r.Sec, r.CPU = time.Since(start).Seconds(), cpuDelta(cpu0, childCPU())
	if err := errors.Join(errs...); err != nil {
		return r, err
	}
	api, err := scrapeAPIServer(ctx, s.rest)
	if err != nil {
		return r, err
	}
	r.ConsistencyChecks = consistencyChecks(api0, api)
	return r, nil
}

// sec is the time of the lists served at once (0 when not measured).
func (f *ListFloor) sec() float64 {
	if f == nil {
		return 0
	}
	return f.Sec
}

// cpu is the CPU seconds of the named process while the lists were served at once.
func (f *ListFloor) cpu(process string) float64 {
	if f == nil {
		return 0
	}
	return f.CPU[process]
}

// printListFloor prints a size's lists, each alone, beside its catch-up.
func printListFloor(w io.Writer, r ScaleResult) {
	f := r.ListFloor
	if f == nil {
		return
	}
	var rounds []string
	for _, round := range f.Rounds {
		rounds = append(rounds, num(round.Sec)+" s (cache checks: "+checksOf(round.ConsistencyChecks)+")")
	}
	fmt.Fprintf(w, "\nN=%d: the catch-up's initial lists served to the benchmark at once, in turn: %s\n", r.N,
		strings.Join(rounds, ", "))
	fmt.Fprintf(w, "N=%d: the fastest: %s s "+
		"(caught up in %s s), CPU-s kube-apiserver %s, etcd %s, cosi-bench %s; the API server's own cache checks "+
		"meanwhile: %s (in the catch-up: %s)\n\n", r.N, num(f.Sec), num(r.CaughtUpSec),
		num(f.CPU["kube-apiserver"]), num(f.CPU["etcd"]), num(f.CPU["cosi-bench"]), checksOf(f.ConsistencyChecks),
		checksOf(r.RestartConsistencyChecks))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "WHO\tRESOURCE\tOBJECTS\tBYTES PER OBJECT (MANAGED FIELDS)\tALONE s\t"+
		"KUBE-APISERVER CPU-ms PER 1,000 OBJECTS\t")
	for _, st := range f.Streams {
		per, cpu := "-", "-"
		if st.Objects > 0 {
			if st.Bytes > 0 {
				per = fmt.Sprintf("%.0f (%.0f %%)", float64(st.Bytes)/float64(st.Objects), 100*st.ManagedFields)
			}
			cpu = fmt.Sprintf("%.0f", st.APIServerCPU*1e6/float64(st.Objects))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t\n", st.Who, st.Resource, st.Objects, per, num(st.Sec), cpu)
	}
	tw.Flush()
}

// consistencyChecks are the API server's checks of its watch caches against etcd
// (DetectCacheInconsistency, every 5–7.5 minutes per resource: a list of every object from etcd,
// each decoded) that ended between two scrapes of its metrics, by resource. Such a check is the
// API server's own work, not COSI's; one that ends in a catch-up or in the lists alone is counted
// in their CPU.
func consistencyChecks(before, after metrics) map[string]float64 {
	out := map[string]float64{}
	for _, m := range []struct {
		ms   metrics
		sign float64
	}{{after, 1}, {before, -1}} {
		for _, metric := range m.ms["apiserver_storage_consistency_checks_total"].GetMetric() {
			for _, l := range metric.GetLabel() {
				if l.GetName() == "resource" {
					out[l.GetValue()] += m.sign * metric.GetCounter().GetValue()
				}
			}
		}
	}
	for k, v := range out {
		if v == 0 {
			delete(out, k)
		}
	}
	return out
}

// checksOf prints consistency checks (by resource) as "resource, resource" or "none".
func checksOf(checks map[string]float64) string {
	if len(checks) == 0 {
		return "none"
	}
	var out []string
	for r, n := range checks {
		if n != 1 {
			r = fmt.Sprintf("%s ×%.0f", r, n)
		}
		out = append(out, r)
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}
