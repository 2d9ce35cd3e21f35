package kubectlcosi

import (
	"testing"
	"time"
)

// TestFlagValue: a driver's flags are read as Go's flag package reads them, the last one winning.
func TestFlagValue(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		value string
		ok    bool
	}{
		{[]string{"--name=a"}, "a", true},
		{[]string{"-name=a"}, "a", true},
		{[]string{"--name", "a"}, "a", true},
		{[]string{"-name", "a"}, "a", true},
		{[]string{"--name=a", "--name=b"}, "b", true},
		{[]string{"--name="}, "", true},
		{[]string{"--name"}, "", false},
		{[]string{"--names=a", "name=a", "--name-x", "a"}, "", false},
		{[]string{"/cosi-driver-s3", "--other", "--name", "a"}, "a", true},
	} {
		if v, ok := flagValue(tc.args, "name"); v != tc.value || ok != tc.ok {
			t.Errorf("%q: %q, %v; want %q, %v", tc.args, v, ok, tc.value, tc.ok)
		}
	}
}

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Hour: "1h", 90 * time.Minute: "1h30m", 48 * time.Hour: "48h", 366 * 24 * time.Hour: "366 days",
		90 * time.Second: "1m30s", 10 * time.Minute: "10m",
	} {
		if got := duration(d); got != want {
			t.Errorf("%s: %q, want %q", d, got, want)
		}
	}
}
