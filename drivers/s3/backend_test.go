package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/store/versity"
	"github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/sanity/s3probe"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// backend is a real object store with an account back-end of the driver.
type backend struct {
	name       string
	s3Endpoint string
	creds      aws.CredentialsProvider
	newAccount func() s3.Accounts
	admin      *awss3.Client
	probe      *s3probe.Probe
}

var (
	versityOnce  sync.Once
	versityStore *versity.Store
	versityErr   error

	rgwOnce sync.Once
	rgw     *rgwCluster
	rgwErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if versityStore != nil {
		if err := versityStore.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping versitygw:", err)
		}
		_ = os.RemoveAll(versityStore.Dir)
	}
	if rgw != nil {
		rgw.stop()
	}
	if keylessEnv != nil {
		if err := keylessEnv.api.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the API server:", err)
		}
	}
	os.Exit(code)
}

// versityBackend is the Versity S3 gateway with its IAM service (the iam back-end).
func versityBackend(t *testing.T) *backend {
	t.Helper()
	versityOnce.Do(func() {
		root, err := localenv.RepoRoot()
		if err != nil {
			versityErr = err
			return
		}
		dir, err := os.MkdirTemp("", "cosi-s3-test")
		if err != nil {
			versityErr = err
			return
		}
		versityStore, versityErr = versity.Start(
			context.Background(),
			versity.Options{Binary: filepath.Join(root, "bin", "versitygw"), Dir: dir},
		)
	})
	if versityErr != nil {
		t.Fatalf("starting the Versity gateway: %v", versityErr)
	}
	creds := credentials.NewStaticCredentialsProvider(versityStore.RootAccessKey, versityStore.RootSecretKey, "")
	return &backend{
		name:       "versity-iam",
		s3Endpoint: versityStore.S3Endpoint,
		creds:      creds,
		newAccount: func() s3.Accounts { return s3.NewIAMAccounts(versityStore.IAMEndpoint, creds, nil) },
		admin:      s3.NewS3Client(versityStore.S3Endpoint, "us-east-1", creds, nil),
		probe:      newProbe(t, versityStore.S3Endpoint, creds),
	}
}

// rgwBackend is Ceph RGW (the rgw back-end), started by hack/ceph/rgw.sh. The test is skipped,
// saying why, when Ceph is not installed (make ceph installs it from Debian's packages).
func rgwBackend(t *testing.T) *backend {
	t.Helper()
	if _, err := exec.LookPath("radosgw"); err != nil {
		t.Skip("Ceph RGW is not installed on this machine " +
			"(radosgw not found; `make ceph` installs it from Debian's packages): the rgw back-end is not tested here")
	}
	rgwOnce.Do(func() { rgw, rgwErr = startRGW() })
	if rgwErr != nil {
		t.Fatalf("starting Ceph RGW: %v", rgwErr)
	}
	creds := credentials.NewStaticCredentialsProvider(rgw.accessKey, rgw.secretKey, "")
	admin := s3.NewS3Client(rgw.endpoint, "us-east-1", creds, nil)
	return &backend{
		name:       "ceph-rgw",
		s3Endpoint: rgw.endpoint,
		creds:      creds,
		newAccount: func() s3.Accounts { return s3.NewRGWAccounts(rgw.endpoint, "/admin", "us-east-1", creds, nil, admin) },
		admin:      admin,
		probe:      newProbe(t, rgw.endpoint, creds),
	}
}

// forEachBackend runs f against each back-end.
func forEachBackend(t *testing.T, f func(t *testing.T, b *backend)) {
	t.Run("versity-iam", func(t *testing.T) { f(t, versityBackend(t)) })
	t.Run("ceph-rgw", func(t *testing.T) { f(t, rgwBackend(t)) })
}

// newDriver returns a driver for b.
func (b *backend) newDriver(t *testing.T, prefix string) *s3.Driver {
	t.Helper()
	d, err := s3.New(
		s3.Config{Endpoint: b.s3Endpoint, Credentials: b.creds, Accounts: b.newAccount(), BucketNamePrefix: prefix},
	)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// logBuffer collects a driver's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.buf.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: driver.LogLevelBodies})
}

func (l *logBuffer) bytes() ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.buf.Bytes()), nil
}

// serve serves d through the SDK on a socket until the test ends and returns a client.
func serve(t *testing.T, d *s3.Driver, log logr.Logger) (string, cosiproto.ProvisionerClient) {
	t.Helper()
	endpoint := "unix://" + filepath.Join(t.TempDir(), "driver.sock")
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := driver.NewServer(
		ctx,
		driver.Options{Endpoint: endpoint, Identity: d, Provisioner: d, Logger: log, Registerer: prometheus.NewRegistry()},
	)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- srv.Serve(ctx) }()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return endpoint, cosiproto.NewProvisionerClient(conn)
}

// userClient is an S3 client with issued credentials, configured from the bucket info the driver
// returned, as a workload would be.
func userClient(creds *cosiproto.CredentialInfo, info *cosiproto.ProtocolBucketInfo) *awss3.Client {
	return awss3.New(awss3.Options{
		BaseEndpoint: aws.String(info.GetS3().GetEndpoint()),
		Region:       info.GetS3().GetRegion(),
		Credentials: credentials.NewStaticCredentialsProvider(
			creds.GetS3().GetAccessKeyId(),
			creds.GetS3().GetAccessSecretKey(),
			"",
		),
		UsePathStyle: info.GetS3().GetAddressingStyle() != cosiproto.S3AddressingStyle_VIRTUAL,
		// Fail at once: a denied request is an answer, not something to retry.
		RetryMaxAttempts:           1,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// denied reports whether err is the store refusing the credentials: AccessDenied, or for a
// deleted key InvalidAccessKeyId.
//
// A store may answer a refused upload with 403 and close the connection before the client has
// read the error body (Ceph RGW does): the status alone says denied then.
func denied(err error) bool {
	var respErr interface{ HTTPStatusCode() int }
	if errors.As(err, &respErr) && respErr.HTTPStatusCode() == http.StatusForbidden {
		return true
	}
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode() {
	case "AccessDenied", "InvalidAccessKeyId":
		return true
	}
	return false
}

// bucketExists asks the store, with the admin credentials, whether bucket exists.
func (b *backend) bucketExists(ctx context.Context, bucket string) (bool, error) {
	return b.probe.BucketExists(ctx, bucket)
}

// newProbe is the conformance suite's view of the store: pkg/sanity/s3probe, as an S3 vendor
// would use it, with the admin credentials.
func newProbe(t *testing.T, endpoint string, creds aws.CredentialsProvider) *s3probe.Probe {
	t.Helper()
	p, err := s3probe.New(s3probe.Config{Endpoint: endpoint, Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
