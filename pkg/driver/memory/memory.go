// Package memory is COSI's reference driver: it keeps buckets and accounts in memory (optionally
// persisted to a file) and implements the eight RPCs of the COSI driver protocol exactly as
// KEP-1979 describes them, and COSI's two credential rotation RPCs (rotation.go). Read it first
// when writing a driver: each RPC below shows what the spec asks of a real backend, in a few lines.
//
// It also serves tests and benchmarks: see Faults for latency and failure injection, and Backend
// for what a test can ask the "backend" directly (does this bucket exist, does this key work).
package memory

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// DefaultName is the memory driver's name unless configured otherwise.
const DefaultName = "memory.cosi.kube-cosi.io"

// Config configures the driver.
type Config struct {
	// Name is the driver name reported by DriverGetInfo; empty means DefaultName.
	Name string
	// Protocols are the protocols the driver supports; empty means S3, Azure and GCS.
	Protocols []cosiproto.ObjectProtocol_Type
	// S3Endpoint and Region are reported in S3 bucket info.
	S3Endpoint, Region string
	// SingleBucketAccess makes multi-bucket access requests fail with OutOfRange, as a backend
	// that cannot share one credential across buckets must.
	SingleBucketAccess bool
	// NoServiceAccountAuth makes ServiceAccount authentication fail with InvalidArgument, as a
	// backend without a Kubernetes identity mapping must.
	NoServiceAccountAuth bool
	// ExistingBuckets are buckets that exist from the start, for static provisioning.
	ExistingBuckets []string
	// StateFile, when set, persists buckets and accounts so a restarted driver remembers them.
	StateFile string
	// CertificateAuthority, when set, is returned with every grant (COSI_CERTIFICATE_AUTHORITY).
	CertificateAuthority string
	// NewKeyPerGrant makes every DriverGrantBucketAccess of an existing account issue a new key
	// and keep only the newest previous one valid, as the S3 driver does on IAM: a caller that
	// grants again needlessly mints keys, and a key two grants old stops working.
	NewKeyPerGrant bool
	// RenewByGrant makes the driver one that cannot rotate credentials (the rotation RPCs answer
	// Unimplemented) and whose repeated DriverGrantBucketAccess of an Azure account renews its
	// token: the expiry moves, the token stays. By default, as the Azure driver, a token's expiry
	// never moves: a repeated grant returns it as it is until it expired, and renewal is a rotation.
	RenewByGrant bool
	// Usage makes the driver advertise BUCKET_USAGE and answer DriverGetBucketUsage with each
	// bucket's object count (the objects of Backend.Put; it stores no data, so zero bytes) and no
	// quota. Off by default, as a driver of KEP-1979 alone: DriverGetBucketUsage answers
	// Unimplemented.
	Usage bool
}

// Driver is the memory driver. It implements cosiproto.IdentityServer and cosiproto.ProvisionerServer.
type Driver struct {
	// The Unimplemented servers make the driver compile against newer protocol versions that add
	// RPCs; every RPC of v1alpha2 is implemented below.
	cosiproto.UnimplementedIdentityServer
	cosiproto.UnimplementedProvisionerServer

	cfg Config

	mu    sync.Mutex
	state state
}

// Parameters the driver understands. A real driver documents its own and rejects unknown keys,
// so that a typo in a class is an error instead of a silently ignored setting.
const (
	// ParamVersioning ("true" or "false") is a bucket parameter.
	ParamVersioning = "versioning"
	// ParamRegion overrides the region of a bucket.
	ParamRegion = "region"
	// ParamSASExpiry (a Go duration, e.g. "24h") is an access parameter: Azure tokens expire then.
	ParamSASExpiry = "sasExpiry"
	// ParamDescription (free text) is an access parameter the driver keeps with the account, as
	// backends keep a description with a user: it is what a class with large parameters sends.
	ParamDescription = "description"
)

// BucketParameterKeys and AccessParameterKeys are the parameter keys the driver knows: what a
// vendor declares to cosi-sanity (sanity.Config) and checks with driver.CheckParameterKeys.
var (
	BucketParameterKeys = []string{ParamVersioning, ParamRegion}
	AccessParameterKeys = []string{ParamSASExpiry, ParamDescription}
)

