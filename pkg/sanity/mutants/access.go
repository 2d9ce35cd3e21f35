package mutants

import (
	"context"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"

	"github.com/kube-cosi/cosi/pkg/driver/memory"
	"github.com/kube-cosi/cosi/pkg/sanity"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

func accessMutants() []Mutant {
	return []Mutant{
		{
			Name: "generate-access-creates-account", MustCatch: true,
			Bug:  "DriverGenerateBucketAccessId creates the account (phase 1 touches the backend)",
			Case: caseGenAccNothing, Says: "accounts after phase 1",
			New: plain(func(d *memory.Driver) Server { return eagerGenerateAccess{d} }),
		},
		{
			Name: "generate-access-random-id", MustCatch: true,
			Bug:  "DriverGenerateBucketAccessId appends a random suffix, so a retry gets another ID",
			Case: caseGenAccIdempotent, Says: "want the same non-empty ID",
			New: plain(func(d *memory.Driver) Server { return randomAccountID{d} }),
		},
		{
			Name: "access-ignores-existing-account", MustCatch: true,
			Bug: "neither phase checks an existing account: phase 1 returns its ID and phase 2 its key, " +
				"whatever the modes",
			Case: caseGenAccOtherModes, Says: "then DriverGrantBucketAccess: returned OK",
			New: plain(func(d *memory.Driver) Server {
				return &generateAccessIgnoresExisting{repeatReturnsOld{Driver: d}}
			}),
		},
		{
			Name: "grant-repeat-returns-old-account", MustCatch: true,
			Bug:  "a repeat grant with other modes returns the existing account's key instead of AlreadyExists",
			Case: caseGrantOtherModes, Says: "returned OK",
			New: plain(func(d *memory.Driver) Server { return &repeatReturnsOld{Driver: d} }),
		},
		{
			Name: "grant-repeat-ignores-parameters", MustCatch: true,
			Bug: "a repeated DriverGrantBucketAccess with other access parameters returns the existing account, " +
				"as if the request were the same (the parameters are not compared)",
			Case: caseGrantOtherParams, Says: "returned OK",
			New: plain(func(d *memory.Driver) Server { return &repeatIgnoresParameters{Driver: d} }),
		},
		{
			Name: "grant-new-account-per-call", MustCatch: true,
			Bug:  "every DriverGrantBucketAccess creates a new backend user (random user names)",
			Case: caseGrantOneAccount, Says: "want exactly one more",
			New: plain(func(d *memory.Driver) Server { return &newAccountPerCall{Driver: d} }),
		},
		{
			Name: "grant-repeat-breaks-old-key", MustCatch: true,
			Bug:  "a repeat grant replaces the account's key, so the key a retried call returned first stops working",
			Case: caseGrantIdempotent, Says: "must not break earlier credentials",
			New: plain(func(d *memory.Driver) Server { return rotateOnRepeat{d} }),
		},
		{
			Name: "grant-repeat-omits-secret", MustCatch: true,
			Bug:  "a repeat grant returns the key ID without the secret (the backend shows a secret only once)",
			Case: caseGrantIdempotent, Says: "do not work",
			New: plain(func(d *memory.Driver) Server { return &secretOnce{Driver: d} }),
		},
		{
			Name: "grant-bucket-info-without-region", MustCatch: true,
			Bug:  "DriverGrantBucketAccess leaves the S3 region empty",
			Case: caseGrantComplete, Says: "region",
			New: plain(func(d *memory.Driver) Server { return noRegion{d} }),
		},
		{
			Name: "read-only-grants-writes", MustCatch: true,
			Bug:  "READ_ONLY object data is granted read-write",
			Case: caseGrantEnforces, Says: "object data READ_ONLY",
			New: plain(func(d *memory.Driver) Server {
				return modeMapper{d, func(m *cosiproto.AccessModes) {
					if m.GetObjectData() == cosiproto.AccessMode_READ_ONLY {
						m.ObjectData = cosiproto.AccessMode_READ_WRITE
					}
				}}
			}),
		},
		{
			Name: "write-only-grants-reads", MustCatch: true,
			Bug:  "WRITE_ONLY object data is granted read-write (the backend has no write-only policy)",
			Case: caseGrantEnforces, Says: "object data WRITE_ONLY",
			New: plain(func(d *memory.Driver) Server {
				return modeMapper{d, func(m *cosiproto.AccessModes) {
					if m.GetObjectData() == cosiproto.AccessMode_WRITE_ONLY {
						m.ObjectData = cosiproto.AccessMode_READ_WRITE
					}
				}}
			}),
		},
		{
			Name: "bucket-metadata-read-only-writes", MustCatch: true,
			Bug:  "READ_ONLY bucket metadata is granted read-write",
			Case: caseGrantEnforces, Says: "bucket metadata READ_ONLY",
			New: plain(func(d *memory.Driver) Server {
				return modeMapper{d, func(m *cosiproto.AccessModes) {
					if m.GetBucketMetadata() == cosiproto.AccessMode_READ_ONLY {
						m.BucketMetadata = cosiproto.AccessMode_READ_WRITE
					}
				}}
			}),
		},
		{
			Name: "metadata-modes-follow-object-data", MustCatch: true,
			Bug:  "the driver writes one policy from the object data mode and ignores the metadata modes",
			Case: caseGrantEnforces, Says: "object metadata",
			New: plain(func(d *memory.Driver) Server {
				return modeMapper{d, func(m *cosiproto.AccessModes) {
					m.ObjectMetadata, m.BucketMetadata = m.GetObjectData(), m.GetObjectData()
				}}
			}),
		},
		{
			Name: "unspecified-granted", MustCatch: false,
			Bug: "categories the request leaves UNSPECIFIED are granted read-write",
			Blind: "KEP-1979: an unspecified mode means the workload does not care whether the access is " +
				"allowed, so granting it breaks no rule; least privilege advises against it",
			New: plain(func(d *memory.Driver) Server {
				return modeMapper{d, func(m *cosiproto.AccessModes) {
					for _, f := range []*cosiproto.AccessMode_Mode{&m.ObjectData, &m.ObjectMetadata, &m.BucketMetadata} {
						if *f == cosiproto.AccessMode_UNSPECIFIED {
							*f = cosiproto.AccessMode_READ_WRITE
						}
					}
				}}
			}),
		},
		{
			Name: "multi-bucket-most-permissive", MustCatch: true,
			Bug:  "a multi-bucket grant gives every bucket the most permissive bucket's modes (one policy)",
			Case: caseGrantPerBucket, Says: "write allowed",
			New: plain(func(d *memory.Driver) Server { return bucketsMapper{d, mostPermissive} }),
		},
		{
			Name: "multi-bucket-first-modes", MustCatch: true,
			Bug:  "a multi-bucket grant applies the first bucket's modes to every bucket",
			Case: caseGrantPerBucket, Says: "bucket",
			New: plain(func(d *memory.Driver) Server { return bucketsMapper{d, firstModes} }),
		},
		{
			Name: "multi-bucket-first-only", MustCatch: true,
			Bug:  "a multi-bucket grant opens the first bucket only, but reports all of them",
			Case: caseGrantMulti, Says: "does not open bucket",
			New: plain(func(d *memory.Driver) Server { return &firstBucketOnly{Driver: d} }),
		},
		{
			Name: "multi-bucket-invalid-argument", MustCatch: true,
			Bug:  "a driver that cannot share a key refuses multi-bucket grants with InvalidArgument, not OutOfRange",
			Case: caseGrantMulti, Says: "want [OutOfRange]",
			New: plain(func(d *memory.Driver) Server { return wrongMultiBucketCode{d} }),
		},
		{
			Name: "grant-missing-bucket", MustCatch: true,
			Bug:  "DriverGrantBucketAccess grants access to a bucket that does not exist",
			Case: caseGrantMissingBucket, Says: "returned OK",
			New: plain(func(d *memory.Driver) Server { return grantMissing{d} }),
		},
		{
			Name: "service-account-served-as-key", MustCatch: true,
			Bug:  "a ServiceAccount grant is served as a key grant: the driver returns a key",
			Case: caseGrantSANoKey, Says: "returned credentials",
			New: plain(func(d *memory.Driver) Server { return saAsKey{d} }),
		},
		{
			Name: "service-account-not-mapped", MustCatch: true,
			Bug:  "a ServiceAccount grant returns OK but maps no backend identity to the ServiceAccount",
			Case: caseGrantSANoKey, Says: "cannot write object data",
			New: plain(func(d *memory.Driver) Server { return saUnmapped{d} }),
		},
		{
			Name: "service-account-any-namespace", MustCatch: true,
			Bug:  "a ServiceAccount grant maps the ServiceAccount's name in every namespace (no namespace in the trust)",
			Case: caseGrantSAOnly, Says: "the same name in another namespace",
			New: saAnyNamespace,
		},
		{
			Name: "revoke-keeps-service-account", MustCatch: true,
			Bug:  "DriverRevokeBucketAccess revokes key accesses, but returns OK for a ServiceAccount access it keeps",
			Case: caseRevokeSA, Says: "still allowed after",
			New: plain(func(d *memory.Driver) Server { return revokeKeysOnly{d} }),
		},
		{
			Name: "service-account-unimplemented", MustCatch: true,
			Bug:  "a backend without ServiceAccount support answers Unimplemented instead of InvalidArgument",
			Case: caseGrantSA, Says: "returned Unimplemented",
			Memory: func(c *memory.Config) { c.NoServiceAccountAuth = true },
			New:    plain(func(d *memory.Driver) Server { return saUnimplemented{d} }),
		},
		{
			Name: "grant-ignores-protocol", MustCatch: true,
			Bug:  "the driver ignores the requested protocol and hands out S3 keys for any",
			Case: caseGrantProtocol, Says: "returned OK",
			New: plain(func(d *memory.Driver) Server { return alwaysS3{d} }),
		},
		{
			Name: "access-defaults-invalid-values", MustCatch: true,
			Bug:  "an unparsable sasExpiry is ignored instead of refused",
			Case: caseGrantInvalid, Says: "returned OK",
			New: plain(func(d *memory.Driver) Server {
				return accessParams{d, func(p map[string]string) map[string]string {
					if _, ok := p[memory.ParamSASExpiry]; ok {
						p[memory.ParamSASExpiry] = "1h"
					}
					return p
				}}
			}),
		},
		{
			Name: "ignores-unknown-access-keys", MustCatch: true,
			Bug:  "the driver ignores access parameter keys it does not know",
			Case: caseGrantUnknownKey, Says: "returned OK",
			New: plain(func(d *memory.Driver) Server {
				return accessParams{d, func(p map[string]string) map[string]string { return onlyKeys(p, knownAccessKeys) }}
			}),
		},
		{
			Name: "revoke-does-nothing", MustCatch: true,
			Bug:  "DriverRevokeBucketAccess returns OK and keeps the account and its key",
			Case: caseRevokeWorks, Says: "still work",
			New: plain(func(d *memory.Driver) Server { return revokeNoop{d} }),
		},
		{
			Name: "revoke-keeps-account", MustCatch: true,
			Bug:  "DriverRevokeBucketAccess deletes the key but leaves the backend account",
			Case: caseRevokeNothingLeft, Says: "still exists",
			New: revokeOverlay(func(sanity.Category) bool { return true }, true),
		},
		{
			Name: "revoke-object-data-only", MustCatch: true,
			Bug:  "DriverRevokeBucketAccess removes object data access, but object and bucket metadata access keep working",
			Case: caseRevokeNothingLeft, Says: "metadata",
			New: revokeOverlay(func(c sanity.Category) bool { return c == sanity.ObjectData }, false),
		},
		{
			Name: "revoke-missing-not-found", MustCatch: true,
			Bug:  "DriverRevokeBucketAccess returns NotFound for an account that is already gone",
			Case: caseRevokeUnknown, Says: "unexpected error NotFound",
			New: plain(func(d *memory.Driver) Server { return revokeNotFound{d} }),
		},
	}
}

type eagerGenerateAccess struct{ *memory.Driver }

func (d eagerGenerateAccess) DriverGenerateBucketAccessId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketAccessIdRequest,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	resp, err := d.Driver.DriverGenerateBucketAccessId(ctx, req)
	if err == nil {
		_, err = d.Driver.DriverGrantBucketAccess(ctx, &cosiproto.DriverGrantBucketAccessRequest{
			AccountId: resp.GetAccountId(), Buckets: req.GetBuckets(), Protocol: req.GetProtocol(),
			AuthenticationType: req.GetAuthenticationType(), ServiceAccount: req.GetServiceAccount(),
			Parameters: req.GetParameters(),
		})
	}
	return resp, err
}

