package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
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
	// ListRound is the fastest of Rounds.
	ListRound
	// Rounds are each time the streams were served at once (listFloorRounds), in turn.
	Rounds []ListRound `json:"rounds"`
	// Streams are the lists, each also served alone.
	Streams []ListStream `json:"streams"`
}

// ListRound is one serving of every stream at once: the time from opening them to the last one's
// end of its initial events, the CPU seconds of each process meanwhile (by command name), and the
// API server's own checks of its caches that ended meanwhile.
type ListRound struct {
	Sec               float64            `json:"sec"`
	CPU               map[string]float64 `json:"cpu"`
	ConsistencyChecks map[string]float64 `json:"consistencyChecks,omitempty"`
}

// ListStream is one informer's initial list.
type ListStream struct {
	// Who opens it (controller or sidecar) and what it lists.
	Who      string `json:"who"`
	Resource string `json:"resource"`
	// Objects and Bytes it carried (events, framing included); of the bytes of every 64th object,
	// the share of its metadata.managedFields (JSON streams only).
	Objects       int     `json:"objects"`
	Bytes         int64   `json:"bytes"`
	ManagedFields float64 `json:"managedFields,omitempty"`
	// Alone is the stream served alone (its CPU: the API server's only).
	Alone ListRound `json:"alone"`
}

// listFloorRounds is how often the streams are served at once: the fastest is the floor, the
// others show how much the API server's own work (its cache checks, its garbage collection)
// moves it.
const listFloorRounds = 3

// listStream opens one initial list and reads it to its end.
type listStream struct {
	ListStream
	open func(ctx context.Context) (listRead, error)
}

// catchUpStreams are the initial lists of the informers of controller and sidecar: COSI's kinds
// cluster-wide in JSON (the controller's five, the sidecar's Buckets and accesses: internal/cache/jsonwatch),
// and the sidecar's grant records (ConfigMaps of its driver in the grant namespace, selected by
// label) in protobuf, as controller-runtime asks for built-in kinds. Each process's streams share a
// connection of their own, as in the processes (one HTTP/2 connection per client); they run as the
// benchmark's user, as the processes do here (localenv.Admin).
func (s *system) catchUpStreams(ctx context.Context) ([]listStream, error) {
	controller, err := newConnection(s.rest)
	if err != nil {
		return nil, err
	}
	sidecar, err := newConnection(s.rest)
	if err != nil {
		return nil, err
	}
	host := strings.TrimSuffix(s.rest.Host, "/")
	custom := func(who string, c *http.Client, resource string) listStream {
		u := host + "/apis/" + cosiapi.SchemeGroupVersion.String() + "/" + resource + "?" + watchListQuery("").Encode()
		return listStream{
			ListStream: ListStream{Who: who, Resource: resource},
			open: func(ctx context.Context) (listRead, error) {
				return readWatchList(ctx, c, u, runtime.ContentTypeJSON)
			},
		}
	}
	var out []listStream
	for _, r := range []string{"bucketclaims", "buckets", "bucketaccesses", "bucketclasses", "bucketaccessclasses"} {
		out = append(out, custom("controller", controller, r))
	}
	out = append(out, custom("sidecar", sidecar, "buckets"), custom("sidecar", sidecar, "bucketaccesses"))

	// The grant records: their namespace and driver label as the sidecar wrote them (the benchmark
	// runs one driver).
	var records corev1.ConfigMapList
	if err := s.client.List(ctx, &records, client.HasLabels{cosiapi.LabelGrantDriver}, client.Limit(1)); err != nil {
		return nil, err
	}
	if len(records.Items) == 0 {
		return nil, errors.New("no grant record to take the sidecar's selection from")
	}
	record := records.Items[0]
	u := host + "/api/v1/namespaces/" + record.Namespace + "/configmaps?" +
		watchListQuery(cosiapi.LabelGrantDriver+"="+record.Labels[cosiapi.LabelGrantDriver]).Encode()
	out = append(out, listStream{
		ListStream: ListStream{Who: "sidecar", Resource: "configmaps"},
		open: func(ctx context.Context) (listRead, error) {
			return readWatchList(ctx, sidecar, u, runtime.ContentTypeProtobuf)
		},
	})
	return out, nil
}

// newConnection is an HTTP client of cfg with a connection of its own: client-go shares one
// transport among the clients of equal configurations, but not of one with a proxy function.
func newConnection(cfg *rest.Config) (*http.Client, error) {
	c := rest.CopyConfig(cfg)
	c.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	return rest.HTTPClientFor(c)
}

