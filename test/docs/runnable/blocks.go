// Package runnable runs the documented commands: every shell block of README.md and docs/ that is
// marked runnable (docs/development.md, "Docs that run") runs, in order per file, against the
// local environment as make run leaves it, so that no documented command rots. The blocks marked
// to run on the project's node are run by the cluster tier (test/cluster), which reads them with
// Blocks.
package runnable

import (
	"bufio"
	"fmt"
	"strings"
)

// Marker is the line before a shell block that the docs test runs. IssuerMarker marks a block
// that needs ServiceAccount authentication (make run's published issuer): it runs where the
// machine can publish one, and is skipped, saying why, elsewhere. NodeMarker marks a block that
// runs on the project's Kubernetes node (make cluster) instead: the cluster tier (test/cluster)
// runs those, and TestDocsRun leaves them to it.
const (
	Marker       = "<!-- runnable -->"
	IssuerMarker = "<!-- runnable: issuer -->"
	NodeMarker   = "<!-- runnable: node -->"
)

// Block is a runnable shell block of a Markdown file.
type Block struct {
	// Line is the line of the opening fence, from 1.
	Line int
	// Script is the block's text, without the fences.
	Script string
	// NeedsIssuer: the block is marked with IssuerMarker; OnNode, with NodeMarker.
	NeedsIssuer, OnNode bool
}

// Blocks returns the runnable blocks of a Markdown document: each fenced sh or bash block whose
// previous non-empty line is a marker (Marker, IssuerMarker, NodeMarker). A marker before anything
// else is an error, so that a misplaced marker does not silently leave a block unchecked.
func Blocks(doc string) ([]Block, error) {
	var blocks []Block
	sc := bufio.NewScanner(strings.NewReader(doc))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	marked, markLine, line, needsIssuer, onNode := false, 0, 0, false, false
	var cur *Block
	var body []string
	for sc.Scan() {
		line++
		raw := sc.Text()
		text := strings.TrimSpace(raw)
		// Four spaces or more make an indented code block: a marker shown as an example there
		// (docs/development.md) marks nothing.
		if cur == nil && strings.HasPrefix(raw, "    ") {
			if marked {
				return nil, fmt.Errorf("line %d: %s is followed by an indented code block, not a ```sh or ```bash block",
					markLine, Marker)
			}
			continue
		}
		switch {
		case cur != nil:
			if text == "```" {
				cur.Script = strings.Join(body, "\n") + "\n"
				blocks = append(blocks, *cur)
				cur, body = nil, nil
				continue
			}
			body = append(body, sc.Text())
		case text == Marker || text == IssuerMarker || text == NodeMarker:
			if marked {
				return nil, fmt.Errorf("line %d: %s twice, without a shell block after line %d", line, Marker, markLine)
			}
			marked, markLine, needsIssuer, onNode = true, line, text == IssuerMarker, text == NodeMarker
		case marked && text == "":
		case marked:
			if lang, ok := strings.CutPrefix(text, "```"); !ok || (lang != "sh" && lang != "bash") {
				return nil, fmt.Errorf("line %d: %s is followed by %q, not a ```sh or ```bash block",
					markLine, Marker, text)
			}
			cur, marked = &Block{Line: line, NeedsIssuer: needsIssuer, OnNode: onNode}, false
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: the runnable block is not closed", cur.Line)
	}
	if marked {
		return nil, fmt.Errorf("line %d: %s at the end of the document", markLine, Marker)
	}
	return blocks, nil
}
