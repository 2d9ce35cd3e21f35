// Command image builds the project's container images without a Docker engine and pushes them.
//
//	image build --repo . --out bin/images --version v0.1.0 \
//		[--registry ghcr.io/kube-cosi] [--platforms linux/amd64,linux/arm64]
//	image push --out bin/images --registry registry.example.com/cosi
//
// build compiles each command statically for every platform (CGO_ENABLED=0, -trimpath, the version
// stamped into --version), puts it on a scratch base that holds only what the binaries need (CA
// certificates, /etc/passwd with the non-root user 65532), and writes
//
//	bin/images/oci/        an OCI image layout: one multi-platform index per image, named <registry>/<name>:<version>
//	bin/images/<name>.tar  a docker-archive of the host's platform, for `ctr -n k8s.io images import`
//
// Every timestamp is the commit's time, so one commit gives the same digests on every build.
// push copies every index of the layout to the registry (go-containerregistry's remote, with the
// credentials of ~/.docker/config.json when there are some).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	switch os.Args[1] {
	case "build":
		err = runBuild(ctx, os.Args[2:])
	case "push":
		err = runPush(ctx, os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: image build|push [flags] (image build -h lists the flags)")
	os.Exit(2)
}

func runBuild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	var o BuildOptions
	fs.StringVar(&o.Repo, "repo", ".", "root of the project's repository")
	fs.StringVar(&o.Out, "out", "bin/images", "output directory")
	fs.StringVar(&o.Registry, "registry", DefaultRegistry, "registry and path the images are named after")
	fs.StringVar(&o.Version, "version", "", "version: the images' tag, stamped into --version (required)")
	fs.StringVar(&o.Revision, "revision", "", "git commit of the sources (default: git rev-parse HEAD)")
	fs.StringVar(&o.Source, "source", DefaultSource, "org.opencontainers.image.source label")
	fs.StringVar(
		&o.CACertificates,
		"ca-certificates",
		"/etc/ssl/certs/ca-certificates.crt",
		"CA bundle put into the images (Debian's ca-certificates)",
	)
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "platforms of the images, comma-separated")
	only := fs.String("images", "", "build only these images, comma-separated (default: all)")
	_ = fs.Parse(args)
	if o.Version == "" {
		return errors.New("--version is required")
	}
	o.Platforms = strings.Split(*platforms, ",")
	if *only != "" {
		o.Images = strings.Split(*only, ",")
	}
	res, err := Build(ctx, o)
	if err != nil {
		return err
	}
	for _, r := range res {
		fmt.Printf("%-70s %s  %6.1f MB (%s)\n", r.Ref, r.Digest, float64(r.HostSize)/1e6, r.HostPlatform)
	}
	return nil
}

func runPush(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("push", flag.ExitOnError)
	out := fs.String("out", "bin/images", "directory that image build wrote")
	registry := fs.String("registry", "", "registry and path to push to, e.g. registry.example.com/cosi (required)")
	_ = fs.Parse(args)
	if *registry == "" {
		return errors.New("--registry is required")
	}
	pushed, err := Push(ctx, *out, *registry)
	for _, p := range pushed {
		fmt.Println("pushed", p)
	}
	return err
}
