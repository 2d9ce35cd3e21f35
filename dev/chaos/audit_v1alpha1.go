package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// The accounts of a COSI v1alpha1 driver that names them itself (DriverV1alpha1). Each grant makes
// an account of the driver's naming, which the sidecar records in the access's grant record
// (driverAccountIDs) before any Secret holds its key, and revokes with the access. A grant whose
// answer was lost (the sidecar killed between the driver's answer and the record write, a call
// that failed or timed out after the driver acted) made an account only the driver knows: nothing
// revokes it, and the sidecar reports it, as a Warning event DriverAccountMayHaveLeaked on the
// access, when a later grant of the access answers with a new account after a grant whose answer
// may have been lost (docs/v1alpha1-drivers.md, "Drivers that name their accounts").
//
// So the audit counts, per bucket, the accounts left in the store that no grant record and no live
// access explains and that are granted on it (by their IAM policies), and the events that report a
// leak for an access to it. More accounts than reports is a violation; the others are the reported
// leaks, listed in the report. The accounts are read from the store, the reports from the API (all
// those seen during the run: a namespace deleted whole takes its events with it).

// CheckUnreportedLeak is the check of the accounts of a v1alpha1 driver that names its accounts
// itself: one left in the store, granted on a bucket, that no access explains and no
// DriverAccountMayHaveLeaked event about an access to that bucket reports is a violation.
const CheckUnreportedLeak = "account leaked without a report"

// ReportedLeaksTitle names the reported leaks in the report.
const ReportedLeaksTitle = "reported leaks (the driver names accounts itself; a lost answer)"

// leakReport is one DriverAccountMayHaveLeaked event.
type leakReport struct {
	// access is the BucketAccess it is about, and object its namespace/name.
	access types.UID
	object string
	// count is how many times it was reported (an event series counts each).
	count int
	at    time.Time
	note  string
}

// sawLeakReports records the DriverAccountMayHaveLeaked events in the API now. Events live an hour,
// but a namespace deleted whole takes its own: the workload records them while it runs, and each
// audit again.
func (r *run) sawLeakReports(ctx context.Context) error {
	var el eventsv1.EventList
	if err := r.client.List(ctx, &el,
		client.MatchingFields{"reason": cosiapi.EventDriverAccountMayHaveLeaked}); err != nil {
		return err
	}
	r.ledger.mu.Lock()
	defer r.ledger.mu.Unlock()
	if r.ledger.leakReports == nil {
		r.ledger.leakReports = map[string]leakReport{}
	}
	for _, e := range el.Items {
		if e.Reason != cosiapi.EventDriverAccountMayHaveLeaked || e.Regarding.Kind != "BucketAccess" {
			continue
		}
		n := 1
		if e.Series != nil && int(e.Series.Count) > n {
			n = int(e.Series.Count)
		}
		key := e.Namespace + "/" + e.Name
		if have, ok := r.ledger.leakReports[key]; ok && have.count >= n {
			continue
		}
		at := e.EventTime.Time
		if at.IsZero() {
			at = e.CreationTimestamp.Time
		}
		r.ledger.leakReports[key] = leakReport{access: e.Regarding.UID,
			object: e.Regarding.Namespace + "/" + e.Regarding.Name, count: n, at: at, note: e.Note}
	}
	return nil
}

// reportsByBucket counts the leak reports by the backend buckets of the accesses they are about
// (the ledger's: the bucket a claim was seen bound to, or the one a dynamic claim's Bucket is named
// after, which a v1alpha1 driver takes as its ID; an imported one's). Called under the ledger's lock.
func (l *ledger) reportsByBucket() map[string][]leakReport {
	out := map[string][]leakReport{}
	for _, rep := range l.leakReports {
		a := l.byUID[rep.access]
		if a == nil {
			continue // not the workload's (the self-check plants its own on a workload's access)
		}
		for _, c := range a.claims {
			out[c.backendBucket()] = append(out[c.backendBucket()], rep)
		}
	}
	return out
}

