package cluster

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	// ("isGateway": true in cniConfig). kube-proxy's: proxyConfig keeps it from setting its
	// conntrack limits and localhost NodePorts' route_localnet, and the rest are recorded in case
	// a version of it sets them anyway.
	hostSysctls = []string{
		"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
		"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes",
		"net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding",
		"net.ipv4.conf.all.route_localnet", "net.netfilter.nf_conntrack_max",
		"net.netfilter.nf_conntrack_tcp_be_liberal", "net.bridge.bridge-nf-call-iptables",
	}
	// paths written whatever the node's configuration says: the kubelet's device-plugin and pod
	// resources sockets and container log links, containerd's shim sockets and runc's state,
	// libcni's cache. (The CRI's network namespaces are in the node's directory:
	// netns_mounts_under_state_dir in containerdConfig.)
	hostPaths = []string{
		"/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/run/containerd",
		"/var/lib/cni", "/etc/cni/net.d", "/var/lib/containerd", "/opt/cni",
	}
	iptablesTables = []string{"filter", "nat", "mangle"}
	// kubeletChains are the chains the kubelet makes (pkg/kubelet/kubelet_network_linux.go:
	// the hint for iptables-legacy or -nft, the martian-packet firewall, the canary it watches
	// to notice a flush), whatever its configuration.
	kubeletChains = map[string]bool{"KUBE-IPTABLES-HINT": true, "KUBE-FIREWALL": true, "KUBE-KUBELET-CANARY": true}
	// proxyChains and proxyChainPrefixes are the chains the node's kube-proxy makes in iptables
	// mode (pkg/proxy/iptables/proxier.go): its fixed ones, and one per Service (KUBE-SVC-,
	// KUBE-SVL-, KUBE-EXT-, KUBE-FW-, hashed) and per endpoint (KUBE-SEP-). Start refuses to run
	// beside another kube-proxy (foreignRuntime), whose chains these would be.
	proxyChains = map[string]bool{
		"KUBE-SERVICES": true, "KUBE-EXTERNAL-SERVICES": true, "KUBE-NODEPORTS": true, "KUBE-POSTROUTING": true,
		"KUBE-MARK-MASQ": true, "KUBE-MARK-DROP": true, "KUBE-FORWARD": true, "KUBE-PROXY-FIREWALL": true,
		"KUBE-PROXY-CANARY": true,
	}
	proxyChainPrefixes = []string{"KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-"}
	// addressChain is the node's chain that drops what comes to its address from outside this
	// machine (guardAddress).
	addressChain = "COSI-NODE-ADDRESS"
)

// A node's tag (cosi-node-<12 hex digits>, random per Start) names what it makes outside its
// directory so that its tear-down can tell it from anyone else's: the alias of its Pod bridge,
// the cgroup below which the kubelet puts every Pod, and the marker in its directory.
const tagPrefix = "cosi-node-"

// newTag returns a fresh tag.
func newTag() (string, error) {
	b := make([]byte, 6)
	if _, err := io.ReadFull(rand.Reader, b); err != nil {
		return "", err
	}
	return tagPrefix + hex.EncodeToString(b), nil
}

