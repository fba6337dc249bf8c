#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Configure (once) and build dedupd with warnings as errors.
#   scripts/build.sh [BUILD_DIR] [SETUP_OPTION...] [TARGET...]
# SETUP_OPTIONs are meson setup options, each one word starting with '-'
# (-Dclients=disabled, --buildtype=release); they apply when BUILD_DIR is
# configured, the first time. TARGETs are ninja's names for build outputs
# (src/dedupd, tools/devbroker): only they and what they need are built.
# Without TARGETs everything is: the tests, the benchmarks and the C++ and
# Java clients too.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$here/build}
shift || true
setup=()
targets=()
for a in "$@"; do
    case $a in
    -*) setup+=("$a") ;;
    *) targets+=("$a") ;;
    esac
done
if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$here" -Dwerror=true "${setup[@]}"
fi
ninja -C "$dir" "${targets[@]}"
