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
// Through a resharding step (tests/integration/test_clients_reshard.py,
// which performs it meanwhile; the same commands as dedupd_lib_check
// reshard), on two clients of their own: client 0 reads the map only when
// an answer makes it (mapRefresh 0: stale maps and failovers), client 1
// also every 500 ms. A value given for both is "client 0's,client 1's".
//   prepare P N     users P-0 .. P-N-1: 30 plays (recordPlays) and 10
//                   deliveries each, then each user's filter until its kept
//                   ids are exact three times in a row; the maps: hash=
//                   shards= users_per_shard=
//   start           a thread filters the users in turn, through each client
//                   in turn, until stop, judging each answer (no error,
//                   exact kept ids and removed counts)
//   stop            that thread's counts: calls= failed= inexact= and each
//                   client's stale_map= map_reads= failovers= retries=
//                   meanwhile (the test judges them)
//   settle          one filter of each user through each client, each
//                   exact; the maps then, the counts since the start
//   check R         R rounds of every user's filter through each client,
//                   each exact; no stale map, failover or retry meanwhile
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
    // The resharding commands' two clients, users and calling thread.
    private static final DedupdClient[] split = new DedupdClient[2];
    private static final List<SplitUser> splitUsers = new ArrayList<>();
    private static Thread splitLoop;
    private static volatile boolean splitStop;
    private static final AtomicLong[] splitCounts = new AtomicLong[3]; // calls, failed, inexact
    private static final DedupdClient.Stats[] splitBefore = new DedupdClient.Stats[2];

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
        stopCalling();
        for (DedupdClient c : split) {
            if (c != null) {
                c.close();
            }
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
            case "prepare":
                return prepare(w[1], Integer.parseInt(w[2]));
            case "start":
                return startCalling();
            case "stop":
                return stopCalling();
            case "settle": {
                for (SplitUser u : splitUsers) {
                    for (DedupdClient c : split) {
                        String bad = judge(c, u);
                        expect(bad == null, u.user + ": " + bad);
                    }
                }
                return splitMap() + " " + splitCounters(new DedupdClient.Stats[2]);
            }
            case "check": {
                DedupdClient.Stats[] a = {split[0].stats(), split[1].stats()};
                int calls = 0;
                for (int r = 0; r < Integer.parseInt(w[1]); r++) {
                    for (SplitUser u : splitUsers) {
                        for (DedupdClient c : split) {
                            String bad = judge(c, u);
                            expect(bad == null, u.user + ": " + bad);
                            calls++;
                        }
                    }
                }
                for (int k = 0; k < 2; k++) {
                    DedupdClient.Stats b = split[k].stats();
                    expect(b.staleMap == a[k].staleMap && b.failovers == a[k].failovers
                        && b.retries == a[k].retries && 2 * (b.calls - a[k].calls) == calls,
                        "client " + k + " after the refresh: " + (b.staleMap - a[k].staleMap)
                        + " stale-map answers, " + (b.failovers - a[k].failovers) + " failovers, "
                        + (b.retries - a[k].retries) + " retries, " + (b.calls - a[k].calls)
                        + " attempts for " + calls / 2 + " calls");
                }
                return "calls=" + calls + " " + splitMap();
            }
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

    /** A user of the resharding commands: what it played and was delivered, its candidates. */
    private static final class SplitUser {
        final String user;
        final List<String> plays = new ArrayList<>();
        final List<String> deliveries = new ArrayList<>();
        final List<String> candidates = new ArrayList<>();
        final List<String> want = new ArrayList<>(); // the kept ids, in order

        SplitUser(String user) {
            this.user = user;
            for (int k = 0; k < 30; k++) {
                plays.add(user + "-p" + k);
            }
            for (int k = 0; k < 10; k++) {
                deliveries.add(user + "-d" + k);
            }
            // 200 candidates: every 10th played, the next one delivered
            // (10 of them), the one after a repeat of the one before it;
            // the rest fresh (dedupd_lib_check's cases).
            for (int i = 0; i < 200; i++) {
                if (i % 10 == 0) {
                    candidates.add(plays.get((i / 10) % 30));
                } else if (i % 10 == 1 && i / 10 < 10) {
                    candidates.add(deliveries.get(i / 10));
                } else if (i % 10 == 3) {
                    candidates.add(candidates.get(candidates.size() - 1));
                } else {
                    candidates.add(user + "-fresh" + i);
                    want.add(user + "-fresh" + i);
                }
            }
        }
    }

    /** One filter of U through C: null when exact, else what was wrong. */
    private static String judge(DedupdClient c, SplitUser u) {
        FilterResponse r;
        try {
            r = get(c.filter(u.user, u.candidates, ""));
        } catch (Exception e) {
            return "filter failed: " + cause(e);
        }
        if (!r.getKeptIdsList().equals(u.want) || r.getRemovedPlayed() != 20
                || r.getRemovedDelivered() != 10 || r.getRemovedDuplicate() != 20) {
            return "kept " + r.getKeptIdsCount() + " (want " + u.want.size() + "), removed played "
                + r.getRemovedPlayed() + " delivered " + r.getRemovedDelivered() + " duplicate "
                + r.getRemovedDuplicate() + (r.getDegraded() ? " (degraded)" : "");
        }
        return null;
    }

    /**
     * The resharding clients' maps: hash and shards of each, and how many
     * of the users each shard of client 0's map owns.
     */
    private static String splitMap() {
        ClusterMap[] m = {split[0].clusterMap(), split[1].clusterMap()};
        int[] per = new int[m[0].shardCount()];
        for (SplitUser u : splitUsers) {
            int s = m[0].ownerShard(u.user);
            if (s >= 0) {
                per[s]++;
            }
        }
        StringBuilder sb = new StringBuilder();
        for (int s = 0; s < per.length; s++) {
            sb.append(s > 0 ? "," : "").append(per[s]);
        }
        return "hash=" + m[0].hash() + "," + m[1].hash() + " shards=" + m[0].shardCount() + ","
            + m[1].shardCount() + " users_per_shard=" + sb;
    }

    /** Each resharding client's counters since FROM (a null entry: since it was built). */
    private static String splitCounters(DedupdClient.Stats[] from) {
        long[][] v = new long[4][2];
        for (int k = 0; k < 2; k++) {
            DedupdClient.Stats b = split[k].stats();
            DedupdClient.Stats a = from[k];
            v[0][k] = b.staleMap - (a == null ? 0 : a.staleMap);
            v[1][k] = b.mapReads - (a == null ? 0 : a.mapReads);
            v[2][k] = b.failovers - (a == null ? 0 : a.failovers);
            v[3][k] = b.retries - (a == null ? 0 : a.retries);
        }
        return "stale_map=" + v[0][0] + "," + v[0][1] + " map_reads=" + v[1][0] + "," + v[1][1]
            + " failovers=" + v[2][0] + "," + v[2][1] + " retries=" + v[3][0] + "," + v[3][1];
    }

    private static String prepare(String prefix, int n) throws Exception {
        for (int k = 0; k < 2; k++) {
            if (split[k] == null) {
                split[k] = DedupdClient.newBuilder().seeds(seeds)
                    .mapRefresh(k == 0 ? Duration.ZERO : Duration.ofMillis(500))
                    .mapTimeout(Duration.ofSeconds(10)).build();
            }
            for (int i = 0; split[k].clusterMap() == null || !split[k].clusterMap().routable(); i++) {
                expect(i < 50, "client " + k + ": no routable map in 10 s");
                if (i >= 50) {
                    return "";
                }
                Thread.sleep(200);
                try {
                    get(split[k].refreshMap());
                } catch (ExecutionException e) {
                    System.err.println("prepare: reading the map: " + e.getCause());
                }
            }
        }
        splitUsers.clear();
        for (int i = 0; i < n; i++) {
            splitUsers.add(new SplitUser(prefix + "-" + i));
        }
        for (SplitUser u : splitUsers) {
            List<dedup.v1.Play> plays = new ArrayList<>();
            for (String p : u.plays) {
                plays.add(dedup.v1.Play.newBuilder().setItemId(p).build());
            }
            int accepted = get(split[0].recordPlays(u.user, plays, "")).getAccepted();
            expect(accepted == 30, u.user + ": recordPlays accepted " + accepted);
            int recent = get(split[0].recordDelivery(u.user, u.deliveries, "")).getRecentSize();
            expect(recent == 10, u.user + ": recordDelivery recent_size " + recent);
        }
        // The replicas learn the plays from Kafka (the test also waits until
        // every node has them): until three exact answers in a row.
        for (SplitUser u : splitUsers) {
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            String bad = null;
            for (int exact = 0; exact < 3; ) {
                bad = judge(split[exact % 2], u);
                if (bad == null) {
                    exact++;
                    continue;
                }
                exact = 0;
                if (System.nanoTime() > until) {
                    break;
                }
                Thread.sleep(50);
            }
            expect(bad == null, u.user + ": no exact answer in 20 s: " + bad);
        }
        return splitMap();
    }

    private static String startCalling() {
        expect(!splitUsers.isEmpty(), "start before prepare");
        if (splitUsers.isEmpty()) {
            return "";
        }
        stopCalling();
        for (int k = 0; k < splitCounts.length; k++) {
            splitCounts[k] = new AtomicLong();
        }
        for (int k = 0; k < 2; k++) {
            splitBefore[k] = split[k].stats();
        }
        splitStop = false;
        splitLoop = new Thread(() -> {
            int reported = 0;
            for (int i = 0; !splitStop; i++) {
                SplitUser u = splitUsers.get((i / 2) % splitUsers.size());
                String bad = judge(split[i % 2], u);
                splitCounts[0].incrementAndGet();
                if (bad != null) {
                    splitCounts[bad.startsWith("filter failed") ? 1 : 2].incrementAndGet();
                    if (reported++ < 10) {
                        System.err.println("during the split: client " + i % 2 + ": " + u.user + ": " + bad);
                    }
                }
                try {
                    Thread.sleep(5);
                } catch (InterruptedException e) {
                    return;
                }
            }
        });
        splitLoop.start();
        return "users=" + splitUsers.size();
    }

    private static String stopCalling() {
        if (splitLoop == null) {
            return "";
        }
        splitStop = true;
        try {
            splitLoop.join();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        splitLoop = null;
        return "calls=" + splitCounts[0] + " failed=" + splitCounts[1] + " inexact=" + splitCounts[2]
            + " " + splitCounters(splitBefore) + " " + splitMap();
    }
}
