package cosi

import (
	"context"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestSecretFields checks which fields carry the cosi_secret option: exactly the secret material
// of each protocol's credentials, and every field whose name says it holds a secret.
func TestSecretFields(t *testing.T) {
	var secret []string
	messages := File_cosi_v1alpha2_cosi_proto.Messages()
	var walk func(protoreflect.MessageDescriptors)
	walk = func(mds protoreflect.MessageDescriptors) {
		for i := range mds.Len() {
			md := mds.Get(i)
			for j := range md.Fields().Len() {
				fd := md.Fields().Get(j)
				marked := proto.GetExtension(fd.Options(), E_CosiSecret).(bool)
				if marked {
					secret = append(secret, string(fd.FullName()))
				}
				name := string(fd.Name())
				// A file's path is not its content: web_identity_token_file names where a Pod mounts
				// its token, which COSI never sees.
				looksSecret := (strings.Contains(name, "secret") || strings.Contains(name, "token") ||
					name == "private_key") && !strings.HasSuffix(name, "_file")
				if looksSecret && !marked {
					t.Errorf("%s looks like a secret but is not marked cosi_secret", fd.FullName())
				}
			}
			walk(md.Messages())
		}
	}
	walk(messages)

	want := []string{
		"cosi.v1alpha2.AzureCredentials.access_token",
		"cosi.v1alpha2.GcsCredentials.hmac_secret",
		"cosi.v1alpha2.GcsCredentials.private_key",
		"cosi.v1alpha2.S3Credentials.access_secret_key",
	}
	slices.Sort(secret)
	if !slices.Equal(secret, want) {
		t.Errorf("fields marked cosi_secret = %v, want %v", secret, want)
	}
}

// TestServices checks that the generated services carry the KEP's eight RPCs, COSI's two
// rotation RPCs and its usage RPC.
func TestServices(t *testing.T) {
	want := map[string][]string{
		"Identity": {"DriverGetInfo"},
		"Provisioner": {
			"DriverGenerateBucketId", "DriverCreateBucket", "DriverGetBucket", "DriverDeleteBucket",
			"DriverGenerateBucketAccessId", "DriverGrantBucketAccess", "DriverRevokeBucketAccess",
			// COSI extensions (issue 20): optional, Unimplemented from a driver that cannot rotate.
			"DriverRotateBucketAccessCredentials", "DriverRetireBucketAccessCredentials",
			// COSI extension (issue 44): called only for drivers that advertise BUCKET_USAGE.
			"DriverGetBucketUsage",
		},
	}
	services := File_cosi_v1alpha2_cosi_proto.Services()
	if services.Len() != len(want) {
		t.Fatalf("%d services, want %d", services.Len(), len(want))
	}
	for name, methods := range want {
		sd := services.ByName(protoreflect.Name(name))
		if sd == nil {
			t.Fatalf("service %s missing", name)
		}
		var got []string
		for i := range sd.Methods().Len() {
			got = append(got, string(sd.Methods().Get(i).Name()))
		}
		if !slices.Equal(got, methods) {
			t.Errorf("service %s methods = %v, want %v", name, got, methods)
		}
	}
}

type identity struct {
	UnimplementedIdentityServer
}

func (identity) DriverGetInfo(context.Context, *DriverGetInfoRequest) (*DriverGetInfoResponse, error) {
	return &DriverGetInfoResponse{
		Name:               "memory.cosi.example.com",
		SupportedProtocols: []ObjectProtocol_Type{ObjectProtocol_S3, ObjectProtocol_GCS},
	}, nil
}

// TestUnixSocketRoundTrip serves the generated services on a Unix socket, as drivers do, and calls
// them with the generated client.
func TestUnixSocketRoundTrip(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "cosi.sock")
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	RegisterIdentityServer(srv, identity{})
	RegisterProvisionerServer(srv, UnimplementedProvisionerServer{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })

	info, err := NewIdentityClient(conn).DriverGetInfo(t.Context(), &DriverGetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	wantProtocols := []ObjectProtocol_Type{ObjectProtocol_S3, ObjectProtocol_GCS}
	if info.GetName() != "memory.cosi.example.com" || !slices.Equal(info.GetSupportedProtocols(), wantProtocols) {
		t.Errorf("DriverGetInfo = %v", info)
	}

	_, err = NewProvisionerClient(conn).DriverCreateBucket(t.Context(), &DriverCreateBucketRequest{BucketId: "b"})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("unimplemented DriverCreateBucket returned %v, want code Unimplemented", err)
	}
}
