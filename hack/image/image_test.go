package main

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const testVersion = "v0.0.0-test"

func build(t *testing.T, out string, images ...string) []Result {
	t.Helper()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Build(context.Background(), BuildOptions{
		Repo: repo, Out: out, Registry: DefaultRegistry, Version: testVersion, Source: DefaultSource,
		CACertificates: "/etc/ssl/certs/ca-certificates.crt",
		Platforms:      []string{"linux/amd64", "linux/arm64"},
		Images:         images,
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Two builds of one commit give the same index digest and the same docker archive, byte for byte.
func TestBuildIsReproducible(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	ra, rb := build(t, a, "pause"), build(t, b, "pause")
	if ra[0].Digest != rb[0].Digest {
		t.Fatalf("two builds of one commit differ: %s and %s", ra[0].Digest, rb[0].Digest)
	}
	ta, _ := os.ReadFile(filepath.Join(a, "pause.tar"))
	tb, _ := os.ReadFile(filepath.Join(b, "pause.tar"))
	if len(ta) == 0 || !bytes.Equal(ta, tb) {
		t.Fatalf("the docker archives differ (%d and %d bytes)", len(ta), len(tb))
	}
}

// What a user of the image sees: its entrypoint, non-root user, labels, CA bundle, both platforms,
// and a binary that prints the stamped version.
func TestImageContents(t *testing.T) {
	out := t.TempDir()
	res := build(t, out, "cosi-sanity")
	img, err := tarball.ImageFromPath(filepath.Join(out, "cosi-sanity.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65532:65532" || strings.Join(cfg.Config.Entrypoint, " ") != "/cosi-sanity" ||
		cfg.Architecture != runtime.GOARCH {
		t.Errorf("user %q, entrypoint %q, architecture %q", cfg.Config.User, cfg.Config.Entrypoint, cfg.Architecture)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.source":  DefaultSource,
		"org.opencontainers.image.version": testVersion,
	} {
		if got := cfg.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if len(cfg.Config.Labels["org.opencontainers.image.revision"]) != 40 {
		t.Errorf("revision label %q is not a commit", cfg.Config.Labels["org.opencontainers.image.revision"])
	}

	files := flatten(t, img)
	for _, f := range []string{"etc/ssl/certs/ca-certificates.crt", "etc/passwd", "cosi-sanity"} {
		if len(files[f]) == 0 {
			t.Errorf("the image has no %s", f)
		}
	}
	if !strings.Contains(string(files["etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user:\n%s", files["etc/passwd"])
	}
	bin := filepath.Join(t.TempDir(), "cosi-sanity")
	if err := os.WriteFile(bin, files["cosi-sanity"], 0o755); err != nil {
		t.Fatal(err)
	}
	v, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(v)) != "cosi-sanity "+testVersion {
		t.Errorf("cosi-sanity --version: %q, %v; want %q", v, err, "cosi-sanity "+testVersion)
	}

	// The layout's index names both platforms.
	idx := indexFromLayout(t, out, res[0].Digest)
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var plats []string
	for _, d := range m.Manifests {
		plats = append(plats, d.Platform.String())
	}
	if strings.Join(plats, ",") != "linux/amd64,linux/arm64" {
		t.Errorf("platforms %v", plats)
	}
}

// make push: the layout's images reach a registry (go-containerregistry's registry, a real
// implementation of the distribution API, served in-process) with the digests that were built.
func TestPush(t *testing.T) {
	out := t.TempDir()
	res := build(t, out, "pause")
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	pushed, err := Push(context.Background(), out, u.Host+"/cosi")
	if err != nil {
		t.Fatal(err)
	}
	if len(pushed) != 1 {
		t.Fatalf("pushed %v", pushed)
	}
	ref, err := name.NewTag(u.Host + "/cosi/pause:" + testVersion)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(ref)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != res[0].Digest {
		t.Errorf("the registry serves %s, built %s", desc.Digest, res[0].Digest)
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, _ := idx.IndexManifest()
	for _, d := range m.Manifests {
		if _, err := remote.Image(ref.Context().Digest(d.Digest.String())); err != nil {
			t.Errorf("%s of %s: %v", d.Platform, ref, err)
		}
	}
}

func indexFromLayout(t *testing.T, out string, digest v1.Hash) v1.ImageIndex {
	t.Helper()
	root, err := layout.ImageIndexFromPath(filepath.Join(out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := root.ImageIndex(digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func flatten(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = b
	}
}
