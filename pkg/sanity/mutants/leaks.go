package mutants

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/pkg/driver/memory"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Leak is a driver that returns one secret for every credential it issues (in the cosi_secret
// field of its protocol) and hides that secret in one field it fills, with a bug that makes a case
// quote the field. pkg/sanity's TestNoSecretInOutput and cosi-sanity's TestCLI run the suite
// against each, and check that the secret reaches neither the report nor the JUnit XML. Leaks are
// not in All: they test the suite's own output, not a requirement it checks of drivers.
type Leak struct {
	// Field is where the secret hides.
	Field string
	// Quoted says that a case's failure message quotes the field: the report must then show
	// sanity.Redacted where the secret was. The suite quotes no error details and no access key ID.
	Quoted bool
	// Memory adjusts the reference driver: the protocol whose bucket info holds Field.
	Memory func(*memory.Config)
	// New wraps a fresh reference driver.
	New func(d *memory.Driver, secret string) Server
}

// Where a Leak hides the secret.
const (
	LeakErrorMessage   = "error message"
	LeakErrorDetails   = "error details"
	LeakCredentialID   = "credential_id"
	LeakAccountID      = "account_id"
	LeakBucketID       = "bucket_id"
	LeakAccessKeyID    = "S3 access_key_id"
	LeakS3Endpoint     = "S3 endpoint"
	LeakS3Region       = "S3 region"
	LeakS3BucketName   = "S3 bucket_name"
	LeakStorageAccount = "Azure storage_account"
	LeakGCSProjectID   = "GCS project_id"
	LeakGCSBucketName  = "GCS bucket_name"
)

// Leaks returns a Leak for each field a driver fills with text of its own.
func Leaks() []Leak {
	only := func(p cosiproto.ObjectProtocol_Type) func(*memory.Config) {
		return func(c *memory.Config) { c.Protocols = []cosiproto.ObjectProtocol_Type{p} }
	}
	var leaks []Leak
	for _, l := range []struct {
		field  string
		quoted bool
		memory func(*memory.Config)
	}{
		// Revoking an account never granted answers NotFound (a bug), naming the last key issued.
		{LeakErrorMessage, true, nil},
		// The same, with the key in the status details.
		{LeakErrorDetails, false, nil},
		// The credential ID is the secret: rotations from it fail NotFound, quoting it.
		{LeakCredentialID, true, nil},
		// Every account ID is the secret: the case on distinct account IDs quotes it.
		{LeakAccountID, true, nil},
		// Bucket IDs end in the secret and deleting a bucket fails: cleanups quote the ID.
		{LeakBucketID, true, nil},
		{LeakAccessKeyID, false, nil},
		// Grants return bucket info that differs from DriverCreateBucket's, which a case quotes.
		{LeakS3Endpoint, true, only(cosiproto.ObjectProtocol_S3)},
		{LeakS3Region, true, only(cosiproto.ObjectProtocol_S3)},
		{LeakS3BucketName, true, only(cosiproto.ObjectProtocol_S3)},
		{LeakStorageAccount, true, only(cosiproto.ObjectProtocol_AZURE)},
		{LeakGCSProjectID, true, only(cosiproto.ObjectProtocol_GCS)},
		{LeakGCSBucketName, true, only(cosiproto.ObjectProtocol_GCS)},
	} {
		leaks = append(leaks, Leak{Field: l.field, Quoted: l.quoted, Memory: l.memory,
			New: func(d *memory.Driver, secret string) Server { return &leaky{Driver: d, field: l.field, secret: secret} }})
	}
	return leaks
}

// leaky is the memory driver with one secret for every credential, hidden in field.
type leaky struct {
	*memory.Driver
	field, secret string
	granted       accountSet
}

func (d *leaky) DriverGenerateBucketId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketIdRequest,
) (*cosiproto.DriverGenerateBucketIdResponse, error) {
	resp, err := d.Driver.DriverGenerateBucketId(ctx, req)
	if err == nil && d.field == LeakBucketID {
		resp.BucketId += "-" + d.secret
	}
	return resp, err
}

