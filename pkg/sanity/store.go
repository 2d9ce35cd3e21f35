package sanity

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// The store properties: what must hold in the backend, whatever the cases did, checked through
// the probe after every case. The suite keeps a ledger of what the driver's answers say the
// backend holds (every successful call of the run, seen by the interceptor), and after each case
// asks the probe whether the backend agrees:
//   - every credential the driver returned and then revoked or retired opens nothing and
//     authenticates as nobody, and no backend account exists that no live grant explains;
//   - every bucket the driver created and was not asked to delete is still there, with the
//     objects the suite wrote into it; every bucket it deleted (answering OK) is gone.
//
// Each property is a result of its own (StoreCredentialsProperty, StoreBucketsProperty) naming
// the case after which it broke, so that a driver bug shows under its rule and not under the
// name of whichever case tripped over it; so are failures of the cases' cleanup
// (CleanupProperty).
const (
	StoreCredentialsProperty = "Store/live grants keep working; revoked and retired credentials open nothing; " +
		"no account outlives its grants"
	StoreBucketsProperty = "Store/buckets stay, with their objects, until the driver is asked to delete them"
	CleanupProperty      = "Store/each case's buckets and accesses are removed when it ends"
	// SettleResult reports, with Config.Settle, how long the effects the suite checked took to
	// show in the backend (passed, with the figures as its message).
	SettleResult = "Store/effects show within the settle window"
)

// Properties lists the results the suite adds after the cases of a v1alpha2 driver: one per
// store property, and the cleanup's (with Config.Settle also SettleResult).
func Properties() []string {
	return []string{StoreCredentialsProperty, StoreBucketsProperty, CleanupProperty}
}

// ledger is the suite's model of the backend: what the driver's successful answers say it holds.
type ledger struct {
	buckets  map[string]*ledgerBucket
	accounts map[string]*ledgerAccount
	// touched are the accounts and buckets whose state changed during the current case.
	touchedAccounts, touchedBuckets map[string]bool
}

type ledgerBucket struct {
	live      bool   // created, and not deleted since
	createdIn string // the case that created it
	// markers are objects the suite wrote into it (Probe.Put) that must stay until it is deleted.
	markers []string
	gone    bool // reported missing once
}

type ledgerAccount struct {
	grant *cosiproto.DriverGrantBucketAccessRequest // the last successful grant
	live  bool                                      // granted, and not revoked since
	creds []*ledgerCredential
	info  map[string]*cosiproto.ProtocolBucketInfo // each bucket's info, as the grant returned it
	in    string                                   // the case that granted it last
}

type ledgerCredential struct {
	id    string // credential_id, possibly empty
	creds *cosiproto.CredentialInfo
	// dead says why the credential must open nothing ("revoked", "retired"); empty while live.
	dead    string
	checked bool // dead, and found so by the probe
}

func newLedger() *ledger {
	return &ledger{
		buckets:         map[string]*ledgerBucket{},
		accounts:        map[string]*ledgerAccount{},
		touchedAccounts: map[string]bool{},
		touchedBuckets:  map[string]bool{},
	}
}

