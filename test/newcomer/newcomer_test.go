//go:build unix

// Package newcomer walks docs/writing-a-driver.md as a driver vendor new to COSI would, reading
// nothing but the guide: the guide's marked code blocks (an HTML comment `<!-- newcomer: FILE -->`
// right before the fence) form a whole module, which this test writes into an empty directory next
// to a "clone" of this repository (a symlink named cosi, as the guide's replace lines expect),
// builds, serves and checks with cosi-sanity twice: with the guide's shell commands (no probe),
// and with the guide's TestSanity (with a probe). Every case must pass or skip with a reason.
//
// It imports nothing from the project: what it knows of the module comes from the guide alone.
package newcomer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// guide is the page a newcomer follows, relative to the repository root.
const guide = "docs/writing-a-driver.md"

// moduleFiles are the files the guide's marked blocks must give: a driver vendor's whole module,
// and the shell commands of its section 3 (run.sh).
var moduleFiles = []string{"go.mod", "driver.go", "store.go", "main.go", "driver_test.go", "run.sh"}

// socketInGuide is the socket path of the guide's shell commands; the test puts the socket in its
// own directory instead, so that runs do not meet.
const socketInGuide = "/tmp/drv.sock"

func TestNewcomerFromTheGuide(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go toolchain: %v", err)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skipf("no bash for the guide's shell commands: %v", err)
	}
	root := repoRoot(t)
	files := markedBlocks(t, filepath.Join(root, guide))
	for _, name := range moduleFiles {
		if _, ok := files[name]; !ok {
			t.Errorf("%s has no block marked <!-- newcomer: %s -->: the newcomer's module misses it", guide, name)
		}
	}
	for name := range files {
		if !slices.Contains(moduleFiles, name) {
			t.Errorf("%s marks a block %q, which this test does not know (one of %v)", guide, name, moduleFiles)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// An empty directory with the module and, next to it, the clone the guide's go.mod points at.
	dir := t.TempDir()
	if err := os.Symlink(root, filepath.Join(dir, "cosi")); err != nil {
		t.Fatal(err)
	}
	mod := filepath.Join(dir, "my-driver")
	if err := os.Mkdir(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if name == "run.sh" {
			continue
		}
		if err := os.WriteFile(filepath.Join(mod, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(files["go.mod"], "=> ../cosi/pkg") {
		t.Fatalf("the guide's go.mod does not replace the SDK module by ../cosi/pkg, the clone next to the module:\n%s",
			files["go.mod"])
	}

	// Section 3, from a shell: build, serve, go tool cosi-sanity.
	script := files["run.sh"]
	if !strings.Contains(script, socketInGuide) {
		t.Fatalf("the guide's shell commands do not serve on %s:\n%s", socketInGuide, script)
	}
	script = strings.ReplaceAll(script, socketInGuide, filepath.Join(dir, "drv.sock"))
	// The trap stops the driver the commands start in the background, whatever happens, and keeps
	// the commands' exit status.
	out, err := runErr(t, mod, "bash", "-c",
		"trap 'rc=$?; set +e; kill $(jobs -p) 2>/dev/null; exit $rc' EXIT\nset -e\n"+script)
	if err != nil && !bytes.Contains(out, []byte(" passed, ")) {
		t.Fatalf("%v\nstdout:\n%s", err, out) // the commands failed before the suite ran
	}
	cases := listCases(t, mod)
	checkCLI(t, out, cases)
	if err != nil && !t.Failed() {
		t.Errorf("the guide's commands failed: %v", err)
	}
	for _, name := range []string{"driver.log", "sanity.xml"} {
		if fi, err := os.Stat(filepath.Join(mod, name)); err != nil || fi.Size() == 0 {
			t.Errorf("the guide's commands left no %s: %v", name, err)
		}
	}

	// Section 3, from Go: the guide's TestSanity, with its probe.
	out, err = runErr(t, mod, "go", "test", "-json", "-count=1", "-run", "^TestSanity$", ".")
	checkGoTest(t, out, cases)
	if err != nil && !t.Failed() {
		t.Errorf("the guide's TestSanity failed: %v\n%s", err, out)
	}
}

// repoRoot is the repository this test is in: the directory above it that holds the guide.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, guide)); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no %s above the test's directory", guide)
		}
		dir = parent
	}
}

var marker = regexp.MustCompile(`^<!-- newcomer: (\S+) -->$`)

// markedBlocks returns the content of the guide's marked code blocks by file name; blocks marked
// with the same name are joined in order.
func markedBlocks(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	files := map[string]string{}
	for i := 0; i < len(lines); i++ {
		m := marker.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
			t.Fatalf("%s:%d: marker %q is not right before a code fence", guide, i+1, lines[i])
		}
		var block []string
		j := i + 2
		for ; j < len(lines) && !strings.HasPrefix(lines[j], "```"); j++ {
			block = append(block, lines[j])
		}
		if j == len(lines) {
			t.Fatalf("%s:%d: the block marked %s has no closing fence", guide, i+1, m[1])
		}
		if files[m[1]] != "" {
			files[m[1]] += "\n"
		}
		files[m[1]] += strings.Join(block, "\n") + "\n"
		i = j
	}
	return files
}

