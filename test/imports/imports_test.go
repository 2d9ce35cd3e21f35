// Package imports checks the import hygiene promised to driver authors: the API types, the driver
// protocol, the SDK, the reference driver and the conformance suite can be imported without
// pulling in controller-runtime, client-go or a cloud SDK, and a vendor's module that requires the
// SDK module resolves no Kubernetes module at all.
package imports

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kube-cosi/cosi/dev/testenv"

	"github.com/kube-cosi/cosi/dev/localenv"
)

// vendorForbidden are the module path prefixes a driver vendor must never inherit from the SDK.
var vendorForbidden = []string{"k8s.io/", "sigs.k8s.io/", "github.com/aws/", "github.com/Azure/"}

// v1alpha1Protocol reports whether dep is the published COSI v1alpha1 protocol module (its Go
// package, or the module in go list -m output), the one sigs.k8s.io path the SDK may use: the
// sidecar and cosi-sanity speak v1alpha1 too (pkg/driver/v1alpha1). It is generated gRPC code
// requiring only grpc and protobuf; TestV1alpha1ProtocolModule checks that it stays so.
func v1alpha1Protocol(dep string) bool {
	return dep == v1alpha1ProtocolModule || strings.HasPrefix(dep, v1alpha1ProtocolModule+" ")
}

const v1alpha1ProtocolModule = "sigs.k8s.io/container-object-storage-interface/proto"

// TestV1alpha1ProtocolModule: the v1alpha1 protocol module the SDK requires brings no Kubernetes,
// controller-runtime or AWS package into the SDK's build.
func TestV1alpha1ProtocolModule(t *testing.T) {
	root, err := localenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	deps := testenv.GoList(t, filepath.Join(root, "pkg"), "-deps", v1alpha1ProtocolModule)
	if len(deps) < 10 {
		t.Fatalf("go list found only %d dependencies; the check would prove nothing", len(deps))
	}
	for _, dep := range deps {
		for _, prefix := range vendorForbidden {
			if strings.HasPrefix(dep, prefix) && dep != v1alpha1ProtocolModule {
				t.Errorf("%s depends on %s", v1alpha1ProtocolModule, dep)
			}
		}
	}
}

func TestImportHygiene(t *testing.T) {
	root, err := localenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		module    string // directory of the module, relative to the repository root
		packages  []string
		tests     bool     // whether the packages' tests count too
		forbidden []string // import path prefixes that must not be among the dependencies
	}{
		{
			"api",
			[]string{"./..."},
			false,
			[]string{"sigs.k8s.io/controller-runtime", "k8s.io/client-go", "google.golang.org/grpc"},
		},
		{"proto", []string{"./..."}, true, []string{"k8s.io/", "sigs.k8s.io/"}},
		// What a driver vendor imports and runs: the SDK, the reference driver, the conformance
		// suite and its command (pkg/cmd/cosi-sanity), and their tests (a vendor may run them).
		{"pkg", []string{"./..."}, true, vendorForbidden},
		// The Azure probe brings the Azure SDK, and no Kubernetes or AWS module.
		{"pkg/sanity/azureprobe", []string{"./..."}, true, []string{"k8s.io/", "sigs.k8s.io/", "github.com/aws/"}},
		// A thin command over the SDK module (its tests build it with the repository's harness).
		{".", []string{"./cmd/cosi-driver-memory"}, false, vendorForbidden},
	}
	for _, tc := range cases {
		t.Run(tc.module, func(t *testing.T) {
			args := []string{"-deps"}
			if tc.tests {
				args = append(args, "-test")
			}
			deps := testenv.GoList(t, filepath.Join(root, tc.module), append(args, tc.packages...)...)
			if len(deps) < 10 {
				t.Fatalf("go list found only %d dependencies in %s; the check would prove nothing", len(deps), tc.module)
			}
			for _, dep := range deps {
				for _, prefix := range tc.forbidden {
					if strings.HasPrefix(dep, prefix) && !v1alpha1Protocol(dep) {
						t.Errorf("module %s depends on %s; it must not import %s", tc.module, dep, prefix)
					}
				}
			}
		})
	}
}