type randomAccountID struct{ *memory.Driver }

func (d randomAccountID) DriverGenerateBucketAccessId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketAccessIdRequest,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	resp, err := d.Driver.DriverGenerateBucketAccessId(ctx, req)
	if err != nil {
		return nil, err
	}
	return &cosiproto.DriverGenerateBucketAccessIdResponse{AccountId: resp.GetAccountId() + "-" + randomSuffix()}, nil
}

type generateAccessIgnoresExisting struct{ repeatReturnsOld }

func (d *generateAccessIgnoresExisting) DriverGenerateBucketAccessId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketAccessIdRequest,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	resp, err := d.Driver.DriverGenerateBucketAccessId(ctx, req)
	if isCode(err, codes.AlreadyExists) {
		return &cosiproto.DriverGenerateBucketAccessIdResponse{AccountId: req.GetAccountName()}, nil
	}
	return resp, err
}

// repeatReturnsOld finds the account by ID and returns it, whatever the request asks.
type repeatReturnsOld struct {
	*memory.Driver
	cache requestCache
}

func (d *repeatReturnsOld) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	if first, _ := d.cache.get(req.GetAccountId()); first != nil && d.Backend().AccountBuckets(req.GetAccountId()) != nil {
		req = first
	}
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, req)
	if err == nil {
		d.cache.remember(req, resp.GetCredentials())
	}
	return resp, err
}

