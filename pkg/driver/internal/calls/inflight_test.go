package calls

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
	l := &InFlight{}
	orders := [][]LockKey{
		{{Key: "a", Exclusive: true}, {Key: "b", Exclusive: true}},
		{{Key: "b", Exclusive: true}, {Key: "a", Exclusive: true}},
		{{Key: "b"}, {Key: "c", Exclusive: true}, {Key: "a"}},
		{{Key: "c"}, {Key: "a", Exclusive: true}},
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 500 {
				unlock, err := l.Lock(t.Context(), orders[i%len(orders)])
				if err != nil {
					t.Error(err)
					return
				}
				unlock()
			}
		})
	}
	wg.Wait()
	if n := l.Size(); n != 0 {
		t.Errorf("%d key states left behind", n)
	}
}

// A waiting exclusive call holds new shared calls back (a deletion is not starved by grants), and
// when it gives up, they go; a wait that gives up releases what it took and returns the context's
// code.
func TestInFlightWaitsAndGivesUp(t *testing.T) {
	l := &InFlight{}
	unlockShared, err := l.Lock(t.Context(), []LockKey{{Key: "bucket/b1"}})
	if err != nil {
		t.Fatal(err)
	}
	writerCtx, cancelWriter := context.WithCancel(t.Context())
	writer := make(chan error, 1)
	go func() {
		// Takes account/x (sorted first), then waits for bucket/b1.
		_, err := l.Lock(writerCtx, []LockKey{{Key: "bucket/b1", Exclusive: true}, {Key: "account/x", Exclusive: true}})
		writer <- err
	}()
	waitFor(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.keys["bucket/b1"] != nil && l.keys["bucket/b1"].writers == 1
	})
	reader := make(chan error, 1)
	go func() {
		unlock, err := l.Lock(t.Context(), []LockKey{{Key: "bucket/b1"}})
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
	if n := l.Size(); n != 0 {
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
