// Package layout checks that the tree says what ships: the commands under cmd/ (and pkg/cmd/)
// link no development tooling (dev/, test/), internal/ holds only packages a shipped command
// links, the images are built from shipped commands, and docs/development.md's map has a line for
// every package and top-level folder.
package layout

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kube-cosi/cosi/dev/testenv"
)

const module = "github.com/kube-cosi/cosi"

// tooling are the folders of the main module whose packages never ship.
var tooling = []string{module + "/dev/", module + "/test/"}

// TestShippedCommandsLinkNoTooling: no command that ships (cmd/ in the main module, pkg/cmd/ in
// the SDK module) links a package of dev/ or test/.
func TestShippedCommandsLinkNoTooling(t *testing.T) {
	root := repoRoot(t)
	for _, m := range []struct{ dir, pattern string }{{".", "./cmd/..."}, {"pkg", "./cmd/..."}} {
		commands := testenv.GoList(t, filepath.Join(root, m.dir), m.pattern)
		if len(commands) == 0 {
			t.Fatalf("no command in %s/%s; the check would prove nothing", m.dir, m.pattern)
		}
		for _, c := range commands {
			deps := testenv.GoList(t, filepath.Join(root, m.dir), "-deps", c)
			if !slices.Contains(deps, c) {
				t.Fatalf("go list -deps %s does not list %s itself; the check would prove nothing", c, c)
			}
			for _, dep := range deps {
				for _, prefix := range tooling {
					if strings.HasPrefix(dep, prefix) {
						t.Errorf("the shipped command %s links %s: move what it needs out of %s, or the command to dev/cmd",
							c, dep, strings.TrimPrefix(prefix, module+"/"))
					}
				}
			}
		}
	}
}

// TestInternalHoldsOnlyWhatShips: every package of internal/ is linked by a shipped command; a
// package only tests or tools use belongs in dev/.
func TestInternalHoldsOnlyWhatShips(t *testing.T) {
	root := repoRoot(t)
	internal := testenv.GoList(t, root, "./internal/...")
	if len(internal) < 10 {
		t.Fatalf("go list found only %d packages in internal/; the check would prove nothing", len(internal))
	}
	shipped := testenv.GoList(t, root, "-deps", "./cmd/...")
	for _, p := range internal {
		if !slices.Contains(shipped, p) {
			t.Errorf("%s is in internal/ but no command of cmd/ links it: move it to dev/ (tooling) "+
				"or link it", p)
		}
	}
}

// TestImagesBuildShippedCommands: every image of hack/image that is not a test image, and is
// built from this module, is built from a command of cmd/.
func TestImagesBuildShippedCommands(t *testing.T) {
	root := repoRoot(t)
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "hack", "image", "build.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var images []ast.Expr
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok && len(vs.Names) == 1 && vs.Names[0].Name == "Images" && len(vs.Values) == 1 {
			if lit, ok := vs.Values[0].(*ast.CompositeLit); ok {
				images = lit.Elts
			}
		}
		return true
	})
	found := 0
	for _, e := range images {
		lit, ok := e.(*ast.CompositeLit)
		if !ok {
			continue
		}
		fields := map[string]string{}
		for _, e := range lit.Elts {
			kv, ok := e.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			key, _ := kv.Key.(*ast.Ident)
			switch v := kv.Value.(type) {
			case *ast.BasicLit:
				s, err := strconv.Unquote(v.Value)
				if err == nil && key != nil {
					fields[key.Name] = s
				}
			case *ast.Ident:
				if key != nil {
					fields[key.Name] = v.Name
				}
			}
		}
		found++
		if fields["Test"] == "true" {
			continue
		}
		switch fields["Module"] {
		case ".", "pkg":
			if !strings.HasPrefix(fields["Package"], "./cmd/") {
				t.Errorf("image %s is built from %s, not a shipped command of cmd/", fields["Name"], fields["Package"])
			}
		}
	}
	if found < 5 {
		t.Fatalf("found only %d images in hack/image/build.go; the check would prove nothing", found)
	}
}

// TestDevelopmentMapListsEveryPackage: docs/development.md's map (the fenced block of its Layout
// section) has a line starting with each package's folder and each top-level folder, so that a
// package added without a line fails here. Lines naming folders that are gone fail too.
func TestDevelopmentMapListsEveryPackage(t *testing.T) {
	root := repoRoot(t)
	entries := mapEntries(t, filepath.Join(root, "docs", "development.md"))
	if len(entries) < 20 {
		t.Fatalf("the map has only %d lines naming folders; the check would prove nothing", len(entries))
	}
	var want []string
	for _, f := range gitFiles(t, root) {
		dir := filepath.ToSlash(filepath.Dir(f))
		if dir == "." {
			continue
		}
		top, _, _ := strings.Cut(dir, "/")
		if strings.HasPrefix(top, ".") {
			continue
		}
		want = append(want, top+"/")
		if strings.HasSuffix(f, ".go") && !slices.Contains(strings.Split(dir, "/"), "testdata") {
			want = append(want, dir+"/")
		}
	}
	slices.Sort(want)
	want = slices.Compact(want)
	if len(want) < 20 {
		t.Fatalf("git ls-files found only %d folders; the check would prove nothing", len(want))
	}
	for _, w := range want {
		if !slices.Contains(entries, w) {
			t.Errorf("docs/development.md's map has no line for %s: add one saying what it is", w)
		}
	}
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(root, e)); err != nil {
			t.Errorf("docs/development.md's map names %s, which is not in the tree", e)
		}
	}
}

// mapEntries returns the first word of each line of the Layout section's fenced block that names a
// folder (ends in /).
func mapEntries(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var entries []string
	section, fence := false, false
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			section = line == "## Layout"
		case section && strings.HasPrefix(line, "```"):
			if fence {
				return entries
			}
			fence = true
		case section && fence:
			if w := strings.Fields(line); len(w) > 0 && strings.HasSuffix(w[0], "/") {
				entries = append(entries, w[0])
			}
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("%s: no fenced block in a section ## Layout", path)
	return nil
}

func repoRoot(t *testing.T) string {
	t.Helper()
	out := testenv.GoCmd(t, ".", "list", "-m", "-f", "{{.Dir}}", module)
	return strings.TrimSpace(out)
}

func gitFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "git", "ls-files", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	return strings.Fields(string(out))
}
