#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# Run the benchmarks behind docs/benchmarks.md's plots at sizes that finish
# in minutes on a 2-core host, store their text output, then draw the plots
# with bench/plot.sh:
#
#   bench/run_figures.sh [OUTDIR]        (default docs/bench; build/ first)
#
# Writes OUTDIR/loadgen-plays-N.txt (bench/run_loadgen.sh --plays N),
# OUTDIR/loadgen-candidates-N.txt (--candidates N), OUTDIR/bench_cold.txt
# and OUTDIR/bench_aging.txt, each starting with the date and command as
# comment lines, then OUTDIR/*.svg. FIG_SECONDS (default 2) is each
# loadgen phase's length. These are small runs for the shapes of the
# curves; the sizes of docs/benchmarks.md's tables are larger.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${1:-$root/docs/bench}
secs=${FIG_SECONDS:-2}
mkdir -p "$out"
cd "$root"

run() { # file command...
    f=$1; shift
    echo "run_figures: $* > $f" >&2
    { echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
      echo "# $*"
      "$@"; } >"$out/$f.tmp" 2>&1 || { echo "run_figures: failed, output in $out/$f.tmp" >&2; exit 1; }
    mv "$out/$f.tmp" "$out/$f"
}

for n in 1000 3000 10000 30000 50000; do
    run "loadgen-plays-$n.txt" bench/run_loadgen.sh -- --seconds "$secs" --rate 0 --plays "$n"
done
for n in 1000 2500 5000 10000; do
    run "loadgen-candidates-$n.txt" bench/run_loadgen.sh -- --seconds "$secs" --rate 0 --candidates "$n"
done
run bench_cold.txt build/bench/bench_cold --users 20000 --calls 2000 --warmup 500 --slices 4 \
    --variant 'default=' --variant 'bs16k=block_based_table_factory={block_size=16384}'
run bench_aging.txt build/bench/bench_aging --users 4000 --day-seconds 1 --quiet-seconds 0.3
bench/plot.sh "$out" "$out"
