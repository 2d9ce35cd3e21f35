package sanity

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Generated sequences: each runs SequenceSteps operations, chosen at random from a seed, against
// buckets and accounts whose names extend one another (B, B-logs, B0: the names that catch
// prefix matches, wildcard policies and lookups by listing), and after every operation checks,
// through the probe, that each live credential opens exactly the buckets and modes it was granted,
// that revoked and retired credentials open nothing, that no bucket is gone that was not deleted,
// and that lookups of neighbouring names find nothing. A failure names the seed and the steps:
// Config.Seed (cosi-sanity --seed) replays them.

// DefaultSequences is how many sequences run when Config.Sequences is zero.
const DefaultSequences = 4

// SequenceSteps is the number of operations of each sequence.
const SequenceSteps = 48

const (
	maxSeqBuckets  = 6
	maxSeqAccounts = 4
)

// sequenceCases returns n sequence cases.
func sequenceCases(n int) []Case {
	out := make([]Case, n)
	for i := range n {
		out[i] = Case{
			Name: fmt.Sprintf("Sequences/operations in a random order keep every credential to its grant (%d of %d)", i+1, n),
			run:  func(t *T) { runSequence(t, uint64(i)) },
		}
	}
	return out
}

// seq is one generated sequence: the buckets and accounts it made, what each must allow, and the
// steps so far.
type seq struct {
	t        *T
	rnd      *rand.Rand
	seed     uint64
	index    uint64
	protocol cosiproto.ObjectProtocol_Type
	buckets  []*seqBucket
	accounts []*seqAccount
	steps    []string
	families int
	// noRotation, noMulti, noMode: what the driver said it does not do (Unimplemented,
	// OutOfRange, InvalidArgument for a mode), so that the sequence stops asking.
	noRotation, noMulti bool
	noModes             map[string]bool
	// okModes are the modes the driver granted in this sequence.
	okModes map[string]*cosiproto.AccessModes
	// recent is the account the last operation was about: operations prefer it, so that
	// sequences of operations on one account (rotate, retire, grant again) are common.
	recent    *seqAccount
	following bool
	// rotatedFrom is the key the rotation being followed up replaced.
	rotatedFrom *seqCred
}

// pick returns one of the accounts: the most recent one half the time (always in a follow-up),
// if it is among them.
func (q *seq) pick(accounts []*seqAccount) *seqAccount {
	a := accounts[q.rnd.IntN(len(accounts))]
	if slices.Contains(accounts, q.recent) && (q.following || q.rnd.IntN(2) == 0) {
		a = q.recent
	}
	q.recent = a
	return a
}

// follow runs op on the recent account right away, half the time, when ok: the orders in which
// the sidecar calls a driver (a rotation, then the retirement of the old key; a Secret lost, and
// the grant repeated) come up in most sequences.
func (q *seq) follow(ok bool, op func()) {
	if !ok || q.rnd.IntN(2) != 0 {
		return
	}
	q.following = true
	defer func() { q.following = false }()
	op()
}

type seqBucket struct {
	name, id string
	live     bool
}

type seqAccount struct {
	name, id string
	g        grant
	live     bool
	resp     *cosiproto.DriverGrantBucketAccessResponse
	creds    []*seqCred
}

type seqCred struct {
	id    string
	creds *cosiproto.CredentialInfo
	// state: "live" (must open what the grant allows), "unknown" (replaced by a repeat grant's
	// new key: the driver may keep it or not), "dead" (revoked or retired: must open nothing).
	state string
}

func runSequence(t *T, index uint64) {
	if t.s.cfg.Probe.Allowed == nil {
		t.Skipf("needs a backend probe (Probe.Allowed) to see what the operations did")
	}
	q := &seq{t: t, seed: t.s.seed, index: index, noModes: map[string]bool{}, okModes: map[string]*cosiproto.AccessModes{}}
	q.rnd = rand.New(rand.NewPCG(q.seed, index))
	protocols := t.protocols()
	q.protocol = protocols[q.rnd.IntN(len(protocols))]
	for range SequenceSteps {
		q.step()
	}
	q.finish()
}

// fail ends the sequence with the seed and the steps that led to the failure.
func (q *seq) fail(format string, args ...any) {
	q.t.Fatalf("seed %d, sequence %d, step %d: %s (replay with seed %d; the steps: %s)",
		q.seed, q.index+1, len(q.steps), fmt.Sprintf(format, args...), q.seed, strings.Join(q.steps, "; "))
}

func (q *seq) note(format string, args ...any) {
	q.steps = append(q.steps, fmt.Sprintf("%d. ", len(q.steps)+1)+fmt.Sprintf(format, args...))
}

func (q *seq) liveBuckets() []*seqBucket {
	return slices.DeleteFunc(slices.Clone(q.buckets), func(b *seqBucket) bool { return !b.live })
}

func (q *seq) liveAccounts() []*seqAccount {
	return slices.DeleteFunc(slices.Clone(q.accounts), func(a *seqAccount) bool { return !a.live })
}

