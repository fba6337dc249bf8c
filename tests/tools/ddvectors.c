/* SPDX-License-Identifier: Apache-2.0
 *
 * ddvectors.c - writes the shared test vectors the client libraries
 * (clients/cpp, clients/java) and tests/unit/test_vectors.c check
 * themselves against, from src/'s own functions: dd_hash (dd.h) and
 * dd_partition_of (partition.h).
 *
 *   ddvectors item_hash  > tests/vectors/item_hash.tsv
 *   ddvectors partition  > tests/vectors/partition.tsv
 *
 * The keys are fixed here (a change to this list, or to src/'s functions,
 * changes the files, and test_vectors fails until they are written
 * again): the empty key, every length of XXH3's code paths (1-3, 4-8,
 * 9-16, 17-128, 129-240, longer), non-ASCII UTF-8, and ids of the shapes
 * the tests use. Exits 0, 1 on a write error, 2 on bad arguments.
 */
#include "dd.h"
#include "partition.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MAX_KEY 1000

/* Key number I (0 <= I < NKEYS) into BUF; returns its length. */
static size_t key_at(size_t i, char *buf)
{
    static const char *const fixed[] = {
        "",
        "a",
        "ab",
        "abc",
        "user",
        "user-1",
        "user-42",
        "video-1000013",
        "delivered-1000026",
        "0123456789abcdef",
        "u\xc3\xa9l\xc3\xa8ve",                  /* élève */
        "\xe7\x94\xa8\xe6\x88\xb7-7",            /* 用户-7 */
        "\xf0\x9f\x98\x80 emoji",                /* U+1F600 */
        "\xd0\xbf\xd0\xbe\xd0\xbb\xd1\x8c\xd0\xb7\xd0\xbe\xd0\xb2\xd0\xb0\xd1\x82\xd0\xb5\xd0\xbb\xd1\x8c",
        "tab\there",
        "space at end ",
    };
    enum { NFIXED = sizeof fixed / sizeof fixed[0] };
    if (i < NFIXED) {
        size_t l = strlen(fixed[i]);
        memcpy(buf, fixed[i], l);
        return l;
    }
    i -= NFIXED;
    /* Lengths across XXH3's paths and past them: printable, varied. */
    static const size_t lens[] = {5, 8, 9, 15, 17, 31, 64, 127, 128, 129, 200, 240, 241, 255,
                                  256, 300, 999, MAX_KEY};
    enum { NLENS = sizeof lens / sizeof lens[0] };
    if (i < NLENS) {
        for (size_t j = 0; j < lens[i]; j++) buf[j] = (char)('!' + (j * 7 + lens[i]) % 94);
        return lens[i];
    }
    i -= NLENS;
    /* Ids as the services make them. */
    return (size_t)snprintf(buf, MAX_KEY, "u%zu-%08" PRIx64, i, dd_hash(&i, sizeof i) >> 32);
}

#define NKEYS (16 + 18 + 40)

static void put_hex(const char *p, size_t len)
{
    for (size_t j = 0; j < len; j++) printf("%02x", (unsigned)(unsigned char)p[j]);
}

static int item_hash(void)
{
    printf("# dedupd test vectors: item id -> item hash (tests/tools/ddvectors.c writes this\n"
           "# file from src/dd.c's dd_hash; tests/unit/test_vectors.c checks every row).\n"
           "# The item hash is XXH3-64 with seed 0x6464757064683031 over the id's bytes:\n"
           "# FilterRequest.candidate_hashes carries it (proto/dedup.proto).\n"
           "# Lines starting with '#' are comments. Each other line has two fields\n"
           "# separated by one TAB:\n"
           "#   ID_HEX    the id's bytes (UTF-8 as sent), two lowercase hex digits per\n"
           "#             byte; empty for the empty id\n"
           "#   HASH      the hash, 16 lowercase hex digits, most significant first\n"
           "#             (as an unsigned 64-bit number; on the wire it is fixed64)\n");
    char buf[MAX_KEY + 1];
    for (size_t i = 0; i < NKEYS; i++) {
        size_t l = key_at(i, buf);
        put_hex(buf, l);
        printf("\t%016" PRIx64 "\n", dd_hash(buf, l));
    }
    return 0;
}

static int partition(void)
{
    static const int32_t counts[] = {1, 3, 8, 12, 64};
    printf("# dedupd test vectors: user id -> partition of the plays topic, as the\n"
           "# producers' partitioner puts a message keyed by the user id (tests/tools/\n"
           "# ddvectors.c writes this file from src/partition.c's dd_partition_of;\n"
           "# tests/unit/test_vectors.c checks every row). A client routing by\n"
           "# ClusterMap computes partition(user_id) with the map's partitioner and\n"
           "# partition_count, and the owner is shard partition mod len(shards).\n"
           "# Lines starting with '#' are comments. Each other line has four fields\n"
           "# separated by one TAB:\n"
           "#   PARTITIONER  librdkafka's name (ClusterMapResponse.partitioner)\n"
           "#   COUNT        partitions of the topic, decimal\n"
           "#   KEY_HEX      the user id's bytes, two lowercase hex digits per byte;\n"
           "#                empty for the empty id (a key of no bytes, not a missing key)\n"
           "#   PARTITION    decimal, 0 to COUNT-1; -1 where librdkafka picks a random\n"
           "#                partition (the _random partitioners on some empty keys):\n"
           "#                such a user cannot be routed (dedupd refuses empty user ids)\n");
    char buf[MAX_KEY + 1];
    for (int p = 0; p < DD_PARTITIONER_COUNT; p++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
            for (size_t i = 0; i < NKEYS; i++) {
                size_t l = key_at(i, buf);
                /* The partitioners hash 4 bytes at a time: one long key will do. */
                if (l > 64 && l < MAX_KEY) continue;
                printf("%s\t%" PRId32 "\t", dd_partitioner_name((enum dd_partitioner)p), counts[c]);
                put_hex(buf, l);
                printf("\t%" PRId32 "\n",
                       dd_partition_of((enum dd_partitioner)p, buf, l, counts[c]));
            }
    return 0;
}

int main(int argc, char **argv)
{
    int rc;
    if (argc == 2 && strcmp(argv[1], "item_hash") == 0)
        rc = item_hash();
    else if (argc == 2 && strcmp(argv[1], "partition") == 0)
        rc = partition();
    else {
        fprintf(stderr, "usage: ddvectors item_hash|partition > FILE\n");
        return 2;
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        perror("ddvectors: writing stdout");
        return 1;
    }
    return rc;
}
