package v1alpha1_test

import (
	"context"
	"maps"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// measured gathers the sidecar's operation metrics: the observations of
// cosi_sidecar_operation_duration_seconds by "method code", and cosi_sidecar_operation_errors_total
// by method.
func measured(t *testing.T, reg *prometheus.Registry) (durations, errors map[string]uint64) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	durations, errors = map[string]uint64{}, map[string]uint64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch f.GetName() {
			case "cosi_sidecar_operation_duration_seconds":
				durations[labels["method_name"]+" "+labels["grpc_status_code"]] += m.GetHistogram().GetSampleCount()
			case "cosi_sidecar_operation_errors_total":
				errors[labels["method_name"]] += uint64(m.GetCounter().GetValue())
			}
		}
	}
	return durations, errors
}

// The sidecar's metrics count what KEP-1979 names: v1alpha2 operations, one per operation, under
// the v1alpha2 method name and the code the sidecar got, whatever the adapter made of it (no call,
// several v1alpha1 calls, a refusal before any call); the protocol detection is no operation.
func TestMetricsCountV1alpha2Operations(t *testing.T) {
	f := newFake()
	f.create = func(_ int, req *v1.DriverCreateBucketRequest) (*v1.DriverCreateBucketResponse, error) {
		f.buckets["vendor-"+req.GetName()] = true // refused by the adapter, and deleted again: two v1alpha1 calls
		return &v1.DriverCreateBucketResponse{BucketId: "vendor-" + req.GetName()}, nil
	}
	sock := filepath.Join(t.TempDir(), "fake.sock")
	srv := grpc.NewServer()
	v1.RegisterIdentityServer(srv, f)
	v1.RegisterProvisionerServer(srv, f)
	serve(t, srv, sock)
	reg := prometheus.NewRegistry()
	c, err := driverclient.New("unix://"+sock, driverclient.Options{Logger: logr.Discard(), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := c.Probe(ctx); err != nil {
		t.Fatal(err)
	}

	s3 := []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}
	_, _ = c.DriverGenerateBucketId(ctx, &cosiproto.DriverGenerateBucketIdRequest{Name: "bc-1", Protocols: s3})
	_, _ = c.DriverCreateBucket(ctx, createRequest())
	_, _ = c.DriverGetBucket(ctx, &cosiproto.DriverGetBucketRequest{BucketId: "static-1", Protocols: s3})
	readOnly := &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_ONLY}
	_, _ = c.DriverGenerateBucketAccessId(ctx, &cosiproto.DriverGenerateBucketAccessIdRequest{
		AccountName: "ba-1", Buckets: []*cosiproto.AccessedBucket{{BucketId: "bc-1", AccessModes: readOnly}},
		Protocol: cosiproto.ObjectProtocol_S3, AuthenticationType: cosiproto.AuthenticationType_KEY,
	})
	_, _ = c.DriverGrantBucketAccess(ctx, grantRequest("ba-2", readWrite))
	_, _ = c.DriverRevokeBucketAccess(ctx, &cosiproto.DriverRevokeBucketAccessRequest{
		AccountId: "ba-2", Buckets: []*cosiproto.DriverRevokeBucketAccessRequest_Bucket{{BucketId: "bc-1"}},
		Protocol: cosiproto.ObjectProtocol_S3, AuthenticationType: cosiproto.AuthenticationType_KEY,
	})

	durations, errors := measured(t, reg)
	wantDurations := map[string]uint64{
		"DriverGetInfo OK":                             1, // Probe's; not the detection's calls
		"DriverGenerateBucketId OK":                    1, // no v1alpha1 call
		"DriverCreateBucket Unimplemented":             1, // v1alpha1 create and delete
		"DriverGetBucket OK":                           1, // no v1alpha1 call
		"DriverGenerateBucketAccessId InvalidArgument": 1, // refused before any call
		"DriverGrantBucketAccess OK":                   1,
		"DriverRevokeBucketAccess OK":                  1,
	}
	if !maps.Equal(durations, wantDurations) {
		t.Errorf("cosi_sidecar_operation_duration_seconds observations\n%v\nwant\n%v", durations, wantDurations)
	}
	wantErrors := map[string]uint64{"DriverCreateBucket": 1, "DriverGenerateBucketAccessId": 1}
	if !maps.Equal(errors, wantErrors) {
		t.Errorf("cosi_sidecar_operation_errors_total %v, want %v", errors, wantErrors)
	}
}
