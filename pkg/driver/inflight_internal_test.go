package driver

import (
	"context"
	"runtime"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Calls that take the same keys in opposite orders, all exclusive, never wait for each other in a
// cycle: every one finishes, and no key state is left behind.
func TestInFlightNoDeadlock(t *testing.T) {
	l := &inFlight{}
	orders := [][]lockKey{
		{{key: "a", exclusive: true}, {key: "b", exclusive: true}},
		{{key: "b", exclusive: true}, {key: "a", exclusive: true}},
		{{key: "b"}, {key: "c", exclusive: true}, {key: "a"}},
		{{key: "c"}, {key: "a", exclusive: true}},
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 500 {
				unlock, err := l.lock(t.Context(), orders[i%len(orders)])
				if err != nil {
					t.Error(err)
					return
				}
				unlock()
			}
		})
	}
	wg.Wait()
	if n := l.size(); n != 0 {
		t.Errorf("%d key states left behind", n)
	}
}

// A waiting exclusive call holds new shared calls back (a deletion is not starved by grants), and
// when it gives up, they go; a wait that gives up releases what it took and returns the context's
// code.
func TestInFlightWaitsAndGivesUp(t *testing.T) {
	l := &inFlight{}
	unlockShared, err := l.lock(t.Context(), []lockKey{{key: "bucket/b1"}})
	if err != nil {
		t.Fatal(err)
	}
	writerCtx, cancelWriter := context.WithCancel(t.Context())
	writer := make(chan error, 1)
	go func() {
		// Takes account/x (sorted first), then waits for bucket/b1.
		_, err := l.lock(writerCtx, []lockKey{{key: "bucket/b1", exclusive: true}, {key: "account/x", exclusive: true}})
		writer <- err
	}()
	waitFor(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.keys["bucket/b1"] != nil && l.keys["bucket/b1"].writers == 1
	})
	reader := make(chan error, 1)
	go func() {
		unlock, err := l.lock(t.Context(), []lockKey{{key: "bucket/b1"}})
		if err == nil {
			unlock()
		}
		reader <- err
	}()
	waitFor(t, func() bool { // the shared call is waiting too
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.keys["bucket/b1"].users == 3
	})
	l.mu.Lock()
	shared := l.keys["bucket/b1"].shared
	l.mu.Unlock()
	if shared != 1 {
		t.Fatalf("%d calls hold bucket/b1 shared: a shared call went past a waiting exclusive one", shared)
	}
	cancelWriter()
	if err := <-writer; status.Code(err) != codes.Canceled {
		t.Errorf("the exclusive call that gave up: %v, want CANCELLED", err)
	}
	if err := <-reader; err != nil {
		t.Errorf("the shared call after the exclusive one gave up: %v", err)
	}
	unlockShared()
	if n := l.size(); n != 0 {
		t.Errorf("%d key states left behind", n)
	}
}

// waitFor waits until cond holds, yielding in between.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-t.Context().Done():
			t.Fatal("condition never held")
		default:
		}
		runtime.Gosched()
	}
}
