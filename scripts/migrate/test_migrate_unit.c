/* SPDX-License-Identifier: Apache-2.0
 *
 * test_migrate_unit.c - dedupd-migrate's pure parts: key patterns and their
 * SCAN MATCH globs, the classification of legacy entries (every bad-data
 * reason, expiry, score units), and the checkpoint file round trip,
 * including a torn or foreign file.
 */
#include "migrate.h"

#include "dd.h"
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_pattern(void)
{
    struct mig_pattern p;
    char err[256];
    REQUIRE(mig_pattern_parse(&p, "play:{user}", err, sizeof err) == DD_OK);
    CHECK_STR(p.match, "play:*");
    const char *u;
    size_t n;
    CHECK(mig_pattern_user(&p, "play:42", 7, 256, &u, &n) == 0 && n == 2 && memcmp(u, "42", 2) == 0);
    CHECK(mig_pattern_user(&p, "play:", 5, 256, &u, &n) == -1);       /* empty user */
    CHECK(mig_pattern_user(&p, "play:\xff", 6, 256, &u, &n) == -1);   /* not UTF-8 */
    CHECK(mig_pattern_user(&p, "play:a\0b", 8, 256, &u, &n) == -1);   /* a NUL byte */
    CHECK(mig_pattern_user(&p, "plays:1", 7, 256, &u, &n) == -1);     /* other prefix */
    CHECK(mig_pattern_user(&p, "play:abc", 8, 2, &u, &n) == -1);      /* user too long */
    CHECK(mig_pattern_user(&p, "play:a\0b", 8, 256, &u, &n) == -1);   /* NUL in user */
    char key[32];
    CHECK_EQ_INT(mig_pattern_key(&p, "xyz", 3, key, sizeof key), 8);
    CHECK_STR(key, "play:xyz");
    CHECK_EQ_INT(mig_pattern_key(&p, "xyz", 3, key, 8), -1);          /* no room for NUL */
    mig_pattern_free(&p);

    /* Glob metacharacters around the placeholder are escaped; a suffix works. */
    REQUIRE(mig_pattern_parse(&p, "h[1]*?\\{user}:dlv", err, sizeof err) == DD_OK);
    CHECK_STR(p.match, "h\\[1\\]\\*\\?\\\\*:dlv");
    CHECK(mig_pattern_user(&p, "h[1]*?\\u9:dlv", 13, 256, &u, &n) == 0 && n == 2);
    CHECK(mig_pattern_user(&p, "h[1]*?\\u9:dl", 12, 256, &u, &n) == -1);
    mig_pattern_free(&p);

    CHECK(mig_pattern_parse(&p, "play:", err, sizeof err) == DD_ERR_INVALID);
    CHECK(strstr(err, "{user}") != NULL);
    CHECK(mig_pattern_parse(&p, "{user}:{user}", err, sizeof err) == DD_ERR_INVALID);
    CHECK(mig_pattern_parse(&p, "a\n{user}", err, sizeof err) == DD_ERR_INVALID);
    mig_pattern_free(NULL);
}

static enum mig_entry_class classify(const struct mig_entry_rules *r, const char *m,
                                     const char *score, int64_t *ms, enum mig_bad *why)
{
    return mig_classify(r, m, strlen(m), score, strlen(score), ms, why);
}

static void test_classify(void)
{
    const int64_t now = INT64_C(1700000000000);
    struct mig_entry_rules r = {
        .score_scale = 1, .now_ms = now, .oldest_ms = now - 90 * DD_MS_PER_DAY,
        .max_future_ms = 3600000, .max_id_bytes = 8, .check_expiry = true,
    };
    int64_t ms = 0;
    enum mig_bad why = MIG_BAD_COUNT;
    CHECK(classify(&r, "v1", "1699999999000", &ms, &why) == MIG_ENTRY_OK);
    CHECK_EQ_INT(ms, INT64_C(1699999999000));
    CHECK(classify(&r, "v1", "1.699999999e12", &ms, &why) == MIG_ENTRY_OK);
    CHECK_EQ_INT(ms, INT64_C(1699999999000));
    /* Expired: older than the retention, but a good entry otherwise. */
    CHECK(classify(&r, "v1", "1690000000000", &ms, &why) == MIG_ENTRY_EXPIRED);
    r.check_expiry = false;
    CHECK(classify(&r, "v1", "1690000000000", &ms, &why) == MIG_ENTRY_OK);
    r.check_expiry = true;

    struct { const char *m, *s; enum mig_bad why; } bad[] = {
        {"", "1699999999000", MIG_BAD_EMPTY_MEMBER},
        {"123456789", "1699999999000", MIG_BAD_LONG_MEMBER},
        {"v", "abc", MIG_BAD_NON_NUMERIC},
        {"v", "", MIG_BAD_NON_NUMERIC},
        {"v", "12x", MIG_BAD_NON_NUMERIC},
        {"v", "nan", MIG_BAD_NON_NUMERIC},
        {"v", "inf", MIG_BAD_OUT_OF_RANGE},
        {"v", "-inf", MIG_BAD_OUT_OF_RANGE},
        {"v", "0", MIG_BAD_OUT_OF_RANGE},
        {"v", "-5", MIG_BAD_OUT_OF_RANGE},
        {"v", "1e300", MIG_BAD_OUT_OF_RANGE},
        {"v", "1700003600001", MIG_BAD_OUT_OF_RANGE}, /* past now + max_future */
    };
    for (size_t i = 0; i < DD_ARRAY_LEN(bad); i++) {
        why = MIG_BAD_COUNT;
        CHECK_MSG(classify(&r, bad[i].m, bad[i].s, &ms, &why) == MIG_ENTRY_BAD && why == bad[i].why,
                  "case %zu (%s, %s): reason %s", i, bad[i].m, bad[i].s, mig_bad_name(why));
    }
    CHECK(classify(&r, "v", "1700003600000", &ms, &why) == MIG_ENTRY_OK); /* at the edge */
    CHECK(mig_classify(&r, "a\0b", 3, "1699999999000", 13, &ms, &why) == MIG_ENTRY_BAD &&
          why == MIG_BAD_BINARY_MEMBER);
    why = MIG_BAD_COUNT; /* not UTF-8: a lone continuation byte, a truncated sequence */
    CHECK(mig_classify(&r, "a\x80" "b", 3, "1699999999000", 13, &ms, &why) == MIG_ENTRY_BAD &&
          why == MIG_BAD_BINARY_MEMBER);
    why = MIG_BAD_COUNT;
    CHECK(mig_classify(&r, "v\xc3", 2, "1699999999000", 13, &ms, &why) == MIG_ENTRY_BAD &&
          why == MIG_BAD_BINARY_MEMBER);
    CHECK(mig_classify(&r, "caf\xc3\xa9", 5, "1699999999000", 13, &ms, &why) == MIG_ENTRY_OK);

    /* Seconds. */
    r.score_scale = 1000;
    CHECK(classify(&r, "v", "1699999999.5", &ms, &why) == MIG_ENTRY_OK);
    CHECK_EQ_INT(ms, INT64_C(1699999999500));
    CHECK(classify(&r, "v", "1699999999000", &ms, &why) == MIG_ENTRY_BAD &&
          why == MIG_BAD_OUT_OF_RANGE); /* ms scores read as seconds are far in the future */

    for (int i = 0; i < MIG_BAD_COUNT; i++) CHECK(strcmp(mig_bad_name(i), "?") != 0);
    CHECK_STR(mig_bad_name(MIG_BAD_COUNT), "?");
}

