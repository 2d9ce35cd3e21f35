// Package v1alpha1 lets the sidecar drive a COSI v1alpha1 driver (gRPC package cosi.v1alpha1, the
// protocol of every COSI driver published before KEP-1979 v1alpha2) unchanged: Adapter implements
// the v1alpha2 Identity and Provisioner clients on top of the v1alpha1 RPCs.
//
// Every mapping decision is listed in docs/v1alpha1-drivers.md; the comments here say why.
//
// The wire protocol is what matters, so one published Go module suffices for every v1alpha1
// driver: sigs.k8s.io/container-object-storage-interface/proto (v0.2.x). The older
// sigs.k8s.io/container-object-storage-interface-spec (v0.1.0) declares the same package
// cosi.v1alpha1 with the same services, methods, messages and field numbers; v0.2.x only adds two
// optional maps (DriverDeleteBucketRequest.delete_context = 2 and
// DriverRevokeBucketAccessRequest.revoke_access_context = 3), which a driver built on v0.1.0 skips
// as unknown fields. The two Go modules cannot be linked into one program (both register the
// protobuf file "cosi.proto"), and they need not be.
package v1alpha1

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// ParameterAccessModes is the BucketAccessClass parameter that declares which access modes the
// class's v1alpha1 driver grants, since v1alpha1 requests carry none: for example
// "objectData=ReadOnly" for a class whose parameters make the driver grant read-only keys. The
// adapter accepts only requests within that set and removes the parameter before calling the
// driver. Absent, it is DefaultAccessModes.
const ParameterAccessModes = "objectstorage.k8s.io/v1alpha1-access-modes"

// AccessClassParameters are the BucketAccessClass parameters that are the adapter's own: it reads
// them and removes them before calling the driver. They are under COSI's group name, where the
// sidecar refuses every key it does not know: it keeps one registry of the reserved names and their
// owners (internal/sidecar/parameters.go), which lists these as the adapter's, passes them to the
// adapter, and removes them for a v1alpha2 driver.
func AccessClassParameters() []string {
	return []string{ParameterAccessModes, ParameterS3Endpoint, ParameterS3Region}
}

// DefaultAccessModes is what a v1alpha1 grant is assumed to give when the class declares nothing:
// read and write of objects, the only access every v1alpha1 driver grants.
const DefaultAccessModes = "objectData=ReadWrite"

// The keys of v1alpha1's DriverGrantBucketAccessResponse.credentials and of their secrets, as the
// upstream v1alpha1 sidecar read them (controller/pkg/consts). The GCS keys were never defined by
// the upstream sidecar; the adapter reads the camelCase names of the v1alpha2 fields.
const (
	CredentialsS3    = "s3"
	CredentialsAzure = "azure"
	CredentialsGCS   = "gcs"

	S3AccessKeyID     = "accessKeyID"
	S3AccessSecretKey = "accessSecretKey"
	S3Endpoint        = "endpoint"
	S3Region          = "region"

	AzureAccessToken = "accessToken"
	AzureExpiry      = "expiryTs"

	GCSServiceAccountName = "serviceAccountName"
	GCSClientEmail        = "clientEmail"
	GCSClientID           = "clientId"
	GCSPrivateKeyID       = "privateKeyId"
	GCSPrivateKey         = "privateKey"
	GCSHMACAccessID       = "hmacAccessId"
	GCSHMACSecret         = "hmacSecret"
	GCSProjectID          = "projectId"
)

// Options configure an Adapter.
type Options struct {
	// Protocols are the object protocols the driver serves, reported as the v1alpha2
	// supported_protocols: v1alpha1's DriverGetInfo does not say. Empty means S3 only.
	Protocols []cosiproto.ObjectProtocol_Type
	// S3Endpoint and S3Region fill an S3 grant that the driver answers without them, unless
	// the class says otherwise (ParameterS3Endpoint, ParameterS3Region): the sidecar's
	// --v1alpha1-s3-endpoint and --v1alpha1-s3-region. Empty: none. Validate checks them.
	S3Endpoint, S3Region string
}

// Adapter is a v1alpha2 Identity and Provisioner client that calls a v1alpha1 driver.
type Adapter struct {
	identity    v1.IdentityClient
	provisioner v1.ProvisionerClient
	protocols   []cosiproto.ObjectProtocol_Type
	fallback    s3Fallback
}

var (
	_ cosiproto.IdentityClient    = (*Adapter)(nil)
	_ cosiproto.ProvisionerClient = (*Adapter)(nil)
)

