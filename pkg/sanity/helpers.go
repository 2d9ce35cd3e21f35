package sanity

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/pkg/driver"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

var nameCounter atomic.Int64

// name returns a name unique to this run, valid as an S3 bucket name. The suite chose it: a
// secret that embeds it (a SAS token's URI) does not make it secret (Redacted).
func (t *T) name(kind string) string {
	name := fmt.Sprintf("%s%s%d", t.s.prefix, kind, nameCounter.Add(1))
	t.s.red.addOpen(name)
	return name
}

// ok ends the case when err is not nil.
func (t *T) ok(err error, what string) {
	if err != nil {
		st := status.Convert(err)
		t.Fatalf("%s: unexpected error %v: %s", what, st.Code(), st.Message())
	}
}

// code ends the case unless err has one of the wanted codes.
func (t *T) code(err error, what string, want ...codes.Code) {
	got := status.Code(err)
	if !slices.Contains(want, got) {
		if err == nil {
			t.Fatalf("%s: returned OK, want %v", what, want)
		}
		t.Fatalf("%s: returned %v (%s), want %v", what, got, status.Convert(err).Message(), want)
	}
}

// protocols returns the protocols the driver advertises.
func (t *T) protocols() []cosiproto.ObjectProtocol_Type { return t.s.info.GetSupportedProtocols() }

// unsupportedProtocol returns a protocol the driver does not advertise, or skips the case.
func (t *T) unsupportedProtocol() cosiproto.ObjectProtocol_Type {
	all := []cosiproto.ObjectProtocol_Type{
		cosiproto.ObjectProtocol_S3, cosiproto.ObjectProtocol_AZURE, cosiproto.ObjectProtocol_GCS,
	}
	for _, p := range all {
		if !slices.Contains(t.protocols(), p) {
			return p
		}
	}
	t.Skipf("the driver supports every protocol")
	return cosiproto.ObjectProtocol_UNKNOWN
}

// createBucket provisions a bucket in two phases, as the sidecar does, and deletes it when the case
// ends. It returns the bucket ID and the creation response.
func (t *T) createBucket(protocols ...cosiproto.ObjectProtocol_Type) (string, *cosiproto.DriverCreateBucketResponse) {
	gen, err := t.s.prov.DriverGenerateBucketId(t.ctx, &cosiproto.DriverGenerateBucketIdRequest{
		Name: t.name("b"), Protocols: protocols, Parameters: t.s.cfg.BucketParameters,
	})
	t.ok(err, "DriverGenerateBucketId")
	id := gen.GetBucketId()
	if id == "" {
		t.Fatalf("DriverGenerateBucketId returned an empty bucket_id")
	}
	resp, err := t.s.prov.DriverCreateBucket(t.ctx, &cosiproto.DriverCreateBucketRequest{
		BucketId: id, Protocols: protocols, Parameters: t.s.cfg.BucketParameters,
	})
	t.ok(err, "DriverCreateBucket")
	t.Cleanup(func() { t.deleteBucket(id) })
	return id, resp
}

// deleteBucket is the cleanup of a bucket the case created: a failure is the cleanup's
// (CleanupProperty), not the case's. A driver that refuses to delete a bucket holding objects
// (FailedPrecondition) gets it emptied through the probe first (Probe.Empty).
func (t *T) deleteBucket(id string) {
	if err := t.s.deleteBucket(t.ctx, id); err != nil {
		t.cleanupFail("%v", err)
	}
}

// cleanupFail reports a failure of the case's cleanup under CleanupProperty, or, when Config.Run
// does not select that result, under the case, so that it is never lost.
func (t *T) cleanupFail(format string, args ...any) {
	if t.s.selected(CleanupProperty) {
		t.s.cleanupFail(t.caseName, format, args...)
		return
	}
	t.Errorf("cleanup: "+format, args...)
}

// grant is an access request, built by accessRequest and sent by grant.
type grant struct {
	buckets  []*cosiproto.AccessedBucket
	protocol cosiproto.ObjectProtocol_Type
	auth     cosiproto.AuthenticationType_Type
	sa       *cosiproto.ServiceAccount
	params   map[string]string
}

