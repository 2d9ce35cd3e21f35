package runnable

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kube-cosi/cosi/dev/issuer"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/testenv"
)

var (
	env  *localenv.Env
	repo string
	// noIssuer says why the environment has no ServiceAccount issuer (make run says it too).
	noIssuer error
)

func TestMain(m *testing.M) {
	// As make run (localenv.MakeRunOptions), then the demo from examples/.
	opts := localenv.MakeRunOptions()
	// make run publishes the issuer while it runs: so does this test, for the package's life.
	var front *issuer.Front
	if front, noIssuer = issuer.New(); noIssuer == nil {
		opts.Issuer = front
	}
	testenv.RunSystem(m, opts, func(ctx context.Context, e *localenv.Env) error {
		env = e
		var err error
		if repo, err = localenv.RepoRoot(); err != nil {
			return err
		}
		if front != nil {
			// Stops when RunSystem's context ends, after the tests.
			if _, err := localenv.PublishIssuer(ctx, front, io.Discard); err != nil {
				return err
			}
		}
		var out bytes.Buffer
		if err := localenv.Demo(ctx, e, repo, &out); err != nil {
			return fmt.Errorf("the demo of make run: %w\n%s", err, out.String())
		}
		return nil
	})
}

func TestBlocks(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []Block
		wantErr   string
	}{
		{
			name: "marked and unmarked",
			doc:  "# T\n\n```sh\nmake run\n```\n\n" + Marker + "\n```sh\nkubectl get ns\necho ok\n```\n",
			want: []Block{{Line: 8, Script: "kubectl get ns\necho ok\n"}},
		},
		{
			name: "blank line and indented, bash",
			doc:  "1. step\n\n   " + Marker + "\n\n   ```bash\n   true\n   ```\n",
			want: []Block{{Line: 5, Script: "   true\n"}},
		},
		{
			name: "an example in an indented code block",
			doc:  "text\n\n    " + Marker + "\n    ```sh\n    kubectl get ns\n    ```\n",
		},
		{
			name: "needs the issuer",
			doc:  IssuerMarker + "\n```sh\ntrue\n```\n" + Marker + "\n```sh\nfalse\n```\n",
			want: []Block{{Line: 2, Script: "true\n", NeedsIssuer: true}, {Line: 6, Script: "false\n"}},
		},
		{
			name: "on the node",
			doc:  NodeMarker + "\n```sh\nhelm install\n```\n" + Marker + "\n```sh\ntrue\n```\n",
			want: []Block{{Line: 2, Script: "helm install\n", OnNode: true}, {Line: 6, Script: "true\n"}},
		},
		{name: "marker before yaml", doc: Marker + "\n```yaml\na: b\n```\n", wantErr: "not a ```sh"},
		{name: "marker before text", doc: Marker + "\nsome text\n", wantErr: "not a ```sh"},
		{name: "marker at the end", doc: "text\n" + Marker + "\n", wantErr: "at the end"},
		{name: "not closed", doc: Marker + "\n```sh\ntrue\n", wantErr: "not closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Blocks(tc.doc)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("blocks %+v, want %+v", got, tc.want)
			}
		})
	}
}

// docs are README.md and every Markdown file under docs/, relative to the repository.
func docs(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(repo, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".md") {
			return err
		}
		rel, err := filepath.Rel(repo, path)
		files = append(files, rel)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestDocsRun runs every runnable block of README.md and docs/, each file's blocks in order, with
// bash -euo pipefail from the repository's root, KUBECONFIG set to the environment's admin
// kubeconfig and bin/ first on PATH (kubectl, and kubectl-cosi for kubectl cosi).
func TestDocsRun(t *testing.T) {
	total := 0
	for _, file := range docs(t) {
		data, err := os.ReadFile(filepath.Join(repo, file))
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := Blocks(string(data))
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if len(blocks) == 0 {
			continue
		}
		total += len(blocks)
		t.Run(file, func(t *testing.T) {
			for _, b := range blocks {
				if b.OnNode {
					continue // the cluster tier runs it (test/cluster, TestInstallDoc)
				}
				if b.NeedsIssuer && noIssuer != nil {
					t.Logf("%s:%d: skipped, no ServiceAccount issuer here (as make run says): %v", file, b.Line, noIssuer)
					continue
				}
				out, err := run(t.Context(), b.Script)
				if err != nil {
					t.Fatalf("%s:%d: the runnable block failed: %v\n--- block\n%s--- output\n%s", file, b.Line, err, b.Script, out)
				}
				t.Logf("%s:%d:\n%s%s", file, b.Line, prefix("$ ", b.Script), out)
			}
		})
	}
	// The docs this test was written for have runnable blocks: a parser that finds none is broken.
	if total < 10 {
		t.Errorf("found %d runnable blocks in README.md and docs/; want at least 10", total)
	}
}

// run runs a block's script with bash -euo pipefail and returns its combined output.
func run(ctx context.Context, script string) (string, error) {
	// A guard against a block that hangs, not an assertion on its duration.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+env.Kubeconfig,
		"PATH="+filepath.Join(repo, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"),
	)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func prefix(p, s string) string {
	lines := strings.SplitAfter(strings.TrimSuffix(s, "\n"), "\n")
	for i := range lines {
		lines[i] = p + lines[i]
	}
	return strings.Join(lines, "") + "\n"
}
