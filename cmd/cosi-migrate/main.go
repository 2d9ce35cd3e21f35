// Command cosi-migrate reads the objects of an upstream COSI v1alpha1 installation and prints
// (default) or creates (--apply) their v1alpha2 equivalents. See docs/v1alpha1-drivers.md for the
// order to follow.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/yaml"

	"github.com/kube-cosi/cosi/internal/kube/scheme"
	"github.com/kube-cosi/cosi/internal/migrate"
)

func main() {
	var opts migrate.Options
	from := flag.String(
		"from-kubeconfig",
		"",
		"kubeconfig of the cluster holding the v1alpha1 objects (default: the usual lookup)",
	)
	apply := flag.Bool(
		"apply",
		false,
		"create the v1alpha2 objects in the cluster (default: print them as YAML, change nothing)",
	)
	flag.StringVar(
		&opts.SecretSuffix,
		"secret-suffix",
		"",
		"appended to every access Secret's name, so the new Secret does not collide with the v1alpha1 one",
	)
	flag.Parse()
	if err := run(context.Background(), *from, *apply, opts); err != nil {
		fmt.Fprintln(os.Stderr, "cosi-migrate:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig string, apply bool, opts migrate.Options) error {
	if kubeconfig != "" {
		if err := os.Setenv("KUBECONFIG", kubeconfig); err != nil {
			return err
		}
	}
	cfg, err := config.GetConfig()
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return err
	}
	res, err := migrate.Read(ctx, c, opts)
	if err != nil {
		return err
	}
	for _, s := range res.Skipped {
		fmt.Fprintln(os.Stderr, "skipped:", s)
	}
	if apply {
		return migrate.Apply(ctx, c, res.Objects, false)
	}
	for _, o := range res.Objects {
		out, err := yaml.Marshal(o.(runtime.Object))
		if err != nil {
			return err
		}
		fmt.Printf("---\n%s", out)
	}
	return nil
}
