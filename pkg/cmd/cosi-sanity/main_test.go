package main_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"

	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	"github.com/kube-cosi/cosi/pkg/sanity"
	"github.com/kube-cosi/cosi/pkg/sanity/mutants"
)

// driverEnv makes the test binary the driver under test (startDriver): the memory driver served by
// driver.Run at verbosity 5, as cmd/cosi-driver-memory serves it, with the faults in the variable
// (memory.ParseFault's syntax, separated by ";"). The test stays within the SDK module.
const driverEnv = "COSI_SANITY_TEST_DRIVER"

// leakEnv, "<field>=<secret>", makes that driver one of mutants.Leaks: it returns the secret for
// every credential and hides it in the field.
const leakEnv = "COSI_SANITY_TEST_LEAK"

func TestMain(m *testing.M) {
	if faults, ok := os.LookupEnv(driverEnv); ok {
		if err := serveMemory(faults); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	flag.Parse()
	os.Exit(m.Run())
}

func serveMemory(faultSpecs string) error {
	log := logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.Level(-5)}))
	var injected []memory.Fault
	for spec := range strings.SplitSeq(faultSpecs, ";") {
		if spec == "" {
			continue
		}
		f, err := memory.ParseFault(spec)
		if err != nil {
			return err
		}
		injected = append(injected, f)
	}
	d, err := memory.New(memory.Config{Usage: true})
	if err != nil {
		return err
	}
	var faults memory.Faults
	faults.Set(0, injected...)
	var srv mutants.Server = d
	if field, secret, ok := strings.Cut(os.Getenv(leakEnv), "="); ok {
		i := slices.IndexFunc(mutants.Leaks(), func(l mutants.Leak) bool { return l.Field == field })
		if i < 0 {
			return fmt.Errorf("%s: no leak %q", leakEnv, field)
		}
		srv = mutants.Leaks()[i].New(d, secret)
	}
	return driver.Run(driver.Options{
		Identity: srv, Provisioner: srv, Logger: log,
		Interceptors: []grpc.UnaryServerInterceptor{faults.Interceptor()},
	})
}

// stampedVersion is what buildSanity stamps, as make images does (hack/image).
const stampedVersion = "v0.0.0-stamped"

