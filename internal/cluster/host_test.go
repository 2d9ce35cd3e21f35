package cluster

import (
	"os"
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

// Only what the kubelet and the CNI plugins add is undone: a rule someone else (Docker, ufw,
// fail2ban, an admin) adds while the node runs stays.
func TestRestoreIPTablesKeepsOthersRules(t *testing.T) {
	before := []string{"-P INPUT ACCEPT", "-P FORWARD ACCEPT", "-A INPUT -s 10.0.0.1/32 -j ACCEPT"}
	f := &fakeIPTables{rules: append(slices.Clone(before),
		"-N KUBE-FIREWALL",
		"-N KUBE-KUBELET-CANARY",
		"-N CNI-HOSTPORT-DNAT",
		"-N DOCKER-USER",
		"-A INPUT -s 1.2.3.4/32 -j DROP",
		"-A INPUT -j KUBE-FIREWALL",
		"-A OUTPUT -m comment --comment \"kubernetes firewall for dropping marked packets\" -j DROP",
		"-A POSTROUTING -m comment --comment \"CNI portfwd requiring masquerade\" -j MASQUERADE",
		"-A POSTROUTING -s 10.217.0.5/32 -m comment --comment \"name: \\\"cosi\\\" id: \\\"abc\\\"\" -j ACCEPT",
		"-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -j DROP",
		"-A FORWARD -j DOCKER-USER",
		"-A DOCKER-USER -j RETURN",
	)}
	defer func(r func(string, ...string) ([]byte, error)) { runIPTables = r }(runIPTables)
	runIPTables = f.run
	if err := restoreIPTables("iptables", "filter", before); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"-D INPUT -j KUBE-FIREWALL",
		"-D OUTPUT -m comment --comment kubernetes firewall for dropping marked packets -j DROP",
		"-D POSTROUTING -m comment --comment CNI portfwd requiring masquerade -j MASQUERADE",
		`-D POSTROUTING -s 10.217.0.5/32 -m comment --comment name: "cosi" id: "abc" -j ACCEPT`,
		"-D KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -j DROP",
		"-F KUBE-FIREWALL", "-F KUBE-KUBELET-CANARY", "-F CNI-HOSTPORT-DNAT",
		"-X KUBE-FIREWALL", "-X KUBE-KUBELET-CANARY", "-X CNI-HOSTPORT-DNAT",
	}
	if !reflect.DeepEqual(f.calls, want) {
		t.Errorf("iptables calls:\n%s\nwant:\n%s", strings.Join(f.calls, "\n"), strings.Join(want, "\n"))
	}
}
