/* SPDX-License-Identifier: Apache-2.0
 *
 * segment.c - history keys and time segments (segment.h).
 */
#include "segment.h"

#include <string.h>

#include "dd.h"

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

int64_t dd_day_of_ms(int64_t ms)
{
    return floor_div(ms, DD_MS_PER_DAY);
}

int64_t dd_segment_last_day(const struct dd_segments *g, uint32_t seg)
{
    if (dd_segment_is_day(seg)) return (int64_t)(seg & ~DD_SEGMENT_DAY);
    return (int64_t)seg * g->segment_days + g->segment_days - 1;
}

int64_t dd_segment_oldest_live_day(const struct dd_segments *g, int64_t day)
{
    return day - (int64_t)g->retention_days;
}

bool dd_segment_dead(const struct dd_segments *g, uint32_t seg, int64_t day)
{
    return dd_segment_last_day(g, seg) < dd_segment_oldest_live_day(g, day);
}

bool dd_segment_closed(const struct dd_segments *g, uint32_t seg, int64_t day)
{
    return dd_segment_last_day(g, seg) < day - 1 - DD_SEGMENT_REDUCE_GRACE_DAYS;
}

uint32_t dd_segment_of_day(const struct dd_segments *g, int64_t day)
{
    if (day < 0) return 0;
    int64_t s = day / g->segment_days;
    return s >= DD_SEGMENT_DAY ? DD_SEGMENT_DAY - 1 : (uint32_t)s;
}

uint32_t dd_day_segment(int64_t day)
{
    if (day < 0) day = 0;
    if (day >= DD_SEGMENT_DAY) day = DD_SEGMENT_DAY - 1;
    return DD_SEGMENT_DAY | (uint32_t)day;
}

size_t dd_key_prefix(uint8_t *p, const char *scene, size_t scene_len, const char *user,
                     size_t user_len)
{
    size_t n = 0;
    p[n++] = (uint8_t)scene_len;
    if (scene_len) memcpy(p + n, scene, scene_len);
    n += scene_len;
    p[n++] = (uint8_t)(user_len >> 8);
    p[n++] = (uint8_t)user_len;
    if (user_len) memcpy(p + n, user, user_len);
    return n + user_len;
}

void dd_key_put_segment(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

bool dd_key_segment(const char *key, size_t len, uint32_t *seg)
{
    const uint8_t *k = (const uint8_t *)key;
    if (len < 1 + 2 + 4) return false;
    size_t slen = k[0];
    if (len < 1 + slen + 2 + 4) return false;
    size_t ulen = ((size_t)k[1 + slen] << 8) | k[2 + slen];
    if (len != 1 + slen + 2 + ulen + 4) return false;
    const uint8_t *s = k + len - 4;
    *seg = ((uint32_t)s[0] << 24) | ((uint32_t)s[1] << 16) | ((uint32_t)s[2] << 8) | s[3];
    return true;
}

bool dd_key_user(const char *key, size_t len, const char **user, size_t *user_len)
{
    uint32_t seg;
    if (!dd_key_segment(key, len, &seg)) return false;
    size_t slen = (uint8_t)key[0];
    *user_len = ((size_t)(uint8_t)key[1 + slen] << 8) | (uint8_t)key[2 + slen];
    *user = key + 3 + slen;
    return true;
}

void dd_key_hex(char *out, size_t outlen, const char *key, size_t len)
{
    static const char hx[] = "0123456789abcdef";
    size_t o = 0;
    for (size_t i = 0; i < len && i < 48 && o + 3 < outlen; i++) {
        out[o++] = hx[(uint8_t)key[i] >> 4];
        out[o++] = hx[(uint8_t)key[i] & 15];
    }
    out[o] = '\0';
}
