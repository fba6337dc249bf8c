/* SPDX-License-Identifier: Apache-2.0
 *
 * lookback.h - which lookback a Filter answer applies when the request's
 * min_kept asks that the feed never run dry (proto/dedup.proto,
 * FilterRequest.min_kept). Pure arithmetic: no I/O, no clock, no
 * allocation.
 *
 * DESIGN
 *
 * The one read of the history (history.h, dd_history_probe_scenes) gives
 * each played candidate the age, in days, of the newest day it was found
 * in: its play's own day in a day segment, a segment's newest day in a
 * history.segment_days segment (so a coarse segment's items share one age
 * and come back together). A lookback of L removes exactly the played
 * candidates of age <= L, as a read with lookback L would: a segment is
 * read when its newest day is within L days. Shortening the lookback from
 * the request's span day by day lets the oldest plays back first; the
 * choice is the longest lookback, not shorter than the floor
 * (history.min_lookback_days), that keeps at least min_kept candidates.
 * When the day-exact stored form gives every fingerprint its own day, the
 * ages become days and the same choice is exact to the day.
 */
#ifndef DD_LOOKBACK_H
#define DD_LOOKBACK_H

#include <stddef.h>
#include <stdint.h>

/* The lookback to apply, in days. SPAN: the request's lookback (its 0, or
 * one past the retention, resolved by the caller to the retention);
 * FLOOR: history.min_lookback_days; MIN_KEPT: the request's; KEPT: the
 * candidates kept at SPAN; BY_AGE[a] for a = 0..SPAN: the candidates
 * removed only for a play whose newest day is a days ago (recent
 * deliveries and duplicates are not counted: they never come back).
 * Returns SPAN when KEPT >= MIN_KEPT or SPAN <= FLOOR; else the largest
 * L in [FLOOR, SPAN) with KEPT + sum(BY_AGE[a], a > L) >= MIN_KEPT, or
 * FLOOR when none is (every play older than the floor comes back, and the
 * answer keeps fewer than MIN_KEPT). Cannot fail. */
uint32_t dd_lookback_choose(uint32_t span, uint32_t floor, uint32_t min_kept, size_t kept,
                            const uint32_t *by_age);

#endif
