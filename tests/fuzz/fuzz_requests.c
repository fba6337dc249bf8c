/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz_requests.c - the write RPCs as rpc.c runs them: the first byte picks
 * RecordDelivery, RecordPlays or ForgetUser, the rest is unpacked by
 * protobuf-c with the arena allocator, and an accepted message goes
 * through record.h's handler against a real history (RocksDB in a
 * temporary directory, removed at exit) and a recent-deliveries client
 * whose Redis is down (a closed loopback port). Checks: no crash, no leak,
 * every error leaves a message.
 */
#include "fuzz.h"

#include "arena.h"
#include "config.h"
#include "dd.h"
#include "history.h"
#include "recent.h"
#include "record.h"
#include "testlib.h"

static char root[64];
static struct dd_config cfg;
static dd_history *hist;
static dd_recent *rec;
static dd_record *wr;
static dd_arena *arena;

static void cleanup(void)
{
    dd_record_free(wr);
    dd_recent_free(rec);
    dd_history_close(hist);
    dd_arena_free(arena);
    dd_config_free(&cfg);
    tl_rm_tree(root);
}

static void setup(void)
{
    char err[512], path[128], addr[64];
    snprintf(root, sizeof root, "/tmp/dd-fuzz-store-XXXXXX");
    FUZZ_CHECK(mkdtemp(root) != NULL);
    FUZZ_CHECK(dd_config_init(&cfg) == DD_OK);
    snprintf(path, sizeof path, "%s/history", root);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", tl_free_port());
    FUZZ_CHECK(dd_config_set(&cfg, "history.path", path, err, sizeof err) == DD_OK);
    FUZZ_CHECK(dd_config_set(&cfg, "history.segment_days", "1", err, sizeof err) == DD_OK);
    FUZZ_CHECK(dd_config_set(&cfg, "history.sync", "false", err, sizeof err) == DD_OK);
    FUZZ_CHECK(dd_config_set(&cfg, "recent.redis", addr, err, sizeof err) == DD_OK);
    FUZZ_CHECK(dd_config_set(&cfg, "rpc.max_id_bytes", "64", err, sizeof err) == DD_OK);
    FUZZ_CHECK(dd_history_open(&hist, &cfg.history, &cfg.rocksdb, &tclock, err, sizeof err) ==
               DD_OK);
    FUZZ_CHECK(dd_recent_new(&rec, &cfg.recent, err, sizeof err) == DD_OK);
    struct dd_record_conf rconf = dd_config_record_conf(&cfg);
    FUZZ_CHECK(dd_record_new(&wr, &rconf, hist, rec, NULL, err, sizeof err) == DD_OK);
    arena = dd_arena_new(0, 0);
    FUZZ_CHECK(arena);
    atexit(cleanup);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!arena) setup();
    if (size == 0) return 0;
    dd_arena_reset(arena);
    ProtobufCAllocator *al = dd_arena_allocator(arena);
    char err[512] = "";
    int rc = DD_OK;
    const uint8_t *msg = data + 1;
    size_t len = size - 1;
    switch (data[0] % 3) {
    case 0: {
        Dedup__V1__RecordDeliveryRequest *req =
            dedup__v1__record_delivery_request__unpack(al, len, msg);
        if (!req) return 0;
        Dedup__V1__RecordDeliveryResponse resp;
        rc = dd_record_delivery(wr, arena, req, &resp, err, sizeof err);
        break;
    }
    case 1: {
        Dedup__V1__RecordPlaysRequest *req = dedup__v1__record_plays_request__unpack(al, len, msg);
        if (!req) return 0;
        Dedup__V1__RecordPlaysResponse resp;
        rc = dd_record_plays(wr, arena, req, &resp, err, sizeof err);
        if (rc == DD_OK) FUZZ_CHECK(resp.expired <= req->n_plays);
        break;
    }
    default: {
        Dedup__V1__ForgetUserRequest *req = dedup__v1__forget_user_request__unpack(al, len, msg);
        if (!req) return 0;
        Dedup__V1__ForgetUserResponse resp;
        rc = dd_record_forget(wr, arena, req, &resp, err, sizeof err);
        break;
    }
    }
    if (rc != DD_OK) FUZZ_CHECK(err[0] != '\0');
    return 0;
}
