package localenv

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kube-cosi/cosi/dev/issuer"
	"github.com/kube-cosi/cosi/dev/process"
)

// make run (Run with cosi-local's options) sets up ServiceAccount authentication: it publishes the
// API server's issuer while it runs, the S3 driver serves authenticationType ServiceAccount, and
// the demo's keyless access works: a token of its ServiceAccount, with no key anywhere, puts and
// reads an object. A second make run on the same data keeps the issuer, so the role the first
// made still opens the bucket to the ServiceAccount's new tokens.
func TestRunServiceAccount(t *testing.T) {
	if f, err := issuer.New(); errors.Is(err, issuer.ErrUnavailable) {
		t.Skipf("no ServiceAccount issuer the IAM service would fetch can be published here: %v", err)
	} else if err == nil {
		_ = f.Close()
	}
	repo, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	opts := RunOptions{Options: MakeRunOptions(), Demo: true, ExitAfterDemo: true}
	opts.Dir, opts.RepoRoot, opts.BinDir = t.TempDir(), repo, filepath.Join(repo, "bin")
	// Fixed across the two runs, as cosi-local's are: the Secrets name the store's endpoints.
	if err := process.FreeAddresses(&opts.S3Address, &opts.IAMAddress); err != nil {
		t.Fatal(err)
	}
	issuerLine := regexp.MustCompile(`ServiceAccount authentication: issuer (https://\S+) published`)
	var first string
	for run := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		var out bytes.Buffer
		err := Run(ctx, opts, &out, &out)
		cancel()
		if err != nil {
			t.Fatalf("run %d: %v\n%s", run+1, err, out.String())
		}
		if run == 1 {
			t.Logf("run 2:\n%s", out.String())
		}
		m := issuerLine.FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("run %d does not say where the issuer is published:\n%s", run+1, out.String())
		}
		if run == 0 {
			first = m[1]
		} else if m[1] != first {
			t.Errorf("run 2 publishes the issuer %s, run 1 %s", m[1], first)
		}
		for _, want := range []string{
			"AWS_ROLE_ARN",
			"✓ with a token of ServiceAccount cosi-demo/photos-app and no key: put s3://",
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("run %d: no %q in its output:\n%s", run+1, want, out.String())
			}
		}
		// The keyless Secret, as the demo prints it: no key.
		_, secret, _ := strings.Cut(out.String(), "Secret cosi-demo/photos-app-creds")
		secret, _, _ = strings.Cut(secret, "\n\n")
		if secret == "" || strings.Contains(secret, "AWS_ACCESS_KEY_ID") ||
			strings.Contains(secret, "AWS_SECRET_ACCESS_KEY") {
			t.Errorf("run %d: the Secret of the keyless access, as printed: %q", run+1, secret)
		}
	}
}
