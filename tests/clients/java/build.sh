#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# Build the Java client test into one jar: grpc-java stubs generated from
# proto/dedup.proto (protoc + Debian's grpc_java_plugin), compiled with
# javac against the Debian jars in /usr/share/java, and write the runtime
# classpath next to it. Called by meson (tests/clients/meson.build):
#   build.sh OUT.jar OUT.classpath WORKDIR PROTO_DIR SOURCE.java...
set -eu
out_jar=$1 out_cp=$2 work=$3 proto_dir=$4
shift 4
J=/usr/share/java
runtime_cp=$J/grpc-api.jar:$J/grpc-context.jar:$J/grpc-core.jar:$J/grpc-netty.jar:$J/grpc-protobuf.jar:$J/grpc-protobuf-lite.jar:$J/grpc-stub.jar:$J/protobuf.jar:$J/guava.jar:$J/perfmark-api.jar:$J/gson.jar:$J/netty-common.jar:$J/netty-buffer.jar:$J/netty-transport.jar:$J/netty-resolver.jar:$J/netty-codec.jar:$J/netty-codec-http.jar:$J/netty-codec-http2.jar:$J/netty-handler.jar:$J/netty-handler-proxy.jar:$J/netty-codec-socks.jar
# The generated stub is annotated @javax.annotation.Generated: compile time only.
compile_cp=$runtime_cp:$J/geronimo-annotation-1.3-spec.jar

rm -rf "$work"
mkdir -p "$work/gen" "$work/classes"
protoc -I"$proto_dir" --java_out="$work/gen" --grpc-java_out="$work/gen" \
    --plugin=protoc-gen-grpc-java=/usr/bin/grpc_java_plugin "$proto_dir/dedup.proto"
find "$work/gen" -name '*.java' > "$work/sources"
javac -nowarn -encoding UTF-8 -d "$work/classes" -cp "$compile_cp" @"$work/sources" "$@"
jar cf "$out_jar" -C "$work/classes" .
printf '%s\n' "$runtime_cp" > "$out_cp"
