package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// Comparison is one figure of the side-by-side mode: each implementation's median and range over
// its runs, and their ratio.
type Comparison struct {
	Name      string `json:"name"`
	Unit      string `json:"unit"`
	This      stat   `json:"this"`
	Reference stat   `json:"reference"`
	// Ratio is this project's median over the reference's (0 when the reference's is 0);
	// RatioMin and RatioMax are the lowest and highest ratio of a pair of runs (the i-th of each,
	// measured one after the other).
	Ratio    float64 `json:"ratio"`
	RatioMin float64 `json:"ratioMin"`
	RatioMax float64 `json:"ratioMax"`
}

// sideFigure is a figure the side-by-side mode compares.
type sideFigure struct {
	name, unit string
	get        func(SideRun) float64
}

// sideFigures are the figures of the comparison, in the order printed.
var sideFigures = []sideFigure{
	{"claims/s (first create → last ready)", "obj/s", func(r SideRun) float64 { return r.ClaimsPerSec }},
	{"accesses/s (first create → last ready)", "obj/s", func(r SideRun) float64 { return r.AccessesPerSec }},
	{"claim latency p50", "ms", func(r SideRun) float64 { return r.ClaimP50 }},
	{"access latency p50", "ms", func(r SideRun) float64 { return r.AccessP50 }},
	{"API writes per claim (all resources)", "writes", func(r SideRun) float64 { return r.ClaimWrites }},
	{"API writes per access (all resources)", "writes", func(r SideRun) float64 { return r.AccessWrites }},
	{"API requests per access (all)", "requests", func(r SideRun) float64 { return r.AccessRequests }},
	{"reconciles per claim (controller + sidecar)", "reconciles", func(r SideRun) float64 { return r.ClaimReconciles }},
	{"reconciles per access (controller + sidecar)", "reconciles",
		func(r SideRun) float64 { return r.AccessReconciles }},
	{"API-server CPU per 1,000 claims", "CPU-s", func(r SideRun) float64 { return r.APIServerCPU.Claims }},
	{"API-server CPU per 1,000 accesses", "CPU-s", func(r SideRun) float64 { return r.APIServerCPU.Accesses }},
	{"sidecar CPU per 1,000 claims", "CPU-s", func(r SideRun) float64 { return r.SidecarCPU.Claims }},
	{"sidecar CPU per 1,000 accesses", "CPU-s", func(r SideRun) float64 { return r.SidecarCPU.Accesses }},
	{"controller CPU per 1,000 claims", "CPU-s", func(r SideRun) float64 { return r.ControllerCPU.Claims }},
	{"controller CPU per 1,000 accesses", "CPU-s", func(r SideRun) float64 { return r.ControllerCPU.Accesses }},
	{"controller peak RSS", "MiB", func(r SideRun) float64 { return r.ControllerPeakRSS }},
	{"sidecar peak RSS", "MiB", func(r SideRun) float64 { return r.SidecarPeakRSS }},
}

// loadFigure is the machine's load when each run started: context for the rates, not compared.
var loadFigure = sideFigure{"load average at the start (1 min)", "", func(r SideRun) float64 { return r.Load }}

// compareSides compares every figure of this project's runs and the reference's.
func compareSides(this, reference []SideRun) []Comparison {
	out := make([]Comparison, 0, len(sideFigures)+1)
	for _, f := range sideFigures {
		c := compare(values(this, f.get), values(reference, f.get))
		c.Name, c.Unit = f.name, f.unit
		out = append(out, c)
	}
	load := Comparison{Name: loadFigure.name, This: summarize(values(this, loadFigure.get)),
		Reference: summarize(values(reference, loadFigure.get))}
	return append(out, load)
}

func values(runs []SideRun, get func(SideRun) float64) []float64 {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = get(r)
	}
	return v
}

// compare summarizes two series of runs and their ratio: of the medians, and the range of the
// ratios of the i-th runs of each (pairs whose reference value is 0 are left out).
func compare(this, reference []float64) Comparison {
	c := Comparison{This: summarize(this), Reference: summarize(reference)}
	if c.Reference.Median != 0 {
		c.Ratio = c.This.Median / c.Reference.Median
	}
	first := true
	for i := range min(len(this), len(reference)) {
		if reference[i] == 0 {
			continue
		}
		r := this[i] / reference[i]
		if first || r < c.RatioMin {
			c.RatioMin = r
		}
		if first || r > c.RatioMax {
			c.RatioMax = r
		}
		first = false
	}
	return c
}

