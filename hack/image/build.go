package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// DefaultRegistry is where the project publishes its images.
	DefaultRegistry = "ghcr.io/kube-cosi"
	// DefaultSource is the org.opencontainers.image.source label.
	DefaultSource = "https://github.com/kube-cosi/cosi"

	// NonRootUID is the user (and group) every image runs as: distroless's "nonroot".
	NonRootUID = 65532

	versionVar = "github.com/kube-cosi/cosi/internal/cmdutil/version.Version"
)

// Image is one image the project builds: a Go command in one of the repository's modules.
type Image struct {
	Name string
	// Module is the directory of the Go module that builds Package, relative to the repository.
	Module  string
	Package string
	// Stamp says whether the command has internal/cmdutil/version's --version (or VersionVar's).
	Stamp bool
	// VersionVar is the variable -X stamps, when not internal/cmdutil/version's (a command of the pkg
	// module, which cannot import the root module's internal packages).
	VersionVar string
	// Args are the arguments after the entrypoint by default (the image's Cmd).
	Args []string
	// Test images are built only when named (--images): the cluster tier's workload.
	Test bool
}

// Images are the images make images builds.
var Images = []Image{
	{Name: "cosi-controller", Module: ".", Package: "./cmd/cosi-controller", Stamp: true},
	{Name: "cosi-sidecar", Module: ".", Package: "./cmd/cosi-sidecar", Stamp: true},
	{Name: "cosi-driver-s3", Module: ".", Package: "./cmd/cosi-driver-s3", Stamp: true},
	{Name: "cosi-driver-azure", Module: ".", Package: "./cmd/cosi-driver-azure", Stamp: true},
	{Name: "cosi-driver-memory", Module: ".", Package: "./cmd/cosi-driver-memory", Stamp: true},
	{Name: "cosi-sanity", Module: "pkg", Package: "./cmd/cosi-sanity", Stamp: true, VersionVar: "main.version"},
	// The Pod sandbox image of the node the cluster tests run on (containerd's sandbox_image).
	{Name: "pause", Module: "hack/image", Package: "./pause"},
	// The S3 store the cluster tests run in the cluster; built from hack/versitygw's pin.
	{Name: "versitygw", Module: "hack/versitygw", Package: "github.com/versity/versitygw/cmd/versitygw"},
	// The cluster tier's application: puts and gets an object with a COSI Secret's keys.
	{Name: "cosi-test-app", Module: ".", Package: "./test/cluster/app", Test: true},
}

// BuildOptions configure Build.
type BuildOptions struct {
	Repo, Out, Registry, Version, Revision, Source, CACertificates string
	Platforms                                                      []string
	// Images are the names to build; empty builds all of Images.
	Images []string
}

// Result is one built image.
type Result struct {
	Ref    string
	Digest v1.Hash
	// HostSize is the compressed size of the host platform's image (config and layers).
	HostSize     int64
	HostPlatform string
}

// Build compiles the commands and writes the images (see the package comment).
func Build(ctx context.Context, o BuildOptions) ([]Result, error) {
	images, err := selectImages(o.Images)
	if err != nil {
		return nil, err
	}
	if o.Revision == "" {
		out, err := exec.CommandContext(ctx, "git", "-C", o.Repo, "rev-parse", "HEAD").Output()
		if err != nil {
			return nil, fmt.Errorf("git rev-parse HEAD (or pass --revision): %w", err)
		}
		o.Revision = strings.TrimSpace(string(out))
	}
	created, err := commitTime(ctx, o.Repo, o.Revision)
	if err != nil {
		return nil, err
	}
	certs, err := os.ReadFile(o.CACertificates)
	if err != nil {
		return nil, fmt.Errorf("the CA bundle (install Debian's ca-certificates): %w", err)
	}
	base, err := baseLayer(certs, created)
	if err != nil {
		return nil, err
	}
	host := "linux/" + runtime.GOARCH

	binDir := filepath.Join(o.Out, "bin")
	for _, p := range o.Platforms {
		if err := compile(ctx, o, images, p, filepath.Join(binDir, strings.ReplaceAll(p, "/", "_"))); err != nil {
			return nil, err
		}
	}

	layoutDir := filepath.Join(o.Out, "oci")
	if err := os.RemoveAll(layoutDir); err != nil {
		return nil, err
	}
	lp, err := layout.Write(layoutDir, empty.Index)
	if err != nil {
		return nil, err
	}
	var results []Result
	for _, im := range images {
		tag, err := name.NewTag(fmt.Sprintf("%s/%s:%s", o.Registry, im.Name, o.Version))
		if err != nil {
			return nil, err
		}
		labels := map[string]string{
			"org.opencontainers.image.title":    im.Name,
			"org.opencontainers.image.source":   o.Source,
			"org.opencontainers.image.revision": o.Revision,
			"org.opencontainers.image.version":  o.Version,
			"org.opencontainers.image.licenses": "Apache-2.0",
			"org.opencontainers.image.created":  created.UTC().Format(time.RFC3339),
		}
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		var hostImg v1.Image
		for _, p := range o.Platforms {
			bin := filepath.Join(binDir, strings.ReplaceAll(p, "/", "_"), filepath.Base(im.Package))
			img, err := image(im, p, bin, base, labels, created)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", im.Name, p, err)
			}
			plat, err := v1.ParsePlatform(p)
			if err != nil {
				return nil, err
			}
			idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: plat}})
			if p == host {
				hostImg = img
			}
		}
		idx = mutate.Annotations(idx, labels).(v1.ImageIndex)
		if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": tag.String(),
		})); err != nil {
			return nil, fmt.Errorf("%s: writing the OCI layout: %w", im.Name, err)
		}
		r := Result{Ref: tag.String(), HostPlatform: host}
		if r.Digest, err = idx.Digest(); err != nil {
			return nil, err
		}
		if hostImg != nil {
			if err := tarball.WriteToFile(filepath.Join(o.Out, im.Name+".tar"), tag, hostImg); err != nil {
				return nil, fmt.Errorf("%s: writing the docker archive: %w", im.Name, err)
			}
			if r.HostSize, err = compressedSize(hostImg); err != nil {
				return nil, err
			}
		}
		results = append(results, r)
	}
	return results, nil
}

