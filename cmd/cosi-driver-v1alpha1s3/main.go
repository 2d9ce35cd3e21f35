// Command cosi-driver-v1alpha1s3 runs the reference COSI v1alpha1 driver (drivers/v1alpha1s3) on
// $COSI_ENDPOINT: an S3 driver that speaks only the cosi.v1alpha1 protocol, to run behind the
// sidecar's v1alpha1 adapter. See docs/v1alpha1-drivers.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/drivers/v1alpha1s3"
	"github.com/kube-cosi/cosi/pkg/driver"
)

func main() {
	var (
		cfg      s3.Config
		endpoint = flag.String(
			"endpoint",
			os.Getenv(driver.EndpointEnv),
			"unix:///path/to/driver.sock to serve on (default $COSI_ENDPOINT)",
		)
		iamEndpoint     = flag.String("iam-endpoint", "", "IAM API endpoint URL (empty: AWS's)")
		credentialsFile = flag.String(
			"credentials-file",
			"",
			"file with the admin credentials as AWS_ACCESS_KEY_ID=... and AWS_SECRET_ACCESS_KEY=... lines "+
				"(default: the environment)",
		)
		timeout   = flag.Duration("backend-timeout", 30*time.Second, "timeout of each call to the object store")
		verbosity = flag.Int("v", 0, "log verbosity")
	)
	flag.StringVar(&cfg.Name, "name", "v1alpha1.s3.objectstorage.k8s.io", "driver name")
	flag.StringVar(&cfg.Endpoint, "s3-endpoint", "", "S3 endpoint URL the driver uses (required)")
	flag.StringVar(
		&cfg.PublicEndpoint,
		"public-s3-endpoint",
		"",
		"S3 endpoint URL given to workloads (default --s3-endpoint)",
	)
	flag.StringVar(&cfg.Region, "region", "us-east-1", "default region of buckets")
	flag.Parse()

	log := logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.Level(-*verbosity)}))
	cfg.Logger = log
	if err := run(cfg, *endpoint, *iamEndpoint, *credentialsFile, *timeout); err != nil {
		log.Error(err, "driver failed")
		os.Exit(1)
	}
}

func run(cfg s3.Config, endpoint, iamEndpoint, credentialsFile string, timeout time.Duration) error {
	if cfg.Endpoint == "" {
		return fmt.Errorf("--s3-endpoint is required")
	}
	creds, err := s3.LoadCredentials(credentialsFile, os.Getenv)
	if err != nil {
		return err
	}
	cfg.Credentials = creds
	cfg.HTTPClient = &http.Client{Timeout: timeout}
	cfg.Accounts = s3.NewIAMAccounts(iamEndpoint, creds, cfg.HTTPClient)
	d, err := s3.New(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg.Logger.Info("serving the v1alpha1 protocol", "endpoint", endpoint)
	return v1alpha1s3.Serve(ctx, endpoint, v1alpha1s3.New(d))
}
