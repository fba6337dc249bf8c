#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Install the Debian packages of the given lists that are not installed
# yet. Runs apt-get update once, and only when something is missing. Needs
# root (CI and the README commands run as root).
#   scripts/install-deps.sh [LIST...]
# Without LISTs: every list the test suite needs (deploy/packages/build.txt,
# run-local.txt and test.txt). scripts/run-local.sh passes build.txt and
# run-local.txt only; the Dockerfile's stages build.txt and runtime.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -eq 0 ]; then
    set -- "$here/deploy/packages/build.txt" "$here/deploy/packages/run-local.txt" \
        "$here/deploy/packages/test.txt"
fi

mapfile -t pkgs < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$@" | grep -v '^$' | sort -u)
missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#pkgs[@]} packages present"
    exit 0
fi
echo "install-deps: installing ${#missing[@]} missing packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: must run as root to install packages" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"

# Packages installed for their tools only (prometheus: promtool, and a
# server the tests start themselves on loopback). On a host running
# systemd the package starts and enables its service, a server on :9090
# nobody asked for: stop and disable it, only when this run installed it.
# Without systemd (containers, CI) nothing was started.
for p in prometheus; do
    if printf '%s\n' "${missing[@]}" | grep -qx "$p" && [ -d /run/systemd/system ]; then
        echo "install-deps: stopping and disabling the $p service the package started"
        systemctl disable --now "$p.service" || true
    fi
done
