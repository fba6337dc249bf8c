/* SPDX-License-Identifier: Apache-2.0
 *
 * store_fixture.h - what test_filter.c and test_record.c share: a real
 * history (RocksDB in a temporary directory, a clock the test moves), a
 * recent-deliveries client pointed at a closed port (Redis down), one
 * dd_filter and one dd_record over them, and helpers that build Filter and
 * RecordPlays requests. Included once per test program (static state).
 */
#ifndef DD_TEST_STORE_FIXTURE_H
#define DD_TEST_STORE_FIXTURE_H

#include "arena.h"
#include "config.h"
#include "dd.h"
#include "filter.h"
#include "history.h"
#include "recent.h"
#include "record.h"
#include "testlib.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <dirent.h>
#include <sys/socket.h>
#include <unistd.h>

static char root[64];
static struct dd_config cfg;
static dd_history *hist;
static dd_recent *rec;
static dd_filter *flt;
static dd_record *wr;
static dd_arena *arena;
static char err[512];

/* Stop the test when a precondition call fails, printing err. */
#define REQUIRE_MSG_OK(expr) do { int rq_rc = (expr); if (rq_rc != DD_OK) { \
    fprintf(stderr, "%s:%d: %s failed: %d %s\n", __FILE__, __LINE__, #expr, rq_rc, err); \
    exit(1); } } while (0)

static void setup(void)
{
    tl_tmpdir(root, sizeof root, "store");
    REQUIRE(dd_config_init(&cfg) == DD_OK);
    char path[128], addr[64];
    snprintf(path, sizeof path, "%s/history", root);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", tl_free_port());
    REQUIRE(dd_config_set(&cfg, "history.path", path, err, sizeof err) == DD_OK);
    REQUIRE(dd_config_set(&cfg, "history.segment_days", "1", err, sizeof err) == DD_OK);
    REQUIRE(dd_config_set(&cfg, "history.retention_days", "90", err, sizeof err) == DD_OK);
    REQUIRE(dd_config_set(&cfg, "history.sync", "false", err, sizeof err) == DD_OK);
    REQUIRE(dd_config_set(&cfg, "recent.redis", addr, err, sizeof err) == DD_OK);
    REQUIRE(dd_config_set(&cfg, "rpc.max_candidates", "12000", err, sizeof err) == DD_OK);
    REQUIRE(dd_config_set(&cfg, "rpc.max_id_bytes", "64", err, sizeof err) == DD_OK);
    REQUIRE_MSG_OK(dd_history_open(&hist, &cfg.history, &cfg.rocksdb, &tclock, err, sizeof err));
    REQUIRE_MSG_OK(dd_recent_new(&rec, &cfg.recent, err, sizeof err));
    struct dd_filter_conf fconf_flt = dd_config_filter_conf(&cfg);
    REQUIRE_MSG_OK(dd_filter_new(&flt, &fconf_flt, hist, rec, err, sizeof err));
    struct dd_record_conf rconf_wr = dd_config_record_conf(&cfg);
    REQUIRE_MSG_OK(dd_record_new(&wr, &rconf_wr, hist, rec, NULL, err, sizeof err));
    arena = dd_arena_new(0, 0);
    REQUIRE(arena != NULL);
}

static void teardown(void)
{
    dd_record_free(wr);
    dd_filter_free(flt);
    dd_recent_free(rec);
    dd_history_close(hist);
    dd_arena_free(arena);
    dd_config_free(&cfg);
    tl_rm_tree(root);
}

/* ---- helpers building requests --------------------------------------- */

static int filter(const char *user, char **ids, size_t n, uint32_t lookback,
                  Dedup__V1__ResponseMode mode, int explain, Dedup__V1__FilterResponse *resp)
{
    Dedup__V1__FilterRequest req = DEDUP__V1__FILTER_REQUEST__INIT;
    req.user_id = (char *)user;
    req.candidate_ids = ids;
    req.n_candidate_ids = n;
    req.lookback_days = lookback;
    req.mode = mode;
    req.explain = explain;
    dd_arena_reset(arena);
    err[0] = '\0';
    return dd_filter_run(flt, arena, &req, resp, 0, err, sizeof err);
}

static int play(const char *user, const char *scene, char **items, const int64_t *at, size_t n,
                Dedup__V1__RecordPlaysResponse *resp)
{
    Dedup__V1__Play plays[16], *pp[16];
    REQUIRE(n <= 16);
    for (size_t i = 0; i < n; i++) {
        dedup__v1__play__init(&plays[i]);
        plays[i].item_id = items[i];
        plays[i].played_at_ms = at ? at[i] : 0;
        pp[i] = &plays[i];
    }
    Dedup__V1__RecordPlaysRequest req = DEDUP__V1__RECORD_PLAYS_REQUEST__INIT;
    req.user_id = (char *)user;
    req.scene = (char *)scene;
    req.plays = pp;
    req.n_plays = n;
    dd_arena_reset(arena);
    err[0] = '\0';
    return dd_record_plays(wr, arena, &req, resp, err, sizeof err);
}

#endif
