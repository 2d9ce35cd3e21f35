package s3

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/kube-cosi/cosi/pkg/driver"
)

// Environment variables and file keys for the admin credentials.
const (
	EnvAccessKeyID     = "COSI_S3_ACCESS_KEY_ID"
	EnvSecretAccessKey = "COSI_S3_SECRET_ACCESS_KEY"
	awsAccessKeyID     = "AWS_ACCESS_KEY_ID"
	awsSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
)

// CredentialsCheckInterval is how often, at most, the driver looks whether its credentials file
// changed. The SDK clients cache credentials until they expire; credentials from the file
// expire after this interval, so that a rotated key is used within about a second.
const CredentialsCheckInterval = time.Second

// LoadCredentials reads the admin credentials, never from a command-line flag (flags are visible
// in the process list). With file set it reads KEY=VALUE lines (as in an env file or a mounted
// Secret rendered so) with the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the COSI_S3_
// names), and reads the file again whenever it changes (a rotated key, a Secret update), so the
// driver does not need a restart; otherwise the environment variables COSI_S3_ACCESS_KEY_ID and
// COSI_S3_SECRET_ACCESS_KEY, then AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, once. Errors name
// what is missing, never a value.
func LoadCredentials(file string, getenv func(string) string) (aws.CredentialsProvider, error) {
	if file == "" {
		id, secret, err := pickCredentials(getenv, "the environment")
		if err != nil {
			return nil, err
		}
		return credentials.NewStaticCredentialsProvider(id, secret, ""), nil
	}
	f := &fileCredentials{path: file}
	if _, err := f.Retrieve(context.Background()); err != nil {
		return nil, err
	}
	return f, nil
}

func pickCredentials(getenv func(string) string, source string) (id, secret string, err error) {
	id, secret = getenv(EnvAccessKeyID), getenv(EnvSecretAccessKey)
	if id == "" && secret == "" {
		id, secret = getenv(awsAccessKeyID), getenv(awsSecretAccessKey)
	}
	if id == "" || secret == "" {
		return "", "", fmt.Errorf("no admin credentials in %s: set %s and %s (or %s and %s)", source,
			EnvAccessKeyID, EnvSecretAccessKey, awsAccessKeyID, awsSecretAccessKey)
	}
	return id, secret, nil
}

// credentialsError is a credentials file that cannot be read or parsed. Its message names the
// file and the line, never a value.
type credentialsError struct{ err error }

func (e *credentialsError) Error() string { return "reading the admin credentials: " + e.err.Error() }
func (e *credentialsError) Unwrap() error { return e.err }

// fileCredentials are the admin credentials in a file, read again when the file changes. The
// file is compared by identity (a Kubernetes Secret volume swaps in a new file through a
// symlink), modification time and size, with one stat per CredentialsCheckInterval.
type fileCredentials struct {
	path string

	mu    sync.Mutex
	creds aws.Credentials
	read  os.FileInfo // the file the credentials came from
}

// Retrieve implements aws.CredentialsProvider.
func (f *fileCredentials) Retrieve(context.Context) (aws.Credentials, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	info, err := os.Stat(f.path)
	if err != nil {
		return aws.Credentials{}, &credentialsError{err}
	}
	if driver.FileChanged(f.read, info) {
		id, secret, err := parseCredentialsFile(f.path)
		if err != nil {
			// Keep f.read: the file is looked at again on the next call (it may be mid-write).
			return aws.Credentials{}, &credentialsError{err}
		}
		f.creds = aws.Credentials{AccessKeyID: id, SecretAccessKey: secret, Source: "cosi-credentials-file"}
		f.read = info
	}
	c := f.creds
	c.CanExpire, c.Expires = true, time.Now().Add(CredentialsCheckInterval)
	return c, nil
}

func parseCredentialsFile(file string) (id, secret string, err error) {
	values, err := driver.ReadEnvFile(file)
	if err != nil {
		return "", "", err
	}
	return pickCredentials(func(k string) string { return values[k] }, file)
}