static void test_checkpoint(void)
{
    char dir[] = "/tmp/dd-mig-unit-XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/ckpt", dir);

    struct mig_checkpoint cp, back;
    memset(&cp, 0, sizeof cp);
    strcpy(cp.plays, "play:{user}");
    strcpy(cp.deliveries, "dlv:{user}");
    strcpy(cp.scene, "feed");
    cp.phase = 1;
    strcpy(cp.cursor, "18446744073709551615");
    cp.elapsed_ms = 12345;
    cp.stats.users = 20000;
    cp.stats.entries = 6000000;
    cp.stats.expired = 77;
    cp.stats.deliveries = 5;
    cp.stats.failed_users = 1;
    for (int i = 0; i < MIG_BAD_COUNT; i++) cp.stats.bad[i] = (uint64_t)(i + 1) * 10;

    CHECK(mig_checkpoint_read(path, &back, err, sizeof err) == DD_ERR_NOTFOUND);
    REQUIRE(mig_checkpoint_write(path, &cp, err, sizeof err) == DD_OK);
    REQUIRE(mig_checkpoint_read(path, &back, err, sizeof err) == DD_OK);
    CHECK_STR(back.plays, cp.plays);
    CHECK_STR(back.deliveries, cp.deliveries);
    CHECK_STR(back.scene, cp.scene);
    CHECK_STR(back.cursor, cp.cursor);
    CHECK_EQ_INT(back.phase, 1);
    CHECK(!back.done);
    CHECK_EQ_INT(back.elapsed_ms, 12345);
    CHECK(memcmp(&back.stats, &cp.stats, sizeof cp.stats) == 0);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0); /* renamed away */

    /* Overwrite: the new state wins. */
    cp.done = true;
    strcpy(cp.cursor, "0");
    REQUIRE(mig_checkpoint_write(path, &cp, err, sizeof err) == DD_OK);
    REQUIRE(mig_checkpoint_read(path, &back, err, sizeof err) == DD_OK);
    CHECK(back.done);
    CHECK_STR(back.cursor, "0");

    /* Not a checkpoint: refused, naming the line. */
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    fputs("# dedupd-migrate checkpoint\nversion=1\ncursor=12\nbogus=1\n", f);
    fclose(f);
    CHECK(mig_checkpoint_read(path, &back, err, sizeof err) == DD_ERR_CORRUPT);
    CHECK(strstr(err, ":4:") != NULL);
    f = fopen(path, "w");
    REQUIRE(f != NULL);
    fputs("# dedupd-migrate checkpoint\nversion=1\n", f); /* torn: no cursor */
    fclose(f);
    CHECK(mig_checkpoint_read(path, &back, err, sizeof err) == DD_ERR_CORRUPT);
    f = fopen(path, "w");
    REQUIRE(f != NULL);
    fputs("hello\n", f);
    fclose(f);
    CHECK(mig_checkpoint_read(path, &back, err, sizeof err) == DD_ERR_CORRUPT);

    /* An unwritable place fails cleanly. */
    CHECK(mig_checkpoint_write("/nonexistent-dir/x", &cp, err, sizeof err) == DD_ERR_IO);

    unlink(path);
    rmdir(dir);
}

int main(void)
{
    test_pattern();
    test_classify();
    test_checkpoint();
    TEST_MAIN_END();
}
