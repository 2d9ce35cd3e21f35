package sanity_test

// An adversarial review of the store properties, sequences and settle window (issue 42), by a
// reviewer who did not write them. Each TestAttack... showed one defect and failed against the
// suite at 5cd8005 (before the rewrite of history that dropped a committed binary: d1ab7c3);
// TestHeld... are what was tried and held, kept so that it keeps holding.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kube-cosi/cosi/pkg/driver/memory"
	"github.com/kube-cosi/cosi/pkg/sanity"
	"github.com/kube-cosi/cosi/pkg/sanity/mutants"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// ---------------------------------------------------------------------------------------------
// 1. credential_id scoped to the account (proto: "identifies the credential ... among the
// account's credentials"): a correct driver that numbers each account's keys 1, 2, 3...

// perAccountIDs is the memory driver with credential IDs numbered per account ("key-1", "key-2"),
// as the proto allows (Azure's key1/key2, a stored access policy per key). Everything else is the
// memory driver's.
type perAccountIDs struct {
	*memory.Driver
	mu    sync.Mutex
	toOrd map[string]map[string]string // account -> memory's credential_id -> ordinal ID
	toMem map[string]map[string]string // account -> ordinal ID -> memory's credential_id
}

func newPerAccountIDs(d *memory.Driver) *perAccountIDs {
	return &perAccountIDs{Driver: d, toOrd: map[string]map[string]string{}, toMem: map[string]map[string]string{}}
}

func (p *perAccountIDs) ord(account, mem string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.toOrd[account] == nil {
		p.toOrd[account], p.toMem[account] = map[string]string{}, map[string]string{}
	}
	if o, ok := p.toOrd[account][mem]; ok {
		return o
	}
	o := fmt.Sprintf("key-%d", len(p.toOrd[account])+1)
	p.toOrd[account][mem], p.toMem[account][o] = o, mem
	return o
}

func (p *perAccountIDs) mem(account, ord string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.toMem[account][ord]; ok {
		return m
	}
	return "unknown-" + ord // no such credential of this account: memory answers NotFound / OK
}

func (p *perAccountIDs) forget(account string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.toOrd, account)
	delete(p.toMem, account)
}

func (p *perAccountIDs) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	resp, err := p.Driver.DriverGrantBucketAccess(ctx, req)
	if err == nil && resp.GetCredentialId() != "" {
		resp.CredentialId = p.ord(req.GetAccountId(), resp.GetCredentialId())
	}
	return resp, err
}

func (p *perAccountIDs) DriverRevokeBucketAccess(
	ctx context.Context, req *cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	resp, err := p.Driver.DriverRevokeBucketAccess(ctx, req)
	if err == nil {
		p.forget(req.GetAccountId())
	}
	return resp, err
}

func (p *perAccountIDs) DriverRotateBucketAccessCredentials(
	ctx context.Context, req *cosiproto.DriverRotateBucketAccessCredentialsRequest,
) (*cosiproto.DriverRotateBucketAccessCredentialsResponse, error) {
	r := proto.CloneOf(req)
	if r.CredentialId != "" {
		r.CredentialId = p.mem(req.GetAccountId(), req.GetCredentialId())
	}
	resp, err := p.Driver.DriverRotateBucketAccessCredentials(ctx, r)
	if err == nil {
		resp.CredentialId = p.ord(req.GetAccountId(), resp.GetCredentialId())
	}
	return resp, err
}

func (p *perAccountIDs) DriverRetireBucketAccessCredentials(
	ctx context.Context, req *cosiproto.DriverRetireBucketAccessCredentialsRequest,
) (*cosiproto.DriverRetireBucketAccessCredentialsResponse, error) {
	r := proto.CloneOf(req)
	if r.CredentialId != "" {
		r.CredentialId = p.mem(req.GetAccountId(), req.GetCredentialId())
	}
	return p.Driver.DriverRetireBucketAccessCredentials(ctx, r)
}

// TestAttackPerAccountCredentialIDs: a driver whose credential IDs are unique per account (as the
// proto allows) passes every point case, and the sequences fail it: foreignCredential asks to
// rotate "key-1 of account B" through account A, and A has a key-1 of its own.
func TestAttackPerAccountCredentialIDs(t *testing.T) {
	var logs logBuffer
	d := newMemory(t, memory.Config{})
	cfg := memoryConfig(serve(t, newPerAccountIDs(d), logs.logger()), d, &logs)
	cfg.Seed = 42
	results := run(t, cfg)
	if failed := failedOrSkipped(results, sanity.Failed); len(failed) > 0 {
		t.Errorf("a correct driver with per-account credential IDs failed:\n%s", strings.Join(failed, "\n"))
	}
}

// ---------------------------------------------------------------------------------------------
// 2. A driver that advertises no protocol: the suite had a case for it; now it panics.

type noProtocols struct{ *memory.Driver }

func (noProtocols) DriverGetInfo(
	context.Context, *cosiproto.DriverGetInfoRequest,
) (*cosiproto.DriverGetInfoResponse, error) {
	return &cosiproto.DriverGetInfoResponse{Name: memory.DefaultName}, nil
}

// TestAttackNoProtocolsPanics: Run must report "DriverGetInfo/advertises at least one protocol"
// as failed, not panic in startStore (keepBucket's s.info.GetSupportedProtocols()[0]).
func TestAttackNoProtocolsPanics(t *testing.T) {
	var logs logBuffer
	d := newMemory(t, memory.Config{})
	cfg := memoryConfig(serveRaw(t, noProtocols{d}), d, &logs)
	var results []sanity.Result
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("sanity.Run panicked against a driver that advertises no protocol: %v", r)
			}
		}()
		var err error
		results, err = sanity.Run(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
	}()
	for _, r := range results {
		if r.Name == "DriverGetInfo/advertises at least one protocol, each once" && r.Status != sanity.Failed {
			t.Errorf("%s: %s, want failed", r.Name, r.Status)
		}
	}
}

// serveRaw serves srv with a plain gRPC server, without the SDK (which checks DriverGetInfo's
// answer itself): a driver not built on pkg/driver.
func serveRaw(t *testing.T, srv server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "driver.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	cosiproto.RegisterIdentityServer(g, srv)
	cosiproto.RegisterProvisionerServer(g, srv)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return "unix://" + path
}

// ---------------------------------------------------------------------------------------------
// 3. Cleanup failures: moved from the case to CleanupProperty, which is only reported when the
// ledger runs and the property is selected. With Config.Run selecting cases only, they vanish.