func selectImages(names []string) ([]Image, error) {
	var out []Image
	if len(names) == 0 {
		for _, im := range Images {
			if !im.Test {
				out = append(out, im)
			}
		}
		return out, nil
	}
	for _, n := range names {
		found := false
		for _, im := range Images {
			if im.Name == n {
				out, found = append(out, im), true
			}
		}
		if !found {
			return nil, fmt.Errorf("no image %q", n)
		}
	}
	return out, nil
}

func commitTime(ctx context.Context, repo, rev string) (time.Time, error) {
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "show", "-s", "--format=%ct", rev).Output()
	if err != nil {
		return time.Time{}, fmt.Errorf("the commit's time (git show %s): %w", rev, err)
	}
	sec, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(sec, 0).UTC(), nil
}

// compile builds the images' commands for one platform into dir, one go build per module so the
// commands of a module share their compiled dependencies.
func compile(ctx context.Context, o BuildOptions, images []Image, platform, dir string) error {
	goos, goarch, ok := strings.Cut(platform, "/")
	if !ok {
		return fmt.Errorf("platform %q is not os/arch", platform)
	}
	byModule := map[string][]Image{}
	var modules []string
	for _, im := range images {
		if _, ok := byModule[im.Module]; !ok {
			modules = append(modules, im.Module)
		}
		byModule[im.Module] = append(byModule[im.Module], im)
	}
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for _, m := range modules {
		ldflags := "-s -w -buildid="
		pkgs := []string{}
		for _, im := range byModule[m] {
			pkgs = append(pkgs, im.Package)
			if im.Stamp {
				v := versionVar
				if im.VersionVar != "" {
					v = im.VersionVar
				}
				ldflags = fmt.Sprintf("%s -X %s=%s", ldflags, v, o.Version)
			}
		}
		args := append(
			[]string{
				"build",
				"-trimpath",
				"-buildvcs=false",
				"-ldflags",
				strings.Join(dedupe(strings.Fields(ldflags)), " "),
				"-o",
				absDir + "/",
			},
			pkgs...)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = filepath.Join(o.Repo, m)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch, "GOFLAGS=-mod=readonly")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		fmt.Fprintf(os.Stderr, "building %s for %s\n", strings.Join(pkgs, " "), platform)
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build in %s for %s: %w", m, platform, err)
		}
	}
	return nil
}

func dedupe(fields []string) []string {
	seen := map[string]bool{}
	var out []string
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if f == "-X" && i+1 < len(fields) {
			if !seen["-X "+fields[i+1]] {
				out = append(out, f, fields[i+1])
				seen["-X "+fields[i+1]] = true
			}
			i++
			continue
		}
		out = append(out, f)
	}
	return out
}

// image puts one binary as /<name> on the base layer.
func image(
	im Image,
	platform, bin string,
	base v1.Layer,
	labels map[string]string,
	created time.Time,
) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	entry := "/" + im.Name
	binLayer, err := layer(created, []file{{name: entry[1:], mode: 0o755, data: data}})
	if err != nil {
		return nil, err
	}
	plat, err := v1.ParsePlatform(platform)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(
		img,
		mutate.Addendum{
			Layer:     base,
			MediaType: types.OCILayer,
			History:   v1.History{CreatedBy: "hack/image: CA certificates, /etc/passwd (nonroot 65532)"},
		},
		mutate.Addendum{Layer: binLayer, MediaType: types.OCILayer, History: v1.History{CreatedBy: "hack/image: " + entry}},
	)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = plat.OS, plat.Architecture, plat.Variant
	cfg.Config = v1.Config{
		Entrypoint: []string{entry},
		Cmd:        im.Args,
		User:       fmt.Sprintf("%d:%d", NonRootUID, NonRootUID),
		WorkingDir: "/",
		Env:        []string{"PATH=/", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		Labels:     labels,
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, err
	}
	return mutate.Time(img, created)
}

type file struct {
	name string
	mode int64
	uid  int
	dir  bool
	data []byte
}

// baseLayer is what the static binaries need from an operating system: the CA bundle for TLS, a
// passwd and group naming the non-root user (some libraries look the user up), a /tmp and a home.
func baseLayer(certs []byte, created time.Time) (v1.Layer, error) {
	passwd := fmt.Sprintf(
		"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n",
		NonRootUID,
		NonRootUID,
	)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRootUID)
	return layer(created, []file{
		{name: "etc/", dir: true, mode: 0o755},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/ssl/", dir: true, mode: 0o755},
		{name: "etc/ssl/certs/", dir: true, mode: 0o755},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: certs},
		{name: "home/", dir: true, mode: 0o755},
		{name: "home/nonroot/", dir: true, mode: 0o700, uid: NonRootUID},
		{name: "tmp/", dir: true, mode: 0o1777},
	})
}

// layer writes files into an uncompressed tar with fixed owners and times: the same files give the
// same digest.
func layer(created time.Time, files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{
			Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.uid, ModTime: created,
			Typeflag: tar.TypeReg, Size: int64(len(f.data)), Format: tar.FormatPAX,
		}
		if f.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

func compressedSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	n := m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}
