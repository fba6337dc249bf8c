/* SPDX-License-Identifier: Apache-2.0
 *
 * bench_filter.c - dedupd's own CPU per Filter call, without gRPC, the
 * network or Redis: the loop rpc.c runs for each call (wire decode,
 * dd_filter_decide, response encode) on loadgen's request against
 * loadgen's heavy user, in one thread.
 *
 * Load (the same as bench/loadgen.cc): a user with 10,000 plays (--plays N:
 * the first N of them, a lighter user) written by
 * RecordPlays, dated over the last 30 days (so in one or two segments of
 * history.segment_days' default 30), then the store is closed and reopened
 * (the plays are read from an L0 file, as after run_loadgen.sh's restart;
 * --no-reopen keeps them in the memtable). The request: 10,000 candidates,
 * every 5th played, 50 never-recorded "delivered-" ids (Redis is not used
 * here: recent deliveries are pointed at a closed port, so each call takes
 * the degraded path after one failed connect; --redis HOST:PORT uses a real
 * one), the rest new; mode INDEXES. With --plays N, candidate i is played
 * if i is a multiple of 5 below N.
 *
 *   bench_filter [--calls N] [--no-reopen] [--redis HOST:PORT] [--dir PATH]
 *                [--evict MIB] [--plays N] [--gap-us US]
 *
 * --evict MIB writes over MIB MiB of other memory before each call (not
 * timed), as the daemon's transport and other calls do between two calls
 * of a worker: with 4 or more, the call starts with this core's L1 and L2
 * holding none of the previous call's tables, as in dedupd under load.
 * --gap-us US sleeps that long before each call (not timed), as a worker
 * idles between calls at low load: on a VM its vCPU halts, and the host
 * may run other work on the core meanwhile.
 *
 * Prints the median and p99 of each phase over the calls, in microseconds
 * and ns per candidate. Exits non-zero if a call fails or keeps a played
 * candidate.
 */
#include "arena.h"
#include "config.h"
#include "dd.h"
#include "filter.h"
#include "record.h"
#include "history.h"
#include "recent.h"
#include "wire.h"

#include "dedup.pb-c.h"
#include "util.h"

#include <arpa/inet.h>
#include <ftw.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>

#define N_PLAYS 10000
#define N_CANDS 10000
#define ID_MAX 32

static void die(const char *what, const char *err)
{
    fprintf(stderr, "bench_filter: %s: %s\n", what, err);
    exit(1);
}

static int closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &l) != 0)
        die("socket", "cannot find a closed port");
    close(fd);
    return ntohs(a.sin_port);
}

static void report(const char *name, int64_t *ns, size_t calls)
{
    qsort(ns, calls, sizeof *ns, bench_cmp_i64);
    double p50 = (double)ns[calls / 2], p99 = (double)ns[calls * 99 / 100];
    printf("%-16s p50 %8.1f us  p99 %8.1f us  (%5.1f ns per candidate at p50)\n", name, p50 / 1e3,
           p99 / 1e3, p50 / N_CANDS);
}

