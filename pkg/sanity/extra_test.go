package sanity_test

import (
	"regexp"
	"testing"

	"github.com/go-logr/logr"

	"github.com/kube-cosi/cosi/pkg/driver/memory"
	"github.com/kube-cosi/cosi/pkg/sanity"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// TestExtraCases: a vendor adds cases of their own to the suite (Config.ExtraCases); they run
// after the suite's cases, through the same calls and error-scheme checks, and report like them.
func TestExtraCases(t *testing.T) {
	d := newMemory(t, memory.Config{})
	endpoint := serve(t, d, logr.Discard())
	var created string
	extra := []sanity.Case{
		sanity.NewCase("Vendor/creates a bucket through the driver", func(t *sanity.T) {
			created = t.Name("b")
			_, err := t.Provisioner().DriverCreateBucket(t.Context(),
				&cosiproto.DriverCreateBucketRequest{BucketId: created})
			if err != nil {
				t.Fatalf("DriverCreateBucket: %v", err)
			}
			t.Cleanup(func() {
				_, _ = t.Provisioner().DriverDeleteBucket(t.Context(), &cosiproto.DriverDeleteBucketRequest{BucketId: created})
			})
			if info, err := t.Identity().DriverGetInfo(t.Context(), &cosiproto.DriverGetInfoRequest{}); err != nil ||
				info.GetName() != memory.DefaultName {
				t.Errorf("DriverGetInfo: %v, %v", info, err)
			}
		}),
		sanity.NewCase("Vendor/fails", func(t *sanity.T) { t.Errorf("vendor failure %d", 1) }),
		sanity.NewCase("Vendor/skips", func(t *sanity.T) { t.Skipf("vendor skip %d", 2) }),
	}
	results := run(t, sanity.Config{Endpoint: endpoint, ExtraCases: extra})
	if len(results) != len(sanity.Cases())+len(sanity.Properties())+len(extra) {
		t.Errorf("%d results for %d cases and %d extra cases", len(results), len(sanity.Cases()), len(extra))
	}
	for name, want := range map[string]sanity.Result{
		"Vendor/creates a bucket through the driver": {Status: sanity.Passed},
		"Vendor/fails": {Status: sanity.Failed, Message: "vendor failure 1"},
		"Vendor/skips": {Status: sanity.Skipped, Message: "vendor skip 2"},
	} {
		if got := results[name]; got.Status != want.Status || got.Message != want.Message {
			t.Errorf("%s: %s %q, want %s %q", name, got.Status, got.Message, want.Status, want.Message)
		}
	}
	if created == "" || d.Backend().BucketExists(created) {
		t.Errorf("the extra case created bucket %q and its cleanup should have deleted it", created)
	}

	// Config.Run selects extra cases like the suite's.
	results = run(t, sanity.Config{Endpoint: endpoint, ExtraCases: extra, Run: regexp.MustCompile("^Vendor/skips$")})
	if len(results) != 1 || results["Vendor/skips"].Status != sanity.Skipped {
		t.Errorf("Run selected %v, want only Vendor/skips", results)
	}

	// A name the suite uses already, or none, is a configuration error.
	for _, c := range []sanity.Case{
		sanity.NewCase(sanity.Cases()[0].Name, func(*sanity.T) {}),
		sanity.NewCase("", func(*sanity.T) {}),
		sanity.NewCase("Vendor/no function", nil),
	} {
		if _, err := sanity.Run(t.Context(), sanity.Config{Endpoint: endpoint, ExtraCases: []sanity.Case{c}}); err == nil {
			t.Errorf("extra case %q: Run returned no error", c.Name)
		}
	}
}
