package sanity_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kube-cosi/cosi/pkg/driver/memory"
	"github.com/kube-cosi/cosi/pkg/sanity"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// lagging is the memory driver behind an eventually consistent store: for lag after each call
// that changes the backend, the probe still answers each question as it did before the call (a
// question not asked before: as if the change had not happened yet, for the grant it made: no).
type lagging struct {
	*memory.Driver
	lag time.Duration

	mu      sync.Mutex
	changed time.Time
	before  map[string]any // each question's answer from before the last change
}

func (l *lagging) change() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.changed = time.Now()
}

// answer returns the answer to the question key as the store shows it: the last answer from
// before the latest change while the change is younger than lag, else now.
func answer[V any](l *lagging, key string, now V, unknown V) V {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.changed) >= l.lag {
		l.before[key] = now
		return now
	}
	if old, ok := l.before[key]; ok {
		return old.(V) //nolint:forcetypeassert // stored by this function with this key
	}
	return unknown
}

func (l *lagging) DriverCreateBucket(
	ctx context.Context, req *cosiproto.DriverCreateBucketRequest,
) (*cosiproto.DriverCreateBucketResponse, error) {
	defer l.change()
	return l.Driver.DriverCreateBucket(ctx, req)
}

func (l *lagging) DriverDeleteBucket(
	ctx context.Context, req *cosiproto.DriverDeleteBucketRequest,
) (*cosiproto.DriverDeleteBucketResponse, error) {
	defer l.change()
	return l.Driver.DriverDeleteBucket(ctx, req)
}

func (l *lagging) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	defer l.change()
	return l.Driver.DriverGrantBucketAccess(ctx, req)
}

func (l *lagging) DriverRevokeBucketAccess(
	ctx context.Context, req *cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	defer l.change()
	return l.Driver.DriverRevokeBucketAccess(ctx, req)
}

func (l *lagging) DriverRotateBucketAccessCredentials(
	ctx context.Context, req *cosiproto.DriverRotateBucketAccessCredentialsRequest,
) (*cosiproto.DriverRotateBucketAccessCredentialsResponse, error) {
	defer l.change()
	return l.Driver.DriverRotateBucketAccessCredentials(ctx, req)
}

func (l *lagging) DriverRetireBucketAccessCredentials(
	ctx context.Context, req *cosiproto.DriverRetireBucketAccessCredentialsRequest,
) (*cosiproto.DriverRetireBucketAccessCredentialsResponse, error) {
	defer l.change()
	return l.Driver.DriverRetireBucketAccessCredentials(ctx, req)
}

// probe is the lagging store's view of the memory driver's probe.
func (l *lagging) probe(base sanity.Probe) sanity.Probe {
	p := base
	p.Allowed = func(ctx context.Context, c sanity.AccessCheck) (bool, error) {
		now, err := base.Allowed(ctx, c)
		key := fmt.Sprintf("allowed %v %s %v %v", c.Credentials, c.BucketID, c.Category, c.Write)
		return answer(l, key, now, false), err
	}
	p.AccountOf = func(ctx context.Context, creds *cosiproto.CredentialInfo) (string, error) {
		now, err := base.AccountOf(ctx, creds)
		return answer(l, fmt.Sprintf("accountOf %v", creds), now, ""), err
	}
	p.BucketExists = func(ctx context.Context, id string) (bool, error) {
		now, err := base.BucketExists(ctx, id)
		return answer(l, "exists "+id, now, false), err
	}
	return p
}

// TestSettleWindow runs the suite against a store whose changes take 30 ms to show: without a
// settle window the cases that look right after a call fail, with one every case passes and the
// suite reports how long the effects took.
func TestSettleWindow(t *testing.T) {
	run1 := func(settle time.Duration) map[string]sanity.Result {
		var logs logBuffer
		d := newMemory(t, memory.Config{})
		l := &lagging{Driver: d, lag: 30 * time.Millisecond, before: map[string]any{}}
		cfg := memoryConfig(serve(t, l, logs.logger()), d, &logs)
		cfg.Probe = l.probe(cfg.Probe)
		cfg.Settle = settle
		return run(t, cfg)
	}
	if failed := failedOrSkipped(run1(0), sanity.Failed); len(failed) < 3 {
		t.Errorf("without a settle window %d cases failed against a store that takes 30 ms to show a change; "+
			"want several:\n%s", len(failed), strings.Join(failed, "\n"))
	}
	results := run1(2 * time.Second)
	if failed := failedOrSkipped(results, sanity.Failed); len(failed) > 0 {
		t.Errorf("with a settle window of 2s, failed cases:\n%s", strings.Join(failed, "\n"))
	}
	r := results[sanity.SettleResult]
	if r.Status != sanity.Passed || !strings.Contains(r.Message, "effects checked within the settle window of 2s") {
		t.Errorf("%s: %s %q, want passed with the figures", sanity.SettleResult, r.Status, r.Message)
	}
	t.Log(r.Message)
}
