package requeue_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/requeue"
)

var gr = schema.GroupResource{Group: cosiapi.GroupName, Resource: "buckets"}

func TestResultWithEvent(t *testing.T) {
	conflict := apierrors.NewConflict(gr, "b", errors.New("changed"))
	retry := reconcile.Result{Requeue: true} //nolint:staticcheck // what Result returns for a conflict
	for _, tc := range []struct {
		name      string
		err       error
		want      reconcile.Result
		wantErr   bool
		wantEvent string // its start: "Type Reason"
	}{
		{name: "success"},
		{name: "conflict", err: conflict, want: retry, wantEvent: "Normal " + cosiapi.EventUpdateConflict},
		{name: "wrapped conflict", err: errors.Join(conflict), want: retry,
			wantEvent: "Normal " + cosiapi.EventUpdateConflict},
		{name: "not found", err: apierrors.NewNotFound(gr, "b"), wantErr: true},
		{name: "forbidden", err: apierrors.NewForbidden(gr, "b", errors.New("no")), wantErr: true,
			wantEvent: "Warning " + cosiapi.EventFailedCreateBucket},
		{name: "not an API error", err: errors.New("driver"), wantErr: true},
		// A write into a namespace that is gone: tried again at intervals, logged, no event.
		{name: "namespace gone", err: apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "ns"),
			want: reconcile.Result{RequeueAfter: requeue.NamespaceGoneInterval}},
	} {
		rec := events.NewFakeRecorder(1)
		obj := &cosiapi.Bucket{ObjectMeta: metav1.ObjectMeta{Name: "result-" + tc.name}}
		got, err := requeue.ResultWithEvent(rec, obj, cosiapi.EventFailedCreateBucket, tc.err)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%s: %+v, %v; want %+v, error %v", tc.name, got, err, tc.want, tc.wantErr)
		}
		select {
		case e := <-rec.Events:
			if tc.wantEvent == "" {
				t.Errorf("%s: event %q", tc.name, e)
			} else if !strings.HasPrefix(e, tc.wantEvent) {
				t.Errorf("%s: event %q, want %s", tc.name, e, tc.wantEvent)
			}
		default:
			if tc.wantEvent != "" {
				t.Errorf("%s: no event", tc.name)
			}
		}
	}
}

func TestRateLimiterIsBounded(t *testing.T) {
	rl := requeue.RateLimiter()
	req := reconcile.Request{}
	if first := rl.When(req); first > 10*time.Millisecond {
		t.Errorf("first backoff %v, want 5ms", first)
	}
	last := time.Duration(0)
	for range 50 {
		last = rl.When(req)
	}
	if last != requeue.MaxBackoff {
		t.Errorf("backoff after 50 failures %v, want the cap %v", last, requeue.MaxBackoff)
	}
}

// NextBackoff tells the wait that the rate limiter gives the next failure, up to MaxBackoff.
func TestNextBackoff(t *testing.T) {
	rl := requeue.RateLimiter()
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "backoff"}}
	for i := range 20 {
		want := requeue.NextBackoff(rl, req)
		if got := rl.When(req); got != want {
			t.Fatalf("failure %d: NextBackoff said %v, the rate limiter waits %v", i, want, got)
		}
	}
	if got := requeue.NextBackoff(rl, req); got != requeue.MaxBackoff {
		t.Errorf("after 20 failures: %v, want %v", got, requeue.MaxBackoff)
	}
}
