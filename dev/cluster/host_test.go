package cluster

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The rules the kubelet adds are deleted by repeating them after -D: the words of iptables -S
// must come back as iptables read them, quoted comments included.
func TestSplitRule(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"-N KUBE-FIREWALL", []string{"-N", "KUBE-FIREWALL"}},
		{"-A INPUT -j KUBE-FIREWALL", []string{"-A", "INPUT", "-j", "KUBE-FIREWALL"}},
		{
			`-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment ` +
				`--comment "block incoming localnet connections" -j DROP`,
			[]string{
				"-A", "KUBE-FIREWALL", "!", "-s", "127.0.0.0/8", "-d", "127.0.0.0/8",
				"-m", "comment", "--comment", "block incoming localnet connections", "-j", "DROP",
			},
		},
		{
			`-A X -m comment --comment "say \"hi\"" -j ACCEPT`,
			[]string{"-A", "X", "-m", "comment", "--comment", `say "hi"`, "-j", "ACCEPT"},
		},
		{`-A X -m comment --comment "" -j ACCEPT`, []string{"-A", "X", "-m", "comment", "--comment", "", "-j", "ACCEPT"}},
	} {
		got, err := splitRule(tc.line)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("splitRule(%q) = %q, %v; want %q", tc.line, got, err, tc.want)
		}
	}
	if _, err := splitRule(`-A X --comment "open`); err == nil {
		t.Error("an unterminated quote was accepted")
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/var/lib/kubelet/pods/a\040b`); got != "/var/lib/kubelet/pods/a b" {
		t.Errorf("got %q", got)
	}
}

// The bridge plugin turns forwarding on for a gateway bridge: Stop must put it back, and the
// fingerprint the tier compares must show it.
func TestForwardingRecorded(t *testing.T) {
	for _, s := range []string{"net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding"} {
		if !slices.Contains(hostSysctls, s) {
			t.Errorf("%s is not recorded and restored", s)
		}
	}
	if _, err := os.Stat(sysctlPath("net.ipv4.ip_forward")); err == nil &&
		!strings.Contains(HostFingerprint(), "sysctl net.ipv4.ip_forward=") {
		t.Error("the fingerprint leaves out net.ipv4.ip_forward")
	}
}

// fakeIPTables serves -S from rules and records every other call.
type fakeIPTables struct {
	rules []string
	calls []string
}

func (f *fakeIPTables) run(_ string, args ...string) ([]byte, error) {
	if slices.Contains(args, "-S") {
		return []byte(strings.Join(f.rules, "\n") + "\n"), nil
	}
	f.calls = append(f.calls, strings.Join(args[3:], " "))
	return nil, nil
}

// Only what the node's kubelet, kube-proxy and CNI network add is undone: a rule or chain someone
// else (Docker, ufw, fail2ban, an admin, kube-router, another CNI network) adds while the node runs
// stays, even when its name starts with KUBE- or CNI-.
func TestRestoreIPTablesKeepsOthersRules(t *testing.T) {
	before := []string{"-P INPUT ACCEPT", "-P FORWARD ACCEPT", "-A INPUT -s 10.0.0.1/32 -j ACCEPT"}
	cosi := `-m comment --comment "name: \"cosi\" id: \"abc\""`
	podman := `-m comment --comment "name: \"podman\" id: \"x\""`
	f := &fakeIPTables{rules: append(slices.Clone(before),
		"-N KUBE-FIREWALL",
		"-N KUBE-KUBELET-CANARY",
		"-N KUBE-SERVICES",
		"-N KUBE-SVC-NPX46M4PTMTKRN6Y",
		"-N KUBE-ROUTER-INPUT",
		"-N CNI-HOSTPORT-DNAT",
		"-N CNI-abc123",
		"-N CNI-def456",
		"-N DOCKER-USER",
		"-A INPUT -s 1.2.3.4/32 -j DROP",
		"-A INPUT -j KUBE-FIREWALL",
		"-A OUTPUT -m comment --comment \"kubernetes firewall for dropping marked packets\" -j DROP",
		"-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES",
		"-A POSTROUTING -m comment --comment \"CNI portfwd requiring masquerade\" -j MASQUERADE",
		"-A POSTROUTING -s 10.217.0.5/32 "+cosi+" -j CNI-abc123",
		"-A POSTROUTING -s 10.88.0.5/32 "+podman+" -j CNI-def456",
		"-A CNI-abc123 -d 10.217.0.0/24 "+cosi+" -j ACCEPT",
		"-A CNI-def456 -j MASQUERADE",
		"-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -j DROP",
		"-A KUBE-SERVICES -d 10.218.0.1/32 -p tcp -j KUBE-SVC-NPX46M4PTMTKRN6Y",
		"-A KUBE-SVC-NPX46M4PTMTKRN6Y -j RETURN",
		"-A INPUT -j KUBE-ROUTER-INPUT",
		"-A KUBE-ROUTER-INPUT -j RETURN",
		"-A FORWARD -j DOCKER-USER",
		"-A DOCKER-USER -j RETURN",
		"-N COSI-NODE-ADDRESS",
		"-A INPUT -d 203.0.113.254/32 -j COSI-NODE-ADDRESS",
		"-A COSI-NODE-ADDRESS -j DROP",
	)}
	defer func(r func(string, ...string) ([]byte, error)) { runIPTables = r }(runIPTables)
	runIPTables = f.run
	if err := restoreIPTables("iptables", "filter", before); err != nil {
		t.Fatal(err)
	}
	cosiArgs := `-m comment --comment name: "cosi" id: "abc"`
	want := []string{
		"-D INPUT -j KUBE-FIREWALL",
		"-D OUTPUT -m comment --comment kubernetes service portals -j KUBE-SERVICES",
		"-D POSTROUTING -s 10.217.0.5/32 " + cosiArgs + " -j CNI-abc123",
		"-D CNI-abc123 -d 10.217.0.0/24 " + cosiArgs + " -j ACCEPT",
		"-D KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -j DROP",
		"-D KUBE-SERVICES -d 10.218.0.1/32 -p tcp -j KUBE-SVC-NPX46M4PTMTKRN6Y",
		"-D KUBE-SVC-NPX46M4PTMTKRN6Y -j RETURN",
		"-D INPUT -d 203.0.113.254/32 -j COSI-NODE-ADDRESS",
		"-D COSI-NODE-ADDRESS -j DROP",
		"-F KUBE-FIREWALL", "-F KUBE-KUBELET-CANARY", "-F KUBE-SERVICES", "-F KUBE-SVC-NPX46M4PTMTKRN6Y",
		"-F CNI-abc123", "-F COSI-NODE-ADDRESS",
		"-X KUBE-FIREWALL", "-X KUBE-KUBELET-CANARY", "-X KUBE-SERVICES", "-X KUBE-SVC-NPX46M4PTMTKRN6Y",
		"-X CNI-abc123", "-X COSI-NODE-ADDRESS",
	}
	if !reflect.DeepEqual(f.calls, want) {
		t.Errorf("iptables calls:\n%s\nwant:\n%s", strings.Join(f.calls, "\n"), strings.Join(want, "\n"))
	}
	// A chain of the kubelet that was there before the node (kube-proxy makes the same
	// KUBE-FIREWALL) is not removed.
	f = &fakeIPTables{rules: []string{"-N KUBE-FIREWALL", "-A INPUT -j KUBE-FIREWALL"}}
	runIPTables = f.run
	if err := restoreIPTables("iptables", "filter", slices.Clone(f.rules)); err != nil || len(f.calls) != 0 {
		t.Errorf("rules that were there: calls %q, %v", f.calls, err)
	}
}

// The node's links are the bridges with its tag as their alias and what is attached to them: a
// veth of another bridge, a link named like the node's bridge but without its alias, or any
// link when the tag is empty, is not.
func TestNodeLinks(t *testing.T) {
	const tag = "cosi-node-0123456789ab"
	links := []link{
		{name: "lo"}, {name: "eth0"},
		{name: "cosi0", alias: tag},
		{name: "veth1234", master: "cosi0"},
		{name: "veth5678", master: "docker0"},
		{name: "docker0"},
		{name: "vethabcd"},
		{name: "cosi1", alias: "cosi-node-ba9876543210"},
		{name: "veth9999", master: "cosi1"},
	}
	if got, want := nodeLinks(links, tag), []string{"veth1234", "cosi0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("nodeLinks = %q, want %q", got, want)
	}
	links = append(links, link{name: "cosi0x"}, link{name: "vethx", master: "cosi0x"})
	for _, bad := range []string{"", "cosi-node-"} {
		if got := nodeLinks(links, bad); got != nil {
			t.Errorf("nodeLinks(%q) = %q", bad, got)
		}
	}
	// sysfs as the kernel shows it.
	dir := t.TempDir()
	sysfs := []struct{ name, alias, master string }{{"cosi0", tag, ""}, {"veth1", "", "cosi0"}, {"eth0", "", ""}}
	for _, l := range sysfs {
		if err := os.MkdirAll(filepath.Join(dir, l.name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, l.name, "ifalias"), []byte(l.alias+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if l.master != "" {
			if err := os.Symlink("../"+l.master, filepath.Join(dir, l.name, "master")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, want := nodeLinks(readLinks(dir), tag), []string{"veth1", "cosi0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("nodeLinks(readLinks) = %q, want %q", got, want)
	}
}

// The node's configuration puts what it makes where the tear-down knows it as the node's: the
// Pods' cgroups below the node's tagged cgroup, their network namespaces below its directory.
func TestConfigKeepsTheNodesThingsTagged(t *testing.T) {
	const tag = "cosi-node-0123456789ab"
	if c := kubeletConfig("/d", "/d/s", "/d/ca", "10.0.0.1", "1", "2", "/"+tag); !strings.Contains(c,
		"\ncgroupRoot: /"+tag+"\n") {
		t.Errorf("the kubelet's Pods are not below the node's cgroup:\n%s", c)
	}
	if c := containerdConfig("/d", "pause"); !strings.Contains(c, "netns_mounts_under_state_dir = true") {
		t.Errorf("containerd puts network namespaces in /run/netns:\n%s", c)
	}
	if slices.Contains(hostPaths, "/run/netns") {
		t.Error("/run/netns, where anyone's network namespaces are, is removed as the node's")
	}
}
