// SPDX-License-Identifier: Apache-2.0
//
// FeedServerClient - the Java feed server's path through dedupd, with the
// grpc-java stubs generated from proto/dedup.proto: after each response it
// calls RecordDelivery with what it showed, and the next refresh's Filter
// must already drop those items (no play event needed). Run against a live
// dedupd: java -cp ... dedup.client.FeedServerClient HOST:PORT
// Exit 0 when every check passed, 1 otherwise.
package dedup.client;

import dedup.v1.DedupGrpc;
import dedup.v1.FilterRequest;
import dedup.v1.FilterResponse;
import dedup.v1.ForgetUserRequest;
import dedup.v1.Reason;
import dedup.v1.RecordDeliveryRequest;
import dedup.v1.RecordDeliveryResponse;
import dedup.v1.Removed;
import dedup.v1.ResponseMode;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.NettyChannelBuilder;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;

public final class FeedServerClient {
    private static int checks;
    private static int failures;

    private static void expect(boolean cond, String what) {
        checks++;
        if (!cond) {
            failures++;
            System.err.println("FAILED: " + what);
        }
    }

    private static DedupGrpc.DedupBlockingStub stub(ManagedChannel ch) {
        return DedupGrpc.newBlockingStub(ch).withDeadlineAfter(10, TimeUnit.SECONDS);
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: FeedServerClient HOST:PORT");
            System.exit(2);
        }
        String[] hp = args[0].split(":");
        ManagedChannel ch = NettyChannelBuilder.forAddress(hp[0], Integer.parseInt(hp[1]))
                .usePlaintext().build();
        try {
            run(ch);
        } finally {
            ch.shutdownNow();
            ch.awaitTermination(5, TimeUnit.SECONDS);
        }
        System.err.println("FeedServerClient: " + checks + " checks, " + failures + " failed");
        System.exit(failures == 0 ? 0 : 1);
    }

    private static void run(ManagedChannel ch) {
        String user = "java-user-" + ProcessHandle.current().pid();
        List<String> pool = new ArrayList<>();
        for (int i = 0; i < 200; i++) {
            pool.add("video-" + i);
        }

        // Five refreshes of a feed page of 20: each Filter over the whole
        // pool must drop everything delivered by the previous pages, at once.
        Set<String> shown = new HashSet<>();
        for (int page = 0; page < 5; page++) {
            FilterResponse resp = stub(ch).filter(FilterRequest.newBuilder()
                    .setUserId(user).addAllCandidateIds(pool).setExplain(true).build());
            expect(!resp.getDegraded(), "page " + page + ": degraded");
            expect(resp.getKeptIdsCount() == pool.size() - shown.size(),
                    "page " + page + ": kept " + resp.getKeptIdsCount() + ", want "
                            + (pool.size() - shown.size()));
            for (String id : resp.getKeptIdsList()) {
                expect(!shown.contains(id), "page " + page + ": delivered " + id + " kept");
            }
            expect(resp.getRemovedDelivered() == shown.size(),
                    "page " + page + ": removed_delivered " + resp.getRemovedDelivered());
            for (Removed r : resp.getRemovedList()) {
                expect(r.getReason() == Reason.REASON_DELIVERED
                                && shown.contains(pool.get(r.getIndex())),
                        "page " + page + ": removed " + r.getIndex() + " " + r.getReason());
            }
            // The feed server shows the first 20 kept and records them.
            List<String> pageIds = resp.getKeptIdsList().subList(0,
                    Math.min(20, resp.getKeptIdsCount()));
            RecordDeliveryResponse rd = stub(ch).recordDelivery(RecordDeliveryRequest.newBuilder()
                    .setUserId(user).addAllItemIds(pageIds)
                    .setDeliveredAtMs(System.currentTimeMillis()).build());
            shown.addAll(pageIds);
            expect(rd.getRecentSize() == shown.size(),
                    "page " + page + ": recent_size " + rd.getRecentSize() + ", want " + shown.size());
        }

        // Indexes mode gives positions in the request.
        FilterResponse idx = stub(ch).filter(FilterRequest.newBuilder().setUserId(user)
                .addAllCandidateIds(pool).setMode(ResponseMode.RESPONSE_MODE_INDEXES).build());
        expect(idx.getKeptIdsCount() == 0, "indexes mode returned ids");
        expect(idx.getKeptIndexesCount() == pool.size() - shown.size(),
                "indexes mode kept " + idx.getKeptIndexesCount());
        for (int i : idx.getKeptIndexesList()) {
            expect(!shown.contains(pool.get(i)), "indexes mode kept delivered index " + i);
        }

        // Bad input is refused with INVALID_ARGUMENT, and the channel stays usable.
        try {
            stub(ch).recordDelivery(RecordDeliveryRequest.newBuilder().addItemIds("x").build());
            expect(false, "empty user_id accepted");
        } catch (StatusRuntimeException e) {
            expect(e.getStatus().getCode() == Status.Code.INVALID_ARGUMENT,
                    "empty user_id: " + e.getStatus());
        }

        // ForgetUser clears the deliveries.
        stub(ch).forgetUser(ForgetUserRequest.newBuilder().setUserId(user).build());
        FilterResponse after = stub(ch).filter(FilterRequest.newBuilder()
                .setUserId(user).addAllCandidateIds(pool).build());
        expect(after.getKeptIdsCount() == pool.size(),
                "after ForgetUser kept " + after.getKeptIdsCount());
    }
}
