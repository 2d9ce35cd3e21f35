package driver

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// listen creates the Unix socket at path with the given mode. An existing socket is removed only
// if nothing accepts connections on it (a stale socket left by a crashed driver); a live socket, or
// a file that is not a socket, is an error and is left alone. The socket's directory must exist:
// drivers do not create files or directories next to their socket (COSI spec, "Filesystem").
//
// The socket never exists at path with any other mode, and nothing at path is ever chmod-ed:
// bind(2) creates a socket under the process umask, so the socket is bound in a new private
// directory (mode 0700, made here and removed before listen returns), given its mode there, where
// no one else can reach or swap it, and then hard-linked into place. link(2) neither follows nor
// replaces what is at path: if anything appeared there meanwhile, listen fails.
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

	// A short name: a socket path has at most 107 bytes, and this one is a few longer than path.
	private, err := os.MkdirTemp(filepath.Dir(path), ".c")
	if err != nil {
		return nil, fmt.Errorf("creating a private directory for the socket: %w", err)
	}
	defer os.Remove(private)
	tmp := filepath.Join(private, "s")
	lis, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, err
	}
	ul := lis.(*net.UnixListener)
	// Closing must remove the socket at path, not at tmp (see socketListener.Close).
	ul.SetUnlinkOnClose(false)
	fail := func(what string, err error) (net.Listener, error) {
		_ = lis.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fail("restricting socket mode", err)
	}
	if err := os.Link(tmp, path); err != nil {
		return fail("moving the socket into place", err)
	}
	_ = os.Remove(tmp)
	info, err = os.Lstat(path)
	if err != nil {
		return fail("checking the socket", err)
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
