#!/usr/bin/env bash
# Generates the Go code of proto/cosi.proto with protoc (Debian's protobuf-compiler) and the
# protoc-gen-go and protoc-gen-go-grpc plugins that the Makefile built into bin/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/proto"
PATH="$root/bin:$PATH" protoc \
	--proto_path=. \
	--proto_path=/usr/include \
	--go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative \
	cosi.proto
