package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stateFile holds the hostState of the running node (see hostState); a var for the tests.
var stateFile = "/run/cosi-node/state.json"

// CleanupCommand is what a user runs to restore the host after a node that was not stopped.
const CleanupCommand = "cosi-cluster --cleanup (make cluster CLUSTER_FLAGS=--cleanup)"

func saveState(path string, h *hostState) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// loadState reads the state a node left; nil when there is none.
func loadState(path string) (*hostState, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var h hostState
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &h, nil
}

// removeState removes the state file and its directory (when empty), which Start made.
func removeState(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	_ = os.Remove(filepath.Dir(path))
	return nil
}

// Cleanup restores the host after a node whose process was killed before Stop (the state Start
// wrote is still there): it kills the node's processes, including containerd's shims and the
// containers, and undoes what the node changed, as Stop does. Without such a state it does
// nothing. Start does the same first; cosi-cluster --cleanup runs it alone.
func Cleanup() error {
	h, err := loadState(stateFile)
	if err != nil || h == nil {
		return err
	}
	if h.PID != os.Getpid() && processAlive(h.PID) {
		return fmt.Errorf("the node in %s is still run by process %d: stop that first", h.Dir, h.PID)
	}
	errs := []error{killNodeProcesses(h.Dir), h.restore(h.Dir)}
	if !h.Keep && len(h.Dir) > 1 {
		errs = append(errs, removeAll(h.Dir))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return removeState(stateFile)
}

// processAlive tells whether pid runs (a zombie does not count).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && procState(string(b)) != "Z"
}

// procState is the state field of /proc/<pid>/stat, after the command in parentheses.
func procState(stat string) string {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 || i+3 > len(stat) {
		return ""
	}
	return stat[i+2 : i+3]
}

type procInfo struct {
	pid     int
	comm    string // /proc/<pid>/comm
	cmdline string // arguments joined by spaces
	cwd     string // a shim's working directory is its bundle
}

func processes() []procInfo {
	entries, _ := os.ReadDir("/proc")
	var out []procInfo
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !processAlive(pid) {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		cwd, _ := os.Readlink(filepath.Join(dir, "cwd"))
		out = append(out, procInfo{
			pid: pid, comm: strings.TrimSpace(string(comm)),
			cmdline: strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " "), cwd: cwd,
		})
	}
	return out
}

// nodeProcesses picks the processes of the node in dir: every component names a path in dir in
// its arguments (etcd's data, the certificates, containerd's and the kubelet's configuration, a
// shim's -address), and a containerd-shim-runc-v2 works in its bundle under dir.
func nodeProcesses(procs []procInfo, dir string, self int) []int {
	if len(dir) <= 1 {
		return nil
	}
	prefix := strings.TrimSuffix(dir, "/") + "/"
	var pids []int
	for _, p := range procs {
		if p.pid == self || p.pid <= 1 {
			continue
		}
		if strings.Contains(p.cmdline, prefix) || strings.HasPrefix(p.cwd+"/", prefix) {
			pids = append(pids, p.pid)
		}
	}
	return pids
}

// killNodeProcesses kills the processes of the node in dir and waits until they are gone.
func killNodeProcesses(dir string) error {
	pids := nodeProcesses(processes(), dir, os.Getpid())
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		var alive []int
		for _, pid := range pids {
			if processAlive(pid) {
				alive = append(alive, pid)
			}
		}
		if len(alive) == 0 {
			return nil
		}
		pids = alive
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("processes of the node in %s survived SIGKILL: %v", dir, pids)
}

// runtimeSockets are the sockets of a containerd or kubelet serving at the usual places.
var runtimeSockets = []string{
	"/run/containerd/containerd.sock", "/var/lib/kubelet/device-plugins/kubelet.sock",
	"/var/lib/kubelet/pod-resources/kubelet.sock",
}

// checkNoRuntime refuses a host where another containerd or kubelet runs: the node would share
// /run/containerd, /var/lib/kubelet, the kubepods cgroups and the iptables chains with it, and
// its tear-down would remove what they own.
func checkNoRuntime() error {
	return foreignRuntime(processes(), func(path string) bool {
		c, err := net.DialTimeout("unix", path, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
}

func foreignRuntime(procs []procInfo, serving func(socket string) bool) error {
	var found []string
	for _, p := range procs {
		if p.comm == "containerd" || p.comm == "kubelet" || p.comm == "dockerd" {
			found = append(found, fmt.Sprintf("%s (pid %d)", p.comm, p.pid))
		}
	}
	for _, s := range runtimeSockets {
		if serving(s) {
			found = append(found, s+" serving")
		}
	}
	if len(found) == 0 {
		return nil
	}
	return fmt.Errorf("another container runtime or kubelet runs on this machine: %s; the node would share "+
		"its paths, cgroups and iptables chains and remove them when it stops: stop it first",
		strings.Join(found, ", "))
}
