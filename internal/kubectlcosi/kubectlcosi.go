// Package kubectlcosi is kubectl-cosi, the kubectl plugin for COSI (docs/kubectl-cosi.md):
//
//	kubectl cosi status claim NAME     the chain claim → Bucket → accesses → Secrets, and why it is not done
//	kubectl cosi status access NAME    the same from an access
//	kubectl cosi env ACCESS            what a Pod gets with envFrom from the access's Secrets, values masked
//	kubectl cosi doctor                the health of the installation
//
// It only reads, but for doctor's token probe (a ServiceAccount created and deleted at once,
// --probe-tokens). What the user may not read (a cluster-scoped Bucket for a user with namespace
// rights only) is reported as not visible instead of failing the command.
package kubectlcosi

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kube-cosi/cosi/internal/kube/scheme"
	"github.com/kube-cosi/cosi/internal/sidecar"
)

// Command is one invocation of the plugin.
type Command struct {
	// Client reads the cluster; Namespace is the namespace of status and env.
	Client    client.Client
	Namespace string
	// COSINamespace is where the controller and the sidecars hold their Leases.
	COSINamespace string
	// SecretCheckInterval is the sidecars' --secret-check-interval, to tell when a lost Secret is
	// written again.
	SecretCheckInterval time.Duration
	// StuckAfter is how long an object may be Terminating before doctor calls it stuck.
	StuckAfter time.Duration
	// ProbeTokens lets doctor create a ServiceAccount in COSINamespace for a moment, to ask the
	// API server for the lifetime cap and the audiences of its tokens (doctor_keyless.go).
	ProbeTokens bool
	// ServiceAccountAudiences are audiences of keyless drivers that doctor checks beyond those it
	// finds (the drivers' --service-account-audience).
	ServiceAccountAudiences []string
	// Output is "", "json" or "yaml".
	Output string
	// Out receives the report; Now is the clock (tests fix it).
	Out io.Writer
	Now func() time.Time
}

// Config is how the command connects: a rest.Config (tests), or the kubeconfig flags.
type Config struct {
	// REST, when set, is used instead of the kubeconfig.
	REST *rest.Config
	// Namespace, when set, is the default namespace instead of the kubeconfig context's.
	Namespace string
}

const usage = `kubectl cosi: why a bucket or an access is not ready, and the health of COSI.

Commands:
  status claim NAME     the claim, its Bucket, its accesses and their Secrets, and what is wrong
  status access NAME    the access, its claims and Buckets, its Secrets, and what is wrong
  env ACCESS            what a Pod gets with envFrom from the access's Secrets (values masked)
  doctor                CRDs, admission policies, controller and sidecars, stuck objects, and the
                        API server's ServiceAccount tokens where keyless accesses are offered

Flags (anywhere on the line):
`

