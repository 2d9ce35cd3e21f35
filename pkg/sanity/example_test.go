package sanity_test

import (
	"testing"
	"time"

	"github.com/kube-cosi/cosi/pkg/sanity"
)

// A vendor's Go test runs the conformance suite against their driver, started by the test (or by
// the CI job) on a socket: each case becomes a subtest, so `go test -run` selects cases, failures
// fail and cases that need something not configured are skipped with the reason. The cosi-sanity
// command runs the same suite from a shell, with JUnit output.
func ExampleTest() {
	// In the vendor's driver_test.go:
	_ = func(t *testing.T) {
		sanity.Test(t, sanity.Config{
			Endpoint: "unix:///tmp/vendor-driver/cosi.sock",
			Timeout:  10 * time.Second,
			// Parameters the driver accepts, refuses with InvalidArgument, and accepts but with
			// a different meaning (re-creating a bucket with them must be AlreadyExists).
			BucketParameters:             map[string]string{"storageClass": "STANDARD"},
			InvalidBucketParameters:      map[string]string{"storageClass": "no-such-class"},
			IncompatibleBucketParameters: map[string]string{"storageClass": "GLACIER"},
			// Optional: a Probe that looks at the back-end directly, so that the suite can check
			// that a bucket really exists and a read-only key really cannot write.
		})
	}
}
