package mutants

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"

	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

func bucketMutants() []Mutant {
	return []Mutant{
		{
			Name: "generate-creates-bucket", MustCatch: true,
			Bug:  "DriverGenerateBucketId creates the bucket (phase 1 touches the backend)",
			Case: caseGenNothing, Says: "exists after phase 1",
			New: plain(func(d *memory.Driver) Server { return eagerGenerate{d} }),
		},
		{
			Name: "generate-random-bucket-id", MustCatch: true,
			Bug:  "DriverGenerateBucketId appends a random suffix, so a retry gets another ID",
			Case: caseGenIdempotent, Says: "want the same non-empty ID",
			New: plain(func(d *memory.Driver) Server { return randomBucketID{d} }),
		},
		{
			Name: "generate-ignores-existing-bucket", MustCatch: true,
			Bug:  "DriverGenerateBucketId returns the ID of an existing bucket with other parameters",
			Case: caseGenIncompatible, Says: "returned OK",
			New: plain(func(d *memory.Driver) Server { return generateIgnoresExisting{d} }),
		},
		{
			Name: "generate-accepts-invalid-parameters", MustCatch: true,
			Bug:  "DriverGenerateBucketId does not validate parameter values (only DriverCreateBucket does)",
			Case: caseGenInvalid, Says: "returned OK",
			New: plain(func(d *memory.Driver) Server { return generateAcceptsInvalid{d} }),
		},
		{
			Name: "generate-ignores-unknown-bucket-keys", MustCatch: true,
			Bug:  "DriverGenerateBucketId reads the keys it knows and ignores the others",
			Case: caseGenUnknownKey, Says: "returned OK",
			New: plain(func(d *memory.Driver) Server { return generateIgnoresUnknown{d} }),
		},
		{
			Name: "create-not-idempotent", MustCatch: true,
			Bug:  "DriverCreateBucket returns AlreadyExists when a retry finds the bucket it created",
			Case: caseCreateIdempotent, Says: "unexpected error AlreadyExists",
			New: plain(func(d *memory.Driver) Server { return nonIdempotentCreate{d} }),
		},
		{
			Name: "create-fakes-success", MustCatch: true,
			Bug:  "DriverCreateBucket returns OK and bucket info without creating the bucket",
			Case: caseCreateInBackend, Says: "does not exist in the backend",
			New: plain(func(d *memory.Driver) Server { return createFakes{d} }),
		},
		{
			Name: "create-ignores-incompatible", MustCatch: true,
			Bug:  "DriverCreateBucket returns the existing bucket although its parameters differ",
			Case: caseCreateIncompatible, Says: "returned OK",
			New: plain(func(d *memory.Driver) Server { return createIgnoresIncompatible{d} }),
		},
		{
			Name: "create-defaults-invalid-values", MustCatch: true,
			Bug:  "DriverCreateBucket parses versioning leniently: an invalid value means false",
			Case: caseCreateInvalid, Says: "returned OK",
			New: plain(func(d *memory.Driver) Server { return lenientCreate{d} }),
		},
		{
			Name: "ignores-unknown-bucket-keys", MustCatch: true,
			Bug:  "the driver ignores bucket parameter keys it does not know (a class typo is silently lost)",
			Case: caseCreateUnknownKey, Says: "returned OK",
			New: plain(func(d *memory.Driver) Server { return ignoresUnknownBucketKeys{d} }),
		},
		{
			Name: "create-ignores-protocols", MustCatch: true,
			Bug:  "DriverCreateBucket ignores the requested protocols and creates a bucket of every protocol it has",
			Case: caseCreateProtocol, Says: "returned OK",
			New: plain(func(d *memory.Driver) Server { return createIgnoresProtocols{d} }),
		},
		{
			Name: "create-reports-first-protocol", MustCatch: true,
			Bug:  "DriverCreateBucket reports info for its first protocol only, whatever was requested",
			Case: caseCreateEachProtocol, Says: "was requested",
			New: plain(func(d *memory.Driver) Server { return firstProtocolOnly{d} }),
		},
		{
			Name: "get-missing-internal", MustCatch: true,
			Bug:  "DriverGetBucket returns Internal instead of NotFound for a missing bucket",
			Case: caseGetNotFound, Says: "returned Internal",
			New: plain(func(d *memory.Driver) Server { return wrongNotFoundCode{d} }),
		},
		{
			Name: "get-ignores-parameters", MustCatch: true,
			Bug:  "DriverGetBucket imports a bucket whatever the parameters say",
			Case: caseGetIncompatible, Says: "returned OK",
			New: plain(func(d *memory.Driver) Server { return getIgnoresParameters{d} }),
		},
		{
			Name: "get-incompatible-not-found", MustCatch: true,
			Bug: "DriverGetBucket looks up a bucket with the requested parameters and answers NotFound (retried " +
				"for ever) for an existing bucket whose parameters differ, instead of AlreadyExists",
			Case: caseGetIncompatible, Says: "returned NotFound",
			New: plain(func(d *memory.Driver) Server { return getIncompatibleNotFound{d} }),
		},
		{
			Name: "get-without-lookup", MustCatch: true,
			Bug: "DriverGetBucket builds the bucket info from bucket_id and its configuration without asking " +
				"the backend, so a typo in existingBucketID imports a bucket that does not exist",
			Case: caseGetNotFound, Says: "returned OK",
			New: plain(func(d *memory.Driver) Server { return getWithoutLookup{d} }),
		},
		{
			Name: "get-ignores-protocols", MustCatch: true,
			Bug: "DriverGetBucket answers with the bucket's info whatever protocols were requested, so an " +
				"S3 bucket imported for Azure is answered OK without Azure info",
			Case: caseGetProtocols, Says: "answered OK",
			New: plain(func(d *memory.Driver) Server { return getIgnoresProtocols{d} }),
		},
		{
			Name: "get-every-protocol", MustCatch: true,
			Bug: "DriverGetBucket answers with info for every protocol the driver has, not the protocols of " +
				"the bucket (the backend's protocols taken for the bucket's)",
			Case: caseGetProtocols, Says: "does not support",
			New: plain(func(d *memory.Driver) Server { return getEveryProtocol{d} }),
		},
		{
			Name: "delete-missing-not-found", MustCatch: true,
			Bug:  "DriverDeleteBucket returns NotFound for a bucket that is already gone",
			Case: caseDeleteUnknown, Says: "unexpected error NotFound",
			New: plain(func(d *memory.Driver) Server { return deleteNotFound{d} }),
		},
		{
			Name: "delete-does-nothing", MustCatch: true,
			Bug:  "DriverDeleteBucket returns OK and keeps the bucket",
			Case: caseDeleteGone, Says: "returned OK",
			New: plain(func(d *memory.Driver) Server { return deleteNoop{d} }),
		},
		{
			Name: "delete-forgets-bucket", MustCatch: true,
			Bug:  "DriverDeleteBucket drops the driver's record of the bucket but leaves it in the backend",
			Case: caseDeleteInBackend, Says: "still exists in the backend",
			New: plain(func(d *memory.Driver) Server { return &deleteForgets{Driver: d} }),
		},
	}
}

