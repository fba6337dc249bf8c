// SPDX-License-Identifier: Apache-2.0
//
// dedupd_load.cc - dedupd-load: Filter load through the C++ client library
// (dedupd/client.h), for benchmarks and checks against a fleet.
//
//   dedupd-load --seeds ADDR,... --users N --seconds S --candidates C
//               [--ids] [--no-hedge] [--hedge-ms X] [--inflight K] [--rate R]
//               [--phases P] [--forward | --direct] [--no-setup] [--server-pids PID,...]
//               [--id-bytes B]
//               [--deadline-ms D] [--tls-ca F [--tls-cert F --tls-key F] [--tls-name N]]
//
// Candidate J is "cand-J", its number padded with zeros to B bytes in all
// (--id-bytes, default 13: a 10,000-candidate request of ids is then the
// 150 KB a recall service sends; shorter names are never padded away).
// Setup (unless --no-setup): each of the N users "load-user-I" gets 20
// plays, the candidates 0 .. 19 (RecordPlays, routed like every call).
// Then Filter for S seconds, split into P phases of S/P seconds (default
// 1): K calls in flight (K threads, each one call at a time, default 1),
// each for the next user with the same C candidates, sent as item hashes
// (or ids, --ids). With
// --rate R the calls are paced at R/s in total and timed from when each
// was due, so a stall shows in the latency of the calls behind it.
//
// One line per phase:
//   phase=NAME calls= failed= hedged= hedge_wins= failovers= stale_map=
//   unrouted= wrong= replicas= calls_per_s= req_bytes= p50_ms= p99_ms=
//   p999_ms= [dedupd_cpu_ms_per_call=]
// failed: calls that did not succeed within their deadline (default
// 2000 ms); replicas: how many nodes answered; wrong: answers that kept a
// played candidate (a replica behind on the setup's plays; not counted as
// failed). hedged: calls for which a
// second request was sent. dedupd_cpu_ms_per_call: the CPU time of the
// --server-pids processes (/proc/PID/stat) over the phase's calls.
// --forward sends every call to a seed, which forwards it (the path the
// library replaces), for comparison. --direct is the floor the library is
// measured against: each call is built by hand (the same fields and
// bytes the library sends, through no protobuf object) and sent on a
// plain grpc::GenericStub straight to the first replica of the owning
// shard (from the library's map, read once), with the map's hash in the
// metadata; no routing, failover or hedging (hedged= is 0); failed= counts
// answers that are not OK. --paired measures the two side by side, robust
// to a host whose speed drifts: each thread makes pairs of calls for one
// user, one through the library and one direct to the node the library
// used last for that shard (so both find it equally warm), in alternating
// order; the library's calls give the phase=filter line, the direct ones a
// phase=direct line with the same fields. Exit status 1 if any call failed.
#include <dedupd/client.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace
{

using Clock = std::chrono::steady_clock;

struct Args {
    std::vector<std::string> seeds;
    long users = 100;
    double seconds = 5;
    long candidates = 1000;
    bool ids = false, no_hedge = false, forward = false, direct = false, paired = false;
    bool no_setup = false;
    long id_bytes = 13;
    double hedge_ms = 0;
    long inflight = 1;
    double rate = 0;
    long phases = 1;
    long deadline_ms = 2000;
    std::vector<int> pids;
    dedupd::Tls tls;
};

[[noreturn]] void Usage(const std::string &why)
{
    std::fprintf(stderr,
                 "dedupd-load: %s\nusage: dedupd-load --seeds ADDR,... --users N --seconds S "
                 "--candidates C [--ids] [--no-hedge] [--hedge-ms X] [--inflight K] [--rate R] "
                 "[--phases P] [--forward | --direct | --paired] [--no-setup] "
                 "[--server-pids PID,...] "
                 "[--deadline-ms D] [--id-bytes B] "
                 "[--tls-ca F [--tls-cert F --tls-key F] [--tls-name N]]\n",
                 why.c_str());
    std::exit(2);
}

std::vector<std::string> SplitComma(const std::string &s)
{
    std::vector<std::string> out;
    std::stringstream in(s);
    for (std::string x; std::getline(in, x, ',');)
        if (!x.empty()) out.push_back(x);
    return out;
}

long Num(const char *opt, const std::string &v, long lo, long hi)
{
    char *end;
    long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || n < lo || n > hi)
        Usage(std::string(opt) + ": a number from " + std::to_string(lo) + " to " +
              std::to_string(hi));
    return n;
}