// step runs one operation, chosen among those that can run now.
func (q *seq) step() {
	buckets, accounts := q.liveBuckets(), q.liveAccounts()
	type op struct {
		weight int
		run    func()
	}
	ops := []op{
		{map[bool]int{true: 6, false: 0}[len(buckets) < maxSeqBuckets], q.createBucket},
		{map[bool]int{true: 5, false: 0}[len(buckets) > 0 && len(accounts) < maxSeqAccounts], q.grantNew},
		{map[bool]int{true: 2, false: 0}[len(accounts) > 0], q.grantAgain},
		{map[bool]int{true: 2, false: 0}[len(accounts) > 0], q.grantOther},
		{map[bool]int{true: 3, false: 0}[len(accounts) > 0 && !q.noRotation], q.rotate},
		{map[bool]int{true: 3, false: 0}[q.retirable() != nil], q.retire},
		{map[bool]int{true: 3, false: 0}[len(accounts) > 0], q.revoke},
		{map[bool]int{true: 2, false: 0}[q.regrantable() != nil && len(accounts) < maxSeqAccounts], q.grantAfterRevoke},
		{map[bool]int{true: 2, false: 0}[q.deletable() != nil], q.deleteBucket},
		{map[bool]int{true: 2, false: 0}[len(buckets) > 0], q.lookup},
		{map[bool]int{true: 3, false: 0}[len(accounts) > 1 && !q.noRotation], q.foreignCredential},
	}
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	n := q.rnd.IntN(total)
	for _, o := range ops {
		if n < o.weight {
			o.run()
			return
		}
		n -= o.weight
	}
}

// familyName returns a new bucket or account name: a new stem, or an existing name extended
// ("-logs", "0") or cut back to a shorter one, so that names of the run extend one another.
func (q *seq) familyName(kind string, bases, existing []string) string {
	taken := func(n string) bool { return slices.Contains(existing, n) }
	if len(bases) > 0 && q.rnd.IntN(4) > 0 {
		base := bases[q.rnd.IntN(len(bases))]
		var candidates []string
		for _, n := range []string{base + "-logs", base + "0", strings.TrimSuffix(base, "-logs"),
			strings.TrimSuffix(base, "0")} {
			if n != base && !taken(n) {
				candidates = append(candidates, n)
			}
		}
		if len(candidates) > 0 {
			return candidates[q.rnd.IntN(len(candidates))]
		}
	}
	q.families++
	name := fmt.Sprintf("%s%s%d%c", q.t.s.prefix, kind, q.index+1, 'a'+rune(q.families-1)%26)
	q.t.s.red.addOpen(name)
	return name
}

func (q *seq) createBucket() {
	var names []string
	for _, b := range q.buckets {
		names = append(names, b.name)
	}
	q.createBucketFrom(names)
}

// createBucketFrom creates a bucket whose name extends or shortens one of bases, or a new one.
func (q *seq) createBucketFrom(bases []string) {
	var names []string
	for _, b := range q.buckets {
		names = append(names, b.name)
	}
	name := q.familyName("q", bases, names)
	q.t.s.red.addOpen(name)
	protocols := []cosiproto.ObjectProtocol_Type{q.protocol}
	gen, err := q.t.s.prov.DriverGenerateBucketId(q.t.ctx, &cosiproto.DriverGenerateBucketIdRequest{
		Name: name, Protocols: protocols, Parameters: q.t.s.cfg.BucketParameters,
	})
	q.note("create bucket %q", name)
	if err != nil {
		q.fail("DriverGenerateBucketId %q: %v", name, err)
	}
	id := gen.GetBucketId()
	if slices.ContainsFunc(q.buckets, func(b *seqBucket) bool { return b.id == id }) {
		q.fail("DriverGenerateBucketId gave bucket name %q the bucket_id %q of another name", name, id)
	}
	if _, err := q.t.s.prov.DriverCreateBucket(q.t.ctx, &cosiproto.DriverCreateBucketRequest{
		BucketId: id, Protocols: protocols, Parameters: q.t.s.cfg.BucketParameters,
	}); err != nil {
		q.fail("DriverCreateBucket %q: %v", id, err)
	}
	q.t.Cleanup(func() { q.t.deleteBucket(id) })
	b := &seqBucket{name: name, id: id, live: true}
	q.buckets = append(q.buckets, b)
	if ok := q.exists(id, true); !ok {
		q.fail("bucket %q is not in the backend after DriverCreateBucket returned OK", id)
	}
	// No live credential opens the new bucket: nobody was granted it.
	for _, a := range q.liveAccounts() {
		for _, c := range a.liveCreds() {
			for _, write := range []bool{false, true} {
				if q.allowed(a, c, id, ObjectData, write, false) {
					q.fail("account %q (granted %s) can %s objects of bucket %q, created after its grant: it was "+
						"never granted it", a.id, a.describe(), rw(write), id)
				}
			}
		}
	}
	q.checkBuckets()
}

