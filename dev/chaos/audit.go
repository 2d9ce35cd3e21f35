package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// The checks of the audit, as the report names them.
const (
	CheckClaim          = "claim not as asked"          // kept: Provisioned; deleted: gone
	CheckAccess         = "access not as asked"         // kept: Provisioned; deleted: gone
	CheckTerminating    = "stuck terminating"           // an object or namespace still being deleted
	CheckOrphanBucket   = "backend bucket unaccounted"  // no Bucket (or released Retain bucket) has it
	CheckLostBucket     = "backend bucket lost"         // Retain, imported or still claimed, yet gone
	CheckBucketsOfClaim = "not one bucket per claim"    // a claim with no Bucket, or several
	CheckLeftBucket     = "Bucket object left"          // Delete policy, its claim gone
	CheckOrphanAccount  = "backend account unaccounted" // no BucketAccess has it
	CheckLiveKey        = "revoked key still works"     // a deleted access's key opens its bucket
	CheckLostKey        = "kept access's key fails"     // a kept access's Secret does not open its bucket
	CheckStrayKey       = "backend key unaccounted"     // an accounted account's key that no Secret holds
	CheckWideGrant      = "account reaches too far"     // an account reaches a bucket its access does not
	CheckSharedBucket   = "backend bucket shared"       // two Buckets of the driver name one backend bucket
	CheckStraySecret    = "Secret without its access"
	CheckStrayGrant     = "grant record without its access"
	// CheckRotatedKey: a key that a completed rotation replaced (the one it rotated from, or an
	// older one of the access's Secrets) still opens its bucket.
	CheckRotatedKey = "rotated-away key still works"
	// CheckRotation: a rotation left half-way in a grant record, one asked by annotation and never
	// started, a Secret refresh asked and never done, or a rotation that failed.
	CheckRotation = "rotation not finished"
	// CheckGrantRecord: a kept access's grant record, no rotation in progress, that does not name
	// the credential its Secrets hold, or that cannot be read.
	CheckGrantRecord = "grant record out of step"
)

// The sidecar's grant records (internal/sidecar, record.go): ConfigMaps named for the access's UID,
// labeled cosiapi.LabelGrantDriver, in the sidecar's namespace (localenv runs it in cosi-system).
const (
	grantNamespace    = "cosi-system"
	grantRecordPrefix = "cosi-grant-"
	// legacyGrantAnnotationPrefix prefixed the annotations that recorded grants on Buckets before
	// the grant records (internal/sidecar, record.go).
	legacyGrantAnnotationPrefix = cosiapi.GroupName + "/grant-"
)

// Violation is one finding of the audit.
type Violation struct {
	Check string
	// Object names what is wrong (an API object, a backend bucket or account).
	Object string
	Detail string
	// History is the object's story: what the harness did, the faults around it, the driver's
	// calls about it, its events and conditions.
	History []string

	subjects []string
}

func (v Violation) String() string { return v.Check + ": " + v.Object + ": " + v.Detail }

// world is the system as the audit sees it.
type world struct {
	claims   map[types.UID]*cosiapi.BucketClaim
	accesses map[types.UID]*cosiapi.BucketAccess
	buckets  []cosiapi.Bucket
	// secrets are the access Secrets: labeled with an access's UID. cosiSecrets are every Secret
	// that shows it is COSI's: the label, COSI's finalizer or annotation, or an access as its owner
	// (a tenant may remove the label).
	secrets, cosiSecrets []corev1.Secret
	// grants are the grant records: in the sidecar's namespace by their name or label, anywhere
	// else by their label.
	grants    []corev1.ConfigMap
	spaces    []corev1.Namespace
	store     *backendState
	bucketIDs map[string]bool // backend buckets
	// created are the buckets the driver created (it answered a DriverCreateBucket, or acted
	// before an injected failure), deleted those it was asked to delete and did.
	created, deleted map[string]bool
	// records are the grant records of the sidecar's namespace, by their access's UID;
	// unreadable, those that cannot be read, with the reason.
	records    map[types.UID]grantView
	unreadable map[types.UID]error
	// unreadableAccounts are the driver's account IDs that unreadable records name, when those
	// can be read.
	unreadableAccounts [][]string
	// rotatedFrom are, by account, the credentials that a rotation replaced: the driver issued
	// another for the account in their place (DriverRotateBucketAccessCredentials acted).
	rotatedFrom map[string]map[string]bool
	// issued is when the call that issued each credential started (the first, if several
	// answered with it), its answer lost or not, by credential ID.
	issued map[string]time.Time
}

