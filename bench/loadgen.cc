// SPDX-License-Identifier: Apache-2.0
//
// loadgen.cc - load generator for dedupd's Filter, and the legacy path it
// replaces, in one run.
//
// Setup: a heavy user gets 10,000 plays (--plays; RecordPlays, spread over 30 days)
// and 100 deliveries (RecordDelivery); the same 10,000 play ids go into a
// Redis sorted set, the legacy store. The request: 10,000 candidates, 2,000
// of them played, 50 delivered, the rest fresh.
//
// Then, for --seconds each:
//   - Filter at low load: 1 call in flight, back to back;
//   - Filter paced: one call every 1/--rate s (default 200 calls/s; 0
//     leaves the phase out), timed from when it is sent (or was due, if
//     the call before made it late): low load as a service sees it, with
//     the machine mostly idle between calls (on a VM an idle vCPU must be
//     woken for each call);
//   - Filter at saturation: --inflight threads, each with its own channel and
//     completion queue, one call in flight each;
//   - legacy, 1 in flight: ZRANGE key 0 -1 of the 10,000-member ZSet, a hash
//     set of the members, each candidate checked against it; twice: with
//     the strongest set a legacy C++ client would write (flat open
//     addressing over the reply's own buffers, XXH3, no allocation per
//     member: the baseline the ratio is taken against), and with
//     std::unordered_set<std::string_view> (one heap node per member: the
//     weak baseline earlier figures used, printed for comparison).
// Each prints calls, calls/s and p50/p99/p999 latency (ms); then the ratio
// legacy/dedupd (against the strong baseline) and the goals (p99 <= 1 ms at
// low load, >= 2,000 calls/s, >= 3x faster than the strong legacy path).
//
// Each call builds its request from the candidate strings in memory (a
// FilterRequest, serialised) inside the timed call, as a recall service
// pays for it, and sends it through grpc's generic stub; responses are
// parsed (FilterResponse) and their kept count checked on every call, so
// a call is timed from the caller's strings to its kept indexes, as the
// legacy path is from its ZRANGE to its kept indexes. The plain run also
// measures 1 in flight with the request serialised once and its bytes
// reused (--prebuilt: every phase so), and the ratio line gives both.
// --hashes sends the candidates as item hashes (candidate_hashes, XXH3-64
// with dedupd's seed), hashed in each call.
//
// usage: loadgen --addr HOST:PORT --redis HOST:PORT [--seconds S]
//                [--inflight N] [--mode ids|indexes] [--user ID] [--server-pid PID]
//                [--phase all|setup|run] [--window BYTES] [--rate CALLS_PER_S]
//                [--client-spin] [--compare HOST:PORT [--compare-pid PID]]
//                [--users-file PATH] [--plays N] [--candidates N]
//                [--prebuilt] [--hashes]
//
// --plays N: the heavy user's plays (default 10,000; up to 50,000), for the
// cost of a heavier history at the same 10,000 candidates.
// --candidates N: the request's candidates (default 10,000; 100 to
// 10,000), every 5th played and up to 50 delivered as above, for the cost
// of a shorter request against the same history (dedupd and legacy alike).
//
// Each Filter phase prints dedupd's CPU per call (from /proc, with
// --server-pid) and the load generator's own (getrusage), so that the
// split of the two shared cores between client and server is visible, and
// every phase the steal time of the machine (/proc/stat): on a VM whose
// host is busy the same build measures up to 1.5x slower, and a run with
// steal well above 1 % should not be read as the code's figures.
// --window sets the channels' HTTP/2 stream window and max frame size
// (for experiments; dedupd's side is set in src/rpc.c).
//
// --client-spin: in the paced phase the load generator waits for each
// call's due time by polling the clock instead of sleeping. A recall
// service is a busy process on another machine; a load generator that
// sleeps 5 ms on this 2-vCPU VM lets its own vCPU halt, and waking it and
// running its send and receive cold go into every paced call's time. With
// the flag, the paced figures are the server's idle penalty alone (the
// client keeps one core busy meanwhile).
//
// Context switches per call (every thread of dedupd, voluntary and not,
// from /proc) show handoffs between threads that CPU time does not: on a
// VM each wake of an idle vCPU costs time that shows in the latency.
//
// --compare HOST:PORT measures a second dedupd (another build or other
// settings, holding the same user) against --addr on this noisy host: the
// Filter phases run in 0.5 s slices, A B A B ..., --seconds per server, so
// both see the same host; each slice pair is compared, and the legacy
// phase and goals are left out. run_loadgen.sh does it with DEDUPD_B set.
//
// --users-file PATH (with --phase run): each call asks for the next user
// of PATH's list (one id a line, e.g. bench_cold --users-out's) instead of
// the heavy user, with the same candidates, none of which these users
// played; only the 1-in-flight and paced phases run, with no warm-up, and
// an answer must keep at least 95 % of the candidates (bloom false
// positives remove a few). For the cold path: run_cold_loadgen.sh.
//
// --phase setup writes the user and the legacy ZSet and exits; --phase run
// measures what is there. run_loadgen.sh restarts dedupd between the two so
// that the plays are read from an SST (folded at flush), as in steady state,
// and not re-merged from memtable operands on every read.
#include "dedup.grpc.pb.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <fstream>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>

