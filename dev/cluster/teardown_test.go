package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests run the tear-down (Cleanup, what Start runs after a killed node) on this machine's
// real processes, links, network namespaces and cgroups: as root, with decoys that are not the
// node's and must survive it, and things that are the node's and must go. They skip where that
// cannot be done safely (not root, no ip(8), no writable cgroups, or a real node is running).

// realHost skips t unless the tear-down can run here, and points the state file at t's own.
func realHost(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("not root: the tear-down changes links, network namespaces and cgroups")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip(8)")
	}
	if _, err := os.Stat(stateFile); err == nil {
		t.Skipf("a node runs on this machine (%s): its tear-down is not to be disturbed", stateFile)
	}
	if cgroupHierarchy(t) == "" {
		t.Skip("no writable cgroup hierarchy")
	}
	old := stateFile
	stateFile = filepath.Join(t.TempDir(), "cosi-node", "state.json")
	t.Cleanup(func() { stateFile = old })
}

// cgroupHierarchy is a cgroup hierarchy to make decoys in: cgroup v1's cpu, or v2's root.
func cgroupHierarchy(t *testing.T) string {
	for _, h := range []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/pids", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err != nil {
			continue
		}
		probe := filepath.Join(h, "cosi-probe-"+randomHex(t, 4))
		if err := os.Mkdir(probe, 0o755); err != nil {
			continue
		}
		_ = syscall.Rmdir(probe)
		return h
	}
	return ""
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := io.ReadFull(rand.Reader, b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// ip runs an ip(8) command that must succeed.
func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// sleeper starts a process that sleeps in dir, dying with the test, and returns its PID: a shell
// with args in its command line, or, when binary is set, a copy of sleep named binary (its comm).
func sleeper(t *testing.T, binary, dir string, args ...string) int {
	t.Helper()
	path, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep(1)")
	}
	cmd := exec.Command("sh", append([]string{"-c", "sleep 600; exit 0", "sh"}, args...)...)
	if binary != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		path = filepath.Join(t.TempDir(), binary)
		if err := os.WriteFile(path, b, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command(path, "600")
	}
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// startTime is field 22 of /proc/<pid>/stat.
func startTime(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+1:])
	v, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// writeState writes the state Start writes: the host as recordHost sees it, and fields.
