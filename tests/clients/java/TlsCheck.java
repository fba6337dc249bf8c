// SPDX-License-Identifier: Apache-2.0
//
// TlsCheck - the Java library's TLS options (DedupdClient.Builder tlsCa,
// tlsClientCert, tlsServerName) against real dedupd nodes, driven by
// tests/integration/test_clients_java_tls.py. It reads one command a line
// on stdin and answers each with one line on stdout:
//
//   call USERS SEEDS [ca=FILE] [cert=FILE] [key=FILE] [name=NAME]
//       a new client with those options (USERS and SEEDS comma-separated);
//       for each user U: Filter of items U-a, U-b, U-c, RecordDelivery of
//       U-a, Filter again. Answers "ok U=KEPT/AFTER@OWNER ... map_reads=N"
//       (KEPT and AFTER: what each Filter kept, as a,b,c; OWNER: where
//       the client routes U), "error STATUS | cause: ..." for the first
//       call that failed, or "error build: MESSAGE" when build() refused
//       the options
//   quit
//
// java -cp ... TlsCheck
import dedup.v1.FilterResponse;
import io.dedupd.client.DedupdClient;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

public final class TlsCheck {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split("\\s+");
            if (w[0].equals("quit")) {
                break;
            }
            String out;
            try {
                out = w[0].equals("call") && w.length >= 3 ? call(w) : "error unknown command: " + line;
            } catch (Exception e) {
                out = "error " + describe(e);
            }
            System.out.println(out.replace('\n', ' '));
            System.out.flush();
        }
    }

    private static String call(String[] w) throws Exception {
        Map<String, String> opt = new HashMap<>();
        for (int i = 3; i < w.length; i++) {
            int eq = w[i].indexOf('=');
            opt.put(w[i].substring(0, eq), w[i].substring(eq + 1));
        }
        // A refused handshake is UNAVAILABLE, which the client retries:
        // three attempts give the refusals some commands expect quickly.
        DedupdClient.Builder b = DedupdClient.newBuilder().seeds(List.of(w[2].split(",")))
            .deadline(Duration.ofSeconds(10)).maxAttempts(3).mapRefresh(Duration.ZERO)
            .mapTimeout(Duration.ofSeconds(5)).linger(Duration.ZERO);
        if (opt.containsKey("ca")) {
            b.tlsCa(Path.of(opt.get("ca")));
        }
        if (opt.containsKey("cert") || opt.containsKey("key")) {
            b.tlsClientCert(path(opt.get("cert")), path(opt.get("key")));
        }
        if (opt.containsKey("name")) {
            b.tlsServerName(opt.get("name"));
        }
        DedupdClient c;
        try {
            c = b.build();
        } catch (IllegalArgumentException e) {
            return "error build: " + e.getMessage();
        }
        try (c) {
            StringBuilder out = new StringBuilder("ok");
            for (String user : w[1].split(",")) {
                List<String> items = List.of(user + "-a", user + "-b", user + "-c");
                FilterResponse f1 = c.filter(user, items, "").get(30, TimeUnit.SECONDS);
                c.recordDelivery(user, List.of(items.get(0)), "").get(30, TimeUnit.SECONDS);
                FilterResponse f2 = c.filter(user, items, "").get(30, TimeUnit.SECONDS);
                out.append(' ').append(user).append('=').append(suffixes(user, f1)).append('/')
                    .append(suffixes(user, f2)).append('@').append(c.ownerAddress(user));
            }
            return out.append(" map_reads=").append(c.stats().mapReads).toString();
        } catch (ExecutionException e) {
            return "error " + describe(e.getCause());
        }
    }

    /** The kept ids of R without their "USER-" prefix: "a,b,c". */
    private static String suffixes(String user, FilterResponse r) {
        List<String> out = new ArrayList<>();
        for (String id : r.getKeptIdsList()) {
            out.add(id.startsWith(user + "-") ? id.substring(user.length() + 1) : id);
        }
        return String.join(",", out);
    }

    private static Path path(String p) {
        return p == null ? null : Path.of(p);
    }

    /** T's message and those of its causes. */
    private static String describe(Throwable t) {
        StringBuilder sb = new StringBuilder(String.valueOf(t));
        for (Throwable c = t.getCause(); c != null && c != c.getCause(); c = c.getCause()) {
            sb.append(" | cause: ").append(c);
        }
        return sb.toString();
    }
}
