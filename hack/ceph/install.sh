#!/usr/bin/env bash
# Installs the Debian packages needed by hack/ceph/rgw.sh (a throwaway
# single-node Ceph cluster with a RADOS Gateway). Idempotent and quiet.
set -euo pipefail

PKGS=(ceph-mon ceph-osd radosgw ceph-common curl)
BINS=(ceph-mon ceph-osd radosgw ceph radosgw-admin ceph-authtool monmaptool curl)

have_all() {
	local b
	for b in "${BINS[@]}"; do
		command -v "$b" >/dev/null 2>&1 || return 1
	done
}

if have_all; then
	exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO=(sudo -n)
	else
		echo "install.sh: not root and no sudo; cannot install ${PKGS[*]}" >&2
		exit 1
	fi
fi

export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT

install() {
	"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${PKGS[@]}" >"$log" 2>&1
}

if ! install; then
	if ! "${SUDO[@]}" apt-get update -q >>"$log" 2>&1 || ! install; then
		echo "install.sh: failed to install ${PKGS[*]}; apt output:" >&2
		tail -n 30 "$log" >&2
		exit 1
	fi
fi

if ! have_all; then
	echo "install.sh: packages installed but some binaries are still missing (${BINS[*]})" >&2
	exit 1
fi