// run runs a command in dir with the environment's Go settings (GOPROXY, the module cache) and
// -mod=mod, as a newcomer's shell would, and returns its output; it fails the test if the command
// fails.
func run(t *testing.T, dir, name string, args ...string) []byte {
	t.Helper()
	out, err := runErr(t, dir, name, args...)
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s", err, out)
	}
	return out
}

// runErr is run for a command whose failure the caller explains from its output. The command and
// anything it starts are killed when the test gives up.
func runErr(t *testing.T, dir, name string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"), "GOWORK=off")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s in %s: %w\nstderr:\n%s", name, strings.Join(args, " "), dir, err,
			stderr.Bytes())
	}
	return out, nil
}

// listCases returns the names of the suite's cases, from go tool cosi-sanity --list.
func listCases(t *testing.T, mod string) []string {
	t.Helper()
	var names []string
	for line := range strings.Lines(string(run(t, mod, "go", "tool", "cosi-sanity", "--list"))) {
		if line = strings.TrimRight(line, "\n"); line != "" && !strings.HasPrefix(line, " ") {
			names = append(names, line)
		}
	}
	if len(names) < 40 {
		t.Fatalf("cosi-sanity --list lists %d cases; the check would prove little", len(names))
	}
	return names
}

var summary = regexp.MustCompile(`^(\d+) passed, (\d+) failed, (\d+) skipped$`)

// checkCLI checks cosi-sanity's output: every case ran, none failed, each skip says why.
func checkCLI(t *testing.T, out []byte, cases []string) {
	t.Helper()
	seen := map[string]string{}
	var counts []int
	scanner := bufio.NewScanner(bytes.NewReader(out))
	for scanner.Scan() {
		line := scanner.Text()
		status, rest, _ := strings.Cut(line, " ")
		switch status {
		case "PASS":
			name, _, _ := strings.Cut(rest, " (")
			seen[name] = status
		case "FAIL":
			t.Errorf("cosi-sanity: %s", line)
		case "SKIP":
			name, reason, _ := strings.Cut(rest, ": ")
			if strings.TrimSpace(reason) == "" {
				t.Errorf("cosi-sanity skipped %q without a reason", name)
			}
			seen[name] = status
		default:
			if m := summary.FindStringSubmatch(line); m != nil {
				for _, n := range m[1:] {
					c, _ := strconv.Atoi(n)
					counts = append(counts, c)
				}
			}
		}
	}
	if counts == nil {
		t.Fatalf("cosi-sanity printed no summary line:\n%s", out)
	}
	if counts[1] > 0 || counts[0]+counts[1]+counts[2] != len(cases) {
		t.Errorf("cosi-sanity: %d passed, %d failed, %d skipped; want %d cases, none failed", counts[0], counts[1],
			counts[2], len(cases))
	}
	for _, c := range cases {
		if _, ok := seen[c]; !ok {
			t.Errorf("cosi-sanity did not report case %q", c)
		}
	}
	// The guide's commands give the driver's log at -v 5: the log check runs and passes.
	if got := seen["Secrets/the driver logs no credential"]; got != "PASS" {
		t.Errorf("the log check was %q with the guide's commands, want PASS", got)
	}
}

// testEvent is one line of go test -json.
type testEvent struct {
	Action, Test, Output string
}

// checkGoTest checks the guide's TestSanity: every case is a subtest that passed or skipped with a
// reason, and none skipped for want of the probe the guide writes.
func checkGoTest(t *testing.T, out []byte, cases []string) {
	t.Helper()
	results := map[string]string{}
	output := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var e testEvent
		err := dec.Decode(&e)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("go test -json: %v", err)
		}
		sub, ok := strings.CutPrefix(e.Test, "TestSanity/")
		if !ok {
			continue
		}
		switch e.Action {
		case "output":
			output[sub] += e.Output
		case "pass", "fail", "skip":
			results[sub] = e.Action
		}
	}
	for _, c := range cases {
		sub := strings.ReplaceAll(c, " ", "_")
		reason := skipReason(output[sub])
		switch results[sub] {
		case "pass":
		case "skip":
			if reason == "" {
				t.Errorf("TestSanity skipped %q without a reason", c)
			}
			if strings.Contains(reason, "probe") {
				t.Errorf("TestSanity skipped %q for want of a probe, which the guide's test has: %s", c, reason)
			}
		case "":
			t.Errorf("TestSanity did not run case %q", c)
		default:
			t.Errorf("TestSanity: case %q %sed:\n%s", c, results[sub], output[sub])
		}
	}
	if len(results) != len(cases) {
		t.Errorf("TestSanity ran %d subtests for %d cases", len(results), len(cases))
	}
}

// skipReason is what a skipped subtest logged besides its === and --- lines.
func skipReason(out string) string {
	var reason []string
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "===") && !strings.HasPrefix(line, "---") {
			reason = append(reason, line)
		}
	}
	return strings.Join(reason, " ")
}