// buildSanity builds cosi-sanity into a temporary directory and returns its path.
func buildSanity(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cosi-sanity")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-ldflags", "-X main.version="+stampedVersion, "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startDriver runs the memory driver as a process (this test binary, see driverEnv) with faults,
// logging at the highest verbosity into a file. It returns the endpoint, the log file and the
// process.
func startDriver(t *testing.T, faults ...string) (string, string, *exec.Cmd) {
	t.Helper()
	return startDriverEnv(t, nil, faults...)
}

// startDriverEnv is startDriver with more environment for the driver.
func startDriverEnv(t *testing.T, env []string, faults ...string) (string, string, *exec.Cmd) {
	t.Helper()
	dir := t.TempDir()
	socket := filepath.Join(dir, "driver.sock")
	logFile := filepath.Join(dir, "driver.log")
	log, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(context.Background(), self)
	cmd.Env = append(os.Environ(), "COSI_ENDPOINT=unix://"+socket, driverEnv+"="+strings.Join(faults, ";"))
	cmd.Env = append(cmd.Env, env...)
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
	sanityBin := buildSanity(t)

	t.Run("--version prints the stamped version", func(t *testing.T) {
		out, err := exec.CommandContext(t.Context(), sanityBin, "--version").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "cosi-sanity "+stampedVersion {
			t.Errorf("cosi-sanity --version: %q, %v; want %q", out, err, "cosi-sanity "+stampedVersion)
		}
	})

	t.Run("--list names every case, with what it needs and what is missed without", func(t *testing.T) {
		out, err := exec.CommandContext(t.Context(), sanityBin, "--list").CombinedOutput()
		if err != nil {
			t.Fatalf("cosi-sanity --list: %v\n%s", err, out)
		}
		var names []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			switch {
			case !strings.HasPrefix(line, " "):
				names = append(names, line)
			case strings.HasPrefix(line, "    needs: "):
			case strings.HasPrefix(line, "    missed without it: "):
			case strings.HasPrefix(line, "    checked after every case"):
			default:
				t.Errorf("unexpected line %q", line)
			}
		}
		var want []string
		for _, c := range sanity.Cases() {
			want = append(want, c.Name)
		}
		want = append(want, sanity.Properties()...)
		if !slices.Equal(names, want) {
			t.Errorf("--list names %d cases, want the %d of sanity.Cases and sanity.Properties:\n%s",
				len(names), len(want), out)
		}
	})

	t.Run("memory driver passes", func(t *testing.T) {
		endpoint, logFile, driverCmd := startDriver(t)
		junit := filepath.Join(t.TempDir(), "report.xml")
		out, err := exec.CommandContext(t.Context(), sanityBin,
			"--endpoint", endpoint, "--junit", junit, "--driver-log", logFile,
			"--bucket-parameters", "versioning=false",
			"--invalid-bucket-parameters", "versioning=maybe",
			"--incompatible-bucket-parameters", "versioning=true",
			"--access-parameters", "sasExpiry=1h",
			"--invalid-access-parameters", "sasExpiry=soon",
			"--incompatible-access-parameters", "sasExpiry=2h",
		).CombinedOutput()
		if err != nil {
			t.Fatalf("cosi-sanity: %v\n%s", err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		summary := lines[len(lines)-1]
		if !regexp.MustCompile(`^\d+ passed, 0 failed, \d+ skipped$`).MatchString(summary) {
			t.Errorf("summary line %q", summary)
		}
		// Skipped here: only the cases the probe would answer (a CLI has no backend view), the
		// unsupported-protocol cases (the driver supports all three) and the case for a driver
		// without BUCKET_USAGE (this one advertises it).
		for _, line := range lines[:len(lines)-1] {
			if !strings.HasPrefix(line, "PASS ") && !strings.HasPrefix(line, "SKIP ") {
				t.Errorf("unexpected line %q", line)
			}
			if strings.HasPrefix(line, "SKIP ") && !strings.Contains(line, "backend probe") &&
				!strings.Contains(line, "supports every protocol") &&
				!strings.Contains(line, "the driver advertises BUCKET_USAGE") {
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
		endpoint, _, _ := startDriver(t, "DriverDeleteBucket=Internal")
		cmd := exec.CommandContext(t.Context(), sanityBin,
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

	// The driver hides the secret it returns in its credential IDs (which six rotation cases quoted
	// through the driver's errors), or in its account IDs (quoted by a case that runs before the
	// driver first returns the secret): neither the output nor the JUnit report shows it.
	for _, field := range []string{mutants.LeakCredentialID, mutants.LeakAccountID} {
		t.Run("no secret in the output or the JUnit report: "+field, func(t *testing.T) {
			secret := "wJalrXUtnFEMI/K7MDENG+" + strings.ToLower(rand.Text()[:18])
			endpoint, _, _ := startDriverEnv(t, []string{leakEnv + "=" + field + "=" + secret})
			junit := filepath.Join(t.TempDir(), "report.xml")
			out, err := exec.CommandContext(t.Context(), sanityBin,
				"--endpoint", endpoint, "--junit", junit,
				"--bucket-parameters", "versioning=false", "--access-parameters", "sasExpiry=1h",
			).CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("cosi-sanity against a driver that hides its secret in its %s: %v, want exit code 1\n%s",
					field, err, out)
			}
			report, err := os.ReadFile(junit)
			if err != nil {
				t.Fatal(err)
			}
			for what, b := range map[string][]byte{"the output": out, "the JUnit report": report} {
				for i := 0; i+12 <= len(secret); i++ {
					if bytes.Contains(b, []byte(secret[i:i+12])) {
						t.Fatalf("%s holds %q of the secret %q:\n%s", what, secret[i:i+12], secret, b)
					}
				}
				if !bytes.Contains(b, []byte(sanity.Redacted)) {
					t.Errorf("%s shows no %s: no case quoted the %s, the check tested nothing:\n%s",
						what, sanity.Redacted, field, b)
				}
			}
		})
	}

	t.Run("no driver exits with code 2", func(t *testing.T) {
		cmd := exec.CommandContext(t.Context(), sanityBin,
			"--endpoint", "unix://"+filepath.Join(t.TempDir(), "none.sock"), "--timeout", "1s")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Fatalf("cosi-sanity without a driver: %v, want exit code 2\n%s", err, out)
		}
	})
}
