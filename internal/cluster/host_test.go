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
