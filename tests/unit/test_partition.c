/* SPDX-License-Identifier: Apache-2.0
 *
 * test_partition.c - partition.h: each hash on the published vectors
 * (Kafka's UtilsTest.testMurmur2 and librdkafka's rdmurmur2.c unittest for
 * murmur2, librdkafka's rdfnv1a.c unittest for FNV-1a, the CRC-32 check
 * value), the signedness of each modulo, the keys without bytes per
 * partitioner, the names, and the partitions librdkafka's own exported
 * partitioner functions give, on random keys and counts.
 *
 * A hash is seen through dd_partition_of with 2^31 - 1 partitions: a
 * partition is then the hash modulo 2^31 - 1, which a wrong hash matches
 * about once in 2^31.
 */
#include "testlib.h"

#include "dd.h"
#include "partition.h"

#include <librdkafka/rdkafka.h>
#include <stdint.h>
#include <string.h>

#define BIG INT32_MAX

/* The partition of hash H among BIG partitions. */
static int32_t big(uint32_t h)
{
    return (int32_t)(h % (uint32_t)BIG);
}

static int32_t of_str(enum dd_partitioner p, const char *key, int32_t partitions)
{
    return dd_partition_of(p, key, key ? strlen(key) : 0, partitions);
}

/* Each hash's two variants, which agree on a key with bytes. */
static const enum dd_partitioner murmur2s[2] = {DD_PARTITIONER_MURMUR2_RANDOM,
                                                DD_PARTITIONER_MURMUR2};
static const enum dd_partitioner crc32s[2] = {DD_PARTITIONER_CONSISTENT_RANDOM,
                                              DD_PARTITIONER_CONSISTENT};
static const enum dd_partitioner fnv1as[2] = {DD_PARTITIONER_FNV1A_RANDOM,
                                              DD_PARTITIONER_FNV1A};

/* Both variants VS give KEY the partition of HASH (the number the
 * partitioner takes modulo the count) among BIG. */
static void check_hash(const enum dd_partitioner vs[2], const char *key, uint32_t hash)
{
    for (int j = 0; j < 2; j++)
        CHECK_MSG(of_str(vs[j], key, BIG) == big(hash), "%s '%s'", dd_partitioner_name(vs[j]),
                  key);
}

/* The keys of librdkafka's rdmurmur2.c and rdfnv1a.c unittests: "1234"
 * and "PreAmble..." also at byte offsets 1 to 3, so words start
 * unaligned, and the empty key. */
static const char four[] = "1234", pre[] = "PreAmbleWillBeRemoved,ThePrePartThatIs";
static const char *const rd_keys[] = {"kafka", "giberish123456789", four, four + 1, four + 2,
                                      four + 3, pre, pre + 1, pre + 2, pre + 3, ""};

/* Kafka's UtilsTest.testMurmur2 (Java ints) and librdkafka's rdmurmur2.c
 * unittest. The partitioner clears the top bit. */
