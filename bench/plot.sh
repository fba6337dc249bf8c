#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# Draw the benchmark plots of docs/benchmarks.md from the benchmarks' own
# text output, as bench/run_figures.sh stores it:
#
#   bench/plot.sh [RAWDIR [OUTDIR]]     (defaults: docs/bench docs/bench)
#
# Reads, in RAWDIR:
#   loadgen-plays-*.txt       bench/run_loadgen.sh, one run per --plays N
#   loadgen-candidates-*.txt  bench/run_loadgen.sh, one run per --candidates N
#   bench_cold.txt            build/bench/bench_cold (its SUMMARY lines)
#   bench_aging.txt           build/bench/bench_aging (its table, one row a day)
# and writes, in OUTDIR, with gnuplot (Debian: gnuplot-nox):
#   filter-plays.svg       Filter latency (1 in flight) against the plays the
#                          user holds, dedupd beside the legacy ZSet path
#   filter-candidates.svg  the same against the candidates per request
#   cold.svg               cold-path p50 and p99 (and warm p50) per variant
#                          and user choice
#   aging-bytes.svg        bytes written per simulated day (WAL, flush and
#                          compaction) over bench_aging's days
# The column files gnuplot reads are kept beside the plots (*.dat).
# Exits non-zero, naming the file, if an input is missing or holds no
# figures, or gnuplot fails.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
raw=${1:-$here/../docs/bench}
out=${2:-$raw}
command -v gnuplot >/dev/null || { echo "plot: gnuplot is not installed (apt-get install gnuplot-nox)" >&2; exit 1; }
mkdir -p "$out"

fail() { echo "plot: $*" >&2; exit 1; }

# One row per loadgen run: X (plays or candidates), then p50 and p99 in ms
# of dedupd (1 in flight), the strong legacy path and the weak one.
loadgen_rows() { # glob-prefix column(plays|candidates)
    found=0
    for f in "$raw"/"$1"-*.txt; do
        [ -f "$f" ] || continue
        found=1
        sed -n \
            -e 's/^request: user [^,]*, \([0-9]*\) plays.*; request \([0-9]*\) candidates.*/X \1 \2/p' \
            -e 's/^dedupd Filter, 1 in flight .* p50=\([0-9.]*\) p99=\([0-9.]*\) .*/D \1 \2/p' \
            -e 's/^legacy ZRANGE .*(strong), 1 in flight .* p50=\([0-9.]*\) p99=\([0-9.]*\) .*/S \1 \2/p' \
            -e 's/^legacy ZRANGE .*(weak), 1 in flight .* p50=\([0-9.]*\) p99=\([0-9.]*\) .*/W \1 \2/p' \
            "$f" |
            awk -v col="$2" -v f="$f" '
                $1 == "X" && x == "" { x = (col == "plays") ? $2 : $3 }
                $1 == "D" { d = $2 " " $3 } $1 == "S" { s = $2 " " $3 } $1 == "W" { w = $2 " " $3 }
                END {
                    if (x == "" || d == "" || s == "" || w == "") {
                        print "plot: " f ": no request line or a phase missing" > "/dev/stderr"
                        exit 1
                    }
                    print x, d, s, w
                }' || exit 1
    done
    [ $found = 1 ] || fail "no $raw/$1-*.txt"
}

for s in plays candidates; do
    loadgen_rows loadgen-$s $s >"$out/filter-$s.tmp" || exit 1
    sort -n "$out/filter-$s.tmp" >"$out/filter-$s.dat"
    rm -f "$out/filter-$s.tmp"
done

[ -f "$raw/bench_cold.txt" ] || fail "no $raw/bench_cold.txt"
sed -n 's/^SUMMARY variant=\([^ ]*\) users=\([^ ]*\) p50_us=\([0-9.]*\) p99_us=\([0-9.]*\) .*warm_p50_us=\([0-9.]*\) .*/\1\/\2 \3 \4 \5/p' \
    "$raw/bench_cold.txt" |
    awk '{ printf "%s %.3f %.3f %.3f\n", $1, $2 / 1000, $3 / 1000, $4 / 1000 }' >"$out/cold.dat"
[ -s "$out/cold.dat" ] || fail "$raw/bench_cold.txt: no SUMMARY lines"

[ -f "$raw/bench_aging.txt" ] || fail "no $raw/bench_aging.txt"
# Day rows: day plays B/play [wal] flush compact ... (bench_aging.c's
# table, its columns named by its header line; older outputs have no wal).
awk '$1 == "day" { for (i = 1; i <= NF; i++) col[$i] = i; next }
     $1 ~ /^[0-9]+$/ && NF >= 13 && $2 ~ /^[0-9]+$/ && col["flush"] {
         w = col["wal"] ? $(col["wal"]) : 0
         printf "%d %.3f %.3f %.3f %.3f\n", $1, $2 * $3 / 1e6, $2 * $(col["flush"]) / 1e6,
             $2 * $(col["compact"]) / 1e6, $2 * w / 1e6
     }' "$raw/bench_aging.txt" >"$out/aging-bytes.dat"
[ -s "$out/aging-bytes.dat" ] || fail "$raw/bench_aging.txt: no day rows"

cd "$out"
gnuplot <<'EOF'
set terminal svg size 760,440 dynamic background rgb 'white' font 'sans,12'
set key below
set grid ytics
set autoscale xfix
set ylabel 'ms per Filter call, 1 in flight'

set output 'filter-plays.svg'
set title 'Filter latency against plays held (10,000 candidates)'
set xlabel "the user's plays"
set logscale x
set logscale y
plot 'filter-plays.dat' using 1:2 with linespoints lw 2 title 'dedupd p50', \
     '' using 1:3 with linespoints lw 1 pt 6 title 'dedupd p99', \
     '' using 1:4 with linespoints lw 2 title 'legacy ZSet, strong set, p50', \
     '' using 1:6 with linespoints lw 2 title 'legacy ZSet, weak set, p50'

set output 'filter-candidates.svg'
set title 'Filter latency against candidates per request (user with 10,000 plays)'
set xlabel 'candidates per request'
plot 'filter-candidates.dat' using 1:2 with linespoints lw 2 title 'dedupd p50', \
     '' using 1:3 with linespoints lw 1 pt 6 title 'dedupd p99', \
     '' using 1:4 with linespoints lw 2 title 'legacy ZSet, strong set, p50', \
     '' using 1:6 with linespoints lw 2 title 'legacy ZSet, weak set, p50'
unset logscale

set output 'cold.svg'
set title 'Cold path: Filter decision, store larger than its cache (bench\_cold)'
set xlabel 'variant / users chosen'
set ylabel 'ms per call'
set style data histogram
set style histogram cluster gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set yrange [0:*]
plot 'cold.dat' using 2:xtic(1) title 'cold p50', '' using 3 title 'cold p99', \
     '' using 4 title 'warm p50 (same call again)'

set output 'aging-bytes.svg'
set title 'Bytes written per simulated day (bench\_aging)'
set style data lines
set xlabel 'simulated day'
set ylabel 'MB written that day'
plot 'aging-bytes.dat' using 1:2 lw 2 title 'total', '' using 1:3 title 'flush', \
     '' using 1:4 title 'compaction', '' using 1:5 title 'WAL'
EOF
for p in filter-plays filter-candidates cold aging-bytes; do
    [ -s "$p.svg" ] || fail "$out/$p.svg was not written"
done
