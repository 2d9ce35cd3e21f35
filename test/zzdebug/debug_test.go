package zzdebug

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kube-cosi/cosi/internal/testenv"
)

func TestStop(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	kc := filepath.Join(t.TempDir(), "kc")
	if err := env.WriteKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(env.RepoRoot, "bin", "cosi-controller"), "--kubeconfig", kc, "--leader-elect=false", "--metrics-bind-address", "127.0.0.1:18080", "--health-probe-bind-address", "127.0.0.1:18081")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.Start()
	time.Sleep(3 * time.Second)
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Logf("exited after %v: %v", time.Since(start), err)
	case <-time.After(40 * time.Second):
		cmd.Process.Signal(syscall.SIGQUIT)
		time.Sleep(time.Second)
		t.Fatal("not stopped")
	}
}