// New returns an adapter that calls the v1alpha1 driver on conn.
func New(conn grpc.ClientConnInterface, opts Options) *Adapter {
	protocols := opts.Protocols
	if len(protocols) == 0 {
		protocols = []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}
	}
	return &Adapter{
		identity:    v1.NewIdentityClient(conn),
		provisioner: v1.NewProvisionerClient(conn),
		protocols:   slices.Clone(protocols),
		fallback:    s3Fallback{endpoint: opts.S3Endpoint, region: opts.S3Region},
	}
}

// DriverGetInfo returns the driver's v1alpha1 name and the configured protocols.
func (a *Adapter) DriverGetInfo(
	ctx context.Context,
	_ *cosiproto.DriverGetInfoRequest,
	opts ...grpc.CallOption,
) (*cosiproto.DriverGetInfoResponse, error) {
	resp, err := a.identity.DriverGetInfo(ctx, &v1.DriverGetInfoRequest{}, opts...)
	if err != nil {
		return nil, err
	}
	return &cosiproto.DriverGetInfoResponse{Name: resp.GetName(), SupportedProtocols: slices.Clone(a.protocols)}, nil
}

// DriverGenerateBucketId returns the Bucket's name: the name DriverCreateBucket asks the v1alpha1
// driver to create. It is deterministic, so a retried provisioning never creates a second bucket
// (KEP-1979: random names leak buckets), and it touches nothing in the backend.
func (a *Adapter) DriverGenerateBucketId(
	_ context.Context,
	req *cosiproto.DriverGenerateBucketIdRequest,
	_ ...grpc.CallOption,
) (*cosiproto.DriverGenerateBucketIdResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	if err := a.checkProtocols(req.GetProtocols()); err != nil {
		return nil, err
	}
	return &cosiproto.DriverGenerateBucketIdResponse{BucketId: req.GetName()}, nil
}

// DriverCreateBucket calls v1alpha1 DriverCreateBucket(name = bucket_id, parameters).
//
// ALREADY_EXISTS is returned as it is, final: both specs define it as "a bucket by that name
// exists but is incompatible with the request" (v1alpha1 "CreateBucket Errors", and KEP-1979's
// DriverCreateBucket), and the v1alpha1 Provisioner contract asks OK of a bucket that exists with
// the same name and parameters. The v1alpha1 "Concurrency" note that a call which "succeeded
// early" may answer ALREADY_EXISTS concerns calls in flight together, which the driver client
// does not make (one call in flight per bucket, pkg/driver; a driver still at work on a call whose
// deadline passed is asked by the same spec to answer ABORTED, which is retried); handing out an
// incompatible bucket as this Bucket's would be worse than a claim that waits for its user.
//
// That stays so after a lost answer, when a driver answers a repeated create of the bucket it made
// ALREADY_EXISTS ("already owned by you"): the adapter cannot tell that bucket from another's of the
// same name, so it never takes one. The answer says nothing else (a code and free text); v1alpha1
// has no call that looks a bucket or its owner up; the name (the Bucket's, bc-<claim UID>) is known
// before the bucket exists to whoever can read the claim, and on a store with one bucket namespace
// for all its accounts anyone can create a bucket by that name; and a lost answer does not say that
// the earlier create succeeded: it may have failed on that other bucket. Taking it could give the
// tenant a bucket that someone else owns and reads. The message points to what an admin who
// checked the bucket in the store can do instead (docs/v1alpha1-drivers.md).
func (a *Adapter) DriverCreateBucket(
	ctx context.Context,
	req *cosiproto.DriverCreateBucketRequest,
	opts ...grpc.CallOption,
) (*cosiproto.DriverCreateBucketResponse, error) {
	if err := a.checkProtocols(req.GetProtocols()); err != nil {
		return nil, err
	}
	resp, err := a.provisioner.DriverCreateBucket(
		ctx,
		&v1.DriverCreateBucketRequest{Name: req.GetBucketId(), Parameters: req.GetParameters()},
		opts...)
	if status.Code(err) == codes.AlreadyExists {
		return nil, status.Errorf(codes.AlreadyExists,
			"v1alpha1 DriverCreateBucket: a bucket named %q exists but is incompatible with this Bucket's parameters: %s "+
				"(the adapter cannot tell a bucket an earlier call made from another's of that name, and takes "+
				"neither: docs/v1alpha1-drivers.md, \"A lost create answer\")",
			req.GetBucketId(), status.Convert(err).Message())
	}
	if err != nil {
		return nil, mapError("DriverCreateBucket", err)
	}
	// The adapter addresses the bucket by its name in every later call (grant, revoke, delete):
	// there is no v1alpha2 field to keep another ID in. A driver that names the bucket otherwise
	// is refused before any access is granted to it, and the bucket it made is deleted again by
	// that ID: nothing else would ever delete it. Until that deletion succeeds the refusal is not
	// final, so the sidecar calls again and the (idempotent) driver names the bucket again.
	if id := resp.GetBucketId(); id != req.GetBucketId() {
		_, err := a.provisioner.DriverDeleteBucket(
			ctx,
			&v1.DriverDeleteBucketRequest{BucketId: id, DeleteContext: req.GetParameters()},
			opts...)
		if err != nil && status.Code(err) != codes.NotFound {
			return nil, cleanupFailed(fmt.Sprintf("deleting bucket_id %q, which the driver returned for %q",
				id, req.GetBucketId()), err)
		}
		return nil, status.Errorf(
			codes.Unimplemented,
			"v1alpha1 adapter: the driver created bucket %q with bucket_id %q (deleted again); the adapter supports "+
				"only drivers whose bucket_id is the name they are given (docs/v1alpha1-drivers.md)",
			req.GetBucketId(),
			id,
		)
	}
	return &cosiproto.DriverCreateBucketResponse{
		Protocols: a.bucketInfo(req.GetBucketId(), resp.GetBucketInfo(), req.GetProtocols()),
	}, nil
}

