package mutants

import (
	"context"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

func otherMutants() []Mutant {
	return []Mutant{
		{
			Name: "errors-with-details", MustCatch: true,
			Bug:  "errors carry gRPC status details (the COSI error scheme forbids them)",
			Case: caseErrors, Says: "with status details",
			New: plain(func(d *memory.Driver) Server { return detailedErrors{d} }),
		},
		{
			Name: "errors-without-message", MustCatch: true,
			Bug:  "errors carry a code and no message",
			Case: caseErrors, Says: "without a message",
			New: plain(func(d *memory.Driver) Server { return silentErrors{d} }),
		},
		{
			Name: "outage-is-internal", MustCatch: false,
			Bug: "a brief backend outage is reported as Internal (final) instead of Unavailable (retried)",
			Blind: "the suite cannot make the backend fail; a Probe cannot either. Test it in the driver's " +
				"own tests against a backend that is stopped",
			New: plain(func(d *memory.Driver) Server { return outageInternal{d} }),
		},
		{
			Name: "secret-in-log", MustCatch: true,
			Bug:  "the driver logs the credentials it returns, without driver.StripSecrets",
			Case: caseLogs, Says: "contains a credential",
			New: func(d *memory.Driver, log logr.Logger) Instance { return Instance{Server: leakySecretLog{d, log}} },
		},
		{
			Name: "logs-nothing", MustCatch: true,
			Bug:  "the driver's main drops the SDK's call logs (default verbosity), so the log check has nothing to see",
			Case: caseLogs, Says: "no response line",
			New: func(d *memory.Driver, _ logr.Logger) Instance { return Instance{Server: d, QuietLog: true} },
		},
		{
			Name: "secret-in-error", MustCatch: true,
			Bug:  "AlreadyExists for a repeat grant names the existing key, secret included",
			Case: caseErrorSecrets, Says: "contains a credential",
			New: plain(func(d *memory.Driver) Server { return &secretInError{Driver: d} }),
		},
	}
}

type detailedErrors struct{ *memory.Driver }

func (d detailedErrors) DriverGetBucket(
	ctx context.Context, req *cosiproto.DriverGetBucketRequest,
) (*cosiproto.DriverGetBucketResponse, error) {
	resp, err := d.Driver.DriverGetBucket(ctx, req)
	if err != nil {
		st, _ := status.Convert(err).WithDetails(&cosiproto.DriverGetBucketRequest{BucketId: req.GetBucketId()})
		return nil, st.Err()
	}
	return resp, nil
}

type silentErrors struct{ *memory.Driver }

func (d silentErrors) DriverGetBucket(
	ctx context.Context, req *cosiproto.DriverGetBucketRequest,
) (*cosiproto.DriverGetBucketResponse, error) {
	resp, err := d.Driver.DriverGetBucket(ctx, req)
	if err != nil {
		return nil, status.Error(status.Code(err), "")
	}
	return resp, nil
}

type outageInternal struct{ *memory.Driver }

func (d outageInternal) DriverCreateBucket(
	ctx context.Context, req *cosiproto.DriverCreateBucketRequest,
) (*cosiproto.DriverCreateBucketResponse, error) {
	resp, err := d.Driver.DriverCreateBucket(ctx, req)
	if isCode(err, codes.Unavailable) {
		return nil, errorf(codes.Internal, "backend request failed")
	}
	return resp, err
}

type leakySecretLog struct {
	*memory.Driver
	log logr.Logger
}

func (d leakySecretLog) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, req)
	if err == nil {
		d.log.Info("granted", "credentials", resp.GetCredentials().String()) // the bug: no StripSecrets
	}
	return resp, err
}

// secretInError explains an AlreadyExists with the key of the existing account.
type secretInError struct {
	*memory.Driver
	cache requestCache
}

func (d *secretInError) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, req)
	if err == nil {
		d.cache.remember(req, resp.GetCredentials())
		return resp, nil
	}
	if _, creds := d.cache.get(req.GetAccountId()); isCode(err, codes.AlreadyExists) && creds != nil {
		return nil, errorf(codes.AlreadyExists, "account %q exists with key %s/%s and other modes",
			req.GetAccountId(), creds.GetS3().GetAccessKeyId(), creds.GetS3().GetAccessSecretKey())
	}
	return nil, err
}