// grantView is what the audit reads of a grant record (internal/sidecar, record.go and
// access_rotate.go).
type grantView struct {
	Namespace    string    `json:"namespace"`
	Name         string    `json:"name"`
	UID          types.UID `json:"uid"`
	AccountID    string    `json:"accountID"`
	CredentialID string    `json:"credentialID"`
	RotateToken  string    `json:"rotateToken"`
	RefreshToken string    `json:"refreshToken"`
	// DriverAccountIDs are the accounts a v1alpha1 driver named itself for the access
	// (access_driveraccounts.go): revoked, each, with the access.
	DriverAccountIDs []string `json:"driverAccountIDs"`
	Rotation         *struct {
		From    string       `json:"from"`
		To      string       `json:"to"`
		Written *metav1.Time `json:"written"`
	} `json:"rotation"`
}

// grantDataKey is the grant record's key in its ConfigMap's data.
const grantDataKey = "grant.json"

// parseGrantView reads a grant record.
func parseGrantView(cm *corev1.ConfigMap) (grantView, error) {
	var g grantView
	err := json.Unmarshal([]byte(cm.Data[grantDataKey]), &g)
	return g, err
}

func (r *run) look(ctx context.Context) (*world, error) {
	w := &world{claims: map[types.UID]*cosiapi.BucketClaim{}, accesses: map[types.UID]*cosiapi.BucketAccess{}}
	var cl cosiapi.BucketClaimList
	var al cosiapi.BucketAccessList
	var bl cosiapi.BucketList
	var sl corev1.SecretList
	var gl corev1.ConfigMapList
	var nl corev1.NamespaceList
	for _, l := range []struct {
		list client.ObjectList
		opts []client.ListOption
	}{
		{&cl, nil}, {&al, nil}, {&bl, nil},
		{&sl, nil},
		{&gl, nil},
		{&nl, nil},
	} {
		if err := r.list(ctx, l.list, l.opts...); err != nil {
			return nil, err
		}
	}
	for i := range cl.Items {
		w.claims[cl.Items[i].UID] = &cl.Items[i]
	}
	for i := range al.Items {
		w.accesses[al.Items[i].UID] = &al.Items[i]
	}
	w.buckets = bl.Items
	for _, s := range sl.Items {
		if _, ok := s.Labels[cosiapi.LabelBucketAccessUID]; ok {
			w.secrets = append(w.secrets, s)
		}
		if cosiSecret(&s) {
			w.cosiSecrets = append(w.cosiSecrets, s)
		}
	}
	// The grant records: in the sidecar's namespace by their name as well as their label, so that
	// a record whose label was lost (the sidecar no longer sees it as its own) still counts; by
	// their label elsewhere (a sidecar that ran in another namespace left them).
	for _, cm := range gl.Items {
		if cm.Labels[cosiapi.LabelGrantDriver] != "" ||
			cm.Namespace == grantNamespace && strings.HasPrefix(cm.Name, grantRecordPrefix) {
			w.grants = append(w.grants, cm)
		}
	}
	for _, ns := range nl.Items {
		if strings.HasPrefix(ns.Name, "chaos-") {
			w.spaces = append(w.spaces, ns)
		}
	}
	st, err := r.backend.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	w.store, w.bucketIDs = st, st.buckets
	w.created, w.deleted = map[string]bool{}, map[string]bool{}
	w.rotatedFrom, w.issued = map[string]map[string]bool{}, map[string]time.Time{}
	for _, e := range r.readJournal() {
		if t, ok := w.issued[e.Issued]; e.Issued != "" && (!ok || e.Time.Before(t)) {
			w.issued[e.Issued] = e.Time
		}
		acted := e.Code == "OK" || e.Acted
		switch {
		case e.Method == "DriverCreateBucket" && acted:
			w.created[e.Subject] = true
		case e.Method == "DriverDeleteBucket" && acted:
			w.deleted[e.Subject] = true
		case e.Method == "DriverRotateBucketAccessCredentials" && acted && e.Credential != "":
			if w.rotatedFrom[e.Subject] == nil {
				w.rotatedFrom[e.Subject] = map[string]bool{}
			}
			w.rotatedFrom[e.Subject][e.Credential] = true
		}
	}
	w.records, w.unreadable = map[types.UID]grantView{}, map[types.UID]error{}
	for _, cm := range w.grants {
		if cm.Namespace != grantNamespace {
			continue
		}
		uid := types.UID(strings.TrimPrefix(cm.Name, grantRecordPrefix))
		g, err := parseGrantView(&cm)
		if err != nil {
			w.unreadable[uid] = err
			// Its accounts are named all the same (the record is reported as unreadable).
			var accounts struct {
				DriverAccountIDs []string `json:"driverAccountIDs"`
			}
			if json.Unmarshal([]byte(cm.Data[grantDataKey]), &accounts) == nil {
				w.unreadableAccounts = append(w.unreadableAccounts, accounts.DriverAccountIDs)
			}
			continue
		}
		w.records[uid] = g
	}
	if r.v1alpha1() {
		if err := retry(ctx, "listing events", r.sawLeakReports); err != nil {
			return nil, err
		}
		r.ledger.sawDriverAccounts(w.records)
	}
	r.ledger.sawAccounts(al.Items)
	r.ledger.sawSecrets(w.secrets)
	return w, nil
}