// TestVendorModuleGraph writes the module a driver vendor would: it requires the SDK module, serves
// a driver and tests it with the conformance suite. Its whole module graph (go list -m all, which
// is what the vendor's version resolution sees, tests of dependencies included) holds no
// Kubernetes, controller-runtime or AWS module.
func TestVendorModuleGraph(t *testing.T) {
	dir := vendorModule(t)
	testenv.GoCmd(t, dir, "vet", "./...")
	modules := testenv.GoList(t, dir, "-m", "all")
	if len(modules) < 5 {
		t.Fatalf("go list -m all found only %d modules; the check would prove nothing", len(modules))
	}
	for _, m := range modules {
		for _, prefix := range vendorForbidden {
			if strings.HasPrefix(m, prefix) && !v1alpha1Protocol(m) {
				t.Errorf("a vendor's module graph holds %s (from the SDK module); it must hold no %s module", m, prefix)
			}
		}
	}
}

// vendorModule writes, in a temporary directory, the module a driver vendor would: it requires
// the SDK module (replaced by this checkout), serves the memory driver and tests it with the
// conformance suite. It returns the directory, tidy.
func vendorModule(t *testing.T) string {
	t.Helper()
	root, err := localenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The replace directives stand in for published versions of the two modules.
	write("go.mod", `module example.com/vendor-driver

go 1.26.0

require (
	github.com/kube-cosi/cosi/pkg v0.0.0
	github.com/kube-cosi/cosi/proto v0.0.0
)

replace (
	github.com/kube-cosi/cosi/pkg => `+filepath.Join(root, "pkg")+`
	github.com/kube-cosi/cosi/proto => `+filepath.Join(root, "proto")+`
)
`)
	write("main.go", `package main

import (
	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

func main() {
	d, err := memory.New(memory.Config{Name: "vendor.example.com"})
	if err != nil {
		panic(err)
	}
	if err := driver.Run(driver.Options{Identity: d, Provisioner: d}); err != nil {
		panic(err)
	}
}
`)
	write("main_test.go", `package main

import (
	"testing"

	"github.com/kube-cosi/cosi/pkg/sanity"
)

func TestConformance(t *testing.T) {
	sanity.Test(t, sanity.Config{Endpoint: "unix:///run/vendor/driver.sock"})
}
`)
	testenv.GoCmd(t, dir, "mod", "tidy")
	return dir
}

// serverOnly are the packages a driver's binary must not link: the sidecar's client of pkg/driver
// (driverclient), the v1alpha1 adapter and protocol, and the gRPC reflection client the client
// detects protocols with.
var serverOnly = []string{
	"github.com/kube-cosi/cosi/pkg/driver/driverclient",
	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1",
	v1alpha1ProtocolModule,
	"google.golang.org/grpc/reflection",
}

// TestDriverBinaryLinksServerOnly: a driver's binary built on pkg/driver (a vendor's minimal main,
// and this repository's driver commands) links the SDK's server side only, not the sidecar's
// client nor the v1alpha1 protocol (issue 24).
func TestDriverBinaryLinksServerOnly(t *testing.T) {
	root, err := localenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, dir string, packages ...string) {
		t.Helper()
		deps := testenv.GoList(t, dir, append([]string{"-deps"}, packages...)...)
		if !slices.Contains(deps, "github.com/kube-cosi/cosi/pkg/driver") {
			t.Fatalf("%v does not link pkg/driver; the check would prove nothing", packages)
		}
		for _, dep := range deps {
			for _, prefix := range serverOnly {
				if dep == prefix || strings.HasPrefix(dep, prefix+"/") {
					t.Errorf("a driver binary (%v) links %s", packages, dep)
				}
			}
		}
	}
	t.Run("vendor", func(t *testing.T) { check(t, vendorModule(t), ".") })
	t.Run("commands", func(t *testing.T) { check(t, root, "./cmd/cosi-driver-memory", "./cmd/cosi-driver-s3") })
}
