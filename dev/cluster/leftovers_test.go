package cluster

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const mountinfo = `22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
30 22 0:25 / /run/containerd/io.containerd.runtime.v2.task/moby/abc/rootfs rw - overlay overlay rw
31 22 0:26 / /var/lib/kubelet/pods/p1/volumes/kubernetes.io~empty-dir/data rw - tmpfs tmpfs rw
40 22 0:27 / /run/containerd/io.containerd.runtime.v2.task/k8s.io/def/rootfs rw - overlay overlay rw
41 22 0:28 / /run/netns/cni-1234 rw - nsfs nsfs rw
42 22 0:29 / /tmp/cosi-node1/kubelet/pods/p2/volumes/a\040b rw - tmpfs tmpfs rw
43 22 0:30 / /var/lib/kubeletx rw - tmpfs tmpfs rw
44 22 0:31 / /tmp/cosi-node1/containerd/state/io.containerd.grpc.v1.cri/netns/cni-5678 rw - nsfs nsfs rw
`

// Tear-down unmounts only what was mounted while the node ran: a Docker container's rootfs under
// /run/containerd or a real kubelet's Pod volume that was there before stays, and so does a
// network namespace in /run/netns (the node's are below its directory).
func TestSelectMountsKeepsThoseThatWereThere(t *testing.T) {
	points := parseMountInfo(strings.NewReader(mountinfo))
	keep := map[string]bool{}
	for _, p := range points[:3] { // the mounts at the start
		keep[p] = true
	}
	roots := append([]string{"/tmp/cosi-node1"}, hostPaths...)
	got := selectMounts(points, roots, keep)
	want := []string{
		"/tmp/cosi-node1/containerd/state/io.containerd.grpc.v1.cri/netns/cni-5678",
		"/run/containerd/io.containerd.runtime.v2.task/k8s.io/def/rootfs",
		"/tmp/cosi-node1/kubelet/pods/p2/volumes/a b",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("selectMounts = %q, want %q", got, want)
	}
}

// Only the node's cgroup (its tag's, in every hierarchy) and what is below it are removed: a
// kubepods cgroup of a real kubelet, made before or while the node ran, another node's tagged
// cgroup, and a hierarchy's root (an empty or odd tag in a state file) stay.
func TestRemoveCgroupTakesOnlyTheNodesTag(t *testing.T) {
	root := t.TempDir()
	const tag, other = "cosi-node-0123456789ab", "cosi-node-ba9876543210"
	for _, h := range []string{"cpu", "memory", "cpuset"} {
		if err := os.MkdirAll(filepath.Join(root, h), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, h, "cgroup.procs"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "cpuset", "cpuset.cpus"), []byte("0-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "cpuset", "cpuset.mems"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := makeCgroup(root, tag); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "cpuset", tag, "cpuset.cpus")); err != nil || string(b) != "0-1\n" {
		t.Errorf("the node's cpuset has cpus %q (%v), want its parent's", b, err)
	}
	// A fake cgroupfs cannot remove the files a real one shows in every cgroup.
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		_ = os.Remove(filepath.Join(root, "cpuset", tag, f))
	}
	for _, d := range []string{
		"cpu/" + tag + "/kubepods/besteffort/pod-1", "memory/" + tag + "/kubepods/pod-2",
		"cpu/kubepods/burstable/pod-real", "memory/kubepods", "cpu/" + other + "/kubepods",
	} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []string{"", "cosi-node-", "cosi-node-../../x", "kubepods"} {
		if got := nodeCgroups(root, bad); got != nil {
			t.Errorf("nodeCgroups(%q) = %q", bad, got)
		}
		if err := removeCgroup(root, bad); err != nil {
			t.Fatal(err)
		}
	}
	if err := removeCgroup(root, tag); err != nil {
		t.Fatal(err)
	}
	var left []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != root {
			rel, _ := filepath.Rel(root, p)
			left = append(left, rel)
		}
		return nil
	})
	want := []string{
		"cpu", "cpu/" + other, "cpu/" + other + "/kubepods", "cpu/kubepods", "cpu/kubepods/burstable",
		"cpu/kubepods/burstable/pod-real", "cpuset", "memory", "memory/kubepods",
	}
	if !reflect.DeepEqual(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
}

// The state Start writes comes back whole at the next Start, and Stop's removal leaves nothing.
func TestStateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cosi-node", "state.json")
	if h, err := loadState(path); h != nil || err != nil {
		t.Fatalf("no state file: %v, %v", h, err)
	}
	h := &hostState{
		Dir: "/tmp/cosi-node1", PID: 42, PIDStart: 7, Tag: "cosi-node-0123456789ab",
		Procs:   []procRecord{{Name: "etcd", PID: 43, Start: 8}},
		Sysctls: map[string]string{"net.ipv4.ip_forward": "0"},
		Existed: map[string]bool{"/opt/cni": true}, Netns: map[string]bool{},
		IPTables: map[string][]string{"iptables filter": {"-P INPUT ACCEPT", `-A X --comment "a b" -j Y`}},
		Links:    map[string]bool{"lo": true}, Mounts: map[string]bool{"/": true},
	}
	if err := saveState(path, h); err != nil {
		t.Fatal(err)
	}
	got, err := loadState(path)
	if err != nil || !reflect.DeepEqual(got, h) {
		t.Fatalf("loadState = %+v, %v; want %+v", got, err, h)
	}
	if err := removeState(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
		t.Errorf("the state's directory is left: %v", err)
	}
}