// newAccountPerCall creates a backend user with a random name on every call and remembers them
// all for revocation.
type newAccountPerCall struct {
	*memory.Driver
	mu    sync.Mutex
	users map[string][]string
}

func (d *newAccountPerCall) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	user := req.GetAccountId() + "-" + randomSuffix()
	r := clone(req) // a shallow copy of the request with another account ID
	r.AccountId = user
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, r)
	if err == nil {
		d.mu.Lock()
		if d.users == nil {
			d.users = map[string][]string{}
		}
		d.users[req.GetAccountId()] = append(d.users[req.GetAccountId()], user)
		d.mu.Unlock()
	}
	return resp, err
}

func (d *newAccountPerCall) DriverRevokeBucketAccess(
	ctx context.Context, req *cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	d.mu.Lock()
	users := d.users[req.GetAccountId()]
	delete(d.users, req.GetAccountId())
	d.mu.Unlock()
	for _, u := range users {
		r := clone(req) // a shallow copy of the request with another account ID
		r.AccountId = u
		if _, err := d.Driver.DriverRevokeBucketAccess(ctx, r); err != nil {
			return nil, err
		}
	}
	return &cosiproto.DriverRevokeBucketAccessResponse{}, nil
}

type rotateOnRepeat struct{ *memory.Driver }