// backendBucket is the claim's backend bucket: the one seen in its Bucket's status, else the one it
// imports, else its dynamic Bucket's name, which a v1alpha1 driver's adapter takes as the bucket ID.
func (c *claimRecord) backendBucket() string {
	switch {
	case c.bucketID != "":
		return c.bucketID
	case c.plan.static:
		return c.plan.staticID
	}
	return cosiapi.BucketNamePrefix + string(c.uid)
}

// checkLeaks checks the accounts in the store that nothing explains (unexplained: no grant record
// names them, no live access's status does), with a v1alpha1 driver that names its accounts
// itself: per bucket, at most as many as the leak reports about accesses to it. An account that
// reaches no bucket is counted on the bucket its grant asked for (the proxy knows the grants it
// renamed: a grant cut short before the policy was written), or is unaccounted. It returns the
// violations and the reported leaks.
func (r *run) checkLeaks(ctx context.Context, w *world, unexplained []string) ([]Violation, []string, error) {
	var out []Violation
	onBucket := map[string][]string{}
	for _, id := range unexplained {
		buckets, err := w.store.reach(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		if len(buckets) == 0 {
			if m, ok := r.v1proxy.madeFor(id); ok {
				buckets = []string{m.bucketID}
			}
		}
		if len(buckets) == 0 {
			out = append(out, Violation{Check: CheckOrphanAccount, Object: "backend account " + id,
				Detail: "no grant record or BucketAccess has it, and it reaches no bucket", subjects: r.madeSubjects(id)})
			continue
		}
		for _, b := range buckets {
			onBucket[b] = append(onBucket[b], id)
		}
	}
	reports := r.ledger.reportsByBucket()
	var reported []string
	for _, b := range slices.Sorted(maps.Keys(onBucket)) {
		ids := onBucket[b]
		slices.Sort(ids)
		n := 0
		var by []string
		for _, rep := range reports[b] {
			n += rep.count
			by = append(by, rep.object)
		}
		slices.Sort(by)
		by = slices.Compact(by)
		if len(ids) > n {
			subjects := []string{b}
			var accounts []string
			for _, id := range ids {
				subjects = append(subjects, r.madeSubjects(id)...)
				accounts = append(accounts, id+r.madeBy(id))
			}
			out = append(out, Violation{Check: CheckUnreportedLeak, Object: "backend bucket " + b,
				Detail: fmt.Sprintf("%d accounts that no grant record or BucketAccess has are granted on it (%s), "+
					"and %d %s events report a leak for accesses to it %v", len(ids), strings.Join(accounts, ", "), n,
					cosiapi.EventDriverAccountMayHaveLeaked, by), subjects: subjects})
			continue
		}
		for _, id := range ids {
			reported = append(reported, fmt.Sprintf("account %s on bucket %s%s; reported on %v", id, b, r.madeBy(id), by))
		}
	}
	return out, reported, nil
}

// madeBy names the grant that made the account, as the proxy saw it: " (a grant of
// BucketAccess ns/name)", or the account name it was asked for when the access is not the ledger's.
// Called under the ledger's lock.
func (r *run) madeBy(id string) string {
	m, ok := r.v1proxy.madeFor(id)
	if !ok {
		return ""
	}
	if a := r.ledger.byUID[types.UID(strings.TrimPrefix(m.name, cosiapi.AccountNamePrefix))]; a != nil {
		return " (a grant of BucketAccess " + a.namespace + "/" + a.plan.name + ")"
	}
	return " (a grant for " + m.name + ")"
}

// madeSubjects are what an account's history is about: the account, and the access the driver made
// it for.
func (r *run) madeSubjects(id string) []string {
	m, ok := r.v1proxy.madeFor(id)
	if !ok {
		return []string{id}
	}
	return []string{id, m.name, strings.TrimPrefix(m.name, cosiapi.AccountNamePrefix)}
}

// accountsOf are the backend accounts of a live access: those a v1alpha1 driver named itself, from
// its grant record, else the one its status names.
func (w *world) accountsOf(a *cosiapi.BucketAccess) []string {
	if g, ok := w.records[a.UID]; ok && len(g.DriverAccountIDs) > 0 {
		return g.DriverAccountIDs
	}
	if a.Status.AccountID == "" {
		return nil
	}
	return []string{a.Status.AccountID}
}
