package driver

import "sync"

// KeyedMutex serializes work per key (a bucket, an account, a container): the sidecar may work on
// several accesses of one bucket at once, and a driver's read-modify-write of a backend object (a
// bucket policy, a container's access policies) must not lose an update. The zero value is ready
// to use; a key's lock is freed once nobody holds or waits for it.
type KeyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	sync.Mutex
	users int
}

// Lock locks key and returns the function that unlocks it.
func (k *KeyedMutex) Lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l, ok := k.locks[key]
	if !ok {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.users++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.users--; l.users == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
