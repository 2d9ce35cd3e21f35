// Package imports checks the import hygiene promised to driver authors: the API types, the driver
// protocol, the SDK, the reference driver and the conformance suite can be imported without
// pulling in controller-runtime or client-go.
package imports

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-cosi/cosi/internal/testenv"
)

func TestImportHygiene(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		module    string // directory of the module, relative to the repository root
		packages  []string
		forbidden []string // import path prefixes that must not be among the dependencies
	}{
		{"api", []string{"./..."}, []string{"sigs.k8s.io/controller-runtime", "k8s.io/client-go", "google.golang.org/grpc"}},
		{"proto", []string{"./..."}, []string{"k8s.io/", "sigs.k8s.io/"}},
		// What a driver vendor imports or runs: the SDK, the reference driver, the conformance suite.
		{".", []string{"./pkg/driver", "./drivers/...", "./test/sanity", "./cmd/cosi-driver-memory", "./cmd/cosi-sanity"},
			[]string{"k8s.io/", "sigs.k8s.io/"}},
	}
	for _, tc := range cases {
		t.Run(tc.module, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), "go", append([]string{"list", "-deps"}, tc.packages...)...)
			cmd.Dir = filepath.Join(root, tc.module)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list -deps in %s: %v", tc.module, err)
			}
			deps := strings.Fields(string(out))
			if len(deps) < 10 {
				t.Fatalf("go list found only %d dependencies in %s; the check would prove nothing", len(deps), tc.module)
			}
			for _, dep := range deps {
				for _, prefix := range tc.forbidden {
					if strings.HasPrefix(dep, prefix) {
						t.Errorf("module %s depends on %s; it must not import %s", tc.module, dep, prefix)
					}
				}
			}
		})
	}
}