func (d rotateOnRepeat) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	if d.Backend().AccountBuckets(req.GetAccountId()) != nil {
		if _, err := d.Driver.DriverRevokeBucketAccess(ctx, &cosiproto.DriverRevokeBucketAccessRequest{
			AccountId: req.GetAccountId(),
		}); err != nil {
			return nil, err
		}
	}
	return d.Driver.DriverGrantBucketAccess(ctx, req)
}

type secretOnce struct {
	*memory.Driver
	seen accountSet
}

func (d *secretOnce) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	repeat := d.seen.has(req.GetAccountId()) && d.Backend().AccountBuckets(req.GetAccountId()) != nil
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, req)
	if err != nil {
		return nil, err
	}
	d.seen.add(req.GetAccountId())
	if repeat {
		if s3 := resp.GetCredentials().GetS3(); s3 != nil {
			s3.AccessSecretKey = "-"
		}
		if az := resp.GetCredentials().GetAzure(); az != nil {
			az.AccessToken = "-"
		}
		if gcs := resp.GetCredentials().GetGcs(); gcs != nil {
			gcs.HmacSecret = "-"
		}
	}
	return resp, nil
}

type noRegion struct{ *memory.Driver }

func (d noRegion) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, req)
	for _, b := range resp.GetBuckets() {
		if s3 := b.GetBucketInfo().GetS3(); s3 != nil {
			s3.Region = ""
		}
	}
	return resp, err
}

// modeMapper changes each bucket's modes before granting (and before checking a repeat, so that
// the bug is consistent across retries).
type modeMapper struct {
	*memory.Driver
	mapModes func(*cosiproto.AccessModes)
}

func (d modeMapper) DriverGenerateBucketAccessId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketAccessIdRequest,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	r := clone(req) // a shallow copy with other buckets
	r.Buckets = cloneBuckets(req.GetBuckets())
	for _, b := range r.Buckets {
		d.mapModes(b.GetAccessModes())
	}
	return d.Driver.DriverGenerateBucketAccessId(ctx, r)
}

