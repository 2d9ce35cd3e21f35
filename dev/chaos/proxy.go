package chaos

import (
	"context"
	"errors"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// proxy serves the COSI driver protocol on a socket of its own and forwards every call to the
// driver's, with memory.Faults and a journal in between: the fault points of a driver that has
// none of its own (the S3 driver). The sidecar calls the proxy; the suite kills the driver behind
// it. The proxy runs in the suite's process and is never killed.
type proxy struct {
	cosiproto.UnimplementedIdentityServer
	cosiproto.UnimplementedProvisionerServer
	identity    cosiproto.IdentityClient
	provisioner cosiproto.ProvisionerClient
	conn        *grpc.ClientConn
	server      *grpc.Server
	faults      *memory.Faults
	journal     *os.File
}

// startProxy serves on the socket listen and forwards to the driver's endpoint; calls go through
// the journal (the file journal), then the faults.
func startProxy(listen, driverEndpoint, journal string) (*proxy, error) {
	conn, err := grpc.NewClient(driverEndpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	j, err := os.OpenFile(journal, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, errors.Join(err, conn.Close())
	}
	p := &proxy{identity: cosiproto.NewIdentityClient(conn), provisioner: cosiproto.NewProvisionerClient(conn),
		conn: conn, faults: &memory.Faults{}, journal: j}
	_ = os.Remove(listen)
	l, err := net.Listen("unix", listen)
	if err != nil {
		return nil, errors.Join(err, conn.Close(), j.Close())
	}
	p.server = grpc.NewServer(grpc.ChainUnaryInterceptor((&memory.Journal{W: j}).Interceptor(),
		p.faults.Interceptor()))
	cosiproto.RegisterIdentityServer(p.server, p)
	cosiproto.RegisterProvisionerServer(p.server, p)
	go func() { _ = p.server.Serve(l) }()
	return p, nil
}

func (p *proxy) stop() error {
	if p == nil {
		return nil
	}
	p.server.Stop()
	return errors.Join(p.conn.Close(), p.journal.Close())
}

// The forwarding: a call's context is the sidecar's (a late call's is detached by the faults),
// so the driver sees the sidecar give up as it would without the proxy.

func (p *proxy) DriverGetInfo(
	ctx context.Context,
	r *cosiproto.DriverGetInfoRequest,
) (*cosiproto.DriverGetInfoResponse, error) {
	return p.identity.DriverGetInfo(ctx, r)
}

func (p *proxy) DriverGenerateBucketId(
	ctx context.Context,
	r *cosiproto.DriverGenerateBucketIdRequest,
) (*cosiproto.DriverGenerateBucketIdResponse, error) {
	return p.provisioner.DriverGenerateBucketId(ctx, r)
}

func (p *proxy) DriverCreateBucket(
	ctx context.Context,
	r *cosiproto.DriverCreateBucketRequest,
) (*cosiproto.DriverCreateBucketResponse, error) {
	return p.provisioner.DriverCreateBucket(ctx, r)
}

func (p *proxy) DriverGetBucket(
	ctx context.Context,
	r *cosiproto.DriverGetBucketRequest,
) (*cosiproto.DriverGetBucketResponse, error) {
	return p.provisioner.DriverGetBucket(ctx, r)
}

func (p *proxy) DriverDeleteBucket(
	ctx context.Context,
	r *cosiproto.DriverDeleteBucketRequest,
) (*cosiproto.DriverDeleteBucketResponse, error) {
	return p.provisioner.DriverDeleteBucket(ctx, r)
}

func (p *proxy) DriverGenerateBucketAccessId(
	ctx context.Context,
	r *cosiproto.DriverGenerateBucketAccessIdRequest,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	return p.provisioner.DriverGenerateBucketAccessId(ctx, r)
}

func (p *proxy) DriverGrantBucketAccess(
	ctx context.Context,
	r *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	return p.provisioner.DriverGrantBucketAccess(ctx, r)
}

func (p *proxy) DriverRevokeBucketAccess(
	ctx context.Context,
	r *cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	return p.provisioner.DriverRevokeBucketAccess(ctx, r)
}

// faultControl sets faults and holds calls: the memory driver's control endpoint, or the proxy's
// faults in this process.
type faultControl interface {
	SetFaults(ctx context.Context, s memory.FaultSettings) error
	Pause(ctx context.Context, method string, after bool) error
	WaitPaused(ctx context.Context, timeout time.Duration) (memory.PausedCall, bool, error)
	Release(ctx context.Context) error
	// Abort ends the held call as the driver's death would: needed where the call is held
	// outside the driver (the proxy); a killed memory driver loses it with itself.
	Abort(ctx context.Context) error
}

// remoteFaults is the memory driver's control endpoint.
type remoteFaults struct{ memory.Control }

func (remoteFaults) Abort(context.Context) error { return nil }

// localFaults are the proxy's.
type localFaults struct{ f *memory.Faults }

func (l localFaults) SetFaults(_ context.Context, s memory.FaultSettings) error {
	var faults []memory.Fault
	for _, spec := range s.Faults {
		f, err := memory.ParseFault(spec)
		if err != nil {
			return err
		}
		faults = append(faults, f)
	}
	if s.Seed != 0 {
		l.f.Seed(s.Seed)
	}
	l.f.Set(s.Latency, faults...)
	return nil
}

func (l localFaults) Pause(_ context.Context, method string, after bool) error {
	l.f.Pause(method, after)
	return nil
}

func (l localFaults) WaitPaused(ctx context.Context, timeout time.Duration) (memory.PausedCall, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, ok := l.f.WaitPaused(ctx)
	return c, ok, nil
}

func (l localFaults) Release(context.Context) error { l.f.Release(); return nil }

func (l localFaults) Abort(context.Context) error { l.f.Abort(); return nil }

func (p *proxy) DriverRotateBucketAccessCredentials(
	ctx context.Context,
	r *cosiproto.DriverRotateBucketAccessCredentialsRequest,
) (*cosiproto.DriverRotateBucketAccessCredentialsResponse, error) {
	return p.provisioner.DriverRotateBucketAccessCredentials(ctx, r)
}

func (p *proxy) DriverRetireBucketAccessCredentials(
	ctx context.Context,
	r *cosiproto.DriverRetireBucketAccessCredentialsRequest,
) (*cosiproto.DriverRetireBucketAccessCredentialsResponse, error) {
	return p.provisioner.DriverRetireBucketAccessCredentials(ctx, r)
}

func (p *proxy) DriverGetBucketUsage(
	ctx context.Context,
	r *cosiproto.DriverGetBucketUsageRequest,
) (*cosiproto.DriverGetBucketUsageResponse, error) {
	return p.provisioner.DriverGetBucketUsage(ctx, r)
}
