package controller

import (
	"testing"

	"github.com/kube-cosi/cosi/internal/sidecar"
)

// The controller looks for the Lease that the sidecars of a driver hold.
func TestSidecarLeaseName(t *testing.T) {
	for _, d := range []string{"memory.cosi.io", "S3.Example.COM"} {
		if got, want := sidecarLeaseName(d), sidecar.LeaseName(d); got != want {
			t.Errorf("sidecarLeaseName(%q) = %q, the sidecar's Lease is %q", d, got, want)
		}
	}
}
