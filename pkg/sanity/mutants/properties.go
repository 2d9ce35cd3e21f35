package mutants

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/kube-cosi/cosi/pkg/driver/memory"
	"github.com/kube-cosi/cosi/pkg/sanity"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Case names of the store properties and the generated sequences. A Case that ends in "/" is a
// prefix: any of the sequences may be the one that meets the bug.
const (
	caseSequences        = "Sequences/"
	caseStoreCredentials = sanity.StoreCredentialsProperty
	caseDeleteNonEmpty   = "DriverDeleteBucket/deletes a bucket holding objects with them, or refuses with " +
		"FailedPrecondition"
)

// propertyMutants are the bugs that no point case caught before the store properties and the
// generated sequences (issue 42's escapes, and an independent reviewer's): each needs names that
// extend one another, an order of operations, or a look at the whole store.
func propertyMutants() []Mutant {
	return []Mutant{
		{
			Name: "policy-prefix-wildcard", MustCatch: true,
			Bug: "a grant's policy names bucket* instead of bucket/*: the key opens every bucket whose name " +
				"extends the granted one",
			Case: caseSequences, Says: "never granted it",
			New: prefixWildcard,
		},
		{
			Name: "delete-by-prefix", MustCatch: true,
			Bug:  "DriverDeleteBucket of B deletes every bucket whose name starts with B (a prefix listing): B-logs too",
			Case: caseSequences, Says: "never deleted through the driver",
			New: plain(func(d *memory.Driver) Server { return deleteByPrefix{d} }),
		},
		{
			Name: "delete-non-empty-answers-ok", MustCatch: true,
			Bug:  "DriverDeleteBucket of a bucket holding objects swallows the store's BucketNotEmpty and answers OK",
			Case: caseDeleteNonEmpty, Says: "still in the backend",
			New: plain(func(d *memory.Driver) Server { return deleteNonEmptyOK{d} }),
		},
		{
			Name: "revoke-leaves-rotated-key", MustCatch: true,
			Bug: "DriverRevokeBucketAccess deletes only the key the grant issued: a key a rotation issued, and " +
				"its user, survive",
			Case: caseSequences, Says: "(revoked or retired)",
			New: revokeLeavesRotated,
		},
		{
			Name: "retire-oldest-key", MustCatch: true,
			Bug:  "DriverRetireBucketAccessCredentials deletes the account's oldest key, whatever credential_id says",
			Case: caseSequences, Says: "(revoked or retired)",
			New: plain(func(d *memory.Driver) Server { return retireOldest{d} }),
		},
		{
			Name: "get-bucket-by-prefix", MustCatch: true,
			Bug:  "DriverGetBucket finds a bucket by prefix listing: a missing B answers with B-logs",
			Case: caseSequences, Says: "is no bucket",
			New: plain(func(d *memory.Driver) Server { return getByPrefix{d} }),
		},
		{
			Name: "revoke-deletes-neighbours", MustCatch: true,
			Bug:  "DriverRevokeBucketAccess of account A deletes every account whose name starts with A",
			Case: caseSequences, Says: "of live account",
			New: plain(func(d *memory.Driver) Server { return revokeNeighbours{d} }),
		},
		{
			Name: "grant-repeat-cached", MustCatch: true,
			Bug: "a repeated DriverGrantBucketAccess answers from a cache of the first answer: after a rotation and " +
				"the old key's retirement it returns the retired key",
			Case: caseSequences, Says: "revoked or retired before",
			New: plain(func(d *memory.Driver) Server { return &grantCached{Driver: d, first: map[string]*grantAnswer{}} }),
		},
		{
			Name: "grant-missing-bucket-leaks-account", MustCatch: true,
			Bug: "DriverGrantBucketAccess creates the account before it looks for the buckets: NotFound, and the " +
				"account stays",
			Case: caseStoreCredentials, Says: "no live grant",
			New: grantLeaksAccount,
		},
		{
			Name: "grant-compares-mode-union", MustCatch: true,
			Bug: "a repeated grant compares the union of its modes, not each bucket's: modes swapped between two " +
				"buckets answer with the old account",
			Case: caseSequences, Says: "want AlreadyExists",
			New: plain(func(d *memory.Driver) Server {
				return &modeUnion{Driver: d, last: map[string]*cosiproto.DriverGrantBucketAccessRequest{}}
			}),
		},
		{
			Name: "grant-cached-across-revoke", MustCatch: true,
			Bug: "a grant answers from a cache of earlier answers for the same request that a revoke does not " +
				"clear: the account granted again after its revocation gets the revoked key",
			Case: caseSequences, Says: "revoked or retired before",
			New: plain(func(d *memory.Driver) Server {
				return &grantCachedAcrossRevoke{Driver: d, answers: map[string]*cosiproto.DriverGrantBucketAccessResponse{}}
			}),
		},
		{
			Name: "retire-foreign-credential", MustCatch: true,
			Bug: "DriverRetireBucketAccessCredentials looks the credential_id up among all keys, not the account's: " +
				"retiring another account's key through this one deletes it",
			Case: caseSequences, Says: "with a credential of account|of live account",
			New: plain(func(d *memory.Driver) Server { return retireForeign{d} }),
		},
	}
}

