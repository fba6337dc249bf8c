/* SPDX-License-Identifier: Apache-2.0
 *
 * mix.h - the realistic load the history benchmarks share (bench_history,
 * bench_cold): users' plays log-normal (median 1,000, sigma 1.5, capped at
 * 50,000: mean about 3,000), dated uniformly over the last 90 days, and the
 * way they are written: the daemon's, round by round with the store's clock
 * moved along (mix_load).
 *
 * Everything about user U is a pure function of U: plays are regenerated
 * from (U, i) rather than stored, so a store built by one run can be read
 * by another that knows only the user count and "now" (mix_now_ms).
 * Users are named "u<U>".
 */
#ifndef DD_BENCH_MIX_H
#define DD_BENCH_MIX_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "history.h"

#define MIX_SPAN_DAYS 90
#define MIX_MAX_PLAYS 50000

/* splitmix64's finaliser: the generator every figure derives from. */
uint64_t mix_hash(uint64_t x);
/* A uniform double in [0, 1) from X. */
double mix_unit(uint64_t x);

/* User U's seed, from which everything about U derives. */
uint64_t mix_user_seed(uint32_t u);
/* User U's plays: 1..MIX_MAX_PLAYS (per MIX_SPAN_DAYS). */
uint32_t mix_user_plays(uint32_t u);
/* The item hash of U's play I (I < mix_user_plays(U), or beyond for a
 * load that goes on past MIX_SPAN_DAYS). */
uint64_t mix_play_hash(uint32_t u, uint64_t i);
/* The J-th item hash U never played. */
uint64_t mix_never_hash(uint32_t u, uint64_t j);
/* How long before the load's end U's play I is dated, in ms. */
int64_t mix_play_age_ms(uint32_t u, uint32_t i);

/* The load's end ("now") for SEGMENT_DAYS segments with today PHASE of
 * the way into its segment, near day 20000. */
int64_t mix_now_ms(uint32_t segment_days, double phase);

/* A dd_history_clock's now_ms for a clock kept in an _Atomic int64_t
 * (ud points to it), which a benchmark moves. */
int64_t mix_clock_ms(void *ud);

/* One load: USERS users' plays written through H (whose clock reads
 * *CLOCK) in ROUNDS rounds over the MIX_SPAN_DAYS days before NOW, each
 * round's plays at the round's end, in batches of 2,000 users, one merge
 * operand per (user, segment), each play dated its own day
 * (dd_history_dated); the memtable flushed after each round when
 * ROUND_FLUSH. GEO_DAYS and SEG_FLAG: the segments the plays go to
 * (segment_days and 0, as dd_history_place places them). On
 * return the clock is at the last round's end; WRITTEN and EXPIRED are
 * the plays written and those dd_history_place refused.
 * WRITE_NS: the time the rounds took. Exits the
 * process on failure (a benchmark has nothing to recover). */
struct mix_load {
    const char *prog; /* for the failure's message */
    dd_history *h;
    _Atomic int64_t *clock;
    uint32_t users;
    uint32_t rounds;
    int64_t now;
    const char *scene;
    size_t scene_len;
    uint32_t geo_days;
    uint32_t seg_flag;
    int round_flush;
    uint64_t written; /* out */
    uint64_t expired; /* out */
    int64_t write_ns; /* out: the rounds' writes (not the set-up before them) */
};
void mix_load(struct mix_load *l);

#endif