// After a killed run, the node's processes are the components it recorded, if they are still
// the same processes, and the shims working in a task bundle below its directory (removed or
// not); a process that names the node's directory or works in it is not one of them, nor is
// another node's shim.
func TestNodeProcesses(t *testing.T) {
	const dir = "/tmp/cosi-node1"
	bundle := dir + "/containerd/state/io.containerd.runtime.v2.task/k8s.io/abc"
	procs := []procInfo{
		{pid: 1, start: 1, comm: "init", cmdline: "/sbin/init"},
		{pid: 10, start: 500, comm: "etcd", cmdline: "bin/etcd --data-dir /tmp/cosi-node1/etcd"},
		{pid: 11, start: 900, comm: "containerd", cmdline: "containerd --config /tmp/cosi-node1/containerd/config.toml"},
		{pid: 12, start: 950, comm: "containerd-shim", cmdline: "containerd-shim-runc-v2 -id abc", cwd: bundle},
		{pid: 13, start: 960, comm: "containerd-shim", cmdline: "containerd-shim-runc-v2 -id x", cwd: "/run/containerd/x"},
		{pid: 14, start: 970, comm: "tail", cmdline: "tail -f /tmp/cosi-node1/log/kubelet.log", cwd: dir},
		{pid: 15, start: 980, comm: "go", cmdline: "go test"},
		{pid: 16, start: 990, comm: "bash", cwd: bundle},
		{pid: 17, start: 999, comm: "containerd-shim", cwd: bundle + " (deleted)"},
		{pid: 19, start: 999, comm: "containerd-shim",
			cwd: "/tmp/cosi-node10/containerd/state/io.containerd.runtime.v2.task/k8s.io/abc"},
		{pid: 20, start: 999, comm: "containerd-shim", cwd: dir + "/containerd/state/io.containerd.runtime.v2.task"},
	}
	h := &hostState{Dir: dir, Procs: []procRecord{
		{Name: "etcd", PID: 10, Start: 500},       // still running
		{Name: "containerd", PID: 11, Start: 400}, // exited; PID 11 is another process now
		{Name: "kubelet", PID: 18, Start: 600},    // exited
		{Name: "old", PID: 15},                    // no start time: never taken
	}}
	if got := nodeProcesses(h, procs, 15); !reflect.DeepEqual(got, []int{10, 12, 17}) {
		t.Errorf("nodeProcesses = %v, want [10 12 17]", got)
	}
	if got := nodeProcesses(&hostState{}, procs, 15); got != nil {
		t.Errorf("nodeProcesses with no directory and nothing recorded = %v", got)
	}
}

func TestForeignRuntime(t *testing.T) {
	none := func(string) bool { return false }
	if err := foreignRuntime([]procInfo{{pid: 5, comm: "containerd-shim"}, {pid: 6, comm: "bash"}}, none); err != nil {
		t.Error(err)
	}
	if err := foreignRuntime([]procInfo{{pid: 7, comm: "containerd"}}, none); err == nil ||
		!strings.Contains(err.Error(), "containerd (pid 7)") {
		t.Errorf("a running containerd: %v", err)
	}
	// Its iptables chains would be the node's kube-proxy's (proxyChains), removed at Stop.
	if err := foreignRuntime([]procInfo{{pid: 8, comm: "kube-proxy"}}, none); err == nil ||
		!strings.Contains(err.Error(), "kube-proxy (pid 8)") {
		t.Errorf("a running kube-proxy: %v", err)
	}
	sock := func(s string) bool { return s == "/run/containerd/containerd.sock" }
	if err := foreignRuntime(nil, sock); err == nil {
		t.Error("a serving containerd socket was accepted")
	}
}

func TestProcState(t *testing.T) {
	if got := procState("12 (a) b) Z 1 2"); got != "Z" {
		t.Errorf("got %q", got)
	}
	stat := "12 (a) b) S 1 12 12 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 4242 1000 100"
	if got := parseStart(stat); got != 4242 {
		t.Errorf("parseStart = %d, want 4242", got)
	}
	if got := procStart(os.Getpid()); got == 0 {
		t.Error("procStart of this process is 0")
	}
}

// A node that stops keeps its logs and its marker, nothing else, and the next node takes the
// directory (issue 45: the logs of a node that failed were gone once it stopped).
func TestStopKeepsTheLogs(t *testing.T) {
	const tag = "cosi-node-0123456789ab"
	dir := filepath.Join(t.TempDir(), "node")
	if err := claimDir(dir, tag); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"log/kubelet.log", "etcd/member/db", "kubelet/pki/kubelet.key", "admin.kubeconfig"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := removeAllBut(dir, dirMarker, logDir); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{dirMarker, logDir}; !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "log", "kubelet.log")); err != nil {
		t.Errorf("the logs are gone: %v", err)
	}
	if err := claimDir(dir, "cosi-node-ba9876543210"); err != nil {
		t.Errorf("the next node does not take the directory: %v", err)
	}
}