// validTag tells whether tag is one newTag makes: an empty or odd one (a state file from an
// older version, or edited by hand) must not select a cgroup hierarchy's root or every link
// without an alias.
func validTag(tag string) bool {
	hexPart, ok := strings.CutPrefix(tag, tagPrefix)
	if !ok || len(hexPart) != 12 {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil
}

// hostState is the host as it was before the node started, and what the node made. Start writes
// it to stateFile (again whenever it starts a process) and Stop removes that, so that the next
// Start finds it after a run that was killed and restores the host from it first (Cleanup).
type hostState struct {
	// Dir is the node's directory, PID (started at PIDStart) the process that started it, Keep
	// its Options.KeepDir, Tag the node's tag (newTag).
	Dir      string `json:"dir"`
	PID      int    `json:"pid"`
	PIDStart uint64 `json:"pidStart,omitempty"`
	Keep     bool   `json:"keep,omitempty"`
	Tag      string `json:"tag,omitempty"`
	// Procs are the components the node started, as they were started.
	Procs []procRecord `json:"procs,omitempty"`

	Sysctls  map[string]string   `json:"sysctls"`
	Existed  map[string]bool     `json:"existed"`  // hostPaths that existed
	Netns    map[string]bool     `json:"netns"`    // files in /run/netns (for HostFingerprint)
	IPTables map[string][]string `json:"iptables"` // "<binary> <table>" -> iptables -S lines
	Links    map[string]bool     `json:"links"`    // (for HostFingerprint)
	Mounts   map[string]bool     `json:"mounts"`   // every mount point of /proc/self/mountinfo
}

// procRecord identifies a process the node started: its PID and its start time (field 22 of
// /proc/<pid>/stat), which a process that reuses the PID later does not share.
type procRecord struct {
	Name  string `json:"name"`
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

func recordHost() (*hostState, error) {
	h := &hostState{Sysctls: map[string]string{}, Existed: map[string]bool{}, Netns: map[string]bool{},
		IPTables: map[string][]string{}, Links: map[string]bool{}, Mounts: map[string]bool{}}
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
	return h, nil
}

// restore undoes what the node changed: mounts (below its directory and hostPaths), its tagged
// links, its iptables rules and chains, sysctls, its tagged cgroups and the hostPaths that did
// not exist before. It goes on after an error and returns them all. What it did not make (a
// link, network namespace, chain or cgroup of Docker or an admin, made while the node ran) it
// leaves.
func (h *hostState) restore(nodeDir string) error {
	var errs []error
	// Mounts first: nothing below them can be removed while they are there. The network
	// namespaces of the Pods are mounts below nodeDir.
	roots := []string{nodeDir}
	roots = append(roots, hostPaths...)
	errs = append(errs, unmountUnder(roots, h.Mounts))
	errs = append(errs, removeLinks(sysClassNet, h.Tag))
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
	errs = append(errs, removeCgroup(cgroupRoot, h.Tag))
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

// removeAllBut removes what dir holds but the entries named keep.
func removeAllBut(dir string, keep ...string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !slices.Contains(keep, e.Name()) {
			errs = append(errs, removeAll(filepath.Join(dir, e.Name())))
		}
	}
	return errors.Join(errs...)
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

// sysClassNet lists the network links; the tests use a directory of their own.
var sysClassNet = "/sys/class/net"

// link is a network link as sysfs shows it.
type link struct {
	name, alias, master string
}

func readLinks(dir string) []link {
	entries, _ := os.ReadDir(dir)
	var links []link
	for _, e := range entries {
		l := link{name: e.Name()}
		if b, err := os.ReadFile(filepath.Join(dir, e.Name(), "ifalias")); err == nil {
			l.alias = strings.TrimSpace(string(b))
		}
		if m, err := os.Readlink(filepath.Join(dir, e.Name(), "master")); err == nil {
			l.master = filepath.Base(m)
		}
		links = append(links, l)
	}
	return links
}

// nodeLinks picks the node's links: the bridges whose alias is its tag (makeBridge), and the
// links attached to one (the host ends of the Pods' veth pairs, which the CNI plugin attaches),
// those first. A veth of Docker or of another bridge is not the node's, whatever its name.
func nodeLinks(links []link, tag string) []string {
	if !validTag(tag) {
		return nil
	}
	bridges := map[string]bool{}
	for _, l := range links {
		if l.alias == tag {
			bridges[l.name] = true
		}
	}
	var attached, own []string
	for _, l := range links {
		switch {
		case bridges[l.name]:
			own = append(own, l.name)
		case bridges[l.master]:
			attached = append(attached, l.name)
		}
	}
	return append(attached, own...)
}

// makeBridge makes the Pod bridge, which the CNI bridge plugin then uses as it finds it, with the
// node's tag as its alias, so that the tear-down knows it (nodeLinks). A link of that name that
// is already there is someone else's: the node does not start.
func makeBridge(tag string) error {
	if _, err := os.Lstat(filepath.Join(sysClassNet, bridgeName)); err == nil {
		return fmt.Errorf("a network link %s exists that this node did not make: the Pods' bridge "+
			"must be the node's own (remove it with ip link delete %s if it is a leftover)", bridgeName, bridgeName)
	}
	if out, err := exec.Command("ip", "link", "add", "name", bridgeName, "type", "bridge").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link add %s: %w: %s", bridgeName, err, out)
	}
	if out, err := exec.Command("ip", "link", "set", "dev", bridgeName, "alias", tag).CombinedOutput(); err != nil {
		_ = exec.Command("ip", "link", "delete", bridgeName).Run()
		return fmt.Errorf("ip link set %s alias: %w: %s", bridgeName, err, out)
	}
	return nil
}

// guardAddress drops the packets to the node's address ip that come from outside this machine:
// the address is in the host's network namespace, where by the weak host model a host on the LAN
// that routes it here would reach the API server and the kubelet. Only loopback (this machine's
// processes) and the Pod bridge pass. The rules are in a chain of the node's (addressChain),
// which the tear-down removes with the jump to it (iptablesUndo).
func guardAddress(ip string) error {
	for _, args := range [][]string{
		{"-N", addressChain},
		{"-A", addressChain, "-i", "lo", "-j", "RETURN"},
		{"-A", addressChain, "-i", bridgeName, "-j", "RETURN"},
		{"-A", addressChain, "-j", "DROP"},
		{"-I", "INPUT", "1", "-d", ip + "/32", "-j", addressChain},
	} {
		if out, err := runIPTables("iptables", append([]string{"-w", "-t", "filter"}, args...)...); err != nil {
			return fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// makeAddressLink makes the link of the node's address ip: a bridge with no ports (nodeLinkName: a
// dummy link, where the kernel has no dummy module), with the
// address as a /32 and the node's tag as its alias, so that the tear-down removes it with the
// bridge (nodeLinks). A link of that name that is already there is someone else's.
func makeAddressLink(tag, ip string) error {
	if _, err := os.Lstat(filepath.Join(sysClassNet, nodeLinkName)); err == nil {
		return fmt.Errorf("a network link %s exists that this node did not make: the node's address must be "+
			"on a link of its own (remove it with ip link delete %s if it is a leftover)", nodeLinkName, nodeLinkName)
	}
	for _, args := range [][]string{
		{"link", "add", "name", nodeLinkName, "type", "bridge"},
		{"link", "set", "dev", nodeLinkName, "alias", tag},
		{"address", "add", ip + "/32", "dev", nodeLinkName},
		{"link", "set", "dev", nodeLinkName, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			if args[0] != "link" || args[1] != "add" { // the link exists: removed
				_ = exec.Command("ip", "link", "delete", nodeLinkName).Run()
			}
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// removeLinks deletes the node's links (nodeLinks).
func removeLinks(dir, tag string) error {
	var errs []error
	for _, name := range nodeLinks(readLinks(dir), tag) {
		if out, err := exec.Command("ip", "link", "delete", name).CombinedOutput(); err != nil &&
			!strings.Contains(string(out), "Cannot find") {
			errs = append(errs, fmt.Errorf("ip link delete %s: %w: %s", name, err, out))
		}
	}
	return errors.Join(errs...)
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
	var added [][]string
	for _, l := range now {
		if had[l] {
			continue
		}
		if args, err := splitRule(l); err == nil && len(args) >= 2 {
			added = append(added, args)
		}
	}
	// The chains of the CNI plugins (the bridge's masquerading CNI-<hash>) are named by a hash:
	// they are the node's when a rule of its network jumps to them.
	own := map[string]bool{addressChain: true}
	for c := range kubeletChains {
		own[c] = true
	}
	for c := range proxyChains {
		own[c] = true
	}
	for _, args := range added {
		if t := ruleTarget(args); strings.HasPrefix(t, "CNI-") && cniRule(args) {
			own[t] = true
		}
		if args[0] == "-N" && slices.ContainsFunc(proxyChainPrefixes, func(p string) bool {
			return strings.HasPrefix(args[1], p)
		}) {
			own[args[1]] = true
		}
	}
	for _, args := range added {
		if !nodeRule(args, own) {
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

// nodeRule tells whether a split line of iptables -S is the node's: one of the chains own (the
// kubelet's, kubeletChains, and those of its CNI network), a rule in one or jumping to one, or a
// rule of its CNI network (cniRule), and its kube-proxy's chains (proxyChains) that were not there
// before. Other KUBE-* and CNI-* chains (another CNI network's) are not, nor are the rules of a
// kubelet's older versions ("kubernetes ..." comments).
func nodeRule(args []string, own map[string]bool) bool {
	return own[args[1]] || own[ruleTarget(args)] || cniRule(args)
}

// ruleTarget is the chain a rule jumps or goes to ("" when none).
func ruleTarget(args []string) string {
	for i := 2; i+1 < len(args); i++ {
		switch args[i] {
		case "-j", "-g", "--jump", "--goto":
			return args[i+1]
		}
	}
	return ""
}

// cniRule tells whether a rule carries the comment the CNI plugins give the rules of the node's
// network: `name: "cosi" id: "<container>"`.
func cniRule(args []string) bool {
	for i := 2; i+1 < len(args); i++ {
		if args[i] == "--comment" && strings.HasPrefix(args[i+1], `name: "`+cniNetwork+`" id: "`) {
			return true
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

// cgroupHierarchies lists the cgroup hierarchies under root: root itself with cgroup v2 (unified),
// else every directory below it that is the root of one (cgroup.procs at its top: cpu, memory,
// name=systemd, ...).
func cgroupHierarchies(root string) []string {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return []string{root}
	}
	entries, _ := os.ReadDir(root)
	var out []string
	for _, e := range entries {
		h := filepath.Join(root, e.Name())
		if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err == nil {
			out = append(out, h)
		}
	}
	return out
}

// makeCgroup makes the node's cgroup, named by its tag, in every hierarchy; the kubelet's
// cgroupRoot, so that every Pod's cgroup (<tag>/kubepods/...) is below it. A cgroup v1 cpuset
// starts empty, so it gets its parent's CPUs and memory nodes, as kind does for its kubelet's.
// With cgroup v2 it gets the controllers the root enables for its children (systemd enables
// them all); the root's are not changed.
func makeCgroup(root, tag string) error {
	for _, h := range cgroupHierarchies(root) {
		dir := filepath.Join(h, tag)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("making cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			b, err := os.ReadFile(filepath.Join(h, f))
			if err != nil {
				continue // not the cpuset hierarchy
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				return fmt.Errorf("setting %s of cgroup %s: %w", f, dir, err)
			}
		}
	}
	return nil
}

// nodeCgroups lists the node's cgroups: its tag's, and everything below them, in every hierarchy
// under root, parents first. Nothing when the tag is not valid: it must never name a hierarchy's
// root.
func nodeCgroups(root, tag string) []string {
	if !validTag(tag) {
		return nil
	}
	var dirs []string
	for _, h := range cgroupHierarchies(root) {
		dir := filepath.Join(h, tag)
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
	return dirs
}

// removeCgroup removes the node's cgroups (nodeCgroups), bottom up. A process still in one (a
// container left by a killed run) is killed first: the cgroup is the node's, so is what runs in
// it. A kubepods cgroup elsewhere (a real kubelet's, another node's) is not the node's.
func removeCgroup(root, tag string) error {
	var errs []error
	dirs := nodeCgroups(root, tag)
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		var err error
		for try := 0; try < 50; try++ {
			killCgroup(d)
			if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) ||
				!errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(100 * time.Millisecond) // the killed processes leave the cgroup
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
// paths outside the node's directory, network links, the node's and any kubelet's cgroups), one
// item a line:
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
	for _, h := range cgroupHierarchies(cgroupRoot) {
		for _, pattern := range []string{tagPrefix + "*", "kubepods", "kubepods.slice"} {
			m, _ := filepath.Glob(filepath.Join(h, pattern))
			for _, c := range m {
				lines = append(lines, "cgroup "+c)
			}
		}
	}
	for _, mp := range selectMounts(mountPoints(), append([]string{"/run/netns"}, hostPaths...), nil) {
		lines = append(lines, "mount "+mp)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