type eagerGenerate struct{ *memory.Driver }

func (d eagerGenerate) DriverGenerateBucketId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketIdRequest,
) (*cosiproto.DriverGenerateBucketIdResponse, error) {
	resp, err := d.Driver.DriverGenerateBucketId(ctx, req)
	if err == nil {
		_, err = d.Driver.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{
			BucketId: resp.GetBucketId(), Protocols: req.GetProtocols(), Parameters: req.GetParameters(),
		})
	}
	return resp, err
}

type randomBucketID struct{ *memory.Driver }

func (d randomBucketID) DriverGenerateBucketId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketIdRequest,
) (*cosiproto.DriverGenerateBucketIdResponse, error) {
	resp, err := d.Driver.DriverGenerateBucketId(ctx, req)
	if err != nil {
		return nil, err
	}
	return &cosiproto.DriverGenerateBucketIdResponse{BucketId: resp.GetBucketId() + "-" + randomSuffix()}, nil
}

type generateIgnoresExisting struct{ *memory.Driver }

func (d generateIgnoresExisting) DriverGenerateBucketId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketIdRequest,
) (*cosiproto.DriverGenerateBucketIdResponse, error) {
	resp, err := d.Driver.DriverGenerateBucketId(ctx, req)
	if isCode(err, codes.AlreadyExists) {
		return &cosiproto.DriverGenerateBucketIdResponse{BucketId: req.GetName()}, nil
	}
	return resp, err
}

