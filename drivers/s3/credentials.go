package s3

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// Environment variables and file keys for the admin credentials.
const (
	EnvAccessKeyID     = "COSI_S3_ACCESS_KEY_ID"
	EnvSecretAccessKey = "COSI_S3_SECRET_ACCESS_KEY"
	awsAccessKeyID     = "AWS_ACCESS_KEY_ID"
	awsSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
)

// LoadCredentials reads the admin credentials, never from a command-line flag (flags are visible
// in the process list). With file set it reads KEY=VALUE lines (as in an env file or a mounted
// Secret rendered so) with the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the COSI_S3_
// names); otherwise the environment variables COSI_S3_ACCESS_KEY_ID and COSI_S3_SECRET_ACCESS_KEY,
// then AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. Errors name what is missing, never a value.
func LoadCredentials(file string, getenv func(string) string) (aws.CredentialsProvider, error) {
	values := map[string]string{}
	source := "the environment"
	if file != "" {
		source = file
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("reading the admin credentials: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
			if !ok {
				return nil, fmt.Errorf("%s line %d: want KEY=VALUE", file, n)
			}
			values[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"'`)
		}
		getenv = func(k string) string { return values[k] }
	}
	id, secret := getenv(EnvAccessKeyID), getenv(EnvSecretAccessKey)
	if id == "" && secret == "" {
		id, secret = getenv(awsAccessKeyID), getenv(awsSecretAccessKey)
	}
	if id == "" || secret == "" {
		return nil, fmt.Errorf("no admin credentials in %s: set %s and %s (or %s and %s)", source,
			EnvAccessKeyID, EnvSecretAccessKey, awsAccessKeyID, awsSecretAccessKey)
	}
	return credentials.NewStaticCredentialsProvider(id, secret, ""), nil
}
