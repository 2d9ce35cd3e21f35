package cluster

import (
	"os"
	"path/filepath"
	"reflect"
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
`

// Tear-down unmounts only what was mounted while the node ran: a Docker container's rootfs under
// /run/containerd or a real kubelet's Pod volume that was there before stays.
func TestSelectMountsKeepsThoseThatWereThere(t *testing.T) {
	points := parseMountInfo(strings.NewReader(mountinfo))
	keep := map[string]bool{}
	for _, p := range points[:3] { // the mounts at the start
		keep[p] = true
	}
	roots := append([]string{"/tmp/cosi-node1"}, hostPaths...)
	got := selectMounts(points, roots, keep)
	want := []string{
		"/run/containerd/io.containerd.runtime.v2.task/k8s.io/def/rootfs",
		"/tmp/cosi-node1/kubelet/pods/p2/volumes/a b",
		"/run/netns/cni-1234",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("selectMounts = %q, want %q", got, want)
	}
}

// Only the cgroups the node made are removed; a kubepods cgroup of a real kubelet stays.
func TestRemoveCgroupsKeepsThoseThatWereThere(t *testing.T) {
	root := t.TempDir()
	old := []string{"cpu/kubepods/burstable/pod-old", "memory/kubepods"}
	for _, d := range old {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	existed := map[string]bool{}
	for _, d := range cgroupDirs(root) {
		existed[d] = true
	}
	for _, d := range []string{"cpu/kubepods/besteffort/pod-new", "memory/kubepods/pod-new", "kubepods/pod-v2"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := removeCgroups(root, existed); err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, d := range cgroupDirs(root) {
		rel, _ := filepath.Rel(root, d)
		left = append(left, rel)
	}
	want := []string{"cpu/kubepods", "cpu/kubepods/burstable", "cpu/kubepods/burstable/pod-old", "memory/kubepods"}
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
		Dir: "/tmp/cosi-node1", PID: 42, Sysctls: map[string]string{"net.ipv4.ip_forward": "0"},
		Existed: map[string]bool{"/opt/cni": true}, Netns: map[string]bool{},
		IPTables: map[string][]string{"iptables filter": {"-P INPUT ACCEPT", `-A X --comment "a b" -j Y`}},
		Links:    map[string]bool{"lo": true}, Mounts: map[string]bool{"/": true},
		Cgroups: map[string]bool{"/sys/fs/cgroup/cpu/kubepods": true},
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

// After a killed run, the node's processes are found by the directory in their arguments, and
// the shims by their bundle; nothing else is.
func TestNodeProcesses(t *testing.T) {
	procs := []procInfo{
		{pid: 1, comm: "init", cmdline: "/sbin/init"},
		{pid: 10, comm: "etcd", cmdline: "bin/etcd --data-dir /tmp/cosi-node1/etcd"},
		{pid: 11, comm: "containerd", cmdline: "containerd --config /tmp/cosi-node1/containerd/config.toml"},
		{
			pid: 12, comm: "containerd-shim", cmdline: "containerd-shim-runc-v2 -namespace k8s.io -id abc",
			cwd: "/tmp/cosi-node1/containerd/state/io.containerd.runtime.v2.task/k8s.io/abc",
		},
		{pid: 13, comm: "containerd-shim", cmdline: "containerd-shim-runc-v2 -id x", cwd: "/run/containerd/x"},
		{pid: 14, comm: "etcd", cmdline: "etcd --data-dir /tmp/cosi-node10/etcd"},
		{pid: 15, comm: "go", cmdline: "go test"},
	}
	if got := nodeProcesses(procs, "/tmp/cosi-node1", 15); !reflect.DeepEqual(got, []int{10, 11, 12}) {
		t.Errorf("nodeProcesses = %v", got)
	}
	if got := nodeProcesses(procs, "/", 15); got != nil {
		t.Errorf("nodeProcesses(/) = %v", got)
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
	sock := func(s string) bool { return s == "/run/containerd/containerd.sock" }
	if err := foreignRuntime(nil, sock); err == nil {
		t.Error("a serving containerd socket was accepted")
	}
}

func TestProcState(t *testing.T) {
	if got := procState("12 (a) b) Z 1 2"); got != "Z" {
		t.Errorf("got %q", got)
	}
}
