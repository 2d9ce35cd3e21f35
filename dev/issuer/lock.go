package issuer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The fronts of a machine coordinate with locks that are abstract unix sockets
// (@kube-cosi/issuer/<name>, unix(7)): binding the name is taking the lock, and the kernel frees it
// when its process ends, however it ends. There is no file another local user could make first
// or leave behind (a lock file in /tmp could be). A name bound by a process of another user (not
// root) is no lock of a front of this user's: ignored, so that nobody can hold the fronts off by
// squatting the names, not even with a process that never ends; a front of theirs on an address
// pair is still seen, by its addresses (free), and one on port 443 by the port. The names are per
// network namespace, as the addresses they guard are.

// lockName is the lock of an address (a private front's pair) or of ip:443 (a public front).
func lockName(what string) string { return "@kube-cosi/issuer/" + what }

// errLocked says another process holds the lock.
var errLocked = errors.New("held by another process")

// tryLock takes the lock name, or returns errLocked at once.
func tryLock(name string) (io.Closer, error) {
	addr := &net.UnixAddr{Name: name, Net: "unix"}
	l, err := net.ListenUnix("unix", addr)
	switch {
	case err == nil:
		return l, nil
	case !isAddrInUse(err):
		return nil, fmt.Errorf("issuer: lock %s: %w", name, err)
	case heldByAnotherUser(addr):
		return noLock{}, nil
	}
	return nil, fmt.Errorf("issuer: lock %s: %w", name, errLocked)
}

// noLock stands for a lock name another user's process holds: nothing to release.
type noLock struct{}

func (noLock) Close() error { return nil }

// heldByAnotherUser reports whether the name addr is bound by no lock of a front of this user's
// (or root's): a front's lock listens, with a backlog nobody fills, and accepts connections
// (never served: they wait in the backlog until the connecting side closes). So a name bound
// without listening (a connection refused) or with a full backlog (EAGAIN) is a squatter's, and
// one listening is a front's when its process, as the kernel recorded it when it listened
// (SO_PEERCRED), runs as this user or root.
func heldByAnotherUser(addr *net.UnixAddr) bool {
	c, err := net.DialUnix("unix", nil, addr)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EAGAIN):
		return true
	case err != nil:
		return false
	}
	defer func() { _ = c.Close() }()
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return false
	}
	return cred.Uid != 0 && cred.Uid != uint32(os.Getuid())
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