#define XXH_INLINE_ALL
#include <xxhash.h>
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
    std::string addr = "127.0.0.1:50051";
    std::string redis = "127.0.0.1:6379";
    double seconds = 5.0;
    int inflight = 8;
    bool indexes = true;
    std::string user = "loadgen-heavy";
    int server_pid = 0;  // dedupd's pid: report its CPU time per call
    std::string phase = "all";  // setup: write the user only; run: measure only
    int window = 0;  // --window: HTTP/2 lookahead and max frame bytes of the channels (0 = grpc's)
    double rate = 200;       // --rate: the paced phase's calls/s (0: no paced phase)
    bool client_spin = false; // --client-spin: wait for paced calls' due times busily
    std::string compare;     // --compare: a second dedupd, measured alternately with --addr
    int compare_pid = 0;     // its pid
    std::string users_file;  // --users-file: a user per call from this list
    size_t plays = 10000;    // --plays: the heavy user's plays (1..50,000)
    size_t candidates = 10000;  // --candidates: the request's candidates (100..10,000)
    bool prebuilt = false;   // --prebuilt: serialise the request once, not in each call
    bool hashes = false;     // --hashes: candidates as candidate_hashes
};

struct Result {
    std::vector<double> lat_ms;
    double elapsed_s = 0;
    uint64_t errors = 0;
    uint64_t degraded = 0;  // answers without Redis (recent.timeout_ms passed)
};

[[noreturn]] void die(const std::string &msg)
{
    std::fprintf(stderr, "loadgen: %s\n", msg.c_str());
    std::exit(1);
}

double pct(const std::vector<double> &sorted, double p)
{
    if (sorted.empty()) return 0;
    size_t i = static_cast<size_t>(p * static_cast<double>(sorted.size()));
    if (i >= sorted.size()) i = sorted.size() - 1;
    return sorted[i];
}

void print(const char *label, Result &r, double server_cpu_s = -1, double client_cpu_s = -1,
           double server_cs = -1)
{
    std::sort(r.lat_ms.begin(), r.lat_ms.end());
    double cps = r.elapsed_s > 0 ? static_cast<double>(r.lat_ms.size()) / r.elapsed_s : 0;
    std::printf("%-44s calls=%-7zu calls/s=%-9.0f p50=%.3f p99=%.3f p999=%.3f max=%.3f ms "
                "errors=%llu degraded=%llu\n",
                label, r.lat_ms.size(), cps, pct(r.lat_ms, 0.50), pct(r.lat_ms, 0.99),
                pct(r.lat_ms, 0.999), r.lat_ms.empty() ? 0.0 : r.lat_ms.back(),
                static_cast<unsigned long long>(r.errors),
                static_cast<unsigned long long>(r.degraded));
    if (server_cpu_s > 0 && !r.lat_ms.empty())
        std::printf("%-44s dedupd CPU %.3f ms per call (%.0f calls/s per core)\n", "",
                    server_cpu_s * 1000 / static_cast<double>(r.lat_ms.size()),
                    static_cast<double>(r.lat_ms.size()) / server_cpu_s);
    if (server_cs >= 0 && !r.lat_ms.empty())
        std::printf("%-44s dedupd context switches %.1f per call\n", "",
                    server_cs / static_cast<double>(r.lat_ms.size()));
    if (client_cpu_s > 0 && !r.lat_ms.empty())
        std::printf("%-44s loadgen CPU %.3f ms per call\n", "",
                    client_cpu_s * 1000 / static_cast<double>(r.lat_ms.size()));
    std::fflush(stdout);
}

// CPU seconds (user + system) used so far by process PID; 0 if unknown.
double cpu_seconds(int pid)
{
    if (pid <= 0) return 0;
    std::string path = "/proc/" + std::to_string(pid) + "/stat";
    FILE *f = std::fopen(path.c_str(), "r");
    if (!f) return 0;
    char buf[1024];
    size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    // Fields after the command name, which is in parentheses and may hold spaces.
    const char *p = std::strrchr(buf, ')');
    if (!p) return 0;
    unsigned long long utime = 0, stime = 0;
    if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                    &stime) != 2)
        return 0;
    return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Context switches so far of every thread of process PID (voluntary and
// not, /proc/PID/task/*/status); 0 if unknown. Threads that have exited
// are not counted, so read it across a phase in which none exit.
unsigned long long ctx_switches(int pid)
{
    if (pid <= 0) return 0;
    std::string dir = "/proc/" + std::to_string(pid) + "/task";
    DIR *d = opendir(dir.c_str());
    if (!d) return 0;
    unsigned long long sum = 0;
    while (struct dirent *e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        FILE *f = std::fopen((dir + "/" + e->d_name + "/status").c_str(), "r");
        if (!f) continue;
        char line[256];
        unsigned long long v;
        while (std::fgets(line, sizeof line, f))
            if (std::sscanf(line, "voluntary_ctxt_switches: %llu", &v) == 1 ||
                std::sscanf(line, "nonvoluntary_ctxt_switches: %llu", &v) == 1)
                sum += v;
        std::fclose(f);
    }
    closedir(d);
    return sum;
}

// The machine's CPU time so far, in jiffies: all of it, and the part the
// hypervisor gave to other guests while this one wanted to run (steal).
struct MachineCpu {
    unsigned long long total = 0, steal = 0;
};

MachineCpu machine_cpu()
{
    MachineCpu m;
    FILE *f = std::fopen("/proc/stat", "r");
    if (!f) return m;
    unsigned long long v[8] = {0};
    int got = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                          &v[3], &v[4], &v[5], &v[6], &v[7]);
    std::fclose(f);
    if (got != 8) return m;
    for (unsigned long long x : v) m.total += x;
    m.steal = v[7];
    return m;
}

