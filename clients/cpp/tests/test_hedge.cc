// SPDX-License-Identifier: Apache-2.0
//
// test_hedge.cc - the hedging budget and the per-shard p95 (src/hedge.h):
// hedges never exceed the share of calls, however many calls want one,
// unspent shares are kept only up to the burst, and the hedge delay is the
// recent p95 once enough answers were seen.
#include "hedge.h"

#include <cstdio>
#include <thread>
#include <vector>

#include "check.h"

namespace
{

using dedupd::internal::HedgeBudget;
using dedupd::internal::LatencyWindow;

// Every call wants a hedge: exactly share x calls are allowed.
void every_call_wants_one()
{
    for (double share : {0.0, 0.01, 0.10, 0.25, 1.0}) {
        HedgeBudget b(share);
        int hedges = 0;
        const int calls = 10000;
        for (int i = 0; i < calls; i++) {
            b.OnCall();
            if (b.TrySpend()) hedges++;
            CHECK(hedges <= share * (i + 1) + 1e-6, "share %.2f: %d hedges after %d calls", share,
                  hedges, i + 1);
        }
        int want = static_cast<int>(share * calls + 1e-6);
        CHECK(hedges == want, "share %.2f: %d hedges of %d calls, want %d", share, hedges, calls,
              want);
    }
}

// A quiet spell banks at most the burst: a slow shard after it gets no
// more than burst hedges at once.
void burst_is_capped()
{
    HedgeBudget b(0.10, 10);
    for (int i = 0; i < 100000; i++) b.OnCall();
    int burst = 0;
    while (b.TrySpend()) burst++;
    CHECK(burst == 10, "%d hedges banked, want 10", burst);
    // Then back to one hedge per ten calls.
    int hedges = 0;
    for (int i = 0; i < 1000; i++) {
        b.OnCall();
        if (b.TrySpend()) hedges++;
    }
    CHECK(hedges == 100, "%d hedges in 1000 calls after the burst, want 100", hedges);
}

// Many threads at once still respect the cap.
void threads()
{
    HedgeBudget b(0.10);
    std::vector<std::thread> ts;
    std::atomic<int> hedges{0};
    for (int t = 0; t < 4; t++)
        ts.emplace_back([&] {
            for (int i = 0; i < 5000; i++) {
                b.OnCall();
                if (b.TrySpend()) hedges++;
            }
        });
    for (auto &t : ts) t.join();
    CHECK(hedges <= 2000, "%d hedges of 20000 calls from 4 threads", hedges.load());
    CHECK(hedges >= 1990, "%d hedges of 20000 calls from 4 threads: budget lost", hedges.load());
}

void p95()
{
    LatencyWindow w;
    for (int i = 1; i < static_cast<int>(LatencyWindow::kMinSamples); i++)
        w.Add(std::chrono::microseconds(i));
    CHECK(w.P95().count() == 0, "p95 %lld before enough samples",
          static_cast<long long>(w.P95().count()));
    // 1..256 ms in a shuffled order: p95 is about 243 ms.
    LatencyWindow v;
    for (int i = 0; i < 256; i++) v.Add(std::chrono::milliseconds((i * 97) % 256 + 1));
    long long ms = std::chrono::duration_cast<std::chrono::milliseconds>(v.P95()).count();
    CHECK(ms >= 240 && ms <= 246, "p95 %lld ms of 1..256 ms", ms);
    // The window slides: after 256 answers of 2 ms the old ones are gone.
    for (int i = 0; i < 256; i++) v.Add(std::chrono::milliseconds(2));
    ms = std::chrono::duration_cast<std::chrono::milliseconds>(v.P95()).count();
    CHECK(ms == 2, "p95 %lld ms after 256 answers of 2 ms", ms);
}

} // namespace

int main()
{
    every_call_wants_one();
    burst_is_capped();
    threads();
    p95();
    std::fprintf(stderr, "test_cpp_hedge: %d failed\n", failures);
    return failures ? 1 : 0;
}
