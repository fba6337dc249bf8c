// SPDX-License-Identifier: Apache-2.0
package io.dedupd.client;

/**
 * XXH3-64 (xxHash 0.8, seeded), the server's item hash: {@link #itemHash}
 * is what dedupd computes for an item id (src/dd.h, dd_hash), so a client
 * can send FilterRequest.candidate_hashes instead of the ids. Checked
 * against tests/vectors/item_hash.tsv. Pure code, no state, any thread.
 */
public final class Xxh3 {
    /** The server's item-hash seed, "ddupdh01" (proto/dedup.proto, FilterRequest field 7). */
    public static final long ITEM_SEED = 0x6464757064683031L;

    private static final long P32_1 = 0x9E3779B1L;
    private static final long P32_2 = 0x85EBCA77L;
    private static final long P32_3 = 0xC2B2AE3DL;
    private static final long P64_1 = 0x9E3779B185EBCA87L;
    private static final long P64_2 = 0xC2B2AE3D27D4EB4FL;
    private static final long P64_3 = 0x165667B19E3779F9L;
    private static final long P64_4 = 0x85EBCA77C2B2AE63L;
    private static final long P64_5 = 0x27D4EB2F165667C5L;
    private static final long PRIME_MX1 = 0x165667919E3779F9L;
    private static final long PRIME_MX2 = 0x9FB21C651E98DF25L;

    private static final byte[] SECRET = bytes(
        0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
        0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
        0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
        0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
        0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
        0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
        0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
        0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
        0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
        0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
        0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
        0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e);
    private static final int SECRET_SIZE = 192;
    private static final int STRIPE = 64;

    /** The secret the seed ITEM_SEED derives, made once (inputs over 240 bytes use it). */
    private static final byte[] ITEM_SECRET = customSecret(ITEM_SEED);

    private Xxh3() {}

    private static byte[] bytes(int... v) {
        byte[] b = new byte[v.length];
        for (int i = 0; i < v.length; i++) {
            b[i] = (byte) v[i];
        }
        return b;
    }

    /** The server's item hash of ID: XXH3-64 of its UTF-8 bytes with ITEM_SEED. */
    public static long itemHash(String id) {
        return hash64(id.getBytes(java.nio.charset.StandardCharsets.UTF_8), ITEM_SEED);
    }

    /** XXH3-64 of all of DATA with SEED. */
    public static long hash64(byte[] data, long seed) {
        return hash64(data, 0, data.length, seed);
    }

    /** XXH3-64 of DATA[off, off+len) with SEED. */
    public static long hash64(byte[] in, int off, int len, long seed) {
        if (off < 0 || len < 0 || off > in.length - len) {
            throw new IndexOutOfBoundsException("range " + off + "+" + len + " of " + in.length);
        }
        byte[] s = SECRET;
        if (len <= 16) {
            if (len > 8) {
                long bitflip1 = (r64(s, 24) ^ r64(s, 32)) + seed;
                long bitflip2 = (r64(s, 40) ^ r64(s, 48)) - seed;
                long lo = r64(in, off) ^ bitflip1;
                long hi = r64(in, off + len - 8) ^ bitflip2;
                long acc = len + Long.reverseBytes(lo) + hi + mulFold(lo, hi);
                return avalanche(acc);
            }
            if (len >= 4) {
                seed ^= (long) Integer.reverseBytes((int) seed) << 32;
                long in1 = r32(in, off);
                long in2 = r32(in, off + len - 4);
                long bitflip = (r64(s, 8) ^ r64(s, 16)) - seed;
                long keyed = (in2 + (in1 << 32)) ^ bitflip;
                return rrmxmx(keyed, len);
            }
            if (len > 0) {
                int c1 = in[off] & 0xff;
                int c2 = in[off + (len >> 1)] & 0xff;
                int c3 = in[off + len - 1] & 0xff;
                long combined = ((c1 << 16) | (c2 << 24) | c3 | (len << 8)) & 0xffffffffL;
                long bitflip = ((r32(s, 0) ^ r32(s, 4)) & 0xffffffffL) + seed;
                return xxh64Avalanche(combined ^ bitflip);
            }
            return xxh64Avalanche(seed ^ (r64(s, 56) ^ r64(s, 64)));
        }
        if (len <= 128) {
            long acc = len * P64_1;
            if (len > 32) {
                if (len > 64) {
                    if (len > 96) {
                        acc += mix16(in, off + 48, s, 96, seed);
                        acc += mix16(in, off + len - 64, s, 112, seed);
                    }
                    acc += mix16(in, off + 32, s, 64, seed);
                    acc += mix16(in, off + len - 48, s, 80, seed);
                }
                acc += mix16(in, off + 16, s, 32, seed);
                acc += mix16(in, off + len - 32, s, 48, seed);
            }
            acc += mix16(in, off, s, 0, seed);
            acc += mix16(in, off + len - 16, s, 16, seed);
            return avalanche(acc);
        }
        if (len <= 240) {
            long acc = len * P64_1;
            int rounds = len / 16;
            for (int i = 0; i < 8; i++) {
                acc += mix16(in, off + 16 * i, s, 16 * i, seed);
            }
            acc = avalanche(acc);
            for (int i = 8; i < rounds; i++) {
                acc += mix16(in, off + 16 * i, s, 16 * (i - 8) + 3, seed);
            }
            acc += mix16(in, off + len - 16, s, 136 - 17, seed);
            return avalanche(acc);
        }
        byte[] secret = seed == 0 ? SECRET : seed == ITEM_SEED ? ITEM_SECRET : customSecret(seed);
        return hashLong(in, off, len, secret);
    }