// keyGrant asks for Key-authenticated access to the buckets with the modes, in the protocol.
func (t *T) keyGrant(protocol cosiproto.ObjectProtocol_Type, modes *cosiproto.AccessModes, bucketIDs ...string) grant {
	g := grant{protocol: protocol, auth: cosiproto.AuthenticationType_KEY, params: t.s.cfg.AccessParameters}
	for _, id := range bucketIDs {
		g.buckets = append(g.buckets, &cosiproto.AccessedBucket{BucketId: id, AccessModes: modes})
	}
	return g
}

func (g grant) generateRequest(accountName string) *cosiproto.DriverGenerateBucketAccessIdRequest {
	return &cosiproto.DriverGenerateBucketAccessIdRequest{
		AccountName:        accountName,
		Buckets:            g.buckets,
		Protocol:           g.protocol,
		AuthenticationType: g.auth,
		ServiceAccount:     g.sa,
		Parameters:         g.params,
	}
}

func (g grant) grantRequest(accountID string) *cosiproto.DriverGrantBucketAccessRequest {
	return &cosiproto.DriverGrantBucketAccessRequest{AccountId: accountID, Buckets: g.buckets, Protocol: g.protocol,
		AuthenticationType: g.auth, ServiceAccount: g.sa, Parameters: g.params}
}

func (g grant) revokeRequest(accountID string) *cosiproto.DriverRevokeBucketAccessRequest {
	req := &cosiproto.DriverRevokeBucketAccessRequest{AccountId: accountID, Protocol: g.protocol,
		AuthenticationType: g.auth, ServiceAccount: g.sa, Parameters: g.params}
	for _, b := range g.buckets {
		req.Buckets = append(req.Buckets, &cosiproto.DriverRevokeBucketAccessRequest_Bucket{BucketId: b.GetBucketId()})
	}
	return req
}

// grant provisions access in two phases, as the sidecar does, and revokes it when the case ends.
// It returns the account ID, the response and the error of whichever phase failed.
func (t *T) grant(g grant) (string, *cosiproto.DriverGrantBucketAccessResponse, error) {
	return t.grantAs(g, t.name("a"))
}

// grantAs is grant with the account name given.
func (t *T) grantAs(g grant, accountName string) (string, *cosiproto.DriverGrantBucketAccessResponse, error) {
	gen, err := t.s.prov.DriverGenerateBucketAccessId(t.ctx, g.generateRequest(accountName))
	if err != nil {
		return "", nil, err
	}
	id := gen.GetAccountId()
	if id == "" {
		t.Fatalf("DriverGenerateBucketAccessId returned an empty account_id")
	}
	resp, err := t.s.prov.DriverGrantBucketAccess(t.ctx, g.grantRequest(id))
	if err != nil {
		return id, nil, err
	}
	t.Cleanup(func() {
		if _, err := t.s.prov.DriverRevokeBucketAccess(t.ctx, g.revokeRequest(id)); err != nil {
			st := status.Convert(err)
			t.cleanupFail("DriverRevokeBucketAccess %q: %v: %s", id, st.Code(), st.Message())
		}
	})
	return id, resp, nil
}

// revokeNow revokes a granted access before the case ends (grant's cleanup revokes it again,
// which must be OK), for the cases that grant many accesses to one bucket: a store may limit
// them (Azure allows five stored access policies per container), and the suite holds no more
// than five at a time.
func (t *T) revokeNow(g grant, accountID string) {
	_, err := t.s.prov.DriverRevokeBucketAccess(t.ctx, g.revokeRequest(accountID))
	t.ok(err, "DriverRevokeBucketAccess")
}

// widestGrant grants Key access to the buckets with every mode READ_WRITE, or, when the driver
// refuses that with InvalidArgument (KEP-1979's answer for a mode it cannot honour), with the
// widest modes it accepts: without bucket metadata, then object data alone. The cases that look at
// every category after a grant use it, so that a driver that cannot grant one is not failed for
// refusing it; the categories it did not grant must be denied all the same. It returns the grant
// made (for its revoke request) and what grant returns.
func (t *T) widestGrant(
	protocol cosiproto.ObjectProtocol_Type, bucketIDs ...string,
) (grant, string, *cosiproto.DriverGrantBucketAccessResponse, error) {
	var (
		g       grant
		account string
		resp    *cosiproto.DriverGrantBucketAccessResponse
		err     error
	)
	for _, modes := range []*cosiproto.AccessModes{allModes, objectModes, readWrite} {
		g = t.keyGrant(protocol, modes, bucketIDs...)
		if account, resp, err = t.grant(g); status.Code(err) != codes.InvalidArgument {
			break
		}
	}
	return g, account, resp, err
}

