package mutants

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
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

// isolationMutants are bugs where one access reaches beyond itself: into other accesses to the
// same bucket, into buckets it was not granted, or into another bucket's info. Written by a helper
// who did not write the cases (issue 24), from the proto's and the KEP's RPC rules.
func isolationMutants() []Mutant {
	return []Mutant{
		{
			Name: "grant-overwrites-bucket-policy", MustCatch: true,
			Bug: "the driver keeps access in one policy per bucket and each grant replaces it (PutBucketPolicy " +
				"with its own statement only), so a second access to a bucket breaks the first one's key",
			Case: caseGrantOthersWork, Says: "after a second access to the same bucket was granted",
			New: policyOverwriteMutant,
		},
		{
			Name: "grant-opens-every-bucket", MustCatch: true,
			Bug: "the policy's resource is every bucket of the store (arn:aws:s3:::*), not the granted ones, " +
				"so a key opens buckets it was never granted",
			Case: caseGrantOutside, Says: "which the grant did not list",
			New: opensEveryBucketMutant,
		},
		{
			Name: "multi-bucket-info-of-first-bucket", MustCatch: true,
			Bug: "a multi-bucket grant lists each bucket_id with the first bucket's info (bucket_name computed " +
				"once before the loop), so a workload writes every bucket's data into the first",
			Case: caseGrantOwnInfo, Says: "bucket_name",
			New: plain(func(d *memory.Driver) Server { return firstBucketInfo{d} }),
		},
		{
			Name: "revoke-multi-bucket-first-only", MustCatch: true,
			Bug: "DriverRevokeBucketAccess detaches the first bucket's policy and returns inside the loop, so " +
				"a multi-bucket account keeps its key and its access to the other buckets",
			Case: caseRevokeEveryBucket, Says: "still allowed after DriverRevokeBucketAccess of the multi-bucket access",
			New: revokeFirstBucketMutant,
		},
		{
			Name: "account-per-bucket", MustCatch: true,
			Bug: "DriverGenerateBucketAccessId names the backend user after the first bucket (cosi-<bucket>), " +
				"not account_name, so every access to a bucket shares one account",
			Case: caseGenAccUnique, Says: "got the same account_id",
			New: plain(func(d *memory.Driver) Server { return accountPerBucket{d} }),
		},
		{
			Name: "user-per-request-content", MustCatch: true,
			Bug: "the driver names its backend user by a hash of the request (buckets, modes, parameters), so " +
				"two accesses with the same request share one key, and revoking one revokes both",
			Case: caseGrantOwnCreds, Says: "got the same credentials",
			New: plain(func(d *memory.Driver) Server { return &contentAddressedUser{Driver: d} }),
		},
	}
}

// pairSet is a set of (account, bucket) pairs, safe for concurrent use.
type pairSet struct {
	mu    sync.Mutex
	pairs map[[2]string]bool
}

func (s *pairSet) add(account, bucket string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pairs == nil {
		s.pairs = map[[2]string]bool{}
	}
	s.pairs[[2]string{account, bucket}] = true
}

func (s *pairSet) remove(account, bucket string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pairs, [2]string{account, bucket})
}

func (s *pairSet) has(account, bucket string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pairs[[2]string{account, bucket}]
}

// removeBucket removes every pair of the bucket.
func (s *pairSet) removeBucket(bucket string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range s.pairs {
		if p[1] == bucket {
			delete(s.pairs, p)
		}
	}
}

// policyOverwriteMutant: the bucket policy names only the account granted last. The probe shows
// the backend as that policy leaves it.
func policyOverwriteMutant(d *memory.Driver, _ logr.Logger) Instance {
	policy := &pairSet{} // (account, bucket) pairs the bucket policies name
	return Instance{
		Server: overwritePolicy{d, policy},
		Probe: func(base sanity.Probe) sanity.Probe {
			p := base
			p.Allowed = func(ctx context.Context, c sanity.AccessCheck) (bool, error) {
				if c.Credentials != nil {
					if id := d.Backend().AccountOf(c.Credentials); id != "" && !policy.has(id, c.BucketID) {
						return false, nil
					}
				}
				return base.Allowed(ctx, c)
			}
			return p
		},
	}
}

type overwritePolicy struct {
	*memory.Driver
	policy *pairSet
}

func (d overwritePolicy) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, req)
	if err == nil {
		for _, b := range req.GetBuckets() {
			d.policy.removeBucket(b.GetBucketId()) // the bug: PutBucketPolicy replaces the others' statements
			d.policy.add(req.GetAccountId(), b.GetBucketId())
		}
	}
	return resp, err
}

func (d overwritePolicy) DriverRevokeBucketAccess(
	ctx context.Context, req *cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	resp, err := d.Driver.DriverRevokeBucketAccess(ctx, req)
	if err == nil {
		for _, b := range req.GetBuckets() {
			d.policy.remove(req.GetAccountId(), b.GetBucketId())
		}
	}
	return resp, err
}