// noDelete is a driver whose DriverDeleteBucket fails (a backend outage, a permission missing).
type noDelete struct{ *memory.Driver }

func (noDelete) DriverDeleteBucket(
	context.Context, *cosiproto.DriverDeleteBucketRequest,
) (*cosiproto.DriverDeleteBucketResponse, error) {
	return nil, status.Error(codes.PermissionDenied, "the driver's credentials may not delete buckets")
}

// TestAttackCleanupFailureLostWithRun: before e9317c2..HEAD a failed cleanup failed the case
// ("cleanup: DriverDeleteBucket ..."); now, with Config.Run selecting a case, nothing reports it
// and the bucket stays in the backend.
func TestAttackCleanupFailureLostWithRun(t *testing.T) {
	var logs logBuffer
	d := newMemory(t, memory.Config{})
	cfg := memoryConfig(serve(t, noDelete{d}, logs.logger()), d, &logs)
	cfg.Run = regexp.MustCompile(`^DriverCreateBucket/creates the bucket in the backend$`)
	results := run(t, cfg)
	var failed []string
	for _, r := range results {
		t.Logf("%s: %s %s", r.Name, r.Status, r.Message)
		if r.Status == sanity.Failed {
			failed = append(failed, r.Name)
		}
	}
	if left := d.Backend().Buckets(); len(left) > 0 && len(failed) == 0 {
		t.Errorf("buckets %v are left in the backend (the cleanup's DriverDeleteBucket failed), and no result "+
			"failed: %d results, all passed", left, len(results))
	}
}

// ---------------------------------------------------------------------------------------------
// 4. The kept bucket leaks when the start of the run fails half-way.

// flakyFirstGrant fails the first DriverGrantBucketAccess with Unavailable (a transient outage);
// every later call works.
type flakyFirstGrant struct {
	*memory.Driver
	mu   sync.Mutex
	done bool
}

func (f *flakyFirstGrant) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	f.mu.Lock()
	first := !f.done
	f.done = true
	f.mu.Unlock()
	if first {
		return nil, status.Error(codes.Unavailable, "the backend is restarting")
	}
	return f.Driver.DriverGrantBucketAccess(ctx, req)
}

// TestAttackKeptBucketLeaks: when keepBucket fails after DriverCreateBucket (grant refused, or the
// probe's Put fails), startStore drops the keeper, and stopStore never deletes the bucket.
func TestAttackKeptBucketLeaks(t *testing.T) {
	for _, tc := range []struct {
		name string
		srv  func(*memory.Driver) server
		put  bool // the probe's Put fails
	}{
		{"first grant Unavailable", func(d *memory.Driver) server { return &flakyFirstGrant{Driver: d} }, false},
		{"probe Put fails once", func(d *memory.Driver) server { return d }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			d := newMemory(t, memory.Config{})
			cfg := memoryConfig(serve(t, tc.srv(d), logr.Discard()), d, &logs)
			cfg.Run = regexp.MustCompile(`^Store/`) // only the properties: nothing else touches the backend
			if tc.put {
				base := cfg.Probe.Put
				var once sync.Once
				cfg.Probe.Put = func(ctx context.Context, c sanity.AccessCheck, key string) (bool, error) {
					var err error
					once.Do(func() { err = fmt.Errorf("put: connection reset by peer") })
					if err != nil {
						return false, err
					}
					return base(ctx, c, key)
				}
			}
			results := run(t, cfg)
			for _, r := range results {
				t.Logf("%s: %s %s", r.Name, r.Status, r.Message)
			}
			if b := d.Backend(); len(b.Buckets()) > 0 || len(b.Accounts()) > 0 {
				t.Errorf("left in the backend after the run: buckets %v, accounts %v", b.Buckets(), b.Accounts())
			}
		})
	}
}

// ---------------------------------------------------------------------------------------------
// 7. Many sequences against the reference driver.

// TestAttackManySequences runs many sequences (many seeds' worth) against the memory driver, which
// must pass them all.
func TestHeldManySequences(t *testing.T) {
	for _, mc := range []struct {
		name string
		cfg  memory.Config
	}{
		{"default", memory.Config{}},
		{"NewKeyPerGrant", memory.Config{NewKeyPerGrant: true}},
		{"RenewByGrant azure", memory.Config{RenewByGrant: true,
			Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_AZURE}}},
	} {
		t.Run(mc.name, func(t *testing.T) {
			var logs logBuffer
			d := newMemory(t, mc.cfg)
			cfg := memoryConfig(serve(t, d, logr.Discard()), d, &logs)
			cfg.Run = regexp.MustCompile(`^Sequences/`)
			cfg.Sequences = 60
			cfg.Seed = 7
			results := run(t, cfg)
			if failed := failedOrSkipped(results, sanity.Failed); len(failed) > 0 {
				t.Errorf("%d of %d sequences failed against the reference driver; first:\n%s", len(failed), len(results),
					failed[0])
			}
		})
	}
}

// ---------------------------------------------------------------------------------------------
// 6. Drivers that support only some access modes (InvalidArgument for the others, as KEP-1979
// says).

// modeLimited refuses, with InvalidArgument, every grant whose modes refuse() names, or whose
// modes combine() refuses.
type modeLimited struct {
	*memory.Driver
	refuse  func(m cosiproto.AccessMode_Mode, category int) bool
	combine func(m *cosiproto.AccessModes) bool
}

func (m modeLimited) check(buckets []*cosiproto.AccessedBucket) error {
	for _, b := range buckets {
		am := b.GetAccessModes()
		if m.combine != nil && !m.combine(am) {
			return status.Errorf(codes.InvalidArgument, "object metadata access must follow object data access")
		}
		modes := []cosiproto.AccessMode_Mode{am.GetObjectData(), am.GetObjectMetadata(), am.GetBucketMetadata()}
		for cat, mode := range modes {
			if m.refuse(mode, cat) {
				return status.Errorf(codes.InvalidArgument, "access mode %v is not supported for category %d", mode, cat)
			}
		}
	}
	return nil
}

func (m modeLimited) DriverGenerateBucketAccessId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketAccessIdRequest,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	if err := m.check(req.GetBuckets()); err != nil {
		return nil, err
	}
	return m.Driver.DriverGenerateBucketAccessId(ctx, req)
}

func (m modeLimited) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	if err := m.check(req.GetBuckets()); err != nil {
		return nil, err
	}
	return m.Driver.DriverGrantBucketAccess(ctx, req)
}

