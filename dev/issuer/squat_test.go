package issuer_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
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
// lock (@kube-cosi/issuer/127.0.0.1:443) with a process that never ends. The front must not wait
// for it: only the locks of this user's (or root's) processes are fronts' locks. On 8747ab0 the
// front waited as long as the squatter lived.
func TestLockSquattedByAnotherUser(t *testing.T) {
	if name := os.Getenv("ISSUER_TEST_SQUAT"); name != "" {
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		defer func() { _ = l.Close() }()
		fmt.Println("held")
		select {}
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
	holder := exec.Command(bin, "-test.run=^TestLockSquattedByAnotherUser$")
	holder.Dir = dir
	holder.Env = append(os.Environ(), "ISSUER_TEST_SQUAT=@kube-cosi/issuer/127.0.0.1:443")
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
		t.Errorf("a front with its lock's name squatted by another user: %v", err)
	}
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
