/* SPDX-License-Identifier: Apache-2.0
 *
 * test_vectors.c - the shared test vectors (tests/vectors/item_hash.tsv and
 * partition.tsv, written by tests/tools/ddvectors) recomputed row by row
 * with src/'s dd_hash and dd_partition_of: a change to either function, or
 * a file edited by hand, fails here, before the C++ and Java libraries that
 * read the same files disagree with the server. Also that the files hold
 * what the clients rely on: every partitioner, the counts 1, 8, 12 and 64,
 * the empty id, a non-ASCII id and a long one.
 */
#include "testlib.h"

#include "dd.h"
#include "partition.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static FILE *open_vectors(const char *name)
{
    const char *root = getenv("DD_SOURCE_ROOT");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/vectors/%s", root ? root : ".", name);
    FILE *f = fopen(path, "r");
    if (!f) fprintf(stderr, "cannot open %s\n", path);
    REQUIRE(f);
    return f;
}

/* HEX (LEN digits) into OUT (room for LEN / 2); -1 if not lowercase hex. */
static long unhex(const char *hex, size_t len, char *out)
{
    if (len % 2) return -1;
    for (size_t i = 0; i < len; i += 2) {
        unsigned v = 0;
        for (int k = 0; k < 2; k++) {
            char c = hex[i + (size_t)k];
            unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                         : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                                                : 16;
            if (d == 16) return -1;
            v = v << 4 | d;
        }
        out[i / 2] = (char)v;
    }
    return (long)(len / 2);
}

/* Split LINE (its '\n' removed) at TABs into at most MAX fields. */
static size_t split(char *line, char **field, size_t max)
{
    size_t n = 0;
    field[n++] = line;
    for (char *p = line; *p && n < max + 1; p++)
        if (*p == '\t') {
            *p = '\0';
            if (n < max) field[n] = p + 1;
            n++;
        }
    return n;
}

static int non_ascii(const char *p, long len)
{
    for (long i = 0; i < len; i++)
        if ((unsigned char)p[i] >= 0x80) return 1;
    return 0;
}

static void test_item_hash(void)
{
    FILE *f = open_vectors("item_hash.tsv");
    char *line = NULL, key[4096];
    size_t cap = 0, rows = 0, comments = 0, bad = 0;
    int empty = 0, multibyte = 0, longest = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) >= 0) {
        if (len && line[len - 1] == '\n') line[--len] = '\0';
        if (line[0] == '#') {
            comments++;
            continue;
        }
        char *fl[2];
        REQUIRE(split(line, fl, 2) == 2);
        long kl = strlen(fl[0]) / 2 <= sizeof key ? unhex(fl[0], strlen(fl[0]), key) : -1;
        REQUIRE(kl >= 0 && strlen(fl[1]) == 16);
        char *end;
        uint64_t want = strtoull(fl[1], &end, 16);
        REQUIRE(*end == '\0');
        if (dd_hash(key, (size_t)kl) != want) {
            if (bad++ < 5) fprintf(stderr, "item_hash.tsv row %zu: %s\n", rows + 1, fl[1]);
        }
        rows++;
        empty |= kl == 0;
        multibyte |= non_ascii(key, kl);
        if (kl > longest) longest = (int)kl;
    }
    free(line);
    fclose(f);
    CHECK_EQ_INT(bad, 0);
    CHECK(comments >= 5);
    CHECK(rows >= 50);
    CHECK(empty && multibyte && longest >= 1000);
    /* The seed proto/dedup.proto and the files' header name. */
    CHECK(DD_HASH_SEED == UINT64_C(0x6464757064683031));
}

static void test_partition(void)
{
    FILE *f = open_vectors("partition.tsv");
    char *line = NULL, key[4096];
    size_t cap = 0, rows = 0, bad = 0;
    unsigned seen_p = 0;
    int counts = 0, empty = 0, multibyte = 0, longest = 0, random = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) >= 0) {
        if (len && line[len - 1] == '\n') line[--len] = '\0';
        if (line[0] == '#') continue;
        char *fl[4];
        REQUIRE(split(line, fl, 4) == 4);
        enum dd_partitioner p;
        REQUIRE(dd_partitioner_parse(fl[0], &p) == DD_OK);
        char *end;
        long n = strtol(fl[1], &end, 10);
        REQUIRE(*end == '\0' && n >= 1 && n <= INT32_MAX);
        long kl = strlen(fl[2]) / 2 <= sizeof key ? unhex(fl[2], strlen(fl[2]), key) : -1;
        REQUIRE(kl >= 0);
        long want = strtol(fl[3], &end, 10);
        REQUIRE(*end == '\0');
        if (dd_partition_of(p, key, (size_t)kl, (int32_t)n) != want) {
            if (bad++ < 5) fprintf(stderr, "partition.tsv row %zu: %s %ld\n", rows + 1, fl[0], n);
        }
        rows++;
        seen_p |= 1u << p;
        counts |= n == 1 ? 1 : n == 8 ? 2 : n == 12 ? 4 : n == 64 ? 8 : 0;
        empty |= kl == 0;
        multibyte |= non_ascii(key, kl);
        random |= want == -1;
        if (kl > longest) longest = (int)kl;
    }
    free(line);
    fclose(f);
    CHECK_EQ_INT(bad, 0);
    CHECK(rows >= 1000);
    CHECK_EQ_INT(seen_p, (1u << DD_PARTITIONER_COUNT) - 1);
    CHECK_EQ_INT(counts, 15);
    CHECK(empty && multibyte && random && longest >= 1000);
}

int main(void)
{
    test_item_hash();
    test_partition();
    TEST_MAIN_END();
}
