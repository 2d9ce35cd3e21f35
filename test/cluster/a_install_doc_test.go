package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-cosi/cosi/test/docs/runnable"
)

// installDoc is the admin's install guide whose node blocks TestInstallDoc runs.
const installDoc = "docs/install.md"

// TestInstallDoc runs docs/install.md as an admin on a fresh node would: every shell block marked
// to run on the node (runnable.NodeMarker), literally and in order, with bin/ first on PATH and
// KUBECONFIG set to the node's admin, as the doc's "On the project's test node" says. The blocks
// before "## Uninstall" install the object store, COSI and the S3 driver and make a bucket with an
// access; then an application Pod writes and reads an object with the access's Secret, reaching the
// store by the Service name the Secret names; then the uninstall blocks remove COSI completely and
// nothing of it may be left.
//
// Its file sorts first, so that it runs on the node as make cluster leaves it, before the other
// stories install anything; it removes what the doc made, the namespaces too, before they run.
func TestInstallDoc(t *testing.T) {
	needNode(t)
	data, err := os.ReadFile(filepath.Join(repo, installDoc))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := runnable.Blocks(string(data))
	if err != nil {
		t.Fatalf("%s: %v", installDoc, err)
	}
	uninstall := headingLine(string(data), "## Uninstall")
	if uninstall == 0 {
		t.Fatalf("%s has no \"## Uninstall\" section", installDoc)
	}
	var install, remove []runnable.Block
	for _, b := range blocks {
		switch {
		case !b.OnNode:
		case b.Line < uninstall:
			install = append(install, b)
		default:
			remove = append(remove, b)
		}
	}
	// The doc's walk has these; a marker lost in an edit must not pass as a shorter walk.
	if len(install) < 6 || len(remove) < 4 {
		t.Fatalf("%s: %d node blocks before \"## Uninstall\" and %d after; want at least 6 and 4",
			installDoc, len(install), len(remove))
	}
	t.Cleanup(func() {
		for _, ns := range []string{"cosi-demo", "s3-store", cosiNamespace} {
			_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		}
		eventually(t, 3*time.Minute, "the doc's namespaces are gone", func(ctx context.Context) error {
			for _, ns := range []string{"cosi-demo", "s3-store", cosiNamespace} {
				if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return errNotYet
				}
			}
			return nil
		})
	})
	for _, b := range install {
		runDocBlock(t, b)
	}
	step(t, "an application writes and reads with the access's Secret", func(t *testing.T) {
		secret, err := cs.CoreV1().Secrets("cosi-demo").Get(t.Context(), "photos-creds", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		const endpoint = "http://versitygw.s3-store.svc.cluster.local:7070"
		if got := string(secret.Data["AWS_ENDPOINT_URL"]); got != endpoint {
			t.Errorf("the Secret's endpoint is %q, want the store's Service name %q", got, endpoint)
		}
		if out := appWith(t, "cosi-demo", "photos-creds", "put", "doc", "walked"); out != "put doc=walked" {
			t.Fatalf("app put: %q", out)
		}
		if out := appWith(t, "cosi-demo", "photos-creds", "get", "doc"); out != "got doc=walked" {
			t.Fatalf("app get: %q", out)
		}
	})
	for _, b := range remove {
		runDocBlock(t, b)
	}
	step(t, "nothing of COSI is left", func(t *testing.T) {
		eventually(t, 3*time.Minute, "the namespaces the doc deletes are gone", func(ctx context.Context) error {
			for _, ns := range []string{"cosi-demo", "s3-store", cosiNamespace} {
				if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return fmt.Errorf("namespace %s: %w", ns, err)
				}
			}
			return nil
		})
		out, err := tryCommand("kubectl", "get", "crd", "-o", "name")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(out), "objectstorage.k8s.io") {
			t.Errorf("CRDs left after the doc's uninstall:\n%s", out)
		}
		out, err = tryCommand("kubectl", "get", "validatingadmissionpolicies", "-l", "app.kubernetes.io/part-of=cosi",
			"-o", "name")
		if err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("admission policies left after the doc's uninstall: %s %v", out, err)
		}
	})
}

// headingLine is the line (from 1) of the Markdown heading heading in doc, 0 when none.
func headingLine(doc, heading string) int {
	for i, l := range strings.Split(doc, "\n") {
		if strings.TrimSpace(l) == heading {
			return i + 1
		}
	}
	return 0
}

// runDocBlock runs a block of installDoc as its reader would, in a step named after its line.
func runDocBlock(t *testing.T, b runnable.Block) {
	t.Helper()
	step(t, installDoc+":"+strconv.Itoa(b.Line), func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute) // a guard against a hang
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", b.Script)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(),
			"KUBECONFIG="+node.Kubeconfig,
			"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		)
		cmd.WaitDelay = 10 * time.Second
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the block failed: %v\n--- block\n%s--- output\n%s", err, b.Script, out)
		}
		t.Logf("\n%s%s", b.Script, out)
	})
}
