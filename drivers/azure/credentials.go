package azure

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/kube-cosi/cosi/pkg/driver"
)

// Environment variables and file keys of the storage account's name and Shared Key: the names
// the Azure CLI and the SDKs' samples use.
const (
	EnvAccount = "AZURE_STORAGE_ACCOUNT"
	EnvKey     = "AZURE_STORAGE_KEY"
)

// CredentialsCheckInterval is how often, at most, the driver looks whether its credentials file
// changed, so that a rotated account key is used within about a second.
const CredentialsCheckInterval = time.Second

// Credentials are the storage account's name and Shared Key, which the driver signs its own
// requests and the SAS tokens with. From a file, they are read again when it changes.
type Credentials struct {
	cred *azblob.SharedKeyCredential
	path string

	mu      sync.Mutex
	read    os.FileInfo // the file the key came from
	checked time.Time
}

// StaticCredentials are an account's name and Shared Key (base64) that never change.
func StaticCredentials(account, key string) (*Credentials, error) {
	cred, err := azblob.NewSharedKeyCredential(account, key)
	if err != nil {
		return nil, fmt.Errorf("the %s is not base64", EnvKey)
	}
	return &Credentials{cred: cred}, nil
}

// LoadCredentials reads the account's name and Shared Key, never from a command-line flag (flags
// are visible in the process list). With file set it reads KEY=VALUE lines (an env file, or a
// mounted Secret rendered so) with the keys AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY, and
// reads the file again whenever it changes (a rotated key), so the driver needs no restart; the
// account must stay the same. Otherwise the environment variables, once. Errors name what is
// missing, never a value.
func LoadCredentials(file string, getenv func(string) string) (*Credentials, error) {
	if file == "" {
		account, key, err := pickCredentials(getenv, "the environment")
		if err != nil {
			return nil, err
		}
		return StaticCredentials(account, key)
	}
	account, key, err := parseCredentialsFile(file)
	if err != nil {
		return nil, &credentialsError{err}
	}
	c, err := StaticCredentials(account, key)
	if err != nil {
		return nil, &credentialsError{fmt.Errorf("%s: %w", file, err)}
	}
	c.path = file
	c.read, err = os.Stat(file)
	if err != nil {
		return nil, &credentialsError{err}
	}
	c.checked = time.Now()
	return c, nil
}

// Account is the storage account's name.
func (c *Credentials) Account() string { return c.cred.AccountName() }

// current returns the Shared Key credential, with the key read again from the file when it
// changed since (compared by identity, as a Kubernetes Secret volume swaps in a new file through a
// symlink, modification time and size; one stat per CredentialsCheckInterval).
func (c *Credentials) current() (*azblob.SharedKeyCredential, error) {
	if c.path == "" {
		return c.cred, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.checked) < CredentialsCheckInterval {
		return c.cred, nil
	}
	info, err := os.Stat(c.path)
	if err != nil {
		return nil, &credentialsError{err}
	}
	if driver.FileChanged(c.read, info) {
		account, key, err := parseCredentialsFile(c.path)
		if err != nil {
			// c.read stays: the file is looked at again on the next call (it may be mid-write).
			return nil, &credentialsError{err}
		}
		if account != c.cred.AccountName() {
			return nil, &credentialsError{fmt.Errorf("%s names another storage account than the driver started "+
				"with: restart the driver to change accounts", c.path)}
		}
		if err := c.cred.SetAccountKey(key); err != nil {
			return nil, &credentialsError{fmt.Errorf("%s: the %s is not base64", c.path, EnvKey)}
		}
		c.read = info
	}
	c.checked = time.Now()
	return c.cred, nil
}

func pickCredentials(getenv func(string) string, source string) (account, key string, err error) {
	account, key = getenv(EnvAccount), getenv(EnvKey)
	if account == "" || key == "" {
		return "", "", fmt.Errorf("no storage account credentials in %s: set %s and %s", source, EnvAccount, EnvKey)
	}
	return account, key, nil
}

// credentialsError is a credentials file that cannot be read or parsed. Its message names the
// file and the line, never a value.
type credentialsError struct{ err error }

func (e *credentialsError) Error() string { return "reading the account credentials: " + e.err.Error() }
func (e *credentialsError) Unwrap() error { return e.err }

func parseCredentialsFile(file string) (account, key string, err error) {
	values, err := driver.ReadEnvFile(file)
	if err != nil {
		return "", "", err
	}
	return pickCredentials(func(k string) string { return values[k] }, file)
}