// watchListQuery is a reflector's query for its initial list as a stream (client-go's
// WatchListClient, on by default; reflector.watchList), with labelSelector.
func watchListQuery(labelSelector string) url.Values {
	sendInitialEvents := true
	timeout := int64(listWatchTimeout.Seconds())
	q, err := metav1.ParameterCodec.EncodeParameters(&metav1.ListOptions{
		LabelSelector:        labelSelector,
		Watch:                true,
		SendInitialEvents:    &sendInitialEvents,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		AllowWatchBookmarks:  true,
		TimeoutSeconds:       &timeout,
	}, metav1.SchemeGroupVersion)
	if err != nil {
		panic(err) // ListOptions always convert
	}
	return q
}

// listWatchTimeout is the timeoutSeconds of each stream, as a reflector's (5 to 10 minutes): the
// API server ends a stream then, whether or not its initial events ended.
const listWatchTimeout = 10 * time.Minute

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

// readWatchList reads a watch stream of the content type (JSON: an event per line; protobuf:
// length-prefixed frames) to the bookmark that ends its initial events, counting the ADDED events
// and the bytes; of a JSON stream it decodes only every managedFieldsSample-th object's metadata.
func readWatchList(ctx context.Context, c *http.Client, u, contentType string) (out listRead, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return out, err
	}
	req.Header.Set("Accept", contentType)
	resp, err := c.Do(req)
	if err != nil {
		return out, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return out, fmt.Errorf("watch-list %s: %s: %s", u, resp.Status, body)
	}
	next := jsonEvents(bufio.NewReaderSize(resp.Body, 64<<10), &out)
	if contentType == runtime.ContentTypeProtobuf {
		next = protobufEvents(bufio.NewReaderSize(resp.Body, 64<<10), &out)
	}
	for {
		typ, end, err := next()
		switch {
		case err != nil:
			return out, fmt.Errorf("watch-list %s ended before its initial events did: %w", u, err)
		case typ == watch.Error:
			return out, fmt.Errorf("watch-list %s: an ERROR event", u)
		case end:
			return out, nil
		}
	}
}

// jsonEvents reads the events of a JSON watch stream: each one line, {"type":"...","object":...}
// (the API server's WatchEvent, encoded by encoding/json). It returns an event's type, and whether
// it is the bookmark that ends the initial events.
func jsonEvents(r *bufio.Reader, out *listRead) func() (watch.EventType, bool, error) {
	var line []byte
	return func() (watch.EventType, bool, error) {
		for {
			chunk, err := r.ReadSlice('\n')
			out.bytes += int64(len(chunk))
			if errors.Is(err, bufio.ErrBufferFull) {
				line = append(line, chunk...)
				continue
			}
			if err != nil {
				return "", false, err
			}
			if len(line) > 0 {
				chunk = append(line, chunk...)
				line = line[:0]
			}
			var typ struct {
				Type watch.EventType `json:"type"`
			}
			head := chunk[:min(len(chunk), 32)]
			if i := bytes.IndexByte(head, ','); i > 0 {
				head = append(head[:i:i], '}')
			}
			if err := json.Unmarshal(head, &typ); err != nil {
				return "", false, fmt.Errorf("an event that does not start with its type: %q", head)
			}
			switch typ.Type {
			case watch.Added:
				if out.objects%managedFieldsSample == 0 {
					if err := out.sample(chunk); err != nil {
						return "", false, err
					}
				}
				out.objects++
			case watch.Bookmark:
				return typ.Type, bytes.Contains(chunk, initialEventsEnd), nil
			}
			return typ.Type, false, nil
		}
	}
}

// sample adds an event's bytes and its object's managedFields' to the sample.
func (r *listRead) sample(event []byte) error {
	var ev struct {
		Object struct {
			Metadata struct {
				ManagedFields json.RawMessage `json:"managedFields"`
			} `json:"metadata"`
		} `json:"object"`
	}
	if err := json.Unmarshal(event, &ev); err != nil {
		return fmt.Errorf("an event that is not JSON: %w", err)
	}
	r.sampled += int64(len(event))
	r.managed += int64(len(ev.Object.Metadata.ManagedFields))
	return nil
}

