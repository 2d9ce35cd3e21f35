package driver

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// ClientOptions configure the sidecar's connection to its driver.
type ClientOptions struct {
	// Logger receives the client's logs (see LogLevelCalls and LogLevelBodies) of calls whose
	// context carries no logger; a call whose context carries one (logr.NewContext, as
	// controller-runtime does for each reconcile) is logged with that one, so that its lines name
	// the object the call was made for.
	Logger logr.Logger
	// Registerer receives KEP-1979's sidecar metrics, cosi_sidecar_operation_duration_seconds and
	// cosi_sidecar_operation_errors_total. Nil means no metrics.
	Registerer prometheus.Registerer
	// CallTimeout is the deadline of each call whose context has none; zero means one minute.
	CallTimeout time.Duration
}

// Client is a connection to a driver, as the sidecar uses it.
type Client struct {
	cosiproto.IdentityClient
	cosiproto.ProvisionerClient

	conn       *grpc.ClientConn
	driverName atomic.Pointer[string]
}

// NewClient prepares a connection to the driver at endpoint. It does no I/O: call Probe to wait
// until the driver answers.
func NewClient(endpoint string, opts ClientOptions) (*Client, error) {
	if _, err := ParseEndpoint(endpoint); err != nil {
		return nil, err
	}
	if opts.CallTimeout == 0 {
		opts.CallTimeout = time.Minute
	}
	metrics, err := newOperationMetrics(opts.Registerer, "sidecar")
	if err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	c := &Client{}
	unknown := ""
	c.driverName.Store(&unknown)
	if opts.Registerer == nil {
		metrics = nil
	}
	conn, err := grpc.NewClient(endpoint,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(clientInterceptor(opts.Logger, metrics, c.DriverName, opts.CallTimeout)))
	if err != nil {
		return nil, err
	}
	c.conn = conn
	c.IdentityClient = cosiproto.NewIdentityClient(conn)
	c.ProvisionerClient = cosiproto.NewProvisionerClient(conn)
	return c, nil
}

// DriverName is the name the driver reported to Probe, or "" before that.
func (c *Client) DriverName() string { return *c.driverName.Load() }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Probe calls DriverGetInfo until the driver answers, with backoff from 100 ms up to 5 s between
// attempts, until ctx is done. It validates the answer (name format, protocols) and returns it.
func (c *Client) Probe(ctx context.Context) (*cosiproto.DriverGetInfoResponse, error) {
	delay := 100 * time.Millisecond
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := c.DriverGetInfo(attemptCtx, &cosiproto.DriverGetInfoRequest{})
		cancel()
		if err == nil {
			if err := ValidateGetInfoResponse(info); err != nil {
				return nil, fmt.Errorf("driver answered DriverGetInfo with an invalid response: %w", err)
			}
			name := info.GetName()
			c.driverName.Store(&name)
			return info, nil
		}
		if !Retryable(err) && status.Code(err) != codes.Unknown {
			return nil, fmt.Errorf("DriverGetInfo: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("driver did not answer before %w; last error: %w", context.Cause(ctx), err)
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// Retryable reports whether a driver call that failed with err may still succeed when repeated
// with the same request: Canceled, DeadlineExceeded, Unavailable, Aborted and ResourceExhausted
// mean the operation may still be in flight or the driver is briefly unable to serve. Every other
// code is final until the request changes. Errors without a gRPC status (a closed connection) are
// retryable.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	s, ok := status.FromError(err)
	if !ok {
		return !errors.Is(err, context.Canceled)
	}
	switch s.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.Unavailable, codes.Aborted, codes.ResourceExhausted:
		return true
	}
	return false
}