    private static byte[] customSecret(long seed) {
        byte[] c = new byte[SECRET_SIZE];
        for (int i = 0; i < SECRET_SIZE / 16; i++) {
            w64(c, 16 * i, r64(SECRET, 16 * i) + seed);
            w64(c, 16 * i + 8, r64(SECRET, 16 * i + 8) - seed);
        }
        return c;
    }

    private static long hashLong(byte[] in, int off, int len, byte[] secret) {
        long[] acc = {P32_3, P64_1, P64_2, P64_3, P64_4, P32_2, P64_5, P32_1};
        int stripesPerBlock = (SECRET_SIZE - STRIPE) / 8;
        int blockLen = STRIPE * stripesPerBlock;
        int blocks = (len - 1) / blockLen;
        for (int n = 0; n < blocks; n++) {
            for (int st = 0; st < stripesPerBlock; st++) {
                accumulate512(acc, in, off + n * blockLen + st * STRIPE, secret, st * 8);
            }
            scramble(acc, secret, SECRET_SIZE - STRIPE);
        }
        int stripes = ((len - 1) - blockLen * blocks) / STRIPE;
        for (int st = 0; st < stripes; st++) {
            accumulate512(acc, in, off + blocks * blockLen + st * STRIPE, secret, st * 8);
        }
        accumulate512(acc, in, off + len - STRIPE, secret, SECRET_SIZE - STRIPE - 7);
        long result = len * P64_1;
        for (int i = 0; i < 4; i++) {
            result += mulFold(acc[2 * i] ^ r64(secret, 11 + 16 * i),
                              acc[2 * i + 1] ^ r64(secret, 11 + 16 * i + 8));
        }
        return avalanche(result);
    }

    private static void accumulate512(long[] acc, byte[] in, int p, byte[] secret, int sp) {
        for (int i = 0; i < 8; i++) {
            long v = r64(in, p + 8 * i);
            long k = v ^ r64(secret, sp + 8 * i);
            acc[i ^ 1] += v;
            acc[i] += (k & 0xffffffffL) * (k >>> 32);
        }
    }

    private static void scramble(long[] acc, byte[] secret, int sp) {
        for (int i = 0; i < 8; i++) {
            long a = acc[i];
            a ^= a >>> 47;
            a ^= r64(secret, sp + 8 * i);
            acc[i] = a * P32_1;
        }
    }

    private static long mix16(byte[] in, int p, byte[] s, int sp, long seed) {
        long lo = r64(in, p);
        long hi = r64(in, p + 8);
        return mulFold(lo ^ (r64(s, sp) + seed), hi ^ (r64(s, sp + 8) - seed));
    }

    /** The 128-bit product of A and B (unsigned), its halves xor-ed. */
    private static long mulFold(long a, long b) {
        long lo = a * b;
        long hi = Math.multiplyHigh(a, b) + ((a >> 63) & b) + ((b >> 63) & a);
        return lo ^ hi;
    }

    private static long xxh64Avalanche(long h) {
        h ^= h >>> 33;
        h *= P64_2;
        h ^= h >>> 29;
        h *= P64_3;
        return h ^ (h >>> 32);
    }

    private static long avalanche(long h) {
        h ^= h >>> 37;
        h *= PRIME_MX1;
        return h ^ (h >>> 32);
    }

    private static long rrmxmx(long h, int len) {
        h ^= Long.rotateLeft(h, 49) ^ Long.rotateLeft(h, 24);
        h *= PRIME_MX2;
        h ^= (h >>> 35) + len;
        h *= PRIME_MX2;
        return h ^ (h >>> 28);
    }

    private static long r64(byte[] b, int p) {
        return (b[p] & 0xffL) | (b[p + 1] & 0xffL) << 8 | (b[p + 2] & 0xffL) << 16
            | (b[p + 3] & 0xffL) << 24 | (b[p + 4] & 0xffL) << 32 | (b[p + 5] & 0xffL) << 40
            | (b[p + 6] & 0xffL) << 48 | (b[p + 7] & 0xffL) << 56;
    }

    /** 32 bits little-endian, zero-extended. */
    private static long r32(byte[] b, int p) {
        return (b[p] & 0xffL) | (b[p + 1] & 0xffL) << 8 | (b[p + 2] & 0xffL) << 16
            | (b[p + 3] & 0xffL) << 24;
    }

    private static void w64(byte[] b, int p, long v) {
        for (int i = 0; i < 8; i++) {
            b[p + i] = (byte) (v >>> (8 * i));
        }
    }
}