// randomModes returns a grant's modes for one bucket, each category's chosen at random among the
// modes the driver did not refuse.
func (q *seq) randomModes() *cosiproto.AccessModes {
	all := []cosiproto.AccessMode_Mode{
		cosiproto.AccessMode_READ_ONLY, cosiproto.AccessMode_WRITE_ONLY, cosiproto.AccessMode_READ_WRITE,
	}
	pick := func() cosiproto.AccessMode_Mode { return all[q.rnd.IntN(len(all))] }
	return &cosiproto.AccessModes{ObjectData: pick(), ObjectMetadata: pick(), BucketMetadata: pick()}
}

func modesKey(m *cosiproto.AccessModes) string {
	return fmt.Sprintf("%v/%v/%v", m.GetObjectData(), m.GetObjectMetadata(), m.GetBucketMetadata())
}

func (q *seq) grantNew() {
	var names []string
	for _, a := range q.accounts {
		names = append(names, a.name)
	}
	a := &seqAccount{name: q.familyName("u", names, names)}
	q.grantRandom(a)
	q.follow(a.live, q.grantOther)
	// A bucket whose name extends one the account was granted: a wildcard policy opens it.
	var granted []string
	for _, ab := range a.g.buckets {
		for _, b := range q.buckets {
			if b.id == ab.GetBucketId() {
				granted = append(granted, b.name)
			}
		}
	}
	q.follow(len(q.liveBuckets()) < maxSeqBuckets && len(granted) > 0, func() { q.createBucketFrom(granted) })
}

// grantRandom grants the account access to one or two random live buckets with random modes,
// falling back to modes the driver accepts, and checks what the credentials open.
func (q *seq) grantRandom(a *seqAccount) {
	buckets := q.liveBuckets()
	q.rnd.Shuffle(len(buckets), func(i, j int) { buckets[i], buckets[j] = buckets[j], buckets[i] })
	n := 1
	if len(buckets) > 1 && !q.noMulti && q.rnd.IntN(2) == 0 {
		n = 2
	}
	// Random modes first; after refusals the modes the driver did not refuse yet, then the widest
	// it may accept.
	fallback := []*cosiproto.AccessModes{allModes, objectModes, readWrite}
	for attempt := 0; ; attempt++ {
		g := grant{protocol: q.protocol, auth: cosiproto.AuthenticationType_KEY, params: q.t.s.cfg.AccessParameters}
		for _, b := range buckets[:n] {
			m := q.randomModes()
			for try := 0; q.noModes[modesKey(m)] && try < 20; try++ {
				m = q.randomModes()
			}
			if attempt >= 6 {
				m = fallback[min(attempt-6, len(fallback)-1)]
			}
			g.buckets = append(g.buckets, &cosiproto.AccessedBucket{BucketId: b.id, AccessModes: m})
		}
		a.g = g
		code := q.grant(a, "grant")
		switch {
		case code == codes.OK:
			return
		case code == codes.OutOfRange && n > 1:
			q.noMulti, n = true, 1
		case code == codes.ResourceExhausted:
			// The store holds as many accesses to a bucket as it allows (Azure: five stored access
			// policies per container): no grant this step.
			q.steps = q.steps[:len(q.steps)-1]
			return
		case code == codes.InvalidArgument && attempt < 6+len(fallback):
			for _, b := range g.buckets {
				q.noModes[modesKey(b.GetAccessModes())] = true
			}
		default:
			if code == codes.InvalidArgument && len(q.okModes) == 0 {
				q.t.Skipf("the driver refuses Key access to a bucket with every modes tried (InvalidArgument): the " +
					"sequences need Key grants")
			}
			q.fail("the grant failed with %v, and a simpler one is not left to try", code)
		}
		q.steps = q.steps[:len(q.steps)-1] // a refused grant is no step of the sequence
	}
}

// grant runs both phases of the account's grant and checks the result; it returns the code of a
// refusal (OutOfRange, InvalidArgument: the caller tries another grant), and ends the sequence
// on any other failure.
func (q *seq) grant(a *seqAccount, what string) codes.Code {
	q.note("%s %s as account %q", what, a.describeGrant(), a.name)
	gen, err := q.t.s.prov.DriverGenerateBucketAccessId(q.t.ctx, a.g.generateRequest(a.name))
	if code := status.Code(err); code == codes.OutOfRange || code == codes.InvalidArgument ||
		code == codes.ResourceExhausted {
		return code
	} else if err != nil {
		q.fail("DriverGenerateBucketAccessId: %v", err)
	}
	a.id = gen.GetAccountId()
	resp, err := q.t.s.prov.DriverGrantBucketAccess(q.t.ctx, a.g.grantRequest(a.id))
	if code := status.Code(err); code == codes.OutOfRange || code == codes.InvalidArgument ||
		code == codes.ResourceExhausted {
		return code
	} else if err != nil {
		q.fail("DriverGrantBucketAccess %q: %v", a.id, err)
	}
	g := a.g
	id := a.id
	q.t.Cleanup(func() { _, _ = q.t.s.prov.DriverRevokeBucketAccess(q.t.ctx, g.revokeRequest(id)) })
	if !slices.Contains(q.accounts, a) {
		q.accounts = append(q.accounts, a)
	}
	if old := a.find(resp.GetCredentials()); old != nil && old.state == "dead" {
		q.fail("DriverGrantBucketAccess of account %q returned credential %s, revoked or retired before", a.id, old.name())
	}
	a.live, a.resp, q.recent = true, resp, a
	for _, b := range a.g.buckets {
		q.okModes[modesKey(b.GetAccessModes())] = b.GetAccessModes()
	}
	a.creds = append(a.creds, &seqCred{id: resp.GetCredentialId(), creds: resp.GetCredentials(), state: "live"})
	q.checkAccount(a, allCategories)
	q.checkOthers(a)
	return codes.OK
}

