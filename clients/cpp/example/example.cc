// SPDX-License-Identifier: Apache-2.0
//
// example.cc - a recall service's use of dedupd/client.h: filter a
// candidate list for a user, record what was delivered, and the same
// Filter asynchronously. Build it against an installed library with
//
//   g++ -std=c++17 example.cc $(pkg-config --cflags --libs dedupd-client)
//
// usage: dedupd-client-example HOST:PORT[,HOST:PORT...] [USER]
#include <dedupd/client.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        std::fprintf(stderr, "usage: %s HOST:PORT[,HOST:PORT...] [USER]\n", argv[0]);
        return 2;
    }
    dedupd::Options opt;
    std::stringstream seeds(argv[1]);
    for (std::string s; std::getline(seeds, s, ',');) opt.seeds.push_back(s);
    std::string err;
    auto client = dedupd::Client::Create(opt, &err);
    if (!client) {
        std::fprintf(stderr, "dedupd: %s\n", err.c_str());
        return 1;
    }
    const std::string user = argc > 2 ? argv[2] : "example-user";

    std::vector<std::string> candidates;
    for (int i = 0; i < 20; i++) candidates.push_back("video-" + std::to_string(i));

    // Synchronous: the kept indexes point into `candidates`.
    dedupd::FilterResult r;
    dedupd::Status s = client->Filter(user, candidates, {}, &r);
    if (!s.ok()) {
        std::fprintf(stderr, "Filter: %d %s\n", static_cast<int>(s.code), s.message.c_str());
        return 1;
    }
    std::vector<std::string> kept = dedupd::KeptIds(r, candidates);
    std::printf("%zu of %zu kept (answered by %s)\n", kept.size(), candidates.size(),
                r.answered_by.c_str());

    // Deliver the first five kept; a second Filter no longer keeps them.
    std::vector<std::string> delivered(kept.begin(),
                                       kept.begin() + std::min<size_t>(5, kept.size()));
    s = client->RecordDelivery(user, delivered, {});
    if (!s.ok()) {
        std::fprintf(stderr, "RecordDelivery: %s\n", s.message.c_str());
        return 1;
    }

    // Asynchronous, as a future (FilterAsync takes a callback instead).
    auto f = client->FilterFuture(user, candidates, {});
    auto [st, again] = f.get();
    if (!st.ok()) {
        std::fprintf(stderr, "Filter: %s\n", st.message.c_str());
        return 1;
    }
    std::printf("after delivering %zu: %zu kept\n", delivered.size(), again.kept_indexes.size());
    return 0;
}
