// Package reasons lists the condition reasons and event reasons of the API, read from the source
// of api/objectstorage/v1alpha2/well_known.go: the tests that check that every reason is
// explained (kubectl-cosi, docs/troubleshooting.md) use it, so that a reason added to the API
// without an explanation fails them.
package reasons

import (
	"errors"
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"runtime"
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

// fromFile returns every string constant of the Go file path whose name starts with Reason or
// Event. The file is type-checked on its own (well_known.go imports nothing), so that a value
// written as another constant or a concatenation is found as the compiler sees it.
func fromFile(path string) ([]Reason, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		return nil, err
	}
	pkg, err := (&types.Config{}).Check(f.Name.Name, fset, []*ast.File{f}, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []Reason
	for _, name := range pkg.Scope().Names() {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if !ok || !strings.HasPrefix(name, "Reason") && !strings.HasPrefix(name, "Event") {
			continue
		}
		if c.Val().Kind() != constant.String {
			return nil, fmt.Errorf("%s: %s is not a string constant", path, name)
		}
		out = append(out, Reason{Name: name, Value: constant.StringVal(c.Val())})
	}
	return out, nil
}