// audit checks the system against the ledger.
func (r *run) audit(ctx context.Context) ([]Violation, error) {
	w, err := r.look(ctx)
	if err != nil {
		return nil, err
	}
	r.ledger.mu.Lock()
	defer r.ledger.mu.Unlock()
	var out []Violation
	add := func(check, object, detail string, subjects ...string) {
		out = append(out, Violation{Check: check, Object: object, Detail: detail, subjects: subjects})
	}

	// Claims and accesses: as asked, and nothing stuck.
	for _, c := range r.ledger.claims {
		name := "BucketClaim " + c.namespace + "/" + c.plan.name
		live := w.claims[c.uid]
		switch {
		case c.plan.keep && live == nil:
			add(CheckClaim, name, "kept, but gone", c.subjects()...)
		case c.plan.keep && !meta.IsStatusConditionTrue(live.Status.Conditions, cosiapi.ConditionProvisioned):
			add(CheckClaim, name, "kept, but not Provisioned: "+conditionText(live.Status.Conditions), c.subjects()...)
		case !c.plan.keep && live != nil:
			add(CheckClaim, name, "deleted, but still there: "+conditionText(live.Status.Conditions), c.subjects()...)
		}
	}
	for _, a := range r.ledger.accesses {
		name := "BucketAccess " + a.namespace + "/" + a.plan.name
		live := w.accesses[a.uid]
		switch {
		case a.plan.keep && live == nil:
			add(CheckAccess, name, "kept, but gone", a.subjects()...)
		case a.plan.keep && !meta.IsStatusConditionTrue(live.Status.Conditions, cosiapi.ConditionProvisioned):
			add(CheckAccess, name, "kept, but not Provisioned: "+conditionText(live.Status.Conditions), a.subjects()...)
		case !a.plan.keep && live != nil:
			add(CheckAccess, name, "deleted, but still there: "+conditionText(live.Status.Conditions), a.subjects()...)
		}
	}
	for _, c := range w.claims {
		if c.DeletionTimestamp != nil {
			add(CheckTerminating, "BucketClaim "+c.Namespace+"/"+c.Name, since(c.DeletionTimestamp.Time)+
				", finalizers "+strings.Join(c.Finalizers, ","), string(c.UID))
		}
	}
	for _, a := range w.accesses {
		if a.DeletionTimestamp != nil {
			add(CheckTerminating, "BucketAccess "+a.Namespace+"/"+a.Name, since(a.DeletionTimestamp.Time)+
				", finalizers "+strings.Join(a.Finalizers, ","), string(a.UID), a.Status.AccountID)
		}
	}
	for _, b := range w.buckets {
		if b.DeletionTimestamp != nil {
			add(CheckTerminating, "Bucket "+b.Name, since(b.DeletionTimestamp.Time)+
				", finalizers "+strings.Join(b.Finalizers, ","), b.Name, b.Status.BucketID, string(b.Spec.BucketClaimRef.UID))
		}
	}
	for _, ns := range w.spaces {
		if ns.DeletionTimestamp != nil {
			add(CheckTerminating, "Namespace "+ns.Name, since(ns.DeletionTimestamp.Time), ns.Name)
		}
	}
	for _, sec := range w.cosiSecrets {
		if sec.DeletionTimestamp != nil {
			add(CheckTerminating, "Secret "+sec.Namespace+"/"+sec.Name, since(sec.DeletionTimestamp.Time)+
				", finalizers "+strings.Join(sec.Finalizers, ","), sec.Labels[cosiapi.LabelBucketAccessUID])
		}
	}

	// Buckets: every backend bucket accounted for, none lost, one per claim.
	accounted := map[string]bool{}
	for id := range r.ledger.imported {
		accounted[id] = true
	}
	for id := range r.ledger.released {
		accounted[id] = true
	}
	bucketsOf := map[types.UID][]string{}
	// The Buckets of the driver by backend bucket: only they account for its buckets (another
	// driver's Bucket names a bucket of another store), and one each.
	named := map[string][]string{}
	for _, b := range w.buckets {
		if id := b.Status.BucketID; id != "" && string(b.Spec.DriverName) == r.driverName {
			accounted[id] = true
			named[id] = append(named[id], b.Name)
		}
		claimLive := b.Spec.BucketClaimRef.UID != "" && w.claims[b.Spec.BucketClaimRef.UID] != nil
		if claimLive {
			bucketsOf[b.Spec.BucketClaimRef.UID] = append(bucketsOf[b.Spec.BucketClaimRef.UID], b.Name)
		}
		// A Bucket whose claim went before its backend bucket was created has an ID and no bucket:
		// nothing was lost.
		if id := b.Status.BucketID; id != "" && (b.Spec.DeletionPolicy == cosiapi.DeletionPolicyRetain || claimLive) &&
			(w.deleted[id] || (w.created[id] && !w.bucketIDs[id])) {
			add(CheckLostBucket, "backend bucket "+id,
				fmt.Sprintf("Bucket %s (%s, claim %s) has it; the driver deleted it", b.Name, b.Spec.DeletionPolicy,
					claimState(claimLive)), b.Name, id, string(b.Spec.BucketClaimRef.UID))
		}
		if b.Spec.DeletionPolicy == cosiapi.DeletionPolicyDelete && !claimLive && b.DeletionTimestamp == nil {
			add(CheckLeftBucket, "Bucket "+b.Name, "Delete policy, its claim "+b.Spec.BucketClaimRef.Namespace+"/"+
				string(b.Spec.BucketClaimRef.Name)+" is gone", b.Name, b.Status.BucketID, string(b.Spec.BucketClaimRef.UID))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(w.bucketIDs)) {
		if !accounted[id] {
			add(CheckOrphanBucket, "backend bucket "+id, "no Bucket of the driver has it as its status.bucketID", id)
		}
	}
	for id, names := range named {
		if len(names) > 1 {
			slices.Sort(names)
			add(CheckSharedBucket, "backend bucket "+id, fmt.Sprintf("named by %d Buckets: %v", len(names), names),
				append([]string{id}, names...)...)
		}
	}
	for id, name := range r.ledger.released {
		if w.deleted[id] || (w.created[id] && !w.bucketIDs[id]) {
			add(CheckLostBucket, "backend bucket "+id, "Retain: its Bucket "+name+" was deleted, the bucket must stay",
				id, name)
		}
	}
	for id := range r.ledger.imported {
		if w.deleted[id] || !w.bucketIDs[id] {
			add(CheckLostBucket, "backend bucket "+id, "imported by a static claim: never deleted by COSI", id)
		}
	}
	for _, c := range r.ledger.claims {
		if !c.plan.keep || w.claims[c.uid] == nil {
			continue
		}
		names := bucketsOf[c.uid]
		if len(names) != 1 {
			add(CheckBucketsOfClaim, "BucketClaim "+c.namespace+"/"+c.plan.name,
				fmt.Sprintf("bound by %d Buckets: %v", len(names), names), c.subjects()...)
		}
	}

	// Accounts and keys: every backend account accounted for, revoked keys refused, kept keys
	// working.
	// The accounts a v1alpha1 driver named itself are those of the grant records, while they
	// exist (the sidecar revokes each before it removes the record).
	accounts := map[string]bool{}
	for _, a := range w.accesses {
		if a.Status.AccountID != "" {
			accounts[a.Status.AccountID] = true
		}
	}
	for _, g := range w.records {
		for _, id := range g.DriverAccountIDs {
			accounts[id] = true
		}
	}
	for _, ids := range w.unreadableAccounts {
		for _, id := range ids {
			accounts[id] = true
		}
	}
	inStore := map[string]bool{}
	var unexplained []string
	for _, id := range w.store.accounts {
		inStore[id] = true
		switch {
		case accounts[id]:
		case r.v1alpha1():
			unexplained = append(unexplained, id) // a lost answer's, if reported: checkLeaks
		default:
			detail := "no BucketAccess has it"
			if w.store.grants != nil {
				detail += fmt.Sprintf("; it was granted %v", w.store.grants(id))
			}
			add(CheckOrphanAccount, "backend account "+id, detail, id)
		}
	}
	if r.v1alpha1() {
		v, reported, err := r.checkLeaks(ctx, w, unexplained)
		if err != nil {
			return nil, err
		}
		out = append(out, v...)
		r.res.ReportedLeaks = append([]string{}, reported...)
	}
	v, err := checkReach(ctx, w, inStore)
	if err != nil {
		return nil, err
	}
	out = append(out, v...)
	for _, a := range r.ledger.accesses {
		name := "BucketAccess " + a.namespace + "/" + a.plan.name
		live := w.accesses[a.uid]
		for _, k := range a.keys {
			if live != nil {
				continue
			}
			allowed, err := w.store.allowed(ctx, k.creds, k.bucketID, false)
			if err != nil {
				return nil, err
			}
			if allowed {
				add(CheckLiveKey, name, fmt.Sprintf("the key %s of Secret %s still reads bucket %s",
					k.creds.GetS3().GetAccessKeyId(), k.secret, k.bucketID), a.subjects()...)
			}
		}
		if a.plan.keep && live != nil {
			v, err := checkKeptSecrets(ctx, w, a, live)
			if err != nil {
				return nil, err
			}
			out = append(out, v...)
			if len(v) == 0 {
				if v, err = checkKeys(ctx, w, a, live, inStore); err != nil {
					return nil, err
				}
				out = append(out, v...)
			}
		}
	}

	// Rotations: none left half-way or not started, and the keys they replaced refused.
	out = append(out, checkRotations(w)...)
	replaced := 0
	for _, a := range r.ledger.accesses {
		if live := w.accesses[a.uid]; a.plan.keep && live != nil && w.records[a.uid].Rotation == nil {
			v, n, err := checkRotatedKeys(ctx, w, a, live)
			if err != nil {
				return nil, err
			}
			out = append(out, v...)
			replaced += n
		}
	}
	r.res.Rotations[replacedKeysTried] = replaced
	for _, a := range r.ledger.accesses {
		if live := w.accesses[a.uid]; a.plan.keep && live != nil {
			out = append(out, checkGrantRecord(w, a, live)...)
		}
	}

	// Secrets and grant records: none without its access.
	out = append(out, checkSecrets(w)...)
	for _, g := range w.grants {
		uid := types.UID(strings.TrimPrefix(g.Name, grantRecordPrefix))
		if w.accesses[uid] == nil {
			add(CheckStrayGrant, "ConfigMap "+g.Namespace+"/"+g.Name, "its BucketAccess "+string(uid)+" is gone",
				string(uid), cosiapi.AccountNamePrefix+string(uid))
		}
	}
	// Grant records that earlier versions kept in Bucket annotations: the sidecar migrates those
	// of its driver's Buckets; none may stay for an access that is gone.
	for _, b := range w.buckets {
		for _, k := range slices.Sorted(maps.Keys(b.Annotations)) {
			uid, ok := strings.CutPrefix(k, legacyGrantAnnotationPrefix)
			if ok && w.accesses[types.UID(uid)] == nil {
				add(CheckStrayGrant, "Bucket "+b.Name, "its annotation "+k+" records a grant to BucketAccess "+uid+
					", which is gone", uid, cosiapi.AccountNamePrefix+uid, b.Name)
			}
		}
	}
	slices.SortFunc(out, func(a, b Violation) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// cosiSecret reports whether a Secret shows that COSI wrote it: the access's UID label, COSI's
// finalizer, the access annotation, or a BucketAccess as its owner.
func cosiSecret(s *corev1.Secret) bool {
	if _, ok := s.Labels[cosiapi.LabelBucketAccessUID]; ok {
		return true
	}
	if _, ok := s.Annotations[cosiapi.AnnotationBucketAccessReference]; ok {
		return true
	}
	return slices.Contains(s.Finalizers, cosiapi.FinalizerProtection) || accessOwner(s) != ""
}

// accessOwner is the UID of the BucketAccess that owns the Secret, or "".
func accessOwner(s *corev1.Secret) types.UID {
	for _, o := range s.OwnerReferences {
		if o.Kind == "BucketAccess" && strings.HasPrefix(o.APIVersion, cosiapi.GroupName+"/") {
			return o.UID
		}
	}
	return ""
}

// checkSecrets finds the Secrets of COSI's that no live access has: each must be in its access's
// namespace and named by it. The UID label says whose a Secret is; without it (a tenant may
// remove it), its owner, or its access annotation.
func checkSecrets(w *world) []Violation {
	var out []Violation
	byName := map[string]*cosiapi.BucketAccess{}
	for _, a := range w.accesses {
		byName[a.Namespace+"/"+a.Name] = a
	}
	for _, s := range w.cosiSecrets {
		var a *cosiapi.BucketAccess
		whose := ""
		switch uid, ok := s.Labels[cosiapi.LabelBucketAccessUID]; {
		case ok:
			a, whose = w.accesses[types.UID(uid)], "labeled for BucketAccess "+uid
		case accessOwner(&s) != "":
			a, whose = w.accesses[accessOwner(&s)], "unlabeled, owned by BucketAccess "+string(accessOwner(&s))
		default:
			ref := s.Annotations[cosiapi.AnnotationBucketAccessReference]
			a, whose = byName[ref], "unlabeled, annotated for BucketAccess "+ref
			if ref == "" {
				whose = "unlabeled, with COSI's finalizer"
			}
		}
		detail := whose + ", which is gone"
		if a != nil {
			if a.Namespace == s.Namespace && slices.ContainsFunc(a.Spec.BucketClaims, func(c cosiapi.BucketClaimAccess) bool {
				return string(c.AccessSecretName) == s.Name
			}) {
				continue
			}
			detail = whose + ", which does not name it (" + a.Namespace + "/" + a.Name + ")"
		}
		subjects := []string{s.Labels[cosiapi.LabelBucketAccessUID], string(accessOwner(&s))}
		out = append(out, Violation{Check: CheckStraySecret, Object: "Secret " + s.Namespace + "/" + s.Name,
			Detail: detail, subjects: subjects})
	}
	return out
}

// checkRotations finds the rotations not finished: half-way in a grant record (the audit waits
// while one runs, through its grace period; one that never ends is a violation), asked by a live
// access's annotation and never started, or failed; and the Secret refreshes asked and never done.
func checkRotations(w *world) []Violation {
	var out []Violation
	add := func(g grantView, uid types.UID, detail string) {
		out = append(out, Violation{Check: CheckRotation, Object: "BucketAccess " + g.Namespace + "/" + g.Name,
			Detail: detail, subjects: []string{string(uid), g.AccountID}})
	}
	for _, uid := range slices.Sorted(maps.Keys(w.records)) {
		g := w.records[uid]
		if rot := g.Rotation; rot != nil {
			written := "not yet"
			if rot.Written != nil {
				written = rot.Written.UTC().Format(time.RFC3339)
			}
			add(g, uid, fmt.Sprintf("its grant record holds a rotation from credential %s to %q (Secrets written: %s)",
				rot.From, rot.To, written))
		}
		a := w.accesses[uid]
		if a == nil || a.DeletionTimestamp != nil {
			continue
		}
		if token := a.Annotations[cosiapi.AnnotationRotateCredentials]; token != "" && token != g.RotateToken {
			add(g, uid, fmt.Sprintf("a rotation asked by annotation (%s) was never started: the grant record "+
				"handled %q", token, g.RotateToken))
		}
		if token := a.Annotations[cosiapi.AnnotationRefreshSecret]; token != "" && token != g.RefreshToken {
			add(g, uid, fmt.Sprintf("a Secret refresh asked by annotation (%s) was never done: the grant record "+
				"handled %q", token, g.RefreshToken))
		}
		if c := meta.FindStatusCondition(a.Status.Conditions, cosiapi.ConditionCredentialsRotated); c != nil &&
			c.Status == metav1.ConditionFalse {
			add(g, uid, "the rotation failed: "+conditionText([]metav1.Condition{*c}))
		}
	}
	return out
}

// checkRotatedKeys checks that the keys a kept access's completed rotations replaced are refused:
// the key each rotated from, and every key its Secrets held before it (a rotation replaces the
// access's credentials, not only the newest: the S3 driver deletes the others on IAM). The newest
// key a rotation replaced is the last one, in the order seen, that the driver rotated from and
// that no Secret holds now; the access has no rotation in progress. Keys are told apart by the
// credential ID of their material (backendState.credentialID), not by the Secrets' annotation: a
// Secret written with a new key under the old annotation must not hide the old key.
func checkRotatedKeys(
	ctx context.Context, w *world, a *accessRecord, live *cosiapi.BucketAccess,
) (_ []Violation, tried int, _ error) {
	current := map[string]bool{}
	for _, s := range w.secrets {
		if s.Namespace == live.Namespace && s.Labels[cosiapi.LabelBucketAccessUID] == string(live.UID) {
			current[w.store.credentialID(secretCredentials(&s))] = true
		}
	}
	replaced := -1
	for i, k := range a.keys {
		if id := w.store.credentialID(k.creds); !current[id] && w.rotatedFrom[live.Status.AccountID][id] {
			replaced = i
		}
	}
	if replaced < 0 {
		return nil, 0, nil
	}
	var out []Violation
	for _, k := range a.keys[:replaced+1] {
		if current[w.store.credentialID(k.creds)] {
			continue
		}
		tried++
		allowed, err := w.store.allowed(ctx, k.creds, k.bucketID, false)
		if err != nil {
			return nil, 0, err
		}
		if allowed {
			out = append(out, Violation{Check: CheckRotatedKey, Object: "BucketAccess " + a.namespace + "/" + a.plan.name,
				Detail: fmt.Sprintf("the key %s (credential %s) that Secret %s held before the rotation from credential "+
					"%s still reads bucket %s", k.creds.GetS3().GetAccessKeyId(), w.store.credentialID(k.creds), k.secret,
					w.store.credentialID(a.keys[replaced].creds), k.bucketID), subjects: a.subjects()})
		}
	}
	return out, tried, nil
}

// checkGrantRecord checks a kept access's grant record against its Secrets: it can be read, and,
// with no rotation in progress, it names the credential that every Secret of the access holds
// (by the credential ID of the Secret's key), as the Secret's own annotation does. The sidecar
// rotates from the credential the record names and retires it: a record that names a retired
// key, or one never issued, fails the next rotation; one that names another working key has it
// retired while the Secrets' key stays.
func checkGrantRecord(w *world, a *accessRecord, live *cosiapi.BucketAccess) []Violation {
	add := func(detail string) []Violation {
		return []Violation{{Check: CheckGrantRecord, Object: "BucketAccess " + a.namespace + "/" + a.plan.name,
			Detail: detail, subjects: a.subjects()}}
	}
	if err := w.unreadable[live.UID]; err != nil {
		return add("its grant record cannot be read: " + err.Error())
	}
	g, ok := w.records[live.UID]
	if !ok || g.Rotation != nil || live.Status.AccountID == "" {
		return nil // no record yet (not provisioned), or a rotation in progress: checked elsewhere
	}
	for _, ref := range live.Spec.BucketClaims {
		for i := range w.secrets {
			s := &w.secrets[i]
			if s.Namespace != live.Namespace || s.Name != string(ref.AccessSecretName) ||
				s.Labels[cosiapi.LabelBucketAccessUID] != string(live.UID) ||
				len(s.Data[cosiapi.SecretKeyS3SecretAccessKey]) == 0 {
				continue
			}
			id := w.store.credentialID(secretCredentials(s))
			if g.CredentialID != id {
				return add(fmt.Sprintf("its grant record names credential %q; its Secret %s holds credential %s",
					g.CredentialID, s.Name, id))
			}
			if note := s.Annotations[cosiapi.AnnotationCredentialID]; note != id {
				return add(fmt.Sprintf("its Secret %s holds credential %s, and its annotation %s names %q", s.Name, id,
					cosiapi.AnnotationCredentialID, note))
			}
		}
	}
	return nil
}

// replacedKeysTried counts, in Result.Rotations, the keys that kept accesses' rotations replaced
// and that the last audit tried.
const replacedKeysTried = "keys replaced by a completed rotation, tried by the last audit"

// checkReach finds the accounts that reach buckets their access does not: every live access's
// account (each one a v1alpha1 driver named for it), by what the store grants it.
func checkReach(ctx context.Context, w *world, inStore map[string]bool) ([]Violation, error) {
	var out []Violation
	for _, uid := range slices.Sorted(maps.Keys(w.accesses)) {
		a := w.accesses[uid]
		for _, account := range w.accountsOf(a) {
			if !inStore[account] {
				continue
			}
			reach, err := w.store.reach(ctx, account)
			if err != nil {
				return nil, err
			}
			var extra []string
			for _, b := range reach {
				if !slices.ContainsFunc(a.Status.AccessedBuckets, func(ab cosiapi.AccessedBucket) bool {
					return ab.BucketID == b
				}) {
					extra = append(extra, b)
				}
			}
			if len(extra) > 0 {
				out = append(out, Violation{Check: CheckWideGrant, Object: "BucketAccess " + a.Namespace + "/" + a.Name,
					Detail:   fmt.Sprintf("its account %s reaches %v, which it does not grant", account, extra),
					subjects: []string{string(a.UID), account}})
			}
		}
	}
	return out, nil
}

// checkKeys checks the keys of a kept access's account: the newest must be the one its Secrets
// hold, and besides it the driver keeps at most one previous key (the S3 driver on IAM, the
// memory driver's NewKeyPerGrant), so that a key a workload already holds keeps working. A key
// newer than the Secrets' was minted for no one (a late grant, a rotation whose answer was lost):
// it opens the buckets, and no object accounts for it. IAM dates a key to the second: of two keys
// of the same second, the one whose driver call started later (the journal's) is the newer. The
// accounts a v1alpha1 driver named itself for the access count as one: the newest key of any of
// them must be the Secrets' (each grant makes another account, and those of earlier grants, whose
// keys workloads may hold, stay until the access goes).
func checkKeys(
	ctx context.Context, w *world, a *accessRecord, live *cosiapi.BucketAccess, inStore map[string]bool,
) ([]Violation, error) {
	var keys []backendKey
	var out []Violation
	name := "BucketAccess " + a.namespace + "/" + a.plan.name
	for _, account := range w.accountsOf(live) {
		if !inStore[account] {
			continue
		}
		k, err := w.store.keys(ctx, account)
		if err != nil {
			return nil, err
		}
		if len(k) > 2 {
			out = append(out, Violation{Check: CheckStrayKey, Object: name, Detail: fmt.Sprintf(
				"its account %s has %d keys; the driver keeps the newest and one previous", account, len(k)),
				subjects: a.subjects()})
		}
		keys = append(keys, k...)
	}
	held := map[string]bool{}
	for _, s := range w.secrets {
		if s.Namespace == live.Namespace && s.Labels[cosiapi.LabelBucketAccessUID] == string(live.UID) {
			held[w.store.keyID(secretCredentials(&s))] = true
		}
	}
	var newestHeld *backendKey
	for i, k := range keys {
		if held[k.id] && (newestHeld == nil || w.newer(k, *newestHeld)) {
			newestHeld = &keys[i]
		}
	}
	for _, k := range keys {
		if !held[k.id] && (newestHeld == nil || w.newer(k, *newestHeld)) {
			out = append(out, Violation{Check: CheckStrayKey, Object: name, Detail: fmt.Sprintf(
				"its account %s has a key (%s) newer than the one its Secrets hold", k.account, k.name),
				subjects: a.subjects()})
		}
	}
	return out, nil
}

// newer reports whether the key k was created after the key than: by the store's dates, and, when
// they are of the same second, by the start of the driver calls that issued them, when the
// journal has both.
func (w *world) newer(k, than backendKey) bool {
	if !k.created.Equal(than.created) {
		return k.created.After(than.created)
	}
	tk, ok := w.issued[k.credential]
	tthan, ok2 := w.issued[than.credential]
	return ok && ok2 && tk.After(tthan)
}

// checkKeptSecrets checks that each Secret of a kept access holds a key that opens its bucket.
func checkKeptSecrets(ctx context.Context, w *world, a *accessRecord, live *cosiapi.BucketAccess) ([]Violation, error) {
	var out []Violation
	name := "BucketAccess " + a.namespace + "/" + a.plan.name
	for _, ref := range live.Spec.BucketClaims {
		var secret *corev1.Secret
		for i := range w.secrets {
			if w.secrets[i].Namespace == a.namespace && w.secrets[i].Name == string(ref.AccessSecretName) &&
				w.secrets[i].Labels[cosiapi.LabelBucketAccessUID] == string(a.uid) {
				secret = &w.secrets[i]
			}
		}
		detail := ""
		if secret == nil {
			detail = "its Secret " + string(ref.AccessSecretName) + " is missing"
		} else {
			bucket := string(secret.Data[cosiapi.SecretKeyS3BucketName])
			allowed, err := w.store.allowed(ctx, secretCredentials(secret), bucket, true)
			if err != nil {
				return nil, err
			}
			if allowed {
				continue
			}
			detail = fmt.Sprintf("the key %s in Secret %s does not write bucket %s",
				secret.Data[cosiapi.SecretKeyS3AccessKeyID], secret.Name, secret.Data[cosiapi.SecretKeyS3BucketName])
		}
		out = append(out, Violation{Check: CheckLostKey, Object: name, Detail: detail, subjects: a.subjects()})
	}
	return out, nil
}

// converge audits until the audit passes (but for the checks of Config.KnownGaps) or
// ConvergeTimeout passes; it returns the last audit's findings.
func (r *run) converge(ctx context.Context, _ plan) ([]Violation, error) {
	deadline := time.Now().Add(r.cfg.ConvergeTimeout)
	last := -1
	for {
		if err := r.restartExited(ctx, false); err != nil {
			return nil, err
		}
		if err := r.reviveNamespaces(ctx); err != nil {
			return nil, err
		}
		found, err := r.audit(ctx)
		if err != nil {
			return nil, err
		}
		v, _ := r.knownGaps(found)
		if len(v) == 0 || time.Now().After(deadline) {
			return found, nil
		}
		if len(v) != last {
			r.logf("converging: %d findings left (first: %s)", len(v), v[0])
			last = len(v)
		}
		sleep(ctx, time.Second)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// reviveNamespaces recreates, and deletes again, the namespaces that are gone while COSI objects
// remain in them. kube-controller-manager's namespace controller can finish deleting a namespace
// while a custom resource is left in it, when it looks right after an API server restart, before
// the CRDs are served again (a Kubernetes race, not COSI's). The API server then refuses every
// write but deletion to what is left, finalizers included: no controller can finish its cleanup.
// Recreating the namespace is the admin's remedy; the namespace controller then deletes the
// content again, and COSI's components, which retry such refused writes at intervals
// (requeue.NamespaceGoneInterval), finish their cleanup. Nothing else wakes them: the suite does
// not touch the objects.
func (r *run) reviveNamespaces(ctx context.Context) error {
	var cl cosiapi.BucketClaimList
	var al cosiapi.BucketAccessList
	if err := r.list(ctx, &cl); err != nil {
		return err
	}
	if err := r.list(ctx, &al); err != nil {
		return err
	}
	spaces := map[string]bool{}
	for i := range cl.Items {
		spaces[cl.Items[i].Namespace] = true
	}
	for i := range al.Items {
		spaces[al.Items[i].Namespace] = true
	}
	for _, name := range slices.Sorted(maps.Keys(spaces)) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := r.get(ctx, ns); !apierrors.IsNotFound(err) {
			if err != nil {
				return err
			}
			continue
		}
		r.count("namespace deleted with COSI objects left in it (Kubernetes race): recreated and deleted again")
		r.timeline.addf([]string{name}, "namespace %s is gone with COSI objects in it; recreating and deleting it", name)
		r.logf("namespace %s is gone with COSI objects in it; recreating and deleting it", name)
		ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := r.create(ctx, ns); err != nil {
			return err
		}
		if err := r.del(ctx, ns); err != nil {
			return err
		}
	}
	return nil
}

func conditionText(cs []metav1.Condition) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	if len(parts) == 0 {
		return "no conditions"
	}
	return strings.Join(parts, "; ")
}

func since(t time.Time) string { return "deleting for " + time.Since(t).Round(time.Second).String() }

func claimState(live bool) string {
	if live {
		return "live"
	}
	return "gone"
}
