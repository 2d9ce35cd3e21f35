// Package sanity is cosi-sanity, the conformance suite for COSI drivers: one named case per
// requirement that KEP-1979's driver section and the COSI spec's error scheme place on a driver,
// run against any driver socket. It is to COSI what csi-sanity is to CSI.
//
// Use it from Go tests with Test, or from the command line with cosi-sanity. Cases that need the
// backend's own view (is the bucket really gone, does the key really stop working) use the
// optional Probe; without it they are skipped with the reason, never reported as passed.
package sanity

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Config says which driver to test and how.
type Config struct {
	// Endpoint of the driver, unix:///path/to/driver.sock.
	Endpoint string
	// Run, when set, runs only the cases whose name matches it.
	Run *regexp.Regexp
	// Timeout bounds each RPC; zero means 30 seconds.
	Timeout time.Duration

	// BucketParameters are valid bucket parameters for the driver, used in every bucket request.
	BucketParameters map[string]string
	// InvalidBucketParameters are parameters the driver must refuse with InvalidArgument. Cases
	// that need them are skipped when nil.
	InvalidBucketParameters map[string]string
	// IncompatibleBucketParameters are valid parameters that differ from BucketParameters, so
	// that re-creating a bucket with them must fail with AlreadyExists. Skipped when nil.
	IncompatibleBucketParameters map[string]string
	// AccessParameters are valid access parameters for the driver.
	AccessParameters map[string]string
	// IncompatibleAccessParameters are valid access parameters that differ from AccessParameters
	// in a way the driver cannot apply to an existing account (another expiry, another policy), so
	// that granting an account again with them must fail with AlreadyExists. Skipped when nil.
	IncompatibleAccessParameters map[string]string
	// InvalidAccessParameters are access parameters the driver must refuse with InvalidArgument.
	InvalidAccessParameters map[string]string
	// BucketParameterKeys and AccessParameterKeys declare the parameter keys the driver documents
	// (driver.CheckParameterKeys checks them). Optional: when set, the suite checks that the
	// parameters above use only these keys, and sends a key outside them to see it refused with
	// InvalidArgument; when nil it sends its own key, UnknownParameterKey.
	BucketParameterKeys, AccessParameterKeys []string
	// StaticBucketID is a bucket that exists in the backend, for DriverGetBucket. When empty the
	// suite creates one through the driver.
	StaticBucketID string

	// Probe looks at the backend directly. Optional.
	Probe Probe
	// DriverLogs returns everything the driver has logged so far, for the case that checks that
	// no credential reaches the logs. Run the driver at its highest verbosity. Optional.
	DriverLogs func() ([]byte, error)

	// NonEmptyBuckets is what DriverDeleteBucket does, with BucketParameters, to a bucket that
	// holds objects, as the driver documents it: RefuseNonEmpty (FailedPrecondition, nothing
	// deleted) or PurgeNonEmpty (the bucket deleted with its objects). Empty accepts either, as the
	// protocol does (docs/writing-a-driver.md); a driver whose parameters choose should say which
	// the parameters given choose, so that the suite catches a driver that purges data it was
	// configured to keep.
	NonEmptyBuckets string

	// Settle is how long an effect of a driver call may take to show in the backend (a grant
	// opening a bucket, a revoke or retirement closing it, a deleted bucket gone), for stores that
	// apply changes eventually: each check of an effect asks the probe again until it sees the
	// effect, for at most this long, and the suite reports how long effects took
	// (SettleReport). Zero means at once: a driver must not return before what it did is in
	// effect (docs/writing-a-driver.md, "When a call returns").
	Settle time.Duration
	// Seed chooses the random operations of the generated sequences (SequenceCases); zero means
	// one chosen at random. Each sequence's result names its seed: run again with it to replay the
	// sequence.
	Seed uint64
	// Sequences is how many generated sequences of operations to run, each of SequenceSteps
	// operations; zero means DefaultSequences, and a negative number none.
	Sequences int

	// ExtraCases are the vendor's own cases (NewCase), run after the suite's against a v1alpha2
	// driver, through the same error-scheme and secret checks, and selected by Run like them.
	// Their names must differ from the suite's. Optional.
	ExtraCases []Case
}

// The values of Config.NonEmptyBuckets.
const (
	RefuseNonEmpty = "refuse"
	PurgeNonEmpty  = "purge"
)

// UnknownParameterKey is the parameter key the suite adds to valid parameters to check that the
// driver refuses keys it does not know. A driver that passes unknown keys through to the backend
// (tags, say) cannot pass those cases: deselect them with Config.Run and say so in its docs.
const UnknownParameterKey = "cosiSanityUnknownKey"

// Category is one of the three kinds of data KEP-1979 separates access modes for.
type Category int

