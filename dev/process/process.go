// Package process supervises the child processes of the local harnesses (dev/localenv,
// dev/store/versity, dev/bench): it starts a binary with its output appended to a log file,
// waits until it is ready, and stops it with SIGTERM, then SIGKILL. It also picks free ports.
package process

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is a binary run as a child process; Start may be called again after Stop (a restart
// with the same flags).
type Process struct {
	// Name names the process in errors.
	Name string
	// Binary and Args are what is run; Env, when set, is its whole environment.
	Binary string
	Args   []string
	Env    []string
	// Log is the file that receives standard output and error, appended to across restarts.
	Log string
	// Ready reports whether the process is ready (see HTTPReady, FileExists); nil means as soon
	// as it started.
	Ready func(ctx context.Context) bool
	// ReadyTimeout bounds the wait for Ready (default 60 seconds).
	ReadyTimeout time.Duration
	// StopTimeout is how long Stop waits after SIGTERM before it kills the process (default 30
	// seconds).
	StopTimeout time.Duration
	// DumpOnHang sends SIGQUIT (a Go program writes its goroutines to its log) to a process that
	// did not stop within StopTimeout, and waits 5 more seconds before killing it.
	DumpOnHang bool
	// OwnGroup starts the process in a process group of its own, so that a Ctrl-C in the terminal
	// reaches only the parent, which then stops it in order.
	OwnGroup bool
	// BeforeStart, when set, runs before every start (e.g. to remove a stale socket).
	BeforeStart func() error

	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts p and waits until it is ready, exits, ctx ends or ReadyTimeout passes. The child
// is killed when the parent dies (Pdeathsig).
func (p *Process) Start(ctx context.Context) error {
	if p.BeforeStart != nil {
		if err := p.BeforeStart(); err != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
	}
	log, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	defer log.Close()
	p.cmd = exec.Command(p.Binary, p.Args...)
	p.cmd.Env = p.Env
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: p.OwnGroup}
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.done = done
	go func() { _ = p.cmd.Wait(); close(done) }()
	return p.waitReady(ctx)
}

func (p *Process) waitReady(ctx context.Context) error {
	if p.Ready == nil {
		return nil
	}
	timeout := orDefault(p.ReadyTimeout, 60*time.Second)
	deadline := time.After(timeout)
	readyOnce := false
	for {
		if p.Ready(ctx) {
			// Ready twice, 50 ms apart, with the process alive after: a probe can be answered by
			// another server on a port the process then fails to bind (and exits).
			if readyOnce {
				select {
				case <-p.done:
					return fmt.Errorf("%s exited; see %s", p.Name, p.Log)
				default:
					return nil
				}
			}
			readyOnce = true
		} else {
			readyOnce = false
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited; see %s", p.Name, p.Log)
		case <-deadline:
			return fmt.Errorf("%s not ready after %v; see %s", p.Name, timeout, p.Log)
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", p.Name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops p with SIGTERM, letting work in flight finish, and kills it after StopTimeout. It
// does nothing when p never started or already exited.
func (p *Process) Stop() error {
	if p == nil || p.done == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	timeout := orDefault(p.StopTimeout, 30*time.Second)
	select {
	case <-p.done:
		return nil
	case <-time.After(timeout):
	}
	if p.DumpOnHang {
		_ = p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
			return fmt.Errorf("%s did not stop within %v of SIGTERM; see %s", p.Name, timeout, p.Log)
		case <-time.After(5 * time.Second):
		}
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s did not stop within %v of SIGTERM; see %s", p.Name, timeout, p.Log)
}

// Kill kills p with SIGKILL, as a crash would (no chance to finish work in flight), and waits
// until it is gone. It does nothing when p never started or already exited; Start starts it again.
func (p *Process) Kill() {
	if p == nil || p.done == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Exited reports whether p started and has exited since (killed, or on its own).
func (p *Process) Exited() bool {
	if p == nil || p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Restart stops p and starts it again with the same flags.
func (p *Process) Restart(ctx context.Context) error {
	if err := p.Stop(); err != nil {
		return err
	}
	return p.Start(ctx)
}

// Pid is the process ID of the running process (0 before Start).
func (p *Process) Pid() int {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// HTTPReady is a Ready probe: url answers 200.
func HTTPReady(url string) func(context.Context) bool {
	return func(ctx context.Context) bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
}

// FileExists is a Ready probe: path exists (a Unix socket the process listens on).
func FileExists(path string) func(context.Context) bool {
	return func(context.Context) bool {
		_, err := os.Stat(path)
		return err == nil
	}
}

// FreeAddress returns a 127.0.0.1:port that was free a moment ago, for a child process to
// listen on.
func FreeAddress() (string, error) {
	handedOut.mu.Lock()
	defer handedOut.mu.Unlock()
	if handedOut.addrs == nil {
		handedOut.addrs = map[string]bool{}
	}
	// A port is handed out once per process: the kernel may offer a port again once its listener
	// closed, before the process it was meant for bound it (two servers of one test on one port).
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("finding a free port: %w", err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		if !handedOut.addrs[addr] {
			handedOut.addrs[addr] = true
			return addr, nil
		}
	}
	return "", errors.New("finding a free port: every port offered was handed out before")
}

// handedOut are the addresses FreeAddress returned.
var handedOut struct {
	mu    sync.Mutex
	addrs map[string]bool
}

// FreeAddresses sets each of addrs to a FreeAddress.
func FreeAddresses(addrs ...*string) error {
	for _, a := range addrs {
		var err error
		if *a, err = FreeAddress(); err != nil {
			return err
		}
	}
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