// New returns a driver, loading its state file if configured.
func New(cfg Config) (*Driver, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if len(cfg.Protocols) == 0 {
		cfg.Protocols = []cosiproto.ObjectProtocol_Type{
			cosiproto.ObjectProtocol_S3,
			cosiproto.ObjectProtocol_AZURE,
			cosiproto.ObjectProtocol_GCS,
		}
	}
	if cfg.S3Endpoint == "" {
		cfg.S3Endpoint = "https://s3.memory.invalid"
	}
	if cfg.Region == "" {
		cfg.Region = "memory-1"
	}
	d := &Driver{cfg: cfg, state: newState()}
	if err := d.load(); err != nil {
		return nil, err
	}
	for _, id := range cfg.ExistingBuckets {
		if _, ok := d.state.Buckets[id]; !ok {
			d.state.Buckets[id] = &bucket{Protocols: cfg.Protocols}
		}
	}
	return d, nil
}

// MoveS3 changes the S3 endpoint and the default region that the driver reports for its buckets
// from now on, as a backend that moved does; ca, when not empty, replaces the certificate
// authority returned with grants. COSI's Secret refresh carries them to the access Secrets.
func (d *Driver) MoveS3(endpoint, region, ca string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cfg.S3Endpoint, d.cfg.Region = endpoint, region
	if ca != "" {
		d.cfg.CertificateAuthority = ca
	}
}

// DriverGetInfo returns the driver's name and protocols.
func (d *Driver) DriverGetInfo(
	context.Context,
	*cosiproto.DriverGetInfoRequest,
) (*cosiproto.DriverGetInfoResponse, error) {
	info := &cosiproto.DriverGetInfoResponse{Name: d.cfg.Name, SupportedProtocols: d.cfg.Protocols}
	if d.cfg.Usage {
		info.Capabilities = []cosiproto.DriverCapability_Type{cosiproto.DriverCapability_BUCKET_USAGE}
	}
	return info, nil
}

// DriverGetBucketUsage answers with the bucket's object count, with Config.Usage; Unimplemented
// without.
func (d *Driver) DriverGetBucketUsage(
	_ context.Context,
	req *cosiproto.DriverGetBucketUsageRequest,
) (*cosiproto.DriverGetBucketUsageResponse, error) {
	if !d.cfg.Usage {
		return nil, status.Error(codes.Unimplemented, "the memory driver reports usage only with Config.Usage")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.state.Buckets[req.GetBucketId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "bucket %q does not exist", req.GetBucketId())
	}
	return &cosiproto.DriverGetBucketUsageResponse{ObjectCount: int64(len(b.Objects))}, nil
}

// DriverGenerateBucketId is phase 1: the ID is the request name, so it is deterministic and no
// backend resource exists until DriverCreateBucket.
func (d *Driver) DriverGenerateBucketId(
	_ context.Context,
	req *cosiproto.DriverGenerateBucketIdRequest,
) (*cosiproto.DriverGenerateBucketIdResponse, error) {
	want, err := d.newBucket(req.GetProtocols(), req.GetParameters())
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if have, ok := d.state.Buckets[req.GetName()]; ok && !have.equal(want) {
		return nil, status.Errorf(codes.AlreadyExists, "bucket %q exists with other protocols or parameters", req.GetName())
	}
	return &cosiproto.DriverGenerateBucketIdResponse{BucketId: req.GetName()}, nil
}

// DriverCreateBucket is phase 2: it creates the bucket, or returns it unchanged if it exists with
// the same protocols and parameters.
func (d *Driver) DriverCreateBucket(
	_ context.Context,
	req *cosiproto.DriverCreateBucketRequest,
) (*cosiproto.DriverCreateBucketResponse, error) {
	want, err := d.newBucket(req.GetProtocols(), req.GetParameters())
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	id := req.GetBucketId()
	if have, ok := d.state.Buckets[id]; ok {
		if !have.equal(want) {
			return nil, status.Errorf(codes.AlreadyExists, "bucket %q exists with other protocols or parameters", id)
		}
		return &cosiproto.DriverCreateBucketResponse{Protocols: d.bucketInfo(id, have)}, nil
	}
	d.state.Buckets[id] = want
	if err := d.save(); err != nil {
		delete(d.state.Buckets, id)
		return nil, err
	}
	return &cosiproto.DriverCreateBucketResponse{Protocols: d.bucketInfo(id, want)}, nil
}

