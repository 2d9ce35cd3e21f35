// Command rename-import-alias gives an imported package the same name in every Go file: it sets
// the import's alias and renames the package's uses in the file, leaving everything else as it
// was (then gofmt-s the file). It is how the tree moved to the aliases that importas enforces
// (.golangci.yml): cosiapi for the API, cosiproto for the driver protocol.
//
//	cd hack/lint && go run ./rename-import-alias -root ../.. \
//	    github.com/kube-cosi/cosi/api/objectstorage/v1alpha2=cosiapi \
//	    github.com/kube-cosi/cosi/proto=cosiproto
//
// It walks every .go file under -root (skipping generated files), or the files named with
// -files. A use is an identifier X in X.Sel that the parser left unresolved, so a local variable
// that shadows the old name is not renamed; a comment's "X.Exported" is renamed too. A file that
// already uses the new name for something else is reported and left alone. Run `make lint-fix`
// afterwards to regroup the imports.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

func main() {
	root := flag.String("root", ".", "directory to walk for .go files")
	files := flag.String("files", "", "comma-separated files to rewrite instead of walking -root")
	dryRun := flag.Bool("n", false, "only list the files that would change")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: rename-import-alias [flags] importpath=alias...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	renames := map[string]string{}
	for _, arg := range flag.Args() {
		path, alias, ok := strings.Cut(arg, "=")
		if !ok || path == "" || !token.IsIdentifier(alias) {
			fmt.Fprintf(os.Stderr, "bad argument %q: want importpath=alias\n", arg)
			os.Exit(2)
		}
		renames[path] = alias
	}
	names := map[string]string{}
	for path := range renames {
		names[path] = packageName(*root, path)
	}
	paths, err := goFiles(*root, *files)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	failed := false
	for _, path := range paths {
		changed, err := rewriteFile(path, renames, names, *dryRun)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			failed = true
			continue
		}
		if changed {
			fmt.Println(path)
		}
	}
	if failed {
		os.Exit(1)
	}
}

// goFiles lists the files to rewrite: the -files list, or every non-generated .go file under root.
func goFiles(root, list string) ([]string, error) {
	if list != "" {
		return strings.Split(list, ","), nil
	}
	var paths []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			paths = append(paths, path)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walking %s: %w", root, err)
	}
	return paths, nil
}

// edit replaces src[start:end] with text.
type edit struct {
	start, end int
	text       string
}

// rewriteFile renames the imports of one file and reports whether it changed.
// names holds the declared package name of each import path, the name of an unaliased import.
func rewriteFile(path string, renames, names map[string]string, dryRun bool) (bool, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("reading: %w", err)
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		return false, fmt.Errorf("parsing: %w", err)
	}
	if ast.IsGenerated(file) {
		return false, nil
	}
	offset := func(p token.Pos) int { return fset.Position(p).Offset }
	var edits []edit
	for _, imp := range file.Imports {
		importPath, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			return false, fmt.Errorf("import %s: %w", imp.Path.Value, err)
		}
		alias, ok := renames[importPath]
		if !ok {
			continue
		}
		old := names[importPath]
		if imp.Name != nil {
			old = imp.Name.Name
		}
		if old == alias || old == "_" || old == "." {
			continue
		}
		if uses(file, alias) {
			return false, fmt.Errorf("the file already uses the name %s; rename %s by hand", alias, importPath)
		}
		if imp.Name != nil {
			edits = append(edits, edit{offset(imp.Name.Pos()), offset(imp.Name.End()), alias})
		} else {
			edits = append(edits, edit{offset(imp.Path.Pos()), offset(imp.Path.Pos()), alias + " "})
		}
		ast.Inspect(file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			// An identifier the parser did not resolve to a declaration in the file is a package
			// (or a universe name, which cannot be the qualifier of a selector).
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == old && x.Obj == nil {
				edits = append(edits, edit{offset(x.Pos()), offset(x.End()), alias})
			}
			return true
		})
		edits = append(edits, commentEdits(file, offset, old, alias)...)
	}
	if len(edits) == 0 {
		return false, nil
	}
	if dryRun {
		return true, nil
	}
	out, err := format.Source(apply(src, edits))
	if err != nil {
		return false, fmt.Errorf("formatting the rewritten file: %w", err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return false, fmt.Errorf("writing: %w", err)
	}
	return true, nil
}

// commentEdits renames the package in comments too, where a comment names one of its exported
// identifiers ("implements cosi.IdentityServer"); "cosi.proto" or "cosi." at the end of a sentence
// are left alone.
func commentEdits(file *ast.File, offset func(token.Pos) int, old, alias string) []edit {
	qualified := regexp.MustCompile(`\b` + regexp.QuoteMeta(old) + `\.[A-Z]`)
	var edits []edit
	for _, group := range file.Comments {
		for _, c := range group.List {
			for _, m := range qualified.FindAllStringIndex(c.Text, -1) {
				start := offset(c.Pos()) + m[0]
				edits = append(edits, edit{start, start + len(old), alias})
			}
		}
	}
	return edits
}

// apply makes the edits on a copy of src.
func apply(src []byte, edits []edit) []byte {
	sort.Slice(edits, func(i, j int) bool { return edits[i].start < edits[j].start })
	var buf bytes.Buffer
	last := 0
	for _, e := range edits {
		buf.Write(src[last:e.start])
		buf.WriteString(e.text)
		last = e.end
	}
	buf.Write(src[last:])
	return buf.Bytes()
}

// uses reports whether the file has an identifier with the given name.
func uses(file *ast.File, name string) bool {
	found := false
	ast.Inspect(file, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && id.Name == name {
			found = true
		}
		return !found
	})
	return found
}

// module is this repository's module path; its packages live in the directory of the same suffix.
const module = "github.com/kube-cosi/cosi"

// packageName returns the name a package is declared with: read from the package clause of a
// file in its directory when it is a package of this repository (the driver protocol's package is
// named cosi, not proto), otherwise guessed from the import path as goimports does (the last
// element, without a major version suffix).
func packageName(root, importPath string) string {
	if rel, ok := strings.CutPrefix(importPath, module); ok {
		dir := filepath.Join(root, filepath.FromSlash(rel))
		if matches, _ := filepath.Glob(filepath.Join(dir, "*.go")); len(matches) > 0 {
			file, err := parser.ParseFile(token.NewFileSet(), matches[0], nil, parser.PackageClauseOnly)
			if err == nil {
				return strings.TrimSuffix(file.Name.Name, "_test")
			}
		}
	}
	name := importPath[strings.LastIndex(importPath, "/")+1:]
	if strings.HasPrefix(name, "v") && len(name) > 1 && strings.Trim(name[1:], "0123456789") == "" {
		trimmed := strings.TrimSuffix(importPath, "/"+name)
		name = trimmed[strings.LastIndex(trimmed, "/")+1:]
	}
	return name
}