// Steal between two readings, in % of the machine's CPU time: on a VM
// whose host is busy, every figure of the phase is slower than the code.
void print_steal(const MachineCpu &a, const MachineCpu &b)
{
    if (b.total <= a.total) return;
    std::printf("%-44s steal %.1f %% of the machine's CPU time (host contention)\n", "",
                100.0 * static_cast<double>(b.steal - a.steal) /
                    static_cast<double>(b.total - a.total));
    std::fflush(stdout);
}

// CPU seconds (user + system) this process has used so far.
double self_cpu_seconds()
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// What the phases are measured by, read before and after each: dedupd's
// CPU and context switches (PID's), this process's CPU, the machine's.
struct Snap {
    double server_cpu, self_cpu;
    unsigned long long cs;
    MachineCpu machine;
};

Snap snap(int pid)
{
    return {cpu_seconds(pid), self_cpu_seconds(), ctx_switches(pid), machine_cpu()};
}

int g_window = 0;  // Options::window, for channel()
bool g_client_spin = false;  // Options::client_spin, for filter_loop()

// What a call builds its request from when it builds one (filter_loop's
// BUILD): the user, the candidate strings, the response mode, and whether
// the candidates go as item hashes.
struct Build {
    std::string user;
    const std::vector<std::string> *cands = nullptr;
    bool indexes = true;
    bool hashes = false;
};
Build g_build;

constexpr uint64_t kItemHashSeed = UINT64_C(0x6464757064683031);  // src/dd.h DD_HASH_SEED

// The request of g_build, built and serialised now.
grpc::ByteBuffer build_request()
{
    dedup::v1::FilterRequest req;
    req.set_user_id(g_build.user);
    const auto &cands = *g_build.cands;
    if (g_build.hashes) {
        auto *h = req.mutable_candidate_hashes();
        h->Reserve(static_cast<int>(cands.size()));
        for (const auto &c : cands) h->AddAlreadyReserved(XXH3_64bits_withSeed(c.data(), c.size(), kItemHashSeed));
    } else {
        auto *ids = req.mutable_candidate_ids();
        ids->Reserve(static_cast<int>(cands.size()));
        for (const auto &c : cands) ids->Add()->assign(c);
        req.set_mode(g_build.indexes ? dedup::v1::RESPONSE_MODE_INDEXES : dedup::v1::RESPONSE_MODE_IDS);
    }
    grpc::ByteBuffer buf;
    bool own;
    if (!grpc::SerializationTraits<dedup::v1::FilterRequest>::Serialize(req, &buf, &own).ok())
        die("cannot serialise the request");
    return buf;
}

// --users-file: each call asks for the next of these users (all threads
// share the walk), with the request's other fields G_BASE (serialised
// without user_id, which is field 1 and so goes first); an answer must
// keep at least g_min_kept candidates.
std::vector<std::string> g_users;
std::atomic<size_t> g_next_user{0};
grpc::Slice g_base;
size_t g_min_kept = 0;
constexpr size_t kAnyKept = SIZE_MAX;  // want_kept in --users-file runs

// The next user's request: user_id's field, then g_base, uncopied.
grpc::ByteBuffer next_user_request()
{
    const std::string &u = g_users[g_next_user.fetch_add(1) % g_users.size()];
    std::string head(1, '\x0a');  // field 1, length-delimited
    for (size_t n = u.size();; n >>= 7) {
        if (n < 0x80) {
            head.push_back(static_cast<char>(n));
            break;
        }
        head.push_back(static_cast<char>((n & 0x7f) | 0x80));
    }
    head += u;
    grpc::Slice parts[2] = {grpc::Slice(head), g_base};
    return grpc::ByteBuffer(parts, 2);
}

// "1 in flight", "paced 200/s", "8 in flight".
std::string phase_name(int inflight, double rate)
{
    if (rate <= 0) return std::to_string(inflight) + " in flight";
    return "paced " + std::to_string(static_cast<int>(rate)) + "/s" +
           (g_client_spin ? ", client spinning" : "");
}

std::shared_ptr<grpc::Channel> channel(const std::string &addr, int id)
{
    grpc::ChannelArguments args;
    args.SetInt("dedupd.loadgen.channel", id);  // distinct args: a connection of its own
    args.SetMaxReceiveMessageSize(64 << 20);
    if (g_window > 0) {
        args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, g_window);
        args.SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, g_window);
    }
    auto ch = grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), args);
    if (!ch->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(20)))
        die("cannot connect to " + addr);
    return ch;
}