// grantAgain repeats an account's grant: it must answer OK with credentials that open what the
// grant allows.
func (q *seq) grantAgain() {
	accounts := q.liveAccounts()
	a := q.pick(accounts)
	q.note("grant account %q again, the same", a.id)
	resp, err := q.t.s.prov.DriverGrantBucketAccess(q.t.ctx, a.g.grantRequest(a.id))
	if err != nil {
		q.fail("a repeated DriverGrantBucketAccess of account %q with the same request: %v", a.id, err)
	}
	a.resp = resp
	if c := a.find(resp.GetCredentials()); c != nil {
		if c.state == "dead" {
			q.fail("a repeated DriverGrantBucketAccess of account %q returned a credential revoked or retired before",
				a.id)
		}
		c.state = "live"
	} else {
		for _, c := range a.creds {
			if c.state == "live" {
				c.state = "unknown" // a new key: the driver may keep the old ones or not
			}
		}
		a.creds = append(a.creds, &seqCred{id: resp.GetCredentialId(), creds: resp.GetCredentials(), state: "live"})
	}
	q.checkAccount(a, allCategories)
}

// grantOther repeats an account's grant with another grant, in each way that applies: other
// parameters (Config.IncompatibleAccessParameters), its buckets' modes swapped, other modes on one
// bucket. Each must be refused with AlreadyExists (or InvalidArgument, for modes the driver
// never granted), and the old grant stay as it was.
func (q *seq) grantOther() {
	accounts := q.liveAccounts()
	a := q.pick(accounts)
	clone := func() grant {
		other := a.g
		other.buckets = nil
		for _, b := range a.g.buckets {
			other.buckets = append(other.buckets,
				&cosiproto.AccessedBucket{BucketId: b.GetBucketId(), AccessModes: b.GetAccessModes()})
		}
		return other
	}
	if incompatible := q.t.s.cfg.IncompatibleAccessParameters; incompatible != nil {
		other := clone()
		other.params = incompatible
		q.note("grant account %q again with other parameters", a.id)
		q.grantRefused(a, other)
	}
	if b := a.g.buckets; len(b) == 2 && modesKey(b[0].GetAccessModes()) != modesKey(b[1].GetAccessModes()) {
		other := clone()
		b0, b1 := other.buckets[0], other.buckets[1]
		b0.AccessModes, b1.AccessModes = b1.GetAccessModes(), b0.GetAccessModes()
		q.note("grant account %q again with its buckets' modes swapped", a.id)
		q.grantRefused(a, other)
	}
	// Other modes the driver granted before, else object data changed.
	other := clone()
	b := other.buckets[q.rnd.IntN(len(other.buckets))]
	var m *cosiproto.AccessModes
	for _, k := range slices.Sorted(maps.Keys(q.okModes)) {
		if k != modesKey(b.GetAccessModes()) && (m == nil || q.rnd.IntN(2) == 0) {
			m = q.okModes[k]
		}
	}
	if m == nil {
		m = &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE,
			ObjectMetadata: b.GetAccessModes().GetObjectMetadata(), BucketMetadata: b.GetAccessModes().GetBucketMetadata()}
		if b.GetAccessModes().GetObjectData() == cosiproto.AccessMode_READ_WRITE {
			m.ObjectData = cosiproto.AccessMode_READ_ONLY
		}
	}
	b.AccessModes = m
	q.note("grant account %q again with modes %s on bucket %q", a.id, modesKey(m), b.GetBucketId())
	q.grantRefused(a, other)
}

// grantRefused sends the other grant for the account: it must be refused, and the account's
// credentials open what its grant allows.
func (q *seq) grantRefused(a *seqAccount, other grant) {
	_, err := q.t.s.prov.DriverGrantBucketAccess(q.t.ctx, other.grantRequest(a.id))
	// InvalidArgument is the answer for modes the driver never granted in this sequence: it may
	// not grant them at all.
	refusedModes := status.Code(err) == codes.InvalidArgument &&
		slices.ContainsFunc(other.buckets, func(b *cosiproto.AccessedBucket) bool {
			return q.okModes[modesKey(b.GetAccessModes())] == nil
		})
	if status.Code(err) != codes.AlreadyExists && !refusedModes {
		if err == nil {
			q.t.Cleanup(func() { _, _ = q.t.s.prov.DriverRevokeBucketAccess(q.t.ctx, other.revokeRequest(a.id)) })
		}
		q.fail("a repeated DriverGrantBucketAccess of account %q with another grant returned %v, want AlreadyExists",
			a.id, status.Code(err))
	}
	q.checkAccount(a, allCategories)
}

