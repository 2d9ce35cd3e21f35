package testenv

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// GoList runs go list with args in dir and returns the first field of each line.
func GoList(t testing.TB, dir string, args ...string) []string {
	t.Helper()
	var first []string
	for line := range strings.Lines(GoCmd(t, dir, append([]string{"list"}, args...)...)) {
		if f := strings.Fields(line); len(f) > 0 {
			first = append(first, f[0])
		}
	}
	return first
}

// GoCmd runs the go command with args in dir and returns its output; a failure fails t with its
// stderr.
func GoCmd(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = dir
	// A go.work above the directory, or -mod flags from the caller, would change what resolves.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		ee := &exec.ExitError{}
		if errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr)
	}
	return string(out)
}
