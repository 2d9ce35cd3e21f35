package sanity

import (
	"encoding/xml"
	"fmt"
	"io"
)

type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
}

// WriteJUnit writes results as JUnit XML, the format CI systems display.
func WriteJUnit(w io.Writer, results []Result) error {
	suite := junitSuite{Name: "cosi-sanity", Tests: len(results)}
	var total float64
	for _, r := range results {
		c := junitCase{Name: r.Name, Classname: "cosi-sanity", Time: fmt.Sprintf("%.3f", r.Duration.Seconds())}
		switch r.Status {
		case Failed:
			suite.Failures++
			c.Failure = &junitMessage{Message: r.Message}
		case Skipped:
			suite.Skipped++
			c.Skipped = &junitMessage{Message: r.Message}
		}
		total += r.Duration.Seconds()
		suite.Cases = append(suite.Cases, c)
	}
	suite.Time = fmt.Sprintf("%.3f", total)
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(junitSuites{Suites: []junitSuite{suite}}); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// Summary counts results by status.
func Summary(results []Result) (passed, failed, skipped int) {
	for _, r := range results {
		switch r.Status {
		case Passed:
			passed++
		case Failed:
			failed++
		case Skipped:
			skipped++
		}
	}
	return passed, failed, skipped
}
