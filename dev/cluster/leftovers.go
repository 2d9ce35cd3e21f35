package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stateFile holds the hostState of the running node (see hostState); a var for the tests.
var stateFile = "/run/cosi-node/state.json"

// CleanupCommand is what a user runs to restore the host after a node that was not stopped.
const CleanupCommand = "cosi-cluster --cleanup (make cluster-cleanup)"

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
// wrote is still there): it kills the node's processes (nodeProcesses: the components it
// recorded, containerd's shims, the containers in its cgroup) and undoes what the node changed,
// as Stop does, keeping the node's logs. Without such a state it does nothing. Start does the same first; cosi-cluster
// --cleanup runs it alone.
func Cleanup() error {
	h, err := loadState(stateFile)
	if err != nil || h == nil {
		return err
	}
	if h.PID != os.Getpid() && sameProcess(h.PID, h.PIDStart) {
		return fmt.Errorf("the node in %s is still run by process %d: stop that first", h.Dir, h.PID)
	}
	errs := []error{killNodeProcesses(h), h.restore(h.Dir)}
	if !h.Keep && ownsDir(h.Dir, h.Tag) {
		// As Stop: the logs stay until the next start, to read why the node was killed.
		errs = append(errs, removeAllBut(h.Dir, dirMarker, logDir))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return removeState(stateFile)
}

// dirMarker is the file that makes a directory the node's: claimDir writes the node's tag in it
// when it takes the directory, and only a directory with the tag of the node being torn down is
// removed (ownsDir).
const dirMarker = ".cosi-node"

// logDir is the directory of the node's logs in its directory: kept when the node stops.
const logDir = "log"

// claimDir makes dir the node's directory, tagged tag: a new or empty directory, or one an
// earlier node left (--keep), whose content is removed. Any other non-empty directory is
// refused: Stop removes the node's directory, and a --dir mistyped as a home or a source tree
// must not go with it.
func claimDir(dir, tag string) error {
	if len(dir) <= 1 {
		return fmt.Errorf("%q cannot be the node's directory", dir)
	}
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("the node's directory %s is not a directory (a symbolic link is not taken)", dir)
	default:
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		if len(entries) > 0 {
			if _, err := os.Stat(filepath.Join(dir, dirMarker)); err != nil {
				return fmt.Errorf("%s is not empty and no node made it (it has no %s): the node removes its "+
					"directory when it stops, so it takes only a new or empty one, or one a node left", dir, dirMarker)
			}
			if err := removeAll(dir); err != nil {
				return err
			}
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, dirMarker), []byte(tag+"\n"), 0o600)
}

// ownsDir tells whether dir is the directory of the node tagged tag (claimDir's marker).
func ownsDir(dir, tag string) bool {
	b, err := os.ReadFile(filepath.Join(dir, dirMarker))
	return err == nil && len(dir) > 1 && validTag(tag) && strings.TrimSpace(string(b)) == tag
}

// processAlive tells whether pid runs (a zombie does not count).
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && procState(string(b)) != "Z"
}

// sameProcess tells whether pid runs and is the process that started at start (any process
// with that PID when start is 0: a state file of an older version).
func sameProcess(pid int, start uint64) bool {
	if !processAlive(pid) {
		return false
	}
	return start == 0 || procStart(pid) == start
}

// procState is the state field of /proc/<pid>/stat, after the command in parentheses.
func procState(stat string) string {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 || i+3 > len(stat) {
		return ""
	}
	return stat[i+2 : i+3]
}

// procStart is the start time of pid (field 22 of /proc/<pid>/stat, in clock ticks since boot);
// 0 when it does not run.
func procStart(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	return parseStart(string(b))
}

func parseStart(stat string) uint64 {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(stat[i+1:]) // fields[0] is field 3, the state
	if len(fields) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(fields[19], 10, 64)
	return v
}

type procInfo struct {
	pid     int
	start   uint64 // procStart
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
			pid: pid, start: procStart(pid), comm: strings.TrimSpace(string(comm)),
			cmdline: strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " "), cwd: cwd,
		})
	}
	return out
}

// nodeProcesses picks the node's processes among procs: the components it recorded (h.Procs),
// each still the same process (same start time: a PID reused since is someone else's), and the
// containerd shims working in a task bundle below the node's directory (taskDir), even one
// removed since: containerd starts each shim in its bundle, and the node's containerd keeps its
// bundles there. Nothing else: a process that merely names the node's directory (a tail -f of its
// logs, an editor, a shell in it) is not the node's. (containerd 1.6 writes no shim.pid in its
// bundles, so the working directory is what tells a shim's node.) The containers are in the
// node's cgroup: removeCgroup kills them.
func nodeProcesses(h *hostState, procs []procInfo, self int) []int {
	tasks := taskDir(h.Dir)
	var pids []int
	for _, p := range procs {
		if p.pid <= 1 || p.pid == self {
			continue
		}
		recorded := slices.ContainsFunc(h.Procs, func(r procRecord) bool {
			return r.PID == p.pid && r.Start != 0 && p.start == r.Start
		})
		shim := tasks != "" && strings.HasPrefix(p.comm, "containerd-shim") &&
			strings.HasPrefix(strings.TrimSuffix(p.cwd, " (deleted)"), tasks+string(filepath.Separator))
		if recorded || shim {
			pids = append(pids, p.pid)
		}
	}
	sort.Ints(pids)
	return pids
}

// taskDir is where the node's containerd keeps its task bundles, a directory per namespace and
// container below it ("" for no directory).
func taskDir(dir string) string {
	if len(dir) <= 1 {
		return ""
	}
	return filepath.Join(dir, "containerd", "state", "io.containerd.runtime.v2.task")
}

// killNodeProcesses kills the node's processes (nodeProcesses) and waits until they are gone.
func killNodeProcesses(h *hostState) error {
	dir := h.Dir
	pids := nodeProcesses(h, processes(), os.Getpid())
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
		if p.comm == "containerd" || p.comm == "kubelet" || p.comm == "kube-proxy" || p.comm == "dockerd" {
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
	return fmt.Errorf("another container runtime, kubelet or kube-proxy runs on this machine: %s; the node would share "+
		"its paths, cgroups and iptables chains and remove them when it stops: stop it first",
		strings.Join(found, ", "))
}