func (d *leaky) DriverDeleteBucket(
	ctx context.Context, req *cosiproto.DriverDeleteBucketRequest,
) (*cosiproto.DriverDeleteBucketResponse, error) {
	if d.field == LeakBucketID {
		return nil, status.Error(codes.Unavailable, "the backend is busy")
	}
	return d.Driver.DriverDeleteBucket(ctx, req)
}

func (d *leaky) DriverGenerateBucketAccessId(
	ctx context.Context, req *cosiproto.DriverGenerateBucketAccessIdRequest,
) (*cosiproto.DriverGenerateBucketAccessIdResponse, error) {
	resp, err := d.Driver.DriverGenerateBucketAccessId(ctx, req)
	if err == nil && d.field == LeakAccountID {
		resp.AccountId = d.secret
	}
	return resp, err
}

func (d *leaky) DriverGrantBucketAccess(
	ctx context.Context, req *cosiproto.DriverGrantBucketAccessRequest,
) (*cosiproto.DriverGrantBucketAccessResponse, error) {
	resp, err := d.Driver.DriverGrantBucketAccess(ctx, req)
	if err != nil {
		return nil, err
	}
	d.granted.add(req.GetAccountId())
	d.hide(resp.GetCredentials())
	if d.field == LeakCredentialID {
		resp.CredentialId = d.secret
	}
	for _, b := range resp.GetBuckets() {
		s3, az, gcs := b.GetBucketInfo().GetS3(), b.GetBucketInfo().GetAzure(), b.GetBucketInfo().GetGcs()
		switch {
		case d.field == LeakS3Endpoint && s3 != nil:
			s3.Endpoint = "https://" + d.secret + ".s3.example.com"
		case d.field == LeakS3Region && s3 != nil:
			s3.Region = d.secret
		case d.field == LeakS3BucketName && s3 != nil:
			s3.BucketName = d.secret
		case d.field == LeakStorageAccount && az != nil:
			az.StorageAccount = d.secret
		case d.field == LeakGCSProjectID && gcs != nil:
			gcs.ProjectId = d.secret
		case d.field == LeakGCSBucketName && gcs != nil:
			gcs.BucketName = d.secret
		}
	}
	return resp, nil
}

func (d *leaky) DriverRotateBucketAccessCredentials(
	ctx context.Context, req *cosiproto.DriverRotateBucketAccessCredentialsRequest,
) (*cosiproto.DriverRotateBucketAccessCredentialsResponse, error) {
	resp, err := d.Driver.DriverRotateBucketAccessCredentials(ctx, req)
	if err != nil {
		return nil, err
	}
	d.hide(resp.GetCredentials())
	if d.field == LeakCredentialID {
		resp.CredentialId = d.secret
	}
	return resp, nil
}

func (d *leaky) DriverRevokeBucketAccess(
	ctx context.Context, req *cosiproto.DriverRevokeBucketAccessRequest,
) (*cosiproto.DriverRevokeBucketAccessResponse, error) {
	if d.granted.has(req.GetAccountId()) {
		return d.Driver.DriverRevokeBucketAccess(ctx, req)
	}
	switch d.field {
	case LeakErrorMessage:
		return nil, errorf(codes.NotFound, "account %q not found; the last key issued was %s", req.GetAccountId(), d.secret)
	case LeakErrorDetails:
		st, _ := status.New(codes.NotFound, "account "+req.GetAccountId()+" not found").
			WithDetails(&cosiproto.S3Credentials{AccessSecretKey: d.secret})
		return nil, st.Err()
	}
	return d.Driver.DriverRevokeBucketAccess(ctx, req)
}

// hide puts the secret in the credentials' secret field, and in the access key ID when that is
// the field.
func (d *leaky) hide(creds *cosiproto.CredentialInfo) {
	if s3 := creds.GetS3(); s3 != nil {
		s3.AccessSecretKey = d.secret
		if d.field == LeakAccessKeyID {
			s3.AccessKeyId = d.secret
		}
	}
	if az := creds.GetAzure(); az != nil {
		az.AccessToken = d.secret
	}
	if gcs := creds.GetGcs(); gcs != nil {
		gcs.HmacSecret = d.secret
	}
}