// DriverGetBucket answers for an imported (static) Bucket without asking the driver: v1alpha1 has
// no RPC to look a bucket up. Nothing is checked in the backend; the first grant is where a
// missing bucket shows. The bucket info holds the client-facing name (the bucket_id) for each
// protocol the Bucket names, or the driver's protocols when it names none.
func (a *Adapter) DriverGetBucket(
	_ context.Context,
	req *cosiproto.DriverGetBucketRequest,
	_ ...grpc.CallOption,
) (*cosiproto.DriverGetBucketResponse, error) {
	if req.GetBucketId() == "" {
		return nil, status.Error(codes.InvalidArgument, "bucket_id is required")
	}
	if err := a.checkProtocols(req.GetProtocols()); err != nil {
		return nil, err
	}
	return &cosiproto.DriverGetBucketResponse{Protocols: a.bucketInfo(req.GetBucketId(), nil, req.GetProtocols())}, nil
}

// DriverDeleteBucket calls v1alpha1 DriverDeleteBucket(bucket_id, delete_context = parameters).
// NOT_FOUND is success: the bucket is gone, which is what was asked.
func (a *Adapter) DriverDeleteBucket(
	ctx context.Context,
	req *cosiproto.DriverDeleteBucketRequest,
	opts ...grpc.CallOption,
) (*cosiproto.DriverDeleteBucketResponse, error) {
	_, err := a.provisioner.DriverDeleteBucket(
		ctx,
		&v1.DriverDeleteBucketRequest{BucketId: req.GetBucketId(), DeleteContext: req.GetParameters()},
		opts...)
	if err != nil && status.Code(err) != codes.NotFound {
		return nil, mapError("DriverDeleteBucket", err)
	}
	return &cosiproto.DriverDeleteBucketResponse{}, nil
}

// DriverGenerateBucketAccessId checks that a v1alpha1 driver can serve the access and returns the
// account name, which the grant passes as the v1alpha1 name.
func (a *Adapter) DriverGenerateBucketAccessId(
	_ context.Context,
	req *cosiproto.DriverGenerateBucketAccessIdRequest,
	_ ...grpc.CallOption,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	if req.GetAccountName() == "" {
		return nil, status.Error(codes.InvalidArgument, "account_name is required")
	}
	if err := a.checkAccess(
		req.GetBuckets(),
		req.GetProtocol(),
		req.GetAuthenticationType(),
		req.GetParameters(),
	); err != nil {
		return nil, err
	}
	return &cosiproto.DriverGenerateBucketAccessIdResponse{AccountId: req.GetAccountName()}, nil
}

