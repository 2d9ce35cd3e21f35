#!/usr/bin/env bash
# Fails when regenerating changes any generated file: generated code must be committed in sync
# with its sources. It compares a copy of the generated files taken before `make generate` with
# the files after it, so it works on a working tree with uncommitted changes too.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
generated=(config/crd config/rbac api/objectstorage/v1alpha2/zz_generated.deepcopy.go proto/cosi.pb.go proto/cosi_grpc.pb.go)
before=$(mktemp -d)
trap 'rm -rf "$before"' EXIT
for path in "${generated[@]}"; do
	mkdir -p "$before/$(dirname "$path")"
	if [ -e "$path" ]; then cp -r "$path" "$before/$path"; fi
done
make --no-print-directory generate >/dev/null
status=0
for path in "${generated[@]}"; do
	if ! diff -ru "$before/$path" "$path" >/dev/null 2>&1; then
		echo "generated file out of date: $path (run 'make generate' and commit the result)" >&2
		diff -ru "$before/$path" "$path" | head -40 >&2 || true
		status=1
	fi
done
exit $status
