package driverclient

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/reflection"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

type v1Identity struct{ v1.UnimplementedIdentityServer }

func (v1Identity) DriverGetInfo(context.Context, *v1.DriverGetInfoRequest) (*v1.DriverGetInfoResponse, error) {
	return &v1.DriverGetInfoResponse{Name: "v1.example.com"}, nil
}

type v2Identity struct {
	cosiproto.UnimplementedIdentityServer
}

func (v2Identity) DriverGetInfo(
	context.Context,
	*cosiproto.DriverGetInfoRequest,
) (*cosiproto.DriverGetInfoResponse, error) {
	return &cosiproto.DriverGetInfoResponse{
		Name:               "v2.example.com",
		SupportedProtocols: []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3},
	}, nil
}

// DetectProtocol tells the protocols apart by reflection where the driver serves it, and by
// probing (UNIMPLEMENTED) where it does not; a driver that serves neither is refused.
func TestDetectProtocol(t *testing.T) {
	cases := []struct {
		name       string
		v1, v2     bool
		reflection bool
		want       string
	}{
		{"v1alpha1 by probing", true, false, false, ProtocolV1alpha1},
		{"v1alpha1 by reflection", true, false, true, ProtocolV1alpha1},
		{"v1alpha2 by probing", false, true, false, ProtocolV1alpha2},
		{"v1alpha2 by reflection", false, true, true, ProtocolV1alpha2},
		{"both: v1alpha2", true, true, true, ProtocolV1alpha2},
		{"neither", false, false, false, ""},
		{"neither, by reflection", false, false, true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := grpc.NewServer()
			if tc.v1 {
				v1.RegisterIdentityServer(srv, v1Identity{})
			}
			if tc.v2 {
				cosiproto.RegisterIdentityServer(srv, v2Identity{})
			}
			if tc.reflection {
				reflection.Register(srv)
			}
			sock := filepath.Join(t.TempDir(), "d.sock")
			lis, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.Serve(lis) }()
			defer srv.Stop()
			conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			got, err := DetectProtocol(t.Context(), conn)
			if got != tc.want || (tc.want == "") != (err != nil) {
				t.Errorf("DetectProtocol: %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