// record enters a successful v1alpha2 call into the ledger. The caller holds s.mu.
func (s *suite) record(req, reply any) {
	l := s.ledger
	switch r := req.(type) {
	case *cosiproto.DriverCreateBucketRequest:
		b := l.buckets[r.GetBucketId()]
		if b == nil {
			b = &ledgerBucket{createdIn: s.current}
			l.buckets[r.GetBucketId()] = b
		}
		b.live, b.gone = true, false
		l.touchedBuckets[r.GetBucketId()] = true
	case *cosiproto.DriverDeleteBucketRequest:
		if b := l.buckets[r.GetBucketId()]; b != nil {
			b.live, b.markers = false, nil
			l.touchedBuckets[r.GetBucketId()] = true
		}
	case *cosiproto.DriverGrantBucketAccessRequest:
		resp, _ := reply.(*cosiproto.DriverGrantBucketAccessResponse)
		a := l.accounts[r.GetAccountId()]
		if a == nil {
			a = &ledgerAccount{}
			l.accounts[r.GetAccountId()] = a
		}
		a.grant, a.live, a.in = r, true, s.current
		a.info = map[string]*cosiproto.ProtocolBucketInfo{}
		for _, b := range resp.GetBuckets() {
			a.info[b.GetBucketId()] = b.GetBucketInfo()
		}
		a.add(resp.GetCredentialId(), resp.GetCredentials())
		l.touchedAccounts[r.GetAccountId()] = true
	case *cosiproto.DriverRotateBucketAccessCredentialsRequest:
		resp, _ := reply.(*cosiproto.DriverRotateBucketAccessCredentialsResponse)
		if a := l.accounts[r.GetAccountId()]; a != nil {
			a.add(resp.GetCredentialId(), resp.GetCredentials())
			l.touchedAccounts[r.GetAccountId()] = true
		}
	case *cosiproto.DriverRetireBucketAccessCredentialsRequest:
		if a := l.accounts[r.GetAccountId()]; a != nil && r.GetCredentialId() != "" {
			for _, c := range a.creds {
				if c.id == r.GetCredentialId() && c.dead == "" {
					c.dead = "retired"
				}
			}
			l.touchedAccounts[r.GetAccountId()] = true
		}
	case *cosiproto.DriverRevokeBucketAccessRequest:
		if a := l.accounts[r.GetAccountId()]; a != nil {
			a.live = false
			for _, c := range a.creds {
				if c.dead == "" {
					c.dead = "revoked"
				}
			}
			l.touchedAccounts[r.GetAccountId()] = true
		}
	}
}

// add enters credentials the driver returned for the account, once.
func (a *ledgerAccount) add(id string, creds *cosiproto.CredentialInfo) {
	if !hasKey(creds) {
		return // a ServiceAccount grant: nothing to hold
	}
	for _, c := range a.creds {
		if proto.Equal(c.creds, creds) {
			return
		}
	}
	a.creds = append(a.creds, &ledgerCredential{id: id, creds: creds})
}

// propertyViolation is one broken property, after one case.
type propertyViolation struct {
	property, msg string
}