// allowed asks the probe whether creds can access a bucket, or skips the case without a probe.
// Within the settle window (Config.Settle) it asks again until the backend answers want.
func (t *T) allowed(
	want bool,
	protocol cosiproto.ObjectProtocol_Type,
	creds *cosiproto.CredentialInfo,
	bucketID string,
	info *cosiproto.ProtocolBucketInfo,
	c Category,
	write bool,
) bool {
	if t.s.cfg.Probe.Allowed == nil {
		t.Skipf("needs a backend probe (Probe.Allowed) to check what the credentials can do")
	}
	check := AccessCheck{Protocol: protocol, Credentials: creds, BucketID: bucketID, BucketInfo: info, Category: c,
		Write: write}
	ok, err := t.s.settleBool(t.ctx, func(ctx context.Context) (bool, error) { return t.s.cfg.Probe.Allowed(ctx, check) },
		want)
	if err != nil {
		t.Fatalf(
			"probe: checking %v %s access to %q: %v",
			c,
			map[bool]string{true: "write", false: "read"}[write],
			bucketID,
			err,
		)
	}
	return ok
}

// allowedAs asks the probe whether a workload running as the ServiceAccount, with the Secret of
// the grant resp (its bucket info, and its credentials: no key, but for instance a role to
// assume), can access a bucket.
func (t *T) allowedAs(
	want bool,
	protocol cosiproto.ObjectProtocol_Type,
	sa *cosiproto.ServiceAccount,
	resp *cosiproto.DriverGrantBucketAccessResponse,
	bucketID string,
	c Category,
	write bool,
) bool {
	if t.s.cfg.Probe.Allowed == nil {
		t.Skipf("needs a backend probe (Probe.Allowed) to check what the ServiceAccount can do")
	}
	check := AccessCheck{
		Protocol: protocol, ServiceAccount: sa, Credentials: resp.GetCredentials(), BucketID: bucketID,
		BucketInfo: bucketInfoFor(resp, bucketID), Category: c, Write: write,
	}
	ok, err := t.s.settleBool(t.ctx, func(ctx context.Context) (bool, error) { return t.s.cfg.Probe.Allowed(ctx, check) },
		want)
	if err != nil {
		t.Fatalf("probe: checking the ServiceAccount's %v access to %q: %v", c, bucketID, err)
	}
	return ok
}

// anyAccount, as accountOf's want, waits for some account.
const anyAccount = "\x00any"

// accountOf asks the probe which backend account creds authenticate as; ok is false without
// Probe.AccountOf. Within the settle window it asks again until the answer is want (anyAccount:
// any account).
func (t *T) accountOf(creds *cosiproto.CredentialInfo, want string) (account string, ok bool) {
	if t.s.cfg.Probe.AccountOf == nil {
		return "", false
	}
	account, err := t.s.settleString(t.ctx,
		func(ctx context.Context) (string, error) { return t.s.cfg.Probe.AccountOf(ctx, creds) }, want)
	if err != nil {
		t.Fatalf("probe: which account the credentials authenticate as: %v", err)
	}
	return account, true
}

// needProbe skips the case unless the probe has every function named.
func (t *T) needProbe(names ...string) {
	p := t.s.cfg.Probe
	has := map[string]bool{
		"BucketExists": p.BucketExists != nil, "Accounts": p.Accounts != nil,
		"Allowed": p.Allowed != nil, "AccountOf": p.AccountOf != nil,
		"Put": p.Put != nil, "Objects": p.Objects != nil, "Empty": p.Empty != nil,
	}
	for _, n := range names {
		if !has[n] {
			t.Skipf("needs a backend probe (Probe.%s)", n)
		}
	}
}

// withUnknownKey returns params plus a key the driver does not know. With declared keys, it first
// checks that params only use them.
func (t *T) withUnknownKey(params map[string]string, declared []string) map[string]string {
	out := map[string]string{UnknownParameterKey: "x"}
	for k, v := range params {
		if declared != nil && !slices.Contains(declared, k) {
			t.Fatalf("configuration: parameter key %q is not among the declared keys %v", k, declared)
		}
		out[k] = v
	}
	return out
}