// protobufEvents reads the events of a protobuf watch stream: each a 4-byte big-endian length
// and a metav1.WatchEvent (the API server's stream serializer writes it raw: no magic number,
// no runtime.Unknown; its object is a RawExtension, not decoded here but for the bookmark's
// annotation).
func protobufEvents(r *bufio.Reader, out *listRead) func() (watch.EventType, bool, error) {
	var frame []byte
	return func() (watch.EventType, bool, error) {
		var size [4]byte
		if _, err := io.ReadFull(r, size[:]); err != nil {
			return "", false, err
		}
		n := binary.BigEndian.Uint32(size[:])
		if n > 64<<20 {
			return "", false, fmt.Errorf("a frame of %d bytes", n)
		}
		frame = slices.Grow(frame[:0], int(n))[:n]
		if _, err := io.ReadFull(r, frame); err != nil {
			return "", false, err
		}
		out.bytes += int64(len(size) + len(frame))
		var ev metav1.WatchEvent
		if err := ev.Unmarshal(frame); err != nil {
			return "", false, fmt.Errorf("a frame that is not a watch event: %w", err)
		}
		typ := watch.EventType(ev.Type)
		switch typ {
		case watch.Added:
			out.objects++
		case watch.Bookmark:
			return typ, bytes.Contains(ev.Object.Raw, []byte(metav1.InitialEventsAnnotationKey)), nil
		}
		return typ, false, nil
	}
}

// listFloor serves the catch-up's initial lists to the benchmark: at once, listFloorRounds times,
// then each alone. Each serving may take 2 minutes and 5 times the catch-up's time.
func (s *system) listFloor(ctx context.Context, n int, caughtUp time.Duration) (*ListFloor, error) {
	streams, err := s.catchUpStreams(ctx)
	if err != nil {
		return nil, err
	}
	limit := 2*time.Minute + 5*caughtUp
	f := &ListFloor{}
	var profile sync.WaitGroup
	if s.cfg.Profiles != "" && s.cfg.ProfileCPU > 0 {
		// The API server's CPU while it serves them at once (kube-apiserver-<N>-lists.pprof):
		// the first round, which the others wait for.
		profile.Go(func() { s.apiServerProfile(ctx, n, "lists") })
	}
	for round := range listFloorRounds {
		if round == 1 {
			profile.Wait()
		}
		r, err := s.serve(ctx, limit, streams...)
		if err != nil {
			profile.Wait()
			return nil, err
		}
		f.Rounds = append(f.Rounds, r)
		if round == 0 || r.Sec < f.Sec {
			f.ListRound = r
		}
	}
	profile.Wait()
	for i := range streams {
		if streams[i].Alone, err = s.serve(ctx, limit, streams[i]); err != nil {
			return nil, err
		}
		streams[i].Alone.CPU = map[string]float64{"kube-apiserver": streams[i].Alone.CPU["kube-apiserver"]}
		f.Streams = append(f.Streams, streams[i].ListStream)
	}
	return f, nil
}

// serve opens the streams at once and reads each to its end, within limit.
func (s *system) serve(ctx context.Context, limit time.Duration, streams ...listStream) (r ListRound, err error) {
	api0, err := scrapeAPIServer(ctx, s.rest)
	if err != nil {
		return r, err
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	reads := make([]listRead, len(streams))
	cpu0 := childCPU()
	start := time.Now()
	for i := range streams {
		g.Go(func() (err error) {
			reads[i], err = streams[i].open(gctx)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return r, err
	}
	r.Sec, r.CPU = time.Since(start).Seconds(), cpuDelta(cpu0, childCPU())
	for i, read := range reads {
		streams[i].Objects, streams[i].Bytes, streams[i].ManagedFields = read.objects, read.bytes, read.managedShare()
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
		"KUBE-APISERVER CPU-ms PER 1,000 OBJECTS\tAPI SERVER'S CACHE CHECKS\t")
	for _, st := range f.Streams {
		per, cpu := "-", "-"
		if st.Objects > 0 {
			if st.Bytes > 0 {
				per = fmt.Sprintf("%.0f", float64(st.Bytes)/float64(st.Objects))
				if st.ManagedFields > 0 { // measured in JSON streams only
					per += fmt.Sprintf(" (%.0f %%)", 100*st.ManagedFields)
				}
			}
			cpu = fmt.Sprintf("%.0f", st.Alone.CPU["kube-apiserver"]*1e6/float64(st.Objects))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t\n", st.Who, st.Resource, st.Objects, per, num(st.Alone.Sec), cpu,
			checksOf(st.Alone.ConsistencyChecks))
	}
	tw.Flush()
}

// consistencyChecks are the API server's checks of its watch caches against etcd
// (DetectCacheInconsistency, every 5–7.5 minutes per resource: a list of every object from etcd,
// each decoded) that ended between two scrapes of its metrics, by resource. Such a check is the
// API server's own work, not COSI's; one that ends in a catch-up or in the lists alone is counted
// in their CPU.
func consistencyChecks(before, after metrics) map[string]float64 {
	return countsBy(before, after, "apiserver_storage_consistency_checks_total", "resource")
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
