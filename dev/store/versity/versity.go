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
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kube-cosi/cosi/dev/process"
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
	// procs are the IAM service and the gateway, in the order they start.
	procs []*process.Process
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
	iamAddr, s3Addr := opts.IAMAddress, opts.S3Address
	for _, a := range []*string{&iamAddr, &s3Addr} {
		if *a == "" {
			if *a, err = process.FreeAddress(); err != nil {
				return nil, errors.Join(err, s.Stop())
			}
		}
	}
	s.IAMEndpoint, s.S3Endpoint = "http://"+iamAddr, "http://"+s3Addr
	socket := filepath.Join(s.socketDir, "iam.sock")

	s.procs = []*process.Process{
		s.process(opts.Binary, "iam", s.IAMEndpoint, "-p", iamAddr, "--health", "/healthz", "iam",
			"--dir", filepath.Join(opts.Dir, "iam"), "--private-ports", socket),
		s.process(opts.Binary, "s3", s.S3Endpoint, "-p", s3Addr, "--health", "/healthz",
			"--iam-standalone-endpoint", socket, "posix", "--versioning-dir", filepath.Join(opts.Dir, "versions"),
			filepath.Join(opts.Dir, "data")),
	}
	for _, p := range s.procs {
		if err := p.Start(ctx); err != nil {
			return nil, errors.Join(fmt.Errorf("versitygw: %w", err), s.Stop())
		}
	}
	return s, nil
}

// process is versitygw serving name ("iam" or "s3"), ready when endpoint/healthz answers.
func (s *Store) process(binary, name, endpoint string, args ...string) *process.Process {
	return &process.Process{
		Name:   "versitygw " + name,
		Binary: binary,
		Args:   args,
		Log:    s.LogFile(name),
		// The root credentials go through the environment, not the command line, which every
		// user of the machine can read.
		Env: append(
			os.Environ(),
			"ROOT_ACCESS_KEY_ID="+s.RootAccessKey,
			"ROOT_SECRET_ACCESS_KEY="+s.RootSecretKey,
			"VGW_QUIET=true",
		),
		Ready:        process.HTTPReady(endpoint + "/healthz"),
		ReadyTimeout: 30 * time.Second,
		StopTimeout:  10 * time.Second,
		OwnGroup:     true,
	}
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

// Stop stops the gateway, then the IAM service (SIGTERM, SIGKILL after 10 seconds), and keeps Dir.
func (s *Store) Stop() error {
	var errs []error
	for i := len(s.procs) - 1; i >= 0; i-- {
		errs = append(errs, s.procs[i].Stop())
	}
	s.procs = nil
	if s.socketDir != "" {
		errs = append(errs, os.RemoveAll(s.socketDir))
	}
	return errors.Join(errs...)
}