// DriverGrantBucketAccess calls v1alpha1 DriverGrantBucketAccess(bucket_id, name = account_id,
// Key, parameters without the adapter's own) and maps its credentials.
//
// The sidecar grants an account again when its Secret was lost: workloads may still hold the key
// of the first grant. So the adapter never revokes the requested account inside a grant unless
// the caller said that no credentials of it were handed out (WithNoCredentialsHeld).
// ALREADY_EXISTS means the driver made this account before (the v1alpha1 spec lets a repeated call
// answer so) and will not return its credentials again: without that word, it is returned, final,
// and the account is left as it is; with it, the account is revoked and granted once more, so the
// Secret gets a key that works.
func (a *Adapter) DriverGrantBucketAccess(
	ctx context.Context,
	req *cosiproto.DriverGrantBucketAccessRequest,
	opts ...grpc.CallOption,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	if err := a.checkAccess(
		req.GetBuckets(),
		req.GetProtocol(),
		req.GetAuthenticationType(),
		req.GetParameters(),
	); err != nil {
		return nil, err
	}
	bucketID := req.GetBuckets()[0].GetBucketId()
	v1req := &v1.DriverGrantBucketAccessRequest{
		BucketId:           bucketID,
		Name:               req.GetAccountId(),
		AuthenticationType: v1.AuthenticationType_Key,
		Parameters:         driverParameters(req.GetParameters()),
	}
	unheld := noCredentialsHeld(ctx)
	resp, err := a.provisioner.DriverGrantBucketAccess(ctx, v1req, opts...)
	if status.Code(err) == codes.AlreadyExists {
		if !unheld {
			return nil, status.Errorf(codes.AlreadyExists,
				"v1alpha1 DriverGrantBucketAccess: the driver granted account %q before and does not return its "+
					"credentials again (%s); the account is not revoked, since workloads may hold its key: delete and "+
					"re-create the BucketAccess for new credentials", req.GetAccountId(), status.Convert(err).Message())
		}
		// The account the driver made is addressed by the name, or, for a driver that names its
		// accounts itself, by the IDs earlier grants returned (the record's): revoking the name
		// alone would miss it, and the second grant would answer ALREADY_EXISTS again.
		// The name is revoked directly: NOT_FOUND for it, with no ID recorded, means the account
		// the driver says exists is one it named itself in a call whose answer was lost.
		_, rerr := a.provisioner.DriverRevokeBucketAccess(ctx, &v1.DriverRevokeBucketAccessRequest{
			BucketId: bucketID, AccountId: req.GetAccountId(), RevokeAccessContext: v1req.GetParameters(),
		}, opts...)
		if rerr != nil && status.Code(rerr) != codes.NotFound {
			return nil, cleanupFailed(fmt.Sprintf("revoking account %q before granting it again", req.GetAccountId()),
				mapError("DriverRevokeBucketAccess", rerr))
		}
		accounts, named := driverAccounts(ctx)
		if named {
			for _, id := range accounts.Known {
				if err := a.revoke(ctx, bucketID, id, v1req.GetParameters(), opts); err != nil {
					return nil, cleanupFailed(fmt.Sprintf("revoking account %q before granting it again", id), err)
				}
				accounts.forget(ctx, id)
			}
			if status.Code(rerr) == codes.NotFound && len(accounts.Known) == 0 && accounts.Lost != nil {
				accounts.Lost(context.WithoutCancel(ctx), fmt.Sprintf("the driver answered ALREADY_EXISTS (%s) for an "+
					"account that is not named %q and whose ID no answer ever gave", status.Convert(err).Message(),
					req.GetAccountId()))
			}
		}
		resp, err = a.provisioner.DriverGrantBucketAccess(ctx, v1req, opts...)
	}
	if err != nil {
		return nil, mapError("DriverGrantBucketAccess", err)
	}
	// An account_id other than the name is the driver's own choice (v1alpha1 allows it: a random
	// user name, a key ID). The caller records it durably before the credentials are returned
	// (WithDriverAccounts), and revokes by it later; a caller that keeps no record gets the old
	// answer: the account revoked at once and the access refused, since revocation after a restart
	// would address the account by name. An empty account_id names nothing else: the name is used.
	id := resp.GetAccountId()
	if id == "" {
		id = req.GetAccountId()
	}
	fresh := false // an account of the driver's naming that no earlier grant returned
	if id != req.GetAccountId() {
		accounts, ok := driverAccounts(ctx)
		if !ok {
			return nil, a.refuseAccount(ctx, bucketID, id, req.GetAccountId(), v1req.GetParameters(), opts)
		}
		if fresh = !slices.Contains(accounts.Known, id); fresh {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			err := accounts.Record(rctx, id)
			cancel()
			if err != nil {
				// Nobody got the account's credentials: revoked at once (not final until it is).
				if rerr := a.revokeDetached(ctx, bucketID, id, v1req.GetParameters(), opts); rerr != nil {
					return nil, cleanupFailed(fmt.Sprintf("revoking account_id %q, which the driver chose and which "+
						"could not be recorded", id), rerr)
				}
				accounts.forget(ctx, id) // revoked: a caller that kept it to record later need not
				return nil, status.Errorf(codes.Aborted, "v1alpha1 adapter: recording account_id %q, which the driver "+
					"chose, failed (the account is revoked again; retried): %v", id, err)
			}
		}
	}
	// An answer the adapter refuses (mapCredentials: no credentials of the requested protocol,
	// retried; incomplete or ambiguous ones, final) is thrown away. When nobody holds credentials
	// of the account (an account no earlier grant returned, or the caller's word), it is revoked at
	// once; otherwise it is the account whose key workloads hold, and it stays (the sidecar revokes
	// it when the access goes).
	info, creds, err := a.mapCredentials(req.GetProtocol(), bucketID, req.GetParameters(), resp.GetCredentials())
	if err != nil {
		if !unheld && !fresh {
			return nil, err
		}
		if err := a.revokeDetached(ctx, bucketID, id, v1req.GetParameters(), opts); err != nil {
			return nil, cleanupFailed(fmt.Sprintf("revoking account %q, whose answer was refused", id), err)
		}
		if fresh {
			accounts, _ := driverAccounts(ctx)
			accounts.forget(ctx, id)
		}
		return nil, err
	}
	// The accounts earlier grants of the driver's naming made are revoked now, rather than when the
	// access goes, when nobody holds their credentials (answers that were lost): all of them. When a
	// Secret was lost and this grant made another account, workloads may hold the key of the
	// account the Secret had, the newest earlier one, which stays; older ones are revoked, so that
	// a tenant who deletes their Secret again and again gets no more live accounts than two, as
	// with a driver that keeps an account's newest previous key. One whose revocation fails stays
	// recorded, and is revoked with the access.
	if accounts, ok := driverAccounts(ctx); ok && (unheld || fresh) {
		earlier := slices.DeleteFunc(slices.Clone(accounts.Known), func(k string) bool { return k == id })
		if !unheld && len(earlier) > 0 {
			earlier = earlier[:len(earlier)-1]
		}
		for _, e := range earlier {
			if a.revokeDetached(ctx, bucketID, e, v1req.GetParameters(), opts) == nil {
				accounts.forget(ctx, e)
			}
		}
	}
	return &cosiproto.DriverGrantBucketAccessResponse{
		Buckets:     []*cosiproto.DriverGrantBucketAccessResponse_BucketInfo{{BucketId: bucketID, BucketInfo: info}},
		Credentials: creds,
	}, nil
}

