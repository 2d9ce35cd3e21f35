package chaos

import (
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// The ledger is what the workload knows of its objects: their UIDs, what was planned for them,
// and what COSI gave them (buckets, accounts, every key seen in a Secret). The audit compares the
// system with it.
type ledger struct {
	mu       sync.Mutex
	claims   []*claimRecord
	accesses []*accessRecord
	// released are the backend buckets of retained Bucket objects the admin deleted: they must
	// stay in the backend, with no object left to account for them.
	released map[string]string // bucket ID: Bucket name
	// imported are the backend buckets created for static claims, before COSI saw them.
	imported map[string]bool
	// byUID finds an access's record by its UID.
	byUID map[types.UID]*accessRecord
	// leakReports are the DriverAccountMayHaveLeaked events seen (a v1alpha1 driver), by event
	// namespace/name (audit_v1alpha1.go).
	leakReports map[string]leakReport
}

type claimRecord struct {
	namespace string
	plan      claimPlan
	uid       types.UID
	// bucketName and bucketID are the Bucket the claim was bound to and its backend bucket, once
	// seen.
	bucketName, bucketID string
}

type accessRecord struct {
	namespace string
	plan      accessPlan
	uid       types.UID
	accountID string
	// driverAccounts are the accounts a v1alpha1 driver named itself for the access, as its grant
	// record last showed them.
	driverAccounts []string
	// claims are the records of the claims the access reaches.
	claims []*claimRecord
	// keys are the keys seen in the access's Secrets, with the bucket each opened, in the order
	// they were first seen: the order they were written in (a Secret is only ever written with a
	// key newer than the one it holds).
	keys []seenKey
}

type seenKey struct {
	secret, bucketID string
	creds            *cosiproto.CredentialInfo
}

func (l *ledger) addClaim(c *claimRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.claims = append(l.claims, c)
}

func (l *ledger) addAccess(a *accessRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.accesses = append(l.accesses, a)
	if l.byUID == nil {
		l.byUID = map[types.UID]*accessRecord{}
	}
	l.byUID[a.uid] = a
}

// update changes a record under the ledger's lock.
func (l *ledger) update(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f()
}

// sawAccounts records the account IDs of the ledger's accesses: a namespace's script records
// them once its objects are provisioned, but not in a namespace whose deletions start before
// anything is provisioned (its kept accesses are provisioned later): the audits record them.
func (l *ledger) sawAccounts(accesses []cosiapi.BucketAccess) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range accesses {
		if rec := l.byUID[a.UID]; rec != nil && rec.accountID == "" && a.Status.AccountID != "" {
			rec.accountID = a.Status.AccountID
		}
	}
}

// sawDriverAccounts records the accounts that a v1alpha1 driver named itself for the ledger's
// accesses, from their grant records (gone with the access).
func (l *ledger) sawDriverAccounts(records map[types.UID]grantView) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for uid, g := range records {
		if rec := l.byUID[uid]; rec != nil && len(g.DriverAccountIDs) > 0 {
			rec.driverAccounts = slices.Clone(g.DriverAccountIDs)
		}
	}
}

// sawSecrets records the keys in the Secrets of the ledger's accesses (labeled with their UIDs).
func (l *ledger) sawSecrets(secrets []corev1.Secret) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range secrets {
		a := l.byUID[types.UID(s.Labels[cosiapi.LabelBucketAccessUID])]
		if a == nil || a.namespace != s.Namespace || len(s.Data[cosiapi.SecretKeyS3SecretAccessKey]) == 0 {
			continue
		}
		l.sawKeyLocked(a, seenKey{secret: s.Name, bucketID: string(s.Data[cosiapi.SecretKeyS3BucketName]),
			creds: secretCredentials(&s)})
	}
}

func (l *ledger) sawKeyLocked(a *accessRecord, k seenKey) {
	for _, have := range a.keys {
		if have.secret == k.secret && have.bucketID == k.bucketID &&
			have.creds.GetS3().GetAccessSecretKey() == k.creds.GetS3().GetAccessSecretKey() {
			return
		}
	}
	a.keys = append(a.keys, k)
}

func (l *ledger) release(bucketID, bucketName string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released == nil {
		l.released = map[string]string{}
	}
	l.released[bucketID] = bucketName
}

func (l *ledger) imports(ids ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.imported == nil {
		l.imported = map[string]bool{}
	}
	for _, id := range ids {
		l.imported[id] = true
	}
}

// timeline is what the harness did and injected, in order: the first part of an object's
// history.
type timeline struct {
	mu      sync.Mutex
	entries []timelineEntry
}

type timelineEntry struct {
	at time.Time
	// subjects are what the entry is about (UIDs, names, bucket and account IDs); none for a
	// fault that hits everything (a process killed).
	subjects []string
	text     string
}

func (t *timeline) add(text string, subjects ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.entries = append(t.entries, timelineEntry{at: time.Now(), subjects: subjects, text: text})
}

func (t *timeline) addf(subjects []string, format string, args ...any) {
	t.add(fmt.Sprintf(format, args...), subjects...)
}

// about returns the entries about any of subjects, and the global ones between from and to.
func (t *timeline) about(subjects []string, from, to time.Time) []timelineEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []timelineEntry
	for _, e := range t.entries {
		if len(e.subjects) == 0 {
			if !e.at.Before(from) && !e.at.After(to) {
				out = append(out, e)
			}
			continue
		}
		for _, s := range e.subjects {
			if s != "" && slices.Contains(subjects, s) {
				out = append(out, e)
				break
			}
		}
	}
	return out
}
