// Module proto holds the COSI driver gRPC protocol and its generated Go code. It depends on
// gRPC and protobuf only, so that driver authors can import it without any Kubernetes library.
module github.com/kube-cosi/cosi/proto

go 1.26.0

require (
	google.golang.org/grpc v1.79.3
	google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af
)

require (
	golang.org/x/net v0.48.0 // indirect
	golang.org/x/sys v0.39.0 // indirect
	golang.org/x/text v0.32.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20251202230838-ff82c1b0f217 // indirect
)
