package chaos

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

// maxHistory bounds the lines of one violation's history.
const maxHistory = 80

// readJournal reads the driver's call journal.
func (r *run) readJournal() []memory.JournalEntry {
	f, err := os.Open(r.journal)
	if err != nil {
		return nil
	}
	defer f.Close()
	entries, _ := memory.ReadJournal(f)
	return entries
}

// countDriverFaults counts, from the driver's journal, the calls served, the injected failures by
// code and the calls slower than the sidecar's timeout.
func (r *run) countDriverFaults() {
	for _, e := range r.readJournal() {
		r.res.Faults["driver calls (all)"]++
		if e.Injected {
			r.res.Faults["driver error "+e.Code+" (injected)"]++
		}
		if e.Took >= r.cfg.DriverTimeout*9/10 { // the ones the sidecar gave up on end at its deadline
			r.res.Faults["driver call slower than --driver-timeout"]++
		}
		if !slices.Contains(rotationMethods, e.Method) {
			continue
		}
		r.res.Rotations[e.Method+": calls"]++
		switch {
		case e.Injected:
			r.res.Rotations[e.Method+": injected errors"]++
		case e.Code == "OK":
			r.res.Rotations[e.Method+": answered OK"]++
		}
		if e.Took >= r.cfg.DriverTimeout*9/10 {
			r.res.Rotations[e.Method+": slower than --driver-timeout"]++
		}
	}
}

// histories gives each violation its history: the harness's actions on the object, the faults
// around them, the driver's calls about it, its events.
func (r *run) histories(ctx context.Context, vs []Violation) []Violation {
	if len(vs) == 0 {
		return vs
	}
	journal := r.readJournal()
	var events eventsv1.EventList
	if err := r.list(ctx, &events); err != nil {
		events.Items = nil
	}
	w, err := r.look(ctx)
	if err != nil {
		w = nil
	}
	for i := range vs {
		v := &vs[i]
		var subjects []string
		for _, s := range v.subjects {
			if s != "" {
				subjects = append(subjects, s)
			}
		}
		type line struct {
			at   time.Time
			text string
		}
		var lines []line
		for _, e := range r.timeline.about(subjects, time.Time{}, time.Time{}) {
			lines = append(lines, line{e.at, "harness: " + e.text})
		}
		for _, e := range journal {
			if slices.Contains(subjects, e.Subject) || e.Account != "" && slices.Contains(subjects, e.Account) {
				// At its end: when the driver acted (or not) and answered.
				text := fmt.Sprintf("driver: %s %s → %s, after %s", e.Method, e.Subject, e.Code,
					e.Took.Round(time.Millisecond))
				if e.Account != "" {
					text += " (the driver's account " + e.Account + ")"
				}
				switch {
				case e.Acted:
					text += " (injected, after the driver acted)"
				case e.Injected:
					text += " (injected)"
				}
				lines = append(lines, line{e.Time.Add(e.Took), text})
			}
		}
		for _, e := range events.Items {
			if slices.Contains(subjects, string(e.Regarding.UID)) || slices.Contains(subjects, e.Regarding.Name) {
				at := e.EventTime.Time
				if at.IsZero() {
					at = e.CreationTimestamp.Time
				}
				text := fmt.Sprintf("event: %s %s %s: %s", e.Regarding.Kind, e.Type, e.Reason, e.Note)
				if e.Series != nil {
					text += fmt.Sprintf(" (x%d)", e.Series.Count+1)
				}
				lines = append(lines, line{at, text})
			}
		}
		// The faults that hit everything, while the object lived.
		if len(lines) > 0 {
			from, to := lines[0].at, lines[0].at
			for _, l := range lines {
				if l.at.Before(from) {
					from = l.at
				}
				if l.at.After(to) {
					to = l.at
				}
			}
			for _, e := range r.timeline.about(nil, from.Add(-3*time.Second), to.Add(3*time.Second)) {
				lines = append(lines, line{e.at, "fault: " + e.text})
			}
		}
		sort.SliceStable(lines, func(a, b int) bool { return lines[a].at.Before(lines[b].at) })
		for j, l := range lines {
			if j == maxHistory {
				v.History = append(v.History, fmt.Sprintf("... %d more", len(lines)-maxHistory))
				break
			}
			v.History = append(v.History, fmt.Sprintf("%+8.1fs %s", l.at.Sub(r.start).Seconds(), l.text))
		}
		if w != nil {
			v.History = append(v.History, w.now(subjects)...)
		}
	}
	return vs
}

