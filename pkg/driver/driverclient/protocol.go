package driverclient

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	reflection "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	"github.com/kube-cosi/cosi/pkg/driver/internal/calls"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// The driver protocols the sidecar speaks.
const (
	// ProtocolV1alpha2 is KEP-1979's protocol, gRPC package cosi.v1alpha2 (proto/cosi.proto).
	ProtocolV1alpha2 = "v1alpha2"
	// ProtocolV1alpha1 is the protocol of the drivers published before KEP-1979 v1alpha2, gRPC
	// package cosi.v1alpha1; the sidecar drives them through pkg/driver/v1alpha1's adapter.
	ProtocolV1alpha1 = "v1alpha1"
)

// The Identity services of the two protocols, as gRPC server reflection lists them.
const (
	identityV1alpha2 = "cosi.v1alpha2.Identity"
	identityV1alpha1 = "cosi.v1alpha1.Identity"
)

// errNoProtocol is returned when the driver serves neither protocol's Identity service: final.
var errNoProtocol = errors.New("the driver serves neither cosi.v1alpha2.Identity nor cosi.v1alpha1.Identity")

// DetectProtocol asks the driver on conn which protocol it speaks: by gRPC server reflection when
// the driver serves it, else by calling cosi.v1alpha2.Identity/DriverGetInfo and then
// cosi.v1alpha1.Identity/DriverGetInfo, where UNIMPLEMENTED means "not this protocol". A driver
// that serves both is driven by v1alpha2. Errors other than UNIMPLEMENTED (the driver not up
// yet) are returned as they are, for the caller to retry.
func DetectProtocol(ctx context.Context, conn grpc.ClientConnInterface) (string, error) {
	services, err := reflectedServices(ctx, conn)
	switch {
	case err == nil:
		switch {
		case slices.Contains(services, identityV1alpha2):
			return ProtocolV1alpha2, nil
		case slices.Contains(services, identityV1alpha1):
			return ProtocolV1alpha1, nil
		}
		return "", fmt.Errorf("%w (gRPC reflection lists %v)", errNoProtocol, services)
	case status.Code(err) != codes.Unimplemented:
		return "", err
	}
	_, err = cosiproto.NewIdentityClient(conn).DriverGetInfo(ctx, &cosiproto.DriverGetInfoRequest{})
	if status.Code(err) != codes.Unimplemented {
		return ProtocolV1alpha2, err
	}
	_, err = v1.NewIdentityClient(conn).DriverGetInfo(ctx, &v1.DriverGetInfoRequest{})
	if status.Code(err) != codes.Unimplemented {
		return ProtocolV1alpha1, err
	}
	return "", errNoProtocol
}

// reflectedServices lists the driver's services by gRPC server reflection (v1).
func reflectedServices(ctx context.Context, conn grpc.ClientConnInterface) ([]string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := reflection.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&reflection.ServerReflectionRequest{
		MessageRequest: &reflection.ServerReflectionRequest_ListServices{ListServices: "*"},
	}); err != nil {
		if _, recvErr := stream.Recv(); recvErr != nil {
			return nil, recvErr // the status behind a failed send
		}
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	if e := resp.GetErrorResponse(); e != nil {
		return nil, status.Error(codes.Code(e.GetErrorCode()), e.GetErrorMessage())
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names, nil
}

// protocolMetric is cosi_sidecar_driver_protocol: 1 for the protocol the driver speaks.
func newProtocolMetric(reg prometheus.Registerer) (*prometheus.GaugeVec, error) {
	return calls.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "cosi",
		Subsystem: "sidecar",
		Name:      "driver_protocol",
		Help: "The COSI driver protocol the sidecar detected (or was told) the driver speaks: " +
			"1 for it, by driver and protocol (v1alpha1, v1alpha2).",
	}, []string{"driver_name", "protocol"}))
}
