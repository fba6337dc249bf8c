// SPDX-License-Identifier: Apache-2.0
package io.dedupd.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dedup.v1.ClusterMapResponse;
import dedup.v1.FilterRequest;
import dedup.v1.FilterResponse;
import dedup.v1.RecordDeliveryRequest;
import dedup.v1.RecordDeliveryResponse;
import dedup.v1.ReplicaInfo;
import dedup.v1.ResponseMode;
import dedup.v1.ShardInfo;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.inprocess.InProcessChannelBuilder;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

class DedupdClientTest {
    private static final AtomicInteger SEQ = new AtomicInteger();
    private final List<AutoCloseable> toClose = new ArrayList<>();

    @AfterEach
    void tearDown() throws Exception {
        for (int i = toClose.size() - 1; i >= 0; i--) {
            toClose.get(i).close();
        }
    }

    private FakeNode node() throws Exception {
        FakeNode n = new FakeNode("fake-" + SEQ.incrementAndGet() + ":1");
        toClose.add(n);
        return n;
    }

    /** A map of SHARDS (each an array of nodes, all ready), set on every node as its map and hash. */
    private static ClusterMapResponse map(String hash, int partitions, FakeNode[]... shards) {
        ClusterMapResponse.Builder b = ClusterMapResponse.newBuilder().setMapHash(hash)
            .setPartitioner("murmur2_random").setPartitionCount(partitions).setMaxLagMs(10_000);
        for (int s = 0; s < shards.length; s++) {
            ShardInfo.Builder sb = ShardInfo.newBuilder().setShard(s);
            for (int r = 0; r < shards[s].length; r++) {
                sb.addReplicas(ReplicaInfo.newBuilder().setReplica(r).setAddress(shards[s][r].name)
                    .setReady(true).setLagMs(0));
            }
            b.addShards(sb);
        }
        ClusterMapResponse m = b.build();
        for (FakeNode[] shard : shards) {
            for (FakeNode n : shard) {
                n.map.set(m);
                n.ownHash.set(hash);
            }
        }
        return m;
    }

    private DedupdClient.Builder builder(FakeNode seed) {
        // Deadlines far above the defaults: the first calls of a cold JVM on
        // a loaded machine (class loading) took more than the default 2 s
        // map read and 5 s call, which is not what these tests are about.
        return DedupdClient.newBuilder().seeds(seed.name).mapRefresh(Duration.ZERO)
            .mapTimeout(Duration.ofSeconds(20)).deadline(Duration.ofSeconds(30))
            .channelFactory(a -> InProcessChannelBuilder.forName(a).build());
    }

    private DedupdClient client(DedupdClient.Builder b) {
        DedupdClient c = b.build();
        toClose.add(c);
        return c;
    }

    private static <T> T get(CompletableFuture<T> f) throws Exception {
        return f.get(40, TimeUnit.SECONDS);
    }