// TestAttackModeLimitedDrivers runs a driver that refuses some combinations of modes with
// InvalidArgument (object metadata other than object data's) and passes every point case: the
// sequences fail it. TestHeldModeLimitedDrivers runs others, and logs.
func TestAttackModeLimitedDrivers(t *testing.T) { modeLimitedDrivers(t, true) }

// TestHeldModeLimitedDrivers: a read-write-only driver fails the sequences the same way, but also
// three point cases (pre-existing); no write-only and object-data-only drivers pass.
func TestHeldModeLimitedDrivers(t *testing.T) { modeLimitedDrivers(t, false) }

func modeLimitedDrivers(t *testing.T, attack bool) {
	for _, tc := range []struct {
		name    string
		refuse  func(m cosiproto.AccessMode_Mode, category int) bool
		combine func(m *cosiproto.AccessModes) bool
	}{
		// An S3-like store where object ACLs and tags go with the object permissions: object
		// metadata unspecified or the same as object data. Every point case passes.
		{"object metadata follows object data", func(cosiproto.AccessMode_Mode, int) bool { return false },
			func(m *cosiproto.AccessModes) bool {
				return m.GetObjectMetadata() == cosiproto.AccessMode_UNSPECIFIED || m.GetObjectMetadata() == m.GetObjectData()
			}},
		{"read-write only", func(m cosiproto.AccessMode_Mode, _ int) bool {
			return m == cosiproto.AccessMode_READ_ONLY || m == cosiproto.AccessMode_WRITE_ONLY
		}, nil},
		{"no write-only", func(m cosiproto.AccessMode_Mode, _ int) bool { return m == cosiproto.AccessMode_WRITE_ONLY }, nil},
		{"object data only", func(m cosiproto.AccessMode_Mode, cat int) bool {
			return cat > 0 && m != cosiproto.AccessMode_UNSPECIFIED
		}, nil},
	} {
		if attack != (tc.combine != nil) {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			d := newMemory(t, memory.Config{})
			cfg := memoryConfig(serve(t, modeLimited{d, tc.refuse, tc.combine}, logs.logger()), d, &logs)
			cfg.Seed = 42
			results := run(t, cfg)
			var newFailed []string
			for _, f := range failedOrSkipped(results, sanity.Failed) {
				if strings.HasPrefix(f, "Sequences/") || strings.HasPrefix(f, "Store/") {
					newFailed = append(newFailed, f)
				} else {
					t.Logf("point case failed (pre-existing): %.300s", f)
				}
			}
			switch {
			case len(newFailed) > 0 && attack:
				t.Errorf("new results failed:\n%s", strings.Join(newFailed, "\n"))
			case len(newFailed) > 0:
				t.Logf("new results failed:\n%.600s", strings.Join(newFailed, "\n"))
			}
		})
	}
}

// ---------------------------------------------------------------------------------------------
// 5. The settle window does not cover Probe.Put and Probe.Objects.

// TestAttackSettleWindowPut: the store of TestSettleWindow (changes take 30 ms to show), whose
// writes obey the same lag as every other access (a key the store does not know yet cannot write).
// With a settle window of 2 s, every case must pass, as TestSettleWindow says; the suite's own
// writes (the kept bucket's object, the non-empty deletion case's object) are not retried.
func TestAttackSettleWindowPut(t *testing.T) {
	var logs logBuffer
	d := newMemory(t, memory.Config{})
	l := &lagging{Driver: d, lag: 30 * time.Millisecond, before: map[string]any{}}
	cfg := memoryConfig(serve(t, l, logs.logger()), d, &logs)
	base := cfg.Probe
	cfg.Probe = l.probe(cfg.Probe)
	lagged := cfg.Probe.Allowed
	cfg.Probe.Put = func(ctx context.Context, c sanity.AccessCheck, key string) (bool, error) {
		c.Category, c.Write = sanity.ObjectData, true
		if ok, err := lagged(ctx, c); err != nil || !ok {
			return false, err // the store does not know the grant yet: access denied
		}
		return base.Put(ctx, c, key)
	}
	cfg.Settle = 2 * time.Second
	results := run(t, cfg)
	if failed := failedOrSkipped(results, sanity.Failed); len(failed) > 0 {
		t.Errorf("with a settle window of 2s, failed:\n%s", strings.Join(failed, "\n"))
	}
}

// TestAttackSettleWindowObjects: a store whose object listing shows a write 30 ms late (Swift's
// container listings, a multi-site RGW). With a settle window of 2 s the kept bucket's object is
// reported gone after the first case.
func TestAttackSettleWindowObjects(t *testing.T) {
	var logs logBuffer
	d := newMemory(t, memory.Config{})
	cfg := memoryConfig(serve(t, d, logs.logger()), d, &logs)
	var mu sync.Mutex
	written := map[string]time.Time{} // bucket/key -> when it was written
	basePut, baseObjects := cfg.Probe.Put, cfg.Probe.Objects
	cfg.Probe.Put = func(ctx context.Context, c sanity.AccessCheck, key string) (bool, error) {
		ok, err := basePut(ctx, c, key)
		if ok {
			mu.Lock()
			written[c.BucketID+"/"+key] = time.Now()
			mu.Unlock()
		}
		return ok, err
	}
	cfg.Probe.Objects = func(ctx context.Context, id string) ([]string, error) {
		all, err := baseObjects(ctx, id)
		mu.Lock()
		defer mu.Unlock()
		var shown []string
		for _, o := range all {
			if time.Since(written[id+"/"+o]) >= 30*time.Millisecond {
				shown = append(shown, o)
			}
		}
		return shown, err
	}
	cfg.Settle = 2 * time.Second
	cfg.Run = regexp.MustCompile(`^(DriverGetInfo/|Store/)`) // two fast cases, then the properties
	results := run(t, cfg)
	if failed := failedOrSkipped(results, sanity.Failed); len(failed) > 0 {
		t.Errorf("with a settle window of 2s, failed:\n%s", strings.Join(failed, "\n"))
	}
}

// ---------------------------------------------------------------------------------------------
// 1b. A driver whose IDs are not the names: bucket_id "cosi-<name>", account_id a hash of the
// account_name. Allowed by KEP-1979 (the driver derives IDs as it likes).

type renamed struct {
	*memory.Driver
	mu       sync.Mutex
	accounts map[string]string // account_id -> account_name (memory's account ID)
}

const bucketPrefix = "cosi-"

