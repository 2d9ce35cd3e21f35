// Command cosi-driver-s3 runs COSI's S3 driver on $COSI_ENDPOINT. See docs/drivers/s3.md.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/internal/cmdutil/version"
	"github.com/kube-cosi/cosi/pkg/driver"
)

func main() {
	var (
		cfg      s3.Config
		endpoint = flag.String("endpoint", os.Getenv(driver.EndpointEnv),
			"unix:///path/to/driver.sock to serve on (default $COSI_ENDPOINT)")
		accounts = flag.String("accounts", "iam",
			"account back-end: iam (AWS IAM API: AWS, Versity) or rgw (Ceph RGW Admin Ops API and bucket policies)")
		iamEndpoint  = flag.String("iam-endpoint", "", "IAM API endpoint URL for --accounts=iam (empty: AWS's)")
		rgwAdminPath = flag.String("rgw-admin-path", "/admin",
			"path of the RGW Admin Ops API on the S3 endpoint, for --accounts=rgw")
		credentialsFile = flag.String("credentials-file", "",
			"file with the admin credentials as AWS_ACCESS_KEY_ID=... and AWS_SECRET_ACCESS_KEY=... lines, "+
				"read again when it changes (default: the environment variables "+
				s3.EnvAccessKeyID+" and "+s3.EnvSecretAccessKey+
				", then AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, read once)")
		iamMaxPolicy = flag.Int("iam-max-policy-size", s3.MaxInlinePolicySize,
			"most characters of the IAM policy of one access, for --accounts=iam "+
				"(AWS's limit on a user's inline policies; raise it only for stores that allow more)")
		timeout        = flag.Duration("backend-timeout", 30*time.Second, "timeout of each call to the object store")
		metricsAddress = flag.String("metrics-address", "",
			"address to serve Prometheus metrics on, e.g. :8080 (off when empty)")
		verbosity = flag.Int("v", 0,
			"log verbosity: 2 logs every call, 5 also requests and responses (secrets stripped)")
		sa          s3.ServiceAccountAuth
		thumbprints = flag.String("service-account-issuer-thumbprints", "", "comma-separated hex SHA-1 "+
			"thumbprints of the certificate at the top of the issuer's TLS chain, for an issuer no public CA signed")
		stsEndpoint = flag.String("public-sts-endpoint", "", "STS endpoint URL workloads exchange their "+
			"ServiceAccount token at (AWS_ENDPOINT_URL_STS; default --iam-endpoint, where Versity serves STS; "+
			"empty with AWS)")
	)
	flag.StringVar(&sa.Issuer, "service-account-issuer", "", "the cluster's ServiceAccount token issuer "+
		"(kube-apiserver --service-account-issuer), https://host[/path]: enables authenticationType ServiceAccount "+
		"with --accounts=iam (off when empty)")
	flag.StringVar(&sa.Audience, "service-account-audience", "", "audience of the ServiceAccount tokens "+
		"workloads present (their projected token's audience; default the driver name; never an audience of the "+
		"API server, which every Pod's API token has)")
	flag.StringVar(&sa.TokenFile, "service-account-token-file", s3.DefaultTokenFile, "where workloads mount their "+
		"projected ServiceAccount token (AWS_WEB_IDENTITY_TOKEN_FILE in their Secret)")
	flag.StringVar(&cfg.Name, "name", s3.DefaultName, "driver name")
	flag.StringVar(&cfg.Endpoint, "s3-endpoint", "",
		"S3 endpoint URL the driver uses, e.g. https://s3.example.com (required)")
	flag.StringVar(&cfg.PublicEndpoint, "public-s3-endpoint", "",
		"S3 endpoint URL given to workloads (default --s3-endpoint)")
	flag.StringVar(&cfg.Region, "region", "us-east-1", "default region of buckets")
	flag.BoolVar(&cfg.VirtualHostedStyle, "virtual-hosted-style", false,
		"tell workloads to use virtual-hosted-style addressing (default path style)")
	flag.StringVar(&cfg.BucketNamePrefix, "bucket-name-prefix", "",
		"prefix of every generated bucket name, e.g. a cluster name")
	version.AddFlag(flag.CommandLine)
	flag.Parse()

	log := logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.Level(-*verbosity)}))
	cfg.Logger = log
	if sa.Issuer != "" {
		if *thumbprints != "" {
			sa.IssuerThumbprints = strings.Split(*thumbprints, ",")
		}
		sa.STSEndpoint = *stsEndpoint
		if sa.STSEndpoint == "" {
			sa.STSEndpoint = *iamEndpoint
		}
		cfg.ServiceAccounts = &sa
	}
	err := run(log, cfg, *endpoint, *accounts, *iamEndpoint, *rgwAdminPath, *credentialsFile, *iamMaxPolicy, *timeout,
		*metricsAddress)
	if err != nil {
		log.Error(err, "driver failed")
		os.Exit(1)
	}
}

func run(log logr.Logger, cfg s3.Config, endpoint, accounts, iamEndpoint, rgwAdminPath, credentialsFile string,
	iamMaxPolicy int, timeout time.Duration, metricsAddress string,
) error {
	if cfg.Endpoint == "" {
		return fmt.Errorf("--s3-endpoint is required")
	}
	creds, err := s3.LoadCredentials(credentialsFile, os.Getenv)
	if err != nil {
		return err
	}
	cfg.Credentials = creds
	cfg.HTTPClient = &http.Client{Timeout: timeout}
	switch accounts {
	case "iam":
		iamAccounts := s3.NewIAMAccounts(iamEndpoint, creds, cfg.HTTPClient)
		iamAccounts.MaxPolicySize = iamMaxPolicy
		cfg.Accounts = iamAccounts
	case "rgw":
		admin := s3.NewS3Client(cfg.Endpoint, cfg.Region, creds, cfg.HTTPClient)
		cfg.Accounts = s3.NewRGWAccounts(cfg.Endpoint, rgwAdminPath, cfg.Region, creds, cfg.HTTPClient, admin)
	default:
		return fmt.Errorf("--accounts: %q is neither iam nor rgw", accounts)
	}
	d, err := s3.New(cfg)
	if err != nil {
		return err
	}
	if metricsAddress != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.Handler())
		go func() {
			srv := &http.Server{Addr: metricsAddress, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			log.Error(srv.ListenAndServe(), "metrics server stopped")
		}()
	}
	return driver.Run(driver.Options{Endpoint: endpoint, Identity: d, Provisioner: d, Logger: log})
}