// refuseAccount revokes the account id that the driver returned for the account name, and
// refuses the access: without a record of the driver's IDs (WithDriverAccounts), revocation after
// a restart would address the account by name. Until the revocation succeeds the refusal is not
// final, so the caller calls again.
func (a *Adapter) refuseAccount(
	ctx context.Context, bucketID, id, name string, params map[string]string, opts []grpc.CallOption,
) error {
	if err := a.revokeDetached(ctx, bucketID, id, params, opts); err != nil {
		return cleanupFailed(fmt.Sprintf("revoking account_id %q, which the driver returned for %q", id, name), err)
	}
	return status.Errorf(
		codes.Unimplemented,
		"v1alpha1 adapter: the driver returned account_id %q for account %q (revoked again); without a record of "+
			"the driver's account IDs the adapter supports only drivers whose account_id is the name they are given "+
			"(docs/v1alpha1-drivers.md)",
		id,
		name,
	)
}

// DriverAccounts are the accounts a v1alpha1 driver named itself for one access, as its caller
// records them: v1alpha1 lets a driver return an account_id other than the name it is given (a
// random user name, say), and every later call must address that account by it.
type DriverAccounts struct {
	// Known are the account IDs other than the name that earlier grants of the access returned.
	Known []string
	// Record records, durably, an account ID that a grant returned and that Known lacks. The
	// adapter calls it as soon as the driver answered, before it returns the credentials, with a
	// context that is not canceled with the call's: an answer whose ID is not recorded is never
	// returned (its account is revoked at once). That revocation may fail as well, and a driver
	// that names accounts anew does not name the account again when the grant is retried: a
	// caller whose Record failed keeps the ID, to record it (or revoke it) later.
	Record func(ctx context.Context, accountID string) error
	// Forget, when set, removes from the record an account ID that the adapter revoked (an answer it
	// refused, an earlier account nobody or nobody any more holds the key of), so that nothing
	// revokes it again: a driver may answer a revocation of an account that is gone with an error.
	// A failure leaves the ID recorded, revoked again with the access.
	Forget func(ctx context.Context, accountID string) error
	// Lost, when set, is told that the driver made an account for the access whose ID no answer
	// gave (the answer was lost) and that the adapter cannot revoke: the caller reports it.
	Lost func(ctx context.Context, what string)
}

// forget calls Forget, when set, with a context of its own.
func (a DriverAccounts) forget(ctx context.Context, id string) {
	if a.Forget != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		_ = a.Forget(ctx, id)
	}
}

type driverAccountsKey struct{}

// WithDriverAccounts returns a context for a DriverGrantBucketAccess whose caller records the
// account IDs that the driver chooses itself: with it, a grant whose account_id is not the name
// succeeds once Record returned, and the caller revokes each recorded ID (a
// DriverRevokeBucketAccess with that account_id) when the access goes. Without it, such a grant is
// refused and its account revoked.
func WithDriverAccounts(ctx context.Context, accounts DriverAccounts) context.Context {
	return context.WithValue(ctx, driverAccountsKey{}, accounts)
}

