package driver

import (
	"sync"
	"testing"
)

// TestKeyedMutex: work under one key is serialized, other keys do not wait, and no lock is kept
// once released.
func TestKeyedMutex(t *testing.T) {
	var k KeyedMutex
	var wg sync.WaitGroup
	var a, b int
	counts := map[string]*int{"a": &a, "b": &b} // read only: each key writes its own count
	for i := range 200 {
		key := []string{"a", "b"}[i%2]
		wg.Go(func() {
			unlock := k.Lock(key)
			defer unlock()
			*counts[key]++ // the race detector fails this unless one key's holders are serialized
		})
	}
	wg.Wait()
	if a != 100 || b != 100 {
		t.Errorf("counts a %d, b %d, want 100 each", a, b)
	}
	if len(k.locks) != 0 {
		t.Errorf("%d locks kept after every holder released", len(k.locks))
	}
	unlockA := k.Lock("a")
	done := make(chan struct{})
	go func() { k.Lock("b")(); close(done) }()
	<-done // another key does not wait for a
	unlockA()
}
