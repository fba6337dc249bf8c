/* SPDX-License-Identifier: Apache-2.0
 *
 * buildinfo.h - what a binary was built from: dedupd's version and git
 * revision (version.h, generated) and the versions of the libraries it
 * runs with, as each library reports at run time where it can (grpc,
 * librdkafka, protobuf-c); RocksDB and hiredis have no such call, so
 * theirs are the versions built against. `--version` of every binary and
 * the labels of dedupd_build_info come from here, so they cannot differ.
 *
 * No allocation; the strings are static. Safe from any thread.
 */
#ifndef DD_BUILDINFO_H
#define DD_BUILDINFO_H

#include <stddef.h>
#include <stdio.h>

/* One name/value pair. Names are Prometheus label names ([a-z_]+). */
struct dd_buildinfo_item {
    const char *name;
    const char *value;
};

/* Most items dd_buildinfo returns. */
#define DD_BUILDINFO_MAX 8

/* Fill OUT (room for DD_BUILDINFO_MAX) with, in order: version, revision,
 * grpc, rocksdb, librdkafka, hiredis, protobuf_c. Returns the count.
 * Cannot fail. */
size_t dd_buildinfo(struct dd_buildinfo_item *out);

/* Print "PROG VERSION" then one "name value" line per other item to F:
 * what `--version` prints. Cannot fail (stdio errors are the caller's to
 * check with ferror). */
void dd_buildinfo_print(FILE *f, const char *prog);

#endif
