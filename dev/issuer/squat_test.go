package issuer_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kube-cosi/cosi/dev/issuer"
)

// squatter is the user another local user's processes run as in TestLockSquattedByAnotherUser.
const squatter = 65534 // nobody

// TestLockSquattedByAnotherUser: another local user binds the abstract name of a public front's
// lock (@kube-cosi/issuer/127.0.0.1:443) with a process that never ends: listening, bound without
// listening, or listening with a full backlog. The front must not wait for it: only the locks of
// this user's (or root's) processes are fronts' locks. On 8747ab0 the front waited as long as the
// squatter lived; on e4f9ffc still for the two other ways (a reviewer's).
func TestLockSquattedByAnotherUser(t *testing.T) {
	if name := os.Getenv("ISSUER_TEST_SQUAT"); name != "" {
		squat(name, os.Getenv("ISSUER_TEST_SQUAT_MODE"))
	}
	if os.Getuid() != 0 {
		t.Skip("runs a process as another user: needs root")
	}
	t.Setenv(issuer.AddressEnv, "127.0.0.1")
	f := newFront(t)

	// The test binary, where the other user may run it.
	dir, err := os.MkdirTemp("", "issuer-squat")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	bin := filepath.Join(dir, "issuer.test")
	if err := copyFile(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"listen", "bind", "full"} {
		t.Run(mode, func(t *testing.T) {
			holder := exec.Command(bin, "-test.run=^TestLockSquattedByAnotherUser$")
			holder.Dir = dir
			holder.Env = append(os.Environ(), "ISSUER_TEST_SQUAT=@kube-cosi/issuer/127.0.0.1:443",
				"ISSUER_TEST_SQUAT_MODE="+mode)
			holder.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: squatter, Gid: squatter}}
			stdout, err := holder.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := holder.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
			if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "held\n" {
				t.Fatalf("the squatter: %q, %v", line, err)
			}
			short, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			if err := f.Serve(short, func(context.Context) error { return nil }); err != nil {
				t.Errorf("a front with its lock's name squatted by another user (%s): %v", mode, err)
			}
		})
	}
}

// squat binds the abstract socket name as mode says, says "held" and never returns: listening;
// bound without listening; or listening with a backlog of 0, filled by a connection of its own.
func squat(name, mode string) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err == nil {
		err = syscall.Bind(fd, &syscall.SockaddrUnix{Name: name})
	}
	backlog := 16
	if mode == "full" {
		backlog = 0
	}
	if err == nil && mode != "bind" {
		err = syscall.Listen(fd, backlog)
	}
	if err == nil && mode == "full" {
		for range 2 { // a backlog of 0 holds one
			c, cerr := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK, 0)
			if cerr == nil {
				_ = syscall.Connect(c, &syscall.SockaddrUnix{Name: name})
			}
		}
	}
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("held")
	select {}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
