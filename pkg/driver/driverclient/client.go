// Package driverclient is the client the COSI sidecar uses to call a driver: it detects the
// driver's protocol (v1alpha2, or v1alpha1 through package v1alpha1's adapter), keeps calls on the
// same bucket or account apart, logs and measures them. A driver does not need it; it lives apart
// from package driver so that a driver's binary links the server side only.
package driverclient

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

	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/internal/calls"
	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Options configure the sidecar's connection to its driver.
type Options struct {
	// Logger receives the client's logs (see driver.LogLevelCalls and driver.LogLevelBodies) of calls whose
	// context carries no logger; a call whose context carries one (logr.NewContext, as
	// controller-runtime does for each reconcile) is logged with that one, so that its lines name
	// the object the call was made for.
	Logger logr.Logger
	// Registerer receives KEP-1979's sidecar metrics, cosi_sidecar_operation_duration_seconds and
	// cosi_sidecar_operation_errors_total: one observation per v1alpha2 operation, named as
	// v1alpha2 names it, whatever protocol the driver speaks. Nil means no metrics.
	Registerer prometheus.Registerer
	// CallTimeout bounds each operation once no other call holds it back (see Client), also
	// inside a context with a later deadline; zero means one minute.
	CallTimeout time.Duration
	// Protocol forces the driver protocol, ProtocolV1alpha2 or ProtocolV1alpha1; empty means
	// Probe detects it (DetectProtocol).
	Protocol string
	// V1alpha1 configures the adapter that drives a v1alpha1 driver.
	V1alpha1 v1alpha1.Options
}

// Client is a connection to a driver, as the sidecar uses it. Its Identity and Provisioner are
// the v1alpha2 services, for a v1alpha1 driver through pkg/driver/v1alpha1's adapter.
//
// Calls on one bucket do not overlap where the driver's protocol asks so: the v1alpha1 spec makes
// its callers ensure "no more than one call in-flight per Bucket", so for a v1alpha1 driver every
// operation waits until none is in flight on its buckets. KEP-1979 says nothing; for a v1alpha2
// driver an operation on a bucket itself (generate ID, create, get, delete) waits for every call
// on that bucket, and grants and revocations wait for those and for calls of the same account, but
// not for each other. The wait ends with the context (DEADLINE_EXCEEDED or CANCELLED, without a
// driver call); the call timeout starts once it is over.
type Client struct {
	cosiproto.IdentityClient
	cosiproto.ProvisionerClient

	conn       *grpc.ClientConn
	ops        *operations
	driverName atomic.Pointer[string]
	opts       Options
	protocol   string
	protocolM  *prometheus.GaugeVec
}

// New prepares a connection to the driver at endpoint. It does no I/O: call Probe to wait until
// the driver answers.
func New(endpoint string, opts Options) (*Client, error) {
	if _, err := driver.ParseEndpoint(endpoint); err != nil {
		return nil, err
	}
	if opts.CallTimeout == 0 {
		opts.CallTimeout = time.Minute
	}
	metrics, err := calls.NewOperationMetrics(opts.Registerer, "sidecar")
	if err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	switch opts.Protocol {
	case "", ProtocolV1alpha2, ProtocolV1alpha1:
	default:
		return nil, fmt.Errorf("driver protocol %q is not %s or %s", opts.Protocol, ProtocolV1alpha2, ProtocolV1alpha1)
	}
	protocolM, err := newProtocolMetric(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	c := &Client{opts: opts, protocolM: protocolM}
	unknown := ""
	c.driverName.Store(&unknown)
	if opts.Registerer == nil {
		metrics = nil
	}
	conn, err := grpc.NewClient(endpoint,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(clientInterceptor(opts.Logger)))
	if err != nil {
		return nil, err
	}
	c.conn = conn
	c.ops = &operations{
		identity:    cosiproto.NewIdentityClient(conn),
		provisioner: cosiproto.NewProvisionerClient(conn),
		metrics:     metrics,
		driverName:  c.DriverName,
		timeout:     opts.CallTimeout,
		inFlight:    &calls.InFlight{},
	}
	c.IdentityClient, c.ProvisionerClient = c.ops, c.ops
	return c, nil
}

// Protocol is the protocol the driver speaks, ProtocolV1alpha2 or ProtocolV1alpha1, once Probe
// returned.
func (c *Client) Protocol() string { return c.protocol }

// DriverName is the name the driver reported to Probe, or "" before that.
func (c *Client) DriverName() string { return *c.driverName.Load() }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Probe calls DriverGetInfo until the driver answers, with backoff from 100 ms up to 5 s between
// attempts, until ctx is done. It validates the answer (name format, protocols) and returns it.
//
// It first settles the driver's protocol (Options.Protocol, or DetectProtocol): for a
// v1alpha1 driver, the client's Identity and Provisioner become pkg/driver/v1alpha1's adapter.
// Call it before any other method, and only once.
func (c *Client) Probe(ctx context.Context) (*cosiproto.DriverGetInfoResponse, error) {
	delay := 100 * time.Millisecond
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.settleProtocol(attemptCtx)
		var info *cosiproto.DriverGetInfoResponse
		if err == nil {
			info, err = c.DriverGetInfo(attemptCtx, &cosiproto.DriverGetInfoRequest{})
		}
		cancel()
		if errors.Is(err, errNoProtocol) {
			return nil, err
		}
		if err == nil {
			if err := driver.ValidateGetInfoResponse(info); err != nil {
				return nil, fmt.Errorf("driver answered DriverGetInfo with an invalid response: %w", err)
			}
			name := info.GetName()
			c.driverName.Store(&name)
			if c.protocolM != nil {
				c.protocolM.WithLabelValues(name, c.protocol).Set(1)
			}
			c.opts.Logger.Info("driver protocol", "protocol", c.protocol, "forced", c.opts.Protocol != "")
			return info, nil
		}
		if !driver.Retryable(err) && status.Code(err) != codes.Unknown {
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

// settleProtocol detects the driver's protocol once (or takes the forced one) and puts the
// v1alpha1 adapter in place for a v1alpha1 driver.
func (c *Client) settleProtocol(ctx context.Context) error {
	if c.protocol != "" {
		return nil
	}
	protocol := c.opts.Protocol
	if protocol == "" {
		var err error
		if protocol, err = DetectProtocol(ctx, c.conn); err != nil {
			return err
		}
	}
	if protocol == ProtocolV1alpha1 {
		adapter := v1alpha1.New(c.conn, c.opts.V1alpha1)
		c.ops.identity, c.ops.provisioner, c.ops.perBucket = adapter, adapter, true
	}
	c.protocol = protocol
	return nil
}
