// Package reasons lists the condition reasons and event reasons of the API, read from the source
// of api/objectstorage/v1alpha2/well_known.go: the tests that check that every reason is
// explained (kubectl-cosi, docs/troubleshooting.md) use it, so that a reason added to the API
// without an explanation fails them.
package reasons

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// Reason is one constant: its Go name (ReasonPending, EventFailedCreateBucket) and its value.
type Reason struct {
	Name, Value string
}

// FromAPI returns every constant of well_known.go whose name starts with Reason or Event.
func FromAPI() ([]Reason, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return nil, errors.New("cannot locate the source of package reasons")
	}
	return fromFile(filepath.Join(filepath.Dir(file), "..", "..", "api", "objectstorage", "v1alpha2", "well_known.go"))
}

// fromFile returns every constant of the Go file path whose name starts with Reason or Event.
func fromFile(path string) ([]Reason, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		return nil, err
	}
	var out []Reason
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Reason") && !strings.HasPrefix(name.Name, "Event") {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil {
					return nil, err
				}
				out = append(out, Reason{Name: name.Name, Value: v})
			}
		}
	}
	return out, nil
}