void setup(const Options &o, std::vector<std::string> &plays)
{
    auto stub = dedup::v1::Dedup::NewStub(channel(o.addr, -1));
    auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
    {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        dedup::v1::ForgetUserRequest req;
        req.set_user_id(o.user);
        dedup::v1::ForgetUserResponse resp;
        auto s = stub->ForgetUser(&ctx, req, &resp);
        if (!s.ok()) die("ForgetUser: " + s.error_message());
    }
    // In requests of at most 10,000 plays (rpc.max_candidates, default).
    for (size_t off = 0; off < plays.size(); off += 10000) {
        dedup::v1::RecordPlaysRequest pr;
        pr.set_user_id(o.user);
        size_t end = std::min(plays.size(), off + 10000);
        for (size_t i = off; i < end; i++) {
            auto *p = pr.add_plays();
            p->set_item_id(plays[i]);
            p->set_played_at_ms(now_ms - static_cast<int64_t>(i % 30) * 86400000 - 1000);
        }
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        dedup::v1::RecordPlaysResponse resp;
        auto s = stub->RecordPlays(&ctx, pr, &resp);
        if (!s.ok()) die("RecordPlays: " + s.error_message());
        if (resp.accepted() != end - off) die("RecordPlays accepted " + std::to_string(resp.accepted()));
    }
    dedup::v1::RecordDeliveryRequest dr;
    dr.set_user_id(o.user);
    for (int i = 0; i < 100; i++) dr.add_item_ids("delivered-" + std::to_string(i));
    {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        dedup::v1::RecordDeliveryResponse resp;
        auto s = stub->RecordDelivery(&ctx, dr, &resp);
        if (!s.ok()) die("RecordDelivery: " + s.error_message());
    }
}

void setup_legacy(const Options &o, redisContext *c, const std::vector<std::string> &plays,
                  const std::string &key)
{
    redisReply *rep = static_cast<redisReply *>(redisCommand(c, "DEL %b", key.data(), key.size()));
    if (!rep) die(std::string("redis: ") + c->errstr);
    freeReplyObject(rep);
    auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
    std::string score = std::to_string(now_ms);
    for (size_t off = 0; off < plays.size(); off += 1000) {
        std::vector<const char *> argv{"ZADD", key.c_str()};
        std::vector<size_t> lens{4, key.size()};
        for (size_t i = off; i < std::min(plays.size(), off + 1000); i++) {
            argv.push_back(score.c_str());
            lens.push_back(score.size());
            argv.push_back(plays[i].c_str());
            lens.push_back(plays[i].size());
        }
        rep = static_cast<redisReply *>(
            redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
        if (!rep || rep->type != REDIS_REPLY_INTEGER) die("legacy ZADD failed");
        freeReplyObject(rep);
    }
    (void)o;
}

// One thread's loop of Filter calls, one in flight, until STOP: back to
// back, or with RATE > 0 one call every 1/RATE s.
// BUILD: each call builds its request (build_request) inside its timed
// part; otherwise REQ's bytes are sent as they are.
void filter_loop(const std::string &addr, int id, const grpc::ByteBuffer &req, size_t want_kept,
                 bool indexes, double rate, Clock::time_point stop, bool build, Result *out)
{
    auto ch = channel(addr, id);
    grpc::GenericStub stub(ch);
    grpc::CompletionQueue cq;
    out->lat_ms.reserve(200000);
    auto t_start = Clock::now();
    dedup::v1::FilterResponse resp;
    const auto interval = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(rate > 0 ? 1.0 / rate : 0.0));
    auto due = t_start;
    while (Clock::now() < stop) {
        // Paced: a call is timed from when it is sent, unless it is sent
        // late because the one before took past its due time: then from
        // when it was due, so that the wait behind a slow call counts (the
        // load generator's own oversleeping does not).
        Clock::time_point t0;
        if (rate > 0) {
            due += interval;
            if (Clock::now() < due) {
                if (g_client_spin)
                    while (Clock::now() < due) {
                    }
                else
                    std::this_thread::sleep_until(due);
                t0 = Clock::now();
            } else {
                t0 = due;
            }
        }
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
        grpc::ByteBuffer rbuf;
        grpc::Status status;
        if (rate <= 0) t0 = Clock::now();
        grpc::ByteBuffer own_req;
        if (!g_users.empty()) own_req = next_user_request();
        else if (build) own_req = build_request();
        const grpc::ByteBuffer &send = g_users.empty() && !build ? req : own_req;
        auto call = stub.PrepareUnaryCall(&ctx, "/dedup.v1.Dedup/Filter", send, &cq);
        call->StartCall();
        call->Finish(&rbuf, &status, reinterpret_cast<void *>(1));
        void *tag;
        bool ok;
        if (!cq.Next(&tag, &ok) || !ok) die("completion queue failed");
        bool good = status.ok() &&
                    grpc::SerializationTraits<dedup::v1::FilterResponse>::Deserialize(&rbuf, &resp)
                        .ok();
        double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (good) {
            size_t kept = static_cast<size_t>(indexes || g_build.hashes ? resp.kept_indexes_size()
                                                                        : resp.kept_ids_size());
            // A degraded answer is a real answer (Redis missed recent.timeout_ms,
            // likely starved of CPU here): timed, counted, its kept set
            // then includes the deliveries.
            if (resp.degraded())
                out->degraded++;
            else if (want_kept == kAnyKept ? kept < g_min_kept : kept != want_kept)
                good = false;
        }
        if (!good) {
            if (out->errors++ < 3)
                std::fprintf(stderr, "loadgen: bad Filter answer: status %d %s kept %d/%d degraded %d\n",
                             static_cast<int>(status.error_code()), status.error_message().c_str(),
                             resp.kept_indexes_size(), resp.kept_ids_size(), resp.degraded());
            continue;
        }
        out->lat_ms.push_back(ms);
    }
    out->elapsed_s = std::chrono::duration<double>(Clock::now() - t_start).count();
    cq.Shutdown();
    void *tag;
    bool ok;
    while (cq.Next(&tag, &ok)) {
    }
}