type generateAcceptsInvalid struct{ *memory.Driver }

func (d generateAcceptsInvalid) DriverGenerateBucketId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketIdRequest,
) (*cosiproto.DriverGenerateBucketIdResponse, error) {
	resp, err := d.Driver.DriverGenerateBucketId(ctx, req)
	if isCode(err, codes.InvalidArgument) && len(req.GetParameters()) > 0 {
		return &cosiproto.DriverGenerateBucketIdResponse{BucketId: req.GetName()}, nil
	}
	return resp, err
}

type generateIgnoresUnknown struct{ *memory.Driver }

func (d generateIgnoresUnknown) DriverGenerateBucketId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketIdRequest,
) (*cosiproto.DriverGenerateBucketIdResponse, error) {
	req = &cosiproto.DriverGenerateBucketIdRequest{
		Name: req.GetName(), Protocols: req.GetProtocols(), Parameters: onlyKeys(req.GetParameters(), knownBucketKeys),
	}
	return d.Driver.DriverGenerateBucketId(ctx, req)
}

type nonIdempotentCreate struct{ *memory.Driver }

func (d nonIdempotentCreate) DriverCreateBucket(
	ctx context.Context, req *cosiproto.DriverCreateBucketRequest,
) (*cosiproto.DriverCreateBucketResponse, error) {
	if d.Backend().BucketExists(req.GetBucketId()) {
		return nil, errorf(codes.AlreadyExists, "bucket %q exists", req.GetBucketId())
	}
	return d.Driver.DriverCreateBucket(ctx, req)
}

type createFakes struct{ *memory.Driver }

func (d createFakes) DriverCreateBucket(
	ctx context.Context, req *cosiproto.DriverCreateBucketRequest,
) (*cosiproto.DriverCreateBucketResponse, error) {
	resp, err := d.Driver.DriverCreateBucket(ctx, req)
	if err == nil {
		_, err = d.Driver.DriverDeleteBucket(ctx, &cosiproto.DriverDeleteBucketRequest{BucketId: req.GetBucketId()})
	}
	return resp, err
}

type createIgnoresIncompatible struct{ *memory.Driver }

func (d createIgnoresIncompatible) DriverCreateBucket(
	ctx context.Context, req *cosiproto.DriverCreateBucketRequest,
) (*cosiproto.DriverCreateBucketResponse, error) {
	resp, err := d.Driver.DriverCreateBucket(ctx, req)
	if isCode(err, codes.AlreadyExists) {
		got, err := d.Driver.DriverGetBucket(ctx, &cosiproto.DriverGetBucketRequest{BucketId: req.GetBucketId()})
		return &cosiproto.DriverCreateBucketResponse{Protocols: got.GetProtocols()}, err
	}
	return resp, err
}

type lenientCreate struct{ *memory.Driver }

func (d lenientCreate) DriverCreateBucket(
	ctx context.Context, req *cosiproto.DriverCreateBucketRequest,
) (*cosiproto.DriverCreateBucketResponse, error) {
	params := copyParams(req.GetParameters())
	if v, ok := params[memory.ParamVersioning]; ok && v != "true" {
		params[memory.ParamVersioning] = "false"
	}
	return d.Driver.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{
		BucketId: req.GetBucketId(), Protocols: req.GetProtocols(), Parameters: params,
	})
}