// checkStore checks the store properties after the case named c (its cleanup done), through the
// probe functions there are, and records what broke.
func (s *suite) checkStore(ctx context.Context, c string) {
	if s.ledger == nil {
		return
	}
	p := s.cfg.Probe
	type deadCred struct {
		account string
		a       *ledgerAccount
		c       *ledgerCredential
	}
	s.mu.Lock()
	var dead []deadCred
	for id := range s.ledger.touchedAccounts {
		a := s.ledger.accounts[id]
		for _, cred := range a.creds {
			if cred.dead != "" && !cred.checked {
				dead = append(dead, deadCred{id, a, cred})
			}
		}
	}
	slices.SortFunc(dead, func(x, y deadCred) int { return strings.Compare(x.account, y.account) })
	type bucketCheck struct {
		id string
		b  *ledgerBucket
	}
	var buckets []bucketCheck
	for id, b := range s.ledger.buckets {
		if b.live && !b.gone || !b.live && s.ledger.touchedBuckets[id] {
			buckets = append(buckets, bucketCheck{id, b})
		}
	}
	slices.SortFunc(buckets, func(x, y bucketCheck) int { return strings.Compare(x.id, y.id) })
	s.ledger.touchedAccounts, s.ledger.touchedBuckets = map[string]bool{}, map[string]bool{}
	s.mu.Unlock()

	violate := func(property, format string, args ...any) { s.violate(property, c, format, args...) }

	// The kept grant still opens the kept bucket.
	s.mu.Lock()
	k := s.keep
	s.mu.Unlock()
	if k != nil && k.resp != nil && !k.broken && p.Allowed != nil {
		works := func(ctx context.Context) (bool, error) { return p.Allowed(ctx, k.check(false)) }
		ok, err := s.settleBool(ctx, works, true)
		if err == nil && !ok {
			// Keys that expire by design (a SAS token's expiry) are renewed as the sidecar renews
			// them: with the grant repeated.
			if resp, gerr := s.prov.DriverGrantBucketAccess(ctx, k.g.grantRequest(k.accountID)); gerr == nil {
				s.mu.Lock()
				k.resp = resp
				s.mu.Unlock()
				ok, err = s.settleBool(ctx, works, true)
			}
		}
		switch {
		case err != nil:
			violate(StoreCredentialsProperty, "probe: the kept grant on bucket %q: %v", k.bucketID, err)
		case !ok:
			violate(StoreCredentialsProperty, "the grant the suite keeps through the run (account %q, read-write on "+
				"bucket %q) no longer opens its bucket; nothing revoked it", k.accountID, k.bucketID)
			k.broken = true
		}
	}

	// Revoked and retired credentials open nothing.
	for _, d := range dead {
		ok := true
		what := fmt.Sprintf("a credential of account %q (%s)", d.account, d.c.dead)
		if d.c.id != "" {
			what = fmt.Sprintf("credential %q of account %q (%s)", d.c.id, d.account, d.c.dead)
		}
		if p.AccountOf != nil {
			who, err := s.settleString(ctx, func(ctx context.Context) (string, error) { return p.AccountOf(ctx, d.c.creds) }, "")
			switch {
			case err != nil:
				violate(StoreCredentialsProperty, "probe: which account %s authenticates as: %v", what, err)
				ok = false
			case who != "":
				violate(StoreCredentialsProperty, "%s still authenticates as backend account %q", what, who)
				ok = false
			}
		}
		if p.Allowed != nil && k != nil && k.resp != nil && d.a.grant.GetProtocol() == k.g.protocol {
			// Nor the kept bucket, which no case was granted.
			check := k.check(false)
			check.Protocol, check.Credentials = d.a.grant.GetProtocol(), d.c.creds
			allowed, err := s.settleBool(ctx, func(ctx context.Context) (bool, error) { return p.Allowed(ctx, check) }, false)
			switch {
			case err != nil:
				violate(StoreCredentialsProperty, "probe: %s on the kept bucket %q: %v", what, k.bucketID, err)
				ok = false
			case allowed:
				violate(StoreCredentialsProperty, "%s can read objects of the kept bucket %q", what, k.bucketID)
				ok = false
			}
		}
		if p.Allowed != nil {
			for _, ab := range d.a.grant.GetBuckets() {
				id := ab.GetBucketId()
				if b := s.liveBucket(id); b == nil {
					continue // gone: nothing to open
				}
				for _, write := range []bool{false, true} {
					check := AccessCheck{Protocol: d.a.grant.GetProtocol(), Credentials: d.c.creds, BucketID: id,
						BucketInfo: d.a.info[id], Category: ObjectData, Write: write}
					allowed, err := s.settleBool(ctx, func(ctx context.Context) (bool, error) { return p.Allowed(ctx, check) }, false)
					switch {
					case err != nil:
						violate(StoreCredentialsProperty, "probe: %s on bucket %q: %v", what, id, err)
						ok = false
					case allowed:
						violate(StoreCredentialsProperty, "%s can still %s objects of bucket %q", what, rw(write), id)
						ok = false
					}
				}
			}
		}
		s.mu.Lock()
		d.c.checked = ok
		s.mu.Unlock()
	}

	// No account outlives its grants.
	if p.Accounts != nil {
		s.checkAccounts(ctx, violate)
	}

	// Buckets stay until deleted, with their objects; deleted ones are gone.
	if p.BucketExists != nil {
		for _, bc := range buckets {
			s.mu.Lock()
			live, markers, createdIn := bc.b.live, slices.Clone(bc.b.markers), bc.b.createdIn
			s.mu.Unlock()
			exists, err := s.settleBool(ctx, func(ctx context.Context) (bool, error) { return p.BucketExists(ctx, bc.id) }, live)
			switch {
			case err != nil:
				violate(StoreBucketsProperty, "probe: does bucket %q exist: %v", bc.id, err)
			case live && !exists:
				violate(StoreBucketsProperty, "bucket %q, created in %q and never deleted through the driver, is gone",
					bc.id, createdIn)
				s.mu.Lock()
				bc.b.gone = true
				s.mu.Unlock()
			case !live && exists:
				violate(StoreBucketsProperty,
					"DriverDeleteBucket of %q answered OK, but the bucket is still in the backend: a driver that "+
						"cannot delete a bucket (one holding objects, say) must refuse with FailedPrecondition", bc.id)
			case live && len(markers) > 0 && p.Objects != nil:
				objects, err := settled(ctx, s, func(ctx context.Context) ([]string, error) { return p.Objects(ctx, bc.id) },
					func(objects []string) bool {
						return !slices.ContainsFunc(markers, func(m string) bool { return !slices.Contains(objects, m) })
					})
				if err != nil {
					violate(StoreBucketsProperty, "probe: the objects of bucket %q: %v", bc.id, err)
					break
				}
				for _, m := range markers {
					if !slices.Contains(objects, m) {
						violate(StoreBucketsProperty, "object %q of bucket %q is gone; nothing deleted it through a grant",
							m, bc.id)
						s.mu.Lock()
						bc.b.markers = slices.DeleteFunc(bc.b.markers, func(x string) bool { return x == m })
						s.mu.Unlock()
					}
				}
			}
		}
	}
}

