// SPDX-License-Identifier: Apache-2.0
//
// cpp_client.cc - the C++ recall service's view of dedupd, with grpc++ stubs
// that meson generates from proto/dedup.proto. Against a running dedupd
// (address in argv[1]) it records plays and deliveries for a fresh user,
// filters 10,000 candidates and checks the exact kept set, order, indexes,
// reasons (explain) and counters; then scenes, another user, and ForgetUser.
//
// The daemon must run with a history.fp_rate low enough (the wrapper uses
// 1e-6) that no fresh candidate is a bloom false positive: the expected
// sets here are exact. Exit 0 when every check passed, 1 otherwise.
#include "dedup.grpc.pb.h"

#include <grpcpp/grpcpp.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using dedup::v1::Dedup;
using dedup::v1::FilterRequest;
using dedup::v1::FilterResponse;

int failures = 0;
int checks = 0;

#define EXPECT(cond, ...)                                                    \
    do {                                                                     \
        checks++;                                                            \
        if (!(cond)) {                                                       \
            failures++;                                                      \
            std::fprintf(stderr, "%s:%d: FAILED: %s: ", __FILE__, __LINE__, #cond); \
            std::fprintf(stderr, __VA_ARGS__);                               \
            std::fputc('\n', stderr);                                        \
        }                                                                    \
    } while (0)

std::unique_ptr<grpc::ClientContext> ctx(int ms = 10000)
{
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(ms));
    return c;
}

bool ok(const grpc::Status &s, const char *what)
{
    if (!s.ok()) {
        failures++;
        std::fprintf(stderr, "FAILED: %s: status %d: %s\n", what, static_cast<int>(s.error_code()),
                     s.error_message().c_str());
        return false;
    }
    return true;
}

struct Expected {
    std::vector<std::string> kept_ids;
    std::vector<uint32_t> kept_indexes;
    std::map<uint32_t, dedup::v1::Reason> removed;
    uint32_t played = 0, delivered = 0, duplicate = 0;
};

// Filter REQ and compare the answer with WANT, in the mode and with the
// explain flag already set in REQ.
void check_filter(Dedup::Stub &stub, const FilterRequest &req, const Expected &want,
                  const char *label)
{
    FilterResponse resp;
    auto c = ctx();
    if (!ok(stub.Filter(c.get(), req, &resp), label)) return;
    EXPECT(!resp.degraded(), "%s: degraded", label);
    EXPECT(resp.removed_played() == want.played, "%s: removed_played %u, want %u", label,
           resp.removed_played(), want.played);
    EXPECT(resp.removed_delivered() == want.delivered, "%s: removed_delivered %u, want %u", label,
           resp.removed_delivered(), want.delivered);
    EXPECT(resp.removed_duplicate() == want.duplicate, "%s: removed_duplicate %u, want %u", label,
           resp.removed_duplicate(), want.duplicate);
    if (req.mode() == dedup::v1::RESPONSE_MODE_IDS) {
        EXPECT(resp.kept_indexes_size() == 0, "%s: kept_indexes in ids mode", label);
        EXPECT(static_cast<size_t>(resp.kept_ids_size()) == want.kept_ids.size(),
               "%s: %d kept, want %zu", label, resp.kept_ids_size(), want.kept_ids.size());
        size_t n = std::min(static_cast<size_t>(resp.kept_ids_size()), want.kept_ids.size());
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            if (resp.kept_ids(static_cast<int>(i)) != want.kept_ids[i] && bad++ < 5)
                std::fprintf(stderr, "%s: kept[%zu] = %s, want %s\n", label, i,
                             resp.kept_ids(static_cast<int>(i)).c_str(), want.kept_ids[i].c_str());
        }
        EXPECT(bad == 0, "%s: %zu kept ids differ", label, bad);
    } else {
        EXPECT(resp.kept_ids_size() == 0, "%s: kept_ids in indexes mode", label);
        EXPECT(static_cast<size_t>(resp.kept_indexes_size()) == want.kept_indexes.size(),
               "%s: %d kept, want %zu", label, resp.kept_indexes_size(), want.kept_indexes.size());
        size_t n = std::min(static_cast<size_t>(resp.kept_indexes_size()), want.kept_indexes.size());
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            if (resp.kept_indexes(static_cast<int>(i)) != want.kept_indexes[i]) bad++;
        EXPECT(bad == 0, "%s: %zu kept indexes differ", label, bad);
    }
    if (req.explain()) {
        EXPECT(static_cast<size_t>(resp.removed_size()) == want.removed.size(),
               "%s: %d removed, want %zu", label, resp.removed_size(), want.removed.size());
        size_t bad = 0;
        std::map<uint32_t, bool> seen;
        for (const auto &r : resp.removed()) {
            auto it = want.removed.find(r.index());
            if (it == want.removed.end() || it->second != r.reason() || seen[r.index()]) {
                if (bad++ < 5)
                    std::fprintf(stderr, "%s: removed index %u reason %d unexpected\n", label,
                                 r.index(), static_cast<int>(r.reason()));
            }
            seen[r.index()] = true;
        }
        EXPECT(bad == 0, "%s: %zu removed entries wrong", label, bad);
    } else {
        EXPECT(resp.removed_size() == 0, "%s: removed filled without explain", label);
    }
}

