#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Resolve Apache Kafka (tests/kafka/pom.xml) into Maven's cache and write
# the class path to OUT (default: tests/kafka/classpath.txt beside this
# script's build tree, as given). Maven downloads only what its cache
# lacks, so a second run is offline. Exits non-zero, saying why, when
# Maven or the JDK is missing or the download fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: classpath.sh OUT}
command -v mvn >/dev/null || { echo "classpath.sh: mvn not found (Debian package maven)" >&2; exit 1; }
command -v java >/dev/null || { echo "classpath.sh: java not found (default-jdk-headless)" >&2; exit 1; }
tmp="$out.tmp.$$"
if ! mvn -B -q -f "$here/pom.xml" dependency:build-classpath -Dmdep.outputFile="$tmp" >"$tmp.log" 2>&1; then
    cat "$tmp.log" >&2
    rm -f "$tmp" "$tmp.log"
    echo "classpath.sh: resolving Apache Kafka with Maven failed" >&2
    exit 1
fi
rm -f "$tmp.log"
mv "$tmp" "$out"