func strip(id string) (string, bool) {
	if !strings.HasPrefix(id, bucketPrefix) {
		return "", false
	}
	return strings.TrimPrefix(id, bucketPrefix), true
}

func stripOrMissing(id string) string {
	if s, ok := strip(id); ok {
		return s
	}
	return "no-such-bucket-" + id
}

func (r *renamed) account(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n, ok := r.accounts[id]; ok {
		return n
	}
	return id
}

func stripBuckets(in []*cosiproto.AccessedBucket) []*cosiproto.AccessedBucket {
	var out []*cosiproto.AccessedBucket
	for _, b := range in {
		out = append(out,
			&cosiproto.AccessedBucket{BucketId: stripOrMissing(b.GetBucketId()), AccessModes: b.GetAccessModes()})
	}
	return out
}

func prefixInfos(in []*cosiproto.DriverGrantBucketAccessResponse_BucketInfo) {
	for _, b := range in {
		b.BucketId = bucketPrefix + b.GetBucketId()
	}
}

func (r *renamed) DriverGenerateBucketId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketIdRequest,
) (*cosiproto.DriverGenerateBucketIdResponse, error) {
	resp, err := r.Driver.DriverGenerateBucketId(ctx, req)
	if err == nil {
		resp.BucketId = bucketPrefix + resp.GetBucketId()
	}
	return resp, err
}

func (r *renamed) DriverCreateBucket(
	ctx context.Context, req *cosiproto.DriverCreateBucketRequest,
) (*cosiproto.DriverCreateBucketResponse, error) {
	name, ok := strip(req.GetBucketId())
	if !ok && req.GetBucketId() != "" {
		return nil, status.Errorf(codes.InvalidArgument, "bucket_id %q is not one this driver generated", req.GetBucketId())
	}
	c := &cosiproto.DriverCreateBucketRequest{BucketId: name, Protocols: req.GetProtocols(),
		Parameters: req.GetParameters()}
	return r.Driver.DriverCreateBucket(ctx, c)
}

func (r *renamed) DriverGetBucket(
	ctx context.Context, req *cosiproto.DriverGetBucketRequest,
) (*cosiproto.DriverGetBucketResponse, error) {
	id := req.GetBucketId()
	if id != "" {
		id = stripOrMissing(id)
	}
	return r.Driver.DriverGetBucket(ctx, &cosiproto.DriverGetBucketRequest{BucketId: id, Protocols: req.GetProtocols(),
		Parameters: req.GetParameters()})
}

func (r *renamed) DriverDeleteBucket(
	ctx context.Context, req *cosiproto.DriverDeleteBucketRequest,
) (*cosiproto.DriverDeleteBucketResponse, error) {
	id := req.GetBucketId()
	if id != "" {
		id = stripOrMissing(id)
	}
	del := &cosiproto.DriverDeleteBucketRequest{BucketId: id, Parameters: req.GetParameters()}
	return r.Driver.DriverDeleteBucket(ctx, del)
}

func (r *renamed) DriverGenerateBucketAccessId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketAccessIdRequest,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	c := &cosiproto.DriverGenerateBucketAccessIdRequest{AccountName: req.GetAccountName(),
		Buckets:  stripBuckets(req.GetBuckets()),
		Protocol: req.GetProtocol(), AuthenticationType: req.GetAuthenticationType(), ServiceAccount: req.GetServiceAccount(),
		Parameters: req.GetParameters()}
	resp, err := r.Driver.DriverGenerateBucketAccessId(ctx, c)
	if err == nil {
		sum := sha256.Sum256([]byte(req.GetAccountName()))
		id := "acct-" + hex.EncodeToString(sum[:10])
		r.mu.Lock()
		r.accounts[id] = resp.GetAccountId()
		r.mu.Unlock()
		resp.AccountId = id
	}
	return resp, err
}

func (r *renamed) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	c := &cosiproto.DriverGrantBucketAccessRequest{AccountId: r.account(req.GetAccountId()),
		Buckets:  stripBuckets(req.GetBuckets()),
		Protocol: req.GetProtocol(), AuthenticationType: req.GetAuthenticationType(), ServiceAccount: req.GetServiceAccount(),
		Parameters: req.GetParameters()}
	resp, err := r.Driver.DriverGrantBucketAccess(ctx, c)
	if err == nil {
		prefixInfos(resp.GetBuckets())
	}
	return resp, err
}

func (r *renamed) DriverRevokeBucketAccess(
	ctx context.Context, req *cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	c := &cosiproto.DriverRevokeBucketAccessRequest{AccountId: r.account(req.GetAccountId()), Protocol: req.GetProtocol(),
		AuthenticationType: req.GetAuthenticationType(), ServiceAccount: req.GetServiceAccount(),
		Parameters: req.GetParameters()}
	for _, b := range req.GetBuckets() {
		c.Buckets = append(c.Buckets,
			&cosiproto.DriverRevokeBucketAccessRequest_Bucket{BucketId: stripOrMissing(b.GetBucketId())})
	}
	return r.Driver.DriverRevokeBucketAccess(ctx, c)
}

func (r *renamed) DriverRotateBucketAccessCredentials(
	ctx context.Context, req *cosiproto.DriverRotateBucketAccessCredentialsRequest,
) (*cosiproto.DriverRotateBucketAccessCredentialsResponse, error) {
	c := &cosiproto.DriverRotateBucketAccessCredentialsRequest{AccountId: r.account(req.GetAccountId()),
		Buckets: stripBuckets(req.GetBuckets()), Protocol: req.GetProtocol(), AuthenticationType: req.GetAuthenticationType(),
		ServiceAccount: req.GetServiceAccount(), Parameters: req.GetParameters(), CredentialId: req.GetCredentialId()}
	resp, err := r.Driver.DriverRotateBucketAccessCredentials(ctx, c)
	if err == nil {
		prefixInfos(resp.GetBuckets())
	}
	return resp, err
}

func (r *renamed) DriverRetireBucketAccessCredentials(
	ctx context.Context, req *cosiproto.DriverRetireBucketAccessCredentialsRequest,
) (*cosiproto.DriverRetireBucketAccessCredentialsResponse, error) {
	c := &cosiproto.DriverRetireBucketAccessCredentialsRequest{AccountId: r.account(req.GetAccountId()),
		CredentialId: req.GetCredentialId(), Protocol: req.GetProtocol(), Parameters: req.GetParameters()}
	return r.Driver.DriverRetireBucketAccessCredentials(ctx, c)
}