// The categories, in KEP-1979's order.
const (
	// ObjectData is reading and writing objects (get, put, list, delete).
	ObjectData Category = iota
	// ObjectMetadata is reading and writing objects' metadata (tags, ACLs).
	ObjectMetadata
	// BucketMetadata is reading and writing the bucket's own metadata (tags, versioning).
	BucketMetadata
)

func (c Category) String() string {
	return [...]string{"object data", "object metadata", "bucket metadata"}[c]
}

// AccessCheck asks whether credentials can read (Write false) or write (Write true) a category
// of a bucket's data.
type AccessCheck struct {
	Protocol cosiproto.ObjectProtocol_Type
	// Credentials are what the grant returned: a key for a KEY grant; for a SERVICE_ACCOUNT grant
	// no key, but what a workload's Secret holds besides its bucket info (for S3 on IAM, the role
	// to assume), possibly nothing.
	Credentials *cosiproto.CredentialInfo
	// ServiceAccount is set for a SERVICE_ACCOUNT grant: the probe acts as a workload running as
	// that Kubernetes ServiceAccount (the backend identity the driver maps it to), with the
	// Credentials as its Secret.
	ServiceAccount *cosiproto.ServiceAccount
	BucketID       string
	BucketInfo     *cosiproto.ProtocolBucketInfo
	Category       Category
	Write          bool
}

// Probe looks at the backend directly, outside the driver, with the backend's own admin view. Each
// function is optional; the cases that need a missing one are skipped, and Cases says which case
// needs which.
//
// Account names are compared only with each other (Accounts before and after a call, AccountOf
// against Accounts), never with COSI's account_id: a driver may name its backend users as it likes.
type Probe struct {
	// BucketExists reports whether the backend holds the bucket with this bucket_id.
	BucketExists func(ctx context.Context, bucketID string) (bool, error)
	// Accounts lists every backend account (user, identity, service principal) that could hold
	// bucket access, including ones without keys or policies: an account left behind by a revoke
	// must show here.
	Accounts func(ctx context.Context) ([]string, error)
	// Allowed performs (or simulates exactly) the access and reports whether the backend allowed
	// it. An access the backend refuses for lack of permission, with a revoked or unknown key, or
	// because the bucket does not exist is false with a nil error; the error is for failures to
	// ask (the backend is unreachable). Reading an object that does not exist counts as allowed
	// when the backend answers "no such object" rather than "access denied".
	Allowed func(ctx context.Context, check AccessCheck) (bool, error)
	// AccountOf reports which backend account (as Accounts names it) the credentials authenticate
	// as, or "" when they authenticate as none (never issued, deleted or revoked).
	AccountOf func(ctx context.Context, creds *cosiproto.CredentialInfo) (string, error)

	// Put writes an object named key into the check's bucket with the check's credentials (or as
	// its ServiceAccount), as a workload would, and leaves it there; it reports whether the
	// backend allowed it (Allowed's rules). The suite writes the object that makes a bucket
	// non-empty with it, and the markers of the buckets it keeps through the run.
	Put func(ctx context.Context, check AccessCheck, key string) (bool, error)
	// Objects lists the names of the objects in the bucket, as the backend's administrator (up to
	// a thousand: the suite's buckets hold a few). A missing bucket is an empty list.
	Objects func(ctx context.Context, bucketID string) ([]string, error)
	// Empty deletes every object of the bucket as the administrator (every version, and
	// unfinished uploads), so that the suite can delete the buckets it made non-empty from a
	// driver that refuses to delete a bucket holding objects (FailedPrecondition). A missing
	// bucket is no error.
	Empty func(ctx context.Context, bucketID string) error
}

// Status is the outcome of a case.
type Status string

// The outcomes of a case.
const (
	// Passed: the driver did what the spec requires.
	Passed Status = "passed"
	// Failed: the driver did not; the Result says how.
	Failed Status = "failed"
	// Skipped: the case could not run (a protocol, parameter or probe it needs is missing).
	Skipped Status = "skipped"
)

// Result is the outcome of one case.
type Result struct {
	Name   string
	Status Status
	// Message says why the case failed or was skipped, with every secret the driver returned
	// replaced by Redacted.
	Message  string
	Duration time.Duration
}

// Case is one requirement on drivers.
type Case struct {
	Name string
	run  func(t *T)
}

// Cases lists every case, in the order they run.
func Cases() []Case { return slices.Concat(cases, sequenceCases(DefaultSequences)) }

// NewCase returns a case of the vendor's own, for Config.ExtraCases: run calls the driver through
// T's Identity and Provisioner and reports with Errorf, Fatalf and Skipf, as the suite's cases do.
func NewCase(name string, run func(t *T)) Case { return Case{Name: name, run: run} }