// checkAccounts lists the backend's accounts and reports each one that is neither in the
// baseline (there before the run) nor explained by a live grant of the ledger, once.
func (s *suite) checkAccounts(ctx context.Context, violate func(property, format string, args ...any)) {
	p := s.cfg.Probe
	// Within the settle window, until no more accounts are there that were not before the run
	// (and not reported) than grants are live: a revoked account may take a while to go.
	list, err := settled(ctx, s, p.Accounts, func(list []string) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		live := 0
		for _, a := range s.ledger.accounts {
			if a.live {
				live++
			}
		}
		fresh := 0
		for _, a := range list {
			if !s.baseline[a] && !s.reported[a] {
				fresh++
			}
		}
		return fresh <= live
	})
	if err != nil {
		violate(StoreCredentialsProperty, "probe: listing accounts: %v", err)
		return
	}
	s.mu.Lock()
	var fresh []string
	for _, a := range list {
		if !s.baseline[a] && !s.reported[a] {
			fresh = append(fresh, a)
		}
	}
	// Each live account's keys, newest first: one that authenticates names the account (an older
	// one may have expired, or been replaced by a repeated grant).
	var liveCreds [][]*cosiproto.CredentialInfo
	liveAccounts := 0
	for _, a := range s.ledger.accounts {
		if !a.live {
			continue
		}
		liveAccounts++
		var keys []*cosiproto.CredentialInfo
		for _, c := range slices.Backward(a.creds) {
			if c.dead == "" {
				keys = append(keys, c.creds)
			}
		}
		if len(keys) > 0 {
			liveCreds = append(liveCreds, keys)
		}
	}
	s.mu.Unlock()
	if len(fresh) == 0 {
		return
	}
	if p.AccountOf == nil || len(liveCreds) < liveAccounts {
		// Without AccountOf (or with ServiceAccount grants, whose accounts no key names), the
		// accounts can only be counted.
		if len(fresh) > liveAccounts {
			violate(StoreCredentialsProperty, "the backend holds %d accounts the run made (%s), and %d grants are live",
				len(fresh), strings.Join(fresh, ", "), liveAccounts)
			s.markReported(fresh)
		}
		return
	}
	explained := map[string]bool{}
	for _, keys := range liveCreds {
		for i, c := range keys {
			var who string
			var err error
			if i == 0 { // the newest key, within the settle window
				who, err = s.settleString(ctx, func(ctx context.Context) (string, error) { return p.AccountOf(ctx, c) },
					anyAccount)
			} else {
				who, err = p.AccountOf(ctx, c)
			}
			if err == nil && who != "" {
				explained[who] = true
				break
			}
		}
	}
	var unexplained []string
	for _, a := range fresh {
		if !explained[a] {
			unexplained = append(unexplained, a)
		}
	}
	if len(unexplained) > 0 {
		slices.Sort(unexplained)
		violate(StoreCredentialsProperty, "backend accounts %s exist, and no live grant's credentials authenticate as them",
			strings.Join(quoteAll(unexplained), ", "))
		s.markReported(unexplained)
	}
}

