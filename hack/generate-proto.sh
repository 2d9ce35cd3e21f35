#!/usr/bin/env bash
# Generates the Go code of proto/cosi.proto with protoc (Debian's protobuf-compiler) and the
# protoc-gen-go and protoc-gen-go-grpc plugins that the Makefile built into bin/.
#
# The file is compiled as cosi/v1alpha2/cosi.proto, the path it is registered under in the protobuf
# registry: the published v1alpha1 Go packages (sigs.k8s.io/container-object-storage-interface/proto
# and -spec) register theirs as "cosi.proto", and a program that links both protocols (the sidecar
# and cosi-sanity speak v1alpha1 too, docs/v1alpha1-drivers.md) panics on two files of one path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/cosi/v1alpha2"
cp "$root/proto/cosi.proto" "$tmp/cosi/v1alpha2/cosi.proto"
cd "$root/proto"
PATH="$root/bin:$PATH" protoc \
	--proto_path="$tmp" \
	--proto_path=/usr/include \
	--go_out=. --go_opt=module=github.com/kube-cosi/cosi/proto \
	--go-grpc_out=. --go-grpc_opt=module=github.com/kube-cosi/cosi/proto \
	"$tmp/cosi/v1alpha2/cosi.proto"
