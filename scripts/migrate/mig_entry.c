/* SPDX-License-Identifier: Apache-2.0
 *
 * mig_entry.c - key patterns, the classification of legacy entries and the
 * run's counters for dedupd-migrate. Pure functions: no I/O, no globals.
 */
#include "migrate.h"

#include "dd.h"
#include "text.h" /* dd_text_check: what dedupd accepts as a string */

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USER_PLACEHOLDER "{user}"

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* Redis glob metacharacters are taken literally after a backslash. */
static size_t glob_escape(char *out, const char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (strchr("*?[]\\", s[i]) && s[i] != '\0') {
            if (out) out[o] = '\\';
            o++;
        }
        if (out) out[o] = s[i];
        o++;
    }
    return o;
}

int mig_pattern_parse(struct mig_pattern *p, const char *text, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    const char *ph = strstr(text, USER_PLACEHOLDER);
    if (!ph) {
        dd_set_err(err, errlen, "pattern '%s' has no %s placeholder", text, USER_PLACEHOLDER);
        return DD_ERR_INVALID;
    }
    const char *after = ph + strlen(USER_PLACEHOLDER);
    if (strstr(after, USER_PLACEHOLDER)) {
        dd_set_err(err, errlen, "pattern '%s' has more than one %s", text, USER_PLACEHOLDER);
        return DD_ERR_INVALID;
    }
    if (strchr(text, '\n') || strchr(text, '\r')) {
        dd_set_err(err, errlen, "pattern must not contain a line break");
        return DD_ERR_INVALID;
    }
    p->prefix_len = (size_t)(ph - text);
    p->suffix_len = strlen(after);
    p->text = strdup(text);
    p->prefix = dup_n(text, p->prefix_len);
    p->suffix = dup_n(after, p->suffix_len);
    size_t mlen = glob_escape(NULL, p->prefix, p->prefix_len) + 1 +
                  glob_escape(NULL, p->suffix, p->suffix_len);
    p->match = malloc(mlen + 1);
    if (!p->text || !p->prefix || !p->suffix || !p->match) {
        mig_pattern_free(p);
        dd_set_err(err, errlen, "out of memory");
        return DD_ERR_NOMEM;
    }
    size_t o = glob_escape(p->match, p->prefix, p->prefix_len);
    p->match[o++] = '*';
    o += glob_escape(p->match + o, p->suffix, p->suffix_len);
    p->match[o] = '\0';
    return DD_OK;
}

void mig_pattern_free(struct mig_pattern *p)
{
    if (!p) return;
    free(p->text);
    free(p->prefix);
    free(p->suffix);
    free(p->match);
    memset(p, 0, sizeof *p);
}

int mig_pattern_user(const struct mig_pattern *p, const char *key, size_t keylen,
                     size_t max_user, const char **user, size_t *user_len)
{
    if (keylen < p->prefix_len + p->suffix_len + 1) return -1;
    if (memcmp(key, p->prefix, p->prefix_len) != 0) return -1;
    if (memcmp(key + keylen - p->suffix_len, p->suffix, p->suffix_len) != 0) return -1;
    size_t n = keylen - p->prefix_len - p->suffix_len;
    if (n > max_user || dd_text_check((const uint8_t *)key + p->prefix_len, n) != DD_TEXT_OK)
        return -1;
    *user = key + p->prefix_len;
    *user_len = n;
    return 0;
}

int mig_pattern_key(const struct mig_pattern *p, const char *user, size_t user_len, char *buf,
                    size_t cap)
{
    size_t n = p->prefix_len + user_len + p->suffix_len;
    if (n >= cap || n > (size_t)INT32_MAX) return -1;
    memcpy(buf, p->prefix, p->prefix_len);
    memcpy(buf + p->prefix_len, user, user_len);
    memcpy(buf + p->prefix_len + user_len, p->suffix, p->suffix_len);
    buf[n] = '\0';
    return (int)n;
}

const char *mig_bad_name(int reason)
{
    static const char *const names[MIG_BAD_COUNT] = {
        [MIG_BAD_WRONG_TYPE] = "wrong_type",
        [MIG_BAD_NON_NUMERIC] = "non_numeric_score",
        [MIG_BAD_OUT_OF_RANGE] = "score_out_of_range",
        [MIG_BAD_EMPTY_MEMBER] = "empty_member",
        [MIG_BAD_LONG_MEMBER] = "long_member",
        [MIG_BAD_BINARY_MEMBER] = "binary_member",
        [MIG_BAD_KEY_MISMATCH] = "key_mismatch",
    };
    if (reason < 0 || reason >= MIG_BAD_COUNT) return "?";
    return names[reason];
}

enum mig_entry_class mig_classify(const struct mig_entry_rules *r, const char *member,
                                  size_t member_len, const char *score, size_t score_len,
                                  int64_t *ms, enum mig_bad *reason)
{
    if (member_len == 0) { *reason = MIG_BAD_EMPTY_MEMBER; return MIG_ENTRY_BAD; }
    if (member_len > r->max_id_bytes) { *reason = MIG_BAD_LONG_MEMBER; return MIG_ENTRY_BAD; }
    if (dd_text_check((const uint8_t *)member, member_len) != DD_TEXT_OK) {
        *reason = MIG_BAD_BINARY_MEMBER; /* dedupd would refuse the whole batch */
        return MIG_ENTRY_BAD;
    }

    char buf[64];
    if (score_len == 0 || score_len >= sizeof buf) {
        *reason = MIG_BAD_NON_NUMERIC;
        return MIG_ENTRY_BAD;
    }
    memcpy(buf, score, score_len);
    buf[score_len] = '\0';
    char *end;
    errno = 0;
    double v = strtod(buf, &end);
    if (end == buf || *end != '\0' || isnan(v)) {
        *reason = MIG_BAD_NON_NUMERIC;
        return MIG_ENTRY_BAD;
    }
    double t = v * (double)r->score_scale;
    double latest = (double)r->now_ms + (double)r->max_future_ms;
    /* ERANGE overflow gives inf, which fails here as well. */
    if (!isfinite(t) || t < 1.0 || t > latest) {
        *reason = MIG_BAD_OUT_OF_RANGE;
        return MIG_ENTRY_BAD;
    }
    *ms = (int64_t)llround(t);
    if (r->check_expiry && *ms < r->oldest_ms) return MIG_ENTRY_EXPIRED;
    return MIG_ENTRY_OK;
}

void mig_stats_add(struct mig_stats *to, const struct mig_stats *from)
{
    to->keys += from->keys;
    to->users += from->users;
    to->entries += from->entries;
    to->expired += from->expired;
    to->deliveries += from->deliveries;
    to->failed_users += from->failed_users;
    for (int i = 0; i < MIG_BAD_COUNT; i++) to->bad[i] += from->bad[i];
}

uint64_t mig_stats_bad_total(const struct mig_stats *s)
{
    uint64_t t = 0;
    for (int i = 0; i < MIG_BAD_COUNT; i++) t += s->bad[i];
    return t;
}
