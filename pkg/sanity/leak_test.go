package sanity_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kube-cosi/cosi/pkg/driver/memory"
	"github.com/kube-cosi/cosi/pkg/sanity"
	"github.com/kube-cosi/cosi/pkg/sanity/mutants"
)

// newSecret returns a secret shaped like an S3 secret key: 40 characters of base64, '+' and '/'
// included, which URL escaping changes.
func newSecret() string {
	for {
		b := make([]byte, 30)
		_, _ = rand.Read(b)
		if s := base64.StdEncoding.EncodeToString(b); strings.ContainsAny(s, "+/") {
			return s
		}
	}
}

// leaked returns what of secret out shows: the secret, or a run of 12 of its characters (what the
// redactor promises to remove; a shorter run of 40 random characters is no clue).
func leaked(out []byte, secret string) string {
	for i := 0; i+12 <= len(secret); i++ {
		if bytes.Contains(out, []byte(secret[i:i+12])) {
			return secret[i : i+12]
		}
	}
	return ""
}

// report is what cosi-sanity prints for results.
func report(results []sanity.Result) []byte {
	var b bytes.Buffer
	for _, r := range results {
		switch r.Status {
		case sanity.Passed:
			fmt.Fprintf(&b, "PASS %s (%s)\n", r.Name, r.Duration.Round(time.Millisecond))
		case sanity.Failed:
			fmt.Fprintf(&b, "FAIL %s: %s\n", r.Name, r.Message)
		case sanity.Skipped:
			fmt.Fprintf(&b, "SKIP %s: %s\n", r.Name, r.Message)
		}
	}
	return b.Bytes()
}

// TestNoSecretInOutput runs the suite, as cosi-sanity does (no probe), against drivers that hide
// the secret they return in each field they fill (mutants.Leaks), and checks that neither the
// report nor the JUnit XML holds the secret or a part of it: each shows sanity.Redacted instead
// where a case quoted the field.
func TestNoSecretInOutput(t *testing.T) {
	for _, l := range mutants.Leaks() {
		t.Run(l.Field, func(t *testing.T) {
			secret := newSecret()
			mcfg := memory.Config{}
			if l.Memory != nil {
				l.Memory(&mcfg)
			}
			d := newMemory(t, mcfg)
			var logs logBuffer
			cfg := memoryConfig(serve(t, l.New(d, secret), logs.logger()), d, &logs)
			cfg.Probe = sanity.Probe{}
			results, err := sanity.Run(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			out := report(results)
			var junit bytes.Buffer
			if err := sanity.WriteJUnit(&junit, results); err != nil {
				t.Fatal(err)
			}
			for what, b := range map[string][]byte{"the report": out, "the JUnit XML": junit.Bytes()} {
				if part := leaked(b, secret); part != "" {
					t.Errorf("%s holds the secret the driver hid in its %s (%q of %q):\n%s",
						what, l.Field, part, secret, b)
				}
			}
			if l.Quoted && !bytes.Contains(out, []byte(sanity.Redacted)) {
				t.Errorf("no case quoted the %s, so this leak tested nothing: the report shows no %s:\n%s",
					l.Field, sanity.Redacted, out)
			}
		})
	}
}
