/* SPDX-License-Identifier: Apache-2.0
 *
 * segment.h - the history store's key layout and time segments (the data
 * model is in history.h). Pure arithmetic: no I/O, no clock, no allocation.
 *
 * Key:  u8 len(scene) | scene | u16 BE len(user) | user | u32 BE segment,
 *       so one user's segments are one contiguous, ordered key range.
 * Days: whole UTC days, day = floor(ms / 86400000), negative before 1970.
 *       Segment s holds days [s * segment_days, (s + 1) * segment_days).
 * Day segments: earlier releases kept each day of a scene listed in
 *       history.day_scenes in a segment of its own, numbered
 *       DD_SEGMENT_DAY | day (plays are dated in their segment_days segment
 *       now: bloom.h, dated filters). They are still read and expired. Both
 *       kinds live side by side in one user's key range (the day segments
 *       sort after the others), and a key's own number says which kind it
 *       is: the fold and the compaction filter need no configuration to
 *       expire either.
 */
#ifndef DD_SEGMENT_H
#define DD_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest ids, in bytes: the key stores a scene's length in one byte and a
 * user's in two, so longer ids cannot be stored. */
#define DD_SCENE_MAX 255
#define DD_USER_MAX 65535

/* Longest key: u8 + scene + u16 + user + u32. */
#define DD_KEY_MAX (1 + DD_SCENE_MAX + 2 + DD_USER_MAX + 4)

/* Days a closed segment stays at the full range before it is re-encoded
 * at its final range. RocksDB folds whatever operands one compaction
 * holds, so a segment's last plays can still sit above its base when it
 * closes; each that arrives after the re-encoding costs a full-range entry
 * (fold.h, split values). Waiting lets them reach the base first. */
#define DD_SEGMENT_REDUCE_GRACE_DAYS 3

/* The flag of a day segment's number; below it, segment_days segments.
 * Day numbers stay below 2^31 until the year 5,800,000. */
#define DD_SEGMENT_DAY 0x80000000u

/* Segment geometry, from history.segment_days and history.retention_days
 * (both > 0). */
struct dd_segments {
    uint32_t segment_days;
    uint32_t retention_days;
};

/* The UTC day of time MS (milliseconds since 1970), rounded down. */
int64_t dd_day_of_ms(int64_t ms);

/* Newest day segment SEG holds (for a day segment, its day). */
int64_t dd_segment_last_day(const struct dd_segments *g, uint32_t seg);

/* Oldest day still remembered on day DAY: DAY - retention_days. A play is
 * kept while day + retention_days lasts, so at least retention_days full
 * days whatever its time of day. */
int64_t dd_segment_oldest_live_day(const struct dd_segments *g, int64_t day);

/* Whether SEG holds no live day on day DAY: it is never read again and
 * the compaction filter drops it. */
bool dd_segment_dead(const struct dd_segments *g, uint32_t seg, int64_t day);

/* Whether SEG is closed for re-encoding on day DAY: no day of it can
 * still be "today" or "yesterday", and DD_SEGMENT_REDUCE_GRACE_DAYS more
 * have passed. */
bool dd_segment_closed(const struct dd_segments *g, uint32_t seg, int64_t day);

/* The segment holding DAY; 0 for days before 1970, DD_SEGMENT_DAY - 1
 * past the last segment. */
uint32_t dd_segment_of_day(const struct dd_segments *g, int64_t day);

/* The day segment of DAY: DD_SEGMENT_DAY | DAY, with days before 1970 as
 * day 0. */
uint32_t dd_day_segment(int64_t day);

/* Whether SEG is a day segment. */
static inline bool dd_segment_is_day(uint32_t seg)
{
    return (seg & DD_SEGMENT_DAY) != 0;
}

/* Write the user prefix of a key (all but the segment) into P, which has
 * room for DD_KEY_MAX bytes; returns its length. The caller has checked
 * SCENE_LEN <= DD_SCENE_MAX and USER_LEN <= DD_USER_MAX. */
size_t dd_key_prefix(uint8_t *p, const char *scene, size_t scene_len, const char *user,
                     size_t user_len);

/* Write SEG as the 4 big-endian bytes at P (a key's last field). */
void dd_key_put_segment(uint8_t *p, uint32_t seg);

/* The segment of stored key KEY (LEN bytes), if its length fields say it
 * is well formed; returns false (and leaves *SEG) for any other key. */
bool dd_key_segment(const char *key, size_t len, uint32_t *seg);

/* The user id inside stored key KEY (LEN bytes), pointing into KEY, if the
 * key is a well-formed segment key (as dd_key_segment); false otherwise
 * (offsets and other reserved keys). */
bool dd_key_user(const char *key, size_t len, const char **user, size_t *user_len);

/* Hex of up to the first 48 bytes of KEY into OUT (NUL-terminated,
 * truncated to OUTLEN), for log lines. */
void dd_key_hex(char *out, size_t outlen, const char *key, size_t len);

#endif