// put writes an object into a bucket with the credentials, through the probe (Probe.Put), and
// reports whether the backend allowed it; it skips the case without Probe.Put.
func (t *T) put(check AccessCheck, key string) bool {
	if t.s.cfg.Probe.Put == nil {
		t.Skipf("needs a backend probe (Probe.Put) to write an object")
	}
	check.Category, check.Write = ObjectData, true
	ok, err := t.s.settleBool(t.ctx, func(ctx context.Context) (bool, error) { return t.s.cfg.Probe.Put(ctx, check, key) },
		true)
	if err != nil {
		t.Fatalf("probe: writing object %q into bucket %q: %v", key, check.BucketID, err)
	}
	return ok
}

// objects lists a bucket's objects through the probe (Probe.Objects); ok is false without it.
func (t *T) objects(id string) (objects []string, ok bool) {
	if t.s.cfg.Probe.Objects == nil {
		return nil, false
	}
	objects, err := t.s.cfg.Probe.Objects(t.ctx, id)
	if err != nil {
		t.Fatalf("probe: the objects of bucket %q: %v", id, err)
	}
	return objects, true
}

// bucketExists asks the probe whether the bucket exists, within the settle window until the
// answer is want; it skips the case without Probe.BucketExists.
func (t *T) bucketExists(want bool, id string) bool {
	if t.s.cfg.Probe.BucketExists == nil {
		t.Skipf("needs a backend probe (Probe.BucketExists) to see the backend's buckets")
	}
	exists := func(ctx context.Context) (bool, error) { return t.s.cfg.Probe.BucketExists(ctx, id) }
	ok, err := t.s.settleBool(t.ctx, exists, want)
	if err != nil {
		t.Fatalf("probe: does bucket %q exist: %v", id, err)
	}
	return ok
}

// accountsSettled lists the backend's accounts, within the settle window until done says the
// list is what the case waits for.
func (t *T) accountsSettled(done func([]string) bool) []string {
	list := t.accounts()
	if t.s.cfg.Settle == 0 || done(list) {
		return list
	}
	_, _ = t.s.settleBool(t.ctx, func(ctx context.Context) (bool, error) {
		l, err := t.s.cfg.Probe.Accounts(ctx)
		if err == nil {
			list = l
		}
		return done(l), err
	}, true)
	return list
}

func (t *T) accounts() []string {
	if t.s.cfg.Probe.Accounts == nil {
		t.Skipf("needs a backend probe (Probe.Accounts) to see the backend's accounts")
	}
	accounts, err := t.s.cfg.Probe.Accounts(t.ctx)
	if err != nil {
		t.Fatalf("probe: listing accounts: %v", err)
	}
	return accounts
}

// bucketInfoFor returns the bucket info of bucketID in a grant response.
func bucketInfoFor(resp *cosiproto.DriverGrantBucketAccessResponse, bucketID string) *cosiproto.ProtocolBucketInfo {
	for _, b := range resp.GetBuckets() {
		if b.GetBucketId() == bucketID {
			return b.GetBucketInfo()
		}
	}
	return nil
}

var (
	readWrite = &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}
	readOnly  = &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_ONLY}
	allModes  = &cosiproto.AccessModes{
		ObjectData:     cosiproto.AccessMode_READ_WRITE,
		ObjectMetadata: cosiproto.AccessMode_READ_WRITE,
		BucketMetadata: cosiproto.AccessMode_READ_WRITE,
	}
	objectModes = &cosiproto.AccessModes{
		ObjectData:     cosiproto.AccessMode_READ_WRITE,
		ObjectMetadata: cosiproto.AccessMode_READ_WRITE,
	}
)

func rw(write bool) string { return map[bool]string{true: "write", false: "read"}[write] }

// rotationCase is a granted access whose credential was rotated once.
type rotationCase struct {
	t         *T
	g         grant
	account   string
	bucketID  string
	grantResp *cosiproto.DriverGrantBucketAccessResponse
	rotated   *cosiproto.DriverRotateBucketAccessCredentialsResponse
}

// rotatableGrant grants access to a new bucket. It skips the case for a driver that grants
// without a credential_id: its credentials cannot rotate (rotation is optional).
func (t *T) rotatableGrant() rotationCase {
	p := t.protocols()[0]
	id, _ := t.createBucket(p)
	r := rotationCase{t: t, g: t.keyGrant(p, readWrite, id), bucketID: id}
	var err error
	r.account, r.grantResp, err = t.grant(r.g)
	t.ok(err, "grant")
	if r.grantResp.GetCredentialId() == "" {
		t.Skipf("the driver grants without a credential_id: its credentials cannot rotate")
	}
	return r
}

