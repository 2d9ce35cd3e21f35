// Command cosi-local runs COSI on this machine (make run): etcd, kube-apiserver and
// kube-controller-manager, the CRDs and RBAC, the Versity S3 gateway as the object store, and
// cosi-controller, cosi-sidecar and cosi-driver-s3 as processes (with --driver azure: Azurite and
// cosi-driver-azure). It then applies the demo from examples/ (classes, a BucketClaim, a
// BucketAccess), shows the Secret COSI wrote, uses its credentials to put and read back an
// object, and stays up until Ctrl-C. Everything lives under
// --dir; a second start reuses it. The logic is dev/localenv's Run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/internal/cmdutil/version"
)

func main() {
	opts := localenv.RunOptions{Options: localenv.MakeRunOptions()}
	flag.StringVar(&opts.Dir, "dir", ".local", "directory for all data and logs (kept across runs)")
	flag.StringVar(&opts.RepoRoot, "repo", ".", "the repository (CRDs, RBAC, examples)")
	flag.StringVar(&opts.BinDir, "bin", "bin", "directory of the binaries (make build)")
	flag.StringVar(&opts.S3Address, "s3-address", "127.0.0.1:9070", "address of the S3 endpoint")
	flag.StringVar(&opts.IAMAddress, "iam-address", "127.0.0.1:9071", "address of the IAM endpoint")
	flag.StringVar(&opts.AzureAddress, "azure-address", "127.0.0.1:9072",
		"address of Azurite's Blob service (--driver azure)")
	flag.Func("driver", "driver: s3 (default), or azure (Azure Blob against Azurite; make azurite installs it)",
		func(v string) error {
			switch localenv.Driver(v) {
			case localenv.DriverS3, localenv.DriverAzure:
				opts.Driver = localenv.Driver(v)
				return nil
			}
			return fmt.Errorf("%q is neither s3 nor azure", v)
		})
	flag.Func(
		"store",
		"object store: versity (default), or rgw (a throwaway Ceph RGW whose data does not survive a restart; "+
			"make ceph installs Ceph)",
		func(v string) error {
			opts.Store = localenv.Store(v)
			return nil
		},
	)
	flag.BoolVar(&opts.ControllerManager, "controller-manager", true,
		"run kube-controller-manager: owner references cascade and deleted namespaces finish deleting")
	flag.StringVar(&opts.IssuerAddress, "issuer-address", "",
		"publish the ServiceAccount issuer on port 443 of this address of the machine's, for every host that "+
			"reaches it (default: an address of a network namespace of its own, which no other host reaches)")
	flag.BoolVar(&opts.Demo, "demo", true, "apply the demo from examples/ and use its credentials")
	flag.BoolVar(&opts.ExitAfterDemo, "exit-after-demo", false, "stop after the demo instead of waiting for Ctrl-C")
	version.AddFlag(flag.CommandLine)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := localenv.Run(ctx, opts, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "cosi-local:", err)
		stop()
		os.Exit(1)
	}
}