func driverAccounts(ctx context.Context) (DriverAccounts, bool) {
	a, ok := ctx.Value(driverAccountsKey{}).(DriverAccounts)
	return a, ok && a.Record != nil
}

// cleanupTimeout bounds a revocation the adapter makes on its own after the call's context ended.
const cleanupTimeout = 30 * time.Second

// revokeDetached is a revocation the adapter makes on its own, of an account whose credentials it
// throws away: with a context that is not canceled with the call's (a caller that stops after the
// driver answered would otherwise leave the account), bounded by cleanupTimeout.
func (a *Adapter) revokeDetached(
	ctx context.Context, bucketID, accountID string, params map[string]string, opts []grpc.CallOption,
) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	return a.revoke(ctx, bucketID, accountID, params, opts)
}

// noCredentialsHeldKey marks a context made by WithNoCredentialsHeld.
type noCredentialsHeldKey struct{}

// WithNoCredentialsHeld returns a context for a DriverGrantBucketAccess that says no credentials
// of its account were ever handed out (no Secret was written with them, so no workload can hold
// them). Only then may the adapter revoke the requested account inside the grant: when the driver
// answers ALREADY_EXISTS (it made the account in a call whose answer was lost, and will not return
// the key again), it revokes the account and grants it again; and when it refuses the driver's
// answer, it revokes the account at once. Without it, a grant never revokes the account it asks
// for, so that granting again for a lost Secret leaves the key that workloads hold working. The
// sidecar says so for an access whose Secrets were never written and none of which exists
// (docs/v1alpha1-drivers.md, "Granting again").
func WithNoCredentialsHeld(ctx context.Context) context.Context {
	return context.WithValue(ctx, noCredentialsHeldKey{}, true)
}

func noCredentialsHeld(ctx context.Context) bool {
	unheld, _ := ctx.Value(noCredentialsHeldKey{}).(bool)
	return unheld
}

// DriverRevokeBucketAccess calls v1alpha1 DriverRevokeBucketAccess(bucket_id, account_id,
// revoke_access_context = parameters) for each bucket. NOT_FOUND is success.
func (a *Adapter) DriverRevokeBucketAccess(
	ctx context.Context,
	req *cosiproto.DriverRevokeBucketAccessRequest,
	opts ...grpc.CallOption,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	if len(req.GetBuckets()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "buckets: at least one bucket is required")
	}
	for _, b := range req.GetBuckets() {
		if err := a.revoke(
			ctx,
			b.GetBucketId(),
			req.GetAccountId(),
			driverParameters(req.GetParameters()),
			opts,
		); err != nil {
			return nil, err
		}
	}
	return &cosiproto.DriverRevokeBucketAccessResponse{}, nil
}

// DriverRotateBucketAccessCredentials returns UNIMPLEMENTED: v1alpha1 has no way to issue a
// second credential for an account, and a v1alpha1 grant of an existing account may not return a
// usable key (docs/v1alpha1-drivers.md). The sidecar then says in the BucketAccess's conditions
// that its credentials cannot rotate.
func (a *Adapter) DriverRotateBucketAccessCredentials(
	context.Context, *cosiproto.DriverRotateBucketAccessCredentialsRequest, ...grpc.CallOption,
) (*cosiproto.DriverRotateBucketAccessCredentialsResponse, error) {
	return nil, status.Error(codes.Unimplemented, "v1alpha1 drivers cannot rotate credentials")
}

// DriverRetireBucketAccessCredentials returns UNIMPLEMENTED, as DriverRotateBucketAccessCredentials.
func (a *Adapter) DriverRetireBucketAccessCredentials(
	context.Context, *cosiproto.DriverRetireBucketAccessCredentialsRequest, ...grpc.CallOption,
) (*cosiproto.DriverRetireBucketAccessCredentialsResponse, error) {
	return nil, status.Error(codes.Unimplemented, "v1alpha1 drivers cannot rotate credentials")
}

// DriverGetBucketUsage returns UNIMPLEMENTED: v1alpha1 has no usage, and the adapter advertises
// no capability, so the sidecar does not ask.
func (a *Adapter) DriverGetBucketUsage(
	context.Context, *cosiproto.DriverGetBucketUsageRequest, ...grpc.CallOption,
) (*cosiproto.DriverGetBucketUsageResponse, error) {
	return nil, status.Error(codes.Unimplemented, "v1alpha1 drivers cannot report bucket usage")
}

