// SPDX-License-Identifier: Apache-2.0
//
// lib_check.cc - dedupd/client.h against a real fleet, for
// tests/integration/test_cpp_lib.py (which starts the fleet and judges
// what the nodes' metrics say).
//
//   dedupd_lib_check route SEEDS     (SEEDS: host:port,...)
//     Waits for a map of every shard; writes plays and deliveries for
//     16 fresh users through the library, then filters each user's
//     candidates (played, delivered, repeated and fresh ones) and wants
//     the exact kept set, from the compact form (item hashes), the ids
//     form, FilterAsync and FilterFuture alike, on the same requests.
//     Replicas learn the plays through Kafka, so a user's answer is
//     awaited (up to 20 s) until it is exact. Every call must have been
//     routed (Stats.unrouted 0) and no map found stale.
//   dedupd_lib_check refresh SEEDS
//     Reads the map and prints "hash=H"; then waits for a line on stdin
//     (the fleet's map changes meanwhile) and filters 16 users, each of
//     which must succeed; prints "stale_map=N hash=H2 ok" where N counts
//     the FAILED_PRECONDITION answers the stale map earned.
//   dedupd_lib_check cancelled SEEDS
//     Against the two fake replicas of one shard test_cpp_lib.py starts,
//     one of which answers every call CANCELLED (as a node does to the
//     calls that reach it once its shutdown began): 20 Filter calls must
//     each succeed; prints "failovers=N calls_ok=M".
//   dedupd_lib_check reshard SEEDS
//     Two clients through a resharding step that
//     tests/integration/test_clients_reshard.py performs meanwhile: client
//     0 reads the map only when an answer makes it (a stale map, a
//     failover), client 1 also every 500 ms. Reads commands on stdin, one
//     a line, and answers each with one line, "ok key=value ..." or "fail
//     what" (the details on stderr); the same commands as
//     tests/clients/java/ClientCheck.java's. Where a value is the two
//     clients', it is "client 0's,client 1's".
//       prepare P N  users P-0 .. P-N-1: 30 plays (RecordPlays) and 10
//                    deliveries each through the library, then each user's
//                    Filter until its kept set is exact three times in a
//                    row; answers the maps: hash= shards= users_per_shard=
//       start        a thread calls Filter for the users in turn, through
//                    each client in turn, until stop, judging each answer
//                    (ok, exact kept set: played, delivered and repeated
//                    candidates removed)
//       stop         that thread's counts: calls= failed= inexact= and each
//                    client's stale_map=, map_reads=, unrouted=,
//                    failovers= meanwhile (the test judges them)
//       settle       one Filter of each user through each client, each ok
//                    and exact; the maps then, the counts since the start
//       check R      R rounds of every user's Filter through each client:
//                    each ok, exact and answered by a replica of the
//                    user's shard under that client's map; no stale map,
//                    no call unrouted or failed over meanwhile
//       quit
// Exit 0 when every check passed.
#include <dedupd/client.h>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "check.h"