func (s *suite) markReported(accounts []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range accounts {
		s.reported[a] = true
	}
}

// liveBucket returns the ledger's bucket when it is live, else nil.
func (s *suite) liveBucket(id string) *ledgerBucket {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.ledger.buckets[id]; b != nil && b.live {
		return b
	}
	return nil
}

// addMarker notes an object the suite wrote into a bucket, which must stay until the bucket is
// deleted.
func (s *suite) addMarker(bucketID, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.ledger.buckets[bucketID]; b != nil {
		b.markers = append(b.markers, key)
	}
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// storeResults turns the property violations and cleanup failures of the run into one result per
// property: failed with every violation, passed when there were none, skipped without the probe
// functions the property needs.
func (s *suite) storeResults() []Result {
	if s.ledger == nil {
		return nil
	}
	p := s.cfg.Probe
	s.mu.Lock()
	defer s.mu.Unlock()
	byProperty := map[string][]string{}
	for _, v := range s.propertyViolations {
		byProperty[v.property] = append(byProperty[v.property], v.msg)
	}
	byProperty[CleanupProperty] = s.cleanupFailures
	var out []Result
	selected := s.selected
	for _, prop := range []struct {
		name  string
		skip  string
		probe bool
	}{
		{StoreCredentialsProperty, "needs a backend probe (Probe.AccountOf, Probe.Allowed or Probe.Accounts)",
			p.AccountOf != nil || p.Allowed != nil || p.Accounts != nil},
		{StoreBucketsProperty, "needs a backend probe (Probe.BucketExists)", p.BucketExists != nil},
		{CleanupProperty, "", true},
	} {
		if !selected(prop.name) {
			continue
		}
		r := Result{Name: prop.name, Status: Passed}
		switch {
		case len(byProperty[prop.name]) > 0:
			r.Status, r.Message = Failed, strings.Join(byProperty[prop.name], "; ")
		case !prop.probe:
			r.Status, r.Message = Skipped, prop.skip
		}
		out = append(out, r)
	}
	if s.cfg.Settle > 0 && selected(SettleResult) {
		out = append(out, Result{Name: SettleResult, Status: Passed, Message: s.settleReportLocked()})
	}
	return out
}

// keeper is the bucket the suite keeps through the run, with a live read-write grant and an
// object written through it: after every case the bucket must still be there with its object,
// and the grant must still open it. A case that deletes, empties or revokes more than it was
// asked to (every bucket or user with the suite's prefix, say) breaks it.
type keeper struct {
	bucketID, accountID string
	g                   grant
	resp                *cosiproto.DriverGrantBucketAccessResponse
	broken              bool // reported as no longer working
}

const (
	startOfRun = "the start of the run"
	endOfRun   = "the end of the run"
	// KeptObject is the object the suite writes (Probe.Put) into the bucket it keeps through the
	// run.
	KeptObject = "cosi-sanity-kept"
)

// selected reports whether Config.Run selects the result named.
func (s *suite) selected(name string) bool { return s.cfg.Run == nil || s.cfg.Run.MatchString(name) }

// startStore starts the ledger of a v1alpha2 run: it notes the backend's accounts, and creates
// the bucket the suite keeps through the run when the probe can check it. Without a property
// selected (Config.Run) it does nothing.
func (s *suite) startStore(ctx context.Context) {
	if s.protocol != driverclient.ProtocolV1alpha2 ||
		s.cfg.Run != nil && !slices.ContainsFunc(Properties(), s.cfg.Run.MatchString) {
		return
	}
	s.ledger, s.baseline, s.reported = newLedger(), map[string]bool{}, map[string]bool{}
	p := s.cfg.Probe
	s.mu.Lock()
	s.current = startOfRun
	s.mu.Unlock()
	if p.Accounts != nil {
		list, err := p.Accounts(ctx)
		if err != nil {
			s.violate(StoreCredentialsProperty, startOfRun, "probe: listing accounts: %v", err)
		}
		for _, a := range list {
			s.baseline[a] = true
		}
	}
	if p.BucketExists == nil && p.Allowed == nil {
		return // nothing would look at the kept bucket
	}
	k, err := s.keepBucket(ctx)
	if err != nil {
		s.violate(StoreBucketsProperty, startOfRun, "creating the bucket the suite keeps through the run: %v", err)
		if k != nil {
			k.resp = nil // no check of a grant that failed; stopStore removes what was made
		}
	}
	s.keep = k
}

// keepBucket creates the kept bucket, grants it read-write access and writes KeptObject into it.
func (s *suite) keepBucket(ctx context.Context) (*keeper, error) {
	if len(s.info.GetSupportedProtocols()) == 0 {
		return nil, nil // DriverGetInfo's case fails the driver
	}
	protocol := s.info.GetSupportedProtocols()[0]
	name := s.prefix + "keep"
	s.red.addOpen(name)
	gen, err := s.prov.DriverGenerateBucketId(ctx, &cosiproto.DriverGenerateBucketIdRequest{
		Name: name, Protocols: []cosiproto.ObjectProtocol_Type{protocol}, Parameters: s.cfg.BucketParameters,
	})
	if err != nil {
		return nil, fmt.Errorf("DriverGenerateBucketId: %w", err)
	}
	k := &keeper{bucketID: gen.GetBucketId()}
	if _, err := s.prov.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{
		BucketId: k.bucketID, Protocols: []cosiproto.ObjectProtocol_Type{protocol}, Parameters: s.cfg.BucketParameters,
	}); err != nil {
		return nil, fmt.Errorf("DriverCreateBucket: %w", err)
	}
	k.g = grant{protocol: protocol, auth: cosiproto.AuthenticationType_KEY, params: s.cfg.AccessParameters,
		buckets: []*cosiproto.AccessedBucket{{BucketId: k.bucketID, AccessModes: readWrite}}}
	acc, err := s.prov.DriverGenerateBucketAccessId(ctx, k.g.generateRequest(name))
	if status.Code(err) == codes.InvalidArgument {
		return k, nil // a driver without Key access (or without these modes): the bucket is kept without a grant
	}
	if err != nil {
		return k, fmt.Errorf("DriverGenerateBucketAccessId: %w", err)
	}
	k.accountID = acc.GetAccountId()
	if k.resp, err = s.prov.DriverGrantBucketAccess(ctx, k.g.grantRequest(k.accountID)); err != nil {
		if status.Code(err) == codes.InvalidArgument {
			k.accountID, k.resp = "", nil // as above
			return k, nil
		}
		return k, fmt.Errorf("DriverGrantBucketAccess: %w", err)
	}
	// The object only where the suite can remove it again: a driver may refuse to delete a bucket
	// holding objects.
	if put := s.cfg.Probe.Put; put != nil && s.cfg.Probe.Empty != nil {
		ok, err := s.settleBool(ctx, func(ctx context.Context) (bool, error) { return put(ctx, k.check(true), KeptObject) },
			true)
		switch {
		case err != nil:
			return k, fmt.Errorf("probe: writing %s with the grant: %w", KeptObject, err)
		case !ok:
			return k, fmt.Errorf("a read-write grant of the bucket could not write %s into it", KeptObject)
		}
		s.addMarker(k.bucketID, KeptObject)
	}
	return k, nil
}

