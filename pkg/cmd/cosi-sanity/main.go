// Command cosi-sanity checks that a COSI driver follows the COSI driver protocol: it runs one case
// per requirement against the driver's socket and prints one line per case.
//
//	cosi-sanity --endpoint unix:///var/lib/cosi/driver.sock [--junit report.xml]
//
// Exit code: 0 when no case failed, 1 when a case failed, 2 when the suite could not run.
//
// It is a command of the SDK module, so that a driver vendor installs it with go install
// github.com/kube-cosi/cosi/pkg/cmd/cosi-sanity (docs/writing-a-driver.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"time"

	"github.com/kube-cosi/cosi/pkg/sanity"
)

// version is stamped by make images (hack/image: -X main.version=v0.1.0). Unstamped, --version
// prints the module version go install recorded, or "devel".
var version = ""

func versionString() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "devel"
}

type paramsFlag struct{ m map[string]string }

func (p *paramsFlag) String() string { return fmt.Sprint(p.m) }
func (p *paramsFlag) Set(v string) error {
	p.m = map[string]string{}
	if v == "" {
		return nil
	}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("%q is not key=value", kv)
		}
		p.m[k] = val
	}
	return nil
}

func main() {
	var (
		cfg                                       sanity.Config
		bucket, invalidBucket, incompatibleBucket paramsFlag
		access, invalidAccess, incompatibleAccess paramsFlag
		run                                       = flag.String("run", "",
			"run only the cases whose name matches this regular expression")
		junit     = flag.String("junit", "", "write a JUnit XML report to this file")
		driverLog = flag.String("driver-log", "",
			"the driver's log file, to check that no credential reaches it (run the driver at its highest verbosity)")
		list        = flag.Bool("list", false, "list the cases, each with what it needs beyond a socket, and exit")
		showVersion = flag.Bool("version", false, "print the version and exit")
	)
	flag.StringVar(&cfg.Endpoint, "endpoint", os.Getenv("COSI_ENDPOINT"),
		"the driver's endpoint, unix:///path/to/driver.sock (default $COSI_ENDPOINT)")
	flag.DurationVar(&cfg.Timeout, "timeout", 30*time.Second, "timeout of each RPC")
	flag.StringVar(&cfg.StaticBucketID, "static-bucket-id", "",
		"an existing bucket for DriverGetBucket (default: one the suite creates)")
	flag.Var(&bucket, "bucket-parameters", "valid bucket parameters, k=v,k=v")
	flag.Var(&invalidBucket, "invalid-bucket-parameters", "bucket parameters the driver must refuse with InvalidArgument")
	flag.Var(&incompatibleBucket, "incompatible-bucket-parameters",
		"valid bucket parameters different from --bucket-parameters")
	flag.Var(&access, "access-parameters", "valid access parameters, k=v,k=v")
	flag.Var(&invalidAccess, "invalid-access-parameters", "access parameters the driver must refuse with InvalidArgument")
	flag.Var(&incompatibleAccess, "incompatible-access-parameters",
		"valid access parameters different from --access-parameters, which the driver cannot apply to an existing "+
			"account (a repeat grant with them must fail with AlreadyExists)")
	flag.StringVar(&cfg.NonEmptyBuckets, "non-empty-buckets", "",
		"what DriverDeleteBucket does to a bucket holding objects with --bucket-parameters, as the driver documents it: "+
			"refuse (FailedPrecondition, nothing deleted) or purge (deleted with its objects); empty accepts either")
	flag.DurationVar(&cfg.Settle, "settle", 0,
		"how long a grant, revoke or deletion may take to show in the backend (eventually consistent stores): checks "+
			"of effects are repeated for at most this long, and the suite reports how long effects took")
	flag.Uint64Var(&cfg.Seed, "seed", 0, "the seed of the generated sequences of operations (0: random; a failed "+
		"sequence names its seed, to replay it)")
	flag.IntVar(&cfg.Sequences, "sequences", 0, fmt.Sprintf("how many generated sequences of operations to run "+
		"(0: %d; negative: none)", sanity.DefaultSequences))
	flag.Parse()

	if *showVersion {
		fmt.Printf("%s %s\n", filepath.Base(os.Args[0]), versionString())
		return
	}

	if *list {
		// One case a line; cases that need more than a socket say what, and what the suite
		// misses without it (a Probe is only available from Go: sanity.Test).
		for _, c := range sanity.Cases() {
			fmt.Println(c.Name)
			if needs := c.Needs(); len(needs) > 0 {
				fmt.Printf("    needs: %s\n    missed without it: %s\n", strings.Join(needs, ", "), c.Blind())
			}
		}
		for _, p := range sanity.Properties() {
			fmt.Printf("%s\n    checked after every case, through the probe functions given (a Probe is only "+
				"available from Go: sanity.Test)\n", p)
		}
		return
	}
	cfg.BucketParameters, cfg.InvalidBucketParameters = bucket.m, invalidBucket.m
	cfg.IncompatibleBucketParameters = incompatibleBucket.m
	cfg.AccessParameters, cfg.InvalidAccessParameters = access.m, invalidAccess.m
	cfg.IncompatibleAccessParameters = incompatibleAccess.m
	if *run != "" {
		re, err := regexp.Compile(*run)
		if err != nil {
			fmt.Fprintln(os.Stderr, "cosi-sanity: --run:", err)
			os.Exit(2)
		}
		cfg.Run = re
	}
	if *driverLog != "" {
		cfg.DriverLogs = func() ([]byte, error) { return os.ReadFile(*driverLog) }
	}

	results, err := sanity.Run(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cosi-sanity:", err)
		os.Exit(2)
	}
	for _, r := range results {
		switch r.Status {
		case sanity.Passed:
			if r.Message != "" { // a report, such as the settle window's
				fmt.Printf("PASS %s (%s): %s\n", r.Name, r.Duration.Round(time.Millisecond), r.Message)
				continue
			}
			fmt.Printf("PASS %s (%s)\n", r.Name, r.Duration.Round(time.Millisecond))
		case sanity.Failed:
			fmt.Printf("FAIL %s: %s\n", r.Name, r.Message)
		case sanity.Skipped:
			fmt.Printf("SKIP %s: %s\n", r.Name, r.Message)
		}
	}
	passed, failed, skipped := sanity.Summary(results)
	fmt.Printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if *junit != "" {
		f, err := os.Create(*junit)
		if err == nil {
			err = sanity.WriteJUnit(f, results)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "cosi-sanity: writing JUnit report:", err)
			os.Exit(2)
		}
	}
	if failed > 0 {
		os.Exit(1)
	}
}
