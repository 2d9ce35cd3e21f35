package sanity_test

import (
	"bytes"
	"context"
	"maps"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
	"github.com/kube-cosi/cosi/pkg/sanity"
)

// grantsSecrets is a FAKE v1alpha1 driver whose grants answer with secrets under S3, as the
// drivers found in the wild do; everything else as a correct driver.
type grantsSecrets struct {
	v1.UnimplementedIdentityServer
	v1.UnimplementedProvisionerServer
	secrets map[string]string
}

func (d grantsSecrets) DriverGetInfo(context.Context, *v1.DriverGetInfoRequest) (*v1.DriverGetInfoResponse, error) {
	return &v1.DriverGetInfoResponse{Name: "secrets.v1alpha1.example.com"}, nil
}

func (d grantsSecrets) DriverCreateBucket(
	_ context.Context, req *v1.DriverCreateBucketRequest,
) (*v1.DriverCreateBucketResponse, error) {
	return &v1.DriverCreateBucketResponse{BucketId: req.GetName()}, nil
}

func (d grantsSecrets) DriverDeleteBucket(
	context.Context, *v1.DriverDeleteBucketRequest,
) (*v1.DriverDeleteBucketResponse, error) {
	return &v1.DriverDeleteBucketResponse{}, nil
}

func (d grantsSecrets) DriverGrantBucketAccess(
	_ context.Context, req *v1.DriverGrantBucketAccessRequest,
) (*v1.DriverGrantBucketAccessResponse, error) {
	return &v1.DriverGrantBucketAccessResponse{AccountId: req.GetName(), Credentials: map[string]*v1.CredentialDetails{
		v1alpha1.CredentialsS3: {Secrets: d.secrets},
	}}, nil
}

func (d grantsSecrets) DriverRevokeBucketAccess(
	context.Context, *v1.DriverRevokeBucketAccessRequest,
) (*v1.DriverRevokeBucketAccessResponse, error) {
	return &v1.DriverRevokeBucketAccessResponse{}, nil
}

// The v1alpha1 credentials case reads the secrets as the sidecar's adapter does: the aliases it
// reads pass, two different values under one value's names fail, and an endpoint or region left
// out fails saying what the admin must declare for the sidecar to drive the driver.
func TestV1alpha1CredentialsAsTheAdapterReadsThem(t *testing.T) {
	complete := map[string]string{v1alpha1.S3AccessKeyIDAlias: "AKID", v1alpha1.S3AccessSecretKeyAlias: "SECRET",
		v1alpha1.S3Endpoint: "https://s3.example.com", v1alpha1.S3Region: "r1"}
	without := func(k string) map[string]string {
		m := map[string]string{}
		for key, v := range complete {
			if key != k {
				m[key] = v
			}
		}
		return m
	}
	conflicting := maps.Clone(complete)
	conflicting[v1alpha1.S3AccessKeyID] = "AKID2"
	for _, tc := range []struct {
		name    string
		secrets map[string]string
		want    string // empty: passes
	}{
		{"the aliases", complete, ""},
		{"no region", without(v1alpha1.S3Region), v1alpha1.ParameterS3Region},
		{"no endpoint", without(v1alpha1.S3Endpoint), v1alpha1.FlagS3Endpoint},
		{"two key IDs", conflicting, "hold different values"},
		{"no secret key", without(v1alpha1.S3AccessSecretKeyAlias), "none of accessSecretKey, secretAccessKey"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "driver.sock")
			lis, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer()
			d := grantsSecrets{secrets: tc.secrets}
			v1.RegisterIdentityServer(srv, d)
			v1.RegisterProvisionerServer(srv, d)
			go func() { _ = srv.Serve(lis) }()
			t.Cleanup(srv.Stop)
			results, err := sanity.Run(t.Context(), sanity.Config{
				Endpoint: "unix://" + sock, Run: regexp.MustCompile(`^v1alpha1/DriverGrantBucketAccess/credentials$`),
			})
			if err != nil || len(results) != 1 {
				t.Fatalf("sanity.Run: %v, %v", results, err)
			}
			r := results[0]
			if tc.want == "" && r.Status != sanity.Passed ||
				tc.want != "" && (r.Status != sanity.Failed || !strings.Contains(r.Message, tc.want)) {
				t.Errorf("%s: %v %q, want %q", r.Name, r.Status, r.Message, tc.want)
			}
		})
	}
}

// revokeQuotesKeys is a v1alpha1 driver whose revocations fail, quoting the keys of the account.
type revokeQuotesKeys struct{ grantsSecrets }

func (d revokeQuotesKeys) DriverRevokeBucketAccess(
	context.Context, *v1.DriverRevokeBucketAccessRequest,
) (*v1.DriverRevokeBucketAccessResponse, error) {
	return nil, status.Errorf(codes.Internal, "cannot revoke: keys %v in use", d.secrets)
}

// A v1alpha1 driver's secrets are every value of its credentials' secrets map but those the adapter
// maps to fields that are not secret (v1alpha1.NonSecretKeys): the suite's report shows
// sanity.Redacted for them, and the rest as the driver sent it.
func TestV1alpha1SecretsAreRedacted(t *testing.T) {
	key, token := newSecret(), newSecret()
	sock := filepath.Join(t.TempDir(), "driver.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	d := revokeQuotesKeys{grantsSecrets{secrets: map[string]string{
		v1alpha1.S3AccessKeyID: "AKIDOPENTOEVERYONE", v1alpha1.S3AccessSecretKey: key, "sessionToken": token,
		v1alpha1.S3Endpoint: "https://s3.example.com", v1alpha1.S3Region: "r1",
	}}}
	v1.RegisterIdentityServer(srv, d)
	v1.RegisterProvisionerServer(srv, d)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	results, err := sanity.Run(t.Context(), sanity.Config{Endpoint: "unix://" + sock})
	if err != nil {
		t.Fatal(err)
	}
	out := report(results)
	for _, secret := range []string{key, token} {
		if part := leaked(out, secret); part != "" {
			t.Errorf("the report holds %q of the secret %q:\n%s", part, secret, out)
		}
	}
	if !bytes.Contains(out, []byte(sanity.Redacted)) || !bytes.Contains(out, []byte("AKIDOPENTOEVERYONE")) ||
		!bytes.Contains(out, []byte("https://s3.example.com")) {
		t.Errorf("the report does not quote the revocation's error with the secrets redacted and the rest "+
			"as it is:\n%s", out)
	}
}
