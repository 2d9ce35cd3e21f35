package main

import (
	"testing"

	"github.com/kube-cosi/cosi/dev/cluster"
)

// The flags make cluster prints for Helm give both charts' Pods the API server's address as
// strings (--set-string: a port given with --set would render as a number, which an env value
// cannot be). The cluster tier gives the charts the same values in a values file (helmValues).
func TestHelmEnvFlags(t *testing.T) {
	got := helmEnvFlags(&cluster.Node{IP: "203.0.113.254", APIServerPort: 36443})
	want := "--set-string extraEnv[0].name=KUBERNETES_SERVICE_HOST,extraEnv[0].value=203.0.113.254," +
		"extraEnv[1].name=KUBERNETES_SERVICE_PORT,extraEnv[1].value=36443"
	if got != want {
		t.Errorf("helmEnvFlags:\n got %s\nwant %s", got, want)
	}
}
