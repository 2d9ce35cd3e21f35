package localenv

import (
	"errors"
	"os"
	"path/filepath"
)

// RepoRoot returns the root of this repository (the directory of the main go.mod), found by
// walking up from the working directory, which `go test` sets to the package directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "config", "crd")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root (go.mod next to config/crd) not found above the working directory")
		}
		dir = parent
	}
}