// Main runs the plugin with args (without the program name) and returns the exit code: 0 when
// the command ran (and doctor found nothing failing), 1 on an error or a failing doctor check, 2
// on a usage error.
func Main(ctx context.Context, cfg Config, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kubectl-cosi", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		kubeconfig, kubeContext, namespace string
		cmd                                = Command{Out: stdout, Now: time.Now}
	)
	fs.StringVar(&kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&kubeContext, "context", "", "the kubeconfig context to use")
	fs.StringVar(&namespace, "namespace", "", "namespace of the claim or access (default: the context's)")
	fs.StringVar(&namespace, "n", "", "shorthand for --namespace")
	fs.StringVar(&cmd.Output, "output", "", "output format: json or yaml (default: text)")
	fs.StringVar(&cmd.Output, "o", "", "shorthand for --output")
	fs.StringVar(&cmd.COSINamespace, "cosi-namespace", sidecar.DefaultGrantNamespace,
		"namespace of COSI's controller and sidecars (their Leases)")
	fs.DurationVar(&cmd.SecretCheckInterval, "secret-check-interval", sidecar.DefaultSecretCheckInterval,
		"the sidecars' --secret-check-interval, for Secrets that do not say it (written before COSI annotated them)")
	fs.DurationVar(&cmd.StuckAfter, "stuck-after", 5*time.Minute,
		"doctor: how long an object may be Terminating before it counts as stuck")
	fs.BoolVar(&cmd.ProbeTokens, "probe-tokens", true, "doctor: where keyless accesses are offered, create a "+
		"ServiceAccount in --cosi-namespace for a moment, ask for two of its tokens to learn the API server's token "+
		"lifetime cap and audiences, and delete it")
	fs.Func("service-account-audience", "doctor: an audience of a keyless driver's tokens, beyond those doctor "+
		"finds (the drivers' --service-account-audience in --cosi-namespace, or their names); repeat or separate "+
		"with commas", func(v string) error {
		for a := range strings.SplitSeq(v, ",") {
			if a = strings.TrimSpace(a); a != "" {
				cmd.ServiceAccountAudiences = append(cmd.ServiceAccountAudiences, a)
			}
		}
		return nil
	})
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if cmd.Output != "" && cmd.Output != "json" && cmd.Output != "yaml" {
		fmt.Fprintf(stderr, "--output %q: must be json or yaml\n", cmd.Output)
		return 2
	}
	run, err := dispatch(&cmd, pos)
	if err != nil {
		fmt.Fprintln(stderr, "kubectl cosi:", err)
		fs.Usage()
		return 2
	}
	restCfg, ns, err := connect(cfg, kubeconfig, kubeContext)
	if err != nil {
		fmt.Fprintln(stderr, "kubectl cosi:", err)
		return 1
	}
	// The API server's warnings (doctor's token request for a year is shortened, by design) are
	// not for the user; controller-runtime would log them through a logger the plugin never sets.
	restCfg = rest.CopyConfig(restCfg)
	restCfg.WarningHandlerWithContext = rest.NoWarnings{}
	cmd.Namespace = ns
	if namespace != "" {
		cmd.Namespace = namespace
	}
	if cmd.Client, err = client.New(restCfg, client.Options{Scheme: newScheme()}); err != nil {
		fmt.Fprintln(stderr, "kubectl cosi:", err)
		return 1
	}
	failed, err := run(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "kubectl cosi:", err)
		return 1
	}
	if failed {
		return 1
	}
	return 0
}

// dispatch returns the function of the command named by the positional arguments. It reports
// whether a check failed (doctor), and an error only when it could not run.
func dispatch(cmd *Command, pos []string) (func(context.Context) (bool, error), error) {
	switch {
	case len(pos) == 3 && pos[0] == "status" && pos[1] == "claim":
		return func(ctx context.Context) (bool, error) { return false, cmd.StatusClaim(ctx, pos[2]) }, nil
	case len(pos) == 3 && pos[0] == "status" && pos[1] == "access":
		return func(ctx context.Context) (bool, error) { return false, cmd.StatusAccess(ctx, pos[2]) }, nil
	case len(pos) == 2 && pos[0] == "env":
		return func(ctx context.Context) (bool, error) { return false, cmd.Env(ctx, pos[1]) }, nil
	case len(pos) == 1 && pos[0] == "doctor":
		return cmd.Doctor, nil
	case len(pos) == 0:
		return nil, errors.New("no command")
	}
	return nil, fmt.Errorf("unknown command %q", strings.Join(pos, " "))
}

// parseInterspersed parses flags wherever they are, as kubectl does: `status claim x -n ns`.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// connect returns the client configuration and the default namespace.
func connect(cfg Config, kubeconfig, kubeContext string) (*rest.Config, string, error) {
	if cfg.REST != nil {
		ns := cfg.Namespace
		if ns == "" {
			ns = "default"
		}
		return cfg.REST, ns, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{CurrentContext: kubeContext})
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", err
	}
	rc.UserAgent = "kubectl-cosi"
	return rc, ns, nil
}

func newScheme() *runtime.Scheme {
	s := scheme.New()
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	return s
}

// visibility says what a read found.
type visibility string

const (
	visible   visibility = "found"
	notFound  visibility = "not found"
	forbidden visibility = "forbidden"
	failed    visibility = "error"
)

// read gets obj and classifies the outcome; err is returned only with failed.
func (c *Command) read(ctx context.Context, key client.ObjectKey, obj client.Object) (visibility, error) {
	return classify(c.Client.Get(ctx, key, obj))
}

// classify classifies the error of a read.
func classify(err error) (visibility, error) {
	switch {
	case err == nil:
		return visible, nil
	case apierrors.IsNotFound(err):
		return notFound, nil
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return forbidden, nil
	}
	return failed, err
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// print writes v as JSON or YAML when asked, else calls text.
func (c *Command) print(v any, text func(io.Writer)) error {
	switch c.Output {
	case "json":
		enc := json.NewEncoder(c.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		out, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = c.Out.Write(out)
		return err
	}
	text(c.Out)
	return nil
}
