package main_test

import (
	"encoding/xml"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kube-cosi/cosi/internal/localenv"
)

// buildBinaries builds cosi-driver-memory and cosi-sanity into a temporary directory.
func buildBinaries(t *testing.T) string {
	t.Helper()
	root, err := localenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", bin+"/", "./cmd/cosi-driver-memory", "./cmd/cosi-sanity")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startDriver runs cosi-driver-memory as a process with the given flags, logging at the highest
// verbosity into a file. It returns the endpoint, the log file and the process.
func startDriver(t *testing.T, bin string, args ...string) (string, string, *exec.Cmd) {
	t.Helper()
	dir := t.TempDir()
	socket := filepath.Join(dir, "driver.sock")
	logFile := filepath.Join(dir, "driver.log")
	log, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	cmd := exec.Command(filepath.Join(bin, "cosi-driver-memory"), append([]string{"-v", "5"}, args...)...)
	cmd.Env = append(os.Environ(), "COSI_ENDPOINT=unix://"+socket)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(socket); err == nil {
			break
		}
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(logFile)
			t.Fatalf("the driver did not create its socket:\n%s", data)
		}
	}
	return "unix://" + socket, logFile, cmd
}

func TestCLI(t *testing.T) {
	bin := buildBinaries(t)

	t.Run("memory driver passes", func(t *testing.T) {
		endpoint, logFile, driverCmd := startDriver(t, bin)
		junit := filepath.Join(t.TempDir(), "report.xml")
		out, err := exec.CommandContext(t.Context(), filepath.Join(bin, "cosi-sanity"),
			"--endpoint", endpoint, "--junit", junit, "--driver-log", logFile,
			"--bucket-parameters", "versioning=false",
			"--invalid-bucket-parameters", "versioning=maybe",
			"--incompatible-bucket-parameters", "versioning=true",
			"--access-parameters", "sasExpiry=1h",
			"--invalid-access-parameters", "sasExpiry=soon",
		).CombinedOutput()
		if err != nil {
			t.Fatalf("cosi-sanity: %v\n%s", err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		summary := lines[len(lines)-1]
		if !regexp.MustCompile(`^\d+ passed, 0 failed, \d+ skipped$`).MatchString(summary) {
			t.Errorf("summary line %q", summary)
		}
		// Skipped here: only the cases the probe would answer (a CLI has no backend view), and
		// the unsupported-protocol cases (the driver supports all three).
		for _, line := range lines[:len(lines)-1] {
			if !strings.HasPrefix(line, "PASS ") && !strings.HasPrefix(line, "SKIP ") {
				t.Errorf("unexpected line %q", line)
			}
			if strings.HasPrefix(line, "SKIP ") && !strings.Contains(line, "backend probe") &&
				!strings.Contains(line, "supports every protocol") {
				t.Errorf("unexpected skip: %s", line)
			}
		}
		data, err := os.ReadFile(junit)
		if err != nil {
			t.Fatal(err)
		}
		var report struct {
			Suites []struct {
				Tests    int `xml:"tests,attr"`
				Failures int `xml:"failures,attr"`
				Cases    []struct {
					Name string `xml:"name,attr"`
				} `xml:"testcase"`
			} `xml:"testsuite"`
		}
		if err := xml.Unmarshal(data, &report); err != nil {
			t.Fatalf("JUnit report: %v", err)
		}
		if len(report.Suites) != 1 || report.Suites[0].Tests != len(lines)-1 || report.Suites[0].Failures != 0 {
			t.Errorf("JUnit report %+v does not match the %d printed cases", report.Suites, len(lines)-1)
		}
		// The driver logged request and response bodies at -v 5, with secrets stripped.
		logged, _ := os.ReadFile(logFile)
		if !strings.Contains(string(logged), "***stripped***") {
			t.Errorf("the driver's log has no stripped response: the leak check was vacuous")
		}

		// SIGTERM: the driver stops gracefully, exits 0 and removes its socket.
		if err := driverCmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- driverCmd.Wait() }()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("the driver exited with %v after SIGTERM", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the driver did not exit after SIGTERM")
		}
		if _, err := os.Stat(strings.TrimPrefix(endpoint, "unix://")); !os.IsNotExist(err) {
			t.Errorf("the socket remains after SIGTERM: %v", err)
		}
	})

	t.Run("a faulty driver fails with exit code 1", func(t *testing.T) {
		endpoint, _, _ := startDriver(t, bin, "--fault", "DriverDeleteBucket=Internal")
		cmd := exec.CommandContext(t.Context(), filepath.Join(bin, "cosi-sanity"),
			"--endpoint", endpoint, "--run", "^DriverDeleteBucket/")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("cosi-sanity against a faulty driver: %v, want exit code 1\n%s", err, out)
		}
		if !strings.Contains(string(out), "FAIL DriverDeleteBucket/returns OK when deleting twice: ") ||
			!strings.Contains(string(out), " failed, ") {
			t.Errorf("output does not report the failure:\n%s", out)
		}
	})

	t.Run("no driver exits with code 2", func(t *testing.T) {
		cmd := exec.CommandContext(t.Context(), filepath.Join(bin, "cosi-sanity"),
			"--endpoint", "unix://"+filepath.Join(t.TempDir(), "none.sock"), "--timeout", "1s")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Fatalf("cosi-sanity without a driver: %v, want exit code 2\n%s", err, out)
		}
	})
}
