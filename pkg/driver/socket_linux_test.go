package driver

import (
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"
)

// raceListen runs listen n times while watch runs in a loop beside it, and stops watch after
// each round.
func raceListen(t *testing.T, n int, path string, watch func()) {
	t.Helper()
	for range n {
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				watch()
			}
		}()
		lis, err := listen(path, DefaultSocketMode)
		stop.Store(true)
		wg.Wait()
		if err == nil {
			lis.Close()
		}
		_ = os.Remove(path)
	}
}

// TestListenHasNoWindow checks, under a umask that lets everyone in, that no one watching the
// socket's directory ever sees the socket with another mode than the one asked for, and that
// replacing the socket with a symlink the moment it appears never gets the symlink's target
// chmod-ed. Both would happen with bind-then-chmod; the test races listen many times, so on
// such code it fails most runs, and on code without the window it cannot fail.
func TestListenHasNoWindow(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	const rounds = 300

	t.Run("the socket never has a wider mode", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "driver.sock")
		var wide atomic.Int32
		raceListen(t, rounds, path, func() {
			if info, err := os.Lstat(
				path,
			); err == nil && info.Mode().Type() == fs.ModeSocket &&
				info.Mode().Perm() != DefaultSocketMode {
				wide.Add(1)
			}
		})
		if n := wide.Load(); n > 0 {
			t.Errorf("the socket was seen %d times with a wider mode than %v", n, DefaultSocketMode)
		}
	})

	t.Run("a swapped symlink's target is never chmod-ed", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "driver.sock")
		victim := filepath.Join(dir, "victim")
		if err := os.WriteFile(victim, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		raceListen(t, rounds, path, func() {
			if info, err := os.Lstat(path); err == nil && info.Mode().Type() == fs.ModeSocket {
				_ = os.Remove(path)
				_ = os.Symlink(victim, path)
			}
		})
		if info, err := os.Stat(victim); err != nil || info.Mode().Perm() != 0o644 {
			t.Errorf("the symlink's target: %v %v, want it untouched (0644)", info.Mode(), err)
		}
	})
}

// TestListenLeavesNothingBehind checks that listen leaves only the socket, that closing
// removes the socket, and that closing leaves alone a socket another server put in its place.
func TestListenLeavesNothingBehind(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "driver.sock")
	lis, err := listen(path, DefaultSocketMode)
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "driver.sock" {
		t.Errorf("the directory holds %v, want only driver.sock", entries)
	}
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	conn.Close()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("the socket after Close: %v, want it removed", err)
	}

	first, err := listen(path, DefaultSocketMode)
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(path) // someone removed it, and a new server took the path
	second, err := listen(path, DefaultSocketMode)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	first.Close()
	if conn, err := net.Dial("unix", path); err != nil {
		t.Errorf("the second server's socket after the first closed: %v", err)
	} else {
		conn.Close()
	}
}

// TestListenCreatesNothingBesideTheSocket watches the socket's directory with inotify while
// listen runs and checks that the socket is the only thing ever created there, even for a moment:
// the COSI spec ("Filesystem") forbids a driver to create files or directories next to its
// socket, and a temporary one outlives a driver killed at the wrong moment.
func TestListenCreatesNothingBesideTheSocket(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "driver.sock")
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if _, err := syscall.InotifyAddWatch(fd, dir, syscall.IN_CREATE|syscall.IN_MOVED_TO); err != nil {
		t.Fatal(err)
	}
	lis, err := listen(path, DefaultSocketMode)
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()

	buf := make([]byte, 64*1024)
	n, err := syscall.Read(fd, buf)
	if err != nil {
		t.Fatalf("reading inotify events: %v", err)
	}
	var created []string
	for off := 0; off+syscall.SizeofInotifyEvent <= n; {
		ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
		name := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
		created = append(created, strings.TrimRight(string(name), "\x00"))
		off += syscall.SizeofInotifyEvent + int(ev.Len)
	}
	if !slices.Equal(created, []string{"driver.sock"}) {
		t.Errorf("listen created %q in the socket's directory, want only the socket", created)
	}
}

// TestListenModeIsExactUnderAnyUmask checks that the socket gets exactly the mode asked for when
// the umask would take bits of it away (0o660 for a sidecar sharing the driver's group).
func TestListenModeIsExactUnderAnyUmask(t *testing.T) {
	for _, umask := range []int{0, 0o022, 0o077, 0o777} {
		for _, mode := range []fs.FileMode{0o600, 0o660, 0o666} {
			old := syscall.Umask(umask)
			path := filepath.Join(t.TempDir(), "driver.sock")
			lis, err := listen(path, mode)
			syscall.Umask(old)
			if err != nil {
				t.Fatalf("umask %#o, mode %v: %v", umask, mode, err)
			}
			if info, err := os.Lstat(path); err != nil || info.Mode().Perm() != mode {
				t.Errorf("umask %#o: socket mode %v (%v), want %v", umask, info.Mode().Perm(), err, mode)
			}
			lis.Close()
		}
	}
}