// DriverGetBucket finds an existing bucket for static provisioning.
func (d *Driver) DriverGetBucket(
	_ context.Context,
	req *cosiproto.DriverGetBucketRequest,
) (*cosiproto.DriverGetBucketResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.state.Buckets[req.GetBucketId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "bucket %q does not exist", req.GetBucketId())
	}
	for _, p := range req.GetProtocols() {
		if !slices.Contains(b.Protocols, p) {
			return nil, status.Errorf(codes.AlreadyExists, "bucket %q does not support %v", req.GetBucketId(), p)
		}
	}
	if len(req.GetParameters()) > 0 && !maps.Equal(req.GetParameters(), b.Parameters) {
		return nil, status.Errorf(codes.AlreadyExists, "bucket %q exists with other parameters", req.GetBucketId())
	}
	return &cosiproto.DriverGetBucketResponse{Protocols: d.bucketInfo(req.GetBucketId(), b)}, nil
}

// DriverDeleteBucket deletes the bucket; a bucket that does not exist is already deleted.
func (d *Driver) DriverDeleteBucket(
	_ context.Context,
	req *cosiproto.DriverDeleteBucketRequest,
) (*cosiproto.DriverDeleteBucketResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.state.Buckets[req.GetBucketId()]
	if !ok {
		return &cosiproto.DriverDeleteBucketResponse{}, nil
	}
	delete(d.state.Buckets, req.GetBucketId())
	if err := d.save(); err != nil {
		d.state.Buckets[req.GetBucketId()] = b
		return nil, err
	}
	return &cosiproto.DriverDeleteBucketResponse{}, nil
}

// DriverGenerateBucketAccessId is phase 1: the ID is the account name; nothing is created.
func (d *Driver) DriverGenerateBucketAccessId(
	_ context.Context,
	req *cosiproto.DriverGenerateBucketAccessIdRequest,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	want, err := d.newAccount(
		req.GetBuckets(),
		req.GetProtocol(),
		req.GetAuthenticationType(),
		req.GetServiceAccount(),
		req.GetParameters(),
	)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if have, ok := d.state.Accounts[req.GetAccountName()]; ok && !have.sameGrant(want) {
		return nil, status.Errorf(codes.AlreadyExists, "account %q exists with another grant", req.GetAccountName())
	}
	return &cosiproto.DriverGenerateBucketAccessIdResponse{AccountId: req.GetAccountName()}, nil
}

// DriverGrantBucketAccess is phase 2: it creates the account with one key for all its buckets, or
// returns the existing account's key when the grant is the same.
func (d *Driver) DriverGrantBucketAccess(
	_ context.Context,
	req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	want, err := d.newAccount(
		req.GetBuckets(),
		req.GetProtocol(),
		req.GetAuthenticationType(),
		req.GetServiceAccount(),
		req.GetParameters(),
	)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for id := range want.Buckets {
		b, ok := d.state.Buckets[id]
		if !ok {
			return nil, status.Errorf(codes.NotFound, "bucket %q does not exist", id)
		}
		if !slices.Contains(b.Protocols, want.Protocol) {
			return nil, status.Errorf(codes.InvalidArgument, "bucket %q does not support %v", id, want.Protocol)
		}
	}
	id := req.GetAccountId()
	acct, ok := d.state.Accounts[id]
	switch {
	case ok && !acct.sameGrant(want):
		return nil, status.Errorf(codes.AlreadyExists, "account %q exists with another grant", id)
	case !ok:
		acct = want
		acct.Secret = rand.Text()
		acct.Created = time.Now()
		d.state.Accounts[id] = acct
		if err := d.save(); err != nil {
			delete(d.state.Accounts, id)
			return nil, err
		}
	case d.cfg.NewKeyPerGrant:
		old := *acct
		acct.Previous, acct.Secret = acct.Secret, rand.Text()
		if err := d.save(); err != nil {
			*acct = old
			return nil, err
		}
	case d.cfg.RenewByGrant && acct.Parameters[ParamSASExpiry] != "":
		old := acct.Renewed
		acct.Renewed = time.Now()
		if err := d.save(); err != nil {
			acct.Renewed = old
			return nil, err
		}
	case acct.expired(time.Now()):
		// A repeated grant returns the token it issued, with its expiry, as the Azure driver
		// does; one that expired (with every other key of the account) is replaced.
		undo := acct.clone()
		acct.Secret, acct.KeyID, acct.Previous, acct.Older = rand.Text(), "", "", nil
		acct.Renewed = time.Now()
		if err := d.save(); err != nil {
			d.state.Accounts[id] = undo
			return nil, err
		}
	}

	resp := &cosiproto.DriverGrantBucketAccessResponse{}
	resp.Buckets = d.grantedBuckets(req.GetBuckets(), want.Protocol)
	resp.CertificateAuthority = d.cfg.CertificateAuthority
	if acct.AuthenticationType == cosiproto.AuthenticationType_KEY {
		resp.Credentials = acct.credentials(id)
		resp.CredentialId = credentialID(acct.Secret)
	}
	return resp, nil
}