func (d modeMapper) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	r := clone(req) // a shallow copy with other buckets
	r.Buckets = cloneBuckets(req.GetBuckets())
	for _, b := range r.Buckets {
		d.mapModes(b.GetAccessModes())
	}
	return d.Driver.DriverGrantBucketAccess(ctx, r)
}

// bucketsMapper changes the modes of all buckets of a request together.
type bucketsMapper struct {
	*memory.Driver
	mapBuckets func([]*cosiproto.AccessedBucket)
}

func (d bucketsMapper) DriverGenerateBucketAccessId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketAccessIdRequest,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	r := clone(req) // a shallow copy with other buckets
	r.Buckets = cloneBuckets(req.GetBuckets())
	d.mapBuckets(r.Buckets)
	return d.Driver.DriverGenerateBucketAccessId(ctx, r)
}

func (d bucketsMapper) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	r := clone(req) // a shallow copy with other buckets
	r.Buckets = cloneBuckets(req.GetBuckets())
	d.mapBuckets(r.Buckets)
	return d.Driver.DriverGrantBucketAccess(ctx, r)
}

// permissiveness orders modes by what they allow.
func permissiveness(m cosiproto.AccessMode_Mode) int {
	return map[cosiproto.AccessMode_Mode]int{
		cosiproto.AccessMode_UNSPECIFIED: 0, cosiproto.AccessMode_READ_ONLY: 1,
		cosiproto.AccessMode_WRITE_ONLY: 1, cosiproto.AccessMode_READ_WRITE: 2,
	}[m]
}

func mostPermissive(buckets []*cosiproto.AccessedBucket) {
	most := &cosiproto.AccessModes{}
	for _, b := range buckets {
		m := b.GetAccessModes()
		for _, f := range []struct{ dst, src *cosiproto.AccessMode_Mode }{
			{&most.ObjectData, &m.ObjectData},
			{&most.ObjectMetadata, &m.ObjectMetadata},
			{&most.BucketMetadata, &m.BucketMetadata},
		} {
			switch {
			case permissiveness(*f.src) > permissiveness(*f.dst):
				*f.dst = *f.src
			case permissiveness(*f.src) == 1 && *f.src != *f.dst && permissiveness(*f.dst) == 1:
				*f.dst = cosiproto.AccessMode_READ_WRITE // read-only here, write-only there
			}
		}
	}
	for _, b := range buckets {
		b.AccessModes = &cosiproto.AccessModes{
			ObjectData: most.GetObjectData(), ObjectMetadata: most.GetObjectMetadata(),
			BucketMetadata: most.GetBucketMetadata(),
		}
	}
}

func firstModes(buckets []*cosiproto.AccessedBucket) {
	for _, b := range buckets[1:] {
		m := buckets[0].GetAccessModes()
		b.AccessModes = &cosiproto.AccessModes{
			ObjectData: m.GetObjectData(), ObjectMetadata: m.GetObjectMetadata(), BucketMetadata: m.GetBucketMetadata(),
		}
	}
}

// firstBucketOnly attaches its policy to the first bucket and reports every bucket.
type firstBucketOnly struct{ *memory.Driver }

func (d *firstBucketOnly) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	r := clone(req) // a shallow copy with fewer buckets
	r.Buckets = req.GetBuckets()[:1]
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, r)
	if err != nil {
		return nil, err
	}
	for _, b := range req.GetBuckets()[1:] {
		info := resp.GetBuckets()[0].GetBucketInfo()
		resp.Buckets = append(resp.Buckets, &cosiproto.DriverGrantBucketAccessResponse_BucketInfo{
			BucketId: b.GetBucketId(), BucketInfo: withBucketName(info, b.GetBucketId()),
		})
	}
	return resp, nil
}

func withBucketName(info *cosiproto.ProtocolBucketInfo, name string) *cosiproto.ProtocolBucketInfo {
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

type wrongMultiBucketCode struct{ *memory.Driver }

func (d wrongMultiBucketCode) DriverGenerateBucketAccessId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketAccessIdRequest,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	if len(req.GetBuckets()) > 1 {
		return nil, errorf(codes.InvalidArgument, "one bucket at a time")
	}
	return d.Driver.DriverGenerateBucketAccessId(ctx, req)
}

func (d wrongMultiBucketCode) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	if len(req.GetBuckets()) > 1 {
		return nil, errorf(codes.InvalidArgument, "one bucket at a time")
	}
	return d.Driver.DriverGrantBucketAccess(ctx, req)
}

