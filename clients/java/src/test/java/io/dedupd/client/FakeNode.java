// SPDX-License-Identifier: Apache-2.0
package io.dedupd.client;

import dedup.v1.ClusterMapRequest;
import dedup.v1.ClusterMapResponse;
import dedup.v1.DedupGrpc;
import dedup.v1.FilterRequest;
import dedup.v1.FilterResponse;
import dedup.v1.RecordDeliveryRequest;
import dedup.v1.RecordDeliveryResponse;
import dedup.v1.RecordPlaysRequest;
import dedup.v1.RecordPlaysResponse;
import io.grpc.Context;
import io.grpc.Contexts;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.Status;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.StreamObserver;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

/**
 * An in-process dedupd node for the unit tests: answers ClusterMap with
 * the map it is given, checks `dedupd-map-hash` as the server does
 * (FAILED_PRECONDITION with its own hash in the trailers; a node mid-split
 * also accepts the hash of the map its own splits), records what it
 * was sent, and can refuse (UNAVAILABLE), cancel (CANCELLED) or hold calls.
 */
final class FakeNode implements AutoCloseable {
    static final Context.Key<String> HASH = Context.key("hash");

    final String name;
    final AtomicReference<ClusterMapResponse> map = new AtomicReference<>();
    /** The hash this node checks calls against (null: accepts any). */
    final AtomicReference<String> ownHash = new AtomicReference<>();
    /** Accepted too (null: none): the hash of the map its own splits, as a node mid-split. */
    final AtomicReference<String> splitHash = new AtomicReference<>();
    final List<RecordDeliveryRequest> deliveries = new CopyOnWriteArrayList<>();
    final List<FilterRequest> filters = new CopyOnWriteArrayList<>();
    final List<String> hashesSeen = new CopyOnWriteArrayList<>();
    final AtomicInteger calls = new AtomicInteger();
    final AtomicInteger unavailable = new AtomicInteger(); // refuse this many calls
    final AtomicInteger cancelled = new AtomicInteger(); // cancel this many (a node shutting down)
    final AtomicInteger concurrent = new AtomicInteger();
    final AtomicInteger maxConcurrent = new AtomicInteger();
    volatile boolean down; // refuse everything, ClusterMap too
    volatile CountDownLatch hold; // calls wait for it when set
    private final Server server;

    FakeNode(String name) throws Exception {
        this.name = name;
        ServerInterceptor hashReader = new ServerInterceptor() {
            @Override
            public <Q, R> ServerCall.Listener<Q> interceptCall(ServerCall<Q, R> call, Metadata headers,
                                                               ServerCallHandler<Q, R> next) {
                String h = headers.get(DedupdClient.MAP_HASH_KEY);
                return Contexts.interceptCall(Context.current().withValue(HASH, h), call, headers, next);
            }
        };
        server = InProcessServerBuilder.forName(name).executor(java.util.concurrent.Executors.newCachedThreadPool())
            .addService(ServerInterceptors.intercept(new Impl(), hashReader)).build().start();
    }

    /** Whether the call may go on; otherwise it was answered. */
    private boolean admit(StreamObserver<?> obs) {
        calls.incrementAndGet();
        String h = HASH.get();
        hashesSeen.add(h == null ? "" : h);
        if (down) {
            obs.onError(Status.UNAVAILABLE.withDescription(name + " down").asRuntimeException());
            return false;
        }
        if (unavailable.getAndUpdate(n -> n > 0 ? n - 1 : 0) > 0) {
            obs.onError(Status.UNAVAILABLE.withDescription(name + " refuses").asRuntimeException());
            return false;
        }
        if (cancelled.getAndUpdate(n -> n > 0 ? n - 1 : 0) > 0) {
            obs.onError(Status.CANCELLED.withDescription(name + " shutting down").asRuntimeException());
            return false;
        }
        String mine = ownHash.get();
        if (h != null && mine != null && !h.equals(mine) && !h.equals(splitHash.get())) {
            Metadata t = new Metadata();
            t.put(DedupdClient.MAP_HASH_KEY, mine);
            obs.onError(Status.FAILED_PRECONDITION.withDescription("stale map").asRuntimeException(t));
            return false;
        }
        int c = concurrent.incrementAndGet();
        maxConcurrent.accumulateAndGet(c, Math::max);
        CountDownLatch l = hold;
        if (l != null) {
            try {
                l.await(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        concurrent.decrementAndGet();
        return true;
    }

    private final class Impl extends DedupGrpc.DedupImplBase {
        @Override
        public void clusterMap(ClusterMapRequest req, StreamObserver<ClusterMapResponse> obs) {
            if (down) {
                obs.onError(Status.UNAVAILABLE.asRuntimeException());
                return;
            }
            obs.onNext(map.get());
            obs.onCompleted();
        }

        @Override
        public void recordDelivery(RecordDeliveryRequest req, StreamObserver<RecordDeliveryResponse> obs) {
            if (!admit(obs)) {
                return;
            }
            deliveries.add(req);
            obs.onNext(RecordDeliveryResponse.newBuilder().setRecentSize(req.getItemIdsCount()).build());
            obs.onCompleted();
        }

        @Override
        public void recordPlays(RecordPlaysRequest req, StreamObserver<RecordPlaysResponse> obs) {
            if (!admit(obs)) {
                return;
            }
            obs.onNext(RecordPlaysResponse.newBuilder().setAccepted(req.getPlaysCount()).build());
            obs.onCompleted();
        }

        @Override
        public void filter(FilterRequest req, StreamObserver<FilterResponse> obs) {
            if (!admit(obs)) {
                return;
            }
            filters.add(req);
            // Keeps the candidates at even positions.
            FilterResponse.Builder b = FilterResponse.newBuilder();
            int n = Math.max(req.getCandidateIdsCount(), req.getCandidateHashesCount());
            for (int i = 0; i < n; i += 2) {
                if (req.getCandidateHashesCount() > 0) {
                    b.addKeptIndexes(i);
                } else {
                    b.addKeptIds(req.getCandidateIds(i));
                }
            }
            obs.onNext(b.build());
            obs.onCompleted();
        }
    }

    @Override
    public void close() {
        server.shutdownNow();
    }
}
