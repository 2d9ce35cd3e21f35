package memory

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

var readWrite = &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}

func grantRequest(account string, buckets ...string) *cosiproto.DriverGrantBucketAccessRequest {
	req := &cosiproto.DriverGrantBucketAccessRequest{
		AccountId:          account,
		Protocol:           cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
	}
	for _, b := range buckets {
		req.Buckets = append(req.Buckets, &cosiproto.AccessedBucket{BucketId: b, AccessModes: readWrite})
	}
	return req
}

// TestStateFile checks that a restarted driver remembers its buckets and accounts, and hands out
// the same credentials for an existing account.
func TestStateFile(t *testing.T) {
	ctx := context.Background()
	stateFile := filepath.Join(t.TempDir(), "state.json")
	d, err := New(Config{StateFile: stateFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.DriverCreateBucket(
		ctx,
		&cosiproto.DriverCreateBucketRequest{BucketId: "bc-1", Parameters: map[string]string{ParamVersioning: "true"}},
	); err != nil {
		t.Fatal(err)
	}
	first, err := d.DriverGrantBucketAccess(ctx, grantRequest("ba-1", "bc-1"))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(stateFile); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v, mode %v; want mode 0600 (it holds keys)", err, info.Mode().Perm())
	}

	restarted, err := New(Config{StateFile: stateFile})
	if err != nil {
		t.Fatal(err)
	}
	if !restarted.Backend().BucketExists("bc-1") {
		t.Fatal("the restarted driver forgot bucket bc-1")
	}
	// Same bucket, same parameters: OK; other parameters: AlreadyExists.
	if _, err := restarted.DriverCreateBucket(
		ctx,
		&cosiproto.DriverCreateBucketRequest{BucketId: "bc-1", Parameters: map[string]string{ParamVersioning: "true"}},
	); err != nil {
		t.Errorf("re-creating the same bucket after a restart: %v", err)
	}
	_, err = restarted.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: "bc-1"})
	if status.Code(err) != codes.AlreadyExists {
		t.Errorf("re-creating the bucket with other parameters after a restart: %v, want AlreadyExists", err)
	}
	second, err := restarted.DriverGrantBucketAccess(ctx, grantRequest("ba-1", "bc-1"))
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(first.GetCredentials(), second.GetCredentials()) {
		t.Error("the restarted driver issued other credentials for the same account")
	}
	if !restarted.Backend().Allowed(first.GetCredentials(), "bc-1", ObjectData, true) {
		t.Error("the credentials issued before the restart do not work after it")
	}

	// Deletions persist too.
	if _, err := restarted.DriverRevokeBucketAccess(
		ctx,
		&cosiproto.DriverRevokeBucketAccessRequest{AccountId: "ba-1"},
	); err != nil {
		t.Fatal(err)
	}
	if _, err := restarted.DriverDeleteBucket(ctx, &cosiproto.DriverDeleteBucketRequest{BucketId: "bc-1"}); err != nil {
		t.Fatal(err)
	}
	again, err := New(Config{StateFile: stateFile})
	if err != nil {
		t.Fatal(err)
	}
	if b := again.Backend(); len(b.Buckets()) != 0 || len(b.Accounts()) != 0 {
		t.Errorf("after deleting everything and restarting: buckets %v, accounts %v", b.Buckets(), b.Accounts())
	}
}