// grantMissing "ensures" every bucket it grants, creating the ones that do not exist.
type grantMissing struct{ *memory.Driver }

func (d grantMissing) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	for _, b := range req.GetBuckets() {
		if !d.Backend().BucketExists(b.GetBucketId()) {
			if _, err := d.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: b.GetBucketId()}); err != nil {
				return nil, err
			}
		}
	}
	return d.Driver.DriverGrantBucketAccess(ctx, req)
}

// saAsKey serves a ServiceAccount grant as a key grant.
type saAsKey struct{ *memory.Driver }

func (d saAsKey) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	r := clone(req) // a shallow copy with KEY authentication
	if r.AuthenticationType == cosiproto.AuthenticationType_SERVICE_ACCOUNT {
		r.AuthenticationType, r.ServiceAccount = cosiproto.AuthenticationType_KEY, nil
	}
	return d.Driver.DriverGrantBucketAccess(ctx, r)
}

// saUnmapped creates a key account for a ServiceAccount grant and returns no credentials: the
// ServiceAccount can do nothing.
type saUnmapped struct{ *memory.Driver }

func (d saUnmapped) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	if req.GetAuthenticationType() != cosiproto.AuthenticationType_SERVICE_ACCOUNT {
		return d.Driver.DriverGrantBucketAccess(ctx, req)
	}
	r := clone(req) // a shallow copy with KEY authentication
	r.AuthenticationType, r.ServiceAccount = cosiproto.AuthenticationType_KEY, nil
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, r)
	if err != nil {
		return nil, err
	}
	resp.Credentials = nil
	return resp, nil
}

// saAnyNamespace maps a ServiceAccount grant to the ServiceAccount's name in any namespace: the
// backend's view (the probe) lets a ServiceAccount of a granted name do what the granted one may.
func saAnyNamespace(d *memory.Driver, _ logr.Logger) Instance {
	var mu sync.Mutex
	granted := map[string][]string{} // ServiceAccount name -> granted namespaces
	return Instance{
		Server: saRecorder{d, func(sa *cosiproto.ServiceAccount) {
			mu.Lock()
			defer mu.Unlock()
			granted[sa.GetName()] = append(granted[sa.GetName()], sa.GetNamespace())
		}},
		Probe: func(base sanity.Probe) sanity.Probe {
			p := base
			p.Allowed = func(ctx context.Context, c sanity.AccessCheck) (bool, error) {
				if c.ServiceAccount == nil {
					return base.Allowed(ctx, c)
				}
				mu.Lock()
				namespaces := slices.Clone(granted[c.ServiceAccount.GetName()])
				mu.Unlock()
				for _, ns := range append([]string{c.ServiceAccount.GetNamespace()}, namespaces...) {
					as := c
					as.ServiceAccount = &cosiproto.ServiceAccount{Namespace: ns, Name: c.ServiceAccount.GetName()}
					if ok, err := base.Allowed(ctx, as); ok || err != nil {
						return ok, err
					}
				}
				return false, nil
			}
			return p
		},
	}
}

// saRecorder calls granted with the ServiceAccount of each ServiceAccount grant that succeeds.
type saRecorder struct {
	*memory.Driver
	granted func(*cosiproto.ServiceAccount)
}

func (d saRecorder) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, req)
	if err == nil && req.GetAuthenticationType() == cosiproto.AuthenticationType_SERVICE_ACCOUNT {
		d.granted(req.GetServiceAccount())
	}
	return resp, err
}

// revokeKeysOnly returns OK for a ServiceAccount access without revoking it.
type revokeKeysOnly struct{ *memory.Driver }

func (d revokeKeysOnly) DriverRevokeBucketAccess(
	ctx context.Context, req *cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	if req.GetAuthenticationType() == cosiproto.AuthenticationType_SERVICE_ACCOUNT {
		return &cosiproto.DriverRevokeBucketAccessResponse{}, nil
	}
	return d.Driver.DriverRevokeBucketAccess(ctx, req)
}

type saUnimplemented struct{ *memory.Driver }

func (d saUnimplemented) DriverGenerateBucketAccessId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketAccessIdRequest,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	resp, err := d.Driver.DriverGenerateBucketAccessId(ctx, req)
	if isCode(err, codes.InvalidArgument) && req.GetAuthenticationType() == cosiproto.AuthenticationType_SERVICE_ACCOUNT {
		return nil, errorf(codes.Unimplemented, "ServiceAccount authentication is not implemented")
	}
	return resp, err
}

