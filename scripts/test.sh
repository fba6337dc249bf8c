#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# The whole test suite, as CI runs it: install what is missing, build with
# warnings as errors, run every test (unit + integration, real servers), then
# the unit suite, the ingest tests of suite 'sanitize' and suite
# 'fleet_safety' again under AddressSanitizer + UndefinedBehaviorSanitizer,
# then the libFuzzer targets
# (suite 'fuzz', clang-14, build-fuzz), each for DD_FUZZ_SECONDS (default 30),
# two at a time: each is one test result, and a finding fails it.
# Ends with one line "N passed, N failed[, N skipped]" counted from meson's
# testlog.json files, and exits non-zero if any test failed.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

"$here/scripts/install-deps.sh" || { echo "0 passed, 1 failed"; exit 1; }

status=0
logs=()

run_suite() { # build_dir setup_opts... -- test_opts...
    local dir=$1; shift
    local setup=() testopts=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do setup+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    testopts=("$@")
    rm -f "$dir/meson-logs/testlog.json"
    if [ ! -f "$dir/build.ninja" ]; then
        meson setup "$dir" "$here" -Dwerror=true "${setup[@]}" || return 1
    fi
    ninja -C "$dir" || return 1
    logs+=("$dir/meson-logs/testlog.json")
    meson test -C "$dir" --print-errorlogs --num-processes 2 "${testopts[@]}" || status=1
}

if ! run_suite "$here/build-ci" --; then
    echo "build failed"; status=1
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# grpc's own TLS leaks at shutdown, and only those: tests/lsan.supp.
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$here/tests/lsan.supp:print_suppressions=0}
# The sanitizer pass checks dedupd's memory handling: the tests of Kafka
# semantics that can run on the devbroker do so here (their plain run above
# is against Apache Kafka: tests/integration/test_ingest_lib.py,
# plays_broker), which keeps CI within its time.
if ! DD_TEST_BROKER=devbroker run_suite "$here/build-asan" -Db_sanitize=address,undefined \
        -Dclients=disabled -- --suite unit --suite sanitize --suite fleet_safety; then
    echo "sanitizer build failed"; status=1
fi

if ! CC=clang-14 run_suite "$here/build-fuzz" -Dfuzz=enabled -Db_sanitize=address,undefined \
        -Dclients=disabled -- --suite fuzz; then
    echo "fuzz build failed"; status=1
fi

# Count results. A build that failed has no testlog: count it as a failure.
/usr/bin/python3 - "$status" "${logs[@]}" <<'PY'
import json, os, sys
status = int(sys.argv[1])
passed = failed = skipped = 0
failures = []
for path in sys.argv[2:]:
    if not os.path.exists(path):
        failed += 1
        continue
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            t = json.loads(line)
            r = t.get("result", "")
            if r in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif r == "SKIP":
                skipped += 1
            else:
                failed += 1
                failures.append((os.path.dirname(os.path.dirname(path)), t))
# Repeat each failure's name and the end of its output here, so that the
# tail of a long CI log is enough to tell what failed and why.
for build, t in failures:
    print("FAILED: %s %s (%s after %.1f s)" % (os.path.basename(build),
          t.get("name", "?"), t.get("result", "?"), t.get("duration", 0.0)))
    out = (t.get("stdout") or "") + (t.get("stderr") or "")
    for l in out.splitlines()[-40:]:
        print("    " + l)
if status and failed == 0:
    failed = 1  # a build step failed without a test to show it
line = "%d passed, %d failed" % (passed, failed)
if skipped:
    line += ", %d skipped" % skipped
print(line)
sys.exit(1 if failed else 0)
PY