type ignoresUnknownBucketKeys struct{ *memory.Driver }

func (d ignoresUnknownBucketKeys) DriverGenerateBucketId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketIdRequest,
) (*cosiproto.DriverGenerateBucketIdResponse, error) {
	return generateIgnoresUnknown(d).DriverGenerateBucketId(ctx, req)
}

func (d ignoresUnknownBucketKeys) DriverCreateBucket(
	ctx context.Context, req *cosiproto.DriverCreateBucketRequest,
) (*cosiproto.DriverCreateBucketResponse, error) {
	return d.Driver.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{
		BucketId: req.GetBucketId(), Protocols: req.GetProtocols(),
		Parameters: onlyKeys(req.GetParameters(), knownBucketKeys),
	})
}

type createIgnoresProtocols struct{ *memory.Driver }

func (d createIgnoresProtocols) DriverCreateBucket(
	ctx context.Context, req *cosiproto.DriverCreateBucketRequest,
) (*cosiproto.DriverCreateBucketResponse, error) {
	return d.Driver.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{
		BucketId: req.GetBucketId(), Parameters: req.GetParameters(),
	})
}

type firstProtocolOnly struct{ *memory.Driver }

func (d firstProtocolOnly) DriverCreateBucket(
	ctx context.Context, req *cosiproto.DriverCreateBucketRequest,
) (*cosiproto.DriverCreateBucketResponse, error) {
	info, err := d.DriverGetInfo(ctx, &cosiproto.DriverGetInfoRequest{})
	if err != nil {
		return nil, err
	}
	return d.Driver.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{
		BucketId: req.GetBucketId(), Parameters: req.GetParameters(),
		Protocols: info.GetSupportedProtocols()[:1],
	})
}

type wrongNotFoundCode struct{ *memory.Driver }

func (d wrongNotFoundCode) DriverGetBucket(
	ctx context.Context, req *cosiproto.DriverGetBucketRequest,
) (*cosiproto.DriverGetBucketResponse, error) {
	resp, err := d.Driver.DriverGetBucket(ctx, req)
	if isCode(err, codes.NotFound) {
		return nil, errorf(codes.Internal, "lookup of bucket %q failed", req.GetBucketId())
	}
	return resp, err
}

type getIgnoresParameters struct{ *memory.Driver }

func (d getIgnoresParameters) DriverGetBucket(
	ctx context.Context, req *cosiproto.DriverGetBucketRequest,
) (*cosiproto.DriverGetBucketResponse, error) {
	return d.Driver.DriverGetBucket(ctx, &cosiproto.DriverGetBucketRequest{
		BucketId: req.GetBucketId(), Protocols: req.GetProtocols(),
	})
}

type deleteNotFound struct{ *memory.Driver }

func (d deleteNotFound) DriverDeleteBucket(
	ctx context.Context, req *cosiproto.DriverDeleteBucketRequest,
) (*cosiproto.DriverDeleteBucketResponse, error) {
	if !d.Backend().BucketExists(req.GetBucketId()) {
		return nil, errorf(codes.NotFound, "bucket %q does not exist", req.GetBucketId())
	}
	return d.Driver.DriverDeleteBucket(ctx, req)
}

type deleteNoop struct{ *memory.Driver }

func (deleteNoop) DriverDeleteBucket(
	context.Context, *cosiproto.DriverDeleteBucketRequest,
) (*cosiproto.DriverDeleteBucketResponse, error) {
	return &cosiproto.DriverDeleteBucketResponse{}, nil
}

// deleteForgets keeps its own bucket records in front of the backend and deletes only those.
type deleteForgets struct {
	*memory.Driver
	mu        sync.Mutex
	forgotten map[string]bool
}

func (d *deleteForgets) isForgotten(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.forgotten[id]
}

func (d *deleteForgets) DriverGetBucket(
	ctx context.Context, req *cosiproto.DriverGetBucketRequest,
) (*cosiproto.DriverGetBucketResponse, error) {
	if d.isForgotten(req.GetBucketId()) {
		return nil, errorf(codes.NotFound, "bucket %q does not exist", req.GetBucketId())
	}
	return d.Driver.DriverGetBucket(ctx, req)
}

