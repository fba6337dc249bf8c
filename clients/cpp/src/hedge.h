// SPDX-License-Identifier: Apache-2.0
//
// hedge.h - the two pieces of state hedging decides by, kept apart from the
// RPCs so that a unit test can drive them (tests/test_hedge.cc).
//
// HedgeBudget: each call earns SHARE of a hedge and each hedge spends one;
// at most BURST hedges' worth is kept. The bank starts empty, so over any
// run hedges <= SHARE x calls. Thread-safe (one mutex).
//
// LatencyWindow: the last kWindow latencies of one shard's Filter answers,
// and their p95, recomputed every kEvery samples (so reading it is cheap).
// Below kMinSamples samples there is no p95 (0). Thread-safe.
#ifndef DEDUPD_CLIENT_HEDGE_H
#define DEDUPD_CLIENT_HEDGE_H

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>

namespace dedupd
{
namespace internal
{

class HedgeBudget
{
  public:
    explicit HedgeBudget(double share, double burst = 10.0)
        : share_(std::clamp(share, 0.0, 1.0)), burst_(std::max(burst, 1.0))
    {
    }
    // A call began: it earns its share.
    void OnCall()
    {
        std::lock_guard<std::mutex> g(mu_);
        bank_ = std::min(bank_ + share_, burst_);
    }
    // May a hedge be sent now? If so it is spent.
    bool TrySpend()
    {
        std::lock_guard<std::mutex> g(mu_);
        // A tolerance for the sums of shares (0.1 x 10 is 0.9999...).
        if (bank_ < 1.0 - 1e-9) return false;
        bank_ -= 1.0;
        return true;
    }

  private:
    std::mutex mu_;
    const double share_, burst_;
    double bank_ = 0;
};

class LatencyWindow
{
  public:
    static constexpr size_t kWindow = 256, kEvery = 16, kMinSamples = 32;
    void Add(std::chrono::microseconds us)
    {
        std::lock_guard<std::mutex> g(mu_);
        ring_[n_ % kWindow] = us.count();
        n_++;
        if (n_ >= kMinSamples && n_ % kEvery == 0) {
            size_t have = std::min<size_t>(n_, kWindow);
            std::array<int64_t, kWindow> tmp;
            std::copy(ring_.begin(), ring_.begin() + static_cast<std::ptrdiff_t>(have),
                      tmp.begin());
            size_t k = have * 95 / 100;
            std::nth_element(tmp.begin(), tmp.begin() + static_cast<std::ptrdiff_t>(k),
                             tmp.begin() + static_cast<std::ptrdiff_t>(have));
            p95_.store(tmp[k], std::memory_order_relaxed);
        }
    }
    // The recent p95; 0 (none) before kMinSamples answers.
    std::chrono::microseconds P95() const
    {
        return std::chrono::microseconds(p95_.load(std::memory_order_relaxed));
    }

  private:
    std::mutex mu_;
    std::array<int64_t, kWindow> ring_{};
    size_t n_ = 0;
    std::atomic<int64_t> p95_{0};
};

} // namespace internal
} // namespace dedupd

#endif
