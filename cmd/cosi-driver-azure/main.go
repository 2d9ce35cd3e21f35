// Command cosi-driver-azure runs COSI's Azure Blob driver on $COSI_ENDPOINT. See
// docs/drivers/azure.md.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kube-cosi/cosi/drivers/azure"
	"github.com/kube-cosi/cosi/internal/cmdutil/version"
	"github.com/kube-cosi/cosi/pkg/driver"
)

func main() {
	var (
		cfg      azure.Config
		endpoint = flag.String("endpoint", os.Getenv(driver.EndpointEnv),
			"unix:///path/to/driver.sock to serve on (default $COSI_ENDPOINT)")
		credentialsFile = flag.String("credentials-file", "",
			"file with the storage account's name and Shared Key as "+azure.EnvAccount+"=... and "+
				azure.EnvKey+"=... lines, read again when it changes (default: those environment variables, read once)")
		timeout        = flag.Duration("backend-timeout", 30*time.Second, "timeout of each call to the storage account")
		metricsAddress = flag.String("metrics-address", "",
			"address to serve Prometheus metrics on, e.g. :8080 (off when empty)")
		verbosity = flag.Int("v", 0,
			"log verbosity: 2 logs every call, 5 also requests and responses (secrets stripped)")
	)
	flag.StringVar(&cfg.Name, "name", azure.DefaultName, "driver name")
	flag.StringVar(&cfg.Endpoint, "blob-endpoint", "",
		"the storage account's Blob service URL the driver uses, e.g. https://ACCOUNT.blob.core.windows.net "+
			"(default: that URL for the account of the credentials)")
	flag.StringVar(&cfg.PublicEndpoint, "public-blob-endpoint", "",
		"the Blob service URL in the tokens given to workloads (default --blob-endpoint)")
	flag.StringVar(&cfg.ContainerNamePrefix, "container-name-prefix", "",
		"prefix of every generated container name, e.g. a cluster name")
	version.AddFlag(flag.CommandLine)
	flag.Parse()

	log := logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.Level(-*verbosity)}))
	cfg.Logger = log
	if err := run(log, cfg, *endpoint, *credentialsFile, *timeout, *metricsAddress); err != nil {
		log.Error(err, "driver failed")
		os.Exit(1)
	}
}

func run(log logr.Logger, cfg azure.Config, endpoint, credentialsFile string, timeout time.Duration,
	metricsAddress string,
) error {
	creds, err := azure.LoadCredentials(credentialsFile, os.Getenv)
	if err != nil {
		return err
	}
	cfg.Credentials = creds
	if cfg.Endpoint == "" {
		cfg.Endpoint = fmt.Sprintf("https://%s.blob.core.windows.net", creds.Account())
	}
	cfg.HTTPClient = &http.Client{Timeout: timeout}
	d, err := azure.New(cfg)
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
