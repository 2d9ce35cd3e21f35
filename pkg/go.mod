// Module pkg is what a COSI driver vendor imports: the driver SDK (pkg/driver), the in-memory
// reference driver (pkg/driver/memory) and the conformance suite (pkg/sanity). It requires no
// Kubernetes library, controller-runtime or cloud SDK, so that a vendor's version resolution is
// not tied to the project's; test/imports checks it.
module github.com/kube-cosi/cosi/pkg

go 1.26.0

require (
	github.com/go-logr/logr v1.4.3
	github.com/kube-cosi/cosi/proto v0.0.0
	github.com/prometheus/client_golang v1.25.0
	golang.org/x/sys v0.48.0
	google.golang.org/grpc v1.79.3
	google.golang.org/protobuf v1.36.12
	sigs.k8s.io/container-object-storage-interface/proto v0.2.2
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	golang.org/x/net v0.59.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20251202230838-ff82c1b0f217 // indirect
)

replace github.com/kube-cosi/cosi/proto => ../proto
