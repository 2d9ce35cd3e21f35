package chaos

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	"github.com/kube-cosi/cosi/dev/v1alpha1drivers"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

// v1alpha1Proxy is proxy's counterpart for a COSI v1alpha1 driver (the reference one,
// cosi-driver-v1alpha1s3): it serves the cosi.v1alpha1 protocol on a socket of its own and forwards
// every call to the driver's, with memory.Faults and a journal in between, so that the sidecar
// detects v1alpha1 and drives it through its adapter. It also makes the driver one that names its
// accounts itself, anew on every grant (v1alpha1drivers.RandomAccounts, as in
// test/adversarial/v1alpha1_accounts_test.go): each DriverGrantBucketAccess is forwarded with the
// name "ba-" + 8 random hex digits instead of the one the sidecar gave, and answers with that
// account_id, so that a repeated grant makes another IAM user. The faults sit outside that: a call
// held after the driver acted holds the new account's answer, and the sidecar killed then never
// learns its ID (docs/v1alpha1-drivers.md, "Drivers that name their accounts").
type v1alpha1Proxy struct {
	v1.UnimplementedIdentityServer
	v1.UnimplementedProvisionerServer
	identity    v1.IdentityClient
	provisioner v1.ProvisionerClient
	conn        *grpc.ClientConn
	server      *grpc.Server
	faults      *memory.Faults
	journal     *os.File

	// made are the accounts the driver was asked to make, by ID, with the grant that asked: what
	// the driver knows of its own accounts, also of those whose answer nobody received.
	mu   sync.Mutex
	made map[string]madeAccount
}

// madeAccount is what an account the driver named itself was made for: the access's account name
// (the sidecar's ba-<access UID>) and the bucket.
type madeAccount struct{ name, bucketID string }

// startV1alpha1Proxy serves on the socket listen and forwards to the v1alpha1 driver's endpoint;
// calls go through the journal (the file journal), then the faults, then the renaming of accounts.
func startV1alpha1Proxy(listen, driverEndpoint, journal string) (*v1alpha1Proxy, error) {
	conn, err := grpc.NewClient(driverEndpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	j, err := os.OpenFile(journal, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, errors.Join(err, conn.Close())
	}
	p := &v1alpha1Proxy{identity: v1.NewIdentityClient(conn), provisioner: v1.NewProvisionerClient(conn),
		conn: conn, faults: &memory.Faults{}, journal: j, made: map[string]madeAccount{}}
	_ = os.Remove(listen)
	l, err := net.Listen("unix", listen)
	if err != nil {
		return nil, errors.Join(err, conn.Close(), j.Close())
	}
	renaming := v1alpha1drivers.NewRandomAccounts(p)
	renaming.BeforeGrant = func(req *v1.DriverGrantBucketAccessRequest, id string) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.made[id] = madeAccount{name: req.GetName(), bucketID: req.GetBucketId()}
	}
	p.server = grpc.NewServer(grpc.ChainUnaryInterceptor((&memory.Journal{W: j}).Interceptor(),
		p.faults.Interceptor()))
	v1.RegisterIdentityServer(p.server, renaming)
	v1.RegisterProvisionerServer(p.server, renaming)
	go func() { _ = p.server.Serve(l) }()
	return p, nil
}

func (p *v1alpha1Proxy) stop() error {
	if p == nil {
		return nil
	}
	p.server.Stop()
	return errors.Join(p.conn.Close(), p.journal.Close())
}

// madeFor returns what the driver made the account for, if the proxy renamed a grant to it.
func (p *v1alpha1Proxy) madeFor(id string) (madeAccount, bool) {
	if p == nil {
		return madeAccount{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.made[id]
	return m, ok
}

// The forwarding: a call's context is the sidecar's, so the driver sees the sidecar give up as it
// would without the proxy.

func (p *v1alpha1Proxy) DriverGetInfo(
	ctx context.Context, r *v1.DriverGetInfoRequest,
) (*v1.DriverGetInfoResponse, error) {
	return p.identity.DriverGetInfo(ctx, r)
}

func (p *v1alpha1Proxy) DriverCreateBucket(
	ctx context.Context, r *v1.DriverCreateBucketRequest,
) (*v1.DriverCreateBucketResponse, error) {
	return p.provisioner.DriverCreateBucket(ctx, r)
}

func (p *v1alpha1Proxy) DriverDeleteBucket(
	ctx context.Context, r *v1.DriverDeleteBucketRequest,
) (*v1.DriverDeleteBucketResponse, error) {
	return p.provisioner.DriverDeleteBucket(ctx, r)
}

func (p *v1alpha1Proxy) DriverGrantBucketAccess(
	ctx context.Context, r *v1.DriverGrantBucketAccessRequest,
) (*v1.DriverGrantBucketAccessResponse, error) {
	return p.provisioner.DriverGrantBucketAccess(ctx, r)
}

func (p *v1alpha1Proxy) DriverRevokeBucketAccess(
	ctx context.Context, r *v1.DriverRevokeBucketAccessRequest,
) (*v1.DriverRevokeBucketAccessResponse, error) {
	return p.provisioner.DriverRevokeBucketAccess(ctx, r)
}
