/* SPDX-License-Identifier: Apache-2.0
 *
 * partition.h - the partition a Kafka producer built on librdkafka puts a
 * keyed message in, computed as its built-in partitioners do (the
 * topic.partitioner setting). A node of a cluster owns the partitions of
 * its shard; to route a call for user U it must find the partition the
 * play producers chose for key U, bit for bit. Pure code: no I/O, no
 * allocation, no state; every function can be called from any thread.
 *
 * THE PARTITIONERS
 *
 * Each hashes the key's bytes and takes the hash modulo the partition
 * count, both as unsigned 32-bit numbers:
 *   murmur2   MurmurHash2 as the Java client's Utils.murmur2 (seed
 *             0x9747b28c), its top bit cleared (Java's toPositive), so
 *             a key goes where the Java client's default partitioner puts it.
 *   consistent  CRC-32 (zlib's, IEEE polynomial), the whole 32 bits: not
 *             masked, so above 2^31 it is not the same as a masked hash
 *             unless the count is a power of two.
 *   fnv1a     FNV-1a 32-bit as Sarama's default hash partitioner, read as
 *             a signed 32-bit number and made non-negative by negation;
 *             -2^31 has no positive, so it stays 2^31 (librdkafka's
 *             int32 negation wraps there) and is taken modulo the count
 *             as that unsigned number.
 *
 * KEYS WITHOUT BYTES
 *
 * librdkafka tells a message without a key (KEY NULL) from one with an
 * empty key (LEN 0, KEY not NULL), and each partitioner treats them its
 * own way. "random" is where librdkafka puts the message without looking
 * at the key (a sticky partition while sticky.partitioning.linger.ms > 0,
 * the default, else a random one): no one can predict it, so
 * dd_partition_of returns -1 there.
 *
 *   partitioner        NULL key              empty key
 *   murmur2_random     random (-1)           murmur2 of no bytes
 *   consistent_random  random (-1)           random (-1)
 *   murmur2            murmur2 of no bytes   murmur2 of no bytes
 *   consistent         partition 0           partition 0 (CRC-32 of nothing is 0)
 *   fnv1a              fnv1a of no bytes     fnv1a of no bytes
 *   fnv1a_random       random (-1)           fnv1a of no bytes
 *
 * So the plain partitioners send every message without a key to one and
 * the same partition, and only consistent_random tests the length rather
 * than the pointer. A key with bytes goes where the plain partitioner of
 * the same hash sends it, whichever variant.
 */
#ifndef DD_PARTITION_H
#define DD_PARTITION_H

#include <stddef.h>
#include <stdint.h>

/* librdkafka's built-in partitioners but "random" (which ignores the key,
 * so nothing can be routed by it), under librdkafka's names. The first is
 * dedupd's default; librdkafka's own default is consistent_random. */
enum dd_partitioner {
    DD_PARTITIONER_MURMUR2_RANDOM =
        0, /* "murmur2_random": the Java client's default; default here */
    DD_PARTITIONER_CONSISTENT_RANDOM, /* "consistent_random": librdkafka's default (CRC32) */
    DD_PARTITIONER_MURMUR2,           /* "murmur2" */
    DD_PARTITIONER_CONSISTENT,        /* "consistent" */
    DD_PARTITIONER_FNV1A,             /* "fnv1a" */
    DD_PARTITIONER_FNV1A_RANDOM,      /* "fnv1a_random" */
    DD_PARTITIONER_COUNT
};

/* librdkafka's name of P ("murmur2_random", ...); P must be valid.
 * Static; NULL outside the enum. */
const char *dd_partitioner_name(enum dd_partitioner p);

/* NAME -> *out; returns 0 or DD_ERR_INVALID (unknown name, nothing written).
 * Names are matched exactly, as librdkafka matches topic.partitioner:
 * "Murmur2" and "random" are unknown. */
int dd_partitioner_parse(const char *name, enum dd_partitioner *out);

/* NULL-terminated list of the names, in enum order (for config.c's enum rows). */
extern const char *const dd_partitioner_names[];

/* The partition (0..partitions-1) librdkafka's partitioner P gives a message
 * with key KEY[0..LEN) on a topic of PARTITIONS partitions (> 0).
 * KEY NULL is a message without a key; LEN is then ignored, as librdkafka
 * ignores it. For a non-empty key the _random variants equal their plain
 * ones; for a NULL or empty key see the table above: -1 where librdkafka
 * picks the partition at random (it cannot be predicted). -1 also when P
 * is not in the enum or PARTITIONS < 1. */
int32_t dd_partition_of(enum dd_partitioner p, const void *key, size_t len, int32_t partitions);

#endif
