package azure_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/store/azurite"
	"github.com/kube-cosi/cosi/drivers/azure"
	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/sanity/azureprobe"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

var (
	emulatorOnce sync.Once
	emulator     *azurite.Emulator
	emulatorErr  error
	emulatorDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if emulator != nil {
		if err := emulator.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping azurite:", err)
		}
	}
	if emulatorDir != "" {
		_ = os.RemoveAll(emulatorDir)
	}
	os.Exit(code)
}

// account is the storage account the tests run against: Azurite's Blob service, started once,
// with the admin's view of it.
type account struct {
	*azurite.Emulator
	cred  *azblob.SharedKeyCredential
	admin *service.Client
	probe *azureprobe.Probe
}

// startAzurite returns the shared emulator, or skips the test when Azurite is not installed
// (make azurite installs it; make test does).
func startAzurite(t *testing.T) *account {
	t.Helper()
	root, err := localenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := azurite.Binary(filepath.Join(root, "bin"))
	if err := azurite.Installed(bin); err != nil {
		t.Skipf("Azurite is not installed on this machine (%v): the Azure driver is not tested here", err)
	}
	emulatorOnce.Do(func() {
		if emulatorDir, emulatorErr = os.MkdirTemp("", "cosi-azure-test"); emulatorErr != nil {
			return
		}
		emulator, emulatorErr = azurite.Start(context.Background(), azurite.Options{Binary: bin, Dir: emulatorDir})
	})
	if emulatorErr != nil {
		t.Fatalf("starting Azurite: %v", emulatorErr)
	}
	cred, err := azblob.NewSharedKeyCredential(emulator.Account, emulator.Key)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := service.NewClientWithSharedKeyCredential(emulator.Endpoint+"/", cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	probe, err := azureprobe.New(azureprobe.Config{Endpoint: emulator.Endpoint, Credential: cred})
	if err != nil {
		t.Fatal(err)
	}
	return &account{Emulator: emulator, cred: cred, admin: admin, probe: probe}
}

// newDriver returns a driver for the account.
func (a *account) newDriver(t *testing.T, prefix string) *azure.Driver {
	t.Helper()
	creds, err := azure.StaticCredentials(a.Account, a.Key)
	if err != nil {
		t.Fatal(err)
	}
	d, err := azure.New(azure.Config{Endpoint: a.Endpoint, Credentials: creds, ContainerNamePrefix: prefix})
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
func serve(t *testing.T, d *azure.Driver, log logr.Logger) (string, cosiproto.ProvisionerClient) {
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

// access is one granted access, as a workload sees it.
type access struct {
	id     string
	bucket string
	creds  *cosiproto.CredentialInfo
	// credentialID is the grant's credential_id.
	credentialID string
	info         *cosiproto.ProtocolBucketInfo
	// client is the workload's client: the token, and nothing else, as the Secret gives it.
	client *container.Client
}

func accessRequest(
	name string, modes *cosiproto.AccessModes, params map[string]string, buckets ...string,
) *cosiproto.DriverGenerateBucketAccessIdRequest {
	req := &cosiproto.DriverGenerateBucketAccessIdRequest{
		AccountName:        name,
		Protocol:           cosiproto.ObjectProtocol_AZURE,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
		Parameters:         params,
	}
	for _, b := range buckets {
		req.Buckets = append(req.Buckets, &cosiproto.AccessedBucket{BucketId: b, AccessModes: modes})
	}
	return req
}

func grantRequest(
	req *cosiproto.DriverGenerateBucketAccessIdRequest,
	id string,
) *cosiproto.DriverGrantBucketAccessRequest {
	return &cosiproto.DriverGrantBucketAccessRequest{
		AccountId: id, Buckets: req.Buckets, Protocol: req.Protocol,
		AuthenticationType: req.AuthenticationType, Parameters: req.Parameters,
	}
}

// tryGrant grants access in two phases, as the sidecar does.
func tryGrant(
	t *testing.T, p cosiproto.ProvisionerClient, modes *cosiproto.AccessModes, params map[string]string, bucket string,
) (*access, error) {
	t.Helper()
	ctx := t.Context()
	req := accessRequest("ba-"+strings.ToLower(rand.Text()[:12]), modes, params, bucket)
	gen, err := p.DriverGenerateBucketAccessId(ctx, req)
	if err != nil {
		return nil, err
	}
	resp, err := p.DriverGrantBucketAccess(ctx, grantRequest(req, gen.GetAccountId()))
	if err != nil {
		return nil, err
	}
	a := &access{
		id: gen.GetAccountId(), bucket: bucket, creds: resp.GetCredentials(), credentialID: resp.GetCredentialId(),
	}
	for _, bi := range resp.GetBuckets() {
		if bi.GetBucketId() == bucket {
			a.info = bi.GetBucketInfo()
		}
	}
	a.client = workloadClient(t, a.creds.GetAzure().GetAccessToken())
	return a, nil
}

func grant(
	t *testing.T, p cosiproto.ProvisionerClient, modes *cosiproto.AccessModes, params map[string]string, bucket string,
) *access {
	t.Helper()
	a, err := tryGrant(t, p, modes, params, bucket)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func revoke(t *testing.T, p cosiproto.ProvisionerClient, a *access) {
	t.Helper()
	_, err := p.DriverRevokeBucketAccess(t.Context(), &cosiproto.DriverRevokeBucketAccessRequest{
		AccountId: a.id, Protocol: cosiproto.ObjectProtocol_AZURE, AuthenticationType: cosiproto.AuthenticationType_KEY,
		Buckets: []*cosiproto.DriverRevokeBucketAccessRequest_Bucket{{BucketId: a.bucket}},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// workloadClient is what a workload builds from AZURE_STORAGE_SAS_TOKEN: a container client of
// the token's URL, with no other credential. It fails at once: a refusal is an answer.
func workloadClient(t *testing.T, token string) *container.Client {
	t.Helper()
	c, err := container.NewClientWithNoCredential(token, &container.ClientOptions{
		ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}},
	})
	if err != nil {
		t.Fatalf("the token is no container URL the SDK takes: %v", err)
	}
	return c
}

// createBucket creates a bucket through the driver and deletes it (with its blobs) when the test
// ends.
func createBucket(t *testing.T, p cosiproto.ProvisionerClient) string {
	t.Helper()
	ctx := t.Context()
	gen, err := p.DriverGenerateBucketId(ctx, &cosiproto.DriverGenerateBucketIdRequest{
		Name: "bc-" + strings.ToLower(
			rand.Text()[:12],
		),
		Protocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_AZURE},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: gen.GetBucketId()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, err := p.DriverDeleteBucket(context.Background(), &cosiproto.DriverDeleteBucketRequest{
			BucketId: gen.GetBucketId(), Parameters: map[string]string{azure.ParamPurgeOnDelete: "true"},
		})
		if err != nil {
			t.Errorf("cleanup: deleting %s: %v", gen.GetBucketId(), err)
		}
	})
	return gen.GetBucketId()
}

// refused reports whether err is the Blob service refusing the request (HTTP 403).
func refused(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusForbidden
}

// put uploads a blob with c.
func put(ctx context.Context, c *container.Client, name, data string) error {
	_, err := c.NewBlockBlobClient(name).UploadBuffer(ctx, []byte(data), nil)
	return err
}

// get reads a blob with c.
func get(ctx context.Context, c *container.Client, name string) (string, error) {
	resp, err := c.NewBlobClient(name).DownloadStream(ctx, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	return b.String(), err
}