double Real(const char *opt, const std::string &v, double lo, double hi)
{
    char *end;
    double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end || !(x >= lo && x <= hi))
        Usage(std::string(opt) + ": a number from " + std::to_string(lo) + " to " +
              std::to_string(hi));
    return x;
}

Args Parse(int argc, char **argv)
{
    Args a;
    for (int i = 1; i < argc; i++) {
        std::string o = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) Usage("missing value for " + o);
            return argv[++i];
        };
        if (o == "--seeds")
            a.seeds = SplitComma(val());
        else if (o == "--users")
            a.users = Num("--users", val(), 1, 10000000);
        else if (o == "--seconds")
            a.seconds = Real("--seconds", val(), 0.01, 86400);
        else if (o == "--candidates")
            a.candidates = Num("--candidates", val(), 1, 100000);
        else if (o == "--ids")
            a.ids = true;
        else if (o == "--no-hedge")
            a.no_hedge = true;
        else if (o == "--hedge-ms")
            a.hedge_ms = Real("--hedge-ms", val(), 0.01, 60000);
        else if (o == "--inflight")
            a.inflight = Num("--inflight", val(), 1, 1024);
        else if (o == "--rate")
            a.rate = Real("--rate", val(), 0, 1e6);
        else if (o == "--phases")
            a.phases = Num("--phases", val(), 1, 10000);
        else if (o == "--forward")
            a.forward = true;
        else if (o == "--direct")
            a.direct = true;
        else if (o == "--paired")
            a.paired = true;
        else if (o == "--id-bytes")
            a.id_bytes = Num("--id-bytes", val(), 1, 4096);
        else if (o == "--no-setup")
            a.no_setup = true;
        else if (o == "--deadline-ms")
            a.deadline_ms = Num("--deadline-ms", val(), 1, 3600000);
        else if (o == "--server-pids") {
            for (const auto &p : SplitComma(val()))
                a.pids.push_back(static_cast<int>(Num("--server-pids", p, 1, 1 << 30)));
        } else if (o == "--tls-ca")
            a.tls.ca_file = val();
        else if (o == "--tls-cert")
            a.tls.cert_file = val();
        else if (o == "--tls-key")
            a.tls.key_file = val();
        else if (o == "--tls-name")
            a.tls.server_name = val();
        else
            Usage("unknown option " + o);
    }
    if (a.seeds.empty()) Usage("--seeds is required");
    if (a.forward + a.direct + a.paired > 1)
        Usage("--forward, --direct and --paired exclude each other");
    if ((a.direct || a.paired) && !a.tls.ca_file.empty())
        Usage("--direct and --paired speak plaintext only");
    if (a.paired && a.rate > 0) Usage("--paired takes no --rate");
    return a;
}

