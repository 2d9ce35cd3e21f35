// Package versity runs the Versity S3 gateway (Apache-2.0, built by this project from the Go
// module proxy: make versitygw) as two child processes: its standalone IAM service, which speaks
// the AWS IAM API, and the S3 gateway on a POSIX directory, which asks the IAM service to
// authenticate every request and to evaluate each user's identity policies. That is a real
// object store that enforces SigV4 and per-user policies, for the S3 driver's tests, the
// end-to-end suite and the local environment.
package versity

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Options configure a store.
type Options struct {
	// Binary is the versitygw binary. Required.
	Binary string
	// Dir holds the IAM database (Dir/iam), the buckets (Dir/data), object versions
	// (Dir/versions) and the logs (Dir/log); it is kept, so
	// a store started again on the same Dir has the same users and buckets.
	Dir string
	// S3Address and IAMAddress are host:port to listen on; empty means a free port on 127.0.0.1.
	S3Address, IAMAddress string
	// RootAccessKey and RootSecretKey are the root credentials. Empty means: read them from
	// Dir/root.env, or create random ones there (mode 0600).
	RootAccessKey, RootSecretKey string
}

// Store is a running Versity gateway.
type Store struct {
	// S3Endpoint and IAMEndpoint are http:// URLs.
	S3Endpoint, IAMEndpoint string
	// RootAccessKey and RootSecretKey are the root (admin) credentials.
	RootAccessKey, RootSecretKey string
	// Dir is the store's directory.
	Dir string

	socketDir string
	procs     []*exec.Cmd
	exited    []chan struct{}
}

// Start starts the IAM service and the gateway and waits until both answer.
func Start(ctx context.Context, opts Options) (*Store, error) {
	if _, err := os.Stat(opts.Binary); err != nil {
		return nil, fmt.Errorf("versitygw binary: %w (build it with: make versitygw)", err)
	}
	for _, d := range []string{"iam", "data", "versions", "log"} {
		if err := os.MkdirAll(filepath.Join(opts.Dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	s := &Store{Dir: opts.Dir, RootAccessKey: opts.RootAccessKey, RootSecretKey: opts.RootSecretKey}
	if s.RootAccessKey == "" {
		if err := s.loadOrCreateRoot(); err != nil {
			return nil, err
		}
	}
	var err error
	// A Unix socket path is limited to 108 bytes: keep it short, outside Dir.
	if s.socketDir, err = os.MkdirTemp("", "vgw"); err != nil {
		return nil, err
	}
	iamAddr, err := address(opts.IAMAddress)
	if err != nil {
		return nil, err
	}
	s3Addr, err := address(opts.S3Address)
	if err != nil {
		return nil, err
	}
	s.IAMEndpoint, s.S3Endpoint = "http://"+iamAddr, "http://"+s3Addr
	socket := filepath.Join(s.socketDir, "iam.sock")

	if err := s.start(ctx, opts.Binary, "iam", "-p", iamAddr, "--health", "/healthz", "iam",
		"--dir", filepath.Join(opts.Dir, "iam"), "--private-ports", socket); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	if err := s.wait(ctx, s.IAMEndpoint+"/healthz", 0); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	if err := s.start(ctx, opts.Binary, "s3", "-p", s3Addr, "--health", "/healthz",
		"--iam-standalone-endpoint", socket, "posix", "--versioning-dir", filepath.Join(opts.Dir, "versions"),
		filepath.Join(opts.Dir, "data")); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	if err := s.wait(ctx, s.S3Endpoint+"/healthz", 1); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	return s, nil
}

// loadOrCreateRoot reads Dir/root.env or writes new random root credentials there.
func (s *Store) loadOrCreateRoot() error {
	path := filepath.Join(s.Dir, "root.env")
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		s.RootAccessKey = "ROOT" + strings.ToUpper(rand.Text()[:16])
		s.RootSecretKey = rand.Text() + rand.Text()
		content := fmt.Sprintf("AWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\n", s.RootAccessKey, s.RootSecretKey)
		return os.WriteFile(path, []byte(content), 0o600)
	}
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "AWS_ACCESS_KEY_ID":
			s.RootAccessKey = v
		case "AWS_SECRET_ACCESS_KEY":
			s.RootSecretKey = v
		}
	}
	if s.RootAccessKey == "" || s.RootSecretKey == "" {
		return fmt.Errorf("%s: no AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY", path)
	}
	return nil
}

// RootEnvFile is the file holding the root credentials as AWS_ACCESS_KEY_ID=... lines.
func (s *Store) RootEnvFile() string { return filepath.Join(s.Dir, "root.env") }

// LogFile returns the log of "iam" or "s3".
func (s *Store) LogFile(name string) string { return filepath.Join(s.Dir, "log", name+".log") }

func (s *Store) start(_ context.Context, binary, name string, args ...string) error {
	log, err := os.OpenFile(s.LogFile(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(binary, args...)
	// The root credentials go through the environment, not the command line, which every user
	// of the machine can read.
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+s.RootAccessKey, "ROOT_SECRET_ACCESS_KEY="+s.RootSecretKey, "VGW_QUIET=true")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting versitygw %s: %w", name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.procs = append(s.procs, cmd)
	s.exited = append(s.exited, exited)
	return nil
}

// wait polls url until it answers 200, the process i exits, or 30 seconds pass.
func (s *Store) wait(ctx context.Context, url string, i int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited[i]:
			return fmt.Errorf("versitygw exited before answering on %s; see %s", url, s.Dir+"/log")
		case <-ctx.Done():
			return fmt.Errorf("versitygw did not answer on %s: %w", url, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops the gateway, then the IAM service (SIGTERM, SIGKILL after 10 seconds), and keeps Dir.
func (s *Store) Stop() error {
	var errs []error
	for i := len(s.procs) - 1; i >= 0; i-- {
		_ = s.procs[i].Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited[i]:
		case <-time.After(10 * time.Second):
			_ = s.procs[i].Process.Kill()
			<-s.exited[i]
			errs = append(errs, fmt.Errorf("versitygw did not stop on SIGTERM within 10s"))
		}
	}
	s.procs, s.exited = nil, nil
	if s.socketDir != "" {
		errs = append(errs, os.RemoveAll(s.socketDir))
	}
	return errors.Join(errs...)
}

// address returns addr, or a free 127.0.0.1 port when addr is empty.
func address(addr string) (string, error) {
	if addr != "" {
		return addr, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