func (a *Adapter) revoke(
	ctx context.Context,
	bucketID, accountID string,
	params map[string]string,
	opts []grpc.CallOption,
) error {
	_, err := a.provisioner.DriverRevokeBucketAccess(
		ctx,
		&v1.DriverRevokeBucketAccessRequest{BucketId: bucketID, AccountId: accountID, RevokeAccessContext: params},
		opts...)
	if err != nil && status.Code(err) != codes.NotFound {
		return mapError("DriverRevokeBucketAccess", err)
	}
	return nil
}

// checkProtocols refuses protocols the adapter was not configured to serve.
func (a *Adapter) checkProtocols(protocols []cosiproto.ObjectProtocol_Type) error {
	for _, p := range protocols {
		if !slices.Contains(a.protocols, p) {
			return status.Errorf(
				codes.InvalidArgument,
				"protocol %v is not one of the v1alpha1 driver's configured protocols %v",
				p,
				a.protocols,
			)
		}
	}
	return nil
}

// checkAccess refuses what a v1alpha1 grant cannot express: several buckets with one credential
// (OUT_OF_RANGE, as KEP-1979 asks of drivers that cannot), ServiceAccount authentication (v1alpha1
// passes no ServiceAccount to the driver), and any access mode outside the class's declared set;
// and invalid fallback parameters, before anything is created.
func (a *Adapter) checkAccess(
	buckets []*cosiproto.AccessedBucket,
	protocol cosiproto.ObjectProtocol_Type,
	auth cosiproto.AuthenticationType_Type,
	params map[string]string,
) error {
	switch {
	case len(buckets) == 0:
		return status.Error(codes.InvalidArgument, "buckets: at least one bucket is required")
	case len(buckets) > 1:
		return status.Errorf(
			codes.OutOfRange,
			"a v1alpha1 driver grants access to one bucket per account; %d buckets were requested",
			len(buckets),
		)
	case auth != cosiproto.AuthenticationType_KEY:
		return status.Errorf(
			codes.InvalidArgument,
			"authentication type %v: a v1alpha1 driver is given no ServiceAccount; only KEY is supported",
			auth,
		)
	case buckets[0].GetBucketId() == "":
		return status.Error(codes.InvalidArgument, "buckets[0].bucket_id is required")
	}
	if err := a.checkProtocols([]cosiproto.ObjectProtocol_Type{protocol}); err != nil {
		return err
	}
	if _, err := a.s3Fallback(params); err != nil {
		return err
	}
	declared, err := ParseAccessModes(params[ParameterAccessModes])
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "BucketAccessClass parameter %s: %s", ParameterAccessModes, err)
	}
	return CheckAccessModes(declared, buckets[0].GetAccessModes())
}

// CheckAccessModes accepts a request only when each category it asks for (not UNSPECIFIED) has
// exactly the declared mode: the driver grants what its class configures, whatever is asked, so
// granting anything else would widen (or narrow) the access silently.
func CheckAccessModes(declared, requested *cosiproto.AccessModes) error {
	var wrong []string
	check := func(name string, want, got cosiproto.AccessMode_Mode) {
		if got != cosiproto.AccessMode_UNSPECIFIED && got != want {
			wrong = append(wrong, fmt.Sprintf("%s %s (the class grants %s)", name, modeName(got), modeName(want)))
		}
	}
	check("objectData", declared.GetObjectData(), requested.GetObjectData())
	check("objectMetadata", declared.GetObjectMetadata(), requested.GetObjectMetadata())
	check("bucketMetadata", declared.GetBucketMetadata(), requested.GetBucketMetadata())
	if len(wrong) > 0 {
		return status.Errorf(
			codes.InvalidArgument,
			"access modes not granted by this v1alpha1 driver's class: %s; v1alpha1 drivers take no access mode, "+
				"the class declares what they grant in parameter %s",
			strings.Join(wrong, ", "),
			ParameterAccessModes,
		)
	}
	if requested.GetObjectData() == cosiproto.AccessMode_UNSPECIFIED &&
		requested.GetObjectMetadata() == cosiproto.AccessMode_UNSPECIFIED &&
		requested.GetBucketMetadata() == cosiproto.AccessMode_UNSPECIFIED {
		return status.Error(codes.InvalidArgument, "no access mode requested")
	}
	return nil
}