// sideRequests are an implementation's API requests per claim and per access, by "VERB
// resource[/subresource] code", medians over its runs.
type sideRequests map[string]phaseFigures

// medianRequests is the median over runs of each request count (absent counts 0).
func medianRequests(runs []SideRun) sideRequests {
	keys := map[string]bool{}
	for _, r := range runs {
		for k := range r.Requests {
			keys[k] = true
		}
	}
	out := sideRequests{}
	for k := range keys {
		var c, a []float64
		for _, r := range runs {
			c, a = append(c, r.Requests[k].Claims), append(a, r.Requests[k].Accesses)
		}
		out[k] = phaseFigures{Claims: summarize(c).Median, Accesses: summarize(a).Median}
	}
	return out
}

// requestIsWrite says whether a request key ("VERB resource[/subresource] code") is a write.
func requestIsWrite(key string) bool {
	verb, _, _ := strings.Cut(key, " ")
	return request{Verb: verb}.isWrite()
}

// printSideBySide prints, for each size, the comparison and the requests of each implementation.
func printSideBySide(w io.Writer, cfg Config, r SideBySide) {
	for _, n := range cfg.Sizes {
		fmt.Fprintf(w, "\ncosi-bench side by side, N=%d claims, then one access each; runs: %d of each, alternated "+
			"(this project first in odd runs), each on a fresh API server; %d writers\n", n, cfg.Runs, cfg.Writers)
		fmt.Fprintf(w, "this project: %s (%s); reference: %s (%s)\n", r.This, cfg.BinDir, r.Reference.Commit,
			r.Reference.Dir)
		fmt.Fprintf(w, "median [min – max] over the runs; RATIO: this project's median / the reference's "+
			"[range over the pairs of runs]\n\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "MEASUREMENT\tUNIT\tTHIS PROJECT\tREFERENCE\tRATIO")
		for _, c := range r.Summary[n] {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Name, c.Unit, statText(c.This), statText(c.Reference), ratioText(c))
		}
		tw.Flush()
		printSideRequests(w, n, r.Requests[n][implThis], r.Requests[n][implReference])
	}
}

// printSideRequests prints each implementation's requests per claim and per access: writes first,
// then reads, with their totals.
func printSideRequests(w io.Writer, n int, this, reference sideRequests) {
	fmt.Fprintf(w, "\nN=%d: API requests per claim and per access (median over the runs)\n\n", n)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "REQUEST (verb resource[/subresource] code)\tTHIS: PER CLAIM\tPER ACCESS\t"+
		"REFERENCE: PER CLAIM\tPER ACCESS\t")
	all := maps.Clone(this)
	maps.Copy(all, reference)
	keys := slices.Sorted(maps.Keys(all))
	for _, writes := range []bool{true, false} {
		var thisTotal, refTotal phaseFigures
		for _, k := range keys {
			if requestIsWrite(k) != writes {
				continue
			}
			t, f := this[k], reference[k]
			if t == (phaseFigures{}) && f == (phaseFigures{}) {
				continue // counted in some runs only, in none at the median
			}
			thisTotal.Claims, thisTotal.Accesses = thisTotal.Claims+t.Claims, thisTotal.Accesses+t.Accesses
			refTotal.Claims, refTotal.Accesses = refTotal.Claims+f.Claims, refTotal.Accesses+f.Accesses
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", k, fig(t.Claims), fig(t.Accesses), fig(f.Claims), fig(f.Accesses))
		}
		name := map[bool]string{true: "writes", false: "reads"}[writes]
		fmt.Fprintf(tw, "total %s\t%s\t%s\t%s\t%s\t\n", name,
			fig(thisTotal.Claims), fig(thisTotal.Accesses), fig(refTotal.Claims), fig(refTotal.Accesses))
	}
	tw.Flush()
}

func statText(s stat) string {
	return fmt.Sprintf("%s [%s – %s]", num(s.Median), num(s.Min), num(s.Max))
}

func ratioText(c Comparison) string {
	if c.Ratio == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f× [%.2f – %.2f]", c.Ratio, c.RatioMin, c.RatioMax)
}
