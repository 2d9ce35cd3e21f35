package v1alpha2

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// TestKeyPrefix checks that every annotation and finalizer key declared in well_known.go lives
// under the group name, and that the KEP's "objectstorage.k8.io" typo appears in no constant. It
// reads the source, so a key added later is checked without changing this test.
func TestKeyPrefix(t *testing.T) {
	const prefix = GroupName + "/"
	consts := stringConstants(t, "well_known.go")

	var keys int
	for name, value := range consts {
		if strings.Contains(value, "objectstorage.k8.io") {
			t.Errorf("%s = %q uses the misspelled group objectstorage.k8.io", name, value)
		}
		if strings.HasPrefix(name, "Annotation") || strings.HasPrefix(name, "Finalizer") || strings.HasPrefix(name, "Label") {
			keys++
			if !strings.HasPrefix(value, prefix) {
				t.Errorf("%s = %q does not start with %q", name, value, prefix)
			}
		}
	}
	// The KEP defines five annotations and one finalizer; fewer means the parsing above is broken.
	if keys < 6 {
		t.Fatalf("found %d annotation and finalizer keys in well_known.go, want at least 6", keys)
	}
}

// TestSecretKeysUnique checks that no two protocols render different data under one Secret key,
// except BUCKET_NAME, which the KEP gives both S3 and GCS (a Secret holds one protocol).
func TestSecretKeysUnique(t *testing.T) {
	seen := map[string]string{}
	for name, value := range stringConstants(t, "well_known.go") {
		if !strings.HasPrefix(name, "SecretKey") {
			continue
		}
		if other, dup := seen[value]; dup && value != SecretKeyS3BucketName {
			t.Errorf("%s and %s both use Secret key %q", name, other, value)
		}
		seen[value] = name
	}
	if len(seen) < 19 {
		t.Fatalf("found %d distinct Secret keys, want the KEP's 19", len(seen))
	}
}

// stringConstants returns the string constants declared in file, by name.
func stringConstants(t *testing.T, file string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				value, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				consts[name.Name] = value
			}
		}
	}
	return consts
}