func writeState(t *testing.T, fields map[string]any) {
	t.Helper()
	h, err := recordHost()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range fields {
		m[k] = v
	}
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(stateFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stateFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// makeCgroupWith makes the cgroup dir (and its parents) and moves pid into it; the test removes
// what it made.
func makeCgroupWith(t *testing.T, dir string, pid int) {
	t.Helper()
	var made []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		made = append(made, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range made { // deepest first
			removeTestCgroup(t, d)
		}
	})
	if pid != 0 {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// removeTestCgroup kills what runs in the cgroup dir and removes it once they are gone.
func removeTestCgroup(t *testing.T, dir string) {
	for try := 0; try < 200; try++ {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if err := syscall.Rmdir(dir); err == nil || errors.Is(err, syscall.ENOENT) {
			return
		}
		time.Sleep(10 * time.Millisecond) // the killed processes leave the cgroup
	}
	t.Errorf("could not remove the test's cgroup %s", dir)
}

// After a node was killed, its clean-up kills the node's recorded processes and shims and removes
// the links and cgroups tagged as its own; a process whose command line or working directory
// names the node's directory, a veth, a network namespace and a kubepods cgroup made meanwhile
// by someone else (Docker, another runtime, an admin) all survive it.
func TestCleanupTouchesOnlyWhatTheNodeMade(t *testing.T) {
	realHost(t)
	tag := "cosi-node-" + randomHex(t, 6)
	id := randomHex(t, 3)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ".cosi-node"), []byte(tag+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The node's: a component it started, a shim that containerd started (working in its bundle,
	// with no pid file: containerd 1.6 writes none), the Pod bridge tagged with the node's alias and a veth on it,
	// and a Pod's cgroup below the node's tagged cgroup.
	etcd := sleeper(t, "", dir, "--data-dir", filepath.Join(dir, "etcd"))
	bundle := filepath.Join(dir, "containerd", "state", "io.containerd.runtime.v2.task", "k8s.io", "abc")
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		t.Fatal(err)
	}
	shim := sleeper(t, "containerd-shim-runc-v2", bundle)
	bridge, podVeth, podPeer := "cosibr"+id, "vethcosip"+id, "vethcosiq"+id
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "delete", podVeth).Run()
		_ = exec.Command("ip", "link", "delete", bridge).Run()
	})
	ip(t, "link", "add", "name", bridge, "type", "bridge")
	ip(t, "link", "set", "dev", bridge, "alias", tag)
	ip(t, "link", "add", podVeth, "type", "veth", "peer", "name", podPeer)
	ip(t, "link", "set", "dev", podVeth, "master", bridge)
	h := cgroupHierarchy(t)
	container := sleeper(t, "", "/")
	makeCgroupWith(t, filepath.Join(h, tag, "kubepods", "besteffort", "pod-1"), container)

	writeState(t, map[string]any{
		"dir": dir, "pid": 0, "tag": tag,
		"procs": []map[string]any{{"name": "etcd", "pid": etcd, "start": startTime(t, etcd)}},
	})

	// Not the node's, made while it ran: a process naming the node's directory (tail -f of a log)
	// and working in it, a process that is no shim working in a bundle (a shell), another
	// runtime's veth pair, network namespace and kubepods cgroup with a process in it.
	if err := os.MkdirAll(filepath.Join(dir, "log"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "log", "kubelet.log"), []byte("the node's log\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tail := sleeper(t, "", dir, filepath.Join(dir, "log", "kubelet.log"))
	reused := sleeper(t, "", bundle)
	veth, peer, netns := "vethcosid"+id, "vethcosie"+id, "cosi-decoy-"+id
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "delete", veth).Run()
		_ = exec.Command("ip", "netns", "delete", netns).Run()
	})
	ip(t, "link", "add", veth, "type", "veth", "peer", "name", peer)
	ip(t, "netns", "add", netns)
	docker := sleeper(t, "", "/")
	foreign := filepath.Join(h, "kubepods", "cosi-decoy-"+id)
	makeCgroupWith(t, foreign, docker)

	if err := Cleanup(); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}

	for name, pid := range map[string]int{
		"tail -f of a log": tail, "a process working in a bundle": reused, "another cgroup's": docker,
	} {
		if !processAlive(pid) {
			t.Errorf("%s process %d (not the node's) was killed", name, pid)
		}
	}
	for name, pid := range map[string]int{"recorded component": etcd, "shim": shim, "container": container} {
		if processAlive(pid) {
			t.Errorf("the node's %s %d survived", name, pid)
		}
	}
	for _, l := range []string{veth, peer} {
		if !linkExists(l) {
			t.Errorf("link %s (not the node's) was deleted", l)
		}
	}
	for _, l := range []string{bridge, podVeth} {
		if linkExists(l) {
			t.Errorf("the node's link %s is left", l)
		}
	}
	if _, err := os.Stat(filepath.Join("/run/netns", netns)); err != nil {
		t.Errorf("network namespace %s (not the node's) was removed: %v", netns, err)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("cgroup %s (not the node's) was removed: %v", foreign, err)
	}
	if _, err := os.Stat(filepath.Join(h, tag)); err == nil {
		t.Errorf("the node's cgroup %s is left", filepath.Join(h, tag))
	}
	// Its directory goes but its logs, as after Stop: to read why the node was killed.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if !slices.Equal(left, []string{".cosi-node", "log"}) {
		t.Errorf("the node's directory holds %v after the clean-up, want its marker and its logs", left)
	}
	if _, err := os.Stat(filepath.Join(dir, "log", "kubelet.log")); err != nil {
		t.Errorf("the node's log is gone: %v", err)
	}
}

// A state whose directory holds no marker of the node (a --dir that was not the node's, or a
// state file written by someone else) never gets that directory removed.
func TestCleanupKeepsADirectoryItDidNotMake(t *testing.T) {
	realHost(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "thesis.tex")
	if err := os.WriteFile(data, []byte("years of work"), 0o600); err != nil {
		t.Fatal(err)
	}
	writeState(t, map[string]any{"dir": dir, "pid": 0, "tag": "cosi-node-" + randomHex(t, 6)})
	if err := Cleanup(); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	if _, err := os.Stat(data); err != nil {
		t.Errorf("the clean-up removed a directory the node did not make: %v", err)
	}
}
