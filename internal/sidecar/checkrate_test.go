package sidecar_test

import (
	"context"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// secretPatches records when the sidecar sent each PATCH of a Secret, by Secret name.
type secretPatches struct {
	mu    sync.Mutex
	times map[string][]time.Time
}

// config is cfg with every PATCH of a Secret recorded, at the moment it is sent.
func (p *secretPatches) config(cfg *rest.Config) *rest.Config {
	p.times = map[string][]time.Time{}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodPatch && path.Base(path.Dir(req.URL.Path)) == "secrets" {
				p.mu.Lock()
				p.times[path.Base(req.URL.Path)] = append(p.times[path.Base(req.URL.Path)], time.Now())
				p.mu.Unlock()
			}
			return rt.RoundTrip(req)
		})
	})
	return cfg
}

// firstAfter returns, for each name, the time of its first PATCH after t.
func (p *secretPatches) firstAfter(names []string, t time.Time) ([]time.Time, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []time.Time
	for _, n := range names {
		i := slices.IndexFunc(p.times[n], func(at time.Time) bool { return at.After(t) })
		if i < 0 {
			return nil, fmt.Errorf("Secret %s not checked since %v", n, t.Format(time.StampMilli))
		}
		out = append(out, p.times[n][i])
	}
	return out, nil
}

// TestSecretChecksSpread: Secret checks that fell due together, while the only worker was held in a
// grant, are spread when the worker is free again, at most checkRateFactor (2) × N/interval per
// second, instead of running back to back; and each access's Secret is still checked. 40
// accesses checked every 4 s may be checked at 20 per second (the bucket holds 2), so the 40
// backlogged checks take at least (40 - 2) / 20 = 1.9 s from the first to the last, however
// slowly the machine runs them (a check never runs before its time).
func TestSecretChecksSpread(t *testing.T) {
	t.Parallel()
	const accesses, interval = 40, 4 * time.Second
	patches := &secretPatches{}
	h := newHarnessWith(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}},
		sidecarConfig)
	h.restartSidecar(patches.config(sidecarConfig), func(o *sidecar.Options) {
		o.Workers, o.SecretCheckInterval = 1, interval
	})

	b := h.provisionedBucket(cosiapi.ProtocolS3)
	var names []string
	for range accesses {
		ba := h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
		names = append(names, ba.Spec.BucketClaims[0].AccessSecretName)
		provisioned(t, ba, accessConditions)
	}

	// One more grant holds the only worker for longer than the interval: every check falls due.
	h.faults.Pause("DriverGrantBucketAccess", false)
	h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, ok := h.faults.WaitPaused(ctx); !ok {
		t.Fatal("the grant did not reach the driver")
	}
	held := time.Now()
	time.Sleep(interval + time.Second)
	h.faults.Release()

	var first []time.Time
	testenv.Eventually(t, func() error {
		var err error
		first, err = patches.firstAfter(names, held)
		return err
	})
	slices.SortFunc(first, time.Time.Compare)
	span := first[len(first)-1].Sub(first[0])
	// (accesses - burst) / limit, less 0.2 s for the time between a check's decision and its PATCH.
	want := time.Duration(accesses-2)*time.Second/20 - 200*time.Millisecond
	if span < want {
		t.Errorf("the %d checks due together ran within %v, want at least %v (spread at 20 per second): %s",
			accesses, span, want, offsets(first))
	}

	// The limiter's decisions are counted: the backlogged checks took places, then ran; every
	// decision's series exists, for the Bucket refreshes too. (NotDue: an access woken before its
	// check's time, by an event; the schedule wakes each at its time.)
	least := map[string]float64{"NotDue": 0, "Placed": 1, "Kept": 0, "Ran": accesses, "Refused": 0}
	for _, check := range []string{"Secrets", "BucketInfo"} {
		for decision, n := range least {
			if check == "BucketInfo" {
				n = 0
			}
			if got := checkDecisions(t, h.name, check, decision); got < n {
				t.Errorf("cosi_sidecar_scheduled_check_decisions_total{check=%q, decision=%q} = %v, want at least %v",
					check, decision, got, n)
			}
		}
	}
}

// checkDecisions returns the count of cosi_sidecar_scheduled_check_decisions_total for the driver,
// the kind of check and the decision, -1 if there is no such series.
func checkDecisions(t *testing.T, driverName, check, decision string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"driver_name": driverName, "check": check, "decision": decision}
	for _, f := range families {
		if f.GetName() != "cosi_sidecar_scheduled_check_decisions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			matched := 0
			for _, l := range m.GetLabel() {
				if want[l.GetName()] == l.GetValue() {
					matched++
				}
			}
			if matched == len(want) && len(m.GetLabel()) == len(want) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// offsets prints times as offsets from the first.
func offsets(times []time.Time) string {
	var b strings.Builder
	for _, at := range times {
		fmt.Fprintf(&b, "%v ", at.Sub(times[0]).Round(time.Millisecond))
	}
	return b.String()
}
