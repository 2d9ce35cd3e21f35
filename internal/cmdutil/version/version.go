// Package version holds the version stamped into the commands at build time, and their --version
// flag.
//
// make images (hack/image) stamps it with
//
//	-ldflags "-X github.com/kube-cosi/cosi/internal/cmdutil/version.Version=v0.1.0"
package version

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

// Version is the release or git describe of the build; "devel" when not stamped (go build, go run).
var Version = "devel"

// AddFlag registers --version on fs: it prints "<command> <version>" and exits 0 while the flags
// are parsed, like -h.
func AddFlag(fs *flag.FlagSet) {
	fs.Var(versionFlag{}, "version", "print the version and exit")
}

type versionFlag struct{}

func (versionFlag) IsBoolFlag() bool { return true }
func (versionFlag) String() string   { return "false" }
func (versionFlag) Set(v string) error {
	if v != "true" {
		return nil
	}
	fmt.Printf("%s %s\n", filepath.Base(os.Args[0]), Version)
	os.Exit(0)
	return nil
}
