// SPDX-License-Identifier: Apache-2.0
package io.dedupd.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * The shared test vectors (tests/vectors/, written by tests/tools/ddvectors
 * from the server's own functions): the Java partitioners and item hash
 * must give every row's answer. The directory is the system property
 * dedupd.vectors (set by the pom to the repository's tests/vectors).
 */
class VectorsTest {
    private static List<String[]> rows(String file, int fields) throws IOException {
        String dir = System.getProperty("dedupd.vectors", "../../tests/vectors");
        Path p = Path.of(dir, file);
        assertTrue(Files.isRegularFile(p), p + " is missing");
        List<String[]> out = new ArrayList<>();
        for (String line : Files.readAllLines(p, StandardCharsets.UTF_8)) {
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            String[] f = line.split("\t", -1);
            assertEquals(fields, f.length, "line: " + line);
            out.add(f);
        }
        return out;
    }

    private static byte[] unhex(String s) {
        byte[] b = new byte[s.length() / 2];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        }
        return b;
    }

    @Test
    void itemHashMatchesTheServer() throws IOException {
        List<String[]> rows = rows("item_hash.tsv", 2);
        assertTrue(rows.size() >= 30, "too few rows: " + rows.size());
        Set<Integer> lengths = new HashSet<>();
        for (String[] r : rows) {
            byte[] id = unhex(r[0]);
            long want = Long.parseUnsignedLong(r[1], 16);
            assertEquals(want, Xxh3.hash64(id, Xxh3.ITEM_SEED), "id " + r[0]);
            assertEquals(want, Xxh3.itemHash(new String(id, StandardCharsets.UTF_8)), "id " + r[0]);
            lengths.add(id.length);
        }
        // Every code path of XXH3 is covered: 0, 1-3, 4-8, 9-16, 17-128, 129-240, > 240.
        int[][] paths = {{0, 0}, {1, 3}, {4, 8}, {9, 16}, {17, 128}, {129, 240}, {241, Integer.MAX_VALUE}};
        for (int[] r : paths) {
            assertTrue(lengths.stream().anyMatch(x -> x >= r[0] && x <= r[1]),
                "no id of length " + r[0] + ".." + r[1]);
        }
    }

    /**
     * Ids longer than one XXH3 block (1024 bytes: the accumulator is
     * scrambled between blocks), which the shared vectors do not reach:
     * known answers of xxHash 0.8's XXH3_64bits_withSeed (libxxhash) with
     * the item seed over bytes 'a' + (i * 7 + len) % 26.
     */
    @Test
    void longIdsMatchTheReference() {
        int[] lens = {1024, 1025, 2048, 2500, 9999};
        String[] want = {"e15bfe2c14bbb452", "0a115c18b1481b15", "0cf893c1283c76ce",
                         "d75c2fccbc2b53a5", "26c4f5f69dcf2657"};
        for (int k = 0; k < lens.length; k++) {
            byte[] b = new byte[lens[k]];
            for (int i = 0; i < b.length; i++) {
                b[i] = (byte) ('a' + (i * 7 + b.length) % 26);
            }
            assertEquals(Long.parseUnsignedLong(want[k], 16), Xxh3.hash64(b, Xxh3.ITEM_SEED), "length " + lens[k]);
        }
    }

    @Test
    void partitionersMatchTheServer() throws IOException {
        List<String[]> rows = rows("partition.tsv", 4);
        Set<String> seen = new HashSet<>();
        for (String[] r : rows) {
            Partitioner p = Partitioner.parse(r[0]);
            assertNotNull(p, "unknown partitioner " + r[0]);
            seen.add(r[0]);
            int count = Integer.parseInt(r[1]);
            int want = Integer.parseInt(r[3]);
            byte[] key = unhex(r[2]);
            assertEquals(want, p.partitionOf(key, count), r[0] + " " + count + " " + r[2]);
            if (want >= 0 && key.length > 0) {
                // ClusterMap routes by the user id string: the same answer.
                assertEquals(want, p.partitionOf(new String(key, StandardCharsets.UTF_8), count));
            }
        }
        assertEquals(Partitioner.values().length, seen.size(), "every partitioner has rows");
    }

    @Test
    void partitionerNamesAreExact() {
        assertEquals(Partitioner.MURMUR2_RANDOM, Partitioner.parse("murmur2_random"));
        assertEquals(null, Partitioner.parse("Murmur2"));
        assertEquals(null, Partitioner.parse("random"));
        assertEquals(-1, Partitioner.MURMUR2.partitionOf("u", 0));
        assertEquals(-1, Partitioner.MURMUR2_RANDOM.partitionOf((byte[]) null, 8));
        assertEquals(-1, Partitioner.CONSISTENT_RANDOM.partitionOf(new byte[0], 8));
    }
}
