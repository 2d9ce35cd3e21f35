// Command cosi-driver-memory runs COSI's in-memory reference driver on $COSI_ENDPOINT.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/kube-cosi/cosi/internal/cmdutil/version"
	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var (
		cfg      memory.Config
		endpoint = flag.String("endpoint", os.Getenv(driver.EndpointEnv),
			"unix:///path/to/driver.sock to serve on (default $COSI_ENDPOINT)")
		protocols      = flag.String("protocols", "S3,Azure,GCS", "comma-separated protocols to support")
		latency        = flag.Duration("latency", 0, "latency added to every call")
		metricsAddress = flag.String("metrics-address", "",
			"address to serve Prometheus metrics on, e.g. :8080 (off when empty)")
		verbosity = flag.Int("v", 0,
			"log verbosity: 2 logs every call, 5 also requests and responses (secrets stripped)")
		hooks    testHooks
		faults   listFlag
		existing listFlag
	)
	flag.StringVar(&cfg.Name, "name", memory.DefaultName, "driver name")
	flag.StringVar(&cfg.S3Endpoint, "s3-endpoint", "", "S3 endpoint URL reported in bucket info")
	flag.StringVar(&cfg.Region, "region", "", "region reported in bucket info")
	flag.BoolVar(&cfg.SingleBucketAccess, "single-bucket-access", false, "refuse multi-bucket access with OutOfRange")
	flag.BoolVar(&cfg.NewKeyPerGrant, "new-key-per-grant", false,
		"issue a new key on every grant of an existing account, keeping only the newest previous one valid")
	flag.BoolVar(&cfg.NoServiceAccountAuth, "no-service-account-auth", false,
		"refuse ServiceAccount authentication with InvalidArgument")
	flag.StringVar(&cfg.StateFile, "state-file", "",
		"file that persists buckets and accounts across restarts (holds keys: mode 0600)")
	flag.Var(&existing, "existing-bucket",
		"ID of a bucket that exists from the start, for static provisioning (repeatable)")
	flag.Var(&faults, "fault",
		"inject failures: METHOD=CODE[:RATE|:xCOUNT][+after][+delay=DURATION], e.g. "+
			"DriverCreateBucket=Unavailable:0.5 (repeatable)")
	flag.Uint64Var(&hooks.seed, "fault-seed", 0, "seed of the random choices of rated faults (0: a fixed seed)")
	flag.StringVar(&hooks.controlAddress, "control-address", "",
		"loopback host:port of the control endpoint that sets faults and holds calls (a test hook, "+
			"unauthenticated: fault suites only; off when empty)")
	flag.StringVar(&hooks.journal, "journal", "",
		"file that receives one JSON line per call served: method, bucket or account, code (no secrets)")
	version.AddFlag(flag.CommandLine)
	flag.Parse()

	log := logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.Level(-*verbosity)}))
	if err := run(log, cfg, *endpoint, *protocols, *latency, *metricsAddress, faults, existing, hooks); err != nil {
		log.Error(err, "driver failed")
		os.Exit(1)
	}
}

// testHooks are the flags of fault suites: the control endpoint, the journal and the faults' seed.
type testHooks struct {
	controlAddress, journal string
	seed                    uint64
}

func run(log logr.Logger, cfg memory.Config, endpoint, protocols string, latency time.Duration,
	metricsAddress string, faultSpecs, existing []string, hooks testHooks,
) error {
	for _, name := range strings.Split(protocols, ",") {
		p, ok := cosiproto.ObjectProtocol_Type_value[strings.ToUpper(strings.TrimSpace(name))]
		if !ok || p == int32(cosiproto.ObjectProtocol_UNKNOWN) {
			return fmt.Errorf("--protocols: unknown protocol %q", name)
		}
		cfg.Protocols = append(cfg.Protocols, cosiproto.ObjectProtocol_Type(p))
	}
	cfg.ExistingBuckets = existing
	var injected []memory.Fault
	for _, spec := range faultSpecs {
		f, err := memory.ParseFault(spec)
		if err != nil {
			return err
		}
		injected = append(injected, f)
	}
	d, err := memory.New(cfg)
	if err != nil {
		return err
	}
	var f memory.Faults
	if hooks.seed != 0 {
		f.Seed(hooks.seed)
	}
	f.Set(latency, injected...)
	interceptors := []grpc.UnaryServerInterceptor{f.Interceptor()}
	if hooks.journal != "" {
		j, err := os.OpenFile(hooks.journal, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		defer j.Close()
		interceptors = append([]grpc.UnaryServerInterceptor{(&memory.Journal{W: j}).Interceptor()}, interceptors...)
	}
	if hooks.controlAddress != "" {
		host, _, err := net.SplitHostPort(hooks.controlAddress)
		if err != nil {
			return fmt.Errorf("--control-address: %w", err)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("--control-address %s: loopback only (the endpoint has no authentication)", hooks.controlAddress)
		}
		l, err := net.Listen("tcp", hooks.controlAddress)
		if err != nil {
			return err
		}
		go func() {
			srv := &http.Server{Handler: f.Handler(), ReadHeaderTimeout: 10 * time.Second}
			log.Error(srv.Serve(l), "control endpoint stopped")
		}()
	}

	if metricsAddress != "" {
		prometheus.MustRegister(d.Collector())
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.Handler())
		go func() {
			srv := &http.Server{Addr: metricsAddress, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			log.Error(srv.ListenAndServe(), "metrics server stopped")
		}()
	}
	return driver.Run(driver.Options{
		Endpoint:     endpoint,
		Identity:     d,
		Provisioner:  d,
		Logger:       log,
		Interceptors: interceptors,
	})
}