// grantCachedAcrossRevoke answers a grant request it answered before from its cache.
type grantCachedAcrossRevoke struct {
	*memory.Driver
	mu      sync.Mutex
	answers map[string]*cosiproto.DriverGrantBucketAccessResponse
}

func (d *grantCachedAcrossRevoke) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	key := req.String()
	d.mu.Lock()
	cached := d.answers[key]
	d.mu.Unlock()
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, req)
	if err != nil {
		return resp, err
	}
	if cached != nil {
		return cached, nil // the bug: the cache outlived the revocation of the key it holds
	}
	d.mu.Lock()
	d.answers[key] = resp
	d.mu.Unlock()
	return resp, nil
}

type retireForeign struct{ *memory.Driver }

func (d retireForeign) DriverRetireBucketAccessCredentials(
	ctx context.Context, req *cosiproto.DriverRetireBucketAccessCredentialsRequest,
) (*cosiproto.DriverRetireBucketAccessCredentialsResponse, error) {
	b := d.Backend()
	for _, a := range b.Accounts() {
		for _, k := range b.AccountKeys(a) {
			if a != req.GetAccountId() && b.CredentialID(k) == req.GetCredentialId() {
				r := clone(req)
				r.AccountId = a // the bug: the key is found, whoever holds it
				return d.Driver.DriverRetireBucketAccessCredentials(ctx, r)
			}
		}
	}
	return d.Driver.DriverRetireBucketAccessCredentials(ctx, req)
}

// prefixWildcard is the memory driver seen through a store whose policies match bucket*: a key
// opens what its grant allows on a granted bucket also on every bucket whose name extends it.
func prefixWildcard(d *memory.Driver, _ logr.Logger) Instance {
	return Instance{
		Server: d,
		Probe: func(base sanity.Probe) sanity.Probe {
			p := base
			p.Allowed = func(ctx context.Context, c sanity.AccessCheck) (bool, error) {
				ok, err := base.Allowed(ctx, c)
				if ok || err != nil || c.Credentials == nil || !d.Backend().BucketExists(c.BucketID) {
					return ok, err
				}
				for _, g := range d.Backend().AccountBuckets(d.Backend().AccountOf(c.Credentials)) {
					if g != c.BucketID && strings.HasPrefix(c.BucketID, g) {
						as := c
						as.BucketID = g
						return base.Allowed(ctx, as)
					}
				}
				return false, nil
			}
			return p
		},
	}
}

type deleteByPrefix struct{ *memory.Driver }

func (d deleteByPrefix) DriverDeleteBucket(
	ctx context.Context, req *cosiproto.DriverDeleteBucketRequest,
) (*cosiproto.DriverDeleteBucketResponse, error) {
	for _, b := range d.Backend().Buckets() {
		if b != req.GetBucketId() && strings.HasPrefix(b, req.GetBucketId()) {
			r := clone(req)
			r.BucketId = b
			if _, err := d.Driver.DriverDeleteBucket(ctx, r); err != nil {
				return nil, err
			}
		}
	}
	return d.Driver.DriverDeleteBucket(ctx, req)
}

type deleteNonEmptyOK struct{ *memory.Driver }

func (d deleteNonEmptyOK) DriverDeleteBucket(
	ctx context.Context, req *cosiproto.DriverDeleteBucketRequest,
) (*cosiproto.DriverDeleteBucketResponse, error) {
	if len(d.Backend().Objects(req.GetBucketId())) > 0 {
		return &cosiproto.DriverDeleteBucketResponse{}, nil // the bug: BucketNotEmpty swallowed
	}
	return d.Driver.DriverDeleteBucket(ctx, req)
}