func (q *seq) rotate() {
	accounts := q.liveAccounts()
	a := q.pick(accounts)
	newest := a.creds[len(a.creds)-1]
	if newest.id == "" {
		q.noRotation = true // a driver that grants without a credential_id cannot rotate
		return
	}
	if newest.state != "live" {
		return
	}
	q.note("rotate credential %q of account %q", newest.id, a.id)
	req := &cosiproto.DriverRotateBucketAccessCredentialsRequest{
		AccountId: a.id, Buckets: a.g.buckets, Protocol: a.g.protocol, AuthenticationType: a.g.auth,
		Parameters: a.g.params, CredentialId: newest.id,
	}
	resp, err := q.t.s.prov.DriverRotateBucketAccessCredentials(q.t.ctx, req)
	switch status.Code(err) {
	case codes.Unimplemented:
		q.noRotation = true
		q.steps = q.steps[:len(q.steps)-1]
		return
	case codes.ResourceExhausted, codes.FailedPrecondition:
		// The account holds as many keys as the backend allows: a driver may refuse to rotate
		// until one is retired.
		q.note("(refused: %v; the account holds as many keys as the driver allows)", status.Code(err))
		return
	}
	if err != nil {
		q.fail("DriverRotateBucketAccessCredentials: %v", err)
	}
	if c := a.find(resp.GetCredentials()); c != nil {
		if c == newest {
			q.fail("DriverRotateBucketAccessCredentials returned the credential it rotated")
		}
		q.fail("DriverRotateBucketAccessCredentials returned a credential of the account from before")
	}
	// The key rotated from keeps working; older ones the driver may revoke (IAM allows two keys).
	for _, c := range a.creds {
		if c != newest && c.state == "live" {
			c.state = "unknown"
		}
	}
	a.creds = append(a.creds, &seqCred{id: resp.GetCredentialId(), creds: resp.GetCredentials(), state: "live"})
	q.checkAccount(a, allCategories)
	q.rotatedFrom = newest
	q.follow(slices.Contains(q.retirable(), a), q.retire)
	q.rotatedFrom = nil
}

// retirable returns the accounts with two live credentials with IDs, one of which may be
// retired.
func (q *seq) retirable() []*seqAccount {
	var out []*seqAccount
	for _, a := range q.liveAccounts() {
		n := 0
		for _, c := range a.creds {
			if c.state == "live" && c.id != "" {
				n++
			}
		}
		if n >= 2 {
			out = append(out, a)
		}
	}
	return out
}

func (q *seq) retire() {
	accounts := q.retirable()
	a := q.pick(accounts)
	var candidates []*seqCred
	for _, c := range a.creds {
		if c.state == "live" && c.id != "" {
			candidates = append(candidates, c)
		}
	}
	c := candidates[q.rnd.IntN(len(candidates))]
	if q.following && q.rotatedFrom != nil && slices.Contains(candidates, q.rotatedFrom) && q.rnd.IntN(2) == 0 {
		c = q.rotatedFrom // the sidecar's order: the key a rotation replaced, once Pods have the new one
	}
	which := "an older"
	if c == a.creds[len(a.creds)-1] {
		which = "the newest"
	}
	q.note("retire %s credential %q of account %q", which, c.id, a.id)
	req := &cosiproto.DriverRetireBucketAccessCredentialsRequest{
		AccountId: a.id, CredentialId: c.id, Protocol: a.g.protocol, Parameters: a.g.params,
	}
	_, err := q.t.s.prov.DriverRetireBucketAccessCredentials(q.t.ctx, req)
	if err != nil {
		q.fail("DriverRetireBucketAccessCredentials: %v", err)
	}
	c.state = "dead"
	q.checkAccount(a, allCategories)
	q.checkOthers(a)
	// A Secret lost after a rotation: the grant is repeated, and must answer with a live key.
	q.following = true
	q.grantAgain()
	q.following = false
}

func (q *seq) revoke() {
	accounts := q.liveAccounts()
	// Half the time an account whose name another live account's extends, if there is one.
	var shorter []*seqAccount
	for _, a := range accounts {
		if slices.ContainsFunc(accounts, func(o *seqAccount) bool { return o != a && strings.HasPrefix(o.name, a.name) }) {
			shorter = append(shorter, a)
		}
	}
	if len(shorter) > 0 && q.rnd.IntN(2) == 0 {
		accounts = shorter
	}
	a := q.pick(accounts)
	q.note("revoke account %q", a.id)
	if _, err := q.t.s.prov.DriverRevokeBucketAccess(q.t.ctx, a.g.revokeRequest(a.id)); err != nil {
		q.fail("DriverRevokeBucketAccess: %v", err)
	}
	a.live = false
	for _, c := range a.creds {
		c.state = "dead"
	}
	q.checkAccount(a, allCategories)
	q.checkOthers(a)
}

