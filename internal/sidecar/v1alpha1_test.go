package sidecar_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
)

// sampleV1alpha1 is a FAKE COSI v1alpha1 driver that grants as the upstream v1alpha1 sample driver
// does: a key under "accessKeyId" and "accessSecretKey", and no endpoint or region. It records the
// parameters of every grant and revoke.
type sampleV1alpha1 struct {
	v1.UnimplementedIdentityServer
	v1.UnimplementedProvisionerServer
	name string

	mu       sync.Mutex
	params   map[string][]map[string]string // by method
	accounts []string                       // of every grant
}

func (d *sampleV1alpha1) DriverGetInfo(context.Context, *v1.DriverGetInfoRequest) (*v1.DriverGetInfoResponse, error) {
	return &v1.DriverGetInfoResponse{Name: d.name}, nil
}

func (d *sampleV1alpha1) DriverCreateBucket(
	_ context.Context, req *v1.DriverCreateBucketRequest,
) (*v1.DriverCreateBucketResponse, error) {
	return &v1.DriverCreateBucketResponse{BucketId: req.GetName()}, nil
}

func (d *sampleV1alpha1) DriverDeleteBucket(
	context.Context, *v1.DriverDeleteBucketRequest,
) (*v1.DriverDeleteBucketResponse, error) {
	return &v1.DriverDeleteBucketResponse{}, nil
}

func (d *sampleV1alpha1) DriverGrantBucketAccess(
	_ context.Context, req *v1.DriverGrantBucketAccessRequest,
) (*v1.DriverGrantBucketAccessResponse, error) {
	d.record("DriverGrantBucketAccess", req.GetParameters())
	d.mu.Lock()
	d.accounts = append(d.accounts, req.GetName())
	d.mu.Unlock()
	return &v1.DriverGrantBucketAccessResponse{AccountId: req.GetName(), Credentials: map[string]*v1.CredentialDetails{
		v1alpha1.CredentialsS3: {Secrets: map[string]string{
			v1alpha1.S3AccessKeyIDAlias: "AKID-" + req.GetName(), v1alpha1.S3AccessSecretKey: "sample-secret",
		}},
	}}, nil
}

func (d *sampleV1alpha1) DriverRevokeBucketAccess(
	_ context.Context, req *v1.DriverRevokeBucketAccessRequest,
) (*v1.DriverRevokeBucketAccessResponse, error) {
	d.record("DriverRevokeBucketAccess", req.GetRevokeAccessContext())
	return &v1.DriverRevokeBucketAccessResponse{}, nil
}

func (d *sampleV1alpha1) record(method string, params map[string]string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.params[method] = append(d.params[method], maps.Clone(params))
}

func (d *sampleV1alpha1) paramsOf(method string) []map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.params[method])
}

func (d *sampleV1alpha1) granted() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.accounts)
}

// newSampleHarness is a harness whose driver is a sampleV1alpha1 on a real Unix socket; the
// sidecar detects v1alpha1 and drives it through the adapter.
func newSampleHarness(t *testing.T) (*harness, *sampleV1alpha1) {
	t.Helper()
	h := &harness{t: t, config: sidecarConfig}
	h.name = fmt.Sprintf("v1alpha1-%d.sidecar-test.cosi.io", driverCounter.Add(1))
	d := &sampleV1alpha1{name: h.name, params: map[string][]map[string]string{}}
	sock := filepath.Join(t.TempDir(), "driver.sock")
	h.endpoint = "unix://" + sock
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	v1.RegisterIdentityServer(srv, d)
	v1.RegisterProvisionerServer(srv, d)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	h.startSidecar()
	return h, d
}

const (
	sampleClassEndpoint = "https://class.s3.example.com"
	sampleFlagEndpoint  = "http://flag.s3.example.com:9000"
)

