// Package docs checks that the documentation keeps up with the code.
package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-cosi/cosi/dev/reasons"
)

// TestTroubleshootingListsEveryReason: docs/troubleshooting.md has a table row for every
// condition reason and event reason of the API (api/objectstorage/v1alpha2/well_known.go), saying
// what it means, who acts and what to do.
func TestTroubleshootingListsEveryReason(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	all, err := reasons.FromAPI()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 20 {
		t.Fatalf("found only %d reasons in the API", len(all))
	}
	for _, r := range all {
		row := "| `" + r.Value + "` |"
		i := strings.Index(doc, row)
		if i < 0 {
			t.Errorf("docs/troubleshooting.md has no table row for %s (%q)", r.Name, r.Value)
			continue
		}
		line, _, _ := strings.Cut(doc[i:], "\n")
		if cells := strings.Count(line, "|"); cells < 5 {
			t.Errorf("the row of %s has %d columns; want what it means, who acts and what to do: %s",
				r.Value, cells-1, line)
		}
	}
}
