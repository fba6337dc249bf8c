#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# bench/plot.sh on the stored benchmark outputs (RAWDIR, default docs/bench)
# into a temporary directory: it must succeed and write each plot as a
# complete SVG that draws something. Fails if the script, a benchmark's
# stored output or gnuplot breaks.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
raw=${1:-$here/../docs/bench}
tmp=$(mktemp -d /tmp/dedupd-plot-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$here/plot.sh" "$raw" "$tmp" || { echo "test_plot: plot.sh failed" >&2; exit 1; }
for p in filter-plays filter-candidates cold aging-bytes; do
    f=$tmp/$p.svg
    [ -s "$f" ] || { echo "test_plot: $p.svg not written or empty" >&2; exit 1; }
    grep -q '</svg>' "$f" || { echo "test_plot: $p.svg is cut short" >&2; exit 1; }
    [ "$(grep -c '<path' "$f")" -ge 4 ] || { echo "test_plot: $p.svg draws nothing" >&2; exit 1; }
    [ -s "$tmp/$p.dat" ] || { echo "test_plot: $p.dat is empty" >&2; exit 1; }
    echo "test_plot: $p.svg $(wc -c <"$f") bytes, $(wc -l <"$tmp/$p.dat") data rows"
done