// renamedProbe is the memory probe, told the driver's bucket_id.
func renamedProbe(p sanity.Probe) sanity.Probe {
	out := p
	out.BucketExists = func(ctx context.Context, id string) (bool, error) {
		return p.BucketExists(ctx, stripOrMissing(id))
	}
	out.Allowed = func(ctx context.Context, c sanity.AccessCheck) (bool, error) {
		c.BucketID = stripOrMissing(c.BucketID)
		return p.Allowed(ctx, c)
	}
	out.Put = func(ctx context.Context, c sanity.AccessCheck, key string) (bool, error) {
		c.BucketID = stripOrMissing(c.BucketID)
		return p.Put(ctx, c, key)
	}
	out.Objects = func(ctx context.Context, id string) ([]string, error) { return p.Objects(ctx, stripOrMissing(id)) }
	out.Empty = func(ctx context.Context, id string) error { return p.Empty(ctx, stripOrMissing(id)) }
	return out
}

func TestHeldRenamedIDs(t *testing.T) {
	var logs logBuffer
	d := newMemory(t, memory.Config{})
	cfg := memoryConfig(serve(t, &renamed{Driver: d, accounts: map[string]string{}}, logs.logger()), d, &logs)
	cfg.Probe = renamedProbe(cfg.Probe)
	cfg.Seed = 42
	results := run(t, cfg)
	if failed := failedOrSkipped(results, sanity.Failed); len(failed) > 0 {
		t.Errorf("failed:\n%s", strings.Join(failed, "\n"))
	}
	if b := d.Backend(); len(b.Buckets()) > 0 || len(b.Accounts()) > 0 {
		t.Errorf("left behind: buckets %v, accounts %v", b.Buckets(), b.Accounts())
	}
}

// ---------------------------------------------------------------------------------------------
// 8. The kept grant is assumed to live for the whole run.

// TestAttackKeptGrantExpires: a driver whose keys expire by design (AccessParameters with a SAS
// expiry, temporary credentials renewed by a repeated grant) and a run longer than the expiry: the
// suite reports "no longer opens its bucket; nothing revoked it".
func TestAttackKeptGrantExpires(t *testing.T) {
	var logs logBuffer
	d := newMemory(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_AZURE}})
	cfg := memoryConfig(serve(t, d, logs.logger()), d, &logs)
	cfg.AccessParameters = map[string]string{memory.ParamSASExpiry: "1s"}
	cfg.IncompatibleAccessParameters = map[string]string{memory.ParamSASExpiry: "2s"}
	// A vendor case that takes a while (a real backend's case takes seconds; a run, minutes to hours).
	cfg.ExtraCases = []sanity.Case{sanity.NewCase("Vendor/takes a while", func(*sanity.T) {
		time.Sleep(1500 * time.Millisecond)
	})}
	cfg.Run = regexp.MustCompile(`^(Vendor/|Store/)`)
	results := run(t, cfg)
	if failed := failedOrSkipped(results, sanity.Failed); len(failed) > 0 {
		t.Errorf("failed:\n%s", strings.Join(failed, "\n"))
	}
}

// ---------------------------------------------------------------------------------------------
// 10. Determinism: the same seed gives the same operations.

type recorder struct {
	*memory.Driver
	mu    sync.Mutex
	calls []string
}

var (
	runPrefix = regexp.MustCompile(`sanity-[a-z0-9]{8}-`)
)

func (r *recorder) note(method string, req fmt.Stringer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, method+" "+runPrefix.ReplaceAllString(req.String(), "P-"))
}

func (r *recorder) DriverCreateBucket(
	ctx context.Context, req *cosiproto.DriverCreateBucketRequest,
) (*cosiproto.DriverCreateBucketResponse, error) {
	r.note("create", req)
	return r.Driver.DriverCreateBucket(ctx, req)
}

func (r *recorder) DriverDeleteBucket(
	ctx context.Context, req *cosiproto.DriverDeleteBucketRequest,
) (*cosiproto.DriverDeleteBucketResponse, error) {
	r.note("delete", req)
	return r.Driver.DriverDeleteBucket(ctx, req)
}

func (r *recorder) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	r.note("grant", req)
	return r.Driver.DriverGrantBucketAccess(ctx, req)
}

func (r *recorder) DriverRevokeBucketAccess(
	ctx context.Context, req *cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	r.note("revoke", req)
	return r.Driver.DriverRevokeBucketAccess(ctx, req)
}

func (r *recorder) DriverRotateBucketAccessCredentials(
	ctx context.Context, req *cosiproto.DriverRotateBucketAccessCredentialsRequest,
) (*cosiproto.DriverRotateBucketAccessCredentialsResponse, error) {
	r.note("rotate "+req.GetAccountId(), &cosiproto.DriverGetInfoRequest{})
	return r.Driver.DriverRotateBucketAccessCredentials(ctx, req)
}

func TestHeldSameSeedSameOperations(t *testing.T) {
	calls := func() []string {
		var logs logBuffer
		d := newMemory(t, memory.Config{})
		rec := &recorder{Driver: d}
		cfg := memoryConfig(serve(t, rec, logr.Discard()), d, &logs)
		cfg.Run = regexp.MustCompile(`^Sequences/`)
		cfg.Seed = 12345
		run(t, cfg)
		return rec.calls
	}
	a, b := calls(), calls()
	if len(a) != len(b) {
		t.Fatalf("%d calls, then %d", len(a), len(b))
	}
	for i := range a {
		if runPrefix.ReplaceAllString(a[i], "") != runPrefix.ReplaceAllString(b[i], "") {
			t.Fatalf("call %d differs:\n%s\n%s", i, a[i], b[i])
		}
	}
	t.Logf("%d identical calls", len(a))
}

// ---------------------------------------------------------------------------------------------
// 3. Secrets: a probe whose errors quote the credentials (an HTTP client error with the signed
// URL): the property and sequence messages built from them must not show the secret.

