package kubectlcosi

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Object is one object of a status report: what kubectl describe would show of it, condensed.
type Object struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Visibility is found, not found, forbidden (the user may not read it) or error.
	Visibility visibility `json:"visibility"`
	// Deleting is the deletion time of an object being deleted, and Finalizers what holds it.
	Deleting   *metav1.Time `json:"deleting,omitempty"`
	Finalizers []string     `json:"finalizers,omitempty"`
	// Details are facts about the object (its driver, class, bound Bucket, Secret keys).
	Details    []string    `json:"details,omitempty"`
	Conditions []Condition `json:"conditions,omitempty"`
	Events     []Event     `json:"events,omitempty"`
	// EventsVisibility says whether its events could be read.
	EventsVisibility visibility `json:"eventsVisibility,omitempty"`

	// uid tells its events from those of an earlier object of the same name.
	uid types.UID
}

// Condition is a status condition with the explanation of its reason.
type Condition struct {
	metav1.Condition `json:",inline"`
	Explanation      *Explanation `json:"explanation,omitempty"`
}

// Event is one of the latest events about an object.
type Event struct {
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Count   int32     `json:"count,omitempty"`
	Last    time.Time `json:"last"`
}

// Diagnosis is the one sentence of a status report: what is wrong, who can fix it and what
// happens next on its own.
type Diagnosis struct {
	// Ready is true when everything in the chain is done.
	Ready bool `json:"ready"`
	// Problem is empty when Ready.
	Problem string `json:"problem,omitempty"`
	// Who is WhoUser, WhoAdmin, WhoDriverOwner or WhoNobody; Action what they do.
	Who    string `json:"who"`
	Action string `json:"action,omitempty"`
	// Next is what happens on its own.
	Next string `json:"next,omitempty"`
	// Sentence is all of it, in one sentence.
	Sentence string `json:"sentence"`

	// waits: an access waits for its claims or Buckets; the claims may say why.
	waits bool
}

func (d *Diagnosis) finish() {
	var b strings.Builder
	if d.Ready {
		b.WriteString(d.Problem)
	} else {
		b.WriteString(d.Problem)
		switch d.Who {
		case WhoNobody:
			b.WriteString("; nobody needs to act")
		case "":
		default:
			fmt.Fprintf(&b, "; the %s can fix it: %s", d.Who, d.Action)
		}
	}
	if d.Next != "" {
		b.WriteString("; " + d.Next)
	}
	d.Sentence = b.String() + "."
}