// Run runs the selected cases against the driver and returns their results. The error is for
// failures to run at all (no driver), not for failed cases.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	s, err := newSuite(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer s.conn.Close()
	s.startStore(ctx)
	var results []Result
	for _, c := range s.runnable() {
		if cfg.Run != nil && !cfg.Run.MatchString(c.Name) {
			continue
		}
		results = append(results, s.runCase(ctx, c))
	}
	s.stopStore(ctx)
	results = append(results, s.storeResults()...)
	// Redacted once all cases ran, with every secret of the run: the driver may return as a
	// secret a value it put in an earlier case's ID or error.
	for i := range results {
		results[i].Message = s.red.redact(results[i].Message)
	}
	return results, nil
}

// Test runs the suite as subtests of t, one per case: failed cases fail, skipped cases skip.
func Test(t *testing.T, cfg Config) {
	t.Helper()
	s, err := newSuite(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.conn.Close() })
	s.startStore(t.Context())
	report := func(t *testing.T, r Result) {
		r.Message = s.red.redact(r.Message)
		switch r.Status {
		case Failed:
			t.Error(r.Message)
		case Skipped:
			t.Skip(r.Message)
		}
	}
	for _, c := range s.runnable() {
		if cfg.Run != nil && !cfg.Run.MatchString(c.Name) {
			continue
		}
		t.Run(c.Name, func(t *testing.T) { report(t, s.runCase(t.Context(), c)) })
	}
	s.stopStore(t.Context())
	for _, r := range s.storeResults() {
		t.Run(r.Name, func(t *testing.T) { report(t, r) })
	}
}

// suite is one run against one driver.
type suite struct {
	cfg      Config
	conn     *grpc.ClientConn
	identity cosiproto.IdentityClient
	prov     cosiproto.ProvisionerClient
	info     *cosiproto.DriverGetInfoResponse
	prefix   string // makes this run's names unique in the backend
	protocol string // driverclient.ProtocolV1alpha2 or ProtocolV1alpha1 (v1alpha1.go)
	seed     uint64 // of the generated sequences (Config.Seed)

	mu         sync.Mutex
	violations []string // error scheme violations seen by the interceptor during the current case
	secrets    []string // every secret value the driver returned during the run
	// red redacts those secrets from every Result's message (Redacted).
	red *redactor

	// The store properties (store.go): the ledger of what the driver's answers say the backend
	// holds (nil for a v1alpha1 driver), the case running, and what broke.
	ledger             *ledger
	current            string
	propertyViolations []propertyViolation
	cleanupFailures    []string
	baseline, reported map[string]bool // backend accounts there before the run; accounts reported
	keep               *keeper         // the bucket and grant the suite keeps through the run
	effects            []time.Duration // how long each effect checked took to show (Settle)
}

func newSuite(ctx context.Context, cfg Config) (*suite, error) {
	if _, err := driver.ParseEndpoint(cfg.Endpoint); err != nil {
		return nil, err
	}
	if err := checkExtraCases(cfg.ExtraCases); err != nil {
		return nil, err
	}
	if n := cfg.NonEmptyBuckets; n != "" && n != RefuseNonEmpty && n != PurgeNonEmpty {
		return nil, fmt.Errorf("sanity: Config.NonEmptyBuckets %q: want %q, %q or empty", n, RefuseNonEmpty, PurgeNonEmpty)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	s := &suite{cfg: cfg, prefix: "sanity-" + strings.ToLower(rand.Text()[:8]) + "-", red: newRedactor(), seed: cfg.Seed}
	for s.seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		s.seed = binary.LittleEndian.Uint64(b[:]) >> 1 // printable as a positive number everywhere
	}
	conn, err := grpc.NewClient(cfg.Endpoint,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(s.intercept))
	if err != nil {
		return nil, err
	}
	s.conn = conn
	s.identity = cosiproto.NewIdentityClient(conn)
	s.prov = cosiproto.NewProvisionerClient(conn)
	// Wait for the driver, as the sidecar does, but not forever.
	probeCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if err := s.detect(probeCtx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("driver at %s: detecting its protocol: %w", cfg.Endpoint, err)
	}
	if s.protocol == driverclient.ProtocolV1alpha1 {
		return s, nil // v1alpha1Cases ask DriverGetInfo themselves
	}
	for {
		s.info, err = s.identity.DriverGetInfo(probeCtx, &cosiproto.DriverGetInfoRequest{})
		if err == nil || !driver.Retryable(err) || probeCtx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("driver at %s does not answer DriverGetInfo: %w", cfg.Endpoint, err)
	}
	return s, nil
}