// CPU seconds (user + system) of PID so far; 0 if unknown.
double CpuSeconds(int pid)
{
    std::string path = "/proc/" + std::to_string(pid) + "/stat";
    FILE *f = std::fopen(path.c_str(), "r");
    if (!f) return 0;
    char buf[1024];
    size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    const char *p = std::strrchr(buf, ')'); // the command name may hold spaces
    unsigned long long ut = 0, st = 0;
    if (!p ||
        std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return 0;
    return static_cast<double>(ut + st) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double CpuOf(const std::vector<int> &pids)
{
    double s = 0;
    for (int p : pids) s += CpuSeconds(p);
    return s;
}

double Pct(const std::vector<double> &sorted, double p)
{
    if (sorted.empty()) return 0;
    size_t i = static_cast<size_t>(p * static_cast<double>(sorted.size()));
    return sorted[std::min(i, sorted.size() - 1)];
}

// --direct: the FilterRequest the library sends, written by hand.
void PutVarint(std::string *b, uint64_t v)
{
    while (v >= 0x80) {
        b->push_back(static_cast<char>((v & 0x7f) | 0x80));
        v >>= 7;
    }
    b->push_back(static_cast<char>(v));
}

void PutBytes(std::string *b, uint32_t field, const std::string &v)
{
    PutVarint(b, field << 3 | 2);
    PutVarint(b, v.size());
    b->append(v);
}

// user_id = 1, candidate_ids = 2 (IDS) or candidate_hashes = 7 (packed
// fixed64, little-endian), mode = 5 (RESPONSE_MODE_INDEXES).
grpc::ByteBuffer DirectRequest(const std::string &user, const std::vector<std::string> &cands,
                               bool ids)
{
    std::string b;
    b.reserve(user.size() + 16 + cands.size() * (ids ? 24 : 8));
    PutBytes(&b, 1, user);
    if (ids) {
        for (const auto &c : cands) PutBytes(&b, 2, c);
    } else {
        PutVarint(&b, 7 << 3 | 2);
        PutVarint(&b, 8 * cands.size());
        for (const auto &c : cands) {
            uint64_t h = dedupd::ItemHash(c);
            for (int k = 0; k < 8; k++) b.push_back(static_cast<char>(h >> (8 * k)));
        }
    }
    PutVarint(&b, 5 << 3 | 0);
    PutVarint(&b, 1);
    grpc::Slice slice(b);
    return grpc::ByteBuffer(&slice, 1);
}

// The first kept index of a FilterResponse (kept_indexes = 2, packed or
// not), or -1 when none is kept or the bytes are not a FilterResponse.
long FirstKept(const grpc::ByteBuffer &resp)
{
    std::vector<grpc::Slice> slices;
    if (!resp.Dump(&slices).ok()) return -1;
    std::string b;
    for (const auto &s : slices) b.append(reinterpret_cast<const char *>(s.begin()), s.size());
    size_t i = 0;
    auto varint = [&](uint64_t *v) {
        *v = 0;
        for (int shift = 0; i < b.size() && shift < 64; shift += 7) {
            uint8_t c = static_cast<uint8_t>(b[i++]);
            *v |= static_cast<uint64_t>(c & 0x7f) << shift;
            if (!(c & 0x80)) return true;
        }
        return false;
    };
    while (i < b.size()) {
        uint64_t key, v;
        if (!varint(&key)) return -1;
        uint32_t field = static_cast<uint32_t>(key >> 3), wt = key & 7;
        if (wt == 0) {
            if (!varint(&v)) return -1;
            if (field == 2) return static_cast<long>(v);
        } else if (wt == 2) {
            if (!varint(&v) || v > b.size() - i) return -1;
            if (field == 2 && v > 0) {
                uint64_t first;
                return varint(&first) ? static_cast<long>(first) : -1;
            }
            i += v;
        } else if (wt == 1 || wt == 5) {
            i += wt == 1 ? 8 : 4;
        } else {
            return -1;
        }
    }
    return -1;
}

// Plain stubs to the owners, one channel per address (shared by threads).
class Direct
{
  public:
    Direct(const dedupd::MapView &m, int max_receive) : map_(m)
    {
        args_.SetMaxReceiveMessageSize(max_receive);
    }

    // The first replica of USER's shard; "" when the map has none.
    std::string Owner(int shard) const
    {
        if (shard < 0 || static_cast<size_t>(shard) >= map_.shards.size() ||
            map_.shards[static_cast<size_t>(shard)].empty())
            return "";
        return map_.shards[static_cast<size_t>(shard)][0].address;
    }

    grpc::GenericStub *Stub(const std::string &addr)
    {
        std::lock_guard<std::mutex> g(mu_);
        auto &s = stubs_[addr];
        if (!s)
            s = std::make_unique<grpc::GenericStub>(
                grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), args_));
        return s.get();
    }

    // One Filter to ADDR; *first_kept as FirstKept.
    bool Call(const std::string &addr, const grpc::ByteBuffer &req, long deadline_ms,
              grpc::CompletionQueue *cq, long *first_kept, std::string *why)
    {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(deadline_ms));
        ctx.AddMetadata("dedupd-map-hash", map_.hash);
        grpc::ByteBuffer resp;
        grpc::Status st;
        auto call = Stub(addr)->PrepareUnaryCall(&ctx, "/dedup.v1.Dedup/Filter", req, cq);
        call->StartCall();
        call->Finish(&resp, &st, reinterpret_cast<void *>(1));
        void *tag;
        bool ok;
        if (!cq->Next(&tag, &ok) || !ok) {
            *why = "completion queue failed";
            return false;
        }
        if (!st.ok()) {
            *why = std::to_string(static_cast<int>(st.error_code())) + " " + st.error_message();
            return false;
        }
        *first_kept = FirstKept(resp);
        return true;
    }

  private:
    dedupd::MapView map_;
    grpc::ChannelArguments args_;
    std::mutex mu_;
    std::map<std::string, std::unique_ptr<grpc::GenericStub>> stubs_;
};

