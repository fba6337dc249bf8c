/* SPDX-License-Identifier: Apache-2.0
 *
 * test_snapshot.c - the lending side of snapshots (snapshot.h) on a real
 * store: the manifest is "not ready" until the checkpoint is made, then
 * lists every file with its size and XXH3; reads return the file's bytes
 * exactly, stop at its end, refuse other checkpoints, names outside the
 * manifest (paths, dot files) and offsets past the end; the bandwidth limit
 * answers "ask again" instead of sleeping; the checkpoint opens as a store
 * with the lender's log positions; freeing the server removes it.
 */
#include "bloom.h"
#include "config.h"
#include "dd.h"
#include "history.h"
#include "snapshot.h"
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

static char root[64];

static dd_history *open_at(struct dd_config *cfg, const char *path)
{
    char err[256];
    REQUIRE(dd_config_init(cfg) == DD_OK);
    REQUIRE(dd_config_set(cfg, "history.path", path, err, sizeof err) == DD_OK);
    REQUIRE(dd_config_set(cfg, "history.sync", "false", err, sizeof err) == DD_OK);
    dd_history *h = NULL;
    int rc = dd_history_open(&h, &cfg->history, &cfg->rocksdb, NULL, err, sizeof err);
    if (rc != DD_OK) fprintf(stderr, "open %s: %s\n", path, err);
    REQUIRE(rc == DD_OK);
    return h;
}

/* SnapshotBegin until ready (the checkpoint is made on a thread). */
static void wait_manifest(dd_snapshot_server *s, struct dd_snapshot_manifest *m)
{
    char err[256];
    for (int i = 0; i < 500; i++) {
        REQUIRE(dd_snapshot_begin(s, m, err, sizeof err) == DD_OK);
        if (m->ready) return;
        usleep(10000);
    }
    REQUIRE(!"the checkpoint was never ready");
}

/* The lending rule: a replica of this shard under this map, or a new
 * shard of a map that splits this one whose parent this shard is; never
 * another shard of this map, nor the map this one splits. */
