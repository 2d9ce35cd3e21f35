// Module noopdriver is ref-driver, a no-op driver for the reference implementation's protocol, for
// cosi-bench's side-by-side mode. It requires the reference's proto module, which is not published
// at the commit measured: hack/reference/build.sh builds it in a Go workspace, outside the
// repository, that replaces the placeholder version below with the proto/ directory of the
// reference's tree at that commit.
module github.com/kube-cosi/cosi/hack/reference/noopdriver

go 1.26.0

require (
	google.golang.org/grpc v1.82.0
	sigs.k8s.io/container-object-storage-interface/proto v0.0.0-00010101000000-000000000000
)

require (
	golang.org/x/net v0.53.0 // indirect
	golang.org/x/sys v0.43.0 // indirect
	golang.org/x/text v0.36.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260414002931-afd174a4e478 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)
