//go:build unix && !linux

package driver

import (
	"fmt"
	"io/fs"
	"net"
	"sync"
	"syscall"
)

// umaskMu serializes listens: the umask is process-wide.
var umaskMu sync.Mutex

// bindSocket binds and listens on a new Unix socket at path created with exactly mode, under a
// umask that allows only mode. Unlike Linux (socket_linux.go), these systems do not take a
// socket's mode from fchmod before bind, so the umask of the whole process changes for the
// moment of the bind: a file another goroutine creates at that moment gets at most mode's bits.
func bindSocket(path string, mode fs.FileMode) (*net.UnixListener, error) {
	umaskMu.Lock()
	old := syscall.Umask(int(0o777 &^ mode))
	lis, err := net.Listen("unix", path)
	syscall.Umask(old)
	umaskMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	return lis.(*net.UnixListener), nil
}