struct PhaseResult {
    std::vector<double> lat_ms;
    uint64_t failed = 0, hedged = 0, wrong = 0;
    std::set<std::string> answered_by;
};

} // namespace

int main(int argc, char **argv)
{
    Args a = Parse(argc, argv);
    dedupd::Options opt;
    opt.seeds = a.seeds;
    opt.tls = a.tls;
    opt.compact = !a.ids;
    opt.hedge = !a.no_hedge;
    opt.route = !a.forward;
    opt.deadline = std::chrono::milliseconds(a.deadline_ms);
    if (a.hedge_ms > 0)
        opt.hedge_delay = std::chrono::microseconds(static_cast<long long>(a.hedge_ms * 1000));
    std::string err;
    auto client = dedupd::Client::Create(opt, &err);
    if (!client) {
        std::fprintf(stderr, "dedupd-load: %s\n", err.c_str());
        return 2;
    }
    std::vector<std::string> users;
    for (long i = 0; i < a.users; i++) users.push_back("load-user-" + std::to_string(i));
    std::vector<std::string> cands;
    for (long j = 0; j < a.candidates; j++) {
        std::string num = std::to_string(j);
        size_t pad = static_cast<size_t>(a.id_bytes) > 5 + num.size()
                         ? static_cast<size_t>(a.id_bytes) - 5 - num.size()
                         : 0;
        cands.push_back("cand-" + std::string(pad, '0') + num);
    }
    const size_t n_played = static_cast<size_t>(std::min<long>(20, a.candidates));

    bool any_failed = false;
    if (!a.no_setup) {
        std::vector<dedupd::Play> plays;
        for (size_t j = 0; j < n_played; j++) plays.push_back(dedupd::Play{cands[j], 0});
        std::atomic<uint64_t> failed{0};
        std::atomic<size_t> next{0};
        std::vector<std::thread> ts;
        auto t0 = Clock::now();
        for (long t = 0; t < std::min<long>(a.inflight, 8); t++)
            ts.emplace_back([&] {
                for (size_t i; (i = next++) < users.size();) {
                    dedupd::Status s = client->RecordPlays(users[i], plays, {});
                    if (!s.ok() && failed++ < 3)
                        std::fprintf(stderr, "dedupd-load: RecordPlays %s: %d %s\n",
                                     users[i].c_str(), static_cast<int>(s.code), s.message.c_str());
                }
            });
        for (auto &t : ts) t.join();
        double secs = std::chrono::duration<double>(Clock::now() - t0).count();
        std::printf("phase=setup calls=%zu failed=%llu seconds=%.2f\n", users.size(),
                    static_cast<unsigned long long>(failed.load()), secs);
        std::fflush(stdout);
        any_failed |= failed > 0;
    }

    // --direct: each user's owner from the map read at the start.
    std::unique_ptr<Direct> direct;
    std::vector<std::string> owner_of;
    std::vector<int> shard_of;
    if (a.direct || a.paired) {
        dedupd::MapView m = client->Map();
        direct = std::make_unique<Direct>(m, 64 << 20);
        for (const auto &u : users) {
            shard_of.push_back(client->ShardOf(u));
            owner_of.push_back(direct->Owner(shard_of.back()));
            if (owner_of.back().empty()) {
                std::fprintf(stderr, "dedupd-load: --direct: no map to route %s by\n",
                             u.c_str());
                return 2;
            }
        }
    }

    std::atomic<size_t> next_user{0};
    for (long ph = 0; ph < a.phases; ph++) {
        const double secs = a.seconds / static_cast<double>(a.phases);
        const auto stop = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(secs));
        dedupd::Stats st0 = client->GetStats();
        double cpu0 = CpuOf(a.pids);
        std::vector<PhaseResult> parts(static_cast<size_t>(a.inflight));
        std::vector<PhaseResult> dparts(static_cast<size_t>(a.inflight)); // --paired
        std::vector<std::thread> ts;
        auto t_start = Clock::now();
        for (long t = 0; t < a.inflight; t++)
            ts.emplace_back([&, t] {
                PhaseResult &r = parts[static_cast<size_t>(t)];
                PhaseResult &dr = dparts[static_cast<size_t>(t)];
                grpc::CompletionQueue cq;
                // --paired: the node the library used last, by shard.
                std::map<int, std::string> last_addr;
                uint64_t pair = 0;
                auto direct_call = [&](size_t ui, const std::string &addr, PhaseResult &out) {
                    const auto c0 = Clock::now();
                    long first = -1;
                    std::string why;
                    bool ok = direct->Call(addr, DirectRequest(users[ui], cands, a.ids),
                                           a.deadline_ms, &cq, &first, &why);
                    double ms = std::chrono::duration<double, std::milli>(Clock::now() - c0).count();
                    if (!ok) {
                        if (out.failed++ < 3)
                            std::fprintf(stderr, "dedupd-load: Filter %s: %s\n",
                                         users[ui].c_str(), why.c_str());
                        return;
                    }
                    if (!a.no_setup && first >= 0 && static_cast<size_t>(first) < n_played)
                        out.wrong++;
                    out.answered_by.insert(addr);
                    out.lat_ms.push_back(ms);
                };
                const auto interval =
                    std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                        a.rate > 0 ? static_cast<double>(a.inflight) / a.rate : 0));
                // Threads start spread over one interval, not all at once.
                auto due = Clock::now() + interval * t / a.inflight;
                while (Clock::now() < stop) {
                    Clock::time_point t0;
                    if (a.rate > 0) {
                        if (Clock::now() < due) std::this_thread::sleep_until(due);
                        if (due >= stop) break;
                        t0 = due;
                        due += interval;
                    } else {
                        t0 = Clock::now();
                    }
                    const size_t ui = next_user++ % users.size();
                    const std::string &u = users[ui];
                    if (a.direct) {
                        direct_call(ui, owner_of[ui], r);
                        continue;
                    }
                    const bool direct_first = a.paired && pair++ % 2 == 1;
                    if (direct_first) {
                        auto it = last_addr.find(shard_of[ui]);
                        direct_call(ui, it != last_addr.end() ? it->second : owner_of[ui], dr);
                        t0 = Clock::now();
                    }
                    dedupd::FilterResult res;
                    dedupd::Status s = client->Filter(u, cands, {}, &res);
                    double ms =
                        std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
                    if (!s.ok()) {
                        if (r.failed++ < 3)
                            std::fprintf(stderr, "dedupd-load: Filter %s: %d %s\n", u.c_str(),
                                         static_cast<int>(s.code), s.message.c_str());
                        continue;
                    }
                    if (res.hedged) r.hedged++;
                    r.answered_by.insert(res.answered_by);
                    if (!a.no_setup && !res.kept_indexes.empty() && res.kept_indexes[0] < n_played)
                        r.wrong++;
                    r.lat_ms.push_back(ms);
                    if (a.paired) {
                        last_addr[shard_of[ui]] = res.answered_by;
                        if (!direct_first) direct_call(ui, res.answered_by, dr);
                    }
                }
            });
        for (auto &t : ts) t.join();
        double elapsed = std::chrono::duration<double>(Clock::now() - t_start).count();
        double cpu = CpuOf(a.pids) - cpu0;
        dedupd::Stats st = client->GetStats();
        PhaseResult all;
        for (auto &p : parts) {
            all.lat_ms.insert(all.lat_ms.end(), p.lat_ms.begin(), p.lat_ms.end());
            all.failed += p.failed;
            all.hedged += p.hedged;
            all.wrong += p.wrong;
            all.answered_by.insert(p.answered_by.begin(), p.answered_by.end());
        }
        std::sort(all.lat_ms.begin(), all.lat_ms.end());
        uint64_t calls = all.lat_ms.size() + all.failed;
        uint64_t begun = st.filter_calls - st0.filter_calls;
        std::printf(
            "phase=filter%ld calls=%llu failed=%llu hedged=%llu hedge_wins=%llu failovers=%llu "
            "stale_map=%llu unrouted=%llu wrong=%llu replicas=%zu calls_per_s=%.0f req_bytes=%llu "
            "p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f",
            ph + 1, static_cast<unsigned long long>(calls),
            static_cast<unsigned long long>(all.failed),
            static_cast<unsigned long long>(all.hedged),
            static_cast<unsigned long long>(st.hedge_wins - st0.hedge_wins),
            static_cast<unsigned long long>(st.failovers - st0.failovers),
            static_cast<unsigned long long>(st.stale_map - st0.stale_map),
            static_cast<unsigned long long>(st.unrouted - st0.unrouted),
            static_cast<unsigned long long>(all.wrong), all.answered_by.size(),
            elapsed > 0 ? static_cast<double>(calls) / elapsed : 0,
            static_cast<unsigned long long>(
                a.direct ? DirectRequest(users[0], cands, a.ids).Length()
                : begun ? (st.request_bytes - st0.request_bytes) / begun
                        : 0),
            Pct(all.lat_ms, 0.5), Pct(all.lat_ms, 0.99), Pct(all.lat_ms, 0.999));
        if (!a.pids.empty() && calls > 0 && !a.paired)
            std::printf(" dedupd_cpu_ms_per_call=%.4f", cpu * 1000 / static_cast<double>(calls));
        std::printf("\n");
        if (a.paired) {
            PhaseResult d;
            for (auto &p : dparts) {
                d.lat_ms.insert(d.lat_ms.end(), p.lat_ms.begin(), p.lat_ms.end());
                d.failed += p.failed;
                d.wrong += p.wrong;
                d.answered_by.insert(p.answered_by.begin(), p.answered_by.end());
            }
            std::sort(d.lat_ms.begin(), d.lat_ms.end());
            uint64_t dcalls = d.lat_ms.size() + d.failed;
            std::printf("phase=direct%ld calls=%llu failed=%llu hedged=0 wrong=%llu replicas=%zu "
                        "calls_per_s=%.0f req_bytes=%zu p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f\n",
                        ph + 1, static_cast<unsigned long long>(dcalls),
                        static_cast<unsigned long long>(d.failed),
                        static_cast<unsigned long long>(d.wrong), d.answered_by.size(),
                        elapsed > 0 ? static_cast<double>(dcalls) / elapsed : 0,
                        DirectRequest(users[0], cands, a.ids).Length(), Pct(d.lat_ms, 0.5),
                        Pct(d.lat_ms, 0.99), Pct(d.lat_ms, 0.999));
            any_failed |= d.failed > 0;
        }
        std::fflush(stdout);
        any_failed |= all.failed > 0;
    }
    return any_failed ? 1 : 0;
}
