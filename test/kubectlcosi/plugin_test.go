package kubectlcosi

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubectlPlugin: kubectl finds bin/kubectl-cosi (make build) on the PATH and runs it with the
// kubeconfig and namespace of its own flags and environment.
func TestKubectlPlugin(t *testing.T) {
	claim, _ := healthy(t)
	plugin := filepath.Join(env.RepoRoot, "bin", "kubectl-cosi")
	if _, err := os.Stat(plugin); err != nil {
		t.Fatalf("%v: run make build first", err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteAdminKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), filepath.Join(env.BinDir, "kubectl"), "cosi", "status", "claim",
		claim.Name, "-n", namespace)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig,
		"PATH="+filepath.Dir(plugin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "BucketClaim "+claim.Name+" is provisioned") {
		t.Fatalf("kubectl cosi status claim: %v\n%s", err, out)
	}
}
