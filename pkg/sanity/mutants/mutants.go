// Package mutants holds deliberately broken copies of the memory driver, each with one bug a
// driver vendor could realistically ship, to measure what cosi-sanity catches (mutation testing of
// the suite). pkg/sanity's TestMutants runs the whole suite, with a backend probe, against every
// mutant: a mutant marked MustCatch has to make its Case fail with a message containing Says.
//
// A mutant wraps the reference driver and, where the bug leaves something in the backend that the
// reference driver would not (an account without a key, a policy that outlived revocation), also
// changes the backend's view through the probe: the suite sees what a probe of a real object store
// would see.
//
// Rules that the SDK enforces before a driver's code runs (required fields, enum values, driver
// name, unknown RPCs) have no mutant: a driver built on pkg/driver cannot break them.
package mutants

import (
	"crypto/rand"
	"fmt"
	"maps"
	"sync"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kube-cosi/cosi/pkg/driver/memory"
	"github.com/kube-cosi/cosi/pkg/sanity"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Server is a driver: what a mutant serves.
type Server interface {
	cosiproto.IdentityServer
	cosiproto.ProvisionerServer
}

// Instance is one running mutant.
type Instance struct {
	// Server is the broken driver.
	Server Server
	// Probe, when set, changes the backend's view from base (the memory driver's own) to what the
	// bug left in the backend.
	Probe func(base sanity.Probe) sanity.Probe
	// QuietLog serves the driver with a logger at its default verbosity, which drops the SDK's
	// call and response lines: the log the guide's main produced before issue 24.
	QuietLog bool
}

// Mutant is one bug.
type Mutant struct {
	// Name is short and unique, e.g. "revoke-keeps-account".
	Name string
	// Bug says what the driver does wrong.
	Bug string
	// MustCatch marks bugs the suite has to catch with a probe. The others are documented blind
	// spots: Blind says why the suite cannot see them.
	MustCatch bool
	Blind     string
	// Case is the name of the case that must fail, and Says a part of its failure message. A Case
	// that ends in "/" names a group: any case of it may be the one that fails (the generated
	// sequences: which one meets the bug depends on the seed). Says may list alternatives,
	// separated by "|".
	Case, Says string
	// Memory adjusts the reference driver's configuration (e.g. a backend without ServiceAccount
	// support), when the bug only shows on such a backend.
	Memory func(*memory.Config)
	// New wraps a fresh reference driver; log is the driver's logger.
	New func(d *memory.Driver, log logr.Logger) Instance
}

// Case names, as in pkg/sanity.
const (
	caseGenIdempotent   = "DriverGenerateBucketId/is idempotent for the same name and parameters"
	caseGenNothing      = "DriverGenerateBucketId/creates nothing in the backend"
	caseGenInvalid      = "DriverGenerateBucketId/rejects invalid parameters with InvalidArgument"
	caseGenUnknownKey   = "DriverGenerateBucketId/rejects an unknown parameter key with InvalidArgument"
	caseGenIncompatible = "DriverGenerateBucketId/returns AlreadyExists for an existing bucket " +
		"with incompatible parameters"
	caseCreateEachProtocol = "DriverCreateBucket/supports each advertised protocol when requested"
	caseCreateInBackend    = "DriverCreateBucket/creates the bucket in the backend"
	caseCreateIdempotent   = "DriverCreateBucket/is idempotent for the same bucket_id"
	caseCreateInvalid      = "DriverCreateBucket/rejects invalid parameters with InvalidArgument"
	caseCreateUnknownKey   = "DriverCreateBucket/rejects an unknown parameter key with InvalidArgument"
	caseCreateIncompatible = "DriverCreateBucket/returns AlreadyExists for an existing bucket with incompatible parameters"
	caseCreateProtocol     = "DriverCreateBucket/rejects a protocol the driver does not advertise with InvalidArgument"
	caseGetNotFound        = "DriverGetBucket/returns NotFound for a missing bucket"
	caseGetIncompatible    = "DriverGetBucket/returns AlreadyExists for a bucket incompatible with the parameters"
	caseGetProtocols       = "DriverGetBucket/answers for the requested protocols, and only the bucket's"
	caseDeleteGone         = "DriverDeleteBucket/deletes the bucket so that DriverGetBucket no longer finds it"
	caseDeleteInBackend    = "DriverDeleteBucket/deletes the bucket in the backend"
	caseDeleteUnknown      = "DriverDeleteBucket/returns OK for an unknown bucket_id"
	caseGenAccIdempotent   = "DriverGenerateBucketAccessId/is idempotent for the same account_name and parameters"
	caseGenAccNothing      = "DriverGenerateBucketAccessId/creates no account in the backend"
	caseGenAccOtherModes   = "DriverGenerateBucketAccessId/refuses an existing account_name " +
		"with other access modes in phase 1 or 2"
	caseGenAccUnique      = "DriverGenerateBucketAccessId/returns different account_ids for different account_names"
	caseGrantOwnCreds     = "DriverGrantBucketAccess/gives each access its own credentials"
	caseGrantOthersWork   = "DriverGrantBucketAccess/leaves other accesses to the same bucket working"
	caseGrantOutside      = "DriverGrantBucketAccess/gives no access to buckets outside the grant"
	caseGrantOwnInfo      = "DriverGrantBucketAccess/returns each bucket's own bucket info"
	caseRevokeEveryBucket = "DriverRevokeBucketAccess/revokes every bucket of a multi-bucket access"
	caseGrantComplete     = "DriverGrantBucketAccess/returns complete credentials and bucket info " +
		"for each advertised protocol"
	caseGrantIdempotent  = "DriverGrantBucketAccess/is idempotent for the same account_id"
	caseGrantOneAccount  = "DriverGrantBucketAccess/creates one backend account however often it is called"
	caseGrantOtherModes  = "DriverGrantBucketAccess/returns AlreadyExists for a repeat grant with other access modes"
	caseGrantOtherParams = "DriverGrantBucketAccess/returns AlreadyExists for a repeat grant with other access " +
		"parameters"
	caseGrantEnforces      = "DriverGrantBucketAccess/enforces each granted access mode"
	caseGrantMulti         = "DriverGrantBucketAccess/gives multiple buckets one credential, or returns OutOfRange"
	caseGrantPerBucket     = "DriverGrantBucketAccess/gives each bucket of a multi-bucket grant its own access modes"
	caseGrantMissingBucket = "DriverGrantBucketAccess/returns NotFound for a bucket that does not exist"
	caseGrantSA            = "DriverGrantBucketAccess/grants ServiceAccount authentication or returns InvalidArgument"
	caseGrantSANoKey       = "DriverGrantBucketAccess/serves ServiceAccount grants through the ServiceAccount, not a key"
	caseGrantSAOnly        = "DriverGrantBucketAccess/maps only the granted ServiceAccount"
	caseRevokeSA           = "DriverRevokeBucketAccess/ends a ServiceAccount's access"
	caseGrantProtocol      = "DriverGrantBucketAccess/rejects a protocol the driver does not advertise " +
		"with InvalidArgument"
	caseGrantInvalid      = "DriverGrantBucketAccess/rejects invalid parameters with InvalidArgument"
	caseGrantUnknownKey   = "DriverGrantBucketAccess/rejects an unknown parameter key with InvalidArgument"
	caseRevokeWorks       = "DriverRevokeBucketAccess/revokes the credentials"
	caseRevokeNothingLeft = "DriverRevokeBucketAccess/leaves no account and no access of any category"
	caseRevokeUnknown     = "DriverRevokeBucketAccess/returns OK for an unknown account_id"
	caseErrors            = "Errors/carry a readable message and no status details"
	caseLogs              = "Secrets/the driver logs no credential"
	caseErrorSecrets      = "Secrets/errors carry no credential"
)

// All returns every mutant.
func All() []Mutant {
	return slicesConcat(bucketMutants(), accessMutants(), isolationMutants(), otherMutants(), rotationMutants(),
		propertyMutants(), usageMutants())
}

func slicesConcat(lists ...[]Mutant) []Mutant {
	var all []Mutant
	for _, l := range lists {
		all = append(all, l...)
	}
	return all
}

// plain makes a New for a mutant that needs no backend overlay.
func plain(wrap func(*memory.Driver) Server) func(*memory.Driver, logr.Logger) Instance {
	return func(d *memory.Driver, _ logr.Logger) Instance { return Instance{Server: wrap(d)} }
}

// knownBucketKeys and knownAccessKeys are the memory driver's parameter keys.
var (
	knownBucketKeys = []string{memory.ParamVersioning, memory.ParamRegion}
	knownAccessKeys = []string{memory.ParamSASExpiry, memory.ParamDescription}
)

// onlyKeys drops every key not in known: a driver that reads the keys it knows and never looks
// at the others.
func onlyKeys(params map[string]string, known []string) map[string]string {
	out := map[string]string{}
	for _, k := range known {
		if v, ok := params[k]; ok {
			out[k] = v
		}
	}
	return out
}

func randomSuffix() string { return rand.Text()[:6] }

func isCode(err error, c codes.Code) bool { return status.Code(err) == c }

// cloneBuckets deep-copies a request's buckets, so a mutant can change modes without touching
// the caller's request.
func cloneBuckets(in []*cosiproto.AccessedBucket) []*cosiproto.AccessedBucket {
	out := make([]*cosiproto.AccessedBucket, len(in))
	for i, b := range in {
		out[i] = proto.Clone(b).(*cosiproto.AccessedBucket) //nolint:forcetypeassert // Clone keeps the type
	}
	return out
}

// accountSet is a set of account IDs, safe for concurrent use.
type accountSet struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (s *accountSet) add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]bool{}
	}
	s.ids[id] = true
}

