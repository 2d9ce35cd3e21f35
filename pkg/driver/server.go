package driver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/kube-cosi/cosi/pkg/driver/internal/calls"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Options configure a driver's gRPC server.
type Options struct {
	// Endpoint is where to serve, unix:///path/to/driver.sock. Empty means $COSI_ENDPOINT.
	Endpoint string
	// Identity and Provisioner are the driver. Both are required.
	Identity    cosiproto.IdentityServer
	Provisioner cosiproto.ProvisionerServer
	// Logger receives the SDK's logs; see LogLevelCalls and LogLevelBodies. The zero Logger
	// discards them.
	Logger logr.Logger
	// Registerer receives the driver-side metrics cosi_driver_operation_duration_seconds and
	// cosi_driver_operation_errors_total. Nil means prometheus.DefaultRegisterer.
	Registerer prometheus.Registerer
	// SocketMode is the permission of the socket; zero means DefaultSocketMode.
	SocketMode fs.FileMode
	// StopTimeout bounds how long a stop waits for calls in flight before cancelling them; zero
	// means 30 seconds.
	StopTimeout time.Duration
	// Interceptors run after the SDK's own (logging, metrics, request validation, and the wait
	// for calls in flight on the same bucket or account), in order. The memory driver uses this
	// for latency and failure injection.
	Interceptors []grpc.UnaryServerInterceptor
}

// Server is a driver's gRPC server, listening on its socket.
type Server struct {
	name        string
	endpoint    string
	lis         net.Listener
	grpc        *grpc.Server
	log         logr.Logger
	stopTimeout time.Duration
}

// NewServer checks the options, asks the driver for its name and protocols (failing fast on a
// misconfigured driver, as the COSI spec asks), and creates the socket. Call Serve to serve.
func NewServer(ctx context.Context, opts Options) (*Server, error) {
	if opts.Identity == nil || opts.Provisioner == nil {
		return nil, errors.New("driver: Identity and Provisioner are required")
	}
	if opts.Endpoint == "" {
		opts.Endpoint = os.Getenv(EndpointEnv)
		if opts.Endpoint == "" {
			return nil, fmt.Errorf("driver: no endpoint: set %s (unix:///path/to/driver.sock)", EndpointEnv)
		}
	}
	path, err := ParseEndpoint(opts.Endpoint)
	if err != nil {
		return nil, err
	}
	info, err := opts.Identity.DriverGetInfo(ctx, &cosiproto.DriverGetInfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("driver: DriverGetInfo: %w", err)
	}
	if err := ValidateGetInfoResponse(info); err != nil {
		return nil, fmt.Errorf("driver: DriverGetInfo: %w", err)
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.DefaultRegisterer
	}
	metrics, err := calls.NewOperationMetrics(opts.Registerer, "driver")
	if err != nil {
		return nil, fmt.Errorf("driver: registering metrics: %w", err)
	}
	if opts.SocketMode == 0 {
		opts.SocketMode = DefaultSocketMode
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = 30 * time.Second
	}

	lis, err := listen(path, opts.SocketMode)
	if err != nil {
		return nil, fmt.Errorf("driver: %w", err)
	}
	log := opts.Logger.WithValues("driverName", info.GetName())
	// Recovery twice: inside the logging and metrics interceptor, so that a panicking call is
	// logged and counted as the Internal it becomes, and outermost, so that nothing in the chain
	// can take the process down.
	recovery := recoverInterceptor(log)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
		append(
			[]grpc.UnaryServerInterceptor{
				recovery,
				serverInterceptor(log, metrics, info.GetName()),
				recovery,
				inFlightInterceptor(&calls.InFlight{}),
			},
			opts.Interceptors...)...))
	cosiproto.RegisterIdentityServer(srv, opts.Identity)
	cosiproto.RegisterProvisionerServer(srv, opts.Provisioner)
	return &Server{
		name:        info.GetName(),
		endpoint:    opts.Endpoint,
		lis:         lis,
		grpc:        srv,
		log:         log,
		stopTimeout: opts.StopTimeout,
	}, nil
}

// Name is the driver's name, from DriverGetInfo.
func (s *Server) Name() string { return s.name }

// Endpoint is the endpoint the server listens on.
func (s *Server) Endpoint() string { return s.endpoint }

// Serve serves until ctx is done, then stops gracefully: it stops accepting calls, waits up to
// StopTimeout for calls in flight, and removes the socket.
func (s *Server) Serve(ctx context.Context) error {
	served := make(chan error, 1)
	go func() { served <- s.grpc.Serve(s.lis) }()
	s.log.Info("serving", "endpoint", s.endpoint)

	select {
	case err := <-served:
		return fmt.Errorf("driver: serving: %w", err)
	case <-ctx.Done():
	}
	s.log.Info("stopping", "timeout", s.stopTimeout)
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(s.stopTimeout):
		s.log.Info("calls still in flight after the stop timeout; cancelling them")
		s.grpc.Stop()
		<-stopped
	}
	// Wait for Serve to return. Once stopped it has nothing to report: it returns nil, or
	// grpc.ErrServerStopped when the stop came before it started serving.
	<-served //nolint:errcheck // see above
	return nil
}

// Run serves the driver until SIGTERM or SIGINT, then stops gracefully. It is what a driver's
// main calls:
//
//	if err := driver.Run(driver.Options{Identity: d, Provisioner: d, Logger: log}); err != nil {
//		log.Error(err, "driver failed")
//		os.Exit(1)
//	}
func Run(opts Options) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	srv, err := NewServer(ctx, opts)
	if err != nil {
		return err
	}
	return srv.Serve(ctx)
}