// DriverRevokeBucketAccess deletes the account and its key; an account that does not exist is
// already revoked.
func (d *Driver) DriverRevokeBucketAccess(
	_ context.Context,
	req *cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	acct, ok := d.state.Accounts[req.GetAccountId()]
	if !ok {
		return &cosiproto.DriverRevokeBucketAccessResponse{}, nil
	}
	delete(d.state.Accounts, req.GetAccountId())
	if err := d.save(); err != nil {
		d.state.Accounts[req.GetAccountId()] = acct
		return nil, err
	}
	return &cosiproto.DriverRevokeBucketAccessResponse{}, nil
}

// grantedBuckets is the bucket info of a grant's buckets, for its protocol. Callers hold d.mu.
func (d *Driver) grantedBuckets(
	buckets []*cosiproto.AccessedBucket, protocol cosiproto.ObjectProtocol_Type,
) []*cosiproto.DriverGrantBucketAccessResponse_BucketInfo {
	var out []*cosiproto.DriverGrantBucketAccessResponse_BucketInfo
	for _, b := range buckets {
		var params map[string]string
		if have := d.state.Buckets[b.GetBucketId()]; have != nil {
			params = have.Parameters
		}
		info := d.bucketInfo(
			b.GetBucketId(),
			&bucket{Protocols: []cosiproto.ObjectProtocol_Type{protocol}, Parameters: params},
		)
		out = append(out, &cosiproto.DriverGrantBucketAccessResponse_BucketInfo{BucketId: b.GetBucketId(), BucketInfo: info})
	}
	return out
}

// newBucket checks a bucket request against what the driver supports.
func (d *Driver) newBucket(protocols []cosiproto.ObjectProtocol_Type, params map[string]string) (*bucket, error) {
	for _, p := range protocols {
		if !slices.Contains(d.cfg.Protocols, p) {
			return nil, status.Errorf(codes.InvalidArgument, "protocol %v is not supported by this driver", p)
		}
	}
	for k, v := range params {
		switch k {
		case ParamVersioning:
			if v != "true" && v != "false" {
				return nil, status.Errorf(codes.InvalidArgument, "parameter %s must be \"true\" or \"false\"", ParamVersioning)
			}
		case ParamRegion:
			if v == "" {
				return nil, status.Errorf(codes.InvalidArgument, "parameter %s must not be empty", ParamRegion)
			}
		default:
			return nil, status.Errorf(codes.InvalidArgument, "unknown bucket parameter %q", k)
		}
	}
	if len(protocols) == 0 {
		protocols = d.cfg.Protocols // no preference: support every protocol
	}
	return &bucket{Protocols: sortedProtocols(protocols), Parameters: params}, nil
}

// newAccount checks an access request against what the driver supports.
func (d *Driver) newAccount(
	buckets []*cosiproto.AccessedBucket,
	protocol cosiproto.ObjectProtocol_Type,
	auth cosiproto.AuthenticationType_Type,
	sa *cosiproto.ServiceAccount,
	params map[string]string,
) (*account, error) {
	if len(buckets) > 1 && d.cfg.SingleBucketAccess {
		return nil, status.Errorf(codes.OutOfRange, "this driver cannot share one credential across %d buckets", len(buckets))
	}
	if auth == cosiproto.AuthenticationType_SERVICE_ACCOUNT && d.cfg.NoServiceAccountAuth {
		return nil, status.Error(codes.InvalidArgument, "ServiceAccount authentication is not supported by this driver")
	}
	if !slices.Contains(d.cfg.Protocols, protocol) {
		return nil, status.Errorf(codes.InvalidArgument, "protocol %v is not supported by this driver", protocol)
	}
	for k, v := range params {
		switch k {
		case ParamSASExpiry:
			if _, err := time.ParseDuration(v); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "parameter %s: %v", ParamSASExpiry, err)
			}
		case ParamDescription:
		default:
			return nil, status.Errorf(codes.InvalidArgument, "unknown access parameter %q", k)
		}
	}
	a := &account{
		Buckets:            map[string]modes{},
		Protocol:           protocol,
		AuthenticationType: auth,
		ServiceAccount:     sa.GetNamespace() + "/" + sa.GetName(),
		Parameters:         params,
	}
	for _, b := range buckets {
		m := b.GetAccessModes()
		a.Buckets[b.GetBucketId()] = modes{
			ObjectData:     m.GetObjectData(),
			ObjectMetadata: m.GetObjectMetadata(),
			BucketMetadata: m.GetBucketMetadata(),
		}
	}
	return a, nil
}