    private static Throwable failure(CompletableFuture<?> f) throws Exception {
        try {
            f.get(40, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            return e.getCause();
        }
        throw new AssertionError("future succeeded");
    }

    @Test
    void coalescesDeliveriesOfOneUserWithinTheLinger() throws Exception {
        FakeNode n = node();
        map("00000000000000aa", 8, new FakeNode[] {n});
        DedupdClient c = client(builder(n).linger(Duration.ofMillis(200)));
        get(c.refreshMap());
        List<CompletableFuture<RecordDeliveryResponse>> fs = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            fs.add(c.recordDelivery("u1", List.of("a" + i, "b" + i), "feed"));
        }
        fs.add(c.recordDelivery("u2", List.of("x"), "feed"));
        fs.add(c.recordDelivery("u1", List.of("y"), "other-scene"));
        for (CompletableFuture<RecordDeliveryResponse> f : fs) {
            get(f);
        }
        assertEquals(3, n.deliveries.size(), "u1/feed, u2/feed, u1/other-scene");
        RecordDeliveryRequest u1 = n.deliveries.stream()
            .filter(r -> r.getUserId().equals("u1") && r.getScene().equals("feed")).findFirst().orElseThrow();
        List<String> want = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            want.add("a" + i);
            want.add("b" + i);
        }
        assertEquals(want, u1.getItemIdsList(), "items in the order given");
        assertTrue(u1.getDeliveredAtMs() > 0);
        assertEquals(20, get(fs.get(0)).getRecentSize(), "each future has the batch's answer");
        assertEquals(20, get(fs.get(9)).getRecentSize());
        DedupdClient.Stats st = c.stats();
        assertEquals(12, st.deliveries);
        assertEquals(3, st.deliveryCalls);
    }

    @Test
    void lingerZeroSendsEachDelivery() throws Exception {
        FakeNode n = node();
        map("00000000000000aa", 8, new FakeNode[] {n});
        DedupdClient c = client(builder(n).linger(Duration.ZERO));
        for (int i = 0; i < 5; i++) {
            get(c.recordDelivery("u1", List.of("a" + i), ""));
        }
        assertEquals(5, n.deliveries.size());
    }

    @Test
    void fullBatchIsSentWithoutWaiting() throws Exception {
        FakeNode n = node();
        map("00000000000000aa", 8, new FakeNode[] {n});
        DedupdClient c = client(builder(n).linger(Duration.ofSeconds(30)).maxBatchItems(4));
        get(c.refreshMap());
        CompletableFuture<RecordDeliveryResponse> f1 = c.recordDelivery("u", List.of("a", "b", "c"), "");
        CompletableFuture<RecordDeliveryResponse> f2 = c.recordDelivery("u", List.of("d", "e"), "");
        assertEquals(3, get(f1).getRecentSize(), "the first batch left when the second did not fit");
        assertFalse(f2.isDone(), "the second lingers");
    }

    @Test
    void failFastBackpressureBoundsCallsAndFailsAtOnce() throws Exception {
        FakeNode n = node();
        map("00000000000000aa", 8, new FakeNode[] {n});
        DedupdClient c = client(builder(n).linger(Duration.ZERO).maxInFlight(2).maxQueued(1));
        get(c.refreshMap());
        n.hold = new CountDownLatch(1);
        List<CompletableFuture<RecordDeliveryResponse>> ok = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            ok.add(c.recordDelivery("u" + i, List.of("a"), ""));
        }
        long t0 = System.nanoTime();
        CompletableFuture<RecordDeliveryResponse> refused = c.recordDelivery("u9", List.of("a"), "");
        assertTrue(refused.isDone(), "refused at once");
        assertTrue(System.nanoTime() - t0 < TimeUnit.MILLISECONDS.toNanos(500));
        assertInstanceOf(BackpressureException.class, failure(refused));
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (n.concurrent.get() < 2 && System.nanoTime() < until) {
            Thread.sleep(5);
        }
        Thread.sleep(50);
        assertEquals(2, n.concurrent.get(), "two calls on the wire, the third queued");
        n.hold.countDown();
        for (CompletableFuture<RecordDeliveryResponse> f : ok) {
            get(f);
        }
        assertEquals(2, n.maxConcurrent.get(), "at most maxInFlight on the wire; calls " + n.calls.get());
        assertEquals(1, c.stats().rejected);
        get(c.recordDelivery("u9", List.of("a"), "")); // room again
    }

    @Test
    void blockingBackpressureWaitsForRoom() throws Exception {
        FakeNode n = node();
        map("00000000000000aa", 8, new FakeNode[] {n});
        DedupdClient c = client(builder(n).linger(Duration.ZERO).maxInFlight(1).maxQueued(0)
            .backpressure(DedupdClient.Backpressure.BLOCK).blockTimeout(Duration.ofSeconds(5)));
        get(c.refreshMap());
        CountDownLatch hold = new CountDownLatch(1);
        n.hold = hold;
        CompletableFuture<RecordDeliveryResponse> first = c.recordDelivery("u1", List.of("a"), "");
        Thread releaser = new Thread(() -> {
            try {
                Thread.sleep(300);
            } catch (InterruptedException e) {
                return;
            }
            n.hold = null;
            hold.countDown();
        });
        releaser.start();
        long t0 = System.nanoTime();
        CompletableFuture<RecordDeliveryResponse> second = c.recordDelivery("u2", List.of("a"), "");
        long waited = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertTrue(waited >= 200, "the caller blocked until the first call ended (" + waited + " ms)");
        get(first);
        get(second);
        releaser.join();

        // And gives up after blockTimeout.
        DedupdClient c2 = client(builder(n).linger(Duration.ZERO).maxInFlight(1).maxQueued(0)
            .backpressure(DedupdClient.Backpressure.BLOCK).blockTimeout(Duration.ofMillis(100)));
        get(c2.refreshMap());
        CountDownLatch hold2 = new CountDownLatch(1);
        n.hold = hold2;
        CompletableFuture<RecordDeliveryResponse> a = c2.recordDelivery("u1", List.of("a"), "");
        t0 = System.nanoTime();
        CompletableFuture<RecordDeliveryResponse> b = c2.recordDelivery("u2", List.of("a"), "");
        waited = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertInstanceOf(BackpressureException.class, failure(b));
        assertTrue(waited >= 90, "waited " + waited + " ms");
        n.hold = null;
        hold2.countDown();
        get(a);
    }

    @Test
    void retriesUnavailableWithBackoff() throws Exception {
        FakeNode n = node();
        map("00000000000000aa", 8, new FakeNode[] {n});
        DedupdClient c = client(builder(n).linger(Duration.ZERO)
            .retryBackoff(Duration.ofMillis(5), Duration.ofMillis(20)));
        get(c.refreshMap());
        n.unavailable.set(3);
        assertEquals(1, get(c.recordDelivery("u", List.of("a"), "")).getRecentSize());
        assertEquals(4, n.calls.get(), "three refusals, then the call");
        assertEquals(3, c.stats().retries, "one backoff after each round of the shard's one replica");

        // Beyond maxAttempts the status is the caller's.
        DedupdClient c2 = client(builder(n).linger(Duration.ZERO).maxAttempts(2)
            .retryBackoff(Duration.ofMillis(1), Duration.ofMillis(2)));
        get(c2.refreshMap());
        n.unavailable.set(100);
        Throwable t = failure(c2.recordDelivery("u", List.of("a"), ""));
        assertEquals(Status.Code.UNAVAILABLE, Status.fromThrowable(t).getCode());
    }

    @Test
    void routesEachUserToItsOwnerWithTheMapHash() throws Exception {
        FakeNode s0 = node();
        FakeNode s1 = node();
        String hash = "0123456789abcdef";
        map(hash, 16, new FakeNode[] {s0}, new FakeNode[] {s1});
        DedupdClient c = client(builder(s0).linger(Duration.ZERO));
        ClusterMap m = get(c.refreshMap());
        int[] per = new int[2];
        for (int i = 0; i < 40; i++) {
            String u = "user-" + i;
            get(c.recordDelivery(u, List.of("a"), ""));
            int shard = Partitioner.MURMUR2_RANDOM.partitionOf(u, 16) % 2;
            assertEquals(shard, m.ownerShard(u));
            FakeNode owner = shard == 0 ? s0 : s1;
            assertEquals(u, owner.deliveries.get(owner.deliveries.size() - 1).getUserId());
            per[shard]++;
        }
        assertEquals(per[0], s0.deliveries.size());
        assertEquals(per[1], s1.deliveries.size());
        assertTrue(per[0] > 0 && per[1] > 0);
        for (String h : s0.hashesSeen) {
            assertEquals(hash, h);
        }
        for (String h : s1.hashesSeen) {
            assertEquals(hash, h);
        }
    }

    @Test
    void failsOverToTheNextReplicaOnUnavailable() throws Exception {
        FakeNode r0 = node();
        FakeNode r1 = node();
        map("00000000000000bb", 4, new FakeNode[] {r0, r1});
        DedupdClient c = client(builder(r0).linger(Duration.ZERO));
        get(c.refreshMap());
        r0.down = true;
        for (int i = 0; i < 10; i++) {
            get(c.recordDelivery("u" + i, List.of("a"), ""));
        }
        assertEquals(10, r1.deliveries.size());
        assertTrue(c.stats().failovers >= 1);
        assertTrue(r0.calls.get() <= 1, "a replica that failed is skipped by the next calls: "
            + r0.calls.get() + " calls");
        assertEquals(0, c.stats().retries, "no backoff while another replica answers");
    }

    @Test
    void failsOverACallTheNodeCancelled() throws Exception {
        // A node shutting down (SIGTERM) cancels the calls that reach it
        // once its shutdown began, before its GOAWAY reached the client
        // (grpc core): CANCELLED, though nothing was done with them.
        FakeNode r0 = node();
        FakeNode r1 = node();
        map("00000000000000bb", 4, new FakeNode[] {r0, r1});
        DedupdClient c = client(builder(r0).linger(Duration.ZERO));
        get(c.refreshMap());
        r0.cancelled.set(100);
        r1.cancelled.set(1);
        for (int i = 0; i < 10; i++) {
            get(c.filter("u" + i, List.of("a", "b"), ""));
        }
        assertEquals(10, r1.filters.size());
        assertTrue(r0.calls.get() >= 1, "r0 was tried");
        assertTrue(c.stats().failovers >= 1);
    }

    @Test
    void failsOverOnAConnectionLostMidCall() {
        // A node killed while a call is on its connection: grpc-java's
        // Netty transport reports UNKNOWN "channel closed" with a
        // ClosedChannelException as cause (not UNAVAILABLE) when the
        // channel closes under an open stream.
        java.nio.channels.ClosedChannelException closed = new java.nio.channels.ClosedChannelException();
        assertTrue(DedupdClient.failsOver(
                Status.UNKNOWN.withDescription("channel closed").withCause(closed).asRuntimeException()));
        assertTrue(DedupdClient.failsOver(Status.UNAVAILABLE.asRuntimeException()));
        assertTrue(DedupdClient.failsOver(Status.CANCELLED.asRuntimeException()));
        // An UNKNOWN for any other reason is the node's answer: not retried.
        assertFalse(DedupdClient.failsOver(Status.UNKNOWN.withDescription("channel closed").asRuntimeException()));
        assertFalse(DedupdClient.failsOver(Status.INVALID_ARGUMENT.asRuntimeException()));
        assertFalse(DedupdClient.failsOver(Status.DEADLINE_EXCEEDED.asRuntimeException()));
    }

    @Test
    void refreshesAStaleMapAndRoutesAgain() throws Exception {
        FakeNode s0 = node();
        FakeNode s1 = node();
        // The client reads a one-shard map; the fleet then split in two.
        ClusterMapResponse old = map("1111111111111111", 16, new FakeNode[] {s0, s1});
        DedupdClient c = client(builder(s0).linger(Duration.ZERO));
        assertEquals("1111111111111111", get(c.refreshMap()).hash());
        map("2222222222222222", 16, new FakeNode[] {s0}, new FakeNode[] {s1});
        assertNotEquals(old, s0.map.get());
        for (int i = 0; i < 20; i++) {
            get(c.recordDelivery("user-" + i, List.of("a"), ""));
        }
        assertEquals("2222222222222222", c.clusterMap().hash());
        assertTrue(c.stats().staleMap >= 1);
        assertEquals(20, s0.deliveries.size() + s1.deliveries.size());
        for (RecordDeliveryRequest r : s1.deliveries) {
            assertEquals(1, Partitioner.MURMUR2_RANDOM.partitionOf(r.getUserId(), 16) % 2);
        }
    }

    @Test
    void midSplitReadsTheMapFromTheNodeThatRefused() throws Exception {
        // Resharding 1 -> 2 half done (docs/design.md, "Clients that route
        // themselves"): a0 restarted with the 2-shard map (it also accepts
        // the 1-shard map's hash, for the users it keeps), a1 still runs
        // the 1-shard map, b is the new shard 1. The client holds the new
        // map; a1 refuses it. Read again from a0 (or b), the map would send
        // the call back to a1: it must be read from a1, whose map routes
        // the user to a node that answers it.
        FakeNode a0 = node();
        FakeNode a1 = node();
        FakeNode b = node();
        ClusterMapResponse old = map("1111111111111111", 16, new FakeNode[] {a0, a1});
        map("2222222222222222", 16, new FakeNode[] {a0, a1}, new FakeNode[] {b});
        a1.map.set(old);
        a1.ownHash.set("1111111111111111");
        a0.splitHash.set("1111111111111111");
        DedupdClient c = client(builder(a0).linger(Duration.ZERO));
        assertEquals("2222222222222222", get(c.refreshMap()).hash());
        int sent = 0;
        for (int i = 0; sent < 10; i++) {
            String u = "user-" + i;
            if (Partitioner.MURMUR2_RANDOM.partitionOf(u, 16) % 2 != 0) {
                continue; // b's: not what this is about
            }
            get(c.recordDelivery(u, List.of("a"), ""));
            sent++;
        }
        assertEquals(10, a0.deliveries.size() + a1.deliveries.size());
        assertTrue(c.stats().staleMap >= 1, "a1 refused the new map");
    }

    @Test
    void refreshesTheMapPeriodically() throws Exception {
        FakeNode n = node();
        map("1111111111111111", 8, new FakeNode[] {n});
        DedupdClient c = client(builder(n).mapRefresh(Duration.ofMillis(50)));
        get(c.refreshMap());
        map("3333333333333333", 8, new FakeNode[] {n});
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (!"3333333333333333".equals(c.clusterMap().hash()) && System.nanoTime() < until) {
            Thread.sleep(10);
        }
        assertEquals("3333333333333333", c.clusterMap().hash());
    }

    @Test
    void compactCandidatesSendHashesAndGiveIdsBack() throws Exception {
        FakeNode n = node();
        map("00000000000000aa", 8, new FakeNode[] {n});
        DedupdClient c = client(builder(n));
        List<String> cands = List.of("v0", "v1", "v2", "v3", "vidéo-4");
        FilterResponse r = get(c.filter("u", cands, ""));
        assertEquals(List.of("v0", "v2", "vidéo-4"), r.getKeptIdsList());
        FilterRequest sent = n.filters.get(0);
        assertEquals(0, sent.getCandidateIdsCount());
        assertEquals(5, sent.getCandidateHashesCount());
        assertEquals(Xxh3.itemHash("vidéo-4"), sent.getCandidateHashes(4));
        FilterResponse idx = get(c.filter(FilterRequest.newBuilder().setUserId("u").addAllCandidateIds(cands)
            .setMode(ResponseMode.RESPONSE_MODE_INDEXES).build()));
        assertEquals(List.of(0, 2, 4), idx.getKeptIndexesList());
        assertEquals(0, idx.getKeptIdsCount());

        DedupdClient ids = client(builder(n).compactCandidates(false));
        assertEquals(List.of("v0", "v2", "vidéo-4"), get(ids.filter("u", cands, "")).getKeptIdsList());
        assertEquals(5, n.filters.get(2).getCandidateIdsCount());
    }

    @Test
    void closeFailsCallsWaitingOutABackoff() throws Exception {
        FakeNode n = node();
        map("00000000000000aa", 8, new FakeNode[] {n});
        DedupdClient c = builder(n).linger(Duration.ZERO).retryBackoff(Duration.ofSeconds(20), Duration.ofSeconds(20))
            .build();
        get(c.refreshMap());
        n.down = true;
        CompletableFuture<RecordDeliveryResponse> f = c.recordDelivery("u", List.of("a"), "");
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (c.stats().retries == 0 && System.nanoTime() < until) {
            Thread.sleep(5);
        }
        assertEquals(1, c.stats().retries, "the call waits out a backoff");
        c.close();
        assertEquals(Status.Code.CANCELLED, Status.fromThrowable(failure(f)).getCode());
    }

    @Test
    void otherErrorsAreNotRetried() throws Exception {
        FakeNode n = node();
        map("00000000000000aa", 8, new FakeNode[] {n});
        n.ownHash.set("ffffffffffffffff"); // stale forever: bounded re-routes, then the status
        DedupdClient c = client(builder(n).linger(Duration.ZERO).maxMapRetries(2));
        get(c.refreshMap());
        Throwable t = failure(c.recordDelivery("u", List.of("a"), ""));
        assertEquals(Status.Code.FAILED_PRECONDITION, ((StatusRuntimeException) t).getStatus().getCode());
        assertEquals(3, n.calls.get());
    }
}