// regrantable returns the revoked accounts whose buckets all still live.
func (q *seq) regrantable() []*seqAccount {
	var out []*seqAccount
	for _, a := range q.accounts {
		gone := func(b *cosiproto.AccessedBucket) bool { return !q.isLive(b.GetBucketId()) }
		if !a.live && !slices.ContainsFunc(a.g.buckets, gone) {
			out = append(out, a)
		}
	}
	return out
}

// grantAfterRevoke grants a revoked account again, with the same grant or new random modes:
// neither the revoked key nor what the old grant allowed may come back.
func (q *seq) grantAfterRevoke() {
	accounts := q.regrantable()
	a := q.pick(accounts)
	if q.rnd.IntN(2) == 0 {
		if q.grant(a, "grant again, after its revocation,") == codes.OK {
			return
		}
		q.steps = q.steps[:len(q.steps)-1] // refused: a new grant instead
	}
	q.grantRandom(a)
}

// foreignCredential asks to rotate and to retire one account's key through another account:
// the rotation is NotFound (the account has no such key), the retirement OK or NotFound, and the
// key keeps working for the account it belongs to.
func (q *seq) foreignCredential() {
	accounts := q.liveAccounts()
	a := q.pick(accounts)
	// A key of another account whose credential_id this account's keys do not have: IDs may be
	// unique per account only (key-1, key-2).
	own := func(id string) bool { return slices.ContainsFunc(a.creds, func(c *seqCred) bool { return c.id == id }) }
	foreign := func(c *seqCred) bool { return c.state == "live" && c.id != "" && !own(c.id) }
	var owners []*seqAccount
	for _, o := range accounts {
		if o != a && slices.ContainsFunc(o.creds, foreign) {
			owners = append(owners, o)
		}
	}
	if len(owners) == 0 {
		return
	}
	o := owners[q.rnd.IntN(len(owners))]
	var c *seqCred
	for _, oc := range o.creds {
		if foreign(oc) {
			c = oc
		}
	}
	if !q.noRotation {
		q.note("rotate credential %q of account %q through account %q", c.id, o.id, a.id)
		rotate := &cosiproto.DriverRotateBucketAccessCredentialsRequest{
			AccountId: a.id, Buckets: a.g.buckets, Protocol: a.g.protocol, AuthenticationType: a.g.auth,
			Parameters: a.g.params, CredentialId: c.id,
		}
		_, err := q.t.s.prov.DriverRotateBucketAccessCredentials(q.t.ctx, rotate)
		if code := status.Code(err); code != codes.NotFound && code != codes.Unimplemented {
			q.fail("DriverRotateBucketAccessCredentials of account %q with a credential of account %q returned %v, "+
				"want NotFound: the account has no such credential", a.id, o.id, code)
		}
		q.note("retire credential %q of account %q through account %q", c.id, o.id, a.id)
		retire := &cosiproto.DriverRetireBucketAccessCredentialsRequest{
			AccountId: a.id, CredentialId: c.id, Protocol: a.g.protocol, Parameters: a.g.params,
		}
		_, err = q.t.s.prov.DriverRetireBucketAccessCredentials(q.t.ctx, retire)
		if code := status.Code(err); code != codes.OK && code != codes.NotFound && code != codes.Unimplemented {
			q.fail("DriverRetireBucketAccessCredentials of account %q with a credential of account %q returned %v, "+
				"want OK or NotFound", a.id, o.id, code)
		}
	}
	q.checkAccount(o, objectDataOnly)
	q.checkAccount(a, objectDataOnly)
}

// deletable returns the live buckets no live grant names.
func (q *seq) deletable() []*seqBucket {
	var out []*seqBucket
	for _, b := range q.liveBuckets() {
		if !slices.ContainsFunc(q.liveAccounts(), func(a *seqAccount) bool { return a.names(b.id) }) {
			out = append(out, b)
		}
	}
	return out
}

func (q *seq) deleteBucket() {
	buckets := q.deletable()
	q.delete(buckets[q.rnd.IntN(len(buckets))])
	for _, a := range q.liveAccounts() {
		q.checkAccount(a, objectDataOnly)
	}
}

// lookup imports a live bucket by its ID (DriverGetBucket), and looks up names next to it that
// are no bucket: NotFound.
func (q *seq) lookup() {
	buckets := q.liveBuckets()
	b := buckets[q.rnd.IntN(len(buckets))]
	q.note("look up bucket %q", b.id)
	req := &cosiproto.DriverGetBucketRequest{BucketId: b.id, Protocols: []cosiproto.ObjectProtocol_Type{q.protocol},
		Parameters: q.t.s.cfg.BucketParameters}
	if _, err := q.t.s.prov.DriverGetBucket(q.t.ctx, req); err != nil {
		q.fail("DriverGetBucket of live bucket %q: %v", b.id, err)
	}
	for _, id := range []string{b.id[:len(b.id)-1], b.id + "1", b.id + "-x"} {
		if len(id) < 3 || slices.ContainsFunc(q.buckets, func(o *seqBucket) bool { return o.id == id && o.live }) {
			continue
		}
		q.t.s.red.addOpen(id)
		req.BucketId = id
		if _, err := q.t.s.prov.DriverGetBucket(q.t.ctx, req); status.Code(err) != codes.NotFound {
			q.fail("DriverGetBucket of %q, which is no bucket (bucket %q is), returned %v, want NotFound",
				id, b.id, status.Code(err))
		}
	}
}