// StatusReport is the output of status claim and status access.
type StatusReport struct {
	Kind      string    `json:"kind"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Diagnosis Diagnosis `json:"diagnosis"`
	Objects   []*Object `json:"objects"`
	// NotVisible lists what could not be read, and why it matters.
	NotVisible []string `json:"notVisible,omitempty"`
}

func newObject(kind, namespace, name string) *Object {
	return &Object{Kind: kind, Namespace: namespace, Name: name}
}

// fill records obj's lifecycle and conditions.
func (o *Object) fill(obj client.Object, conds []metav1.Condition) {
	o.uid = obj.GetUID()
	o.Deleting = obj.GetDeletionTimestamp()
	o.Finalizers = obj.GetFinalizers()
	for _, c := range conds {
		cond := Condition{Condition: c}
		if e, ok := explain(c.Reason); ok {
			cond.Explanation = &e
		}
		o.Conditions = append(o.Conditions, cond)
	}
}

func (o *Object) condition(typ string) *metav1.Condition {
	for i := range o.Conditions {
		if o.Conditions[i].Type == typ {
			return &o.Conditions[i].Condition
		}
	}
	return nil
}

// maxEvents is how many of an object's latest events are shown.
const maxEvents = 5

// events reads the latest events about the object, not about an earlier object of the same name.
// Events of cluster-scoped objects are in the default namespace, where the events API records
// them.
func (c *Command) events(ctx context.Context, o *Object) {
	ns := o.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	fields := client.MatchingFields{"involvedObject.name": o.Name, "involvedObject.kind": o.Kind}
	if o.uid != "" {
		fields["involvedObject.uid"] = string(o.uid)
	}
	var list corev1.EventList
	err := c.Client.List(ctx, &list, client.InNamespace(ns), fields)
	switch v, _ := classify(err); v {
	case visible:
	default:
		o.EventsVisibility = v
		return
	}
	o.EventsVisibility = visible
	for _, e := range list.Items {
		last := e.LastTimestamp.Time
		if last.IsZero() {
			last = e.EventTime.Time
		}
		if last.IsZero() {
			last = e.CreationTimestamp.Time
		}
		count := e.Count
		if e.Series != nil {
			count = e.Series.Count
			if t := e.Series.LastObservedTime.Time; t.After(last) {
				last = t
			}
		}
		o.Events = append(o.Events, Event{Type: e.Type, Reason: e.Reason, Message: e.Message, Count: count, Last: last})
	}
	slices.SortStableFunc(o.Events, func(a, b Event) int { return b.Last.Compare(a.Last) })
	if len(o.Events) > maxEvents {
		o.Events = o.Events[:maxEvents]
	}
}

// printObjects writes the chain as text.
func printObjects(w io.Writer, objs []*Object, now time.Time) {
	for _, o := range objs {
		name := o.Name
		if o.Namespace != "" {
			name = o.Namespace + "/" + o.Name
		}
		fmt.Fprintf(w, "\n%s %s", o.Kind, printable(name))
		switch o.Visibility {
		case visible:
			fmt.Fprintln(w)
		case forbidden:
			fmt.Fprintln(w, ": not visible (Forbidden: you may not read it)")
			continue
		default:
			fmt.Fprintf(w, ": %s\n", o.Visibility)
			continue
		}
		if o.Deleting != nil {
			fmt.Fprintf(w, "  Terminating since %s (%s ago), held by finalizers %v\n",
				o.Deleting.Format(time.RFC3339), now.Sub(o.Deleting.Time).Round(time.Second), o.Finalizers)
		}
		for _, d := range o.Details {
			fmt.Fprintf(w, "  %s\n", printable(d))
		}
		for _, cond := range o.Conditions {
			fmt.Fprintf(w, "  %-19s %-7s %s", printable(cond.Type), printable(string(cond.Status)), printable(cond.Reason))
			if cond.Message != "" {
				fmt.Fprintf(w, ": %s", printable(cond.Message))
			}
			fmt.Fprintln(w)
		}
		switch {
		case o.EventsVisibility == forbidden:
			fmt.Fprintln(w, "  Events: not visible (Forbidden)")
		case len(o.Events) > 0:
			fmt.Fprintln(w, "  Events (latest first):")
			for _, e := range o.Events {
				fmt.Fprintf(w, "    %s ago  %-7s %s: %s\n", now.Sub(e.Last).Round(time.Second), printable(e.Type),
					printable(e.Reason), printable(e.Message))
			}
		}
	}
}

// printStatus writes a status report as text: the sentence first.
func printStatus(r *StatusReport, now time.Time) func(io.Writer) {
	return func(w io.Writer) {
		fmt.Fprintln(w, printable(r.Diagnosis.Sentence))
		printObjects(w, r.Objects, now)
		if len(r.NotVisible) > 0 {
			fmt.Fprintln(w, "\nNot visible with your rights:")
			for _, n := range r.NotVisible {
				fmt.Fprintf(w, "  %s\n", printable(n))
			}
		}
	}
}

// printable escapes, for the text output, what a terminal would act on in a string that others
// wrote (a tenant's Secret values and events, a driver's messages, a Lease's holder): control
// characters (escape sequences, carriage returns, newlines that would start a line of their own)
// and the Unicode controls that reorder text. JSON and YAML escape them already.
func printable(s string) string {
	if !strings.ContainsFunc(s, unprintable) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unprintable(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func unprintable(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) }