// now describes the live objects among subjects: conditions, finalizers, deletion.
func (w *world) now(subjects []string) []string {
	var out []string
	describe := func(kind, name string, m metav1.ObjectMeta, conditions []metav1.Condition, extra string) {
		s := fmt.Sprintf("now: %s %s%s: %s", kind, name, extra, conditionText(conditions))
		if m.DeletionTimestamp != nil {
			s += "; " + since(m.DeletionTimestamp.Time)
		}
		if len(m.Finalizers) > 0 {
			s += "; finalizers " + strings.Join(m.Finalizers, ",")
		}
		out = append(out, s)
	}
	for _, c := range w.claims {
		if slices.Contains(subjects, string(c.UID)) {
			describe("BucketClaim", c.Namespace+"/"+c.Name, c.ObjectMeta, c.Status.Conditions,
				" (bound to "+c.Status.BoundBucketName+")")
		}
	}
	for _, a := range w.accesses {
		if slices.Contains(subjects, string(a.UID)) {
			describe("BucketAccess", a.Namespace+"/"+a.Name, a.ObjectMeta, a.Status.Conditions,
				" (account "+a.Status.AccountID+")")
		}
	}
	for _, b := range w.buckets {
		if slices.Contains(subjects, b.Name) || slices.Contains(subjects, string(b.UID)) {
			describe("Bucket", b.Name, b.ObjectMeta, b.Status.Conditions,
				fmt.Sprintf(" (%s, bucketID %q, claim %s/%s)", b.Spec.DeletionPolicy, b.Status.BucketID,
					b.Spec.BucketClaimRef.Namespace, b.Spec.BucketClaimRef.Name))
		}
	}
	return out
}

// Print writes the result for people: the figures, the faults by kind, and each violation with
// its history.
func (res *Result) Print(w io.Writer) {
	fmt.Fprintf(w, "seed %d: %d claims and %d accesses in %d namespaces\n", res.Seed, res.Claims, res.Accesses,
		res.Namespaces)
	if res.Converged {
		fmt.Fprintf(w, "workload %s (with faults); converged %s after the faults stopped\n",
			res.Workload.Round(time.Second), res.Converge.Round(100*time.Millisecond))
	} else {
		fmt.Fprintf(w, "workload %s (with faults); NOT converged %s after the faults stopped\n",
			res.Workload.Round(time.Second), res.Converge.Round(time.Second))
	}
	fmt.Fprintln(w, "faults injected:")
	for _, k := range slices.Sorted(maps.Keys(res.Faults)) {
		fmt.Fprintf(w, "  %6d  %s\n", res.Faults[k], k)
	}
	fmt.Fprintln(w, "credential rotation and Secret refresh:")
	for _, k := range slices.Sorted(maps.Keys(res.Rotations)) {
		fmt.Fprintf(w, "  %6d  %s\n", res.Rotations[k], k)
	}
	if res.ReportedLeaks != nil {
		fmt.Fprintf(w, "%s: %d\n", ReportedLeaksTitle, len(res.ReportedLeaks))
		for _, l := range res.ReportedLeaks {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	fmt.Fprintf(w, "violations: %d\n", len(res.Violations))
	for _, v := range res.Violations {
		fmt.Fprintf(w, "- %s\n", v)
		for _, h := range v.History {
			fmt.Fprintf(w, "    %s\n", h)
		}
	}
	if len(res.KnownGaps) > 0 {
		fmt.Fprintf(w, "known gaps (checks whose findings come from a known gap in COSI, not counted as "+
			"violations): %d\n", len(res.KnownGaps))
		for _, v := range res.KnownGaps {
			fmt.Fprintf(w, "- %s\n", v)
			for _, h := range v.History {
				fmt.Fprintf(w, "    %s\n", h)
			}
		}
	}
	if res.SelfCheck != nil {
		fmt.Fprintf(w, "self-check: the audit found the planted %s\n",
			strings.Join(slices.Sorted(maps.Keys(res.SelfCheck)), ", "))
	}
	if res.Dir != "" {
		fmt.Fprintf(w, "logs: %s\n", res.Dir+"/log")
	}
}

// Summary is one line of figures.
func (res *Result) Summary() string {
	kinds := 0
	total := 0
	for k, n := range res.Faults {
		if strings.HasPrefix(k, "driver calls") {
			continue
		}
		kinds++
		total += n
	}
	leaks := ""
	if res.ReportedLeaks != nil {
		leaks = fmt.Sprintf(", %d reported leaks", len(res.ReportedLeaks))
	}
	if len(res.KnownGaps) > 0 {
		leaks += fmt.Sprintf(", %d findings of known gaps", len(res.KnownGaps))
	}
	return fmt.Sprintf(
		"seed %d, %d claims, %d accesses, %d faults of %d kinds, workload %s, converged %v in %s%s, %d violations",
		res.Seed, res.Claims, res.Accesses, total, kinds, res.Workload.Round(time.Second), res.Converged,
		res.Converge.Round(100*time.Millisecond), leaks, len(res.Violations))
}
