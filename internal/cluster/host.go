package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What the kubelet, containerd and the CNI plugins change on the host beyond the node's directory,
// found by running them here. hostState records it before the node starts and puts it back after.
var (
	// sysctls the kubelet sets at start (pkg/kubelet/cm's setupKernelTunables, the container
	// manager's defaults), and the forwarding the CNI bridge plugin turns on for a gateway bridge
	// ("isGateway": true in cniConfig).
	hostSysctls = []string{
		"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
		"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes",
		"net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding",
	}
	// paths written whatever the node's configuration says: the kubelet's device-plugin and pod
	// resources sockets and container log links, containerd's shim sockets, the CRI's network
	// namespaces, libcni's cache.
	hostPaths = []string{
		"/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/run/containerd",
		"/var/lib/cni", "/run/netns", "/var/run/netns", "/etc/cni/net.d", "/var/lib/containerd",
		"/opt/cni",
	}
	// the cgroup the kubelet makes (cgroupfs driver) in every controller's hierarchy.
	kubeletCgroups = []string{"kubepods", "kubepods.slice"}
	iptablesTables = []string{"filter", "nat", "mangle"}
)

// hostState is the host as it was before the node started. Start writes it to stateFile and Stop
// removes that, so that the next Start finds it after a run that was killed and restores the
// host from it first (recoverLeftovers).
type hostState struct {
	// Dir is the node's directory, PID the process that started it, Keep its Options.KeepDir.
	Dir  string `json:"dir"`
	PID  int    `json:"pid"`
	Keep bool   `json:"keep,omitempty"`

	Sysctls  map[string]string   `json:"sysctls"`
	Existed  map[string]bool     `json:"existed"`  // hostPaths that existed
	Netns    map[string]bool     `json:"netns"`    // files in /run/netns
	IPTables map[string][]string `json:"iptables"` // "<binary> <table>" -> iptables -S lines
	Links    map[string]bool     `json:"links"`
	Mounts   map[string]bool     `json:"mounts"`  // every mount point of /proc/self/mountinfo
	Cgroups  map[string]bool     `json:"cgroups"` // the kubelet's cgroups that existed (cgroupDirs)
}

