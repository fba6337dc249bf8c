#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Check that src/ and tools/ are laid out as .clang-format says: list every
# file clang-format-14 would change, with the first lines of its diff, and
# exit 1 if there is any. Fix with `clang-format-14 -i FILE...`.
# Usage: scripts/check-format.sh [SOURCE_ROOT]   (default: this repository)
# CLANG_FORMAT names another binary (default clang-format-14, the one
# deploy/packages/build.txt installs: other versions lay out differently).
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cf=${CLANG_FORMAT:-clang-format-14}
if ! command -v "$cf" >/dev/null; then
    echo "check-format: $cf not found (apt-get install -y clang-format-14)" >&2
    exit 1
fi
cd "$root" || exit 1
[ -f .clang-format ] || { echo "check-format: no .clang-format in $root" >&2; exit 1; }

bad=()
for f in src/*.[ch] tools/*.[ch] tools/lib/*.[ch]; do
    [ -f "$f" ] || continue
    if ! out=$("$cf" --style=file "$f"); then
        echo "check-format: $cf failed on $f" >&2
        exit 1
    fi
    if ! d=$(diff -u "$f" - <<<"$out"); then
        bad+=("$f")
        echo "$d" | head -n 20
        echo
    fi
done
if [ ${#bad[@]} -gt 0 ]; then
    echo "check-format: ${#bad[@]} file(s) differ from .clang-format (clang-format-14 -i FILE):"
    printf '  %s\n' "${bad[@]}"
    exit 1
fi
echo "check-format: every file in src/ and tools/ matches .clang-format"