int main(int argc, char **argv)
{
    size_t calls = 2000;
    int reopen = 1;
    const char *redis = NULL, *dir_opt = NULL;
    size_t evict_mib = 0, nplays = N_PLAYS;
    long gap_us = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--calls") == 0 && i + 1 < argc) calls = (size_t)atol(argv[++i]);
        else if (strcmp(argv[i], "--no-reopen") == 0) reopen = 0;
        else if (strcmp(argv[i], "--redis") == 0 && i + 1 < argc) redis = argv[++i];
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) dir_opt = argv[++i];
        else if (strcmp(argv[i], "--evict") == 0 && i + 1 < argc)
            evict_mib = (size_t)atol(argv[++i]);
        else if (strcmp(argv[i], "--plays") == 0 && i + 1 < argc)
            nplays = (size_t)atol(argv[++i]);
        else if (strcmp(argv[i], "--gap-us") == 0 && i + 1 < argc)
            gap_us = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_filter [--calls N] [--no-reopen] [--redis HOST:PORT]"
                            " [--dir PATH] [--evict MIB] [--plays N] [--gap-us US]\n");
            return 2;
        }
    }
    if (gap_us < 0 || gap_us > 10000000) {
        fprintf(stderr, "bench_filter: --gap-us is 0 .. 10000000\n");
        return 2;
    }
    if (nplays < 1 || nplays > N_PLAYS) {
        fprintf(stderr, "bench_filter: --plays is 1 .. %d\n", N_PLAYS);
        return 2;
    }
    if (calls < 10) calls = 10;

    char root[256], path[300], addr[64], err[512];
    if (dir_opt) snprintf(root, sizeof root, "%s", dir_opt);
    else snprintf(root, sizeof root, "/tmp/dd-bench-filter-XXXXXX");
    if (!dir_opt && !mkdtemp(root)) die("mkdtemp", root);
    snprintf(path, sizeof path, "%s/history", root);
    if (redis) snprintf(addr, sizeof addr, "%s", redis);
    else snprintf(addr, sizeof addr, "127.0.0.1:%d", closed_port());

    struct dd_config cfg;
    if (dd_config_init(&cfg) != DD_OK) die("config", "init");
    if (dd_config_set(&cfg, "history.path", path, err, sizeof err) != DD_OK ||
        dd_config_set(&cfg, "recent.redis", addr, err, sizeof err) != DD_OK)
        die("config", err);

    dd_history *hist;
    dd_recent *rec;
    dd_filter *flt;
    dd_record *wr;
    if (dd_history_open(&hist, &cfg.history, &cfg.rocksdb, NULL, err, sizeof err) != DD_OK) die("history", err);
    if (dd_recent_new(&rec, &cfg.recent, err, sizeof err) != DD_OK) die("recent", err);
    struct dd_filter_conf fconf_flt = dd_config_filter_conf(&cfg);
    if (dd_filter_new(&flt, &fconf_flt, hist, rec, err, sizeof err) != DD_OK) die("filter", err);
    struct dd_record_conf rconf_wr = dd_config_record_conf(&cfg);
    if (dd_record_new(&wr, &rconf_wr, hist, rec, NULL, err, sizeof err) != DD_OK) die("record", err);
    dd_arena *arena = dd_arena_new(0, 0);
    if (!arena) die("arena", "out of memory");

    /* The heavy user's plays, as loadgen writes them. */
    static char play_ids[N_PLAYS][ID_MAX];
    static Dedup__V1__Play play_msgs[N_PLAYS];
    static Dedup__V1__Play *play_ptrs[N_PLAYS];
    int64_t now = dd_now_ms();
    for (size_t i = 0; i < nplays; i++) {
        snprintf(play_ids[i], ID_MAX, "video-%zu", 1000000 + i * 7);
        dedup__v1__play__init(&play_msgs[i]);
        play_msgs[i].item_id = play_ids[i];
        play_msgs[i].played_at_ms = now - (int64_t)(i % 30) * DD_MS_PER_DAY - 1000;
        play_ptrs[i] = &play_msgs[i];
    }
    Dedup__V1__RecordPlaysRequest pr = DEDUP__V1__RECORD_PLAYS_REQUEST__INIT;
    pr.user_id = "loadgen-heavy";
    pr.plays = play_ptrs;
    pr.n_plays = nplays;
    Dedup__V1__RecordPlaysResponse prr;
    if (dd_record_plays(wr, arena, &pr, &prr, err, sizeof err) != DD_OK)
        die("RecordPlays", err);
    if (prr.accepted != nplays) die("RecordPlays", "not every play accepted");
    dd_arena_reset(arena);
    dd_record_free(wr);
    if (reopen) {
        dd_filter_free(flt);
        dd_history_close(hist);
        if (dd_history_open(&hist, &cfg.history, &cfg.rocksdb, NULL, err, sizeof err) != DD_OK) die("history", err);
        struct dd_filter_conf fconf_flt = dd_config_filter_conf(&cfg);
        if (dd_filter_new(&flt, &fconf_flt, hist, rec, err, sizeof err) != DD_OK) die("filter", err);
    }

    /* The request, packed by protobuf-c as a client would send it. */
    static char cand_ids[N_CANDS][ID_MAX];
    static char *cand_ptrs[N_CANDS];
    size_t want_played = 0;
    for (size_t i = 0, delivered = 0; i < N_CANDS; i++) {
        if (i % 5 == 0 && i < nplays) {
            snprintf(cand_ids[i], ID_MAX, "%s", play_ids[i]);
            want_played++;
        } else if (i % 5 == 1 && delivered < 50) {
            snprintf(cand_ids[i], ID_MAX, "delivered-%zu", delivered * 2);
            delivered++;
        } else {
            snprintf(cand_ids[i], ID_MAX, "video-%zu", 5000000 + i * 13);
        }
        cand_ptrs[i] = cand_ids[i];
    }
    Dedup__V1__FilterRequest req = DEDUP__V1__FILTER_REQUEST__INIT;
    req.user_id = "loadgen-heavy";
    req.candidate_ids = cand_ptrs;
    req.n_candidate_ids = N_CANDS;
    req.mode = DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_INDEXES;
    size_t req_len = protobuf_c_message_get_packed_size(&req.base);
    uint8_t *req_bytes = malloc(req_len);
    if (!req_bytes) die("request", "out of memory");
    protobuf_c_message_pack(&req.base, req_bytes);

    int64_t *t_decode = calloc(calls, sizeof *t_decode);
    int64_t *t_decide = calloc(calls, sizeof *t_decide);
    int64_t *t_encode = calloc(calls, sizeof *t_encode);
    int64_t *t_total = calloc(calls, sizeof *t_total);
    uint8_t *out = malloc(req_len + 1024);
    uint8_t *evict = evict_mib ? malloc(evict_mib << 20) : NULL;
    if (!t_decode || !t_decide || !t_encode || !t_total || !out || (evict_mib && !evict))
        die("bench", "out of memory");

    size_t bad = 0, played = 0, bytes_out = 0;
    for (size_t c = 0; c < calls + 20; c++) { /* 20 warm-up calls */
        dd_arena_reset(arena);
        if (evict) memset(evict, (int)c, evict_mib << 20);
        if (gap_us) {
            struct timespec gap = {gap_us / 1000000, (gap_us % 1000000) * 1000};
            nanosleep(&gap, NULL);
        }
        int64_t t0 = dd_mono_ns();
        struct dd_filter_query q;
        if (dd_wire_filter_request_decode(req_bytes, req_len, arena, cfg.rpc.max_candidates, &q,
                                          NULL, 0) != DD_OK)
            die("decode", "request rejected");
        int64_t t1 = dd_mono_ns();
        struct dd_filter_result r;
        if (dd_filter_decide(flt, arena, &q, &r, 0, err, sizeof err) != DD_OK)
            die("Filter", err);
        int64_t t2 = dd_mono_ns();
        size_t bound = dd_wire_filter_response_bound(&q, &r);
        if (bound > req_len + 1024) die("encode", "response bound larger than expected");
        bytes_out = dd_wire_filter_response_write(&q, &r, out);
        int64_t t3 = dd_mono_ns();
        for (size_t i = 0; i < N_CANDS && i < nplays; i += 5) bad += r.reason[i] == 0;
        played = r.played;
        if (c < 20) continue;
        t_decode[c - 20] = t1 - t0;
        t_decide[c - 20] = t2 - t1;
        t_encode[c - 20] = t3 - t2;
        t_total[c - 20] = t3 - t0;
    }
    printf("bench_filter: %zu calls, %d candidates (%zu request bytes, %zu response bytes), "
           "user with %zu plays, %zu played removed (%zu played), plays %s, "
           "%zu MiB evicted and %ld us idle before each call\n",
           calls, N_CANDS, req_len, bytes_out, nplays, (size_t)played, want_played,
           reopen ? "in an L0 file (reopened)" : "in the memtable", evict_mib, gap_us);
    report("wire decode", t_decode, calls);
    report("filter decide", t_decide, calls);
    report("response encode", t_encode, calls);
    report("total", t_total, calls);

    dd_filter_free(flt);
    dd_recent_free(rec);
    dd_history_close(hist);
    dd_arena_free(arena);
    dd_config_free(&cfg);
    free(req_bytes);
    free(out);
    free(evict);
    free(t_decode);
    free(t_decide);
    free(t_encode);
    free(t_total);
    if (!dir_opt) bench_rm_tree(root);
    if (bad) {
        fprintf(stderr, "bench_filter: %zu played candidates kept\n", bad / (calls + 20));
        return 1;
    }
    return 0;
}