// finish revokes every live account and deletes every live bucket, and checks that nothing the
// sequence made opens anything or is left.
func (q *seq) finish() {
	for _, a := range q.liveAccounts() {
		q.note("revoke account %q", a.id)
		if _, err := q.t.s.prov.DriverRevokeBucketAccess(q.t.ctx, a.g.revokeRequest(a.id)); err != nil {
			q.fail("DriverRevokeBucketAccess: %v", err)
		}
		a.live = false
		for _, c := range a.creds {
			c.state = "dead"
		}
	}
	for _, a := range q.accounts {
		q.checkAccount(a, objectDataOnly)
	}
	for _, b := range q.liveBuckets() {
		q.delete(b)
	}
}

// delete deletes the bucket (emptied through the probe if the driver refuses it for holding
// objects), and checks that it is gone and every other live bucket is not.
func (q *seq) delete(b *seqBucket) {
	q.note("delete bucket %q", b.id)
	if err := q.t.s.deleteBucket(q.t.ctx, b.id); err != nil {
		q.fail("%v", err)
	}
	b.live = false
	if q.exists(b.id, false) {
		q.fail("bucket %q is still in the backend after DriverDeleteBucket returned OK", b.id)
	}
	q.checkBuckets()
}

var (
	allCategories  = []Category{ObjectData, ObjectMetadata, BucketMetadata}
	objectDataOnly = []Category{ObjectData}
)

// checkAccount checks each credential of the account: a live one opens exactly its grant's
// buckets and modes (of the categories given); a dead one opens nothing and authenticates as
// nobody.
func (q *seq) checkAccount(a *seqAccount, categories []Category) {
	for _, c := range a.creds {
		switch c.state {
		case "dead":
			if who, ok := q.accountOf(c, ""); ok && who != "" {
				q.fail("credential %s of account %q (revoked or retired) still authenticates as backend account %q",
					c.name(), a.id, who)
			}
			for _, b := range q.liveBuckets() {
				for _, write := range []bool{false, true} {
					if q.allowed(a, c, b.id, ObjectData, write, false) {
						q.fail("credential %s of account %q (revoked or retired) can still %s objects of bucket %q",
							c.name(), a.id, rw(write), b.id)
					}
				}
			}
		case "live":
			if who, ok := q.accountOf(c, anyAccount); ok && who == "" {
				q.fail("credential %s of live account %q authenticates as nobody", c.name(), a.id)
			}
			for _, b := range q.liveBuckets() {
				modes := a.modes(b.id)
				for _, cat := range categories {
					if modes == nil && cat != ObjectData {
						continue
					}
					mode := [...]cosiproto.AccessMode_Mode{modes.GetObjectData(), modes.GetObjectMetadata(),
						modes.GetBucketMetadata()}[cat]
					if modes != nil && mode == cosiproto.AccessMode_UNSPECIFIED {
						continue // unspecified: the suite's blind spot
					}
					for _, write := range []bool{false, true} {
						want := modes != nil && (mode == cosiproto.AccessMode_READ_WRITE ||
							mode == cosiproto.AccessMode_READ_ONLY && !write || mode == cosiproto.AccessMode_WRITE_ONLY && write)
						if got := q.allowed(a, c, b.id, cat, write, want); got != want {
							whose := ""
							if modes == nil {
								whose = ": it was never granted it"
							}
							q.fail("credential %s of account %q (granted %s) %s %s %v of bucket %q%s", c.name(), a.id,
								a.describe(), map[bool]string{true: "can", false: "cannot"}[got], rw(write), cat, b.id, whose)
						}
					}
				}
			}
		}
	}
}

// checkOthers checks that every other live account still opens what it was granted.
func (q *seq) checkOthers(except *seqAccount) {
	for _, a := range q.liveAccounts() {
		if a != except {
			q.checkAccount(a, objectDataOnly)
		}
	}
}

// checkBuckets checks that every live bucket is still in the backend.
func (q *seq) checkBuckets() {
	for _, b := range q.liveBuckets() {
		if !q.exists(b.id, true) {
			q.fail("bucket %q is gone from the backend; it was never deleted through the driver", b.id)
		}
	}
}

func (q *seq) isLive(id string) bool {
	return slices.ContainsFunc(q.buckets, func(b *seqBucket) bool { return b.id == id && b.live })
}

// allowed asks the probe, if there is one, within the settle window for want; without
// Probe.Allowed it answers want.
func (q *seq) allowed(a *seqAccount, c *seqCred, bucketID string, cat Category, write, want bool) bool {
	p := q.t.s.cfg.Probe
	if p.Allowed == nil {
		return want
	}
	info := bucketInfoFor(a.resp, bucketID)
	if info == nil {
		info = q.infoOf(bucketID)
	}
	check := AccessCheck{Protocol: q.protocol, Credentials: c.creds, BucketID: bucketID, BucketInfo: info,
		Category: cat, Write: write}
	got, err := q.t.s.settleBool(q.t.ctx, func(ctx context.Context) (bool, error) { return p.Allowed(ctx, check) }, want)
	if err != nil {
		q.fail("probe: %v %s of bucket %q: %v", cat, rw(write), bucketID, err)
	}
	return got
}

