// Package cluster is the tier that installs COSI into a real single-node Kubernetes
// (dev/cluster: kubelet, containerd, the project's images) the way an admin does, with Helm
// and with kustomize, and checks what users see: Pods running under their own ServiceAccounts in
// a namespace that enforces Pod Security "restricted", buckets provisioned in a Versity store
// running in the cluster, an application Pod writing and reading through the Secret COSI wrote,
// leader election, upgrades and reinstalls that keep every bucket and access.
//
// It starts the node once for the package (TestMain) and skips, saying why, where the node cannot
// run (not root, no container runtime: make node-runtime) and unless COSI_CLUSTER_TIER is set
// (make test-cluster, part of make test, sets it). make test builds what it needs: the kube
// binaries, make images, make test-images (the application), helm.
package cluster

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube-cosi/cosi/dev/cluster"
	"github.com/kube-cosi/cosi/dev/issuer"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/internal/kube/scheme"
)

var (
	node *cluster.Node
	// c is a cluster admin's client with the COSI types; cs the typed one.
	c  client.Client
	cs kubernetes.Interface
	// repo is the repository's root, bin its bin/.
	repo, bin string
	// skipReason is why the node cannot run here; every test skips with it.
	skipReason string
	// front publishes the node's ServiceAccount issuer for the store's IAM service (the API
	// server's --service-account-issuer is its URL); noIssuer says why there is none here.
	front    *issuer.Front
	noIssuer error
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	begin := time.Now()
	if testing.Short() {
		skipReason = "-short: the cluster tier starts a node"
		return m.Run()
	}
	// The node changes the host while it runs (sysctls, iptables, a bridge; all restored after):
	// only on purpose, never from a bare go test ./...
	if os.Getenv("COSI_CLUSTER_TIER") == "" {
		skipReason = "the cluster tier starts a Kubernetes node on this machine: run it with make test-cluster " +
			"(make test does), or COSI_CLUSTER_TIER=1 go test ./test/cluster as root"
		return m.Run()
	}
	if err := cluster.Preflight(); err != nil {
		skipReason = err.Error()
		fmt.Println("test/cluster: SKIPPED:", skipReason)
		return m.Run()
	}
	var err error
	if repo, err = localenv.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	bin = filepath.Join(repo, "bin")
	dir, err := os.MkdirTemp("", "cosi-node")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	before := cluster.HostFingerprint()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	images := []string{filepath.Join(bin, "images"), filepath.Join(bin, "test-images")}
	if dirs := os.Getenv("COSI_CLUSTER_IMAGES"); dirs != "" {
		images = strings.Split(dirs, ",") // images built elsewhere (bin/image build --out DIR)
	}
	opts := cluster.Options{Dir: dir, BinDir: bin, Progress: os.Stdout, ImagesDirs: images}
	// The issuer the store's IAM service verifies ServiceAccount tokens against; without one the
	// ServiceAccount stories skip, saying why.
	// The store's IAM service runs in a Pod: a private front answers the Pod network too.
	if front, noIssuer = issuer.New(); noIssuer == nil {
		if noIssuer = front.AllowFrom(cluster.PodSubnet); noIssuer != nil {
			fmt.Fprintln(os.Stderr, "test/cluster:", noIssuer)
			return 1
		}
		opts.ServiceAccountIssuer, opts.ServiceAccountJWKSURI = front.URL, front.JWKSURI
	}
	node, err = cluster.Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/cluster: the node did not start:", err)
		return 1
	}
	fmt.Printf("test/cluster: node Ready %.1fs after start\n", node.Started.Seconds())
	code := func() int {
		s := scheme.New()
		if err := apiextensionsv1.AddToScheme(s); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if c, err = client.New(node.Config, client.Options{Scheme: s}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if cs, err = kubernetes.NewForConfig(node.Config); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if front != nil {
			if err := front.SetBackend(node.Config); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			if err := localenv.AllowIssuerDiscovery(ctx, c); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		for _, name := range []string{"cosi-controller", "cosi-sidecar", "cosi-driver-s3", "versitygw", "cosi-test-app"} {
			if node.Images[name] == "" {
				fmt.Fprintf(os.Stderr, "test/cluster: no %s image (make images test-images)\n", name)
				return 1
			}
		}
		return m.Run()
	}()
	if err := node.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "test/cluster: stopping the node:", err)
		code = 1
	}
	// The front's namespace and link go with it, before the host is compared.
	if front != nil {
		if err := front.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "test/cluster: closing the issuer front:", err)
			code = 1
		}
	}
	// The tests leave the machine as they found it.
	if after := cluster.HostFingerprint(); after != before {
		fmt.Fprintf(os.Stderr, "test/cluster: the host changed:\n%s\n", lineDiff(before, after))
		code = 1
	}
	// The node keeps its logs when it stops: for a failed tier, to read; otherwise removed.
	if code == 0 {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintln(os.Stderr, "test/cluster: removing the node's directory:", err)
		}
	} else {
		fmt.Fprintf(os.Stderr, "test/cluster: the node's logs are kept in %s\n", filepath.Join(dir, "log"))
	}
	fmt.Printf("test/cluster: tier took %.1fs (node start %.1fs)\n", time.Since(begin).Seconds(), node.Started.Seconds())
	return code
}

func lineDiff(before, after string) string {
	was := map[string]bool{}
	for _, l := range strings.Split(before, "\n") {
		was[l] = true
	}
	is := map[string]bool{}
	var out []string
	for _, l := range strings.Split(after, "\n") {
		is[l] = true
		if !was[l] {
			out = append(out, "+ "+l)
		}
	}
	for _, l := range strings.Split(before, "\n") {
		if !is[l] {
			out = append(out, "- "+l)
		}
	}
	return strings.Join(out, "\n")
}

// needNode skips t where the node cannot run.
func needNode(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	if node == nil {
		t.Fatal("the node did not start")
	}
}

var errNotYet = errors.New("not yet")
