/* SPDX-License-Identifier: Apache-2.0
 *
 * config.h - dedupd's settings: defaults, an INI file, command-line
 * overrides, validation.
 *
 * The file is INI: "[history]" then "path = /x" sets the key history.path.
 * '#' and ';' start comments; values may be double-quoted. Every key below
 * is documented, with its default, in conf/dedupd.conf; the names are part
 * of the operator's interface. [kafka] and [rocksdb] are pass-through
 * sections: any key there is handed to librdkafka / RocksDB as is (checked
 * by them when the consumer or the store is created, not here).
 *
 * Strings in struct dd_config (and so in the module settings it holds) are
 * owned by it (malloc'd; never NULL after
 * dd_config_init) and released by dd_config_free.
 */
#ifndef DD_CONFIG_H
#define DD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "admin.h"
#include "cluster.h"
#include "dd.h"
#include "filter.h"
#include "history.h"
#include "ingest.h"
#include "recent.h"
#include "record.h"
#include "rpc.h"
#include "trace.h"
#include "window.h"

/* Each module declares its own settings (struct dd_<module>_conf in its
 * header, as memcached's extstore.h does) and is handed only those; this
 * file maps the operator's keys onto them. */
struct dd_log_conf {
    char *level; /* debug, info, warn, error */
    char *file;  /* "" = stderr */
};

struct dd_config {
    struct dd_history_conf history;
    struct dd_ingest_conf ingest;
    struct dd_window_conf window;
    struct dd_recent_conf recent;
    struct dd_rpc_conf rpc;
    struct dd_admin_conf admin;
    struct dd_cluster_conf cluster;
    struct dd_trace_conf trace;
    struct dd_log_conf log;
    struct dd_config_list kafka;   /* pass-through to librdkafka */
    struct dd_config_list rocksdb; /* pass-through to RocksDB options */
};

/* The settings of a Filter decider and of a writer (rpc.* and recent.size),
 * for callers that build them outside the RPC layer (tests, benchmarks). */
struct dd_filter_conf dd_config_filter_conf(const struct dd_config *c);
struct dd_record_conf dd_config_record_conf(const struct dd_config *c);
/* What peer channels are built from (peer.h): rpc.tls_*, cluster.tls_ca,
 * cluster.tls_server_name, rpc.max_candidates and rpc.max_id_bytes,
 * borrowed from C. */
struct dd_peer_conf dd_config_peer_conf(const struct dd_config *c);

/* The trace store's settings (trace.h) as dedupd opens it: C's trace.*,
 * with history.min_free_mb and rpc.max_id_bytes, and trace.path resolved:
 * when it is "" (the default), the directory "trace" next to history.path
 * (history.path "/srv/dedupd/history" -> "/srv/dedupd/trace"; "data" ->
 * "trace"), written into PATHBUF. Strings are borrowed from C or PATHBUF.
 * A resolved path that does not fit PATHLEN comes out "" (which
 * dd_trace_conf_check refuses). Cannot fail otherwise. */
struct dd_trace_conf dd_config_trace_conf(const struct dd_config *c, char *pathbuf, size_t pathlen);

/* Fill C with the defaults. Returns 0 or DD_ERR_NOMEM (then C holds nothing
 * that needs freeing). */
int dd_config_init(struct dd_config *c);

/* Free what C owns; C may then be dd_config_init'ed again. NULL is a no-op. */
void dd_config_free(struct dd_config *c);

/* Read an INI file into C, over what is there. On error returns
 * DD_ERR_INVALID (or DD_ERR_IO if the file cannot be read) and writes a
 * message naming the file, line and key into err; C may then be partly
 * updated and should be freed. */
int dd_config_load_file(struct dd_config *c, const char *path, char *err, size_t errlen);

/* Set one key, "section.key" (e.g. "history.path", "kafka.group.id"), from
 * its text form, as -o does. Unknown key or bad value: DD_ERR_INVALID with a
 * message naming the key in err. */
int dd_config_set(struct dd_config *c, const char *key, const char *value, char *err,
                  size_t errlen);

/* Check values against each other (e.g. retention vs segment size, tls cert
 * without key). Returns 0 or DD_ERR_INVALID with a message naming the key. */
int dd_config_validate(const struct dd_config *c, char *err, size_t errlen);

/* Look up a pass-through value by key; NULL if absent. Borrowed. */
const char *dd_config_list_get(const struct dd_config_list *l, const char *key);

/* Write C as an INI file that dd_config_load_file reads back to the same
 * values. Returns 0 or DD_ERR_IO. */
int dd_config_write(const struct dd_config *c, FILE *out);

#endif