namespace
{

using Clock = std::chrono::steady_clock;

std::vector<std::string> SplitComma(const std::string &s)
{
    std::vector<std::string> out;
    std::stringstream in(s);
    for (std::string x; std::getline(in, x, ',');)
        if (!x.empty()) out.push_back(x);
    return out;
}

// A client of SEEDS; by default it reads the map only when the checks or
// an answer make it (MAP_REFRESH: 10 min).
std::unique_ptr<dedupd::Client>
Make(const std::vector<std::string> &seeds, bool compact,
     std::chrono::milliseconds map_refresh = std::chrono::milliseconds(600000))
{
    dedupd::Options o;
    o.seeds = seeds;
    o.compact = compact;
    o.hedge = false; // this program checks answers; hedging is dedupd-load's
    o.map_refresh = map_refresh;
    o.deadline = std::chrono::milliseconds(5000);
    std::string err;
    auto c = dedupd::Client::Create(o, &err);
    if (!c) {
        std::fprintf(stderr, "FAILED: Client::Create: %s\n", err.c_str());
        std::exit(1);
    }
    return c;
}

// Until the map has SHARDS shards (0: any number), each with a ready
// replica, and a partition count.
bool WaitMap(dedupd::Client &c, size_t shards)
{
    auto until = Clock::now() + std::chrono::seconds(30);
    for (;;) {
        dedupd::MapView m = c.Map();
        bool ok = m.partition_count > 0 && !m.shards.empty() &&
                  (shards == 0 || m.shards.size() == shards);
        for (const auto &reps : m.shards) {
            bool ready = false;
            for (const auto &r : reps) ready |= r.ready;
            ok &= ready;
        }
        if (ok) return true;
        if (Clock::now() > until) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        c.RefreshMap();
    }
}

struct UserCase {
    std::string user;
    std::vector<std::string> plays, deliveries, candidates;
    std::vector<uint32_t> want; // kept indexes
};

UserCase MakeCase(const std::string &user)
{
    UserCase u;
    u.user = user;
    for (int k = 0; k < 30; k++) u.plays.push_back(user + "-p" + std::to_string(k));
    for (int k = 0; k < 10; k++) u.deliveries.push_back(user + "-d" + std::to_string(k));
    // 200 candidates: every 10th played, the next one delivered (10),
    // the one after a repeat of the one before it; the rest fresh.
    for (uint32_t i = 0; i < 200; i++) {
        if (i % 10 == 0)
            u.candidates.push_back(u.plays[(i / 10) % 30]);
        else if (i % 10 == 1 && i / 10 < 10)
            u.candidates.push_back(u.deliveries[i / 10]);
        else if (i % 10 == 3)
            u.candidates.push_back(u.candidates.back());
        else {
            u.candidates.push_back(user + "-fresh" + std::to_string(i));
            u.want.push_back(i);
        }
    }
    return u;
}

int Route(const std::vector<std::string> &seeds)
{
    auto compact = Make(seeds, true);
    auto ids = Make(seeds, false);
    if (!WaitMap(*compact, 2) || !WaitMap(*ids, 2)) {
        std::fprintf(stderr, "FAILED: no map of 2 shards with ready replicas in 30 s\n");
        return 1;
    }
    dedupd::MapView m = compact->Map();
    std::printf("map hash=%s partitioner=%s partitions=%u shards=%zu\n", m.hash.c_str(),
                m.partitioner.c_str(), m.partition_count, m.shards.size());
    for (const auto &reps : m.shards)
        CHECK(reps.size() == 2, "%zu replicas in a shard", reps.size());

    std::vector<UserCase> cases;
    std::set<int> shards_seen;
    for (int i = 0; i < 16; i++) {
        cases.push_back(MakeCase("libcheck-" + std::to_string(getpid()) + "-" + std::to_string(i)));
        shards_seen.insert(compact->ShardOf(cases.back().user));
    }
    CHECK(shards_seen.size() == 2, "16 users on %zu shards", shards_seen.size());
    for (const auto &u : cases) {
        std::vector<dedupd::Play> plays;
        for (const auto &p : u.plays) plays.push_back(dedupd::Play{p, 0});
        uint32_t accepted = 0, recent = 0;
        dedupd::Status s = compact->RecordPlays(u.user, plays, {}, &accepted);
        CHECK(s.ok() && accepted == 30, "RecordPlays %s: %d %s accepted %u", u.user.c_str(),
              static_cast<int>(s.code), s.message.c_str(), accepted);
        s = compact->RecordDelivery(u.user, u.deliveries, {}, 0, &recent);
        CHECK(s.ok() && recent == 10, "RecordDelivery %s: %d %s recent %u", u.user.c_str(),
              static_cast<int>(s.code), s.message.c_str(), recent);
    }
    for (const auto &u : cases) {
        // Each replica learns the plays from Kafka: ask until both forms,
        // from whichever replica, give exactly the kept set.
        auto until = Clock::now() + std::chrono::seconds(20);
        dedupd::FilterResult a, b;
        int exact = 0;
        for (;;) {
            dedupd::Status sa = compact->Filter(u.user, u.candidates, {}, &a);
            dedupd::Status sb = ids->Filter(u.user, u.candidates, {}, &b);
            CHECK(sa.ok() && sb.ok(), "Filter %s: %s / %s", u.user.c_str(), sa.message.c_str(),
                  sb.message.c_str());
            if (!sa.ok() || !sb.ok()) break;
            // Calls take the replicas in turn: three exact answers in a
            // row from each client have seen both replicas.
            if (a.kept_indexes == u.want && b.kept_indexes == u.want) {
                if (++exact == 3) break;
                continue;
            }
            exact = 0;
            if (Clock::now() > until) {
                CHECK(false, "%s: kept %zu (compact, %s) and %zu (ids, %s), want %zu",
                      u.user.c_str(), a.kept_indexes.size(), a.answered_by.c_str(),
                      b.kept_indexes.size(), b.answered_by.c_str(), u.want.size());
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        CHECK(a.removed_duplicate == 20 && b.removed_duplicate == 20, "%s: duplicates %u / %u",
              u.user.c_str(), a.removed_duplicate, b.removed_duplicate);
        CHECK(dedupd::KeptIds(a, u.candidates).size() == u.want.size(), "KeptIds");
        // The same request again, asynchronously: by callback and future,
        // compact and ids alike, must keep the same set.
        std::promise<std::pair<dedupd::Status, dedupd::FilterResult>> p;
        auto pf = p.get_future();
        compact->FilterAsync(u.user, u.candidates, {},
                             [&p](dedupd::Status s, dedupd::FilterResult r) {
                                 p.set_value(std::make_pair(std::move(s), std::move(r)));
                             });
        auto f = ids->FilterFuture(u.user, u.candidates, {});
        auto ra = pf.get();
        auto rb = f.get();
        CHECK(ra.first.ok() && ra.second.kept_indexes == u.want, "FilterAsync %s: %s kept %zu",
              u.user.c_str(), ra.first.message.c_str(), ra.second.kept_indexes.size());
        CHECK(rb.first.ok() && rb.second.kept_indexes == u.want, "FilterFuture %s: %s kept %zu",
              u.user.c_str(), rb.first.message.c_str(), rb.second.kept_indexes.size());
    }
    for (auto *c : {compact.get(), ids.get()}) {
        dedupd::Stats st = c->GetStats();
        std::printf("stats filter_calls=%llu unrouted=%llu stale_map=%llu failovers=%llu "
                    "request_bytes=%llu\n",
                    static_cast<unsigned long long>(st.filter_calls),
                    static_cast<unsigned long long>(st.unrouted),
                    static_cast<unsigned long long>(st.stale_map),
                    static_cast<unsigned long long>(st.failovers),
                    static_cast<unsigned long long>(st.request_bytes));
        CHECK(st.unrouted == 0, "%llu calls unrouted",
              static_cast<unsigned long long>(st.unrouted));
        CHECK(st.stale_map == 0, "%llu stale-map answers",
              static_cast<unsigned long long>(st.stale_map));
    }
    // The compact form is the smaller request.
    CHECK(compact->GetStats().request_bytes < ids->GetStats().request_bytes,
          "compact requests not smaller");
    return failures ? 1 : 0;
}

int Refresh(const std::vector<std::string> &seeds)
{
    auto c = Make(seeds, true);
    if (!WaitMap(*c, 2)) {
        std::fprintf(stderr, "FAILED: no map of 2 shards with ready replicas in 30 s\n");
        return 1;
    }
    std::string before = c->Map().hash;
    std::printf("hash=%s\n", before.c_str());
    std::fflush(stdout);
    std::string line;
    if (!std::getline(std::cin, line)) return 1;
    int ok = 0;
    for (int i = 0; i < 16; i++) {
        std::vector<std::string> cands{"a", "b", "c"};
        dedupd::FilterResult r;
        dedupd::Status s = c->Filter("refresh-" + std::to_string(i), cands, {}, &r);
        CHECK(s.ok(), "Filter after the map change: %d %s", static_cast<int>(s.code),
              s.message.c_str());
        ok += s.ok();
    }
    dedupd::Stats st = c->GetStats();
    std::string after = c->Map().hash;
    std::printf("stale_map=%llu map_reads=%llu unrouted=%llu hash=%s calls_ok=%d\n",
                static_cast<unsigned long long>(st.stale_map),
                static_cast<unsigned long long>(st.map_reads),
                static_cast<unsigned long long>(st.unrouted), after.c_str(), ok);
    CHECK(st.stale_map > 0, "no FAILED_PRECONDITION seen");
    CHECK(after != before, "the map hash did not change (%s)", after.c_str());
    return failures ? 1 : 0;
}

int Cancelled(const std::vector<std::string> &seeds)
{
    auto c = Make(seeds, true);
    if (!WaitMap(*c, 1)) {
        std::fprintf(stderr, "FAILED: no map of 1 shard with ready replicas in 30 s\n");
        return 1;
    }
    int ok = 0;
    for (int i = 0; i < 20; i++) {
        std::vector<std::string> cands{"a", "b", "c"};
        dedupd::FilterResult r;
        dedupd::Status s = c->Filter("cancelled-" + std::to_string(i), cands, {}, &r);
        CHECK(s.ok(), "Filter %d: %d %s", i, static_cast<int>(s.code), s.message.c_str());
        ok += s.ok();
    }
    dedupd::Stats st = c->GetStats();
    std::printf("failovers=%llu calls_ok=%d\n", static_cast<unsigned long long>(st.failovers), ok);
    return failures ? 1 : 0;
}

// Mode reshard (see the top): the two clients and the users the commands
// share. Client 0 reads the map only when an answer makes it; client 1
// also every 500 ms, as a service does (every 10 s by default), so that
// it holds the new map while an old node still runs the old one.
class Resharding
{
  public:
    explicit Resharding(const std::vector<std::string> &seeds)
    {
        c_[0] = Make(seeds, true);
        c_[1] = Make(seeds, true, std::chrono::milliseconds(500));
    }
    ~Resharding()
    {
        Stop();
    }

    // Runs one command line; its answer (without "ok "/"fail ").
    std::string Run(const std::vector<std::string> &w)
    {
        if (w[0] == "prepare" && w.size() == 3) return Prepare(w[1], std::stoi(w[2]));
        if (w[0] == "start") {
            CHECK(!users_.empty(), "start before prepare");
            if (users_.empty()) return "";
            Stop();
            loop_ = Counts{};
            stop_ = false;
            for (int k = 0; k < 2; k++) before_[k] = c_[k]->GetStats();
            thread_ = std::thread([this] { Loop(); });
            return "users=" + std::to_string(users_.size());
        }
        if (w[0] == "stop") {
            Stop();
            std::ostringstream o;
            o << "calls=" << loop_.calls << " failed=" << loop_.failed
              << " inexact=" << loop_.inexact << " degraded=" << loop_.degraded << " "
              << Counters(before_) << " " << MapLine();
            return o.str();
        }
        if (w[0] == "settle") {
            for (const UserCase &u : users_)
                for (auto &c : c_) Judge(*c, u, false, nullptr);
            return MapLine() + " " + Counters(nullptr);
        }
        if (w[0] == "check" && w.size() == 2) {
            dedupd::Stats a[2] = {c_[0]->GetStats(), c_[1]->GetStats()};
            int rounds = std::stoi(w[1]), calls = 0;
            for (int r = 0; r < rounds; r++)
                for (const UserCase &u : users_)
                    for (auto &c : c_) {
                        Judge(*c, u, true, nullptr);
                        calls++;
                    }
            for (int k = 0; k < 2; k++) {
                dedupd::Stats b = c_[k]->GetStats();
                CHECK(b.stale_map == a[k].stale_map && b.unrouted == a[k].unrouted &&
                          b.failovers == a[k].failovers,
                      "client %d after the refresh: %llu stale-map answers, %llu calls unrouted, "
                      "%llu failed over",
                      k, static_cast<unsigned long long>(b.stale_map - a[k].stale_map),
                      static_cast<unsigned long long>(b.unrouted - a[k].unrouted),
                      static_cast<unsigned long long>(b.failovers - a[k].failovers));
            }
            return "calls=" + std::to_string(calls) + " " + MapLine();
        }
        CHECK(false, "unknown command %s", w[0].c_str());
        return "";
    }

  private:
    struct Counts {
        uint64_t calls = 0, failed = 0, inexact = 0, degraded = 0;
    };

    // Each client's map hash and shard count ("client 0's,client 1's"),
    // and how many of the users each shard of client 0's map owns.
    std::string MapLine() const
    {
        dedupd::MapView m[2] = {c_[0]->Map(), c_[1]->Map()};
        std::vector<int> per(m[0].shards.size(), 0);
        for (const UserCase &u : users_) {
            int s = c_[0]->ShardOf(u.user);
            if (s >= 0 && static_cast<size_t>(s) < per.size()) per[static_cast<size_t>(s)]++;
        }
        std::string users;
        for (size_t s = 0; s < per.size(); s++) users += (s ? "," : "") + std::to_string(per[s]);
        return "hash=" + m[0].hash + "," + m[1].hash + " shards=" +
               std::to_string(m[0].shards.size()) + "," + std::to_string(m[1].shards.size()) +
               " users_per_shard=" + users;
    }

    // Each client's stale_map, map_reads, unrouted and failovers since
    // FROM (null: since it was made), "client 0's,client 1's".
    std::string Counters(const dedupd::Stats *from) const
    {
        std::string out[4];
        for (int k = 0; k < 2; k++) {
            dedupd::Stats b = c_[k]->GetStats(), a = from ? from[k] : dedupd::Stats{};
            const char *sep = k ? "," : "";
            out[0] += sep + std::to_string(b.stale_map - a.stale_map);
            out[1] += sep + std::to_string(b.map_reads - a.map_reads);
            out[2] += sep + std::to_string(b.unrouted - a.unrouted);
            out[3] += sep + std::to_string(b.failovers - a.failovers);
        }
        return "stale_map=" + out[0] + " map_reads=" + out[1] + " unrouted=" + out[2] +
               " failovers=" + out[3];
    }

    // Filters U's candidates once through C; CHECKs the answer (ok, exact
    // and, with OWNER, answered by a replica of U's shard in C's map), or
    // with COUNTS counts what is wrong there instead (the first 5 of each
    // kind on stderr, after TAG). True when all was well.
    bool Judge(dedupd::Client &c, const UserCase &u, bool owner, Counts *counts,
               const char *tag = "FAILED")
    {
        dedupd::FilterResult r;
        dedupd::Status s = c.Filter(u.user, u.candidates, {}, &r);
        if (counts) counts->calls++;
        if (!s.ok()) {
            if (counts && counts->failed++ >= 5) return false;
            std::fprintf(stderr, "%s: %s: Filter failed: %d %s\n", tag, u.user.c_str(),
                         static_cast<int>(s.code), s.message.c_str());
            if (!counts) failures++;
            return false;
        }
        if (r.degraded && counts) counts->degraded++;
        bool exact = r.kept_indexes == u.want && r.removed_played == 20 &&
                     r.removed_delivered == 10 && r.removed_duplicate == 20;
        if (!exact) {
            if (counts && counts->inexact++ >= 5) return false;
            std::fprintf(stderr,
                         "%s: %s: kept %zu (want %zu), removed played %u delivered %u "
                         "duplicate %u, answered by %s%s\n",
                         tag, u.user.c_str(), r.kept_indexes.size(), u.want.size(),
                         r.removed_played, r.removed_delivered, r.removed_duplicate,
                         r.answered_by.c_str(), r.degraded ? " (degraded)" : "");
            if (!counts) failures++;
            return false;
        }
        if (owner) {
            dedupd::MapView m = c.Map();
            int shard = c.ShardOf(u.user);
            bool found = false;
            if (shard >= 0 && static_cast<size_t>(shard) < m.shards.size())
                for (const auto &rep : m.shards[static_cast<size_t>(shard)])
                    found |= rep.address == r.answered_by;
            CHECK(found, "%s: answered by %s, not by a replica of its shard %d", u.user.c_str(),
                  r.answered_by.c_str(), shard);
            return found;
        }
        return true;
    }

    std::string Prepare(const std::string &prefix, int n)
    {
        for (auto &c : c_)
            if (!WaitMap(*c, 0)) {
                CHECK(false, "no map with a ready replica of every shard in 30 s");
                return "";
            }
        users_.clear();
        for (int i = 0; i < n; i++) users_.push_back(MakeCase(prefix + "-" + std::to_string(i)));
        for (const UserCase &u : users_) {
            std::vector<dedupd::Play> plays;
            for (const auto &p : u.plays) plays.push_back(dedupd::Play{p, 0});
            uint32_t accepted = 0, recent = 0;
            dedupd::Status s = c_[0]->RecordPlays(u.user, plays, {}, &accepted);
            CHECK(s.ok() && accepted == 30, "RecordPlays %s: %d %s accepted %u", u.user.c_str(),
                  static_cast<int>(s.code), s.message.c_str(), accepted);
            s = c_[0]->RecordDelivery(u.user, u.deliveries, {}, 0, &recent);
            CHECK(s.ok() && recent == 10, "RecordDelivery %s: %d %s recent %u", u.user.c_str(),
                  static_cast<int>(s.code), s.message.c_str(), recent);
        }
        // The replicas learn the plays from Kafka (the test also waits
        // until every node has them): until three exact answers in a row.
        Counts quiet; // the first answers not yet exact are shown, not failed
        for (const UserCase &u : users_) {
            auto until = Clock::now() + std::chrono::seconds(20);
            for (int exact = 0; exact < 3;) {
                if (Judge(*c_[exact % 2], u, false, &quiet, "not yet")) {
                    exact++;
                    continue;
                }
                exact = 0;
                if (Clock::now() > until) {
                    CHECK(false, "%s: no exact answer in 20 s", u.user.c_str());
                    break;
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
            }
        }
        return MapLine();
    }

    // Both clients in turn, each user in turn.
    void Loop()
    {
        for (size_t i = 0; !stop_.load(); i++) {
            Judge(*c_[i % 2], users_[(i / 2) % users_.size()], false, &loop_, "during the split");
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
    }

    void Stop()
    {
        stop_ = true;
        if (thread_.joinable()) thread_.join();
    }

    std::unique_ptr<dedupd::Client> c_[2];
    std::vector<UserCase> users_;
    std::thread thread_;
    std::atomic<bool> stop_{true};
    Counts loop_;
    dedupd::Stats before_[2];
};

int Reshard(const std::vector<std::string> &seeds)
{
    Resharding r(seeds);
    for (std::string line; std::getline(std::cin, line);) {
        std::vector<std::string> w;
        std::istringstream in(line);
        for (std::string x; in >> x;) w.push_back(x);
        if (w.empty()) continue;
        if (w[0] == "quit") break;
        int before = failures;
        std::string out = r.Run(w);
        if (failures > before)
            std::printf("fail %s: %d checks failed (stderr)\n", w[0].c_str(), failures - before);
        else
            std::printf("ok %s\n", out.c_str());
        std::fflush(stdout);
    }
    return failures ? 1 : 0;
}

} // namespace

int main(int argc, char **argv)
{
    if (argc != 3) {
        std::fprintf(stderr,
                     "usage: dedupd_lib_check route|refresh|reshard|cancelled HOST:PORT,...\n");
        return 2;
    }
    std::string mode = argv[1];
    std::vector<std::string> seeds = SplitComma(argv[2]);
    int rc;
    if (mode == "map") {
        // The map as the library reads it (for debugging a fleet).
        auto c = Make(seeds, true);
        dedupd::Status st = c->RefreshMap();
        dedupd::MapView m = c->Map();
        std::printf("read: %d %s\nhash=%s partitioner=%s partitions=%u max_lag_ms=%u\n",
                    static_cast<int>(st.code), st.message.c_str(), m.hash.c_str(),
                    m.partitioner.c_str(), m.partition_count, m.max_lag_ms);
        for (size_t s = 0; s < m.shards.size(); s++)
            for (const auto &r : m.shards[s])
                std::printf("shard %zu %s ready=%d lag_ms=%lld\n", s, r.address.c_str(), r.ready,
                            static_cast<long long>(r.lag_ms));
        return st.ok() ? 0 : 1;
    }
    if (mode == "route")
        rc = Route(seeds);
    else if (mode == "refresh")
        rc = Refresh(seeds);
    else if (mode == "reshard")
        rc = Reshard(seeds);
    else if (mode == "cancelled")
        rc = Cancelled(seeds);
    else {
        std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
        return 2;
    }
    std::fprintf(stderr, "dedupd_lib_check %s: %d failed\n", mode.c_str(), failures);
    return rc;
}