Result run_filter(const Options &o, const std::string &addr, const grpc::ByteBuffer &req,
                  size_t want_kept, int inflight, double seconds, double rate = 0,
                  bool prebuilt = false)
{
    std::vector<Result> parts(static_cast<size_t>(inflight));
    std::vector<std::thread> threads;
    auto stop = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(seconds));
    for (int i = 0; i < inflight; i++)
        threads.emplace_back(filter_loop, std::cref(addr), i, std::cref(req), want_kept,
                             o.indexes, rate, stop, !(prebuilt || o.prebuilt),
                             &parts[static_cast<size_t>(i)]);
    for (auto &t : threads) t.join();
    Result all;
    for (auto &p : parts) {
        all.lat_ms.insert(all.lat_ms.end(), p.lat_ms.begin(), p.lat_ms.end());
        all.errors += p.errors;
        all.degraded += p.degraded;
        all.elapsed_s = std::max(all.elapsed_s, p.elapsed_s);
    }
    return all;
}

// The strong legacy client's set: open addressing over the reply's own
// member buffers (nothing copied, nothing allocated per member), XXH3 of
// each member, linear probing in a power-of-two table at most half full.
// Built once per call, as a client that reads the ZSet each time must.
class FlatSet {
public:
    void build(const redisReply *rep)
    {
        rep_ = rep;
        size_t cap = 16;
        while (cap < 2 * rep->elements) cap *= 2;
        slot_.assign(cap, 0);
        hash_.resize(cap);
        mask_ = cap - 1;
        for (size_t i = 0; i < rep->elements; i++) {
            const redisReply *e = rep->element[i];
            uint64_t h = XXH3_64bits(e->str, e->len);
            size_t s = h & mask_;
            while (slot_[s]) s = (s + 1) & mask_;
            slot_[s] = static_cast<uint32_t>(i + 1);
            hash_[s] = h;
        }
    }
    bool has(const std::string &x) const
    {
        uint64_t h = XXH3_64bits(x.data(), x.size());
        for (size_t s = h & mask_; slot_[s]; s = (s + 1) & mask_) {
            if (hash_[s] != h) continue;
            const redisReply *e = rep_->element[slot_[s] - 1];
            if (e->len == x.size() && std::memcmp(e->str, x.data(), x.size()) == 0) return true;
        }
        return false;
    }

private:
    const redisReply *rep_ = nullptr;
    std::vector<uint32_t> slot_;   // member index + 1; 0 = empty
    std::vector<uint64_t> hash_;
    size_t mask_ = 0;
};

// The legacy path, 1 in flight: ZRANGE the whole ZSet, build a set of the
// members (FLAT: FlatSet, else std::unordered_set<std::string_view>), keep
// the candidates not in it.
Result run_legacy(redisContext *c, const std::string &key, const std::vector<std::string> &cands,
                  size_t want_kept, double seconds, bool flat)
{
    Result r;
    r.lat_ms.reserve(100000);
    FlatSet fs;
    std::unordered_set<std::string_view> seen;
    std::vector<uint32_t> kept;
    kept.reserve(cands.size());
    auto t_start = Clock::now();
    auto stop = t_start + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(seconds));
    while (Clock::now() < stop) {
        auto t0 = Clock::now();
        auto *rep = static_cast<redisReply *>(
            redisCommand(c, "ZRANGE %b 0 -1", key.data(), key.size()));
        if (!rep || rep->type != REDIS_REPLY_ARRAY) die("legacy ZRANGE failed");
        kept.clear();
        if (flat) {
            fs.build(rep);
            for (size_t i = 0; i < cands.size(); i++)
                if (!fs.has(cands[i])) kept.push_back(static_cast<uint32_t>(i));
        } else {
            seen.clear();
            seen.reserve(rep->elements);
            for (size_t i = 0; i < rep->elements; i++)
                seen.emplace(rep->element[i]->str, rep->element[i]->len);
            for (size_t i = 0; i < cands.size(); i++)
                if (!seen.count(cands[i])) kept.push_back(static_cast<uint32_t>(i));
        }
        freeReplyObject(rep);
        double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (kept.size() != want_kept) r.errors++;
        r.lat_ms.push_back(ms);
    }
    r.elapsed_s = std::chrono::duration<double>(Clock::now() - t_start).count();
    return r;
}

// One server of a --compare run: everything its slices gave.
struct Side {
    const char *name = "";
    std::string addr;
    int pid = 0;
    size_t want_kept = 0;
    Result all;
    double cpu_s = 0, cs = 0;
    std::vector<double> p50, p99, cps;  // per slice
};

