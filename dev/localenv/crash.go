package localenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube-cosi/cosi/dev/process"
)

// The control plane processes Crash kills.
const (
	Etcd          = "etcd"
	KubeAPIServer = "kube-apiserver"
)

// Crash kills etcd or kube-apiserver (name) with SIGKILL, waits down, and starts it again with the
// same flags and data, as a node losing its control plane for a moment would; it returns once the
// API server answers again. envtest, which started them, cannot restart them without new
// certificates and ports, so the first crash of each takes its command line from /proc and runs it
// as a process of its own from then on (logging to LogDir); Stop stops both kinds.
func (a *APIServer) Crash(ctx context.Context, name string, down time.Duration) error {
	if name != Etcd && name != KubeAPIServer {
		return fmt.Errorf("crash: %q is neither %s nor %s", name, Etcd, KubeAPIServer)
	}
	p := a.restarted[name]
	if p == nil {
		var err error
		if p, err = a.takeOver(name); err != nil {
			return err
		}
	}
	p.Kill()
	select {
	case <-time.After(down):
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := p.Start(ctx); err != nil {
		return err
	}
	return a.waitAnswers(ctx)
}

// RestartControllerManager starts kube-controller-manager again when it exited, as a node's
// kubelet would (it exits when the API server goes away while it starts), and reports whether it
// did.
func (a *APIServer) RestartControllerManager(ctx context.Context) (bool, error) {
	if a.kcm == nil || !a.kcm.Exited() {
		return false, nil
	}
	return true, a.kcm.Start(ctx)
}

// takeOver kills the envtest child called name and returns a process with its command line.
func (a *APIServer) takeOver(name string) (*process.Process, error) {
	pid, args, err := childCommand(name)
	if err != nil {
		return nil, err
	}
	log := os.DevNull
	if a.logDir != "" {
		log = filepath.Join(a.logDir, name+".log")
	}
	p := &process.Process{Name: name, Binary: args[0], Args: args[1:], Log: log, ReadyTimeout: 2 * time.Minute}
	if name == Etcd {
		for i, arg := range args {
			if v, ok := strings.CutPrefix(arg, "--listen-client-urls="); ok {
				p.Ready = process.HTTPReady(strings.Split(v, ",")[0] + "/health")
			} else if arg == "--listen-client-urls" && i+1 < len(args) {
				p.Ready = process.HTTPReady(strings.Split(args[i+1], ",")[0] + "/health")
			}
		}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return nil, fmt.Errorf("killing %s: %w", name, err)
	}
	// envtest waits for its child, which reaps it; the port is free once it is gone.
	for syscall.Kill(pid, 0) == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if a.restarted == nil {
		a.restarted = map[string]*process.Process{}
	}
	a.restarted[name] = p
	return p, nil
}

// waitAnswers waits until the API server lists namespaces.
func (a *APIServer) waitAnswers(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		probe, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := a.Client.List(probe, &corev1.NamespaceList{}, client.Limit(1))
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the API server does not answer after a crash: %w", errors.Join(err, ctx.Err()))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// childCommand finds this process's child called name and returns its PID and command line.
func childCommand(name string) (int, []string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, nil, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after its closing parenthesis.
		open, closing := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
		if open < 0 || closing < open {
			continue
		}
		fields := strings.Fields(string(stat[closing+1:]))
		if string(stat[open+1:closing]) != name || len(fields) < 2 || fields[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			return 0, nil, err
		}
		return pid, strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00"), nil
	}
	return 0, nil, fmt.Errorf("no child process %s of process %d", name, os.Getpid())
}
