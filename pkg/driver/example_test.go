package driver_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// A vendor's driver implements cosiproto.IdentityServer and cosiproto.ProvisionerServer; the reference
// driver stands in for it here. In the driver's main, driver.Run does all of this: it serves on
// $COSI_ENDPOINT until SIGTERM. NewServer and Serve are the same steps with the lifetime in the
// caller's hands.
func Example() {
	vendorDriver, err := memory.New(memory.Config{Name: "objectstorage.example.com"})
	if err != nil {
		fmt.Println(err)
		return
	}
	dir, err := os.MkdirTemp("", "driver")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	endpoint := "unix://" + filepath.Join(dir, "cosi.sock")

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	srv, err := driver.NewServer(ctx, driver.Options{
		Endpoint:    endpoint, // in a Pod: leave empty, the sidecar's manifest sets $COSI_ENDPOINT
		Identity:    vendorDriver,
		Provisioner: vendorDriver,
		Registerer:  prometheus.NewRegistry(),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()

	// What the COSI sidecar does first: wait for the driver and ask for its name.
	client, err := driverclient.New(endpoint, driverclient.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	info, err := client.Probe(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("driver:", info.GetName())

	// The SDK refuses a request that breaks the protocol before the driver sees it.
	_, err = client.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{})
	fmt.Println("empty create:", err)

	stop()
	fmt.Println("stopped:", <-served)
	// Output:
	// driver: objectstorage.example.com
	// empty create: rpc error: code = InvalidArgument desc = bucket_id is required
	// stopped: <nil>
}