// check is a check of the kept grant's object data access.
func (k *keeper) check(write bool) AccessCheck {
	return AccessCheck{Protocol: k.g.protocol, Credentials: k.resp.GetCredentials(), BucketID: k.bucketID,
		BucketInfo: bucketInfoFor(k.resp, k.bucketID), Category: ObjectData, Write: write}
}

// stopStore revokes the kept grant, deletes the kept bucket and checks the store a last time.
func (s *suite) stopStore(ctx context.Context) {
	if s.ledger == nil {
		return
	}
	s.mu.Lock()
	s.current = endOfRun
	k := s.keep
	s.keep = nil
	s.mu.Unlock()
	if k != nil {
		if k.accountID != "" {
			if _, err := s.prov.DriverRevokeBucketAccess(ctx, k.g.revokeRequest(k.accountID)); err != nil {
				s.cleanupFail(endOfRun, "DriverRevokeBucketAccess %q (the kept bucket's grant): %v", k.accountID, err)
			}
		}
		if err := s.deleteBucket(ctx, k.bucketID); err != nil {
			s.cleanupFail(endOfRun, "%v", err)
		}
	}
	s.checkStore(ctx, endOfRun)
	s.recheckDead(ctx)
}

// recheckDead asks, at the end of the run, whom every key revoked or retired during the run
// authenticates as: a revoke undone later (a user recreated, a key restored) shows here.
func (s *suite) recheckDead(ctx context.Context) {
	accountOf := s.cfg.Probe.AccountOf
	if accountOf == nil {
		return
	}
	s.mu.Lock()
	type deadKey struct {
		account string
		c       *ledgerCredential
	}
	var dead []deadKey
	for id, a := range s.ledger.accounts {
		for _, c := range a.creds {
			if c.dead != "" && c.checked {
				dead = append(dead, deadKey{id, c})
			}
		}
	}
	s.mu.Unlock()
	slices.SortFunc(dead, func(x, y deadKey) int { return strings.Compare(x.account, y.account) })
	for _, d := range dead {
		who, err := s.settleString(ctx, func(ctx context.Context) (string, error) { return accountOf(ctx, d.c.creds) }, "")
		switch {
		case err != nil:
			s.violate(StoreCredentialsProperty, endOfRun, "probe: which account a %s key of account %q authenticates "+
				"as: %v", d.c.dead, d.account, err)
		case who != "":
			s.violate(StoreCredentialsProperty, endOfRun, "a key of account %q, %s during the run and found so then, "+
				"authenticates as backend account %q again", d.account, d.c.dead, who)
		}
	}
}