// infoOf returns bucket info for a bucket some grant of the sequence returned it for: a check
// of a credential on a bucket outside its grant needs the bucket's address.
func (q *seq) infoOf(bucketID string) *cosiproto.ProtocolBucketInfo {
	for _, a := range q.accounts {
		if info := bucketInfoFor(a.resp, bucketID); info != nil {
			return info
		}
	}
	// No grant named it yet: the address of another bucket of the driver, with this one's name.
	for _, a := range q.accounts {
		for _, b := range a.resp.GetBuckets() {
			return withName(b.GetBucketInfo(), bucketID)
		}
	}
	return nil
}

// withName is info with the bucket name replaced, for a bucket of the same driver named by its
// bucket_id.
func withName(info *cosiproto.ProtocolBucketInfo, name string) *cosiproto.ProtocolBucketInfo {
	out := &cosiproto.ProtocolBucketInfo{}
	if s3 := info.GetS3(); s3 != nil {
		out.S3 = &cosiproto.S3BucketInfo{BucketName: name, Endpoint: s3.GetEndpoint(), Region: s3.GetRegion(),
			AddressingStyle: s3.GetAddressingStyle()}
	}
	if az := info.GetAzure(); az != nil {
		out.Azure = &cosiproto.AzureBucketInfo{StorageAccount: az.GetStorageAccount()}
	}
	if g := info.GetGcs(); g != nil {
		out.Gcs = &cosiproto.GcsBucketInfo{ProjectId: g.GetProjectId(), BucketName: name}
	}
	return out
}

// accountOf asks the probe, if it has AccountOf, which account the credential authenticates
// as, within the settle window for want (anyAccount: any account).
func (q *seq) accountOf(c *seqCred, want string) (string, bool) {
	p := q.t.s.cfg.Probe
	if p.AccountOf == nil {
		return "", false
	}
	who, err := q.t.s.settleString(q.t.ctx, func(ctx context.Context) (string, error) { return p.AccountOf(ctx, c.creds) },
		want)
	if err != nil {
		q.fail("probe: which account credential %s authenticates as: %v", c.name(), err)
	}
	return who, true
}

// exists asks the probe, if it has BucketExists, within the settle window for want.
func (q *seq) exists(id string, want bool) bool {
	p := q.t.s.cfg.Probe
	if p.BucketExists == nil {
		return want
	}
	got, err := q.t.s.settleBool(q.t.ctx, func(ctx context.Context) (bool, error) { return p.BucketExists(ctx, id) }, want)
	if err != nil {
		q.fail("probe: does bucket %q exist: %v", id, err)
	}
	return got
}

func (a *seqAccount) find(creds *cosiproto.CredentialInfo) *seqCred {
	for _, c := range a.creds {
		if sameCreds(c.creds, creds) {
			return c
		}
	}
	return nil
}

func (a *seqAccount) liveCreds() []*seqCred {
	return slices.DeleteFunc(slices.Clone(a.creds), func(c *seqCred) bool { return c.state != "live" })
}

func (a *seqAccount) names(bucketID string) bool { return a.modes(bucketID) != nil }

func (a *seqAccount) modes(bucketID string) *cosiproto.AccessModes {
	for _, b := range a.g.buckets {
		if b.GetBucketId() == bucketID {
			return b.GetAccessModes()
		}
	}
	return nil
}

func (a *seqAccount) describe() string {
	var parts []string
	for _, b := range a.g.buckets {
		m := b.GetAccessModes()
		parts = append(parts, fmt.Sprintf("%q object data %v, object metadata %v, bucket metadata %v",
			b.GetBucketId(), m.GetObjectData(), m.GetObjectMetadata(), m.GetBucketMetadata()))
	}
	return strings.Join(parts, "; ")
}

func (a *seqAccount) describeGrant() string { return "(" + a.describe() + ")" }

func (c *seqCred) name() string {
	if c.id != "" {
		return fmt.Sprintf("%q", c.id)
	}
	return "(no credential_id)"
}

// sameCreds reports whether two credentials are the same key.
func sameCreds(a, b *cosiproto.CredentialInfo) bool {
	sa, sb := a.GetS3(), b.GetS3()
	za, zb := a.GetAzure(), b.GetAzure()
	ga, gb := a.GetGcs(), b.GetGcs()
	return sa.GetAccessKeyId() == sb.GetAccessKeyId() && sa.GetAccessSecretKey() == sb.GetAccessSecretKey() &&
		za.GetAccessToken() == zb.GetAccessToken() && ga.GetHmacAccessId() == gb.GetHmacAccessId() &&
		ga.GetHmacSecret() == gb.GetHmacSecret() && ga.GetPrivateKey() == gb.GetPrivateKey()
}