func TestHeldProbeErrorsRedacted(t *testing.T) {
	for _, p := range []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3, cosiproto.ObjectProtocol_AZURE} {
		t.Run(p.String(), func(t *testing.T) {
			var logs logBuffer
			d := newMemory(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{p}})
			cfg := memoryConfig(serve(t, d, logs.logger()), d, &logs)
			base := cfg.Probe.AccountOf
			var mu sync.Mutex
			var quoted []string
			cfg.Probe.AccountOf = func(ctx context.Context, creds *cosiproto.CredentialInfo) (string, error) {
				who, err := base(ctx, creds)
				if who != "" || err != nil {
					return who, err
				}
				secret := creds.GetS3().GetAccessSecretKey() + creds.GetAzure().GetAccessToken()
				mu.Lock()
				quoted = append(quoted, secret)
				mu.Unlock()
				return "", fmt.Errorf("GET https://store.invalid/?sig=%s (%q, %s): 403 Forbidden",
					url.QueryEscape(secret), secret, secret)
			}
			cfg.Run = regexp.MustCompile(`^(DriverRevokeBucketAccess/revokes the credentials|Sequences/|Store/)`)
			cfg.Seed = 42
			results := run(t, cfg)
			var all []sanity.Result
			for _, r := range results {
				all = append(all, r)
			}
			out := report(all)
			var junit bytes.Buffer
			if err := sanity.WriteJUnit(&junit, all); err != nil {
				t.Fatal(err)
			}
			if len(quoted) == 0 || !bytes.Contains(out, []byte(sanity.Redacted)) {
				t.Fatalf("the probe quoted no secret in a message (%d quoted): nothing tested:\n%s", len(quoted), out)
			}
			for _, s := range quoted {
				for what, b := range map[string][]byte{"report": out, "junit": junit.Bytes()} {
					if part := leaked(b, s); part != "" {
						t.Errorf("the %s holds %q of a secret", what, part)
					}
				}
			}
		})
	}
}

// ---------------------------------------------------------------------------------------------
// 11. The settle window and checks that want "denied": the first "denied" ends the wait, also
// when it is only the grant not in force yet.

// TestAttackSettleHidesWildcard runs the sequences against the mutant policy-prefix-wildcard (a
// grant's policy names bucket*) behind a store whose changes take 30 ms to show, with a settle
// window of 2 s, and counts over seeds how often the sequences catch it; without the lag they
// catch it in every sequence run.
func TestHeldSettleWildcard(t *testing.T) {
	var wildcard mutants.Mutant
	for _, m := range mutants.All() {
		if m.Name == "policy-prefix-wildcard" {
			wildcard = m
		}
	}
	catch := func(lag time.Duration, seed uint64) bool {
		var logs logBuffer
		d := newMemory(t, mutationMemoryConfig())
		inst := wildcard.New(d, logr.Discard())
		l := &lagging{Driver: d, lag: lag, before: map[string]any{}}
		cfg := memoryConfig(serve(t, l, logr.Discard()), d, &logs)
		cfg.Probe = l.probe(inst.Probe(cfg.Probe))
		cfg.Settle = 2 * time.Second
		cfg.Seed = seed
		cfg.Run = regexp.MustCompile(`^Sequences/`)
		for _, r := range run(t, cfg) {
			if r.Status == sanity.Failed && strings.Contains(r.Message, wildcard.Says) {
				return true
			}
		}
		return false
	}
	const seeds = 2
	var plain, lagged int
	for seed := uint64(1); seed <= seeds; seed++ {
		if catch(0, seed) {
			plain++
		}
		if catch(30*time.Millisecond, seed) {
			lagged++
		}
	}
	t.Logf("policy-prefix-wildcard caught under %d seeds: %d without lag, %d with a 30 ms lag and a 2 s window",
		seeds, plain, lagged)
	if lagged < plain {
		t.Errorf("with a settle window the sequences catch the wildcard policy under %d of %d seeds, without lag %d: "+
			"a check that wants \"denied\" stops at the first denial, before the grant is in force", lagged, seeds, plain)
	}
}

// ---------------------------------------------------------------------------------------------
// 12. A revoked key is checked once, right after the case that revoked it, and never again.

// undoneRevoke is a driver whose revoke is undone a while later (the backend user deleted
// directly, and re-created with its key by an operator reconciling a desired state the driver
// did not change, as with a CephObjectStoreUser left behind). The probe sees the store as it is:
// the account gone for `after`, then back with its key.
type undoneRevoke struct {
	*memory.Driver
	after   time.Duration
	mu      sync.Mutex
	revoked map[string]time.Time
}

func (u *undoneRevoke) DriverRevokeBucketAccess(
	_ context.Context, req *cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.revoked[req.GetAccountId()]; !ok {
		u.revoked[req.GetAccountId()] = time.Now()
	}
	return &cosiproto.DriverRevokeBucketAccessResponse{}, nil
}

func (u *undoneRevoke) gone(account string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	at, ok := u.revoked[account]
	return ok && time.Since(at) < u.after
}

func (u *undoneRevoke) probe(base sanity.Probe) sanity.Probe {
	b := u.Backend()
	p := base
	p.Allowed = func(ctx context.Context, c sanity.AccessCheck) (bool, error) {
		if c.Credentials != nil && u.gone(b.AccountOf(c.Credentials)) {
			return false, nil
		}
		return base.Allowed(ctx, c)
	}
	p.AccountOf = func(ctx context.Context, creds *cosiproto.CredentialInfo) (string, error) {
		who, err := base.AccountOf(ctx, creds)
		if u.gone(who) {
			return "", err
		}
		return who, err
	}
	p.Accounts = func(ctx context.Context) ([]string, error) {
		all, err := base.Accounts(ctx)
		var out []string
		for _, a := range all {
			if !u.gone(a) {
				out = append(out, a)
			}
		}
		return out, err
	}
	return p
}

// TestAttackRevokedKeyCheckedOnce: the revoked key authenticates again from the second case on;
// without Probe.Accounts (optional) no result fails, though the property says "revoked and
// retired credentials open nothing" after every case.
func TestAttackRevokedKeyCheckedOnce(t *testing.T) {
	for _, tc := range []struct {
		name     string
		accounts bool
	}{{"probe without Accounts", false}, {"probe with Accounts", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			d := newMemory(t, memory.Config{})
			u := &undoneRevoke{Driver: d, after: 200 * time.Millisecond, revoked: map[string]time.Time{}}
			cfg := memoryConfig(serve(t, u, logr.Discard()), d, &logs)
			cfg.Probe = u.probe(cfg.Probe)
			if !tc.accounts {
				cfg.Probe.Accounts = nil
			}
			cfg.ExtraCases = []sanity.Case{sanity.NewCase("Vendor/takes a while", func(*sanity.T) {
				time.Sleep(300 * time.Millisecond)
			})}
			cfg.Run = regexp.MustCompile(`^(DriverRevokeBucketAccess/revokes the credentials|Vendor/|Store/)`)
			results := run(t, cfg)
			for _, r := range results {
				t.Logf("%s: %s %.200s", r.Name, r.Status, r.Message)
			}
			if failed := failedOrSkipped(results, sanity.Failed); len(failed) == 0 {
				t.Errorf("the key revoked in the first case authenticates again (as %v), and no result failed",
					d.Backend().Accounts())
			}
		})
	}
}

