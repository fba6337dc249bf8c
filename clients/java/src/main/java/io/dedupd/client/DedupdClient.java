// SPDX-License-Identifier: Apache-2.0
package io.dedupd.client;

import dedup.v1.ClusterMapRequest;
import dedup.v1.ClusterMapResponse;
import dedup.v1.DedupGrpc;
import dedup.v1.FilterRequest;
import dedup.v1.FilterResponse;
import dedup.v1.ForgetUserRequest;
import dedup.v1.ForgetUserResponse;
import dedup.v1.Play;
import dedup.v1.RecordDeliveryRequest;
import dedup.v1.RecordDeliveryResponse;
import dedup.v1.RecordPlaysRequest;
import dedup.v1.RecordPlaysResponse;
import dedup.v1.ResponseMode;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ChannelCredentials;
import io.grpc.ClientInterceptors;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.TlsChannelCredentials;
import io.grpc.netty.shaded.io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.ClientCalls;
import io.grpc.stub.MetadataUtils;
import io.grpc.stub.StreamObserver;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.InvalidKeyException;
import java.security.KeyFactory;
import java.security.PrivateKey;
import java.security.PublicKey;
import java.security.Signature;
import java.security.cert.CertificateException;
import java.security.cert.CertificateFactory;
import java.security.spec.InvalidKeySpecException;
import java.security.spec.PKCS8EncodedKeySpec;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.Semaphore;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;
import javax.net.ssl.SSLException;

/**
 * dedupd's client for a fleet: each call goes straight to a replica of the
 * shard that owns its user, by the fleet's map (rpc ClusterMap in
 * proto/dedup.proto), so no node forwards it.
 *
 * <p>Routing. The client reads the map from its seeds (then from any node
 * it knows), computes the user's partition with the map's partitioner and
 * partition count ({@link Partitioner}), owner shard = partition mod
 * shards, and sends the map's hash in the metadata {@code dedupd-map-hash}.
 * A node answering FAILED_PRECONDITION with {@code dedupd-map-hash} in its
 * trailers has another map: the client reads the map again, from that node
 * first, and re-routes (at most {@link Builder#maxMapRetries} times a
 * call). The map is also read every {@link Builder#mapRefresh} and after a
 * replica failed; a reading with a new hash replaces the old one. Until a
 * map was read, or when it routes nothing (partition count 0), calls go to
 * any node without the hash and are forwarded by it.
 *
 * <p>Failover and retries. Replicas the map says are ready and not behind
 * are tried first, starting at a rotating one; a replica that answered
 * UNAVAILABLE (or CANCELLED, below) is skipped by every call for
 * {@link Builder#downFor}, and the call goes at once to the next replica
 * of the shard. When every replica
 * of the shard failed, the call waits a jittered backoff (uniform in
 * [0, min(retryMax, retryBase * 2^round))) and tries them again, as long
 * as the call's deadline and {@link Builder#maxAttempts} allow. Only
 * UNAVAILABLE is retried, and CANCELLED, which the client never causes: a
 * node shutting down cancels the calls that reach it after its shutdown
 * began (writes too: RecordDelivery and RecordPlays store the same items
 * again, which changes nothing the user sees), and a connection lost under
 * a call (UNKNOWN "channel closed" from the transport: a node killed); any
 * other status completes the future with the {@link StatusRuntimeException}.
 *
 * <p>Coalescing. {@link #recordDelivery} waits up to {@link Builder#linger}
 * (default 1 ms) for more deliveries of the same user and scene, then sends
 * them as one RecordDelivery (items in the order given, at most
 * {@link Builder#maxBatchItems} a call); every future of the batch
 * completes with that call's answer.
 *
 * <p>Backpressure. At most {@link Builder#maxInFlight} calls are on the
 * wire; up to {@link Builder#maxQueued} more wait in the client's queue
 * (a coalesced batch is one call). A call beyond that is refused with
 * {@link BackpressureException}: at once (Backpressure.FAIL_FAST, the
 * default: the future fails, the caller's thread never waits), or after
 * the caller's thread waited up to {@link Builder#blockTimeout} for room
 * (Backpressure.BLOCK).
 *
 * <p>TLS. {@link Builder#tlsCa}, {@link Builder#tlsClientCert} and
 * {@link Builder#tlsServerName} are dedupctl's {@code --tls-ca},
 * {@code --tls-cert}/{@code --tls-key} and {@code --tls-name}: every channel
 * the client makes (to the seeds and to each node of the map) speaks TLS,
 * trusts only that CA and presents the client certificate to nodes with
 * {@code rpc.tls_client_ca}. A call whose handshake failed completes with
 * UNAVAILABLE, its description naming the likely cause (no client
 * certificate, a node certificate that does not name the address).
 *
 * <p>Threads. Every method may be called from any thread. Futures complete
 * on gRPC's threads or the client's one scheduler thread: callbacks that
 * block should move to an executor of their own. {@link #close} fails
 * what is queued and releases the channels.
 */
public final class DedupdClient implements AutoCloseable {
    /** What a call beyond the bound does (see the class comment). */
    public enum Backpressure { FAIL_FAST, BLOCK }

    /** The metadata a routed call carries, and the trailer of a stale-map answer. */
    public static final Metadata.Key<String> MAP_HASH_KEY =
        Metadata.Key.of("dedupd-map-hash", Metadata.ASCII_STRING_MARSHALLER);

    private final Builder cfg;
    private final Function<String, ManagedChannel> channelFactory;
    private final boolean tls; // the client's own channels speak TLS (Builder.tlsCa)
    private final List<String> seeds;
    private final ScheduledExecutorService sched;
    private final Map<String, ManagedChannel> channels = new ConcurrentHashMap<>();
    private final Map<String, Long> downUntil = new ConcurrentHashMap<>();
    private final AtomicInteger rotor = new AtomicInteger();
    private final Set<Attempts<?, ?>> backingOff = ConcurrentHashMap.newKeySet();
    private volatile ClusterMap map;
    private final CompletableFuture<Void> firstMap = new CompletableFuture<>();
    private final Object refreshLock = new Object();
    private CompletableFuture<ClusterMap> refreshing; // guarded by refreshLock
    private volatile boolean closed;