// deleteBucket deletes a bucket the suite made; when the driver refuses because it holds objects
// (FailedPrecondition: the probe's own objects, say), it empties the bucket through the probe
// (Probe.Empty) and deletes it again.
func (s *suite) deleteBucket(ctx context.Context, id string) error {
	req := &cosiproto.DriverDeleteBucketRequest{BucketId: id, Parameters: s.cfg.BucketParameters}
	_, err := s.prov.DriverDeleteBucket(ctx, req)
	if status.Code(err) == codes.FailedPrecondition && s.cfg.Probe.Empty != nil {
		if err := s.cfg.Probe.Empty(ctx, id); err != nil {
			return fmt.Errorf("probe: emptying bucket %q, which DriverDeleteBucket refused: %w", id, err)
		}
		_, err = s.prov.DriverDeleteBucket(ctx, req)
	}
	if err != nil {
		st := status.Convert(err)
		if st.Code() == codes.FailedPrecondition && s.cfg.Probe.Empty == nil {
			return fmt.Errorf("DriverDeleteBucket %q: %v: %s (the bucket holds objects the suite wrote; a probe with "+
				"Probe.Empty lets the suite remove them)", id, st.Code(), st.Message())
		}
		return fmt.Errorf("DriverDeleteBucket %q: %v: %s", id, st.Code(), st.Message())
	}
	return nil
}

// violate records a broken property after the case c.
func (s *suite) violate(property, c, format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	after := fmt.Sprintf("after %q", c)
	if strings.HasPrefix(c, "Sequences/") {
		after += fmt.Sprintf(" (seed %d: --seed replays it)", s.seed)
	}
	s.propertyViolations = append(s.propertyViolations,
		propertyViolation{property, fmt.Sprintf("%s: %s", after, fmt.Sprintf(format, args...))})
}

// cleanupFail records a failure of the cleanup after the case c.
func (s *suite) cleanupFail(c, format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanupFailures = append(s.cleanupFailures, fmt.Sprintf("after %q: %s", c, fmt.Sprintf(format, args...)))
}
