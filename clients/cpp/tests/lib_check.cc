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
// Exit 0 when every check passed.
#include <dedupd/client.h>

#include <unistd.h>

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

std::unique_ptr<dedupd::Client> Make(const std::vector<std::string> &seeds, bool compact)
{
    dedupd::Options o;
    o.seeds = seeds;
    o.compact = compact;
    o.hedge = false; // this program checks answers; hedging is dedupd-load's
    o.map_refresh = std::chrono::milliseconds(600000); // only the reads the checks cause
    o.deadline = std::chrono::milliseconds(5000);
    std::string err;
    auto c = dedupd::Client::Create(o, &err);
    if (!c) {
        std::fprintf(stderr, "FAILED: Client::Create: %s\n", err.c_str());
        std::exit(1);
    }
    return c;
}

// Until the map has every shard with a ready replica and a partition count.
bool WaitMap(dedupd::Client &c, size_t shards)
{
    auto until = Clock::now() + std::chrono::seconds(30);
    for (;;) {
        dedupd::MapView m = c.Map();
        bool ok = m.partition_count > 0 && m.shards.size() == shards;
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

} // namespace

int main(int argc, char **argv)
{
    if (argc != 3) {
        std::fprintf(stderr, "usage: dedupd_lib_check route|refresh|cancelled HOST:PORT,...\n");
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
    else if (mode == "cancelled")
        rc = Cancelled(seeds);
    else {
        std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
        return 2;
    }
    std::fprintf(stderr, "dedupd_lib_check %s: %d failed\n", mode.c_str(), failures);
    return rc;
}
