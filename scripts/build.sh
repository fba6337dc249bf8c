#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Configure (once) and build dedupd with warnings as errors.
#   scripts/build.sh [BUILD_DIR] [extra meson setup options...]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$here/build}
shift || true
if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$here" -Dwerror=true "$@"
fi
ninja -C "$dir"
