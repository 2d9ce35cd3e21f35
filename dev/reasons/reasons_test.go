package reasons

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestFromFileEveryConstant: a reason is found however its value is written: a literal, another
// constant, a concatenation, in a group with a type. A reason the tests cannot see is a reason
// that nobody has to explain.
func TestFromFileEveryConstant(t *testing.T) {
	path := filepath.Join(t.TempDir(), "well_known.go")
	src := `package v1alpha2

type Reason string

const (
	ReasonA        = "A"
	EventA         = ReasonA
	EventB         = ReasonA + "B"
	ReasonC Reason = "C"
	ConditionD     = "D"
	ReasonE        = ` + "`E`" + `
)
`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := fromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []Reason{{"EventA", "A"}, {"EventB", "AB"}, {"ReasonA", "A"}, {"ReasonC", "C"}, {"ReasonE", "E"}}
	slices.SortFunc(got, func(a, b Reason) int { return strings.Compare(a.Name, b.Name) })
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
