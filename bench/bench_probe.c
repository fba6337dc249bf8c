/* SPDX-License-Identifier: Apache-2.0
 *
 * bench_probe.c - the two ways dd_history_probe_any looks a full-range
 * (open) segment up, timed against each other: each of its fingerprints
 * looked up in the candidates' hash set (dd_bloom_probe_candset), or the
 * segment decoded into an index that every candidate is looked up in
 * (dd_bloom_index_build + dd_bloom_index_has). history.c takes the set for
 * a segment of at most 0.4x the candidates; this prints where the two
 * cross on this machine.
 *
 * Load: a user with two open segments of M fingerprints each, for several
 * M; 10,000 candidates, a fifth of them played. Each call first builds
 * the hash set (as Filter's duplicate pass does; not timed), then probes
 * both segments one way. The two ways alternate call by call in one
 * process, with MIB MiB of other memory written before each call (as the
 * transport does between a worker's calls), so a change in the host's
 * speed hits both alike: this VM's host varies up to 2x between runs,
 * which made separate runs useless for differences of 10-30 %.
 *
 *   bench_probe [--calls N] [--evict MIB]
 *
 * Prints, per M, the median probe time of each way in microseconds and
 * their ratio. Exits non-zero if the two ways find different hits.
 */
#include "bloom.h"
#include "candset.h"
#include "dd.h"
#include "util.h"
#include "testlib.h" /* tl_splitmix64 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_CANDS 10000
#define N_VIEWS 2

static uint64_t rng_state = 0x5851f42d4c957f2dull;
static uint64_t rnd(void) { return tl_splitmix64(&rng_state); }

static void die(const char *what)
{
    fprintf(stderr, "bench_probe: %s\n", what);
    exit(1);
}

int main(int argc, char **argv)
{
    size_t calls = 2000, evict_mib = 4;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--calls") == 0 && i + 1 < argc) calls = (size_t)atol(argv[++i]);
        else if (strcmp(argv[i], "--evict") == 0 && i + 1 < argc)
            evict_mib = (size_t)atol(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_probe [--calls N] [--evict MIB]\n");
            return 2;
        }
    }
    if (calls < 10) calls = 10;

    static const uint32_t per_view[] = {250, 1000, 2000, 3000, 4000, 5000, 8000};
    uint64_t *cand = malloc(N_CANDS * sizeof *cand);
    uint8_t *hit_set = malloc(N_CANDS), *hit_ix = malloc(N_CANDS);
    uint8_t *evict = evict_mib ? malloc(evict_mib << 20) : NULL;
    int64_t *t_set = malloc(calls * sizeof *t_set), *t_ix = malloc(calls * sizeof *t_ix);
    uint64_t *plays = malloc((size_t)N_VIEWS * 8000 * sizeof *plays);
    void *ixmem = malloc(((size_t)8000 * 3 + 8) * sizeof(uint32_t));
    struct dd_candset cs;
    if (!cand || !hit_set || !hit_ix || (evict_mib && !evict) || !t_set || !t_ix || !plays ||
        !ixmem || dd_candset_init(&cs, N_CANDS) != DD_OK)
        die("out of memory");

    printf("bench_probe: 2 open segments of M fingerprints, %d candidates (a fifth played), "
           "%zu calls, %zu MiB evicted before each\n",
           N_CANDS, calls, evict_mib);
    printf("%8s %14s %14s %8s\n", "M", "index (us)", "set (us)", "set/ix");
    for (size_t p = 0; p < DD_ARRAY_LEN(per_view); p++) {
        const uint32_t m = per_view[p];
        struct dd_buf buf[N_VIEWS] = {{0}};
        struct dd_bloom_view v[N_VIEWS];
        for (size_t i = 0; i < (size_t)N_VIEWS * m; i++) plays[i] = rnd();
        for (int j = 0; j < N_VIEWS; j++) {
            if (dd_bloom_build(&buf[j], plays + (size_t)j * m, m, DD_BLOOM_FULL_RANGE, NULL) !=
                    DD_OK ||
                dd_bloom_parse(buf[j].data, buf[j].len, &v[j]) != DD_OK)
                die("building a filter");
        }
        size_t played = 0;
        for (size_t i = 0; i < N_CANDS; i++) {
            if (i % 5 == 0 && played < (size_t)N_VIEWS * m) cand[i] = plays[played++];
            else cand[i] = rnd();
        }
        size_t found_set = 0, found_ix = 0;
        for (long c = -20; c < (long)calls; c++) {
            for (int way = 0; way < 2; way++) {
                if (evict) memset(evict, (int)c, evict_mib << 20);
                if (dd_candset_begin(&cs, cand, N_CANDS) != DD_OK) die("out of memory");
                for (uint32_t i = 0; i < N_CANDS; i++) dd_candset_add(&cs, i);
                uint8_t *hit = way ? hit_ix : hit_set;
                memset(hit, 0, N_CANDS);
                int64_t a = dd_mono_ns();
                for (int j = 0; j < N_VIEWS; j++) {
                    if (way == 0) {
                        if (dd_bloom_probe_candset(&v[j], &cs, hit) != DD_OK) die("probe");
                        continue;
                    }
                    struct dd_bloom_index ix;
                    if (dd_bloom_index_build(&v[j], ixmem, &ix) != DD_OK) die("index");
                    const struct dd_bloom_index cix = ix;
                    for (size_t i = 0; i < N_CANDS; i++)
                        hit[i] |= (uint8_t)dd_bloom_index_has(cix, cand[i]);
                }
                int64_t b = dd_mono_ns();
                if (c >= 0) (way ? t_ix : t_set)[c] = b - a;
            }
            if (c == 0)
                for (size_t i = 0; i < N_CANDS; i++) {
                    found_set += hit_set[i];
                    found_ix += hit_ix[i];
                }
        }
        if (found_set != found_ix || found_set < played) die("the two ways found different hits");
        qsort(t_set, calls, sizeof *t_set, bench_cmp_i64);
        qsort(t_ix, calls, sizeof *t_ix, bench_cmp_i64);
        double ix_us = (double)t_ix[calls / 2] / 1e3, set_us = (double)t_set[calls / 2] / 1e3;
        printf("%8u %14.1f %14.1f %8.2f\n", m, ix_us, set_us, set_us / ix_us);
        for (int j = 0; j < N_VIEWS; j++) dd_buf_free(&buf[j]);
    }
    dd_candset_free(&cs);
    free(cand); free(hit_set); free(hit_ix); free(evict); free(t_set); free(t_ix);
    free(plays); free(ixmem);
    return 0;
}