func (s *accountSet) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id]
}

// requestCache remembers the first grant request of each account.
type requestCache struct {
	mu    sync.Mutex
	first map[string]*cosiproto.DriverGrantBucketAccessRequest
	creds map[string]*cosiproto.CredentialInfo
}

func (c *requestCache) remember(req *cosiproto.DriverGrantBucketAccessRequest, creds *cosiproto.CredentialInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.first == nil {
		c.first, c.creds = map[string]*cosiproto.DriverGrantBucketAccessRequest{}, map[string]*cosiproto.CredentialInfo{}
	}
	if _, ok := c.first[req.GetAccountId()]; !ok {
		c.first[req.GetAccountId()] = req
		c.creds[req.GetAccountId()] = creds
	}
}

func (c *requestCache) get(id string) (*cosiproto.DriverGrantBucketAccessRequest, *cosiproto.CredentialInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first[id], c.creds[id]
}

func copyParams(p map[string]string) map[string]string { return maps.Clone(p) }

func errorf(c codes.Code, format string, args ...any) error {
	return status.Error(c, fmt.Sprintf(format, args...))
}

// clone deep-copies a request, so a mutant can change it without touching the caller's.
func clone[M proto.Message](m M) M { return proto.Clone(m).(M) } //nolint:forcetypeassert // Clone keeps the type