// survivors are keys a rotation issued whose account a revoke left in the backend: each still
// opens its account's buckets.
type survivors struct {
	mu sync.Mutex
	// rotated are the keys rotations issued, by account; kept, those whose account was revoked,
	// with the buckets the account had.
	rotated map[string][]*cosiproto.CredentialInfo
	kept    []survivor
}

type survivor struct {
	account string
	creds   *cosiproto.CredentialInfo
	buckets []string
}

func (s *survivors) find(creds *cosiproto.CredentialInfo) *survivor {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.kept {
		if proto.Equal(s.kept[i].creds, creds) {
			return &s.kept[i]
		}
	}
	return nil
}

type revokeRotated struct {
	*memory.Driver
	s *survivors
}

func (d revokeRotated) DriverRotateBucketAccessCredentials(
	ctx context.Context, req *cosiproto.DriverRotateBucketAccessCredentialsRequest,
) (*cosiproto.DriverRotateBucketAccessCredentialsResponse, error) {
	resp, err := d.Driver.DriverRotateBucketAccessCredentials(ctx, req)
	if err == nil {
		d.s.mu.Lock()
		d.s.rotated[req.GetAccountId()] = append(d.s.rotated[req.GetAccountId()], resp.GetCredentials())
		d.s.mu.Unlock()
	}
	return resp, err
}

func (d revokeRotated) DriverRevokeBucketAccess(
	ctx context.Context, req *cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	buckets := d.Backend().AccountBuckets(req.GetAccountId())
	keys := d.Backend().AccountKeys(req.GetAccountId())
	resp, err := d.Driver.DriverRevokeBucketAccess(ctx, req)
	if err == nil {
		d.s.mu.Lock()
		for _, r := range d.s.rotated[req.GetAccountId()] {
			if slices.ContainsFunc(keys, func(k *cosiproto.CredentialInfo) bool { return proto.Equal(k, r) }) {
				d.s.kept = append(d.s.kept, survivor{req.GetAccountId(), r, buckets})
			}
		}
		delete(d.s.rotated, req.GetAccountId())
		d.s.mu.Unlock()
	}
	return resp, err
}

func revokeLeavesRotated(d *memory.Driver, _ logr.Logger) Instance {
	s := &survivors{rotated: map[string][]*cosiproto.CredentialInfo{}}
	return Instance{
		Server: revokeRotated{d, s},
		Probe: func(base sanity.Probe) sanity.Probe {
			p := base
			p.Allowed = func(ctx context.Context, c sanity.AccessCheck) (bool, error) {
				if k := s.find(c.Credentials); k != nil && c.Credentials != nil {
					return slices.Contains(k.buckets, c.BucketID) && d.Backend().BucketExists(c.BucketID), nil
				}
				return base.Allowed(ctx, c)
			}
			p.AccountOf = func(ctx context.Context, creds *cosiproto.CredentialInfo) (string, error) {
				if k := s.find(creds); k != nil {
					return k.account, nil
				}
				return base.AccountOf(ctx, creds)
			}
			p.Accounts = func(ctx context.Context) ([]string, error) {
				list, err := base.Accounts(ctx)
				s.mu.Lock()
				defer s.mu.Unlock()
				for _, k := range s.kept {
					if !slices.Contains(list, k.account) {
						list = append(list, k.account)
					}
				}
				return list, err
			}
			return p
		},
	}
}

type retireOldest struct{ *memory.Driver }

func (d retireOldest) DriverRetireBucketAccessCredentials(
	ctx context.Context, req *cosiproto.DriverRetireBucketAccessCredentialsRequest,
) (*cosiproto.DriverRetireBucketAccessCredentialsResponse, error) {
	if keys := d.Backend().AccountKeys(req.GetAccountId()); len(keys) > 1 {
		r := clone(req)
		r.CredentialId = d.Backend().CredentialID(keys[len(keys)-1]) // the bug: the oldest, whichever was asked
		req = r
	}
	return d.Driver.DriverRetireBucketAccessCredentials(ctx, req)
}

type getByPrefix struct{ *memory.Driver }

