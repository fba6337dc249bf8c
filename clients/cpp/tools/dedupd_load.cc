// SPDX-License-Identifier: Apache-2.0
//
// dedupd_load.cc - dedupd-load: Filter load through the C++ client library
// (dedupd/client.h), for benchmarks and checks against a fleet.
//
//   dedupd-load --seeds ADDR,... --users N --seconds S --candidates C
//               [--ids] [--no-hedge] [--hedge-ms X] [--inflight K] [--rate R]
//               [--phases P] [--forward] [--no-setup] [--server-pids PID,...]
//               [--deadline-ms D] [--tls-ca F [--tls-cert F --tls-key F] [--tls-name N]]
//
// Setup (unless --no-setup): each of the N users "load-user-I" gets 20
// plays, the candidates "cand-0" .. "cand-19" (RecordPlays, routed like
// every call). Then Filter for S seconds, split into P phases of S/P
// seconds (default 1): K calls in flight (K threads, each one call at a
// time, default 1), each for the next user with the same C candidates
// ("cand-0" .. "cand-{C-1}"), sent as item hashes (or ids, --ids). With
// --rate R the calls are paced at R/s in total and timed from when each
// was due, so a stall shows in the latency of the calls behind it.
//
// One line per phase:
//   phase=NAME calls= failed= hedged= hedge_wins= failovers= stale_map=
//   unrouted= wrong= calls_per_s= req_bytes= p50_ms= p99_ms= p999_ms=
//   [dedupd_cpu_ms_per_call=]
// failed: calls that did not succeed within their deadline (default
// 2000 ms); wrong: answers that kept a played candidate (a replica behind
// on the setup's plays; not counted as failed). hedged: calls for which a
// second request was sent. dedupd_cpu_ms_per_call: the CPU time of the
// --server-pids processes (/proc/PID/stat) over the phase's calls.
// --forward sends every call to a seed, which forwards it (the path the
// library replaces), for comparison. Exit status 1 if any call failed.
#include <dedupd/client.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
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
    bool ids = false, no_hedge = false, forward = false, no_setup = false;
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
                 "[--phases P] [--forward] [--no-setup] [--server-pids PID,...] [--deadline-ms D] "
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

struct PhaseResult {
    std::vector<double> lat_ms;
    uint64_t failed = 0, hedged = 0, wrong = 0;
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
    for (long j = 0; j < a.candidates; j++) cands.push_back("cand-" + std::to_string(j));
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

    std::atomic<size_t> next_user{0};
    for (long ph = 0; ph < a.phases; ph++) {
        const double secs = a.seconds / static_cast<double>(a.phases);
        const auto stop = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(secs));
        dedupd::Stats st0 = client->GetStats();
        double cpu0 = CpuOf(a.pids);
        std::vector<PhaseResult> parts(static_cast<size_t>(a.inflight));
        std::vector<std::thread> ts;
        auto t_start = Clock::now();
        for (long t = 0; t < a.inflight; t++)
            ts.emplace_back([&, t] {
                PhaseResult &r = parts[static_cast<size_t>(t)];
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
                    const std::string &u = users[next_user++ % users.size()];
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
                    if (!a.no_setup && !res.kept_indexes.empty() && res.kept_indexes[0] < n_played)
                        r.wrong++;
                    r.lat_ms.push_back(ms);
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
        }
        std::sort(all.lat_ms.begin(), all.lat_ms.end());
        uint64_t calls = all.lat_ms.size() + all.failed;
        uint64_t begun = st.filter_calls - st0.filter_calls;
        std::printf(
            "phase=filter%ld calls=%llu failed=%llu hedged=%llu hedge_wins=%llu failovers=%llu "
            "stale_map=%llu unrouted=%llu wrong=%llu calls_per_s=%.0f req_bytes=%llu "
            "p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f",
            ph + 1, static_cast<unsigned long long>(calls),
            static_cast<unsigned long long>(all.failed),
            static_cast<unsigned long long>(all.hedged),
            static_cast<unsigned long long>(st.hedge_wins - st0.hedge_wins),
            static_cast<unsigned long long>(st.failovers - st0.failovers),
            static_cast<unsigned long long>(st.stale_map - st0.stale_map),
            static_cast<unsigned long long>(st.unrouted - st0.unrouted),
            static_cast<unsigned long long>(all.wrong),
            elapsed > 0 ? static_cast<double>(calls) / elapsed : 0,
            static_cast<unsigned long long>(begun ? (st.request_bytes - st0.request_bytes) / begun
                                                  : 0),
            Pct(all.lat_ms, 0.5), Pct(all.lat_ms, 0.99), Pct(all.lat_ms, 0.999));
        if (!a.pids.empty() && calls > 0)
            std::printf(" dedupd_cpu_ms_per_call=%.4f", cpu * 1000 / static_cast<double>(calls));
        std::printf("\n");
        std::fflush(stdout);
        any_failed |= all.failed > 0;
    }
    return any_failed ? 1 : 0;
}
