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
 * Strings in struct dd_config are owned by it (malloc'd; never NULL after
 * dd_config_init) and released by dd_config_free.
 */
#ifndef DD_CONFIG_H
#define DD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One key = value of a pass-through section, in file order. */
struct dd_config_kv {
    char *key;   /* without the section, e.g. "bootstrap.servers" */
    char *value;
};

struct dd_config_list {
    struct dd_config_kv *items;
    size_t len, cap;
};

struct dd_config {
    struct {
        char *path;                 /* RocksDB directory */
        uint32_t segment_days;      /* days per time segment */
        uint32_t retention_days;    /* plays are remembered at least this long */
        double fp_rate;             /* union false-positive bound over a user's live segments */
        uint32_t max_successive_merges; /* pending merge operands per key in a memtable */
        uint64_t block_cache_mb;    /* RocksDB block cache */
        bool sync;                  /* fsync the WAL on every write batch */
        int64_t max_future_ms;      /* plays dated further ahead than this are rejected */
    } history;
    struct {
        bool enabled;               /* false: run without Kafka */
        char *topic;
        char *format;               /* "json" or "protobuf" */
        char *dead_letter_topic;    /* "" = none */
        uint32_t max_id_bytes;      /* longer user or item ids are rejected */
        bool wal;                   /* write plays through RocksDB's WAL */
        uint32_t durable_interval_ms; /* wal=false: flush + commit at least this often */
    } ingest;
    struct {
        uint32_t flush_ms;          /* flush pending plays at least this often */
        uint64_t max_bytes;         /* flush early when pending memory passes this */
    } window;
    struct {
        char *redis;                /* host:port */
        char *password;             /* "" = no AUTH */
        uint32_t size;              /* deliveries kept per (scene, user) */
        uint32_t ttl_s;             /* expiry of an idle user's set */
        uint32_t timeout_ms;        /* per Redis call */
    } recent;
    struct {
        char *listen;               /* host:port for gRPC */
        uint32_t threads;           /* worker threads, one completion queue each */
        uint32_t prepost;           /* calls pre-posted per method per worker */
        uint32_t max_candidates;    /* Filter requests with more get RESOURCE_EXHAUSTED */
        uint32_t max_id_bytes;      /* longer user or item ids get INVALID_ARGUMENT */
        uint32_t max_message_bytes; /* largest request accepted */
        char *tls_cert;             /* PEM file; "" = plaintext */
        char *tls_key;
        uint32_t shutdown_grace_ms; /* time calls in flight get on shutdown */
        char *poller;               /* grpc poll strategy: poll or epoll1 (dd_rpc_process_init) */
        uint32_t spin_us;           /* a worker polls without blocking this long after a call */
    } rpc;
    struct {
        char *listen;               /* host:port for /metrics, /healthz, /readyz; "" = off */
        uint32_t drain_ms;          /* on shutdown: /readyz says 503 this long before gRPC stops */
    } admin;
    struct {
        char *level;                /* debug, info, warn, error */
        char *file;                 /* "" = stderr */
    } log;
    struct dd_config_list kafka;    /* pass-through to librdkafka */
    struct dd_config_list rocksdb;  /* pass-through to RocksDB options */
};

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