func (d saUnimplemented) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, req)
	if isCode(err, codes.InvalidArgument) && req.GetAuthenticationType() == cosiproto.AuthenticationType_SERVICE_ACCOUNT {
		return nil, errorf(codes.Unimplemented, "ServiceAccount authentication is not implemented")
	}
	return resp, err
}

// alwaysS3 grants S3 access whatever protocol was requested.
type alwaysS3 struct{ *memory.Driver }

func (d alwaysS3) DriverGenerateBucketAccessId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketAccessIdRequest,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	r := clone(req) // a shallow copy with another protocol
	r.Protocol = cosiproto.ObjectProtocol_S3
	return d.Driver.DriverGenerateBucketAccessId(ctx, r)
}

func (d alwaysS3) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	r := clone(req) // a shallow copy with another protocol
	r.Protocol = cosiproto.ObjectProtocol_S3
	return d.Driver.DriverGrantBucketAccess(ctx, r)
}

// accessParams rewrites access parameters in both phases, as one shared validation function would.
type accessParams struct {
	*memory.Driver
	rewrite func(map[string]string) map[string]string
}

func (d accessParams) DriverGenerateBucketAccessId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketAccessIdRequest,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	r := clone(req) // a shallow copy with other parameters
	r.Parameters = d.rewrite(copyParams(req.GetParameters()))
	return d.Driver.DriverGenerateBucketAccessId(ctx, r)
}

func (d accessParams) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	r := clone(req) // a shallow copy with other parameters
	r.Parameters = d.rewrite(copyParams(req.GetParameters()))
	return d.Driver.DriverGrantBucketAccess(ctx, r)
}

type revokeNoop struct{ *memory.Driver }

func (revokeNoop) DriverRevokeBucketAccess(
	context.Context, *cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	return &cosiproto.DriverRevokeBucketAccessResponse{}, nil
}

type revokeNotFound struct{ *memory.Driver }

func (d revokeNotFound) DriverRevokeBucketAccess(
	ctx context.Context, req *cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	if d.Backend().AccountBuckets(req.GetAccountId()) == nil {
		return nil, errorf(codes.NotFound, "account %q does not exist", req.GetAccountId())
	}
	return d.Driver.DriverRevokeBucketAccess(ctx, req)
}

// revokeOverlay makes a mutant whose revoke removes only the access of the categories removed
// reports true for, and the key when keyDeleted; the backend account and the rest stay.
func revokeOverlay(removed func(sanity.Category) bool, keyDeleted bool) func(*memory.Driver, logr.Logger) Instance {
	return func(d *memory.Driver, _ logr.Logger) Instance {
		var revoked accountSet
		srv := partialRevoke{d, &revoked}
		return Instance{
			Server: srv,
			Probe: func(base sanity.Probe) sanity.Probe {
				p := base
				p.Allowed = func(ctx context.Context, c sanity.AccessCheck) (bool, error) {
					if c.Credentials != nil && revoked.has(d.Backend().AccountOf(c.Credentials)) && removed(c.Category) {
						return false, nil
					}
					return base.Allowed(ctx, c)
				}
				p.AccountOf = func(ctx context.Context, creds *cosiproto.CredentialInfo) (string, error) {
					if id := d.Backend().AccountOf(creds); keyDeleted && revoked.has(id) {
						return "", nil
					}
					return base.AccountOf(ctx, creds)
				}
				return p
			},
		}
	}
}

type partialRevoke struct {
	*memory.Driver
	revoked *accountSet
}

func (d partialRevoke) DriverRevokeBucketAccess(
	_ context.Context, req *cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	d.revoked.add(req.GetAccountId())
	return &cosiproto.DriverRevokeBucketAccessResponse{}, nil
}

// repeatIgnoresParameters compares a repeated grant with the account's first without its
// parameters.
type repeatIgnoresParameters struct {
	*memory.Driver
	cache requestCache
}

func (d *repeatIgnoresParameters) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	if first, _ := d.cache.get(req.GetAccountId()); first != nil && d.Backend().AccountBuckets(req.GetAccountId()) != nil {
		r := clone(req)
		r.Parameters = first.GetParameters() // the bug: the parameters are not compared
		req = r
	}
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, req)
	if err == nil {
		d.cache.remember(req, resp.GetCredentials())
	}
	return resp, err
}
