package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// sectionRef is a reference such as docs/v1alpha1-drivers.md, "Granting again" in a comment or a
// document: the file and the section (a heading, or a paragraph's bold lead).
var sectionRef = regexp.MustCompile(`docs/([a-z0-9-]+\.md), "([^"]+)"`)

// wrapped is a line break inside a reference, with the next line's comment marker.
var wrapped = regexp.MustCompile(`\s*\n\s*(//|#)?\s*`)

// TestSectionReferencesExist: every section a comment, test or document sends its reader to exists
// in the document it names. (Review of issue 41: the v1alpha1 profiles and their tests cite a
// section "Known drivers" of docs/v1alpha1-drivers.md, the table they say they prove, which the
// document does not have.)
func TestSectionReferencesExist(t *testing.T) {
	root := filepath.Join("..", "..")
	docs := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "node_modules", "results":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".yaml":
		default:
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range sectionRef.FindAllStringSubmatch(string(data), -1) {
			file, section := m[1], wrapped.ReplaceAllString(m[2], " ")
			doc, ok := docs[file]
			if !ok {
				b, err := os.ReadFile(filepath.Join(root, "docs", file))
				if err != nil {
					t.Errorf("%s refers to docs/%s, which does not exist", path, file)
					docs[file] = ""
					continue
				}
				doc = string(b)
				docs[file] = doc
			}
			if !hasSection(doc, section) {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s refers to docs/%s, %q: no such heading or bold paragraph lead", rel, file, section)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func hasSection(doc, section string) bool {
	for line := range strings.SplitSeq(doc, "\n") {
		l := strings.TrimSpace(line)
		if strings.HasPrefix(l, "#") && strings.Contains(l, section) {
			return true
		}
		if strings.Contains(l, "**"+section) {
			return true
		}
	}
	return strings.Contains(doc, section+" (`") // a paragraph lead such as "Calls in flight (`pkg/...`)"
}