// rotation is rotatableGrant, then one rotation of the credential. It skips the case for a driver
// that answers Unimplemented.
func (t *T) rotation() rotationCase {
	r := t.rotatableGrant()
	var err error
	r.rotated, err = t.s.prov.DriverRotateBucketAccessCredentials(t.ctx, r.rotateRequest(r.grantResp.GetCredentialId()))
	if status.Code(err) == codes.Unimplemented {
		t.Skipf("the driver does not rotate credentials (DriverRotateBucketAccessCredentials: Unimplemented)")
	}
	t.ok(err, "DriverRotateBucketAccessCredentials")
	return r
}

func (r rotationCase) rotateRequest(credentialID string) *cosiproto.DriverRotateBucketAccessCredentialsRequest {
	return &cosiproto.DriverRotateBucketAccessCredentialsRequest{
		AccountId: r.account, Buckets: r.g.buckets, Protocol: r.g.protocol,
		AuthenticationType: r.g.auth, ServiceAccount: r.g.sa, Parameters: r.g.params, CredentialId: credentialID,
	}
}

func (r rotationCase) retireRequest(credentialID string) *cosiproto.DriverRetireBucketAccessCredentialsRequest {
	return &cosiproto.DriverRetireBucketAccessCredentialsRequest{
		AccountId: r.account, CredentialId: credentialID, Protocol: r.g.protocol, Parameters: r.g.params,
	}
}

// works reports whether the credentials read the case's bucket, per the backend probe (within
// the settle window until the answer is want).
func (r rotationCase) works(want bool, creds *cosiproto.CredentialInfo) bool {
	return r.t.allowed(want, r.g.protocol, creds, r.bucketID, bucketInfoFor(r.grantResp, r.bucketID), ObjectData, false)
}

// bucketInfoDiffs describes each field that both infos set and that differs (bucket name,
// endpoint, region, storage account, project): what a grant says about a bucket must match what
// DriverCreateBucket said. Fields only one of them sets are not compared: they are optional in
// DriverCreateBucket's response.
func bucketInfoDiffs(created, granted *cosiproto.ProtocolBucketInfo) []string {
	var diffs []string
	cmp := func(field, c, g string) {
		if c != "" && g != "" && c != g {
			diffs = append(diffs, fmt.Sprintf("%s %q where DriverCreateBucket returned %q", field, g, c))
		}
	}
	if c, g := created.GetS3(), granted.GetS3(); c != nil && g != nil {
		cmp("S3 bucket_name", c.GetBucketName(), g.GetBucketName())
		cmp("S3 endpoint", c.GetEndpoint(), g.GetEndpoint())
		cmp("S3 region", c.GetRegion(), g.GetRegion())
	}
	if c, g := created.GetAzure(), granted.GetAzure(); c != nil && g != nil {
		cmp("Azure storage_account", c.GetStorageAccount(), g.GetStorageAccount())
	}
	if c, g := created.GetGcs(), granted.GetGcs(); c != nil && g != nil {
		cmp("GCS project_id", c.GetProjectId(), g.GetProjectId())
		cmp("GCS bucket_name", c.GetBucketName(), g.GetBucketName())
	}
	return diffs
}

// hasKey reports whether creds hold key material of any protocol: what a SERVICE_ACCOUNT grant
// must not return (what it may return, such as an S3 role to assume, is no key).
func hasKey(creds *cosiproto.CredentialInfo) bool {
	s3, azure, gcs := creds.GetS3(), creds.GetAzure(), creds.GetGcs()
	return s3.GetAccessKeyId() != "" || s3.GetAccessSecretKey() != "" || azure.GetAccessToken() != "" ||
		gcs.GetPrivateKey() != "" || gcs.GetHmacAccessId() != "" || gcs.GetHmacSecret() != ""
}

// usage tells whether the driver advertises BUCKET_USAGE (DriverGetBucketUsage).
func (t *T) usage() bool {
	return driver.HasCapability(t.s.info, cosiproto.DriverCapability_BUCKET_USAGE)
}

// needUsage skips the case unless the driver advertises BUCKET_USAGE.
func (t *T) needUsage() {
	if !t.usage() {
		t.Skipf("the driver does not advertise BUCKET_USAGE (DriverGetBucketUsage)")
	}
}
