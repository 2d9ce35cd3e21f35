// Package azurite runs Azurite, Microsoft's Azure Storage emulator (MIT, the npm package azurite,
// installed into bin/azurite by make azurite), as a child process serving the Blob service on
// 127.0.0.1: a real Azure Blob endpoint that checks Shared Key and SAS signatures, SAS
// permissions and stored access policies, for the Azure driver's tests and the local environment.
package azurite

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/kube-cosi/cosi/dev/process"
)

// DefaultAccount is the storage account Azurite serves unless Options.Account names another.
const DefaultAccount = "cosilocal"

// Binary returns the path of azurite-blob under binDir, where make azurite installs it.
func Binary(binDir string) string {
	return filepath.Join(binDir, "azurite", "node_modules", ".bin", "azurite-blob")
}

// Installed reports whether Azurite's blob service and Node.js, which runs it, are installed.
// It returns why not, naming the command that installs them.
func Installed(binary string) error {
	if _, err := os.Stat(binary); err != nil {
		return fmt.Errorf("azurite-blob not found at %s (make azurite installs Azurite from npm)", binary)
	}
	if _, err := exec.LookPath("node"); err != nil {
		return errors.New("node not found on PATH (make azurite installs Node.js from Debian's packages)")
	}
	return nil
}

// Options configure an emulator.
type Options struct {
	// Binary is azurite-blob (see Binary). Required.
	Binary string
	// Dir holds the blob data (Dir/data), the account key (Dir/account.env) and the log
	// (Dir/log/azurite.log); it is kept, so an emulator started again on the same Dir has the
	// same account, containers and blobs.
	Dir string
	// Address is host:port to listen on; empty means a free port on 127.0.0.1.
	Address string
	// Account is the storage account's name; empty means DefaultAccount.
	Account string
}

// Emulator is a running Azurite Blob service.
type Emulator struct {
	// Endpoint is the Blob service URL of the account, path-style as Azurite serves it:
	// http://127.0.0.1:port/<account>.
	Endpoint string
	// Account and Key are the storage account's name and its Shared Key (base64).
	Account, Key string
	// Dir is the emulator's directory.
	Dir string

	proc *process.Process
}

// Start starts Azurite's Blob service and waits until it answers.
func Start(ctx context.Context, opts Options) (*Emulator, error) {
	if err := Installed(opts.Binary); err != nil {
		return nil, err
	}
	for _, d := range []string{"data", "log"} {
		if err := os.MkdirAll(filepath.Join(opts.Dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	e := &Emulator{Dir: opts.Dir, Account: opts.Account}
	if e.Account == "" {
		e.Account = DefaultAccount
	}
	if err := e.loadOrCreateKey(); err != nil {
		return nil, err
	}
	addr := opts.Address
	if addr == "" {
		var err error
		if addr, err = process.FreeAddress(); err != nil {
			return nil, err
		}
	}
	host, port, ok := strings.Cut(addr, ":")
	if !ok {
		return nil, fmt.Errorf("azurite: address %q is not host:port", addr)
	}
	e.Endpoint = "http://" + addr + "/" + e.Account
	e.proc = &process.Process{
		Name:   "azurite-blob",
		Binary: opts.Binary,
		Args: []string{
			"--blobHost", host, "--blobPort", port, "--location", filepath.Join(opts.Dir, "data"),
			// Azurite refuses requests whose x-ms-version is newer than the one it was released
			// with; the SDK's is newer than 3.37.0's. The requests are otherwise the same.
			"--skipApiVersionCheck",
			// Azurite sends telemetry to Microsoft unless told not to.
			"--disableTelemetry",
		},
		Log: e.LogFile(),
		// The account key goes through the environment, not the command line, which every user
		// of the machine can read.
		Env:          append(os.Environ(), "AZURITE_ACCOUNTS="+e.Account+":"+e.Key),
		Ready:        answers("http://" + addr + "/"),
		ReadyTimeout: 60 * time.Second,
		StopTimeout:  10 * time.Second,
		OwnGroup:     true,
	}
	if err := e.proc.Start(ctx); err != nil {
		return nil, fmt.Errorf("azurite: %w", err)
	}
	return e, nil
}

// answers is a Ready probe: url answers HTTP at all (Azurite answers an unsigned request with an
// error status, which is enough to know it serves).
func answers(url string) func(context.Context) bool {
	return func(ctx context.Context) bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return true
	}
}

// Environment keys of AccountEnvFile, the names the Azure CLI and SDK samples use.
const (
	EnvAccount = "AZURE_STORAGE_ACCOUNT"
	EnvKey     = "AZURE_STORAGE_KEY"
)

// loadOrCreateKey reads the account's key from Dir/account.env, or writes a new random one there
// (mode 0600). Azurite's own well-known development key is not used: a test that passes with a
// key everyone knows proves less.
func (e *Emulator) loadOrCreateKey() error {
	path := e.AccountEnvFile()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		key := make([]byte, 64)
		_, _ = rand.Read(key)
		e.Key = base64.StdEncoding.EncodeToString(key)
		return os.WriteFile(path, []byte(EnvAccount+"="+e.Account+"\n"+EnvKey+"="+e.Key+"\n"), 0o600)
	}
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case EnvAccount:
			if v != e.Account {
				return fmt.Errorf("%s is for account %q, not %q", path, v, e.Account)
			}
		case EnvKey:
			e.Key = v
		}
	}
	if e.Key == "" {
		return fmt.Errorf("%s: no %s", path, EnvKey)
	}
	return nil
}

// AccountEnvFile is the file holding the account's name and key as AZURE_STORAGE_ACCOUNT=... and
// AZURE_STORAGE_KEY=... lines (the Azure driver's --credentials-file).
func (e *Emulator) AccountEnvFile() string { return filepath.Join(e.Dir, "account.env") }

// LogFile is Azurite's log.
func (e *Emulator) LogFile() string { return filepath.Join(e.Dir, "log", "azurite.log") }

// Stop stops Azurite (SIGTERM, SIGKILL after 10 seconds) and keeps Dir.
func (e *Emulator) Stop() error {
	if e == nil {
		return nil
	}
	return e.proc.Stop()
}
