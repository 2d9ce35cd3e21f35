package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Push copies every index of the OCI layout that Build wrote in out to registry, under the same
// name and tag, and returns the references it pushed.
func Push(ctx context.Context, out, registry string, opts ...remote.Option) ([]string, error) {
	lp, err := layout.FromPath(filepath.Join(out, "oci"))
	if err != nil {
		return nil, fmt.Errorf("%s has no image layout (run make images first): %w", out, err)
	}
	root, err := lp.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := root.IndexManifest()
	if err != nil {
		return nil, err
	}
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	var pushed []string
	for _, d := range m.Manifests {
		built := d.Annotations["org.opencontainers.image.ref.name"]
		// <registry>/<name>:<tag>: keep name and tag, change the registry.
		slash := strings.LastIndex(built, "/")
		if built == "" || slash < 0 {
			return pushed, fmt.Errorf("index %s has no reference name", d.Digest)
		}
		ref, err := name.NewTag(strings.TrimSuffix(registry, "/") + built[slash:])
		if err != nil {
			return pushed, err
		}
		idx, err := root.ImageIndex(d.Digest)
		if err != nil {
			return pushed, err
		}
		if err := remote.WriteIndex(ref, idx, opts...); err != nil {
			return pushed, fmt.Errorf("pushing %s: %w", ref, err)
		}
		pushed = append(pushed, ref.String()+"@"+d.Digest.String())
	}
	if len(pushed) == 0 {
		return nil, errors.New("the image layout holds no image")
	}
	return pushed, nil
}