// ParseAccessModes parses a ParameterAccessModes value, "objectData=ReadWrite,objectMetadata=
// ReadOnly"; empty is DefaultAccessModes. A category left out is not granted.
func ParseAccessModes(s string) (*cosiproto.AccessModes, error) {
	if strings.TrimSpace(s) == "" {
		s = DefaultAccessModes
	}
	out := &cosiproto.AccessModes{}
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("%q is not category=mode", part)
		}
		var mode cosiproto.AccessMode_Mode
		switch strings.TrimSpace(v) {
		case "ReadWrite":
			mode = cosiproto.AccessMode_READ_WRITE
		case "ReadOnly":
			mode = cosiproto.AccessMode_READ_ONLY
		case "WriteOnly":
			mode = cosiproto.AccessMode_WRITE_ONLY
		default:
			return nil, fmt.Errorf("%q is not ReadWrite, ReadOnly or WriteOnly", v)
		}
		switch strings.TrimSpace(k) {
		case "objectData":
			out.ObjectData = mode
		case "objectMetadata":
			out.ObjectMetadata = mode
		case "bucketMetadata":
			out.BucketMetadata = mode
		default:
			return nil, fmt.Errorf("%q is not objectData, objectMetadata or bucketMetadata", k)
		}
	}
	return out, nil
}

func modeName(m cosiproto.AccessMode_Mode) string {
	switch m {
	case cosiproto.AccessMode_READ_WRITE:
		return "ReadWrite"
	case cosiproto.AccessMode_READ_ONLY:
		return "ReadOnly"
	case cosiproto.AccessMode_WRITE_ONLY:
		return "WriteOnly"
	}
	return "nothing"
}

// driverParameters are the parameters the v1alpha1 driver sees: the class's, without the
// adapter's own (AccessClassParameters).
func driverParameters(params map[string]string) map[string]string {
	own := AccessClassParameters()
	if !slices.ContainsFunc(own, func(k string) bool { _, ok := params[k]; return ok }) {
		return params
	}
	out := make(map[string]string, len(params))
	for k, v := range params {
		if !slices.Contains(own, k) {
			out[k] = v
		}
	}
	return out
}

// bucketInfo maps v1alpha1 bucket_info (one protocol, or none) to v1alpha2's. The client-facing
// bucket name, which v1alpha1 never reported, is the bucket_id: the upstream v1alpha1 sidecar
// wrote the bucket ID into its BucketInfo as the bucket name too. S3's signature_version has no
// v1alpha2 field (KEP-1979 assumes SigV4) and is dropped; GCS's service_account and
// private_key_name describe credentials, not the bucket, and are dropped. Without bucket_info,
// each protocol requested (or, when none is, each configured) is reported with the name alone.
func (a *Adapter) bucketInfo(
	bucketID string,
	p *v1.Protocol,
	requested []cosiproto.ObjectProtocol_Type,
) *cosiproto.ProtocolBucketInfo {
	out := &cosiproto.ProtocolBucketInfo{}
	switch {
	case p.GetS3() != nil:
		out.S3 = &cosiproto.S3BucketInfo{BucketName: bucketID, Region: p.GetS3().GetRegion()}
	case p.GetAzureBlob() != nil:
		out.Azure = &cosiproto.AzureBucketInfo{StorageAccount: p.GetAzureBlob().GetStorageAccount()}
	case p.GetGcs() != nil:
		out.Gcs = &cosiproto.GcsBucketInfo{BucketName: bucketID, ProjectId: p.GetGcs().GetProjectId()}
	default:
		if len(requested) == 0 {
			requested = a.protocols
		}
		for _, proto := range requested {
			switch proto {
			case cosiproto.ObjectProtocol_S3:
				out.S3 = &cosiproto.S3BucketInfo{BucketName: bucketID}
			case cosiproto.ObjectProtocol_AZURE:
				out.Azure = &cosiproto.AzureBucketInfo{}
			case cosiproto.ObjectProtocol_GCS:
				out.Gcs = &cosiproto.GcsBucketInfo{BucketName: bucketID}
			}
		}
	}
	return out
}

// cleanupFailed is the error of a call whose clean-up (a revocation or deletion the adapter makes
// itself) failed. Its code is ABORTED whatever the driver's: the sidecar retries the call, which
// cleans up again, instead of taking a code such as INVALID_ARGUMENT as final and leaving the
// account or bucket behind (a failed revocation or deletion is never final).
func cleanupFailed(what string, err error) error {
	return status.Errorf(codes.Aborted, "v1alpha1 adapter: %s failed, retried: %s", what, status.Convert(err).Message())
}

// mapError keeps the driver's code, which the sidecar classifies (docs/v1alpha1-drivers.md), and
// names the v1alpha1 call in the message. Errors without a status (a broken connection) are
// returned as they are: the sidecar retries them.
func mapError(method string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("v1alpha1 %s: %w", method, err)
	}
	return status.Errorf(st.Code(), "v1alpha1 %s: %s", method, st.Message())
}

// sortedKeys lists a map's keys for messages; never its values, which may be secrets.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