static void test_murmur2_vectors(void)
{
    static const struct {
        const char *key;
        int32_t java;
    } v[] = {
        {"21", -973932308},
        {"foobar", -790332482},
        {"a-little-bit-long-string", -985981536},
        {"a-little-bit-longer-string", -1486304829},
        {"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
        {"abc", 479470107},
    };
    for (size_t i = 0; i < DD_ARRAY_LEN(v); i++)
        check_hash(murmur2s, v[i].key, (uint32_t)v[i].java & 0x7fffffff);

    static const uint32_t rd[DD_ARRAY_LEN(rd_keys)] = {
        0xd067cf64, 0x8f552b0c, 0x9fc97b14, 0xe7c009ca, 0x873930da, 0x5a4b5ca1,
        0x78424f1c, 0x4a62b377, 0xe0e4e09e, 0x62b8b43f, 0x106e08d9};
    for (size_t i = 0; i < DD_ARRAY_LEN(rd_keys); i++)
        check_hash(murmur2s, rd_keys[i], rd[i] & 0x7fffffff);
    /* Java's murmur2("foobar") is negative: only the masked hash is taken. */
    CHECK_EQ_INT(of_str(DD_PARTITIONER_MURMUR2, "foobar", 50), 16);
}

/* librdkafka's rdfnv1a.c unittest: Go's hash/fnv, already made
 * non-negative as rd_fnv1a returns it. */
static void test_fnv1a_vectors(void)
{
    static const uint32_t go[DD_ARRAY_LEN(rd_keys)] = {
        0x0d33c4e1, 0x77a58295, 0x023bdd03, 0x2dea3cd2, 0x740fa83e, 0x310ca263,
        0x65cbd69c, 0x6e49c79a, 0x69eed356, 0x6abcc023, 0x7ee3623b};
    for (size_t i = 0; i < DD_ARRAY_LEN(rd_keys); i++) check_hash(fnv1as, rd_keys[i], go[i]);
}

/* The CRC-32 check value, and zlib.crc32 of the fox. */
static void test_crc32_vectors(void)
{
    check_hash(crc32s, "123456789", 0xcbf43926);
    check_hash(crc32s, "The quick brown fox jumps over the lazy dog", 0x414fa339);
}

/* Each modulo is of an unsigned 32-bit number. CRC-32 is not masked:
 * 0xcbf43926 mod 7 is 5, where the masked hash would give 3. FNV-1a's
 * -2^31 (key "Y7Tdo2") stays 2^31 (mod 3 = 2, mod 5 = 3, mod 7 = 2); a
 * signed remainder would be negative. */
static void test_signedness(void)
{
    CHECK_EQ_INT(of_str(DD_PARTITIONER_CONSISTENT, "123456789", 7), 5);
    CHECK_EQ_INT(of_str(DD_PARTITIONER_FNV1A, "Y7Tdo2", 3), 2);
    CHECK_EQ_INT(of_str(DD_PARTITIONER_FNV1A, "Y7Tdo2", 5), 3);
    CHECK_EQ_INT(of_str(DD_PARTITIONER_FNV1A_RANDOM, "Y7Tdo2", 7), 2);
    CHECK_EQ_INT(of_str(DD_PARTITIONER_FNV1A, "Y7Tdo2", BIG), big(0x80000000));
}

/* partition.h's table of NULL and empty keys. */
static void test_no_bytes(void)
{
    const int32_t n = 7;
    const int32_t mm = (int32_t)(0x106e08d9 % 7), fnv = (int32_t)(0x7ee3623b % 7);
    static const char empty[1] = "";
    const struct {
        enum dd_partitioner p;
        int32_t null_key, empty_key;
    } t[] = {
        {DD_PARTITIONER_MURMUR2_RANDOM, -1, mm},
        {DD_PARTITIONER_CONSISTENT_RANDOM, -1, -1},
        {DD_PARTITIONER_MURMUR2, mm, mm},
        {DD_PARTITIONER_CONSISTENT, 0, 0},
        {DD_PARTITIONER_FNV1A, fnv, fnv},
        {DD_PARTITIONER_FNV1A_RANDOM, -1, fnv},
    };
    for (size_t i = 0; i < DD_ARRAY_LEN(t); i++) {
        const char *name = dd_partitioner_name(t[i].p);
        CHECK_MSG(dd_partition_of(t[i].p, NULL, 0, n) == t[i].null_key, "%s NULL", name);
        /* A NULL key's length is ignored, as librdkafka ignores it. */
        CHECK_MSG(dd_partition_of(t[i].p, NULL, 5, n) == t[i].null_key, "%s NULL/5", name);
        CHECK_MSG(dd_partition_of(t[i].p, empty, 0, n) == t[i].empty_key, "%s empty", name);
    }
}

static void test_bad_args(void)
{
    for (int p = 0; p < DD_PARTITIONER_COUNT; p++) {
        CHECK_EQ_INT(of_str(p, "u1", 0), -1);
        CHECK_EQ_INT(of_str(p, "u1", -8), -1);
        CHECK_EQ_INT(of_str(p, "u1", 1), 0);
    }
    CHECK_EQ_INT(of_str(DD_PARTITIONER_COUNT, "u1", 8), -1);
    CHECK_EQ_INT(of_str((enum dd_partitioner)-1, "u1", 8), -1);
}

static void test_names(void)
{
    size_t n = 0;
    while (dd_partitioner_names[n]) n++;
    CHECK_EQ_INT(n, DD_PARTITIONER_COUNT);
    CHECK_STR(dd_partitioner_name(DD_PARTITIONER_MURMUR2_RANDOM), "murmur2_random");
    CHECK_STR(dd_partitioner_name(DD_PARTITIONER_CONSISTENT_RANDOM), "consistent_random");
    CHECK_STR(dd_partitioner_name(DD_PARTITIONER_FNV1A), "fnv1a");
    CHECK(dd_partitioner_name(DD_PARTITIONER_COUNT) == NULL);
    for (int p = 0; p < DD_PARTITIONER_COUNT; p++) {
        enum dd_partitioner got = DD_PARTITIONER_COUNT;
        CHECK_STR(dd_partitioner_name(p), dd_partitioner_names[p]);
        CHECK_EQ_INT(dd_partitioner_parse(dd_partitioner_name(p), &got), DD_OK);
        CHECK_EQ_INT(got, p);
    }
    /* librdkafka matches exactly; "random" ignores the key, so no route. */
    const char *bad[] = {"", "random", "Murmur2", "murmur2 ", " fnv1a", "murmur", "crc32",
                         "consistent_random\n", "murmur2_random,"};
    for (size_t i = 0; i < DD_ARRAY_LEN(bad); i++) {
        enum dd_partitioner got = DD_PARTITIONER_FNV1A;
        CHECK_MSG(dd_partitioner_parse(bad[i], &got) == DD_ERR_INVALID, "'%s'", bad[i]);
        CHECK_MSG(got == DD_PARTITIONER_FNV1A, "'%s' wrote *out", bad[i]);
    }
}

/* librdkafka's partitioner for P, as the library it was built with
 * exports it. The _random ones touch the topic handle (NULL here) only
 * where they pick at random, which the caller keeps away from. */
static int32_t oracle(enum dd_partitioner p, const void *key, size_t len, int32_t n)
{
    typedef int32_t (*part_fn)(const rd_kafka_topic_t *, const void *, size_t, int32_t, void *,
                               void *);
    static const part_fn fn[DD_PARTITIONER_COUNT] = {
        [DD_PARTITIONER_MURMUR2_RANDOM] = rd_kafka_msg_partitioner_murmur2_random,
        [DD_PARTITIONER_CONSISTENT_RANDOM] = rd_kafka_msg_partitioner_consistent_random,
        [DD_PARTITIONER_MURMUR2] = rd_kafka_msg_partitioner_murmur2,
        [DD_PARTITIONER_CONSISTENT] = rd_kafka_msg_partitioner_consistent,
        [DD_PARTITIONER_FNV1A] = rd_kafka_msg_partitioner_fnv1a,
        [DD_PARTITIONER_FNV1A_RANDOM] = rd_kafka_msg_partitioner_fnv1a_random,
    };
    return fn[p](NULL, key, len, n, NULL, NULL);
}

/* Random keys of 0 to 80 bytes of any value at random offsets, random
 * counts up to 300 and a few large ones: every predictable case equals
 * librdkafka's answer. */
static void test_librdkafka(void)
{
    static const int32_t counts[] = {1, 2, 3, 7, 8, 12, 64, 1000, 65537, INT32_MAX - 1, BIG};
    unsigned char buf[96];
    uint64_t rng = 42;
    int compared = 0;
    for (int i = 0; i < 200000; i++) {
        size_t len = tl_splitmix64(&rng) % 81, off = tl_splitmix64(&rng) % 8;
        for (size_t j = 0; j < len; j++) buf[off + j] = (unsigned char)tl_splitmix64(&rng);
        int32_t n = i % 4 ? (int32_t)(tl_splitmix64(&rng) % 300) + 1
                          : counts[(size_t)i / 4 % DD_ARRAY_LEN(counts)];
        const unsigned char *key = i % 97 == 0 ? NULL : buf + off;
        for (int p = 0; p < DD_PARTITIONER_COUNT; p++) {
            int32_t got = dd_partition_of(p, key, key ? len : 0, n);
            if (got == -1) continue; /* random in librdkafka: test_no_bytes */
            CHECK_MSG(got >= 0 && got < n, "%s len %zu n %d: %d", dd_partitioner_name(p), len,
                      (int)n, (int)got);
            int32_t want = oracle(p, key, key ? len : 0, n);
            if (got != want) {
                CHECK_MSG(got == want, "%s len %zu n %d: %d, librdkafka %d",
                          dd_partitioner_name(p), len, (int)n, (int)got, (int)want);
                return;
            }
            compared++;
        }
    }
    CHECK(compared > 1000000);
}

int main(void)
{
    test_murmur2_vectors();
    test_fnv1a_vectors();
    test_crc32_vectors();
    test_signedness();
    test_no_bytes();
    test_bad_args();
    test_names();
    test_librdkafka();
    TEST_MAIN_END();
}
