package issuer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The fronts of a machine coordinate with locks that are abstract unix sockets
// (@kube-cosi/issuer/<name>, unix(7)): binding the name is taking the lock, and the kernel frees it
// when its process ends, however it ends. There is no file another local user could make first
// or leave behind (a lock file in /tmp could be), and no user can hold a lock longer than a
// process of theirs lives. The names are per network namespace, as the addresses they guard are.

// lockName is the lock of an address (a private front's pair) or of ip:443 (a public front).
func lockName(what string) string { return "@kube-cosi/issuer/" + what }

// errLocked says another process holds the lock.
var errLocked = errors.New("held by another process")

// tryLock takes the lock name, or returns errLocked at once.
func tryLock(name string) (io.Closer, error) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		if isAddrInUse(err) {
			return nil, fmt.Errorf("issuer: lock %s: %w", name, errLocked)
		}
		return nil, fmt.Errorf("issuer: lock %s: %w", name, err)
	}
	return l, nil
}

// lock takes the lock name, polling until ctx ends.
func lock(ctx context.Context, name string) (io.Closer, error) {
	for {
		l, err := tryLock(name)
		if !errors.Is(err, errLocked) {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("issuer: waiting for %s: %w", name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