static void test_lending_rule(void)
{
    char err[256];
    struct dd_cluster_map m = {.shards = 2, .shard = 1};
    CHECK_EQ_INT(dd_snapshot_may_lend(&m, DD_MAP_SAME, 1, 1, err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_snapshot_may_lend(&m, DD_MAP_SAME, 1, 0, err, sizeof err), DD_ERR_STATE);
    CHECK(strstr(err, "shard 1 of 2") != NULL);
    CHECK_EQ_INT(dd_snapshot_may_lend(&m, DD_MAP_SAME, 0, 0, err, sizeof err), DD_ERR_STATE);
    /* 2 -> 4: new shard 3 (3 mod 2 = 1) copies shard 1; shard 2 may not */
    CHECK_EQ_INT(dd_snapshot_may_lend(&m, DD_MAP_NEWER, 1, 3, err, sizeof err), DD_OK);
    CHECK_EQ_INT(dd_snapshot_may_lend(&m, DD_MAP_NEWER, 1, 2, err, sizeof err), DD_ERR_STATE);
    CHECK_EQ_INT(dd_snapshot_may_lend(&m, DD_MAP_OLDER, 1, 1, err, sizeof err), DD_ERR_STATE);
    CHECK_EQ_INT(dd_snapshot_may_lend(&m, DD_MAP_OTHER, 1, 1, err, sizeof err), DD_ERR_STATE);
}

int main(void)
{
    char err[256], path[128], copy[160];
    tl_tmpdir(root, sizeof root, "snapshot");
    snprintf(path, sizeof path, "%s/db", root);
    test_lending_rule();
    /* bootstrap only with "peer" and no store yet */
    CHECK(dd_snapshot_bootstrap_wanted("peer", path));
    CHECK(!dd_snapshot_bootstrap_wanted("none", path));
    struct dd_config cfg;
    dd_history *h = open_at(&cfg, path);
    CHECK(!dd_snapshot_bootstrap_wanted("peer", path));

    /* some plays and a log position, unflushed: the checkpoint flushes */
    dd_history_batch *b = dd_history_batch_new();
    REQUIRE(b);
    uint64_t hs[1000];
    for (int i = 0; i < 1000; i++) hs[i] = dd_hash(&i, sizeof i);
    uint32_t seg;
    REQUIRE(dd_history_place(h, "", 0, dd_now_ms(), &seg) == DD_HISTORY_PLACE_OK);
    REQUIRE(dd_history_batch_add(b, "", 0, "u", 1, seg, hs, 1000) == DD_OK);
    REQUIRE(dd_history_batch_put_offset(b, "plays", 1, 4242) == DD_OK);
    dd_history_batch_set_unlogged(b, true);
    REQUIRE(dd_history_write(h, b, err, sizeof err) == DD_OK);
    dd_history_batch_free(b);

    dd_snapshot_server *s = NULL;
    REQUIRE(dd_snapshot_server_new(&s, h, 0, 3600, err, sizeof err) == DD_OK);
    struct dd_snapshot_manifest m = {0};
    REQUIRE(dd_snapshot_begin(s, &m, err, sizeof err) == DD_OK);
    CHECK(!m.ready || m.n > 0);
    dd_snapshot_manifest_free(&m);
    wait_manifest(s, &m);
    CHECK(m.n >= 3); /* CURRENT, MANIFEST-*, OPTIONS-*, the SST */
    CHECK(strlen(m.id) > 0);

    /* every file read back in chunks equals its size and checksum */
    uint8_t *buf = malloc(DD_SNAPSHOT_CHUNK_MAX);
    REQUIRE(buf);
    snprintf(copy, sizeof copy, "%s/copy", root);
    REQUIRE(mkdir(copy, 0700) == 0);
    bool has_current = false;
    for (size_t i = 0; i < m.n; i++) {
        const struct dd_snapshot_file *f = &m.files[i];
        CHECK(dd_snapshot_name_ok(f->name));
        has_current |= strcmp(f->name, "CURRENT") == 0;
        XXH3_state_t *st = XXH3_createState();
        REQUIRE(st);
        XXH3_64bits_reset(st);
        char out[300];
        snprintf(out, sizeof out, "%s/%s", copy, f->name);
        FILE *o = fopen(out, "wb");
        REQUIRE(o);
        uint64_t off = 0;
        for (;;) {
            size_t n = 0;
            uint32_t retry = 0;
            REQUIRE(dd_snapshot_read(s, m.id, f->name, off, 4096, buf, &n, &retry, err,
                                     sizeof err) == DD_OK);
            CHECK_EQ_INT(retry, 0);
            if (n == 0) break;
            CHECK(n <= 4096);
            XXH3_64bits_update(st, buf, n);
            REQUIRE(fwrite(buf, 1, n, o) == n);
            off += n;
        }
        fclose(o);
        CHECK_EQ_INT(off, f->size);
        CHECK(XXH3_64bits_digest(st) == f->xxh3);
        XXH3_freeState(st);
    }
    CHECK(has_current);

    /* hostile requests */
    size_t n;
    uint32_t retry;
    const char *name0 = m.files[0].name;
    CHECK_EQ_INT(dd_snapshot_read(s, "1-2-3", name0, 0, 100, buf, &n, &retry, err, sizeof err),
                 DD_ERR_NOTFOUND);
    CHECK_EQ_INT(dd_snapshot_read(s, m.id, "../db/CURRENT", 0, 100, buf, &n, &retry, err,
                                  sizeof err), DD_ERR_NOTFOUND);
    CHECK_EQ_INT(dd_snapshot_read(s, m.id, ".hidden", 0, 100, buf, &n, &retry, err, sizeof err),
                 DD_ERR_NOTFOUND);
    CHECK_EQ_INT(dd_snapshot_read(s, m.id, "NOSUCHFILE", 0, 100, buf, &n, &retry, err,
                                  sizeof err), DD_ERR_NOTFOUND);
    CHECK_EQ_INT(dd_snapshot_read(s, m.id, name0, m.files[0].size + 1, 100, buf, &n, &retry, err,
                                  sizeof err), DD_ERR_INVALID);
    CHECK(!dd_snapshot_name_ok(""));
    CHECK(!dd_snapshot_name_ok("a/b"));
    CHECK(!dd_snapshot_name_ok(".."));

    /* the copy opens as a store with the lender's plays and position */
    struct dd_config ccfg;
    dd_history *c = open_at(&ccfg, copy);
    int64_t next = 0;
    CHECK_EQ_INT(dd_history_get_offset(c, "plays", 1, &next, err, sizeof err), DD_OK);
    CHECK_EQ_INT(next, 4242);
    uint64_t sorted[1000], tmp[1000];
    uint8_t hit[1000] = {0};
    memcpy(sorted, hs, sizeof sorted);
    dd_bloom_sort_hashes(sorted, NULL, 1000, tmp, NULL);
    CHECK_EQ_INT(dd_history_probe(c, "", 0, "u", 1, 0, sorted, 1000, hit, err, sizeof err), DD_OK);
    size_t found = 0;
    for (int i = 0; i < 1000; i++) found += hit[i];
    CHECK_EQ_INT(found, 1000);
    dd_history_close(c);
    dd_config_free(&ccfg);

    /* the same checkpoint while it is used */
    struct dd_snapshot_manifest m2 = {0};
    REQUIRE(dd_snapshot_begin(s, &m2, err, sizeof err) == DD_OK);
    CHECK(m2.ready && strcmp(m2.id, m.id) == 0 && m2.n == m.n);
    dd_snapshot_manifest_free(&m2);
    dd_snapshot_server_free(s);

    /* a limit of 1 Mbit/s (125,000 bytes/s, a one-second burst): reading
     * the largest file again and again, after the burst a read says when
     * to ask again, and sends nothing */
    REQUIRE(dd_snapshot_server_new(&s, h, 1, 3600, err, sizeof err) == DD_OK);
    wait_manifest(s, &m2);
    const struct dd_snapshot_file *big = &m2.files[0];
    for (size_t i = 1; i < m2.n; i++)
        if (m2.files[i].size > big->size) big = &m2.files[i];
    uint64_t sent = 0;
    bool throttled = false;
    for (int i = 0; i < 100 && !throttled; i++) {
        REQUIRE(dd_snapshot_read(s, m2.id, big->name, 0, DD_SNAPSHOT_CHUNK_MAX, buf, &n, &retry,
                                 err, sizeof err) == DD_OK);
        if (n == 0 && retry > 0) throttled = true;
        sent += n;
    }
    CHECK(throttled);
    CHECK(sent >= 100000 && sent <= 125000 + 64 * 1024);
    uint64_t bytes, thr;
    dd_snapshot_server_counts(s, &bytes, &thr);
    CHECK_EQ_INT(bytes, sent);
    CHECK(thr >= 1);
    dd_snapshot_manifest_free(&m2);
    dd_snapshot_server_free(s);

    /* freeing the server removed its checkpoints */
    char snapdir[200];
    struct stat stt;
    snprintf(snapdir, sizeof snapdir, "%s.snapshot", path);
    CHECK(stat(snapdir, &stt) != 0);

    dd_snapshot_manifest_free(&m);
    free(buf);
    dd_history_close(h);
    dd_config_free(&cfg);
    tl_rm_tree(root);
    TEST_MAIN_END();
}
