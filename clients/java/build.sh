#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Build the Java client library with Maven into OUTDIR and run its unit
# tests (mvn package), then write OUTDIR/dedupd-client.jar and
# OUTDIR/classpath.txt (its runtime dependencies, in Maven's cache ~/.m2).
# Maven downloads only what its cache lacks (all of it on a fresh machine:
# grpc-java, protobuf-java, protoc and protoc-gen-grpc-java from Maven
# Central). Nothing is done when the sources (pom.xml, src/,
# proto/dedup.proto, tests/vectors/) are those of the last successful
# build (OUTDIR/stamp); builds into one OUTDIR take turns (OUTDIR/lock).
# Exits non-zero, saying why, when Maven or the JDK is missing, a download
# fails or a test fails.
#   clients/java/build.sh OUTDIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: build.sh OUTDIR}
command -v mvn >/dev/null || { echo "build.sh: mvn not found (Debian package maven)" >&2; exit 1; }
command -v java >/dev/null || { echo "build.sh: java not found (default-jdk-headless)" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
# Two tests may build at once (clients_java, clients_java_tls): the second
# waits here, then finds the first's build up to date.
exec 9>"$out/lock"
flock 9
stamp=$( (cd "$root" && find clients/java/pom.xml clients/java/src proto/dedup.proto tests/vectors \
            -type f 2>/dev/null | LC_ALL=C sort | xargs sha256sum) | sha256sum | cut -d' ' -f1)
if [ -f "$out/stamp" ] && [ "$(cat "$out/stamp")" = "$stamp" ] && [ -f "$out/dedupd-client.jar" ] \
        && [ -f "$out/classpath.txt" ]; then
    exit 0
fi
rm -f "$out/stamp"
if ! mvn -B -q -f "$here/pom.xml" -Ddedupd.build.dir="$out/maven" package \
        dependency:build-classpath -Dmdep.includeScope=runtime \
        -Dmdep.outputFile="$out/classpath.txt" >"$out/maven.log" 2>&1; then
    tail -n 80 "$out/maven.log" >&2
    echo "build.sh: mvn package failed (whole log: $out/maven.log)" >&2
    exit 1
fi
cp "$out"/maven/dedupd-client-*.jar "$out/dedupd-client.jar"
echo "$stamp" > "$out/stamp"
