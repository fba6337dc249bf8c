// SPDX-License-Identifier: Apache-2.0
//
// ClientCheck - the Java feed server's path through dedupd, now through the
// library (clients/java, io.dedupd.client.DedupdClient), driven by
// tests/integration/test_clients.py against a real fleet. It reads one
// command a line on stdin and answers each with one line on stdout:
// "ok key=value ..." or "fail reason". Commands:
//
//   feed            the old FeedServerClient checks: five feed pages, each
//                   Filter drops what the previous pages delivered (exact
//                   kept sets), compact candidates keep what ids keep,
//                   indexes mode, INVALID_ARGUMENT for an empty user,
//                   ForgetUser clears the deliveries
//   owners U...     the address each user is routed to
//   route N         N users: one delivery and one Filter each
//   coalesce U P    U users, P deliveries each at once (one linger): the
//                   client's counts; then every delivered item is filtered
//   backpressure N  N deliveries at once through a client bounded to 2 in
//                   flight + 2 queued (fail fast), then the same through a
//                   blocking one: accepted/rejected counts
//   load S T        S seconds of deliveries and Filters on T threads:
//                   calls, failed (the first errors on stderr)
//   stats           the main client's counters and map hash
//   map             the client's map: hash, and each replica ready or down
//   refresh         read the map now; its hash
//   quit
//
// java -cp ... ClientCheck SEED[,SEED...]
import dedup.v1.FilterRequest;
import dedup.v1.FilterResponse;
import dedup.v1.Reason;
import dedup.v1.RecordDeliveryResponse;
import dedup.v1.Removed;
import dedup.v1.ResponseMode;
import io.dedupd.client.BackpressureException;
import io.dedupd.client.ClusterMap;
import io.dedupd.client.DedupdClient;
import io.grpc.Status;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

public final class ClientCheck {
    private static String[] seeds;
    private static DedupdClient client;
    private static final List<String> failures = new ArrayList<>();
    private static int checks;

    private static void expect(boolean cond, String what) {
        checks++;
        if (!cond) {
            failures.add(what);
            System.err.println("FAILED: " + what);
        }
    }

    private static <T> T get(CompletableFuture<T> f) throws Exception {
        return f.get(30, TimeUnit.SECONDS);
    }