// The expected answer when only duplicates count (a user with no history).
Expected only_duplicates(const std::vector<std::string> &cands)
{
    Expected e;
    std::map<std::string, bool> seen;
    for (size_t i = 0; i < cands.size(); i++) {
        if (seen[cands[i]]) {
            e.removed[static_cast<uint32_t>(i)] = dedup::v1::REASON_DUPLICATE;
            e.duplicate++;
        } else {
            seen[cands[i]] = true;
            e.kept_ids.push_back(cands[i]);
            e.kept_indexes.push_back(static_cast<uint32_t>(i));
        }
    }
    return e;
}

}  // namespace

int main(int argc, char **argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: cpp_client HOST:PORT\n");
        return 2;
    }
    auto channel = grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials());
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(20))) {
        std::fprintf(stderr, "FAILED: cannot connect to %s\n", argv[1]);
        return 1;
    }
    auto stub = Dedup::NewStub(channel);
    const std::string user = "cpp-user-" + std::to_string(getpid());
    const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();

    // 3,000 plays over the last 30 days, in one RecordPlays.
    const int n_plays = 3000, n_deliveries = 100, n_cands = 10000;
    {
        dedup::v1::RecordPlaysRequest req;
        req.set_user_id(user);
        for (int i = 0; i < n_plays; i++) {
            auto *p = req.add_plays();
            p->set_item_id("play-" + std::to_string(i));
            p->set_played_at_ms(now_ms - static_cast<int64_t>(i % 30) * 86400000 - 1000);
        }
        dedup::v1::RecordPlaysResponse resp;
        auto c = ctx();
        if (ok(stub->RecordPlays(c.get(), req, &resp), "RecordPlays"))
            EXPECT(resp.accepted() == static_cast<uint32_t>(n_plays) && resp.expired() == 0,
                   "accepted %u expired %u", resp.accepted(), resp.expired());
    }
    // 100 deliveries, then 20 more in another scene.
    {
        dedup::v1::RecordDeliveryRequest req;
        req.set_user_id(user);
        for (int i = 0; i < n_deliveries; i++) req.add_item_ids("deliv-" + std::to_string(i));
        dedup::v1::RecordDeliveryResponse resp;
        auto c = ctx();
        if (ok(stub->RecordDelivery(c.get(), req, &resp), "RecordDelivery"))
            EXPECT(resp.recent_size() == static_cast<uint32_t>(n_deliveries), "recent_size %u",
                   resp.recent_size());
        dedup::v1::RecordDeliveryRequest req2;
        req2.set_user_id(user);
        req2.set_scene("follow");
        for (int i = 0; i < 20; i++) req2.add_item_ids("fresh-" + std::to_string(i * 20 + 4));
        auto c2 = ctx();
        if (ok(stub->RecordDelivery(c2.get(), req2, &resp), "RecordDelivery follow"))
            EXPECT(resp.recent_size() == 20, "recent_size %u", resp.recent_size());
    }

    // 10,000 candidates: every 20th a play (500), the next one a delivery
    // (the first 100 blocks), the 4th of each block a repeat of the 3rd
    // (500 duplicates of fresh ids), the rest fresh.
    std::vector<std::string> cands(n_cands);
    Expected want;
    for (int i = 0; i < n_cands; i++) {
        int block = i / 20, pos = i % 20;
        auto idx = static_cast<uint32_t>(i);
        if (pos == 0) {
            cands[i] = "play-" + std::to_string(block * 6);  // spread over the 30 days
            want.removed[idx] = dedup::v1::REASON_PLAYED;
            want.played++;
        } else if (pos == 1 && block < n_deliveries) {
            cands[i] = "deliv-" + std::to_string(n_deliveries - 1 - block);
            want.removed[idx] = dedup::v1::REASON_DELIVERED;
            want.delivered++;
        } else if (pos == 3) {
            cands[i] = cands[i - 1];
            want.removed[idx] = dedup::v1::REASON_DUPLICATE;
            want.duplicate++;
        } else {
            cands[i] = "fresh-" + std::to_string(i);
            want.kept_ids.push_back(cands[i]);
            want.kept_indexes.push_back(idx);
        }
    }
    FilterRequest req;
    req.set_user_id(user);
    for (const auto &c : cands) req.add_candidate_ids(c);
    req.set_explain(true);
    check_filter(*stub, req, want, "filter ids+explain");
    req.set_mode(dedup::v1::RESPONSE_MODE_INDEXES);
    check_filter(*stub, req, want, "filter indexes+explain");
    req.set_explain(false);
    check_filter(*stub, req, want, "filter indexes");

    // Latency of the full call, for the log.
    {
        const int reps = 50;
        std::vector<double> lat;
        for (int i = 0; i < reps; i++) {
            FilterResponse resp;
            auto c = ctx();
            auto t0 = std::chrono::steady_clock::now();
            auto s = stub->Filter(c.get(), req, &resp);
            lat.push_back(std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - t0)
                              .count());
            if (!ok(s, "filter repeat")) break;
        }
        std::sort(lat.begin(), lat.end());
        if (!lat.empty())
            std::printf("filter 10000 candidates: median %.3f ms, max %.3f ms over %zu calls\n",
                        lat[lat.size() / 2], lat.back(), lat.size());
    }

    // Scene "follow": its own 20 deliveries remove 20 fresh ids there; the
    // plays (scene "") and the scene "" deliveries do not apply.
    {
        Expected w = only_duplicates(cands);
        w.kept_ids.clear();
        w.kept_indexes.clear();
        for (size_t i = 0; i < cands.size(); i++) {
            auto idx = static_cast<uint32_t>(i);
            if (w.removed.count(idx)) continue;
            if (i % 20 == 4 && i / 20 < 20) {
                w.removed[idx] = dedup::v1::REASON_DELIVERED;
                w.delivered++;
                continue;
            }
            w.kept_ids.push_back(cands[i]);
            w.kept_indexes.push_back(idx);
        }
        FilterRequest r2 = req;
        r2.set_scene("follow");
        r2.set_mode(dedup::v1::RESPONSE_MODE_IDS);
        r2.set_explain(true);
        check_filter(*stub, r2, w, "filter scene follow");
    }

    // Another user sees only the in-request duplicates removed.
    {
        FilterRequest r3 = req;
        r3.set_user_id(user + "-other");
        r3.set_mode(dedup::v1::RESPONSE_MODE_IDS);
        r3.set_explain(true);
        check_filter(*stub, r3, only_duplicates(cands), "filter other user");
    }

    // ForgetUser: plays and deliveries are gone.
    {
        dedup::v1::ForgetUserRequest freq;
        freq.set_user_id(user);
        dedup::v1::ForgetUserResponse fresp;
        auto c = ctx();
        ok(stub->ForgetUser(c.get(), freq, &fresp), "ForgetUser");
        FilterRequest r4 = req;
        r4.set_mode(dedup::v1::RESPONSE_MODE_IDS);
        r4.set_explain(true);
        check_filter(*stub, r4, only_duplicates(cands), "filter after forget");
    }

    std::fprintf(stderr, "cpp_client: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
