/* SPDX-License-Identifier: Apache-2.0
 *
 * mix.c - the realistic load (mix.h).
 */
#include "mix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dd.h"
#include "segment.h"

#define DAY DD_MS_PER_DAY

uint64_t mix_hash(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

double mix_unit(uint64_t x)
{
    return (double)(mix_hash(x) >> 11) * (1.0 / 9007199254740992.0);
}

uint64_t mix_user_seed(uint32_t u)
{
    return mix_hash(0xd1b54a32d192ed03ull ^ ((uint64_t)u << 20));
}

uint32_t mix_user_plays(uint32_t u)
{
    uint64_t s = mix_user_seed(u);
    /* Box-Muller from two uniforms */
    double u1 = mix_unit(s ^ 0x1111), u2 = mix_unit(s ^ 0x2222);
    if (u1 < 1e-300) u1 = 1e-300;
    double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
    double n = exp(log(1000.0) + 1.5 * z);
    if (n < 1) n = 1;
    if (n > MIX_MAX_PLAYS) n = MIX_MAX_PLAYS;
    return (uint32_t)n;
}

uint64_t mix_play_hash(uint32_t u, uint64_t i)
{
    return mix_hash(mix_user_seed(u) + 2 * i + 1);
}

uint64_t mix_never_hash(uint32_t u, uint64_t j)
{
    return mix_hash(~mix_user_seed(u) + 2 * j + (UINT64_C(1) << 40));
}

int64_t mix_play_age_ms(uint32_t u, uint32_t i)
{
    return (int64_t)(mix_unit(mix_user_seed(u) ^ mix_hash(i + 0x5bd1e995ull)) *
                     (double)(MIX_SPAN_DAYS * DAY - 1));
}

int64_t mix_now_ms(uint32_t segment_days, double phase)
{
    int64_t today = (int64_t)(20000 / segment_days) * segment_days +
                    (int64_t)(phase * segment_days);
    return today * DAY + DAY / 2;
}

int64_t mix_clock_ms(void *ud)
{
    return atomic_load((_Atomic int64_t *)ud);
}

static void die(const struct mix_load *l, const char *what, const char *err)
{
    fprintf(stderr, "%s: %s: %s\n", l->prog, what, err);
    exit(1);
}

void mix_load(struct mix_load *l)
{
    const uint32_t users = l->users, rounds = l->rounds;
    const int64_t now = l->now, today = now / DAY;
    char err[512];
    uint64_t total = 0;
    for (uint32_t u = 0; u < users; u++) total += mix_user_plays(u);

    /* Each user's plays bucketed by round (counting sort of indices), so a
     * round touches only its own plays. */
    uint64_t *user_off = malloc(((size_t)users + 1) * sizeof *user_off);
    uint32_t *round_off = malloc((size_t)users * (rounds + 1) * sizeof *round_off);
    uint32_t *order = malloc(total * sizeof *order);
    uint32_t *fill = malloc(rounds * sizeof *fill);
    if (!user_off || !round_off || !order || !fill) die(l, "load", "out of memory");
    const int64_t round_ms = MIX_SPAN_DAYS * DAY / rounds;
    user_off[0] = 0;
    for (uint32_t u = 0; u < users; u++) {
        uint32_t n = mix_user_plays(u), *ro = round_off + (size_t)u * (rounds + 1);
        user_off[u + 1] = user_off[u] + n;
        memset(ro, 0, (rounds + 1) * sizeof *ro);
        /* round r holds the plays aged [SPAN - (r+1)*len, SPAN - r*len) */
        for (uint32_t i = 0; i < n; i++) {
            int64_t r = (MIX_SPAN_DAYS * DAY - 1 - mix_play_age_ms(u, i)) / round_ms;
            ro[(r >= rounds ? rounds - 1 : r) + 1]++;
        }
        for (uint32_t r = 0; r < rounds; r++) ro[r + 1] += ro[r];
        memcpy(fill, ro, rounds * sizeof *fill);
        for (uint32_t i = 0; i < n; i++) {
            int64_t r = (MIX_SPAN_DAYS * DAY - 1 - mix_play_age_ms(u, i)) / round_ms;
            order[user_off[u] + fill[r >= rounds ? rounds - 1 : r]++] = i;
        }
    }

    size_t max_segs = MIX_SPAN_DAYS / l->geo_days + 3;
    uint64_t *per_seg = malloc(max_segs * MIX_MAX_PLAYS * sizeof *per_seg);
    size_t *seg_n = calloc(max_segs, sizeof *seg_n);
    dd_history_batch *b = dd_history_batch_new();
    if (!per_seg || !seg_n || !b) die(l, "load", "out of memory");
    const uint32_t users_per_batch = 2000;
    const uint32_t first_seg = (uint32_t)((today - MIX_SPAN_DAYS - 1) / l->geo_days);
    l->written = l->expired = 0;
    const int64_t t0 = dd_mono_ns();
    for (uint32_t r = 0; r < rounds; r++) {
        /* the flush at the end of the round: the clock is there */
        int64_t lo_age = r == rounds - 1 ? 0 : MIX_SPAN_DAYS * DAY - (int64_t)(r + 1) * round_ms;
        atomic_store(l->clock, now - lo_age);
        for (uint32_t u0 = 0; u0 < users; u0 += users_per_batch) {
            dd_history_batch_clear(b);
            for (uint32_t u = u0; u < users && u < u0 + users_per_batch; u++) {
                const uint32_t *ro = round_off + (size_t)u * (rounds + 1);
                memset(seg_n, 0, max_segs * sizeof *seg_n);
                for (uint32_t j = ro[r]; j < ro[r + 1]; j++) {
                    uint32_t i = order[user_off[u] + j];
                    uint32_t seg;
                    if (dd_history_place(l->h, l->scene, l->scene_len,
                                         now - mix_play_age_ms(u, i), &seg) !=
                        DD_HISTORY_PLACE_OK) {
                        l->expired++;
                        continue;
                    }
                    size_t k = (seg & ~l->seg_flag) - first_seg;
                    per_seg[k * MIX_MAX_PLAYS + seg_n[k]++] =
                        dd_history_dated(mix_play_hash(u, i), now - mix_play_age_ms(u, i));
                }
                char user[16];
                int ul = snprintf(user, sizeof user, "u%u", u);
                for (size_t k = 0; k < max_segs; k++) {
                    if (!seg_n[k]) continue;
                    if (dd_history_batch_add(b, l->scene, l->scene_len, user, (size_t)ul,
                                             (first_seg + (uint32_t)k) | l->seg_flag,
                                             per_seg + k * MIX_MAX_PLAYS, seg_n[k]))
                        die(l, "batch", "add failed");
                    l->written += seg_n[k];
                }
            }
            if (dd_history_write(l->h, b, err, sizeof err)) die(l, "write", err);
        }
        /* A full-size instance (millions of users) fills a memtable in
         * minutes; 20,000 users would leave plays in it for simulated days,
         * where they arrive "late" at segments folded meanwhile. */
        if (l->round_flush && dd_history_flush(l->h, err, sizeof err)) die(l, "flush", err);
    }
    l->write_ns = dd_mono_ns() - t0;
    free(fill);
    free(order);
    free(round_off);
    free(user_off);
    dd_history_batch_free(b);
    free(per_seg);
    free(seg_n);
}