func (d *deleteForgets) DriverDeleteBucket(
	_ context.Context, req *cosiproto.DriverDeleteBucketRequest,
) (*cosiproto.DriverDeleteBucketResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.forgotten == nil {
		d.forgotten = map[string]bool{}
	}
	d.forgotten[req.GetBucketId()] = true
	return &cosiproto.DriverDeleteBucketResponse{}, nil
}

type getIncompatibleNotFound struct{ *memory.Driver }

func (d getIncompatibleNotFound) DriverGetBucket(
	ctx context.Context, req *cosiproto.DriverGetBucketRequest,
) (*cosiproto.DriverGetBucketResponse, error) {
	resp, err := d.Driver.DriverGetBucket(ctx, req)
	if isCode(err, codes.AlreadyExists) {
		return nil, errorf(codes.NotFound, "no bucket %q with the requested protocols and parameters", req.GetBucketId())
	}
	return resp, err
}

// getWithoutLookup answers from its configuration: the info it would return for any bucket.
type getWithoutLookup struct{ *memory.Driver }

func (d getWithoutLookup) DriverGetBucket(
	ctx context.Context, req *cosiproto.DriverGetBucketRequest,
) (*cosiproto.DriverGetBucketResponse, error) {
	resp, err := d.Driver.DriverGetBucket(ctx, req)
	if isCode(err, codes.NotFound) {
		return &cosiproto.DriverGetBucketResponse{Protocols: &cosiproto.ProtocolBucketInfo{
			S3: &cosiproto.S3BucketInfo{
				BucketName: req.GetBucketId(), Endpoint: "https://s3.memory.invalid", Region: "memory-1",
				AddressingStyle: cosiproto.S3AddressingStyle_PATH,
			},
		}}, nil
	}
	return resp, err
}

// getIgnoresProtocols looks the bucket up by ID alone.
type getIgnoresProtocols struct{ *memory.Driver }

func (d getIgnoresProtocols) DriverGetBucket(
	ctx context.Context, req *cosiproto.DriverGetBucketRequest,
) (*cosiproto.DriverGetBucketResponse, error) {
	return d.Driver.DriverGetBucket(ctx, &cosiproto.DriverGetBucketRequest{
		BucketId: req.GetBucketId(), Parameters: req.GetParameters(),
	})
}

// getEveryProtocol fills in info for each protocol the driver advertises that the bucket lacks.
type getEveryProtocol struct{ *memory.Driver }

func (d getEveryProtocol) DriverGetBucket(
	ctx context.Context, req *cosiproto.DriverGetBucketRequest,
) (*cosiproto.DriverGetBucketResponse, error) {
	resp, err := d.Driver.DriverGetBucket(ctx, &cosiproto.DriverGetBucketRequest{
		BucketId: req.GetBucketId(), Parameters: req.GetParameters(),
	})
	if err != nil {
		return nil, err
	}
	info, _ := d.DriverGetInfo(ctx, &cosiproto.DriverGetInfoRequest{})
	b, id := resp.GetProtocols(), req.GetBucketId()
	for _, p := range info.GetSupportedProtocols() {
		switch {
		case p == cosiproto.ObjectProtocol_S3 && b.GetS3() == nil:
			b.S3 = &cosiproto.S3BucketInfo{BucketName: id, Endpoint: "https://s3.memory.invalid", Region: "memory-1"}
		case p == cosiproto.ObjectProtocol_AZURE && b.GetAzure() == nil:
			b.Azure = &cosiproto.AzureBucketInfo{StorageAccount: "memory"}
		case p == cosiproto.ObjectProtocol_GCS && b.GetGcs() == nil:
			b.Gcs = &cosiproto.GcsBucketInfo{ProjectId: "memory", BucketName: id}
		}
	}
	return resp, nil
}