    private static Throwable cause(Throwable t) {
        return t instanceof ExecutionException && t.getCause() != null ? t.getCause() : t;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: ClientCheck SEED[,SEED...]");
            System.exit(2);
        }
        seeds = args[0].split(",");
        // The map is read every second here (10 s by default) so that the
        // test sees a killed node leave it and come back within seconds.
        // A map read may wait 10 s here (2 s by default): a cold JVM on a
        // busy CI machine took longer than 2 s to connect.
        client = DedupdClient.newBuilder().seeds(seeds).mapRefresh(Duration.ofSeconds(1))
            .mapTimeout(Duration.ofSeconds(10)).build();
        for (int i = 0; client.clusterMap() == null; i++) {
            try {
                get(client.refreshMap());
            } catch (ExecutionException e) {
                if (i >= 5) {
                    throw e;
                }
                System.err.println("ClientCheck: reading the map: " + e.getCause());
            }
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split("\\s+");
            if (w[0].equals("quit")) {
                break;
            }
            failures.clear();
            checks = 0;
            String out;
            try {
                out = run(w);
            } catch (Throwable t) {
                t.printStackTrace();
                out = null;
                failures.add(w[0] + ": " + cause(t));
            }
            if (!failures.isEmpty()) {
                System.out.println("fail " + String.join("; ", failures).replace('\n', ' '));
            } else {
                System.out.println("ok " + out);
            }
            System.out.flush();
        }
        client.close();
    }

    private static String run(String[] w) throws Exception {
        switch (w[0]) {
            case "feed":
                return feed();
            case "owners": {
                StringBuilder sb = new StringBuilder();
                for (int i = 1; i < w.length; i++) {
                    sb.append(w[i]).append('=').append(client.ownerAddress(w[i])).append(' ');
                }
                return sb.toString().trim();
            }
            case "route":
                return route(Integer.parseInt(w[1]));
            case "coalesce":
                return coalesce(Integer.parseInt(w[1]), Integer.parseInt(w[2]));
            case "backpressure":
                return backpressure(Integer.parseInt(w[1]));
            case "load":
                return load(Integer.parseInt(w[1]), Integer.parseInt(w[2]));
            case "stats":
                return client.stats() + " map=" + client.clusterMap().hash();
            case "map": {
                ClusterMap m = client.clusterMap();
                StringBuilder sb = new StringBuilder("hash=" + m.hash());
                for (int sh = 0; sh < m.shardCount(); sh++) {
                    for (ClusterMap.Replica r : m.replicas(sh)) {
                        sb.append(' ').append(r.address()).append('=').append(r.ready() ? "ready" : "down");
                    }
                }
                return sb.toString();
            }
            case "refresh":
                return "map=" + get(client.refreshMap()).hash();
            default:
                failures.add("unknown command " + w[0]);
                return "";
        }
    }

    private static String feed() throws Exception {
        String user = "java-user-" + ProcessHandle.current().pid();
        List<String> pool = new ArrayList<>();
        for (int i = 0; i < 200; i++) {
            pool.add("video-" + i);
        }
        // Five refreshes of a feed page of 20: each Filter over the whole
        // pool must drop everything delivered by the previous pages, at once.
        Set<String> shown = new HashSet<>();
        for (int page = 0; page < 5; page++) {
            FilterResponse resp = get(client.filter(FilterRequest.newBuilder()
                .setUserId(user).addAllCandidateIds(pool).setExplain(true).build()));
            expect(!resp.getDegraded(), "page " + page + ": degraded");
            expect(resp.getKeptIdsCount() == pool.size() - shown.size(),
                "page " + page + ": kept " + resp.getKeptIdsCount() + ", want " + (pool.size() - shown.size()));
            for (String id : resp.getKeptIdsList()) {
                expect(!shown.contains(id), "page " + page + ": delivered " + id + " kept");
            }
            expect(resp.getRemovedDelivered() == shown.size(),
                "page " + page + ": removed_delivered " + resp.getRemovedDelivered());
            for (Removed r : resp.getRemovedList()) {
                expect(r.getReason() == Reason.REASON_DELIVERED && shown.contains(pool.get(r.getIndex())),
                    "page " + page + ": removed " + r.getIndex() + " " + r.getReason());
            }
            List<String> pageIds = resp.getKeptIdsList().subList(0, Math.min(20, resp.getKeptIdsCount()));
            RecordDeliveryResponse rd = get(client.recordDelivery(user, pageIds, ""));
            shown.addAll(pageIds);
            expect(rd.getRecentSize() == shown.size(),
                "page " + page + ": recent_size " + rd.getRecentSize() + ", want " + shown.size());
        }
        // Compact candidates (the library's default) and ids give the same
        // kept set on the same request.
        try (DedupdClient ids = DedupdClient.newBuilder().seeds(seeds).compactCandidates(false)
                .mapTimeout(Duration.ofSeconds(10)).build()) {
            FilterResponse a = get(client.filter(user, pool, ""));
            FilterResponse b = get(ids.filter(user, pool, ""));
            expect(a.getKeptIdsList().equals(b.getKeptIdsList()),
                "compact candidates kept " + a.getKeptIdsCount() + ", ids kept " + b.getKeptIdsCount());
            expect(a.getRemovedDelivered() == b.getRemovedDelivered(), "removed_delivered differs");
        }
        // Indexes mode gives positions in the request.
        FilterResponse idx = get(client.filter(FilterRequest.newBuilder().setUserId(user)
            .addAllCandidateIds(pool).setMode(ResponseMode.RESPONSE_MODE_INDEXES).build()));
        expect(idx.getKeptIdsCount() == 0, "indexes mode returned ids");
        expect(idx.getKeptIndexesCount() == pool.size() - shown.size(),
            "indexes mode kept " + idx.getKeptIndexesCount());
        for (int i : idx.getKeptIndexesList()) {
            expect(!shown.contains(pool.get(i)), "indexes mode kept delivered index " + i);
        }
        // Bad input is refused with INVALID_ARGUMENT, and the client stays usable.
        try {
            get(client.recordDelivery("", List.of("x"), ""));
            expect(false, "empty user_id accepted");
        } catch (ExecutionException e) {
            expect(e.getCause() instanceof IllegalArgumentException, "empty user_id: " + e.getCause());
        }
        try {
            get(client.filter(FilterRequest.newBuilder().addCandidateIds("x").build()));
            expect(false, "Filter without a user accepted");
        } catch (ExecutionException e) {
            expect(Status.fromThrowable(e.getCause()).getCode() == Status.Code.INVALID_ARGUMENT,
                "Filter without a user: " + e.getCause());
        }
        // ForgetUser clears the deliveries.
        get(client.forgetUser(user, ""));
        FilterResponse after = get(client.filter(user, pool, ""));
        expect(after.getKeptIdsCount() == pool.size(), "after ForgetUser kept " + after.getKeptIdsCount());
        return "checks=" + checks;
    }

    private static String route(int n) throws Exception {
        List<CompletableFuture<?>> fs = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            String u = "route-" + i + "-" + ProcessHandle.current().pid();
            fs.add(client.recordDelivery(u, List.of("r-" + i), ""));
            fs.add(client.filter(u, List.of("r-" + i, "other"), ""));
        }
        for (CompletableFuture<?> f : fs) {
            get(f);
        }
        for (int i = 0; i < n; i++) {
            String u = "route-" + i + "-" + ProcessHandle.current().pid();
            FilterResponse r = get(client.filter(u, List.of("r-" + i, "other"), ""));
            expect(r.getKeptIdsList().equals(List.of("other")), u + ": kept " + r.getKeptIdsList());
        }
        return "users=" + n + " " + client.stats();
    }

    private static String coalesce(int users, int per) throws Exception {
        DedupdClient.Stats before = client.stats();
        List<CompletableFuture<RecordDeliveryResponse>> fs = new ArrayList<>();
        String tag = "co-" + ProcessHandle.current().pid() + "-" + System.nanoTime();
        for (int u = 0; u < users; u++) {
            for (int p = 0; p < per; p++) {
                fs.add(client.recordDelivery(tag + "-" + u, List.of("item-" + p), ""));
            }
        }
        for (CompletableFuture<RecordDeliveryResponse> f : fs) {
            get(f);
        }
        DedupdClient.Stats after = client.stats();
        List<String> items = new ArrayList<>();
        for (int p = 0; p < per; p++) {
            items.add("item-" + p);
        }
        for (int u = 0; u < users; u++) {
            FilterResponse r = get(client.filter(tag + "-" + u, items, ""));
            expect(r.getKeptIdsCount() == 0, tag + "-" + u + ": kept " + r.getKeptIdsList());
        }
        return "deliveries=" + (after.deliveries - before.deliveries)
            + " delivery_calls=" + (after.deliveryCalls - before.deliveryCalls);
    }

    private static String backpressure(int n) throws Exception {
        StringBuilder out = new StringBuilder();
        for (DedupdClient.Backpressure mode : DedupdClient.Backpressure.values()) {
            try (DedupdClient c = DedupdClient.newBuilder().seeds(seeds).linger(Duration.ZERO)
                    .mapTimeout(Duration.ofSeconds(10))
                    .maxInFlight(2).maxQueued(2).backpressure(mode).blockTimeout(Duration.ofSeconds(20))
                    .build()) {
                get(c.refreshMap());
                List<CompletableFuture<RecordDeliveryResponse>> fs = new ArrayList<>();
                long t0 = System.nanoTime();
                for (int i = 0; i < n; i++) {
                    fs.add(c.recordDelivery("bp-" + mode + "-" + i + "-" + ProcessHandle.current().pid(),
                        List.of("x"), ""));
                }
                long submitMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                int ok = 0;
                int rejected = 0;
                for (CompletableFuture<RecordDeliveryResponse> f : fs) {
                    try {
                        get(f);
                        ok++;
                    } catch (ExecutionException e) {
                        if (e.getCause() instanceof BackpressureException) {
                            rejected++;
                        } else {
                            expect(false, mode + ": " + e.getCause());
                        }
                    }
                }
                out.append(mode.name().toLowerCase()).append("_ok=").append(ok).append(' ')
                    .append(mode.name().toLowerCase()).append("_rejected=").append(rejected).append(' ')
                    .append(mode.name().toLowerCase()).append("_submit_ms=").append(submitMs).append(' ');
            }
        }
        return out.toString().trim();
    }

    private static String load(int seconds, int threads) throws Exception {
        AtomicLong calls = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        List<Thread> ts = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            final int tn = t;
            Thread th = new Thread(() -> {
                int i = 0;
                while (System.nanoTime() < end) {
                    String u = "load-" + tn + "-" + (i++ % 50);
                    CompletableFuture<?> f = (i % 2 == 0) ? client.recordDelivery(u, List.of("l" + i), "")
                        : client.filter(u, List.of("a", "b", "c"), "");
                    try {
                        f.get(30, TimeUnit.SECONDS);
                    } catch (Exception e) {
                        if (failed.incrementAndGet() <= 5) {
                            System.err.println("load: " + u + ": " + cause(e));
                        }
                    }
                    calls.incrementAndGet();
                }
            });
            th.start();
            ts.add(th);
        }
        for (Thread th : ts) {
            th.join();
        }
        return "calls=" + calls.get() + " failed=" + failed.get() + " " + client.stats();
    }
}
