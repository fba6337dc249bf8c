// SPDX-License-Identifier: Apache-2.0
package io.dedupd.client;

import java.nio.charset.StandardCharsets;
import java.util.zip.CRC32;

/**
 * librdkafka's key partitioners, computed as the server computes them
 * (src/partition.h): the partition a play producer puts key USER in, so a
 * client finds the shard that owns the user. Names are librdkafka's,
 * matched exactly. Checked against tests/vectors/partition.tsv.
 */
public enum Partitioner {
    MURMUR2_RANDOM("murmur2_random"),
    CONSISTENT_RANDOM("consistent_random"),
    MURMUR2("murmur2"),
    CONSISTENT("consistent"),
    FNV1A("fnv1a"),
    FNV1A_RANDOM("fnv1a_random");

    private final String wireName;

    Partitioner(String wireName) {
        this.wireName = wireName;
    }

    /** librdkafka's name ("murmur2_random", ...). */
    public String wireName() {
        return wireName;
    }

    /** The partitioner named NAME exactly, or null when unknown ("random", "Murmur2"). */
    public static Partitioner parse(String name) {
        for (Partitioner p : values()) {
            if (p.wireName.equals(name)) {
                return p;
            }
        }
        return null;
    }

    /** The partition of a message keyed by the UTF-8 bytes of KEY; see {@link #partitionOf(byte[], int)}. */
    public int partitionOf(String key, int partitions) {
        return partitionOf(key == null ? null : key.getBytes(StandardCharsets.UTF_8), partitions);
    }

    /**
     * The partition (0..partitions-1) this partitioner gives a message with
     * key KEY (null: a message without a key) on a topic of PARTITIONS
     * partitions; -1 where librdkafka picks at random (a _random variant
     * with a null key, consistent_random with an empty one) or PARTITIONS &lt; 1.
     */
    public int partitionOf(byte[] key, int partitions) {
        if (partitions < 1) {
            return -1;
        }
        if ((this == MURMUR2_RANDOM || this == FNV1A_RANDOM) && key == null) {
            return -1;
        }
        byte[] k = key == null ? new byte[0] : key;
        if (this == CONSISTENT_RANDOM && k.length == 0) {
            return -1;
        }
        long h;
        switch (this) {
            case MURMUR2_RANDOM:
            case MURMUR2:
                h = murmur2(k) & 0x7fffffffL;
                break;
            case CONSISTENT_RANDOM:
            case CONSISTENT: {
                CRC32 c = new CRC32();
                c.update(k);
                h = c.getValue();
                break;
            }
            default:
                h = fnv1aAbs(k) & 0xffffffffL;
                break;
        }
        return (int) (h % partitions);
    }

    /** MurmurHash2 as the Java Kafka client's Utils.murmur2 (seed 0x9747b28c). */
    static int murmur2(byte[] p) {
        final int m = 0x5bd1e995;
        int len = p.length;
        int h = 0x9747b28c ^ len;
        int i = 0;
        for (; len - i >= 4; i += 4) {
            int k = (p[i] & 0xff) | (p[i + 1] & 0xff) << 8 | (p[i + 2] & 0xff) << 16
                | (p[i + 3] & 0xff) << 24;
            k *= m;
            k ^= k >>> 24;
            k *= m;
            h = h * m ^ k;
        }
        int left = len - i;
        if (left > 0) {
            if (left == 3) {
                h ^= (p[i + 2] & 0xff) << 16;
            }
            if (left >= 2) {
                h ^= (p[i + 1] & 0xff) << 8;
            }
            h ^= p[i] & 0xff;
            h *= m;
        }
        h ^= h >>> 13;
        h *= m;
        return h ^ h >>> 15;
    }

    /** FNV-1a 32-bit, read as int32 and negated when negative (-2^31 stays). */
    static int fnv1aAbs(byte[] p) {
        int h = 0x811c9dc5;
        for (byte b : p) {
            h = (h ^ (b & 0xff)) * 0x01000193;
        }
        return h < 0 ? -h : h;
    }
}