// --compare: the Filter phases alternated between the two servers in
// 0.5 s slices (the order swapped every slice), so a host that slows
// down or speeds up affects both alike; then the slices compared in pairs.
int compare(const Options &o, const grpc::ByteBuffer &req, size_t want_a, size_t want_b)
{
    const double slice_s = 0.5;
    const int slices = std::max(2, static_cast<int>(o.seconds / slice_s + 0.5));
    run_filter(o, o.addr, req, want_a, 1, std::min(1.0, o.seconds));  // warm-up
    run_filter(o, o.compare, req, want_b, 1, std::min(1.0, o.seconds));
    uint64_t errors = 0;
    struct Phase {
        int inflight;
        double rate;
    };
    std::vector<Phase> phases{{1, 0}};
    if (o.rate > 0) phases.push_back({1, o.rate});
    phases.push_back({o.inflight, 0});
    for (const Phase &ph : phases) {
        const int inflight = ph.inflight;
        Side sides[2];
        sides[0].name = "A", sides[0].addr = o.addr, sides[0].pid = o.server_pid;
        sides[0].want_kept = want_a;
        sides[1].name = "B", sides[1].addr = o.compare, sides[1].pid = o.compare_pid;
        sides[1].want_kept = want_b;
        MachineCpu m0 = machine_cpu();
        for (int k = 0; k < slices; k++) {
            for (int j = 0; j < 2; j++) {
                Side &sd = sides[(j + k) % 2];
                Snap a = snap(sd.pid);
                Result r = run_filter(o, sd.addr, req, sd.want_kept, inflight, slice_s, ph.rate);
                Snap b = snap(sd.pid);
                sd.cpu_s += b.server_cpu - a.server_cpu;
                sd.cs += static_cast<double>(b.cs - a.cs);
                std::vector<double> lat = r.lat_ms;
                std::sort(lat.begin(), lat.end());
                sd.p50.push_back(pct(lat, 0.5));
                sd.p99.push_back(pct(lat, 0.99));
                sd.cps.push_back(r.elapsed_s > 0 ? static_cast<double>(lat.size()) / r.elapsed_s : 0);
                sd.all.lat_ms.insert(sd.all.lat_ms.end(), r.lat_ms.begin(), r.lat_ms.end());
                sd.all.elapsed_s += r.elapsed_s;
                sd.all.errors += r.errors;
                sd.all.degraded += r.degraded;
            }
        }
        for (Side &sd : sides) {
            std::string label =
                std::string(sd.name) + " " + sd.addr + ", " + phase_name(inflight, ph.rate);
            print(label.c_str(), sd.all, sd.pid > 0 ? sd.cpu_s : -1, -1, sd.pid > 0 ? sd.cs : -1);
            errors += sd.all.errors;
        }
        print_steal(m0, machine_cpu());
        // Paired: slice k of B against slice k of A.
        int p50_lower = 0, p99_lower = 0, cps_higher = 0;
        std::vector<double> r50, r99, rcps;
        for (int k = 0; k < slices; k++) {
            p50_lower += sides[1].p50[k] < sides[0].p50[k];
            p99_lower += sides[1].p99[k] < sides[0].p99[k];
            cps_higher += sides[1].cps[k] > sides[0].cps[k];
            r50.push_back(sides[1].p50[k] / sides[0].p50[k]);
            r99.push_back(sides[1].p99[k] / sides[0].p99[k]);
            rcps.push_back(sides[1].cps[k] / sides[0].cps[k]);
        }
        std::sort(r50.begin(), r50.end());
        std::sort(r99.begin(), r99.end());
        std::sort(rcps.begin(), rcps.end());
        std::printf("%-44s B/A in %d slice pairs (median): p50 %.3f (B lower in %d), p99 %.3f (B "
                    "lower in %d), calls/s %.3f (B higher in %d)\n",
                    "", slices, pct(r50, 0.5), p50_lower, pct(r99, 0.5), p99_lower, pct(rcps, 0.5),
                    cps_higher);
        std::fflush(stdout);
    }
    return errors ? 1 : 0;
}

Options parse(int argc, char **argv)
{
    Options o;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) die("missing value for " + a);
            return argv[++i];
        };
        if (a == "--addr") o.addr = val();
        else if (a == "--redis") o.redis = val();
        else if (a == "--seconds") o.seconds = std::atof(val().c_str());
        else if (a == "--inflight") o.inflight = std::atoi(val().c_str());
        else if (a == "--mode") o.indexes = val() != "ids";
        else if (a == "--user") o.user = val();
        else if (a == "--server-pid") o.server_pid = std::atoi(val().c_str());
        else if (a == "--phase") o.phase = val();
        else if (a == "--window") o.window = std::atoi(val().c_str());
        else if (a == "--rate") o.rate = std::atof(val().c_str());
        else if (a == "--client-spin") o.client_spin = true;
        else if (a == "--compare") o.compare = val();
        else if (a == "--compare-pid") o.compare_pid = std::atoi(val().c_str());
        else if (a == "--users-file") o.users_file = val();
        else if (a == "--prebuilt") o.prebuilt = true;
        else if (a == "--hashes") o.hashes = true;
        else if (a == "--candidates") {
            long n = std::atol(val().c_str());
            if (n < 100 || n > 10000) die("--candidates: 100 .. 10000");
            o.candidates = static_cast<size_t>(n);
        } else if (a == "--plays") {
            long n = std::atol(val().c_str());
            if (n < 1 || n > 50000) die("--plays: 1 .. 50000");
            o.plays = static_cast<size_t>(n);
        }
        else die("unknown option " + a +
                 " (usage: loadgen --addr H:P --redis H:P [--seconds S] [--inflight N]"
                 " [--mode ids|indexes] [--user ID] [--server-pid PID]"
                 " [--phase all|setup|run] [--window BYTES] [--rate CALLS_PER_S]"
                 " [--client-spin] [--compare HOST:PORT [--compare-pid PID]]"
                 " [--users-file PATH] [--plays N] [--candidates N] [--prebuilt] [--hashes])");
    }
    if (o.seconds <= 0 || o.inflight < 1) die("--seconds and --inflight must be positive");
    if (!o.users_file.empty() && (o.phase != "run" || !o.compare.empty()))
        die("--users-file goes with --phase run and without --compare");
    if (o.rate < 0) die("--rate must be 0 or more");
    if (o.phase != "all" && o.phase != "setup" && o.phase != "run")
        die("--phase is all, setup or run");
    return o;
}

}  // namespace