// intercept applies the COSI error scheme to every call (a failed call carries a message and no
// details) and collects every secret the driver returns, for the log-leak case and the redactor,
// with the strings it returns in the open (the redactor's exceptions).
func (s *suite) intercept(
	ctx context.Context,
	method string,
	req, reply any,
	cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker,
	opts ...grpc.CallOption,
) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	err := invoker(ctx, method, req, reply, cc, opts...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		st := status.Convert(err)
		name := method[strings.LastIndex(method, "/")+1:]
		if len(st.Details()) > 0 || len(st.Proto().GetDetails()) > 0 {
			s.violations = append(
				s.violations,
				fmt.Sprintf("%s returned %v with status details; the COSI spec requires them to be empty", name, st.Code()),
			)
		}
		for _, secret := range s.secrets {
			if len(secret) >= 8 && strings.Contains(st.Message(), secret) {
				s.violations = append(s.violations, fmt.Sprintf(
					"%s returned %v with a message that contains a credential the driver returned (value not shown)",
					name, st.Code()))
				break
			}
		}
		if st.Code() != codes.OK && st.Message() == "" {
			s.violations = append(
				s.violations,
				fmt.Sprintf("%s returned %v without a message; the COSI spec requires a readable one", name, st.Code()),
			)
		}
		return err
	}
	if s.ledger != nil {
		s.record(req, reply)
	}
	if m, ok := reply.(proto.Message); ok {
		secrets, open := replyStrings(m.ProtoReflect())
		s.secrets = append(s.secrets, secrets...)
		for _, v := range secrets {
			s.red.addSecret(v)
		}
		for _, v := range open {
			s.red.addOpen(v)
		}
	}
	return nil
}

// runCase runs c in its own goroutine, so that Fatalf and Skipf can end it like testing.T does.
// The Result's message is not redacted yet: Run and Test redact it (Redacted).
func (s *suite) runCase(ctx context.Context, c Case) Result {
	s.mu.Lock()
	s.violations = nil
	s.current = c.Name
	s.mu.Unlock()
	t := &T{ctx: ctx, s: s, caseName: c.Name}
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				t.fail(fmt.Sprintf("panic: %v", r))
			}
		}()
		defer t.runCleanups()
		c.run(t)
	}()
	<-done
	s.checkStore(ctx, c.Name)

	s.mu.Lock()
	for _, v := range s.violations {
		t.fail(v)
	}
	s.mu.Unlock()
	r := Result{Name: c.Name, Duration: time.Since(start), Status: Passed}
	switch {
	case len(t.failures) > 0:
		r.Status, r.Message = Failed, strings.Join(t.failures, "; ")
	case t.skipReason != "":
		r.Status, r.Message = Skipped, t.skipReason
	}
	return r
}

// T is what a case uses to call the driver and report its outcome.
type T struct {
	ctx        context.Context
	s          *suite
	caseName   string
	failures   []string
	skipReason string
	cleanups   []func()
}

// checkExtraCases refuses extra cases without a name or function, or with a name already taken.
func checkExtraCases(extra []Case) error {
	names := map[string]bool{}
	for _, c := range slices.Concat(Cases(), v1alpha1Cases) {
		names[c.Name] = true
	}
	for i, c := range extra {
		switch {
		case c.Name == "":
			return fmt.Errorf("sanity: Config.ExtraCases[%d]: no name", i)
		case c.run == nil:
			return fmt.Errorf("sanity: Config.ExtraCases[%d] (%q): no function (use NewCase)", i, c.Name)
		case names[c.Name]:
			return fmt.Errorf("sanity: Config.ExtraCases[%d]: the name %q is taken", i, c.Name)
		}
		names[c.Name] = true
	}
	return nil
}

// Context is the case's context: pass it to every call.
func (t *T) Context() context.Context { return t.ctx }

// Identity is the driver's Identity service.
func (t *T) Identity() cosiproto.IdentityClient { return t.s.identity }

// Provisioner is the driver's Provisioner service.
func (t *T) Provisioner() cosiproto.ProvisionerClient { return t.s.prov }

// Config is the suite's configuration: the parameters and the Probe.
func (t *T) Config() Config { return t.s.cfg }

// Name returns a name unique to this run (kind is a short prefix such as "b" or "a"), valid as an
// S3 bucket name: for bucket names and account names, so that runs do not meet in the backend.
func (t *T) Name(kind string) string { return t.name(kind) }

// Errorf records a failure and continues.
func (t *T) Errorf(format string, args ...any) { t.fail(fmt.Sprintf(format, args...)) }

// Fatalf records a failure and ends the case.
func (t *T) Fatalf(format string, args ...any) {
	t.fail(fmt.Sprintf(format, args...))
	runtime.Goexit()
}

// Skipf ends the case as skipped, with the reason.
func (t *T) Skipf(format string, args ...any) {
	t.skipReason = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (t *T) fail(msg string) { t.failures = append(t.failures, msg) }

// Cleanup registers f to run when the case ends, last registered first.
func (t *T) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }

func (t *T) runCleanups() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