// opensEveryBucketMutant: the driver is the reference driver, but the policy it writes reaches
// every existing bucket with the modes of the account's first bucket. Only the probe shows it.
func opensEveryBucketMutant(d *memory.Driver, _ logr.Logger) Instance {
	return Instance{
		Server: d,
		Probe: func(base sanity.Probe) sanity.Probe {
			p := base
			p.Allowed = func(ctx context.Context, c sanity.AccessCheck) (bool, error) {
				ok, err := base.Allowed(ctx, c)
				if ok || err != nil || c.Credentials == nil {
					return ok, err
				}
				b := d.Backend()
				id := b.AccountOf(c.Credentials)
				granted := b.AccountBuckets(id)
				if id == "" || len(granted) == 0 || slices.Contains(granted, c.BucketID) || !b.BucketExists(c.BucketID) {
					return false, nil
				}
				c.BucketID = granted[0] // Resource "*": the statement written for the first bucket applies here
				return base.Allowed(ctx, c)
			}
			return p
		},
	}
}

// firstBucketInfo reports the first bucket's info for every bucket of a grant.
type firstBucketInfo struct{ *memory.Driver }

func (d firstBucketInfo) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, req)
	if err != nil {
		return nil, err
	}
	for _, b := range resp.GetBuckets()[1:] {
		b.BucketInfo = proto.Clone(resp.GetBuckets()[0].GetBucketInfo()).(*cosiproto.ProtocolBucketInfo) //nolint:forcetypeassert,lll // Clone keeps the type
	}
	return resp, nil
}

// revokeFirstBucketMutant: a multi-bucket revoke removes the first bucket's access only; the
// account, its key and the other buckets' access stay. A single-bucket revoke works.
func revokeFirstBucketMutant(d *memory.Driver, _ logr.Logger) Instance {
	detached := &pairSet{} // (account, bucket) pairs whose policy the revoke removed
	return Instance{
		Server: revokeFirstBucket{d, detached},
		Probe: func(base sanity.Probe) sanity.Probe {
			p := base
			p.Allowed = func(ctx context.Context, c sanity.AccessCheck) (bool, error) {
				if c.Credentials != nil && detached.has(d.Backend().AccountOf(c.Credentials), c.BucketID) {
					return false, nil
				}
				return base.Allowed(ctx, c)
			}
			return p
		},
	}
}

type revokeFirstBucket struct {
	*memory.Driver
	detached *pairSet
}

func (d revokeFirstBucket) DriverRevokeBucketAccess(
	ctx context.Context, req *cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	if len(req.GetBuckets()) <= 1 || d.Backend().AccountBuckets(req.GetAccountId()) == nil {
		return d.Driver.DriverRevokeBucketAccess(ctx, req)
	}
	// The bug: the loop over the buckets returns after the first one.
	d.detached.add(req.GetAccountId(), req.GetBuckets()[0].GetBucketId())
	return &cosiproto.DriverRevokeBucketAccessResponse{}, nil
}

// accountPerBucket names the account after the first bucket.
type accountPerBucket struct{ *memory.Driver }

func (d accountPerBucket) DriverGenerateBucketAccessId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketAccessIdRequest,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	r := clone(req) // a shallow copy with another account name
	r.AccountName = "cosi-" + req.GetBuckets()[0].GetBucketId()
	return d.Driver.DriverGenerateBucketAccessId(ctx, r)
}

// contentAddressedUser maps each account_id to a backend user named by a hash of the grant, and
// deletes that user on revoke, whoever else maps to it.
type contentAddressedUser struct {
	*memory.Driver
	mu    sync.Mutex
	users map[string]string // account_id -> backend user
}

func userFor(req *cosiproto.DriverGrantBucketAccessRequest) string {
	var parts []string
	for _, b := range req.GetBuckets() {
		m := b.GetAccessModes()
		parts = append(parts, fmt.Sprintf("%s=%v/%v/%v", b.GetBucketId(), m.GetObjectData(), m.GetObjectMetadata(),
			m.GetBucketMetadata()))
	}
	slices.Sort(parts)
	for _, k := range slices.Sorted(maps.Keys(req.GetParameters())) {
		parts = append(parts, k+"="+req.GetParameters()[k])
	}
	parts = append(parts, req.GetProtocol().String(), req.GetAuthenticationType().String(),
		req.GetServiceAccount().GetNamespace()+"/"+req.GetServiceAccount().GetName())
	sum := sha256.Sum256([]byte(strings.Join(parts, "\n")))
	return "u-" + hex.EncodeToString(sum[:8])
}

func (d *contentAddressedUser) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	user := userFor(req)
	d.mu.Lock()
	if d.users == nil {
		d.users = map[string]string{}
	}
	if have, ok := d.users[req.GetAccountId()]; ok && have != user {
		d.mu.Unlock()
		return nil, errorf(codes.AlreadyExists, "account %q exists with another grant", req.GetAccountId())
	}
	d.users[req.GetAccountId()] = user
	d.mu.Unlock()
	r := clone(req) // a shallow copy with the backend user as account
	r.AccountId = user
	return d.Driver.DriverGrantBucketAccess(ctx, r)
}

func (d *contentAddressedUser) DriverRevokeBucketAccess(
	ctx context.Context, req *cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	d.mu.Lock()
	user, ok := d.users[req.GetAccountId()]
	delete(d.users, req.GetAccountId())
	d.mu.Unlock()
	if !ok {
		return &cosiproto.DriverRevokeBucketAccessResponse{}, nil
	}
	r := clone(req) // a shallow copy with the backend user as account
	r.AccountId = user
	return d.Driver.DriverRevokeBucketAccess(ctx, r)
}
