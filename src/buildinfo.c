/* SPDX-License-Identifier: Apache-2.0
 *
 * buildinfo.c - versions for --version and dedupd_build_info (buildinfo.h).
 */
#include "buildinfo.h"
#include "version.h"

#include <grpc/grpc.h>
#include <hiredis/hiredis.h>
#include <librdkafka/rdkafka.h>
#include <protobuf-c/protobuf-c.h>

#ifndef DD_ROCKSDB_BUILD_VERSION
#define DD_ROCKSDB_BUILD_VERSION "unknown" /* set by src/meson.build from pkg-config */
#endif

#define STR_(x) #x
#define STR(x) STR_(x)

size_t dd_buildinfo(struct dd_buildinfo_item *out)
{
    size_t n = 0;
    out[n++] = (struct dd_buildinfo_item){"version", DD_VERSION};
    out[n++] = (struct dd_buildinfo_item){"revision", DD_GIT_REVISION};
    out[n++] = (struct dd_buildinfo_item){"grpc", grpc_version_string()};
    /* RocksDB's C API has no version call: the version built against. */
    out[n++] = (struct dd_buildinfo_item){"rocksdb", DD_ROCKSDB_BUILD_VERSION};
    out[n++] = (struct dd_buildinfo_item){"librdkafka", rd_kafka_version_str()};
    /* Nor has hiredis: its header's. */
    out[n++] = (struct dd_buildinfo_item){
        "hiredis", STR(HIREDIS_MAJOR) "." STR(HIREDIS_MINOR) "." STR(HIREDIS_PATCH)};
    out[n++] = (struct dd_buildinfo_item){"protobuf_c", protobuf_c_version()};
    return n;
}

void dd_buildinfo_print(FILE *f, const char *prog)
{
    struct dd_buildinfo_item it[DD_BUILDINFO_MAX];
    size_t n = dd_buildinfo(it);
    fprintf(f, "%s %s\n", prog, it[0].value);
    for (size_t i = 1; i < n; i++) fprintf(f, "%s %s\n", it[i].name, it[i].value);
}
