package v1alpha1_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// The adapter attacked as a tenant (asking for more than the class grants) and as a careless
// vendor's driver would (extra keys, the wrong protocol, slow start, a restart as another
// protocol), through the sidecar's client against the fake driver on a Unix socket.

// A BucketAccess that asks for anything but the class's declared modes is refused, final, before
// the driver is called: never granted the driver's (wider or narrower) access.
func TestAccessModesOutsideTheClassAreRefused(t *testing.T) {
	const (
		rw = cosiproto.AccessMode_READ_WRITE
		ro = cosiproto.AccessMode_READ_ONLY
		wo = cosiproto.AccessMode_WRITE_ONLY
	)
	cases := []struct {
		name     string
		declared string // the class's ParameterAccessModes; empty is the default, objectData=ReadWrite
		modes    *cosiproto.AccessModes
	}{
		{"objectData ReadOnly from a ReadWrite class", "", &cosiproto.AccessModes{ObjectData: ro}},
		{"objectData WriteOnly from a ReadWrite class", "", &cosiproto.AccessModes{ObjectData: wo}},
		{"bucketMetadata ReadOnly", "", &cosiproto.AccessModes{ObjectData: rw, BucketMetadata: ro}},
		{"bucketMetadata ReadWrite alone", "", &cosiproto.AccessModes{BucketMetadata: rw}},
		{"objectMetadata ReadWrite", "", &cosiproto.AccessModes{ObjectData: rw, ObjectMetadata: rw}},
		{"objectData ReadWrite from a ReadOnly class", "objectData=ReadOnly", &cosiproto.AccessModes{ObjectData: rw}},
		{"an unknown mode", "", &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_Mode(42)}},
		{"nothing", "", &cosiproto.AccessModes{}},
	}
	f := newFake()
	c, _ := serveFake(t, f)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := grantRequest("ba-1", tc.modes)
			if tc.declared != "" {
				req.Parameters[v1alpha1.ParameterAccessModes] = tc.declared
			}
			_, err := c.DriverGenerateBucketAccessId(t.Context(), &cosiproto.DriverGenerateBucketAccessIdRequest{
				AccountName: "ba-1", Buckets: req.GetBuckets(), Protocol: req.GetProtocol(),
				AuthenticationType: req.GetAuthenticationType(), Parameters: req.GetParameters(),
			})
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("DriverGenerateBucketAccessId: %v, want INVALID_ARGUMENT (final)", err)
			}
			if _, err := c.DriverGrantBucketAccess(t.Context(), req); status.Code(err) != codes.InvalidArgument {
				t.Errorf("DriverGrantBucketAccess: %v, want INVALID_ARGUMENT (final)", err)
			}
		})
	}
	if _, accounts, calls := f.state(); calls["DriverGrantBucketAccess"] != 0 || len(accounts) != 0 {
		t.Errorf("the driver was asked to grant (%v), accounts %v", calls, accounts)
	}
}