// ---------------------------------------------------------------------------------------------
// 13. A driver that refuses to delete a bucket holding objects (the project's drivers' default),
// with a probe that can write objects but not empty a bucket (each probe function is optional).

type refuseNonEmpty struct{ *memory.Driver }

func (r refuseNonEmpty) DriverDeleteBucket(
	ctx context.Context, req *cosiproto.DriverDeleteBucketRequest,
) (*cosiproto.DriverDeleteBucketResponse, error) {
	if len(r.Backend().Objects(req.GetBucketId())) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "bucket %q holds objects", req.GetBucketId())
	}
	return r.Driver.DriverDeleteBucket(ctx, req)
}

func TestAttackRefuseNonEmptyWithoutEmpty(t *testing.T) {
	for _, tc := range []struct {
		name  string
		empty bool
	}{{"probe without Empty", false}, {"probe with Empty", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			d := newMemory(t, memory.Config{})
			cfg := memoryConfig(serve(t, refuseNonEmpty{d}, logs.logger()), d, &logs)
			cfg.NonEmptyBuckets = sanity.RefuseNonEmpty
			if !tc.empty {
				cfg.Probe.Empty = nil
			}
			cfg.Seed = 42
			results := run(t, cfg)
			if failed := failedOrSkipped(results, sanity.Failed); len(failed) > 0 {
				t.Errorf("a correct driver failed:\n%s", strings.Join(failed, "\n"))
			}
			if b := d.Backend(); len(b.Buckets()) > 0 {
				t.Errorf("the suite left buckets holding its own objects: %v", b.Buckets())
			}
		})
	}
}

// ---------------------------------------------------------------------------------------------
// 14. A store with a limit of credentials per bucket (drivers/azure: five stored access policies
// per container, one per key, four kept for accesses): a grant when the bucket's policies are
// taken by other accesses' rotations is ResourceExhausted ("retried"), as drivers/azure answers.

type policyLimit struct {
	*memory.Driver
	mu                              sync.Mutex
	grantsRefused, rotationsRefused int
}

// policies counts the keys of every account granted bucket, and the accounts.
func (p *policyLimit) policies(bucket string) (keys, accounts int) {
	b := p.Backend()
	for _, a := range b.Accounts() {
		for _, g := range b.AccountBuckets(a) {
			if g == bucket {
				accounts++
				keys += len(b.AccountKeys(a))
			}
		}
	}
	return keys, accounts
}

func (p *policyLimit) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.Backend().AccountBuckets(req.GetAccountId()) == nil { // a new access
		for _, b := range req.GetBuckets() {
			keys, accounts := p.policies(b.GetBucketId())
			if accounts >= 4 {
				return nil, status.Errorf(codes.InvalidArgument, "container %q already serves 4 accesses", b.GetBucketId())
			}
			if keys >= 5 {
				p.grantsRefused++
				return nil, status.Errorf(codes.ResourceExhausted, "container %q has 5 stored access policies, Azure's "+
					"limit: another access's rotation holds its previous policy for the grace period; retried",
					b.GetBucketId())
			}
		}
	}
	return p.Driver.DriverGrantBucketAccess(ctx, req)
}

func (p *policyLimit) DriverRotateBucketAccessCredentials(
	ctx context.Context, req *cosiproto.DriverRotateBucketAccessCredentialsRequest,
) (*cosiproto.DriverRotateBucketAccessCredentialsResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	has := false
	for _, k := range p.Backend().AccountKeys(req.GetAccountId()) {
		has = has || p.Backend().CredentialID(k) == req.GetCredentialId()
	}
	if !has { // not this account's key: memory answers NotFound
		return p.Driver.DriverRotateBucketAccessCredentials(ctx, req)
	}
	for _, b := range p.Backend().AccountBuckets(req.GetAccountId()) {
		if keys, _ := p.policies(b); keys >= 5 {
			p.rotationsRefused++
			return nil, status.Errorf(codes.ResourceExhausted, "container %q has 5 stored access policies", b)
		}
	}
	return p.Driver.DriverRotateBucketAccessCredentials(ctx, req)
}