int main(int argc, char **argv)
{
    Options o = parse(argc, argv);
    g_window = o.window;
    g_client_spin = o.client_spin;
    const size_t n_plays = o.plays, n_cands = o.candidates;

    std::vector<std::string> plays(n_plays);
    for (size_t i = 0; i < n_plays; i++) plays[i] = "video-" + std::to_string(1000000 + i * 7);
    // Candidates: every 5th played (2,000), 50 of the deliveries, the rest fresh.
    std::vector<std::string> cands(n_cands);
    size_t n_played = 0, n_delivered = 0;
    for (size_t i = 0; i < n_cands; i++) {
        if (i % 5 == 0) {
            cands[i] = plays[(i / 5) * 5 % n_plays];
            n_played++;
        } else if (i % 5 == 1 && n_delivered < 50) {
            cands[i] = "delivered-" + std::to_string(n_delivered * 2);
            n_delivered++;
        } else {
            cands[i] = "video-" + std::to_string(5000000 + i * 13);
        }
    }

    auto colon = o.redis.rfind(':');
    if (colon == std::string::npos) die("--redis wants host:port");
    struct timeval tv = {2, 0};
    redisContext *rc = redisConnectWithTimeout(o.redis.substr(0, colon).c_str(),
                                               std::atoi(o.redis.c_str() + colon + 1), tv);
    if (!rc || rc->err) die("cannot connect to redis " + o.redis);
    const std::string legacy_key = "legacy:played:{" + o.user + "}";

    if (o.phase != "run") {
        setup(o, plays);
        setup_legacy(o, rc, plays, legacy_key);
        if (o.phase == "setup") {
            std::printf("setup: user %s, %zu plays, 100 deliveries, legacy ZSet %s\n",
                        o.user.c_str(), n_plays, legacy_key.c_str());
            redisFree(rc);
            return 0;
        }
    }

    g_build.user = o.user;
    g_build.cands = &cands;
    g_build.indexes = o.indexes;
    g_build.hashes = o.hashes;
    dedup::v1::FilterRequest req;
    req.set_user_id(o.user);
    if (o.hashes) {
        for (auto &c : cands) req.add_candidate_hashes(XXH3_64bits_withSeed(c.data(), c.size(), kItemHashSeed));
    } else {
        for (auto &c : cands) req.add_candidate_ids(c);
        req.set_mode(o.indexes ? dedup::v1::RESPONSE_MODE_INDEXES : dedup::v1::RESPONSE_MODE_IDS);
    }
    grpc::ByteBuffer req_buf;  // serialised once: --prebuilt, and one phase of the plain run
    bool own;
    if (!grpc::SerializationTraits<dedup::v1::FilterRequest>::Serialize(req, &req_buf, &own).ok())
        die("cannot serialise the request");

    if (!o.users_file.empty()) {
        // The store's users (bench_cold --users-out), none of whom has any
        // of these candidates: everything is kept but bloom false
        // positives. No warm-up: the first calls are as cold as the rest.
        std::ifstream in(o.users_file);
        for (std::string line; std::getline(in, line);)
            if (!line.empty()) g_users.push_back(line);
        if (g_users.empty()) die("no users in " + o.users_file);
        dedup::v1::FilterRequest base = req;
        base.clear_user_id();
        std::string bytes;
        if (!base.SerializeToString(&bytes)) die("cannot serialise the request");
        g_base = grpc::Slice(bytes);
        g_min_kept = n_cands * 95 / 100;
        std::printf("users: %zu from %s; request %zu candidates (%zu bytes)\n", g_users.size(),
                    o.users_file.c_str(), n_cands, bytes.size());
        std::fflush(stdout);
        uint64_t errors = 0;
        for (double rate : {0.0, o.rate}) {
            Snap a = snap(o.server_pid);
            Result r = run_filter(o, o.addr, req_buf, kAnyKept, 1, o.seconds, rate);
            Snap b = snap(o.server_pid);
            std::string label = "dedupd Filter, users from " + o.users_file + ", " +
                                 phase_name(1, rate);
            print(label.c_str(), r, b.server_cpu - a.server_cpu, b.self_cpu - a.self_cpu,
                  o.server_pid > 0 ? static_cast<double>(b.cs - a.cs) : -1);
            print_steal(a.machine, b.machine);
            errors += r.errors;
            if (o.rate <= 0) break;
        }
        redisFree(rc);
        return errors ? 1 : 0;
    }

    // The kept count from one checked call: at most the fresh candidates
    // (bloom false positives may remove a few more); every later call must
    // give the same.
    size_t fresh = n_cands - n_played - n_delivered;
    auto checked_call = [&](const std::string &addr) -> size_t {
        auto stub = dedup::v1::Dedup::NewStub(channel(addr, -2));
        grpc::ClientContext ctx;
        dedup::v1::FilterResponse resp;
        auto s = stub->Filter(&ctx, req, &resp);
        if (!s.ok()) die(addr + ": Filter: " + s.error_message());
        if (resp.degraded()) die(addr + ": Filter answered degraded: is Redis reachable from dedupd?");
        size_t kept = static_cast<size_t>(o.indexes || o.hashes ? resp.kept_indexes_size()
                                                               : resp.kept_ids_size());
        if (kept > fresh || kept < fresh * 95 / 100 || resp.removed_delivered() != n_delivered)
            die(addr + ": unexpected answer: kept " + std::to_string(kept) + " of " +
                std::to_string(fresh) + " fresh, removed_delivered " +
                std::to_string(resp.removed_delivered()) + " removed_played " +
                std::to_string(resp.removed_played()));
        std::printf("request: user %s, %zu plays, 100 deliveries; request %zu candidates (%zu bytes, "
                    "%s, %s), %zu played, %zu delivered; %s kept %zu (%zu bloom false positives)\n",
                    o.user.c_str(), n_plays, n_cands, req.ByteSizeLong(),
                    o.hashes ? "item hashes" : "ids",
                    o.prebuilt ? "serialised once" : "request built in each call", n_played,
                    n_delivered, addr.c_str(), kept, fresh - kept);
        std::fflush(stdout);  // phases are watched from outside (perf, /proc)
        return kept;
    };
    size_t want_kept = checked_call(o.addr);
    if (!o.compare.empty()) {
        size_t want_b = checked_call(o.compare);
        redisFree(rc);
        return compare(o, req_buf, want_kept, want_b);
    }

    run_filter(o, o.addr, req_buf, want_kept, 1, std::min(1.0, o.seconds));  // warm-up
    // One Filter phase against --addr for --seconds, printed with what it
    // cost dedupd, this process and the machine; its latencies come back
    // sorted.
    auto phase = [&](int inflight, double rate, bool prebuilt = false) {
        Snap a = snap(o.server_pid);
        Result r = run_filter(o, o.addr, req_buf, want_kept, inflight, o.seconds, rate, prebuilt);
        Snap b = snap(o.server_pid);
        std::string label = "dedupd Filter, " + phase_name(inflight, rate) +
                            (prebuilt && !o.prebuilt ? ", request serialised once" : "");
        print(label.c_str(), r, b.server_cpu - a.server_cpu, b.self_cpu - a.self_cpu,
              o.server_pid > 0 ? static_cast<double>(b.cs - a.cs) : -1);
        print_steal(a.machine, b.machine);
        return r;
    };
    Result low = phase(1, 0);
    uint64_t paced_errors = o.rate > 0 ? phase(1, o.rate).errors : 0;
    Result sat = phase(o.inflight, 0);
    // The figure earlier runs gave: the same, with the request's bytes
    // made once and reused (no caller's cost of building it).
    Result low_pre = o.prebuilt ? low : phase(1, 0, true);
    MachineCpu m2 = machine_cpu();
    Result legacy = run_legacy(rc, legacy_key, cands, n_cands - n_played, o.seconds, true);
    const std::string zr = "legacy ZRANGE " + std::to_string(n_plays);
    print((zr + " + flat hash set (strong), 1 in flight").c_str(), legacy);
    Result weak = run_legacy(rc, legacy_key, cands, n_cands - n_played, o.seconds, false);
    print((zr + " + std::unordered_set (weak), 1 in flight").c_str(), weak);
    print_steal(m2, machine_cpu());
    redisFree(rc);

    double r50 = pct(legacy.lat_ms, 0.5) / pct(low.lat_ms, 0.5);
    double r99 = pct(legacy.lat_ms, 0.99) / pct(low.lat_ms, 0.99);
    std::printf("ratio legacy/dedupd latency: p50 %.1fx, p99 %.1fx (strong baseline, %s); "
                "p50 %.1fx against the weak one; p50 %.1fx with the request serialised once\n",
                r50, r99, o.prebuilt ? "request serialised once" : "request built in each call",
                pct(weak.lat_ms, 0.5) / pct(low.lat_ms, 0.5),
                pct(legacy.lat_ms, 0.5) / pct(low_pre.lat_ms, 0.5));
    double low_p99 = pct(low.lat_ms, 0.99);
    double sat_cps = static_cast<double>(sat.lat_ms.size()) / sat.elapsed_s;
    std::printf("goal p99 <= 1 ms at 1 in flight: %s (%.3f ms)\n", low_p99 <= 1.0 ? "met" : "MISSED", low_p99);
    std::printf("goal >= 2000 calls/s at saturation: %s (%.0f)\n", sat_cps >= 2000 ? "met" : "MISSED", sat_cps);
    std::printf("goal >= 3x faster than the strong legacy path (p50): %s (%.1fx)\n",
                r50 >= 3 ? "met" : "MISSED", r50);
    std::printf("hardware threads: %u\n", std::thread::hardware_concurrency());
    return low.errors + paced_errors + sat.errors + legacy.errors + weak.errors +
                   (o.prebuilt ? 0 : low_pre.errors)
               ? 1
               : 0;
}