func (d getByPrefix) DriverGetBucket(
	ctx context.Context, req *cosiproto.DriverGetBucketRequest,
) (*cosiproto.DriverGetBucketResponse, error) {
	resp, err := d.Driver.DriverGetBucket(ctx, req)
	if !isCode(err, codes.NotFound) {
		return resp, err
	}
	for _, b := range d.Backend().Buckets() {
		if strings.HasPrefix(b, req.GetBucketId()) {
			r := clone(req)
			r.BucketId = b
			return d.Driver.DriverGetBucket(ctx, r)
		}
	}
	return resp, err
}

type revokeNeighbours struct{ *memory.Driver }

func (d revokeNeighbours) DriverRevokeBucketAccess(
	ctx context.Context, req *cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	for _, a := range d.Backend().Accounts() {
		if a != req.GetAccountId() && strings.HasPrefix(a, req.GetAccountId()) {
			r := clone(req)
			r.AccountId = a
			if _, err := d.Driver.DriverRevokeBucketAccess(ctx, r); err != nil {
				return nil, err
			}
		}
	}
	return d.Driver.DriverRevokeBucketAccess(ctx, req)
}

type grantAnswer struct {
	req  *cosiproto.DriverGrantBucketAccessRequest
	resp *cosiproto.DriverGrantBucketAccessResponse
}

// grantCached answers a repeated grant from the first answer while the account exists.
type grantCached struct {
	*memory.Driver
	mu    sync.Mutex
	first map[string]*grantAnswer
}

func (d *grantCached) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	d.mu.Lock()
	first := d.first[req.GetAccountId()]
	d.mu.Unlock()
	if first != nil && d.Backend().AccountBuckets(req.GetAccountId()) != nil &&
		proto.Equal(first.req, req) {
		return first.resp, nil
	}
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, req)
	if err == nil {
		d.mu.Lock()
		d.first[req.GetAccountId()] = &grantAnswer{req, resp}
		d.mu.Unlock()
	}
	return resp, err
}

// grantLeaksAccount creates a backend account (seen through the probe) for a grant it then
// refuses because a bucket is missing.
func grantLeaksAccount(d *memory.Driver, _ logr.Logger) Instance {
	var leaked accountSet
	return Instance{
		Server: leakOnMissing{d, &leaked},
		Probe: func(base sanity.Probe) sanity.Probe {
			p := base
			p.Accounts = func(ctx context.Context) ([]string, error) {
				list, err := base.Accounts(ctx)
				leaked.mu.Lock()
				defer leaked.mu.Unlock()
				for id := range leaked.ids {
					list = append(list, "leaked-"+id)
				}
				return list, err
			}
			return p
		},
	}
}

type leakOnMissing struct {
	*memory.Driver
	leaked *accountSet
}

func (d leakOnMissing) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, req)
	if isCode(err, codes.NotFound) {
		d.leaked.add(req.GetAccountId()) // the bug: the user was created before the buckets were looked up
	}
	return resp, err
}

// modeUnion compares a repeated grant with the account's last one by the set of buckets and the
// multiset of their modes.
type modeUnion struct {
	*memory.Driver
	mu   sync.Mutex
	last map[string]*cosiproto.DriverGrantBucketAccessRequest
}

func (d *modeUnion) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	d.mu.Lock()
	last := d.last[req.GetAccountId()]
	d.mu.Unlock()
	if last != nil && d.Backend().AccountBuckets(req.GetAccountId()) != nil && sameUnion(last, req) {
		req = last // the bug: the modes moved between buckets, and the union is the same
	}
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, req)
	if err == nil {
		d.mu.Lock()
		d.last[req.GetAccountId()] = req
		d.mu.Unlock()
	}
	return resp, err
}

func sameUnion(a, b *cosiproto.DriverGrantBucketAccessRequest) bool {
	ids := func(r *cosiproto.DriverGrantBucketAccessRequest) (buckets, modes []string) {
		for _, x := range r.GetBuckets() {
			m := x.GetAccessModes()
			buckets = append(buckets, x.GetBucketId())
			modes = append(modes, m.GetObjectData().String()+m.GetObjectMetadata().String()+m.GetBucketMetadata().String())
		}
		slices.Sort(buckets)
		slices.Sort(modes)
		return buckets, modes
	}
	ab, am := ids(a)
	bb, bm := ids(b)
	return slices.Equal(ab, bb) && slices.Equal(am, bm)
}
