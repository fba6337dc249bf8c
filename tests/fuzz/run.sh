#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# run.sh TARGET SEED_DIR [DICT] - fuzz TARGET for DD_FUZZ_SECONDS (default
# 30) from the seed corpus SEED_DIR, which is copied first (the committed
# corpus is never written to). Inputs libFuzzer finds are kept in
# DD_FUZZ_WORK (default: fuzz-work/<target> beside the binary), a crashing
# one as crash-*/leak-*/timeout-* there. Exits with libFuzzer's status: 0
# only when the time ran out without a finding.
set -euo pipefail
target=$1 seeds=$2 dict=${3:-}
name=$(basename "$target")
work=${DD_FUZZ_WORK:-$(dirname "$target")/fuzz-work}/$name
mkdir -p "$work/corpus"
cp -n "$seeds"/* "$work/corpus/" 2>/dev/null || true
# A finding exits 1, not libFuzzer's default 77, which meson reads as a
# skipped test.
args=(-max_total_time="${DD_FUZZ_SECONDS:-30}" -rss_limit_mb=2048 -timeout=10
      -max_len=8192 -print_final_stats=1 -artifact_prefix="$work/"
      -error_exitcode=1 -timeout_exitcode=1)
[ -n "$dict" ] && args+=(-dict="$dict")
# symbolized stack traces (llvm-14 installs the symbolizer under this name)
if [ -z "${ASAN_SYMBOLIZER_PATH:-}" ] && [ -x /usr/lib/llvm-14/bin/llvm-symbolizer ]; then
    export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer
fi
echo "$target ${args[*]} $work/corpus"
exec "$target" "${args[@]}" "$work/corpus"
