package cmdutil

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/go-logr/logr"
)

func TestContainerMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v2 := file("memory.max", "536870912\n")
	v2max := file("memory.max.unlimited", "max\n")
	v1 := file("memory.limit_in_bytes", "268435456\n")
	v1unlimited := file("memory.limit_in_bytes.unlimited", "9223372036854771712\n")
	garbage := file("garbage", "lots\n")
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name  string
		files []string
		want  int64
	}{
		{"cgroup v2", []string{v2, v1}, 512 << 20},
		{"cgroup v2 without a limit", []string{v2max, v1}, 0},
		{"cgroup v1 (no v2 file)", []string{missing, v1}, 256 << 20},
		{"cgroup v1 without a limit", []string{missing, v1unlimited}, 0},
		{"unreadable value", []string{garbage}, 0},
		{"no cgroup files", []string{missing}, 0},
	} {
		if got, _ := containerMemoryLimit(tc.files); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestSetMemoryLimit(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	p := filepath.Join(t.TempDir(), "memory.max")
	if err := os.WriteFile(p, []byte("1000000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := setMemoryLimit(0.9, []string{p}, logr.Discard()); got != 900_000_000 {
		t.Fatalf("limit %d, want 900000000", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 900_000_000 {
		t.Errorf("runtime limit %d, want 900000000", got)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	if got := setMemoryLimit(0, []string{p}, logr.Discard()); got != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("ratio 0 set a limit (%d)", got)
	}
	t.Setenv("GOMEMLIMIT", "100MiB")
	if got := setMemoryLimit(0.9, []string{p}, logr.Discard()); got != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("GOMEMLIMIT set, yet a limit was set (%d)", got)
	}
}

// TestSetGCPercent: --gc-percent sets the collector's target unless GOGC is set or it is 0.
func TestSetGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for _, tc := range []struct {
		name    string
		gogc    string
		percent int
		want    int
	}{
		{"the flag", "", 50, 50},
		{"GOGC set by the operator", "200", 50, 100},
		{"0: Go's default", "", 0, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOGC", tc.gogc)
			debug.SetGCPercent(100)
			SetGCPercent(tc.percent, logr.Discard())
			if got := debug.SetGCPercent(100); got != tc.want {
				t.Errorf("GC percent %d, want %d", got, tc.want)
			}
		})
	}
}
