package driver

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync"
	"time"
)

// listen creates the Unix socket at path with the given mode. An existing socket is removed only
// if nothing accepts connections on it (a stale socket left by a crashed driver); a live socket, or
// a file that is not a socket, is an error and is left alone. The socket's directory must exist.
//
// Nothing but the socket is ever created in its directory, not even for a moment: the COSI spec
// ("Filesystem") forbids drivers to create files or directories next to their socket, and a
// temporary one would outlive a driver killed at the wrong time. The socket never has a
// permission bit outside mode, and nothing at path is ever chmod-ed through a symlink; see
// bindSocket.
func listen(path string, mode fs.FileMode) (net.Listener, error) {
	info, err := os.Lstat(path)
	switch {
	case err == nil:
		if info.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket; refusing to remove it", path)
		}
		conn, dialErr := net.DialTimeout("unix", path, time.Second)
		if dialErr == nil {
			_ = conn.Close()
			return nil, fmt.Errorf("%s is in use: another process is serving on it", path)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("removing stale socket: %w", err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("checking %s: %w", path, err)
	}

	ul, err := bindSocket(path, mode.Perm())
	if err != nil {
		return nil, err
	}
	// Closing must remove the socket only while it is still the one made here (see
	// socketListener.Close).
	ul.SetUnlinkOnClose(false)
	info, err = os.Lstat(path)
	if err != nil {
		_ = ul.Close()
		return nil, fmt.Errorf("checking the socket: %w", err)
	}
	return &socketListener{UnixListener: ul, path: path, info: info}, nil
}

// socketListener removes its socket when closed, unless the socket at path is no longer the one
// it made (a new driver took its place).
type socketListener struct {
	*net.UnixListener
	path string
	info fs.FileInfo
	once sync.Once
}

func (l *socketListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() {
		if now, statErr := os.Lstat(l.path); statErr == nil && os.SameFile(now, l.info) {
			_ = os.Remove(l.path)
		}
	})
	return err
}