    // Backpressure: admitted = queued + in flight.
    private final Semaphore admitted;
    private final Object dispatchLock = new Object();
    private final ArrayDeque<Runnable> waiting = new ArrayDeque<>(); // guarded by dispatchLock
    private int running; // guarded by dispatchLock

    // Coalescing: the open batch of each (user, scene).
    private final Object batchLock = new Object();
    private final Map<List<String>, Batch> open = new HashMap<>(); // guarded by batchLock

    private final AtomicLong statCalls = new AtomicLong();
    private final AtomicLong statDeliveries = new AtomicLong();
    private final AtomicLong statDeliveryCalls = new AtomicLong();
    private final AtomicLong statRejected = new AtomicLong();
    private final AtomicLong statFailovers = new AtomicLong();
    private final AtomicLong statRetries = new AtomicLong();
    private final AtomicLong statStaleMap = new AtomicLong();
    private final AtomicLong statMapReads = new AtomicLong();
    private final AtomicLong statMapChanges = new AtomicLong();

    private DedupdClient(Builder b, Function<String, ManagedChannel> channelFactory) {
        this.cfg = b;
        this.channelFactory = channelFactory;
        this.tls = b.tlsCa != null;
        this.seeds = List.copyOf(b.seeds);
        this.admitted = new Semaphore(b.maxInFlight + b.maxQueued, true);
        this.sched = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "dedupd-client");
            t.setDaemon(true);
            return t;
        });
        firstRead();
        if (!b.mapRefresh.isZero()) {
            long ms = b.mapRefresh.toMillis();
            sched.scheduleWithFixedDelay(() -> refreshMap(), ms, ms, TimeUnit.MILLISECONDS);
        }
    }

    /**
     * Read the first map; until one was read, try again every
     * mapRetryDelay (calls meanwhile go unrouted to the seeds, which
     * forward them).
     */
    private void firstRead() {
        refreshMap().whenComplete((m, e) -> {
            firstMap.complete(null);
            if (e != null && map == null && !closed) {
                try {
                    sched.schedule(this::firstRead, FIRST_MAP_RETRY_MS, TimeUnit.MILLISECONDS);
                } catch (java.util.concurrent.RejectedExecutionException closedNow) {
                    // close() ran meanwhile: nothing more to read
                }
            }
        });
    }

    private static final long FIRST_MAP_RETRY_MS = 500;

    public static Builder newBuilder() {
        return new Builder();
    }

    /** A client from seed addresses ("host:port"), everything else by default. */
    public static DedupdClient connect(String... seeds) {
        return newBuilder().seeds(seeds).build();
    }

    // ------------------------------------------------------------------ API

    /**
     * Record that ITEMS were delivered to USER in SCENE (null or "" = the
     * default scene). Coalesced with the other deliveries of the same user
     * and scene within the linger. The future gives the call's answer
     * (recent_size counts the user's recent deliveries after the whole
     * batch), or fails with {@link BackpressureException}, the call's
     * {@link StatusRuntimeException}, or IllegalArgumentException for a
     * null or empty user.
     */
    public CompletableFuture<RecordDeliveryResponse> recordDelivery(String user, List<String> items,
                                                                    String scene) {
        CompletableFuture<RecordDeliveryResponse> f = new CompletableFuture<>();
        if (user == null || user.isEmpty() || items == null) {
            f.completeExceptionally(new IllegalArgumentException("recordDelivery needs a user and items"));
            return f;
        }
        String sc = scene == null ? "" : scene;
        List<String> copy = List.copyOf(items);
        statDeliveries.incrementAndGet();
        if (cfg.linger.isZero()) {
            if (!admit(f)) {
                return f;
            }
            Batch b = new Batch(user, sc);
            b.add(copy, f);
            sendBatch(b);
            return f;
        }
        List<String> key = List.of(user, sc);
        boolean holdsPermit = false;
        while (true) {
            Batch full = null;
            synchronized (batchLock) {
                Batch b = open.get(key);
                if (b != null && (b.items.size() + copy.size() <= cfg.maxBatchItems || b.items.isEmpty())) {
                    b.add(copy, f);
                    if (holdsPermit) {
                        admitted.release();
                    }
                    return f;
                }
                if (b != null) { // full: send it now, start another
                    open.remove(key);
                    full = b;
                } else if (holdsPermit) {
                    Batch nb = new Batch(user, sc);
                    nb.add(copy, f);
                    open.put(key, nb);
                    sched.schedule(() -> lingerDone(key, nb), cfg.linger.toNanos(), TimeUnit.NANOSECONDS);
                    return f;
                }
            }
            if (full != null) {
                sendBatch(full);
            }
            if (!holdsPermit) {
                if (!admit(f)) {
                    return f;
                }
                holdsPermit = true;
            }
        }
    }

    /** {@link #filter(FilterRequest)} of CANDIDATES for USER in SCENE, kept ids in the answer. */
    public CompletableFuture<FilterResponse> filter(String user, List<String> candidates, String scene) {
        return filter(FilterRequest.newBuilder().setUserId(user).addAllCandidateIds(candidates)
            .setScene(scene == null ? "" : scene).build());
    }

    /**
     * Filter, routed by REQ's user. With compact candidates (the default,
     * {@link Builder#compactCandidates}) candidate_ids are sent as their
     * item hashes (candidate_hashes, {@link Xxh3#itemHash}) and the answer
     * is given back in the form REQ asked for: kept_ids for
     * RESPONSE_MODE_IDS, kept_indexes for RESPONSE_MODE_INDEXES; `removed`
     * names positions in REQ's list either way.
     */
    public CompletableFuture<FilterResponse> filter(FilterRequest req) {
        if (!cfg.compactCandidates || req.getCandidateIdsCount() == 0 || req.getCandidateHashesCount() > 0) {
            return submit(DedupGrpc.getFilterMethod(), req.getUserId(), req);
        }
        FilterRequest.Builder b = req.toBuilder().clearCandidateIds();
        for (String id : req.getCandidateIdsList()) {
            b.addCandidateHashes(Xxh3.itemHash(id));
        }
        return submit(DedupGrpc.getFilterMethod(), req.getUserId(), b.build()).thenApply(resp -> {
            if (req.getMode() == ResponseMode.RESPONSE_MODE_INDEXES || resp.getKeptIdsCount() > 0) {
                return resp;
            }
            FilterResponse.Builder out = resp.toBuilder().clearKeptIndexes();
            for (int i : resp.getKeptIndexesList()) {
                if (i < 0 || i >= req.getCandidateIdsCount()) {
                    throw new IllegalStateException("server kept index " + i + " of "
                        + req.getCandidateIdsCount() + " candidates");
                }
                out.addKeptIds(req.getCandidateIds(i));
            }
            return out.build();
        });
    }

    /** Record PLAYS of USER in SCENE; the future completes once they are durable. */
    public CompletableFuture<RecordPlaysResponse> recordPlays(String user, List<Play> plays, String scene) {
        return recordPlays(RecordPlaysRequest.newBuilder().setUserId(user).addAllPlays(plays)
            .setScene(scene == null ? "" : scene).build());
    }

    public CompletableFuture<RecordPlaysResponse> recordPlays(RecordPlaysRequest req) {
        return submit(DedupGrpc.getRecordPlaysMethod(), req.getUserId(), req);
    }

    /** Delete USER's plays and deliveries in SCENE. */
    public CompletableFuture<ForgetUserResponse> forgetUser(String user, String scene) {
        ForgetUserRequest req = ForgetUserRequest.newBuilder().setUserId(user)
            .setScene(scene == null ? "" : scene).build();
        return submit(DedupGrpc.getForgetUserMethod(), user, req);
    }

    /** The map calls are routed by now; null before the first was read. */
    public ClusterMap clusterMap() {
        return map;
    }

    /** The address a call for USER would go to first now (for tests and logs); null when not routable. */
    public String ownerAddress(String user) {
        ClusterMap m = map;
        if (m == null || m.ownerShard(user) < 0) {
            return null;
        }
        List<String> order = candidates(m, user, 0);
        return order.isEmpty() ? null : order.get(0);
    }

    /**
     * Read the map again now (one reading at a time: a call while one is
     * under way gets that one's future). It completes with the map read, or
     * fails when no node answered; the map in use is then kept.
     */
    public CompletableFuture<ClusterMap> refreshMap() {
        return refreshMap(null);
    }

    /** {@link #refreshMap()}, asking FIRST (when not null) before the others. */
    private CompletableFuture<ClusterMap> refreshMap(String first) {
        CompletableFuture<ClusterMap> mine;
        synchronized (refreshLock) {
            if (refreshing != null) {
                return refreshing;
            }
            mine = new CompletableFuture<>();
            refreshing = mine;
        }
        LinkedHashSet<String> from = new LinkedHashSet<>();
        if (first != null) {
            from.add(first);
        }
        ClusterMap m = map;
        if (m != null) {
            for (int s = 0; s < m.shardCount(); s++) {
                for (ClusterMap.Replica r : m.replicas(s)) {
                    if (m.healthy(r) && !isDown(r.address())) {
                        from.add(r.address());
                    }
                }
            }
        }
        from.addAll(seeds);
        if (m != null) {
            from.addAll(m.addresses());
        }
        readMap(new ArrayList<>(from), 0, null, mine);
        mine.whenComplete((x, e) -> {
            synchronized (refreshLock) {
                refreshing = null;
            }
        });
        return mine;
    }

    /** Counters since the client was built. */
    public Stats stats() {
        return new Stats(this);
    }

    /** Fail what is queued or lingering, stop the timers and shut the channels. Idempotent. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        List<Batch> lingering;
        synchronized (batchLock) {
            lingering = new ArrayList<>(open.values());
            open.clear();
        }
        List<Runnable> queued;
        synchronized (dispatchLock) {
            queued = new ArrayList<>(waiting);
            waiting.clear();
        }
        for (Batch b : lingering) {
            b.fail(Status.CANCELLED.withDescription("client closed").asRuntimeException());
        }
        for (Runnable r : queued) {
            r.run(); // a queued task sees `closed` and fails its future
        }
        sched.shutdownNow();
        // Calls waiting out a backoff were in the scheduler's queue: fail them.
        for (Attempts<?, ?> a : backingOff) {
            a.finish(null, Status.CANCELLED.withDescription("client closed").asRuntimeException());
        }
        for (ManagedChannel ch : channels.values()) {
            ch.shutdownNow();
        }
        for (ManagedChannel ch : channels.values()) {
            try {
                ch.awaitTermination(2, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                break;
            }
        }
    }

    // ------------------------------------------------------------ the map

    private void readMap(List<String> addrs, int i, Throwable last, CompletableFuture<ClusterMap> out) {
        if (closed || i >= addrs.size()) {
            out.completeExceptionally(last != null ? last
                : Status.UNAVAILABLE.withDescription("no address to read the map from").asRuntimeException());
            return;
        }
        String addr = addrs.get(i);
        ClusterMapRequest req = ClusterMapRequest.getDefaultInstance();
        CallOptions opts = CallOptions.DEFAULT.withDeadlineAfter(cfg.mapTimeout.toMillis(), TimeUnit.MILLISECONDS);
        ClientCalls.asyncUnaryCall(channel(addr).newCall(DedupGrpc.getClusterMapMethod(), opts), req,
            new StreamObserver<ClusterMapResponse>() {
                private ClusterMapResponse resp;

                @Override
                public void onNext(ClusterMapResponse v) {
                    resp = v;
                }

                @Override
                public void onError(Throwable t) {
                    readMap(addrs, i + 1, t, out);
                }

                @Override
                public void onCompleted() {
                    ClusterMap nm = ClusterMap.from(resp);
                    statMapReads.incrementAndGet();
                    ClusterMap old = map;
                    if (old == null || !old.hash().equals(nm.hash())) {
                        statMapChanges.incrementAndGet();
                    }
                    map = nm;
                    out.complete(nm);
                }
            });
    }

    private boolean isDown(String addr) {
        Long until = downUntil.get(addr);
        return until != null && until - System.nanoTime() > 0;
    }

    /**
     * Where a call for USER may go, best first: the owner shard's healthy
     * replicas not marked down, from a rotating start, then its others;
     * without a routable map, every known node. Never empty while there is
     * a seed.
     */
    private List<String> candidates(ClusterMap m, String user, int start) {
        List<String> good = new ArrayList<>();
        List<String> rest = new ArrayList<>();
        int shard = m == null ? -1 : m.ownerShard(user);
        if (shard >= 0) {
            List<ClusterMap.Replica> reps = m.replicas(shard);
            int n = reps.size();
            for (int k = 0; k < n; k++) {
                ClusterMap.Replica r = reps.get(Math.floorMod(start + k, n));
                (m.healthy(r) && !isDown(r.address()) ? good : rest).add(r.address());
            }
        } else {
            List<String> all = new ArrayList<>(new LinkedHashSet<>(m == null ? seeds : m.addresses()));
            all.addAll(seeds);
            all = new ArrayList<>(new LinkedHashSet<>(all));
            int n = all.size();
            for (int k = 0; k < n; k++) {
                String a = all.get(Math.floorMod(start + k, n));
                (isDown(a) ? rest : good).add(a);
            }
        }
        good.addAll(rest);
        return good;
    }

    private Channel channel(String addr) {
        return channels.computeIfAbsent(addr, channelFactory);
    }

    /**
     * ERR with the likely cause added to its description when it is a TLS
     * connection's failure (UNAVAILABLE; dedupctl gives the same hints). A
     * node that wants a client certificate closes the handshake without a
     * word: Netty says only "Network closed for unknown reason".
     */
    private Throwable explainTls(Throwable err) {
        if (!tls || !(err instanceof StatusRuntimeException)) {
            return err;
        }
        StatusRuntimeException e = (StatusRuntimeException) err;
        Status s = e.getStatus();
        if (s.getCode() != Status.Code.UNAVAILABLE) {
            return err;
        }
        String desc = s.getDescription() == null ? "" : s.getDescription();
        boolean ssl = false;
        boolean notTls = false;
        Throwable certErr = null; // the innermost: the most precise message
        for (Throwable c = s.getCause(); c != null; c = c.getCause() == c ? null : c.getCause()) {
            ssl |= c instanceof SSLException;
            notTls |= c.getClass().getSimpleName().equals("NotSslRecordException");
            if (c instanceof CertificateException) {
                certErr = c;
            }
        }
        String hint;
        if (notTls) {
            hint = " (the node did not answer in TLS: does it serve plaintext, without rpc.tls_cert?)";
        } else if (certErr != null) {
            String why = String.valueOf(certErr.getMessage()).strip();
            hint = " (the node's TLS certificate was refused: " + why + (why.endsWith(".") ? "" : ".")
                + " Is tlsCa the CA that signed it, and does it name the address' host or tlsServerName?)";
        } else if (ssl || desc.contains("Network closed") || desc.contains("Connection reset")) {
            hint = cfg.tlsCert == null
                ? " (the node closed the TLS handshake: it likely requires a client certificate "
                    + "(rpc.tls_client_ca); give tlsClientCert)"
                : " (the TLS handshake was refused: does the node trust this client certificate's CA "
                    + "(rpc.tls_client_ca), and is tlsCa the node's CA?)";
        } else {
            return err;
        }
        return new StatusRuntimeException(s.withDescription(desc + hint), e.getTrailers());
    }

    // --------------------------------------------------- backpressure

    /** Take room for one call, or fail F with BackpressureException (returns false). */
    private boolean admit(CompletableFuture<?> f) {
        if (closed) {
            f.completeExceptionally(Status.CANCELLED.withDescription("client closed").asRuntimeException());
            return false;
        }
        boolean ok;
        if (cfg.backpressure == Backpressure.FAIL_FAST) {
            ok = admitted.tryAcquire();
        } else {
            try {
                ok = admitted.tryAcquire(cfg.blockTimeout.toNanos(), TimeUnit.NANOSECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                ok = false;
            }
        }
        if (!ok) {
            statRejected.incrementAndGet();
            f.completeExceptionally(new BackpressureException("dedupd client: " + cfg.maxInFlight
                + " calls in flight and " + cfg.maxQueued + " queued"));
        }
        return ok;
    }

    /** Run TASK when fewer than maxInFlight calls are running; the task calls finished() once. */
    private void dispatch(Runnable task) {
        synchronized (dispatchLock) {
            if (running >= cfg.maxInFlight) {
                waiting.add(task);
                return;
            }
            running++;
        }
        task.run();
    }

    private void finished() {
        admitted.release();
        Runnable next;
        synchronized (dispatchLock) {
            next = waiting.poll();
            if (next == null) {
                running--;
            }
        }
        if (next != null) {
            next.run();
        }
    }

    private <Req, Resp> CompletableFuture<Resp> submit(MethodDescriptor<Req, Resp> method, String user, Req req) {
        CompletableFuture<Resp> f = new CompletableFuture<>();
        // An empty user is sent unrouted: the server refuses it, and the caller sees its status.
        String u = user == null ? "" : user;
        if (!admit(f)) {
            return f;
        }
        dispatch(() -> new Attempts<>(method, u, req, f).begin());
        return f;
    }

    // --------------------------------------------------------- coalescing

    private final class Batch {
        final String user;
        final String scene;
        final List<String> items = new ArrayList<>();
        final List<CompletableFuture<RecordDeliveryResponse>> waiters = new ArrayList<>();
        long deliveredAtMs;

        Batch(String user, String scene) {
            this.user = user;
            this.scene = scene;
        }

        void add(List<String> more, CompletableFuture<RecordDeliveryResponse> f) {
            items.addAll(more);
            waiters.add(f);
            deliveredAtMs = System.currentTimeMillis();
        }

        void fail(Throwable t) {
            for (CompletableFuture<RecordDeliveryResponse> w : waiters) {
                w.completeExceptionally(t);
            }
            admitted.release();
        }
    }

    private void lingerDone(List<String> key, Batch b) {
        synchronized (batchLock) {
            if (open.get(key) != b) {
                return; // sent when it filled up, or failed by close()
            }
            open.remove(key);
        }
        sendBatch(b);
    }

    /** Send B as one RecordDelivery; B holds one admission permit. */
    private void sendBatch(Batch b) {
        RecordDeliveryRequest req = RecordDeliveryRequest.newBuilder().setUserId(b.user)
            .addAllItemIds(b.items).setScene(b.scene).setDeliveredAtMs(b.deliveredAtMs).build();
        statDeliveryCalls.incrementAndGet();
        CompletableFuture<RecordDeliveryResponse> f = new CompletableFuture<>();
        f.whenComplete((resp, err) -> {
            for (CompletableFuture<RecordDeliveryResponse> w : b.waiters) {
                if (err != null) {
                    w.completeExceptionally(err);
                } else {
                    w.complete(resp);
                }
            }
        });
        dispatch(() -> new Attempts<>(DedupGrpc.getRecordDeliveryMethod(), b.user, req, f).begin());
    }

    // ------------------------------------------------------ one call's tries

    /** The attempts of one call: routing, failover, backoff, map refresh. Holds one permit until done. */
    private final class Attempts<Req, Resp> {
        final MethodDescriptor<Req, Resp> method;
        final String user;
        final Req req;
        final CompletableFuture<Resp> out;
        final long deadline;
        final int start = rotor.getAndIncrement();
        final Set<String> tried = new HashSet<>();
        int attempts;
        int round;
        int mapRetries;
        boolean done;

        Attempts(MethodDescriptor<Req, Resp> method, String user, Req req, CompletableFuture<Resp> out) {
            this.method = method;
            this.user = user;
            this.req = req;
            this.out = out;
            this.deadline = System.nanoTime() + cfg.deadline.toNanos();
        }

        void begin() {
            if (closed) {
                finish(null, Status.CANCELLED.withDescription("client closed").asRuntimeException());
                return;
            }
            // Before the first map was read, wait for it (bounded by its own deadline).
            firstMap.whenComplete((x, e) -> attempt());
        }

        void attempt() {
            if (closed) {
                finish(null, Status.CANCELLED.withDescription("client closed").asRuntimeException());
                return;
            }
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                finish(null, Status.DEADLINE_EXCEEDED.withDescription("dedupd client: deadline passed after "
                    + attempts + " attempts").asRuntimeException());
                return;
            }
            ClusterMap m = map;
            boolean routed = m != null && !user.isEmpty() && m.ownerShard(user) >= 0;
            List<String> order = user.isEmpty() ? candidates(null, user, start)
                : candidates(m, user, start);
            String addr = null;
            for (String a : order) {
                if (!tried.contains(a)) {
                    addr = a;
                    break;
                }
            }
            if (addr == null) { // every candidate failed this round: back off, then all again
                tried.clear();
                round++;
                long cap = Math.min(cfg.retryMax.toNanos(), cfg.retryBase.toNanos() << Math.min(round - 1, 20));
                long wait = ThreadLocalRandom.current().nextLong(Math.max(1, cap));
                statRetries.incrementAndGet();
                backingOff.add(this);
                try {
                    sched.schedule(() -> {
                        backingOff.remove(this);
                        attempt();
                    }, Math.min(wait, Math.max(0, left)), TimeUnit.NANOSECONDS);
                } catch (java.util.concurrent.RejectedExecutionException e) {
                    backingOff.remove(this);
                    finish(null, Status.CANCELLED.withDescription("client closed").asRuntimeException());
                }
                return;
            }
            tried.add(addr);
            attempts++;
            Metadata md = new Metadata();
            if (routed) {
                md.put(MAP_HASH_KEY, m.hash());
            }
            Channel ch = ClientInterceptors.intercept(channel(addr), MetadataUtils.newAttachHeadersInterceptor(md));
            final String sentTo = addr;
            statCalls.incrementAndGet();
            ClientCalls.asyncUnaryCall(ch.newCall(method, CallOptions.DEFAULT.withDeadlineAfter(left,
                TimeUnit.NANOSECONDS)), req, new StreamObserver<Resp>() {
                    private Resp resp;

                    @Override
                    public void onNext(Resp v) {
                        resp = v;
                    }

                    @Override
                    public void onError(Throwable t) {
                        failed(sentTo, t);
                    }

                    @Override
                    public void onCompleted() {
                        finish(resp, null);
                    }
                });
        }

        void failed(String addr, Throwable t) {
            Status s = Status.fromThrowable(t);
            Metadata trailers = Status.trailersFromThrowable(t);
            String theirs = trailers == null ? null : trailers.get(MAP_HASH_KEY);
            if (s.getCode() == Status.Code.FAILED_PRECONDITION && theirs != null) {
                statStaleMap.incrementAndGet();
                if (mapRetries++ >= cfg.maxMapRetries) {
                    finish(null, t);
                    return;
                }
                tried.clear();
                // From the node that refused: its map routes the user to a
                // node that answers it. While a split rolls out, another
                // node may run the other map, which sends the call back here.
                refreshMap(addr).whenComplete((nm, e) -> attempt());
                return;
            }
            if (failsOver(t) && attempts < cfg.maxAttempts) {
                downUntil.put(addr, System.nanoTime() + cfg.downFor.toNanos());
                statFailovers.incrementAndGet();
                refreshMap();
                attempt();
                return;
            }
            finish(null, t);
        }

        void finish(Resp resp, Throwable err) {
            synchronized (this) {
                if (done) {
                    return;
                }
                done = true;
            }
            finished();
            if (err != null) {
                out.completeExceptionally(explainTls(err));
            } else {
                out.complete(resp);
            }
        }
    }

    /**
     * Whether an attempt that failed with T goes to the next replica:
     * UNAVAILABLE; CANCELLED, which is not this client's doing (it cancels
     * nothing), but a node shutting down cancels the calls that reach it
     * once its shutdown began, without working on them; and a connection
     * lost under the call (a node killed): grpc-java's Netty transport
     * reports that as UNKNOWN "channel closed" with a
     * {@link java.nio.channels.ClosedChannelException} as cause. Every
     * method is safe to send again (writes store the same items again).
     */
    static boolean failsOver(Throwable t) {
        Status s = Status.fromThrowable(t);
        if (s.getCode() == Status.Code.UNAVAILABLE || s.getCode() == Status.Code.CANCELLED) {
            return true;
        }
        if (s.getCode() != Status.Code.UNKNOWN) {
            return false;
        }
        for (Throwable c = s.getCause(); c != null; c = c.getCause()) {
            if (c instanceof java.nio.channels.ClosedChannelException) {
                return true;
            }
        }
        return false;
    }

    // ------------------------------------------------------------ stats

    /** Counters of one client, read at one moment (each counter exact, the set not atomic). */
    public static final class Stats {
        /** RPC attempts sent (each try of each call, not ClusterMap). */
        public final long calls;
        /** recordDelivery() calls accepted. */
        public final long deliveries;
        /** RecordDelivery calls they were coalesced into. */
        public final long deliveryCalls;
        /** Calls refused by backpressure. */
        public final long rejected;
        /** Attempts that got UNAVAILABLE and moved to another replica. */
        public final long failovers;
        /** Backoff waits after every replica of a shard failed. */
        public final long retries;
        /** FAILED_PRECONDITION answers for a stale map. */
        public final long staleMap;
        /** Maps read, and how many of them had a new hash. */
        public final long mapReads;
        public final long mapChanges;

        private Stats(DedupdClient c) {
            calls = c.statCalls.get();
            deliveries = c.statDeliveries.get();
            deliveryCalls = c.statDeliveryCalls.get();
            rejected = c.statRejected.get();
            failovers = c.statFailovers.get();
            retries = c.statRetries.get();
            staleMap = c.statStaleMap.get();
            mapReads = c.statMapReads.get();
            mapChanges = c.statMapChanges.get();
        }

        @Override
        public String toString() {
            return "calls=" + calls + " deliveries=" + deliveries + " delivery_calls=" + deliveryCalls
                + " rejected=" + rejected + " failovers=" + failovers + " retries=" + retries
                + " stale_map=" + staleMap + " map_reads=" + mapReads + " map_changes=" + mapChanges;
        }
    }

    // ---------------------------------------------------------- builder

    /** Options of a client; every one has a default but the seeds. */
    public static final class Builder {
        private final List<String> seeds = new ArrayList<>();
        private Duration linger = Duration.ofMillis(1);
        private int maxBatchItems = 1000;
        private int maxInFlight = 64;
        private int maxQueued = 1024;
        private Backpressure backpressure = Backpressure.FAIL_FAST;
        private Duration blockTimeout = Duration.ofSeconds(1);
        private Duration deadline = Duration.ofSeconds(5);
        private int maxAttempts = 8;
        private int maxMapRetries = 3;
        private Duration retryBase = Duration.ofMillis(20);
        private Duration retryMax = Duration.ofMillis(500);
        private Duration downFor = Duration.ofSeconds(2);
        private Duration mapRefresh = Duration.ofSeconds(10);
        private Duration mapTimeout = Duration.ofSeconds(2);
        private boolean compactCandidates = true;
        private Function<String, ManagedChannel> channelFactory; // null: Netty, plaintext or TLS
        private Path tlsCa;
        private Path tlsCert;
        private Path tlsKey;
        private String tlsServerName;

        private Builder() {}

        /** A Netty channel to ADDR ("host:port", "[v6]:port"): TLS with CREDS, or plaintext without. */
        private static ManagedChannel netty(String addr, ChannelCredentials creds, String serverName) {
            int colon = addr.lastIndexOf(':');
            if (colon <= 0) {
                throw new IllegalArgumentException("address " + addr + " is not host:port");
            }
            String host = addr.substring(0, colon);
            if (host.startsWith("[") && host.endsWith("]")) {
                host = host.substring(1, host.length() - 1);
            }
            int port = Integer.parseInt(addr.substring(colon + 1));
            if (creds == null) {
                return NettyChannelBuilder.forAddress(host, port).usePlaintext().build();
            }
            NettyChannelBuilder b = NettyChannelBuilder.forAddress(host, port, creds);
            if (serverName != null) {
                b.overrideAuthority(serverName);
            }
            return b.build();
        }

        /** Addresses ("host:port") the first map is read from. At least one. */
        public Builder seeds(String... addrs) {
            return seeds(List.of(addrs));
        }

        public Builder seeds(List<String> addrs) {
            for (String a : addrs) {
                if (!a.isBlank()) {
                    seeds.add(a.trim());
                }
            }
            return this;
        }

        /** How long a delivery waits for others of its user and scene (default 1 ms; 0: no coalescing). */
        public Builder linger(Duration d) {
            linger = nonNegative(d, "linger");
            return this;
        }

        /** The most items one coalesced RecordDelivery carries (default 1000). */
        public Builder maxBatchItems(int n) {
            maxBatchItems = positive(n, "maxBatchItems");
            return this;
        }

        /** Calls on the wire at once (default 64). */
        public Builder maxInFlight(int n) {
            maxInFlight = positive(n, "maxInFlight");
            return this;
        }

        /** Calls waiting for room beyond maxInFlight (default 1024; 0: none wait). */
        public Builder maxQueued(int n) {
            if (n < 0) {
                throw new IllegalArgumentException("maxQueued must be >= 0");
            }
            maxQueued = n;
            return this;
        }

        /** What a call beyond maxInFlight + maxQueued does (default FAIL_FAST). */
        public Builder backpressure(Backpressure b) {
            backpressure = Objects.requireNonNull(b);
            return this;
        }

        /** With Backpressure.BLOCK, how long a caller waits for room (default 1 s). */
        public Builder blockTimeout(Duration d) {
            blockTimeout = nonNegative(d, "blockTimeout");
            return this;
        }

        /** A call's whole time, every retry included (default 5 s). */
        public Builder deadline(Duration d) {
            deadline = nonNegative(d, "deadline");
            return this;
        }

        /** Tries of one call across replicas and rounds (default 8). */
        public Builder maxAttempts(int n) {
            maxAttempts = positive(n, "maxAttempts");
            return this;
        }

        /** Re-routes of one call after stale-map answers (default 3). */
        public Builder maxMapRetries(int n) {
            maxMapRetries = n;
            return this;
        }

        /** Backoff after a round of failed replicas: jittered, from base doubling up to max (20 ms, 500 ms). */
        public Builder retryBackoff(Duration base, Duration max) {
            retryBase = nonNegative(base, "retry base");
            retryMax = nonNegative(max, "retry max");
            return this;
        }

        /** How long a replica that answered UNAVAILABLE is skipped (default 2 s). */
        public Builder downFor(Duration d) {
            downFor = nonNegative(d, "downFor");
            return this;
        }

        /** The map is read again this often (default 10 s; 0: only on demand). */
        public Builder mapRefresh(Duration d) {
            mapRefresh = nonNegative(d, "mapRefresh");
            return this;
        }

        /** Deadline of one ClusterMap call (default 2 s). */
        public Builder mapTimeout(Duration d) {
            mapTimeout = nonNegative(d, "mapTimeout");
            return this;
        }

        /** Send Filter candidates as item hashes, candidate_hashes = 7 (default true). */
        public Builder compactCandidates(boolean on) {
            compactCandidates = on;
            return this;
        }

        /**
         * Speak TLS to every node (dedupctl's {@code --tls-ca}): a node's
         * certificate must be signed by the CA in this PEM file (only this
         * CA is trusted, not the system's). Without it the client speaks
         * plaintext. The file is read by {@link #build}.
         */
        public Builder tlsCa(Path caPem) {
            tlsCa = Objects.requireNonNull(caPem, "tlsCa");
            return this;
        }

        /**
         * This client's certificate chain and its private key, both PEM
         * (dedupctl's {@code --tls-cert} and {@code --tls-key}), for nodes
         * with {@code rpc.tls_client_ca} (mutual TLS): they refuse the
         * handshake without it, and judge {@code rpc.allow_read} and
         * {@code rpc.allow_write} by its identity (its subject CN or any
         * subject alternative name). The two go together (null and null: no
         * client certificate), and need {@link #tlsCa}. The key must be
         * PKCS#8 ("BEGIN PRIVATE KEY", what openssl 3 writes; convert others
         * with {@code openssl pkcs8 -topk8 -nocrypt}). Read by {@link #build},
         * which also checks that the key is the certificate's.
         */
        public Builder tlsClientCert(Path certPem, Path keyPem) {
            if ((certPem == null) != (keyPem == null)) {
                throw new IllegalArgumentException("tlsClientCert: the certificate and its key go together");
            }
            tlsCert = certPem;
            tlsKey = keyPem;
            return this;
        }

        /**
         * Check the nodes' certificates for NAME instead of each address'
         * host (dedupctl's {@code --tls-name}); it is also the name the
         * client asks for (SNI) and its {@code :authority}. For addresses
         * the certificates do not name, such as a map of IP addresses and
         * certificates naming a DNS name. Needs {@link #tlsCa}.
         */
        public Builder tlsServerName(String name) {
            if (name == null || name.isBlank()) {
                throw new IllegalArgumentException("tlsServerName must not be empty");
            }
            tlsServerName = name;
            return this;
        }

        /**
         * How a channel to an address is made (default: Netty, plaintext or
         * with the TLS options above; tests pass in-process channels). A
         * factory makes its channels with credentials of its own: it and the
         * TLS options exclude each other. The client shuts the channels down.
         */
        public Builder channelFactory(Function<String, ManagedChannel> f) {
            channelFactory = Objects.requireNonNull(f);
            return this;
        }

        /**
         * The client. IllegalArgumentException for invalid options: no
         * seed, TLS options without {@link #tlsCa}, TLS options with a
         * {@link #channelFactory}, a TLS file unreadable or not PEM of what
         * it should hold, a key not the client certificate's; the message
         * names the option and the file.
         */
        public DedupdClient build() {
            if (seeds.isEmpty()) {
                throw new IllegalArgumentException("DedupdClient needs at least one seed address");
            }
            boolean tls = tlsCa != null || tlsCert != null || tlsServerName != null;
            if (tls && tlsCa == null) {
                throw new IllegalArgumentException("tlsClientCert and tlsServerName need tlsCa");
            }
            if (tls && channelFactory != null) {
                throw new IllegalArgumentException("channelFactory and the TLS options (tlsCa, tlsClientCert, "
                    + "tlsServerName) exclude each other: make the factory's channels with the credentials");
            }
            Function<String, ManagedChannel> factory = channelFactory;
            if (tls) {
                ChannelCredentials creds = tlsCredentials();
                String name = tlsServerName;
                factory = addr -> netty(addr, creds, name);
            } else if (factory == null) {
                factory = addr -> netty(addr, null, null);
            }
            return new DedupdClient(this, factory);
        }

        /** The credentials of the TLS files, each read and parsed now (errors name the file). */
        private ChannelCredentials tlsCredentials() {
            byte[] ca = readTlsFile("tlsCa", tlsCa);
            ChannelCredentials creds = tlsCredentials(ca, null, null, "tlsCa " + tlsCa);
            if (tlsCert != null) {
                byte[] cert = readTlsFile("tlsClientCert certificate", tlsCert);
                byte[] key = readTlsFile("tlsClientCert key", tlsKey);
                creds = tlsCredentials(ca, cert, key, "tlsClientCert " + tlsCert + " and " + tlsKey);
                if (!keyMatches(cert, key)) {
                    throw new IllegalArgumentException("tlsClientCert: the key " + tlsKey
                        + " is not the key of the certificate " + tlsCert);
                }
            }
            return creds;
        }

        /**
         * Whether KEY (PKCS#8 PEM) signs what the first certificate of CERT
         * (PEM) verifies; true when that cannot be told (an algorithm not
         * known here): Netty checks the pair only at the first handshake.
         */
        private static boolean keyMatches(byte[] cert, byte[] key) {
            try {
                PublicKey pub = CertificateFactory.getInstance("X.509")
                    .generateCertificate(new ByteArrayInputStream(cert)).getPublicKey();
                String pem = new String(key, StandardCharsets.US_ASCII);
                int begin = pem.indexOf("-----BEGIN PRIVATE KEY-----");
                int end = pem.indexOf("-----END PRIVATE KEY-----");
                if (begin < 0 || end < begin) {
                    return true;
                }
                byte[] der = Base64.getMimeDecoder().decode(pem.substring(begin + 27, end));
                String alg = pub.getAlgorithm();
                PrivateKey priv = KeyFactory.getInstance(alg).generatePrivate(new PKCS8EncodedKeySpec(der));
                String sigAlg = alg.equals("EC") ? "SHA256withECDSA" : alg.equals("RSA") ? "SHA256withRSA"
                    : alg.equals("EdDSA") || alg.equals("Ed25519") || alg.equals("Ed448") ? alg : null;
                if (sigAlg == null) {
                    return true;
                }
                byte[] probe = "dedupd-client key check".getBytes(StandardCharsets.US_ASCII);
                Signature sign = Signature.getInstance(sigAlg);
                sign.initSign(priv);
                sign.update(probe);
                byte[] sig = sign.sign();
                Signature verify = Signature.getInstance(sigAlg);
                verify.initVerify(pub);
                verify.update(probe);
                return verify.verify(sig);
            } catch (GeneralSecurityException | IllegalArgumentException e) {
                // Another key type than the certificate's is a mismatch too.
                return !(e instanceof InvalidKeySpecException || e instanceof InvalidKeyException);
            }
        }

        private static ChannelCredentials tlsCredentials(byte[] ca, byte[] cert, byte[] key, String what) {
            TlsChannelCredentials.Builder b = TlsChannelCredentials.newBuilder();
            try {
                b.trustManager(new ByteArrayInputStream(ca));
                if (cert != null) {
                    b.keyManager(new ByteArrayInputStream(cert), new ByteArrayInputStream(key));
                }
            } catch (IOException e) { // not from byte arrays
                throw new IllegalArgumentException(what + ": " + e.getMessage(), e);
            }
            ChannelCredentials creds = b.build();
            // Netty parses the PEM only when it makes a channel's TLS context:
            // make one now (no connection) so a bad file fails build().
            try {
                NettyChannelBuilder.forAddress("localhost", 1, creds);
            } catch (RuntimeException e) {
                String pkcs8 = key != null && !new String(key, StandardCharsets.US_ASCII)
                    .contains("-----BEGIN PRIVATE KEY-----")
                    ? "; the key must be PKCS#8, BEGIN PRIVATE KEY: openssl pkcs8 -topk8 -nocrypt converts it" : "";
                throw new IllegalArgumentException(what + ": not usable PEM (" + e.getMessage() + ")" + pkcs8, e);
            }
            return creds;
        }

        private static byte[] readTlsFile(String what, Path p) {
            try {
                byte[] b = Files.readAllBytes(p);
                if (b.length == 0) {
                    throw new IllegalArgumentException(what + " " + p + ": empty file");
                }
                return b;
            } catch (IOException e) {
                throw new IllegalArgumentException(what + " " + p + ": cannot read ("
                    + e.getClass().getSimpleName() + (e.getMessage() == null || e.getMessage().equals(p.toString())
                        ? "" : ": " + e.getMessage()) + ")", e);
            }
        }

        private static Duration nonNegative(Duration d, String what) {
            if (d == null || d.isNegative()) {
                throw new IllegalArgumentException(what + " must be >= 0");
            }
            return d;
        }

        private static int positive(int n, String what) {
            if (n < 1) {
                throw new IllegalArgumentException(what + " must be > 0");
            }
            return n;
        }
    }
}