func recordHost() (*hostState, error) {
	h := &hostState{Sysctls: map[string]string{}, Existed: map[string]bool{}, Netns: map[string]bool{},
		IPTables: map[string][]string{}, Links: map[string]bool{}, Mounts: map[string]bool{},
		Cgroups: map[string]bool{}}
	for _, s := range hostSysctls {
		b, err := os.ReadFile(sysctlPath(s))
		if err != nil {
			continue // not on this kernel: the kubelet skips it too
		}
		h.Sysctls[s] = strings.TrimSpace(string(b))
	}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); err == nil {
			h.Existed[p] = true
		}
	}
	for _, p := range netnsFiles() {
		h.Netns[p] = true
	}
	for _, bin := range []string{"iptables", "ip6tables"} {
		for _, t := range iptablesTables {
			lines, err := iptablesRules(bin, t)
			if err != nil {
				continue // no such table or binary: nothing to restore
			}
			h.IPTables[bin+" "+t] = lines
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for _, i := range ifs {
		h.Links[i.Name] = true
	}
	for _, mp := range mountPoints() {
		h.Mounts[mp] = true
	}
	for _, d := range cgroupDirs(cgroupRoot) {
		h.Cgroups[d] = true
	}
	return h, nil
}

// restore undoes what the node changed: mounts, network namespaces, links, iptables rules and
// chains, sysctls, cgroups and the paths that did not exist before. It goes on after an error
// and returns them all.
func (h *hostState) restore(nodeDir string) error {
	var errs []error
	// Mounts first: nothing below them can be removed while they are there.
	roots := []string{nodeDir}
	roots = append(roots, hostPaths...)
	errs = append(errs, unmountUnder(roots, h.Mounts))
	for _, p := range netnsFiles() {
		if !h.Netns[p] {
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if !h.Links[i.Name] && (i.Name == bridgeName || strings.HasPrefix(i.Name, "veth")) {
			if out, err := exec.Command("ip", "link", "delete", i.Name).
				CombinedOutput(); err != nil &&
				!strings.Contains(string(out), "Cannot find") {
				errs = append(errs, fmt.Errorf("ip link delete %s: %w: %s", i.Name, err, out))
			}
		}
	}
	for key, before := range h.IPTables {
		bin, table, _ := strings.Cut(key, " ")
		errs = append(errs, restoreIPTables(bin, table, before))
	}
	for s, v := range h.Sysctls {
		b, err := os.ReadFile(sysctlPath(s))
		if err == nil && strings.TrimSpace(string(b)) == v {
			continue
		}
		if err := os.WriteFile(sysctlPath(s), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s=%s: %w", s, v, err))
		}
	}
	errs = append(errs, removeCgroups(cgroupRoot, h.Cgroups))
	for _, p := range hostPaths {
		if !h.Existed[p] {
			errs = append(errs, removeAll(p))
		}
	}
	return errors.Join(errs...)
}

// removeAll removes dir unless something is still mounted below it: removing through a bind mount
// left by a hostPath volume would delete the host's files.
func removeAll(dir string) error {
	if mps := mountsUnder([]string{dir}, nil); len(mps) > 0 {
		return fmt.Errorf("not removing %s: still mounted there: %v", dir, mps)
	}
	return os.RemoveAll(dir)
}

func sysctlPath(name string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
}

func netnsFiles() []string {
	var out []string
	for _, d := range []string{"/run/netns"} {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			out = append(out, filepath.Join(d, e.Name()))
		}
	}
	return out
}

// unmountUnder detaches the mount points below roots (deepest first) that were not in keep: a
// mount that was there before the node (a Docker container's rootfs under /run/containerd, a
// Pod volume of a real kubelet) is not the node's to remove.
func unmountUnder(roots []string, keep map[string]bool) error {
	var errs []error
	for _, p := range mountsUnder(roots, keep) {
		if err := syscall.Unmount(
			p,
			syscall.MNT_DETACH,
		); err != nil && !errors.Is(err, syscall.EINVAL) &&
			!errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// mountsUnder lists the mount points at or below roots that are not in keep, deepest first.
func mountsUnder(roots []string, keep map[string]bool) []string {
	return selectMounts(mountPoints(), roots, keep)
}

// mountPoints reads the mount points of /proc/self/mountinfo.
func mountPoints() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	return parseMountInfo(f)
}

// parseMountInfo returns the mount point (the fifth field) of every line of a mountinfo file.
func parseMountInfo(r io.Reader) []string {
	var points []string
	s := bufio.NewScanner(r)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 5 {
			points = append(points, unescapeMount(fields[4]))
		}
	}
	return points
}

// selectMounts returns the points at or below roots that are not in keep, deepest first.
func selectMounts(points, roots []string, keep map[string]bool) []string {
	var out []string
	for _, mp := range points {
		if keep[mp] {
			continue
		}
		for _, r := range roots {
			if r != "" && (mp == r || strings.HasPrefix(mp, strings.TrimSuffix(r, "/")+"/")) {
				out = append(out, mp)
				break
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// runIPTables runs an iptables binary; the tests replace it.
var runIPTables = func(bin string, args ...string) ([]byte, error) {
	return exec.Command(bin, args...).CombinedOutput()
}

func iptablesRules(bin, table string) ([]string, error) {
	out, err := runIPTables(bin, "-w", "-t", table, "-S")
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n"), nil
}

// restoreIPTables deletes the rules and chains of table that the node added since before, and
// nothing else: a rule Docker, ufw or an admin added meanwhile stays (nodeRule).
func restoreIPTables(bin, table string, before []string) error {
	now, err := iptablesRules(bin, table)
	if err != nil {
		return nil
	}
	rules, chains := iptablesUndo(before, now)
	var errs []error
	for _, r := range rules {
		if out, err := runIPTables(bin, append([]string{"-w", "-t", table}, r...)...); err != nil {
			errs = append(errs, fmt.Errorf("%s -t %s %s: %w: %s", bin, table, strings.Join(r, " "), err, out))
		}
	}
	for _, c := range chains {
		_, _ = runIPTables(bin, "-w", "-t", table, "-F", c)
	}
	for _, c := range chains {
		if out, err := runIPTables(bin, "-w", "-t", table, "-X", c); err != nil {
			errs = append(errs, fmt.Errorf("%s -t %s -X %s: %w: %s", bin, table, c, err, out))
		}
	}
	return errors.Join(errs...)
}

// iptablesUndo compares two listings of iptables -S and returns the -D commands of the node's
// rules that were not in before, and the node's chains that were not, to flush and remove.
func iptablesUndo(before, now []string) (rules [][]string, chains []string) {
	had := map[string]bool{}
	for _, l := range before {
		had[l] = true
	}
	for _, l := range now {
		if had[l] {
			continue
		}
		args, err := splitRule(l)
		if err != nil || len(args) < 2 || !nodeRule(args) {
			continue
		}
		switch args[0] {
		case "-A":
			args[0] = "-D"
			rules = append(rules, args)
		case "-N":
			chains = append(chains, args[1])
		}
	}
	return rules, chains
}

// nodeRule tells whether a split line of iptables -S is the node's: a chain of the kubelet
// (KUBE-FIREWALL, KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT) or of the CNI plugins (the bridge's
// masquerading CNI-<hash>, portmap's CNI-HOSTPORT-*, CNI-DN-*), a rule in one, a jump to one, or a
// rule carrying their comments (the kubelet's "kubernetes ...", portmap's "CNI portfwd ...", the
// bridge's and portmap's `name: "cosi" id: "<container>"`).
func nodeRule(args []string) bool {
	own := func(chain string) bool {
		return strings.HasPrefix(chain, "KUBE-") || strings.HasPrefix(chain, "CNI-")
	}
	if own(args[1]) {
		return true
	}
	for i := 2; i+1 < len(args); i++ {
		switch args[i] {
		case "-j", "-g", "--jump", "--goto":
			if own(args[i+1]) {
				return true
			}
		case "--comment":
			c := args[i+1]
			if strings.HasPrefix(c, "kubernetes ") || strings.HasPrefix(c, "CNI ") ||
				strings.Contains(c, `name: "`+cniNetwork+`"`) {
				return true
			}
		}
	}
	return false
}

// splitRule splits a line of iptables -S into arguments: words, and double-quoted strings with
// backslash escapes (comments).
func splitRule(line string) ([]string, error) {
	var args []string
	var cur strings.Builder
	inQuote, have := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\\' && inQuote && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case c == '"':
			inQuote, have = !inQuote, true
		case c == ' ' && !inQuote:
			if have {
				args = append(args, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if inQuote {
		return nil, fmt.Errorf("unterminated quote in %q", line)
	}
	if have {
		args = append(args, cur.String())
	}
	return args, nil
}

// cgroupRoot is where the cgroup hierarchies are mounted; the tests use a directory of their own.
var cgroupRoot = "/sys/fs/cgroup"

// cgroupDirs lists the kubelet's cgroups (kubeletCgroups and everything below them) in every
// hierarchy under root (cgroup v1: root/<controller>; v2: root itself), parents first.
func cgroupDirs(root string) []string {
	hierarchies, _ := filepath.Glob(filepath.Join(root, "*"))
	hierarchies = append(hierarchies, root)
	var dirs []string
	for _, r := range hierarchies {
		for _, c := range kubeletCgroups {
			dir := filepath.Join(r, c)
			if _, err := os.Stat(dir); err != nil {
				continue
			}
			_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
		}
	}
	return dirs
}

// removeCgroups removes the kubelet's cgroups under root that are not in existed, bottom up. A
// process still in one (a container left by a killed run) is killed first: the cgroup is the
// node's, so is what runs in it.
func removeCgroups(root string, existed map[string]bool) error {
	var errs []error
	dirs := cgroupDirs(root)
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if existed[d] {
			continue
		}
		var err error
		for try := 0; try < 20; try++ {
			killCgroup(d)
			if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) ||
				!errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// killCgroup sends SIGKILL to the processes in the cgroup dir.
func killCgroup(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// HostFingerprint describes the host state the node changes (the sysctls, iptables rules, the
// paths outside the node's directory, network links, the kubelet's cgroups), one item a line:
// equal before Start and after Stop when the node left the machine as it found it.
func HostFingerprint() string {
	h, err := recordHost()
	if err != nil {
		return "error: " + err.Error()
	}
	var lines []string
	for s, v := range h.Sysctls {
		lines = append(lines, "sysctl "+s+"="+v)
	}
	for k, rules := range h.IPTables {
		for _, r := range rules {
			lines = append(lines, k+" "+r)
		}
	}
	for p := range h.Existed {
		lines = append(lines, "path "+p)
	}
	for p := range h.Netns {
		lines = append(lines, "netns "+p)
	}
	for l := range h.Links {
		lines = append(lines, "link "+l)
	}
	for _, c := range kubeletCgroups {
		if m, _ := filepath.Glob("/sys/fs/cgroup/*/" + c); len(m) > 0 {
			lines = append(lines, "cgroup "+c)
		}
	}
	for _, mp := range selectMounts(mountPoints(), append([]string{"/run/netns"}, hostPaths...), nil) {
		lines = append(lines, "mount "+mp)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