// The adapter's own parameter is the class's word, not the driver's: it is removed before every
// call that carries the class's parameters, grant and revoke.
func TestAccessModesParameterNeverReachesTheDriver(t *testing.T) {
	f := newFake()
	c, _ := serveFake(t, f)
	req := grantRequest("ba-1", readWrite)
	req.Parameters[v1alpha1.ParameterAccessModes] = "objectData=ReadWrite"
	if _, err := c.DriverGrantBucketAccess(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DriverRevokeBucketAccess(t.Context(), &cosiproto.DriverRevokeBucketAccessRequest{
		AccountId: "ba-1", Buckets: []*cosiproto.DriverRevokeBucketAccessRequest_Bucket{{BucketId: "bc-1"}},
		Protocol: cosiproto.ObjectProtocol_S3, AuthenticationType: cosiproto.AuthenticationType_KEY,
		Parameters: req.GetParameters(),
	}); err != nil {
		t.Fatal(err)
	}
	for _, method := range []string{"DriverGrantBucketAccess", "DriverRevokeBucketAccess"} {
		for _, p := range f.paramsOf(method) {
			if _, ok := p[v1alpha1.ParameterAccessModes]; ok || p["policy"] != "rw" {
				t.Errorf("%s got parameters %v, want the class's without %s", method, p, v1alpha1.ParameterAccessModes)
			}
		}
	}
}

// Keys the mapping does not name, and the credentials of other protocols, are dropped: nothing of
// them is in the answer the sidecar renders its Secret from.
func TestExtraCredentialKeysAreDropped(t *testing.T) {
	const extra = "extra-value-5e6f"
	f := newFake()
	f.grant = func(_ int, req *v1.DriverGrantBucketAccessRequest) (*v1.DriverGrantBucketAccessResponse, error) {
		f.accounts[req.GetName()] = true
		creds := s3Credentials()
		creds[v1alpha1.CredentialsS3].Secrets["sessionToken"] = extra
		creds[v1alpha1.CredentialsS3].Secrets["AWS_SECRET_ACCESS_KEY"] = extra
		creds[v1alpha1.CredentialsAzure] = &v1.CredentialDetails{Secrets: map[string]string{
			v1alpha1.AzureAccessToken: extra,
		}}
		creds["x-vendor"] = &v1.CredentialDetails{Secrets: map[string]string{"token": extra}}
		return &v1.DriverGrantBucketAccessResponse{AccountId: req.GetName(), Credentials: creds}, nil
	}
	c, _ := serveFake(t, f)
	resp, err := c.DriverGrantBucketAccess(t.Context(), grantRequest("ba-1", readWrite))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(resp.String(), extra) {
		t.Errorf("the answer holds a value the mapping does not name: %v", resp)
	}
	if resp.GetCredentials().GetAzure() != nil || resp.GetCredentials().GetS3().GetAccessSecretKey() != fakeSecret {
		t.Errorf("credentials %v, want S3's only", resp.GetCredentials())
	}
}

// A driver that answers an S3 grant with another protocol's credentials is refused, the refusal
// names keys and never values, and, when the caller says nobody holds credentials of the account
// (a first grant), the account it made is revoked at once: its credentials were thrown away.
func TestCredentialsOfAnotherProtocolAreRefusedAndRevoked(t *testing.T) {
	f := newFake()
	f.grant = func(_ int, req *v1.DriverGrantBucketAccessRequest) (*v1.DriverGrantBucketAccessResponse, error) {
		f.accounts[req.GetName()] = true
		return &v1.DriverGrantBucketAccessResponse{AccountId: req.GetName(), Credentials: map[string]*v1.CredentialDetails{
			v1alpha1.CredentialsAzure: {Secrets: map[string]string{v1alpha1.AzureAccessToken: fakeSecret}},
		}}, nil
	}
	c, logs := serveFake(t, f)
	resp, err := c.DriverGrantBucketAccess(unheld(t), grantRequest("ba-1", readWrite))
	if err == nil || resp != nil {
		t.Fatalf("DriverGrantBucketAccess answered with Azure credentials for S3: %v, %v; want a refusal", resp, err)
	}
	if strings.Contains(err.Error(), fakeSecret) || !strings.Contains(err.Error(), v1alpha1.CredentialsAzure) {
		t.Errorf("refusal %q: want the keys named, never the values", err)
	}
	if _, accounts, _ := f.state(); len(accounts) != 0 {
		t.Errorf("accounts %v left after the refusal", accounts)
	}
	if strings.Contains(logs.String(), fakeSecret) {
		t.Errorf("the client's log holds the secret")
	}
}

// At the highest verbosity the client logs every request and answer: no secret value appears, in
// a plain grant, a grant through ALREADY_EXISTS, and a refused one.
func TestNoSecretInTheLog(t *testing.T) {
	f := newFake()
	f.grant = func(n int, req *v1.DriverGrantBucketAccessRequest) (*v1.DriverGrantBucketAccessResponse, error) {
		switch req.GetName() {
		case "ba-exists":
			if n == 2 { // the first call for it
				return nil, status.Error(codes.AlreadyExists, "account exists")
			}
		case "ba-other":
			f.accounts["key-42"] = true
			return &v1.DriverGrantBucketAccessResponse{AccountId: "key-42", Credentials: s3Credentials()}, nil
		}
		return nil, nil
	}
	c, logs := serveFake(t, f)
	for _, account := range []string{"ba-plain", "ba-exists", "ba-other"} {
		_, _ = c.DriverGrantBucketAccess(unheld(t), grantRequest(account, readWrite))
	}
	log := logs.String()
	if !strings.Contains(log, `"response"`) || !strings.Contains(log, "ba-plain") {
		t.Fatalf("the log has no bodies; the test checks nothing:\n%s", log)
	}
	if strings.Contains(log, fakeSecret) {
		t.Errorf("the secret %q is in the log:\n%s", fakeSecret, log)
	}
}

// A driver whose v1alpha1 Identity is not up yet (UNAVAILABLE) while v1alpha2 is UNIMPLEMENTED is
// waited for: Probe settles on v1alpha1 once it answers, not on a protocol guessed from the error.
func TestProbeWaitsForAV1alpha1DriverStartingUp(t *testing.T) {
	f := newFake()
	f.info = func(n int) error {
		if n <= 3 {
			return status.Error(codes.Unavailable, "starting")
		}
		return nil
	}
	c, _ := serveFake(t, f) // fails unless Probe settles on v1alpha1
	if _, _, calls := f.state(); calls["DriverGetInfo"] < 4 {
		t.Errorf("DriverGetInfo called %d times, want Probe to retry until it answers", calls["DriverGetInfo"])
	}
	if _, err := c.DriverCreateBucket(t.Context(), createRequest()); err != nil {
		t.Errorf("DriverCreateBucket after the start: %v", err)
	}
}

// The protocol is detected once, at start-up. A driver restarted as another protocol's (a mutable
// image tag, say) is not followed: every call then fails UNIMPLEMENTED, which stops create and
// grant (final) and keeps revoke and delete retrying, so nothing is granted or deleted wrongly and
// nothing is given up; the sidecar's readiness check (DriverGetInfo) fails, and restarting the
// sidecar detects the new protocol (docs/v1alpha1-drivers.md).
func TestDriverRestartedAsAnotherProtocol(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "fake.sock")
	old := grpc.NewServer()
	f := newFake()
	v1.RegisterIdentityServer(old, f)
	v1.RegisterProvisionerServer(old, f)
	serve(t, old, sock)
	c, _ := probe(t, sock)
	if c.Protocol() != driverclient.ProtocolV1alpha1 {
		t.Fatalf("Probe settled on %q", c.Protocol())
	}

	old.Stop()
	d, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	restarted := grpc.NewServer()
	cosiproto.RegisterIdentityServer(restarted, d)
	cosiproto.RegisterProvisionerServer(restarted, d)
	serve(t, restarted, sock) // net.Listen: the stopped server removed its socket

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var getInfo error
	for { // the connection comes back after a reconnect backoff
		if _, getInfo = c.DriverGetInfo(ctx, &cosiproto.DriverGetInfoRequest{}); status.Code(getInfo) != codes.Unavailable {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if status.Code(getInfo) != codes.Unimplemented {
		t.Errorf("DriverGetInfo (the readiness check) after the restart: %v, want UNIMPLEMENTED", getInfo)
	}
	if _, err := c.DriverCreateBucket(ctx, createRequest()); !finalForGrant(err) {
		t.Errorf("DriverCreateBucket after the restart: %v, want a final error", err)
	}
	if _, err := c.DriverDeleteBucket(ctx, &cosiproto.DriverDeleteBucketRequest{BucketId: "bc-0"}); err == nil {
		t.Errorf("DriverDeleteBucket after the restart succeeded; want an error the sidecar retries")
	}

	again, _ := probe(t, sock) // the sidecar restarted
	if again.Protocol() != driverclient.ProtocolV1alpha2 {
		t.Errorf("a new Probe settled on %q, want %q", again.Protocol(), driverclient.ProtocolV1alpha2)
	}
}