func TestAttackPolicyLimitPerBucket(t *testing.T) {
	var failed []string
	var grants, rotations int
	defer func() { t.Logf("refused: %d grants, %d rotations", grants, rotations) }()
	// Seed 26 meets the limit on a grant (1 of 160 sequences over seeds 1 to 40; a run chooses its
	// seed at random).
	for _, seed := range []uint64{26} {
		var logs logBuffer
		d := newMemory(t, memory.Config{Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
		pl := &policyLimit{Driver: d}
		cfg := memoryConfig(serve(t, pl, logr.Discard()), d, &logs)
		cfg.Seed = seed
		cfg.Run = regexp.MustCompile(`^Sequences/`)
		for _, f := range failedOrSkipped(run(t, cfg), sanity.Failed) {
			failed = append(failed, fmt.Sprintf("seed %d: %.400s", seed, f))
		}
		grants, rotations = grants+pl.grantsRefused, rotations+pl.rotationsRefused
	}
	if len(failed) > 0 {
		t.Errorf("%d sequences failed a driver that answers as drivers/azure at its policy limit:\n%s",
			len(failed), strings.Join(failed, "\n"))
	}
}

// TestHeldPartialProbes runs the whole suite with a probe missing one function at a time.
func TestHeldPartialProbes(t *testing.T) {
	for _, missing := range []string{"AccountOf", "Accounts", "Put", "Objects", "Empty", "BucketExists", "Allowed"} {
		t.Run(missing, func(t *testing.T) {
			var logs logBuffer
			d := newMemory(t, memory.Config{})
			cfg := memoryConfig(serve(t, d, logs.logger()), d, &logs)
			switch missing {
			case "AccountOf":
				cfg.Probe.AccountOf = nil
			case "Accounts":
				cfg.Probe.Accounts = nil
			case "Put":
				cfg.Probe.Put = nil
			case "Objects":
				cfg.Probe.Objects = nil
			case "Empty":
				cfg.Probe.Empty = nil
			case "BucketExists":
				cfg.Probe.BucketExists = nil
			case "Allowed":
				cfg.Probe.Allowed = nil
			}
			results := run(t, cfg)
			if failed := failedOrSkipped(results, sanity.Failed); len(failed) > 0 {
				t.Errorf("failed:\n%s", strings.Join(failed, "\n"))
			}
			if b := d.Backend(); len(b.Buckets()) > 0 || len(b.Accounts()) > 0 {
				t.Errorf("left behind: buckets %v, accounts %v", b.Buckets(), b.Accounts())
			}
		})
	}
}

// newKeyRevokeOld issues a new key on every repeated grant and revokes the one before (a store
// that allows one key per user).
type newKeyRevokeOld struct{ *memory.Driver }

func (n newKeyRevokeOld) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	resp, err := n.Driver.DriverGrantBucketAccess(ctx, req)
	if err != nil {
		return resp, err
	}
	b := n.Backend()
	for _, k := range b.AccountKeys(req.GetAccountId()) {
		if id := b.CredentialID(k); id != resp.GetCredentialId() {
			_, _ = n.Driver.DriverRetireBucketAccessCredentials(ctx, &cosiproto.DriverRetireBucketAccessCredentialsRequest{
				AccountId: req.GetAccountId(), CredentialId: id})
		}
	}
	return resp, nil
}

// TestHeldNewKeyPerRepeat: which results fail a driver that replaces the key on every repeated
// grant (against the guide's rule "the first key must keep working"); logged, for the report.
func TestHeldNewKeyPerRepeat(t *testing.T) {
	for _, tc := range []struct {
		name string
		srv  func(*memory.Driver) server
	}{
		{"new key, old revoked", func(d *memory.Driver) server { return newKeyRevokeOld{d} }},
		{"new key, old kept (NewKeyPerGrant)", func(d *memory.Driver) server { return d }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			d := newMemory(t, memory.Config{NewKeyPerGrant: true,
				Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}})
			cfg := memoryConfig(serve(t, tc.srv(d), logs.logger()), d, &logs)
			cfg.Seed = 42
			for _, f := range failedOrSkipped(run(t, cfg), sanity.Failed) {
				t.Logf("failed: %.300s", f)
			}
		})
	}
}

// ---------------------------------------------------------------------------------------------
// 15. A driver without Key access (ServiceAccount grants only), which d1ab7c3 means to support:
// "keeps the suite's bucket without a grant and skips the sequences".

// stems counts, per sequence, the new name stems (familyName's counter, whose letter wraps after
// 26: a 27th stem would reuse the first one's name).
type stems struct {
	*memory.Driver
	mu  sync.Mutex
	per map[string]int
}

var stemName = regexp.MustCompile(`^sanity-[a-z0-9]{8}-[qu]([0-9]+)[a-z]$`)

func (s *stems) see(name string) {
	if m := stemName.FindStringSubmatch(name); m != nil {
		s.mu.Lock()
		s.per[m[1]]++
		s.mu.Unlock()
	}
}

func (s *stems) DriverGenerateBucketId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketIdRequest,
) (*cosiproto.DriverGenerateBucketIdResponse, error) {
	s.see(req.GetName())
	return s.Driver.DriverGenerateBucketId(ctx, req)
}

func (s *stems) DriverGenerateBucketAccessId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketAccessIdRequest,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	s.see(req.GetAccountName())
	return s.Driver.DriverGenerateBucketAccessId(ctx, req)
}

func TestHeldFamilyStems(t *testing.T) {
	most := 0
	for seed := uint64(1); seed <= 2; seed++ {
		var logs logBuffer
		d := newMemory(t, memory.Config{})
		st := &stems{Driver: d, per: map[string]int{}}
		cfg := memoryConfig(serve(t, st, logr.Discard()), d, &logs)
		cfg.Run = regexp.MustCompile(`^Sequences/`)
		cfg.Sequences = 50
		cfg.Seed = seed
		run(t, cfg)
		for _, n := range st.per {
			most = max(most, n)
		}
	}
	if most >= 26 {
		t.Errorf("a sequence made %d name stems: past 26 the stems' letters repeat, and names meet", most)
	}
}

// ---------------------------------------------------------------------------------------------
// 16. A property broken during a sequence names the sequence but not its seed: not replayable.

// regrantLeaks is a driver whose grant of an account revoked before creates a new backend user
// and leaves the old one (without keys) behind: only the sequences grant after a revoke, and only
// the store property (Probe.Accounts) sees the user left.
type regrantLeaks struct {
	*memory.Driver
	mu        sync.Mutex
	revoked   map[string]bool
	leftovers []string
}

func (r *regrantLeaks) DriverRevokeBucketAccess(
	ctx context.Context, req *cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	r.mu.Lock()
	r.revoked[req.GetAccountId()] = true
	r.mu.Unlock()
	return r.Driver.DriverRevokeBucketAccess(ctx, req)
}

func (r *regrantLeaks) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	resp, err := r.Driver.DriverGrantBucketAccess(ctx, req)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && r.revoked[req.GetAccountId()] {
		delete(r.revoked, req.GetAccountId())
		r.leftovers = append(r.leftovers, req.GetAccountId()+"-old")
	}
	return resp, err
}

func TestAttackPropertyViolationWithoutSeed(t *testing.T) {
	var logs logBuffer
	d := newMemory(t, memory.Config{})
	r := &regrantLeaks{Driver: d, revoked: map[string]bool{}}
	cfg := memoryConfig(serve(t, r, logr.Discard()), d, &logs)
	base := cfg.Probe.Accounts
	cfg.Probe.Accounts = func(ctx context.Context) ([]string, error) {
		all, err := base(ctx)
		r.mu.Lock()
		defer r.mu.Unlock()
		return append(all, r.leftovers...), err
	}
	cfg.Run = regexp.MustCompile(`^(Sequences/|Store/)`)
	results := run(t, cfg) // a random seed, as cosi-sanity runs by default
	var caught bool
	for _, res := range results {
		if res.Status != sanity.Failed {
			continue
		}
		t.Logf("%s: %.300s", res.Name, res.Message)
		if strings.HasPrefix(res.Name, "Store/") && strings.Contains(res.Message, `after "Sequences/`) {
			caught = true
			if !strings.Contains(res.Message, "seed") {
				t.Errorf("%s broke during a sequence, and its message does not say the seed that replays it "+
					"(no other result says it: every sequence passed)", res.Name)
			}
		}
	}
	if !caught {
		t.Skip("this seed made no grant after a revoke")
	}
}