// TestV1alpha1FallbackParameters: the adapter's endpoint and region parameters are reserved, not
// unknown. The sidecar passes them to the adapter, which completes the answer of a driver that
// returns neither (the upstream sample's), and the driver never sees them, in grant and revoke;
// the sidecar's flags complete the answers of accesses whose class says nothing; an invalid value
// is refused naming the parameter, before the driver is asked; an answer nothing completes is
// refused naming everything missing, and gets no Secret.
func TestV1alpha1FallbackParameters(t *testing.T) {
	t.Parallel()
	h, d := newSampleHarness(t)
	b := h.provisionedBucket(cosiapi.ProtocolS3)

	classParams := map[string]string{
		"tier": "gold", v1alpha1.ParameterS3Endpoint: sampleClassEndpoint, v1alpha1.ParameterS3Region: "class-1",
	}
	ba := provisioned(t, h.accessWith(classParams, cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b),
		accessConditions)
	wantSecret(t, secret(t, ba, 0), sampleClassEndpoint, "class-1", "AKID-"+ba.Status.AccountID)

	invalid := h.accessWith(map[string]string{v1alpha1.ParameterS3Region: "us east"}, cosiapi.ProtocolS3,
		cosiapi.AuthenticationTypeKey, b)
	msg := waitCondition(t, invalid, accessConditions, cosiapi.ConditionProvisioned, metav1.ConditionFalse,
		cosiapi.ReasonProvisioningFailed)
	if !strings.Contains(msg, v1alpha1.ParameterS3Region) {
		t.Errorf("the invalid access's Provisioned message %q does not name %s", msg, v1alpha1.ParameterS3Region)
	}

	incomplete := h.accessWith(nil, cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b)
	msg = waitCondition(t, incomplete, accessConditions, cosiapi.ConditionProvisioned, metav1.ConditionFalse,
		cosiapi.ReasonProvisioningFailed)
	for _, want := range []string{"without endpoint, region", "it returned accessKeyId, accessSecretKey",
		v1alpha1.ParameterS3Endpoint, v1alpha1.FlagS3Region} {
		if !strings.Contains(msg, want) {
			t.Errorf("the incomplete access's Provisioned message %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "sample-secret") {
		t.Errorf("the message shows the secret: %q", msg)
	}
	noSecretWritten(t, incomplete)

	// The flags: the refused access is granted once the sidecar has them (a restart reconciles
	// every access again), and the class's values still win over them.
	h.restartSidecar(sidecarConfig, func(o *sidecar.Options) {
		o.V1alpha1S3Endpoint, o.V1alpha1S3Region = sampleFlagEndpoint, "flag-1"
	})
	incomplete = provisioned(t, incomplete, accessConditions)
	wantSecret(t, secret(t, incomplete, 0), sampleFlagEndpoint, "flag-1", "AKID-"+incomplete.Status.AccountID)
	partial := provisioned(t, h.accessWith(map[string]string{v1alpha1.ParameterS3Region: "class-2"},
		cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey, b), accessConditions)
	wantSecret(t, secret(t, partial, 0), sampleFlagEndpoint, "class-2", "AKID-"+partial.Status.AccountID)

	for _, a := range []*cosiapi.BucketAccess{ba, incomplete, partial} {
		deleteAccess(t, a)
	}
	for _, method := range []string{"DriverGrantBucketAccess", "DriverRevokeBucketAccess"} {
		calls := d.paramsOf(method)
		if len(calls) < 3 {
			t.Errorf("%d %s calls, want at least 3", len(calls), method)
		}
		for _, p := range calls {
			for k := range p {
				if strings.HasPrefix(k, cosiapi.GroupName+"/") {
					t.Errorf("%s got the reserved parameter %s: %v", method, k, p)
				}
			}
		}
	}
	if got := d.paramsOf("DriverGrantBucketAccess"); len(got) > 0 && got[0]["tier"] != "gold" {
		t.Errorf("the first grant got %v, want the class's own parameter tier", got[0])
	}
	// The invalid access never reached the driver.
	for _, account := range d.granted() {
		if account != ba.Status.AccountID && account != incomplete.Status.AccountID &&
			account != partial.Status.AccountID {
			t.Errorf("the driver granted account %q, of none of the valid accesses", account)
		}
	}
}

// wantSecret fails t unless the Secret has the endpoint, region and key ID.
func wantSecret(t *testing.T, s *corev1.Secret, endpoint, region, keyID string) {
	t.Helper()
	for k, want := range map[string]string{
		cosiapi.SecretKeyS3EndpointURL: endpoint, cosiapi.SecretKeyS3Region: region, cosiapi.SecretKeyS3AccessKeyID: keyID,
	} {
		if got := string(s.Data[k]); got != want {
			t.Errorf("Secret %s: %s is %q, want %q", s.Name, k, got, want)
		}
	}
}

// noSecretWritten fails t if a Secret of the access exists.
func noSecretWritten(t *testing.T, ba *cosiapi.BucketAccess) {
	t.Helper()
	s := &corev1.Secret{}
	key := client.ObjectKey{Namespace: ba.Namespace, Name: ba.Spec.BucketClaims[0].AccessSecretName}
	if err := env.Client.Get(t.Context(), key, s); err == nil {
		t.Errorf("access %s was refused, yet has a Secret", ba.Name)
	}
}

// The v1alpha1 fallback flags are checked at start-up, before the sidecar connects to the driver,
// as the class's parameters are before a grant: a typo never reaches a Secret.
func TestInvalidV1alpha1FallbackFlagsAreRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		set  func(*sidecar.Options)
		flag string
	}{
		{func(o *sidecar.Options) { o.V1alpha1S3Endpoint = "s3.example.com" }, v1alpha1.FlagS3Endpoint},
		{func(o *sidecar.Options) { o.V1alpha1S3Endpoint = "https://user:pw@s3.example.com" }, v1alpha1.FlagS3Endpoint},
		{func(o *sidecar.Options) { o.V1alpha1S3Region = "us east" }, v1alpha1.FlagS3Region},
	} {
		opts := sidecarOptions("unix://" + filepath.Join(t.TempDir(), "missing.sock"))
		opts.DriverStartTimeout = 300 * time.Millisecond
		tc.set(&opts)
		err := sidecar.Run(t.Context(), sidecarConfig, opts, logr.Discard())
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%+v: %v, want a refusal naming %s", opts, err, tc.flag)
		}
	}
}
