package driver

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// bindSocket binds and listens on a new Unix socket at path whose file has the permissions
// mode, and no other at any moment.
//
// bind(2) gives the socket file the mode of the socket's own inode less the umask. The inode's
// mode is set with fchmod before bind, so the file is created with no bit outside mode: there is
// no window, and the process umask (shared by every goroutine) is left alone. When the umask
// took away bits of mode (0o660 under umask 022), they are given back afterwards through a
// descriptor of the file opened without following symlinks (O_PATH|O_NOFOLLOW), after checking
// that it is a socket: what is chmod-ed is never the target of a symlink swapped in at path.
func bindSocket(path string, mode fs.FileMode) (*net.UnixListener, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("creating the socket: %w", os.NewSyscallError("socket", err))
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close() // net.FileListener has its own descriptor
	if err := syscall.Fchmod(fd, uint32(mode)); err != nil {
		return nil, fmt.Errorf("setting the socket's mode before bind: %w", os.NewSyscallError("fchmod", err))
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		return nil, fmt.Errorf("binding %s: %w", path, os.NewSyscallError("bind", err))
	}
	bound := true
	defer func() {
		// Only a socket is removed: what replaced it is someone else's.
		if info, err := os.Lstat(path); bound && err == nil && info.Mode().Type() == fs.ModeSocket {
			_ = os.Remove(path)
		}
	}()
	if err := syscall.Listen(fd, syscall.SOMAXCONN); err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, os.NewSyscallError("listen", err))
	}
	if err := restoreUmaskBits(path, mode); err != nil {
		return nil, err
	}
	lis, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	ul, ok := lis.(*net.UnixListener)
	if !ok {
		_ = lis.Close()
		return nil, fmt.Errorf("listening on %s: not a Unix listener (%T)", path, lis)
	}
	bound = false
	return ul, nil
}

// restoreUmaskBits gives the socket at path the bits of mode that the umask took away at bind.
func restoreUmaskBits(path string, mode fs.FileMode) error {
	info, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("checking the socket: %w", err)
	}
	if info.Mode().Perm() == mode {
		return nil
	}
	if info.Mode().Type() != fs.ModeSocket || info.Mode().Perm()&^mode != 0 {
		return fmt.Errorf("%s was replaced while the socket was created (%v); refusing to serve", path, info.Mode())
	}
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the socket to set its mode: %w", os.NewSyscallError("open", err))
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("checking the socket: %w", os.NewSyscallError("fstat", err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return errors.New(path + " was replaced while the socket was created; refusing to serve")
	}
	// /proc/self/fd/N names the inode opened above, never a path looked up again.
	if err := unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), uint32(mode)); err != nil {
		return fmt.Errorf("setting the socket's mode: %w", os.NewSyscallError("chmod", err))
	}
	return nil
}
