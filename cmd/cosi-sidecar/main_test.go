package main

import (
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
)

// TestMain runs the command itself when the test re-executes its binary (see help).
func TestMain(m *testing.M) {
	if os.Getenv("COSI_TEST_RUN_MAIN") != "" {
		os.Args = []string{os.Args[0], "-h"}
		main() // -h prints the flags with their defaults and exits
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// help is what `-h` prints: every flag with its default.
func help(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "COSI_TEST_RUN_MAIN=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("-h: %v: %s", err, out)
	}
	return string(out)
}

// Started without address flags, the command serves /metrics and the health probes on loopback
// only: nothing reaches them from the network unless a Deployment asks for it (the charts and
// config/ do, with explicit addresses).
func TestEndpointsDefaultToLoopback(t *testing.T) {
	out := help(t)
	for _, name := range []string{"metrics-bind-address", "health-probe-bind-address"} {
		m := regexp.MustCompile(`(?m)^\s+-` + name + ` string\n.*\(default "([^"]*)"\)`).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("-%s: no default in -h:\n%s", name, out)
			continue
		}
		host, _, err := net.SplitHostPort(m[1])
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			t.Errorf("-%s defaults to %q, want a loopback address", name, m[1])
		}
	}
}

// The v1alpha1 adapter's messages tell admins which flags complete a driver's answer: those flags
// exist, under those names.
func TestV1alpha1FallbackFlagsExist(t *testing.T) {
	out := help(t)
	for _, name := range []string{v1alpha1.FlagS3Endpoint, v1alpha1.FlagS3Region} {
		if !regexp.MustCompile(`(?m)^\s+-` + regexp.QuoteMeta(strings.TrimPrefix(name, "--")) + ` string$`).
			MatchString(out) {
			t.Errorf("%s: not in -h:\n%s", name, out)
		}
	}
}