func TestParseFault(t *testing.T) {
	for _, tc := range []struct {
		spec    string
		want    Fault
		wantErr bool
	}{
		{spec: "DriverCreateBucket=Unavailable", want: Fault{Method: "DriverCreateBucket", Code: codes.Unavailable, Rate: 1}},
		{
			spec: "DriverCreateBucket=UNAVAILABLE:0.25",
			want: Fault{Method: "DriverCreateBucket", Code: codes.Unavailable, Rate: 0.25},
		},
		{spec: "*=InvalidArgument:x3", want: Fault{Method: "*", Code: codes.InvalidArgument, Rate: 1, Count: 3}},
		{
			spec: "DriverGrantBucketAccess=invalid_argument",
			want: Fault{Method: "DriverGrantBucketAccess", Code: codes.InvalidArgument, Rate: 1},
		},
		{spec: "DriverGetInfo=Cancelled", want: Fault{Method: "DriverGetInfo", Code: codes.Canceled, Rate: 1}},
		{spec: "DriverCreateBucket", wantErr: true},
		{spec: "DriverCreateBucket=OK", wantErr: true},
		{spec: "DriverCreateBucket=Nope", wantErr: true},
		{spec: "DriverCreateBucket=Internal:1.5", wantErr: true},
		{spec: "DriverCreateBucket=Internal:x0", wantErr: true},
	} {
		got, err := ParseFault(tc.spec)
		if (err != nil) != tc.wantErr || (!tc.wantErr && got != tc.want) {
			t.Errorf("ParseFault(%q) = %+v, %v; want %+v, error %v", tc.spec, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestFaults(t *testing.T) {
	var f Faults
	call := func(method string) error {
		_, err := f.Interceptor()(
			context.Background(),
			nil,
			&grpc.UnaryServerInfo{FullMethod: "/cosi.v1alpha2.Provisioner/" + method},
			func(context.Context, any) (any, error) { return "ok", nil },
		)
		return err
	}
	if err := call("DriverCreateBucket"); err != nil {
		t.Fatalf("the zero Faults failed a call: %v", err)
	}

	f.Set(0, Fault{Method: "DriverCreateBucket", Code: codes.Unavailable, Rate: 1, Count: 2})
	for i, want := range []codes.Code{codes.Unavailable, codes.Unavailable, codes.OK} {
		if got := status.Code(call("DriverCreateBucket")); got != want {
			t.Errorf("call %d: %v, want %v", i+1, got, want)
		}
	}
	if err := call("DriverDeleteBucket"); err != nil {
		t.Errorf("a fault for another method failed DriverDeleteBucket: %v", err)
	}

	f.Set(0, Fault{Method: "*", Code: codes.ResourceExhausted, Rate: 0.5})
	failed := 0
	for range 1000 {
		if status.Code(call("DriverGrantBucketAccess")) == codes.ResourceExhausted {
			failed++
		}
	}
	if failed < 400 || failed > 600 {
		t.Errorf("%d of 1000 calls failed at rate 0.5", failed)
	}
}

// TestAccountKeys checks that the backend lists an account's valid keys, newest first: with
// NewKeyPerGrant, a second grant's key, then the first.
func TestAccountKeys(t *testing.T) {
	ctx := context.Background()
	d, err := New(Config{NewKeyPerGrant: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: "bc-1"}); err != nil {
		t.Fatal(err)
	}
	if keys := d.Backend().AccountKeys("ba-1"); keys != nil {
		t.Fatalf("keys of an account that does not exist: %d, want none", len(keys))
	}
	var granted []*cosiproto.CredentialInfo
	for range 3 {
		resp, err := d.DriverGrantBucketAccess(ctx, grantRequest("ba-1", "bc-1"))
		if err != nil {
			t.Fatal(err)
		}
		granted = append(granted, resp.GetCredentials())
	}
	keys := d.Backend().AccountKeys("ba-1")
	if len(keys) != 2 || !proto.Equal(keys[0], granted[2]) || !proto.Equal(keys[1], granted[1]) {
		t.Fatalf("after three grants: %d keys; want the third grant's, then the second's", len(keys))
	}
	for _, k := range keys {
		if !d.Backend().Allowed(k, "bc-1", ObjectData, true) {
			t.Error("a listed key does not open the account's bucket")
		}
	}
	if d.Backend().Allowed(granted[0], "bc-1", ObjectData, false) {
		t.Error("the first grant's key, two grants old, still opens the bucket")
	}
}