// bucketInfo is what clients need to reach bucket id with each of b's protocols.
func (d *Driver) bucketInfo(id string, b *bucket) *cosiproto.ProtocolBucketInfo {
	region := d.cfg.Region
	if r := b.Parameters[ParamRegion]; r != "" {
		region = r
	}
	info := &cosiproto.ProtocolBucketInfo{}
	for _, p := range b.Protocols {
		switch p {
		case cosiproto.ObjectProtocol_S3:
			info.S3 = &cosiproto.S3BucketInfo{
				BucketName:      id,
				Endpoint:        d.cfg.S3Endpoint,
				Region:          region,
				AddressingStyle: cosiproto.S3AddressingStyle_PATH,
			}
		case cosiproto.ObjectProtocol_AZURE:
			info.Azure = &cosiproto.AzureBucketInfo{StorageAccount: "memory"}
		case cosiproto.ObjectProtocol_GCS:
			info.Gcs = &cosiproto.GcsBucketInfo{ProjectId: "memory", BucketName: id}
		}
	}
	return info
}

// credentials derives the account's current key for its protocol from its secret.
func (a *account) credentials(id string) *cosiproto.CredentialInfo {
	return a.keyCredentials(id, a.current())
}

// keyCredentials are the credentials of one of the account's keys.
func (a *account) keyCredentials(id string, k key) *cosiproto.CredentialInfo {
	keyID := k.ID
	if keyID == "" {
		sum := sha256.Sum256([]byte(id))
		keyID = "MEM" + strings.ToUpper(hex.EncodeToString(sum[:8]))
	}
	switch a.Protocol {
	case cosiproto.ObjectProtocol_S3:
		return &cosiproto.CredentialInfo{S3: &cosiproto.S3Credentials{AccessKeyId: keyID, AccessSecretKey: k.Secret}}
	case cosiproto.ObjectProtocol_AZURE:
		creds := &cosiproto.AzureCredentials{AccessToken: "sv=memory&sig=" + k.Secret}
		if expiry, ok := a.expiry(k); ok {
			creds.ExpiryTimestamp = timestamppb.New(expiry)
		}
		return &cosiproto.CredentialInfo{Azure: creds}
	default:
		return &cosiproto.CredentialInfo{Gcs: &cosiproto.GcsCredentials{HmacAccessId: keyID, HmacSecret: k.Secret}}
	}
}

// expiry is when the account's Azure token of key k expires: ParamSASExpiry after the key was
// issued; ok is false when it does not expire.
func (a *account) expiry(k key) (time.Time, bool) {
	if a.Protocol != cosiproto.ObjectProtocol_AZURE {
		return time.Time{}, false
	}
	d, err := time.ParseDuration(a.Parameters[ParamSASExpiry])
	if err != nil {
		return time.Time{}, false
	}
	return k.Issued.Add(d).Truncate(time.Second), true // to the second, as the Azure driver's policies
}

// expired reports whether the account's current token had expired at now.
func (a *account) expired(now time.Time) bool {
	return a.keyExpired(a.current(), now)
}

// keyExpired reports whether key k's token had expired at now: its requests are refused.
func (a *account) keyExpired(k key, now time.Time) bool {
	expiry, ok := a.expiry(k)
	return ok && !now.Before(expiry)
}

func sortedProtocols(protocols []cosiproto.ObjectProtocol_Type) []cosiproto.ObjectProtocol_Type {
	s := slices.Clone(protocols)
	slices.Sort(s)
	return slices.Compact(s)
}
