/* SPDX-License-Identifier: Apache-2.0
 *
 * migrate.h - the parts of dedupd-migrate that do no I/O on servers: key
 * patterns with a {user} placeholder, the classification of one legacy
 * sorted-set entry (good, expired, or bad and why), the run's counters, and
 * the checkpoint file. Kept apart so they are unit-tested without Redis or
 * dedupd (scripts/migrate/test_migrate_unit.c).
 */
#ifndef DD_MIGRATE_H
#define DD_MIGRATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- pattern */

/* "play:{user}" split around its one {user} placeholder. */
struct mig_pattern {
    char *text;      /* the pattern as given */
    char *prefix;    /* before {user} */
    char *suffix;    /* after {user} */
    size_t prefix_len, suffix_len;
    char *match;     /* SCAN MATCH glob: prefix and suffix escaped, '*' between */
};

/* Parse TEXT. Exactly one "{user}" is required and no newline (the pattern
 * is stored in the checkpoint, one per line). On error returns
 * DD_ERR_INVALID (or DD_ERR_NOMEM) with a message in err and P holds
 * nothing to free. On success free P with mig_pattern_free. */
int mig_pattern_parse(struct mig_pattern *p, const char *text, char *err, size_t errlen);
void mig_pattern_free(struct mig_pattern *p);

/* The user part of KEY (KEYLEN bytes) under P: 0 and *user / *user_len
 * (pointing into KEY) if KEY is prefix + user + suffix with a user of 1 to
 * max_user bytes holding no NUL; otherwise -1 (the key does not match). */
int mig_pattern_user(const struct mig_pattern *p, const char *key, size_t keylen,
                     size_t max_user, const char **user, size_t *user_len);

/* Write prefix + USER + suffix, NUL-terminated, into BUF (CAP bytes).
 * Returns the key length, or -1 if it does not fit. */
int mig_pattern_key(const struct mig_pattern *p, const char *user, size_t user_len, char *buf,
                    size_t cap);

/* ------------------------------------------------------------------ entry */

/* Why an entry or key was not migrated. The names (mig_bad_name) appear in
 * the summary and the checkpoint. */
enum mig_bad {
    MIG_BAD_WRONG_TYPE = 0,   /* key is not a sorted set (per key) */
    MIG_BAD_NON_NUMERIC,      /* score is not a number */
    MIG_BAD_OUT_OF_RANGE,     /* score infinite, <= 0, or too far in the future */
    MIG_BAD_EMPTY_MEMBER,     /* member "" */
    MIG_BAD_LONG_MEMBER,      /* member longer than the id limit */
    MIG_BAD_BINARY_MEMBER,    /* member holds a NUL byte or is not UTF-8 (not a proto string) */
    MIG_BAD_KEY_MISMATCH,     /* key does not match the pattern, or its user
                                 part is empty or too long (per key) */
    MIG_BAD_COUNT
};

/* Static name of a reason ("wrong_type", ...); "?" for an unknown value. */
const char *mig_bad_name(int reason);

struct mig_entry_rules {
    int64_t score_scale;    /* 1 for ms scores, 1000 for seconds */
    int64_t now_ms;         /* the clock for this entry */
    int64_t oldest_ms;      /* entries older than this are expired */
    int64_t max_future_ms;  /* entries later than now + this are out of range */
    size_t max_id_bytes;    /* longest member accepted */
    bool check_expiry;      /* false for deliveries */
};

enum mig_entry_class {
    MIG_ENTRY_OK = 0,
    MIG_ENTRY_EXPIRED = 1,
    MIG_ENTRY_BAD = 2,
};

/* Classify one member/score pair (the score as Redis prints it). MIG_ENTRY_OK
 * sets *ms to the time in epoch milliseconds; MIG_ENTRY_BAD sets *reason.
 * This function cannot fail. */
enum mig_entry_class mig_classify(const struct mig_entry_rules *r, const char *member,
                                  size_t member_len, const char *score, size_t score_len,
                                  int64_t *ms, enum mig_bad *reason);

/* ---------------------------------------------------------------- counters */

struct mig_stats {
    uint64_t keys;           /* keys of the SCAN pages done, whatever became of each */
    uint64_t users;          /* users whose keys were processed */
    uint64_t entries;        /* plays accepted by dedupd (dry run: that would be sent) */
    uint64_t expired;        /* plays past the retention: skipped here or by dedupd */
    uint64_t deliveries;     /* deliveries recorded */
    uint64_t failed_users;   /* users a call failed for with a permanent error */
    uint64_t bad[MIG_BAD_COUNT];
};

void mig_stats_add(struct mig_stats *to, const struct mig_stats *from);
uint64_t mig_stats_bad_total(const struct mig_stats *s);

/* -------------------------------------------------------------- checkpoint */

#define MIG_CURSOR_MAX 32

/* Where a run stands: the SCAN position from which no user has been missed,
 * and the counters of everything before it. */
struct mig_checkpoint {
    char plays[1024];        /* the patterns and scene of the run it belongs to */
    char deliveries[1024];
    char scene[512];
    int phase;               /* 0: plays keys; 1: delivery-only users */
    char cursor[MIG_CURSOR_MAX];
    bool done;               /* every phase finished */
    int64_t elapsed_ms;      /* time spent over all runs */
    struct mig_stats stats;
};

/* Write CP to PATH atomically: PATH.tmp, fsync, rename, fsync of the
 * directory. Returns 0, or DD_ERR_IO with the reason in err (PATH is then
 * unchanged). */
int mig_checkpoint_write(const char *path, const struct mig_checkpoint *cp, char *err,
                         size_t errlen);

/* Read PATH into CP. Returns 0, DD_ERR_NOTFOUND if PATH does not exist,
 * DD_ERR_IO, or DD_ERR_CORRUPT for a file that is not a checkpoint (message
 * in err, naming the line). */
int mig_checkpoint_read(const char *path, struct mig_checkpoint *cp, char *err, size_t errlen);

#endif
