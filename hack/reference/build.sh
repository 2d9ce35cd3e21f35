#!/usr/bin/env bash
# Builds the reference implementation of COSI (kubernetes-sigs/container-object-storage-interface)
# OUTSIDE this repository, for cosi-bench's side-by-side mode (docs/benchmark.md, "Side by side with
# the reference"): its controller and sidecar at a pinned commit, with its own vendored dependencies,
# and ref-driver, this project's no-op driver for its protocol (hack/reference/noopdriver), against
# the proto module of the same tree. The reference's code is for measuring only: it is extracted and
# built under OUT and never enters the repository.
#
# Usage: hack/reference/build.sh [OUT]
#   OUT               where everything goes (default: ${XDG_CACHE_HOME:-~/.cache}/cosi-reference/COMMIT):
#                     OUT/ref-controller, OUT/ref-sidecar, OUT/ref-driver, OUT/crd/ (the reference's
#                     CRDs), OUT/COMMIT, and OUT/src (the extracted tree). Then:
#                     bin/cosi-bench -reference OUT
#   REFERENCE_COMMIT  the commit to build (default: the one docs/benchmark.md measured)
#   REFERENCE_SRC     a git repository (a clone, or a bare or mirror git directory) that holds the commit;
#                     empty: the reference's public repository is cloned into OUT/git (needs GitHub)
set -euo pipefail

commit=${REFERENCE_COMMIT:-ee00c2690b877f9af3733acb8d03ea2c2a4bd521}
repo_url=https://github.com/kubernetes-sigs/container-object-storage-interface.git
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/cosi-reference/$commit}
out=$(realpath -m "$out")
case "$out/" in
"$root"/*)
	echo "build.sh: OUT ($out) is inside the repository; the reference's code must stay outside it" >&2
	exit 2
	;;
esac
mkdir -p "$out"

src=${REFERENCE_SRC:-}
if [ -z "$src" ]; then
	src=$out/git
	if [ ! -d "$src" ]; then
		echo "cloning $repo_url into $src"
		git clone --quiet --bare "$repo_url" "$src"
	fi
fi
if ! git -C "$src" cat-file -e "$commit^{commit}" 2>/dev/null; then
	echo "build.sh: $src does not hold commit $commit (fetch it, or set REFERENCE_SRC)" >&2
	exit 1
fi
full=$(git -C "$src" rev-parse "$commit^{commit}")

echo "extracting $full into $out/src"
rm -rf "$out/src"
mkdir -p "$out/src"
git -C "$src" archive "$full" | tar -x -C "$out/src"

# The reference's Dockerfiles build these two packages; -mod=vendor uses its vendored dependencies.
echo "building the reference's controller and sidecar (a few minutes on 2 cores the first time)"
(cd "$out/src" && go build -mod=vendor -trimpath -o "$out/ref-controller" ./controller/cmd)
(cd "$out/src" && go build -mod=vendor -trimpath -o "$out/ref-sidecar" ./sidecar/cmd)

# ref-driver: this project's module, in a workspace outside the repository whose replace points
# the reference's proto module (unpublished at this commit) at the extracted tree.
echo "building ref-driver (hack/reference/noopdriver) against the reference's proto module"
rm -rf "$out/work"
mkdir -p "$out/work"
(cd "$out/work" && go work init "$root/hack/reference/noopdriver" &&
	go work edit -replace "sigs.k8s.io/container-object-storage-interface/proto=$out/src/proto")
(cd "$root/hack/reference/noopdriver" && GOWORK=$out/work/go.work go test -count=1 . &&
	GOWORK=$out/work/go.work go build -trimpath -o "$out/ref-driver" .)

rm -rf "$out/crd"
mkdir -p "$out/crd"
cp "$out"/src/client/config/crd/objectstorage.k8s.io_*.yaml "$out/crd/"
echo "$full" >"$out/COMMIT"
echo "reference $full built into $out; run: bin/cosi-bench -reference $out"
