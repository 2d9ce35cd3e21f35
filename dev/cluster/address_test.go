package cluster

import (
	"net"
	"slices"
	"testing"
)

// TestNodeAddressIsNoHostNetwork: the node's address (the API server's and the kubelet's) is a
// documentation address on none of this machine's networks, never the address of the default
// route's interface (on 8747ab0 it was: a cloud VM's public address, where the node listened).
func TestNodeAddressIsNoHostNetwork(t *testing.T) {
	ip, err := nodeIP()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(nodeAddresses, ip) {
		t.Fatalf("node address %s: want one of %v", ip, nodeAddresses)
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.Contains(net.ParseIP(ip)) {
			t.Errorf("node address %s is on this machine's network %s", ip, ipn)
		}
	}
}
