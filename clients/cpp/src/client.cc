// SPDX-License-Identifier: Apache-2.0
//
// client.cc - dedupd::Client (dedupd/client.h): routing by the fleet's map,
// failover, hedging and compact candidates over grpc++'s callback API.
//
// DESIGN. Every call, synchronous or not, is a Call: its request serialised
// once (a grpc::ByteBuffer each attempt shares by reference), a deadline,
// and the attempts sent for it (one, or two when hedged; more after
// failovers, one after another). Attempts complete on grpc's threads; a
// Call's mutex orders them. The first OK answer finishes the Call and the
// other attempt in flight is cancelled; a failure waits for the attempt
// still in flight, if any, then decides: FAILED_PRECONDITION (a stale map)
// reads the map and routes again, UNAVAILABLE goes to the next replica.
// One timer thread (Timers) fires hedges and the periodic map reads. The
// map is an immutable Routing snapshot behind a mutex, swapped whole; the
// per-shard state (latencies, turn) outlives a swap that keeps the shards.
// Map reads are one at a time: calls that need one wait in a list that the
// read's end runs. Nothing here blocks a grpc thread.
#include "dedupd/client.h"

#include "dedup.grpc.pb.h" // also grpc's SerializationTraits for protobuf messages
#include "hedge.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>

namespace dedupd
{

using Clock = std::chrono::steady_clock;

namespace
{

constexpr char kMapHashKey[] = "dedupd-map-hash";
constexpr char kFilterMethod[] = "/dedup.v1.Dedup/Filter";
constexpr char kDeliveryMethod[] = "/dedup.v1.Dedup/RecordDelivery";
constexpr char kPlaysMethod[] = "/dedup.v1.Dedup/RecordPlays";
constexpr char kForgetMethod[] = "/dedup.v1.Dedup/ForgetUser";
constexpr char kMapMethod[] = "/dedup.v1.Dedup/ClusterMap";
// A map read asks each node for at most this long.
constexpr std::chrono::milliseconds kMapReadTimeout{1000};

Status Make(Code c, std::string msg)
{
    return Status{c, std::move(msg)};
}

Status FromGrpc(const grpc::Status &s)
{
    return Status{static_cast<Code>(s.error_code()), s.error_message()};
}

std::chrono::system_clock::time_point ToSystem(Clock::time_point t)
{
    return std::chrono::system_clock::now() +
           std::chrono::duration_cast<std::chrono::system_clock::duration>(t - Clock::now());
}

template <typename Msg> bool Serialize(const Msg &m, grpc::ByteBuffer *out)
{
    bool own = false;
    return grpc::SerializationTraits<Msg>::Serialize(m, out, &own).ok();
}

template <typename Msg> bool Parse(grpc::ByteBuffer *in, Msg *m)
{
    return grpc::SerializationTraits<Msg>::Deserialize(in, m).ok();
}

bool ReadFile(const std::string &path, std::string *out, std::string *err)
{
    std::ifstream f(path, std::ios::binary);
    std::ostringstream ss;
    if (!f || !(ss << f.rdbuf())) {
        *err = "cannot read " + path;
        return false;
    }
    *out = ss.str();
    return true;
}

// Timers: callbacks run at their time on this object's one thread, in
// time order; they must not block. Pending ones are dropped at destruction.
class Timers
{
  public:
    Timers() : thread_([this] { Run(); })
    {
    }
    ~Timers()
    {
        Stop();
    }
    // Stops the thread and drops what is pending; not from a timer's
    // callback. Idempotent.
    void Stop()
    {
        {
            std::lock_guard<std::mutex> g(mu_);
            stop_ = true;
        }
        cv_.notify_one();
        if (thread_.joinable()) thread_.join();
        std::lock_guard<std::mutex> g(mu_);
        q_.clear();
    }
    void At(Clock::time_point when, std::function<void()> f)
    {
        {
            std::lock_guard<std::mutex> g(mu_);
            q_.emplace(std::make_pair(when, next_++), std::move(f));
        }
        cv_.notify_one();
    }

  private:
    void Run()
    {
        std::unique_lock<std::mutex> l(mu_);
        while (!stop_) {
            if (q_.empty()) {
                cv_.wait(l);
                continue;
            }
            auto it = q_.begin();
            if (Clock::now() < it->first.first) {
                cv_.wait_until(l, it->first.first);
                continue;
            }
            std::function<void()> f = std::move(it->second);
            q_.erase(it);
            l.unlock();
            f();
            l.lock();
        }
    }
    std::mutex mu_;
    std::condition_variable cv_;
    std::map<std::pair<Clock::time_point, uint64_t>, std::function<void()>> q_;
    uint64_t next_ = 0;
    bool stop_ = false;
    std::thread thread_; // last: starts once the rest is built
};

} // namespace

// Per-shard state kept across map reads that keep the shard count.
struct ShardState {
    internal::LatencyWindow filter_latency;
    // Where the rotation among equally good replicas starts: drawn at
    // random, so that many clients with a call at a time do not all stick
    // to the same replica of a shard (Route).
    std::atomic<uint32_t> turn{static_cast<uint32_t>(std::random_device{}())};
};

struct Replica {
    std::string address;
    bool ready = false;
    int64_t lag_ms = -1;
};

// One map, immutable once installed.
struct Routing {
    std::string hash;
    std::string partitioner_name;
    std::optional<Partitioner> partitioner;
    uint32_t partition_count = 0;
    uint32_t max_lag_ms = 0;
    std::vector<std::vector<Replica>> shards;
    std::vector<std::shared_ptr<ShardState>> state; // one per shard
    bool Routable() const
    {
        return !hash.empty() && partitioner && partition_count > 0 && !shards.empty();
    }
    int ShardOf(const std::string &user) const
    {
        if (!Routable()) return -1;
        int32_t p = PartitionOf(*partitioner, user, static_cast<int32_t>(partition_count));
        if (p < 0) return -1;
        return static_cast<int>(static_cast<uint32_t>(p) % shards.size());
    }
};

// Where an attempt goes: ADDRESS, routed by map HASH to SHARD, or (hash
// "", shard -1) unrouted, for that node to forward.
struct Target {
    std::string address;
    std::string hash;
    int shard = -1;
    std::shared_ptr<ShardState> state;
};

struct Conn {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<grpc::GenericStub> stub;
    // Attempts sent here and not yet done, and when the last OK answer
    // came (steady clock, ns; 0: none yet): Route's choice among replicas.
    std::atomic<int> outstanding{0};
    std::atomic<int64_t> last_ok_ns{0};
};

class Call;

class Client::Impl : public std::enable_shared_from_this<Client::Impl>
{
  public:
    Options opt;
    std::shared_ptr<grpc::ChannelCredentials> creds;
    grpc::ChannelArguments args;
    internal::HedgeBudget budget;
    Timers timers;

    struct Counters {
        std::atomic<uint64_t> filter_calls{0}, hedges{0}, hedge_wins{0}, failovers{0}, map_reads{0},
            stale_map{0}, unrouted{0}, request_bytes{0};
    } counters;

    explicit Impl(const Options &o) : opt(o), budget(o.hedge_share)
    {
    }

    std::shared_ptr<const Routing> Current() const
    {
        std::lock_guard<std::mutex> g(map_mu_);
        return routing_;
    }

    std::shared_ptr<Conn> ConnTo(const std::string &addr)
    {
        std::lock_guard<std::mutex> g(conn_mu_);
        auto &c = conns_[addr];
        if (!c) {
            c = std::make_shared<Conn>();
            c->channel = grpc::CreateCustomChannel(addr, creds, args);
            c->stub = std::make_unique<grpc::GenericStub>(c->channel);
        }
        return c;
    }

    void MarkDown(const std::string &addr)
    {
        std::lock_guard<std::mutex> g(down_mu_);
        down_until_[addr] = Clock::now() + opt.down_for;
    }
    bool IsDown(const std::string &addr, Clock::time_point now)
    {
        std::lock_guard<std::mutex> g(down_mu_);
        auto it = down_until_.find(addr);
        return it != down_until_.end() && now < it->second;
    }

    // The next replica for USER not in TRIED (see client.h, REPLICAS);
    // nullopt when every one was tried.
    std::optional<Target> Route(const std::string &user, const std::set<std::string> &tried,
                                bool unrouted_only);

    // Read the map (one read at a time); DONE (may be empty) runs when that
    // read ends, on whichever thread ended it. PREFER is asked first.
    void RefreshAsync(const std::string &prefer, std::function<void(Status)> done);
    void Install(const dedup::v1::ClusterMapResponse &m);
    void SchedulePeriodic();

    // Calls in flight, for the destructor: it cancels them and waits.
    void Register(const std::shared_ptr<Call> &c);
    void Unregister(Call *c);
    void Shutdown();
    bool ShuttingDown() const
    {
        return shutting_down_.load();
    }

  private:
    void ReadNext(std::shared_ptr<std::vector<std::string>> addrs, size_t i, Status last);
    void EndRead(Status s);

    mutable std::mutex map_mu_;
    std::shared_ptr<const Routing> routing_ = std::make_shared<Routing>();
    std::mutex conn_mu_;
    std::unordered_map<std::string, std::shared_ptr<Conn>> conns_;
    std::mutex down_mu_;
    std::unordered_map<std::string, Clock::time_point> down_until_;
    std::atomic<uint32_t> seed_turn_{0};

    std::mutex read_mu_; // the map read in progress and who waits for it
    bool reading_ = false;
    std::vector<std::function<void(Status)>> read_waiters_;
    std::unique_ptr<grpc::ClientContext> read_ctx_;
    grpc::ByteBuffer read_req_, read_resp_;

    std::mutex calls_mu_;
    std::condition_variable calls_cv_;
    std::unordered_map<Call *, std::weak_ptr<Call>> calls_;
    std::atomic<bool> shutting_down_{false};
};

// One call (see DESIGN). DONE gets the winning answer's bytes.
class Call : public std::enable_shared_from_this<Call>
{
  public:
    using Done =
        std::function<void(Status, grpc::ByteBuffer *, const std::string &addr, bool hedged)>;
    Call(Client::Impl *impl, const char *method, std::string user, grpc::ByteBuffer req,
         Clock::time_point deadline, bool hedgeable, Done done)
        : impl_(impl), method_(method), user_(std::move(user)), req_(std::move(req)),
          deadline_(deadline), hedgeable_(hedgeable), done_(std::move(done))
    {
    }

    void Start()
    {
        std::unique_lock<std::mutex> l(mu_);
        std::optional<Target> t = impl_->Route(user_, tried_, false);
        if (!t) {
            Finish(l, Make(Code::kUnavailable, "no node to send the call to"), nullptr, "");
            return;
        }
        Launch(l, *t, false);
        if (finished_ || !hedgeable_ || !impl_->opt.hedge || t->shard < 0) return;
        std::chrono::microseconds delay = impl_->opt.hedge_delay;
        if (delay.count() <= 0) {
            delay = t->state ? t->state->filter_latency.P95() : std::chrono::microseconds(0);
            if (delay.count() <= 0) delay = impl_->opt.hedge_default;
            delay = std::max(delay, impl_->opt.hedge_min);
        }
        Clock::time_point at = Clock::now() + delay;
        if (at >= deadline_) return;
        std::weak_ptr<Call> w = shared_from_this();
        impl_->timers.At(at, [w] {
            if (auto c = w.lock()) c->Hedge();
        });
    }

    // Cancel every attempt in flight (Client destruction).
    void Cancel()
    {
        std::vector<grpc::ClientContext *> ctxs;
        {
            std::lock_guard<std::mutex> g(mu_);
            cancelled_ = true;
            for (auto &a : attempts_)
                if (!a->done) ctxs.push_back(a->ctx.get());
        }
        for (auto *c : ctxs) c->TryCancel();
    }

  private:
    struct Attempt {
        std::unique_ptr<grpc::ClientContext> ctx;
        grpc::ByteBuffer req, resp;
        Target target;
        std::shared_ptr<Conn> conn;
        Clock::time_point sent;
        bool hedge = false;
        bool done = false;
    };

    // Sends an attempt to T. Called with mu_ held (L); releases it around
    // grpc's call, which may complete on another thread at once.
    void Launch(std::unique_lock<std::mutex> &l, const Target &t, bool hedge)
    {
        auto a = std::make_unique<Attempt>();
        a->ctx = std::make_unique<grpc::ClientContext>();
        a->ctx->set_deadline(ToSystem(deadline_));
        if (!t.hash.empty())
            a->ctx->AddMetadata(kMapHashKey, t.hash);
        else
            impl_->counters.unrouted++;
        a->req = req_; // shares the slices
        a->target = t;
        a->hedge = hedge;
        a->sent = Clock::now();
        tried_.insert(t.address);
        in_flight_++;
        Attempt *ap = a.get();
        std::shared_ptr<Conn> conn = impl_->ConnTo(t.address);
        conn->outstanding.fetch_add(1, std::memory_order_relaxed);
        a->conn = conn;
        attempts_.push_back(std::move(a));
        std::shared_ptr<Call> self = shared_from_this();
        l.unlock();
        conn->stub->UnaryCall(ap->ctx.get(), method_, grpc::StubOptions(), &ap->req, &ap->resp,
                              [self, ap](grpc::Status s) { self->OnDone(ap, s); });
        l.lock();
    }

    void Hedge()
    {
        std::unique_lock<std::mutex> l(mu_);
        if (finished_ || cancelled_ || hedged_ || in_flight_ == 0) return;
        if (Clock::now() >= deadline_) return;
        std::optional<Target> t = impl_->Route(user_, tried_, false);
        if (!t || t->shard < 0) return;
        if (!impl_->budget.TrySpend()) return;
        hedged_ = true;
        impl_->counters.hedges++;
        Launch(l, *t, true);
    }

    void OnDone(Attempt *a, const grpc::Status &gs)
    {
        std::unique_lock<std::mutex> l(mu_);
        a->done = true;
        in_flight_--;
        a->conn->outstanding.fetch_sub(1, std::memory_order_relaxed);
        if (gs.ok())
            a->conn->last_ok_ns.store(
                std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
                    .count(),
                std::memory_order_relaxed);
        if (finished_) return; // the loser of a hedge, cancelled
        Status s = FromGrpc(gs);
        // This client cancels attempts only once the call finished or was
        // cancelled: a CANCELLED now is the node's, which cancels the calls
        // that reach it once its shutdown began (grpc core), without
        // working on them. Failed over as UNAVAILABLE.
        if (s.code == Code::kCancelled && !cancelled_)
            s = Make(Code::kUnavailable, "cancelled by the node (shutting down?): " + s.message);
        // The hash the node routes by, when it names one: another than the
        // one routed by means the map changed.
        std::string node_hash;
        const auto &tm = a->ctx->GetServerTrailingMetadata();
        auto it = tm.find(kMapHashKey);
        if (it != tm.end()) node_hash.assign(it->second.data(), it->second.size());
        if (s.ok()) {
            if (a->target.state && a->target.shard >= 0 && method_ == std::string(kFilterMethod))
                a->target.state->filter_latency.Add(
                    std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - a->sent));
            if (a->hedge) impl_->counters.hedge_wins++;
            bool moved =
                !node_hash.empty() && !a->target.hash.empty() && node_hash != a->target.hash;
            Finish(l, s, &a->resp, a->target.address, moved);
            return;
        }
        if (s.code == Code::kFailedPrecondition && !a->target.hash.empty()) {
            stale_ = true;
            stale_addr_ = a->target.address;
            impl_->counters.stale_map++;
        } else if (s.code == Code::kUnavailable) {
            impl_->MarkDown(a->target.address);
        }
        last_ = s;
        if (in_flight_ > 0) return; // the other attempt may still answer
        Decide(l);
    }

    // Every attempt so far failed: route again, fail over, or give up.
    void Decide(std::unique_lock<std::mutex> &l)
    {
        if (cancelled_ || impl_->ShuttingDown()) {
            Finish(l, Make(Code::kCancelled, "client destroyed"), nullptr, "");
            return;
        }
        if (Clock::now() >= deadline_) {
            Finish(l,
                   last_.code == Code::kUnavailable
                       ? Make(Code::kDeadlineExceeded, "deadline passed; last: " + last_.message)
                       : last_,
                   nullptr, "");
            return;
        }
        if (stale_) {
            stale_ = false;
            if (map_reads_ < 1) {
                // Read the map (the node that said so first), then route
                // again with all replicas allowed.
                map_reads_++;
                std::shared_ptr<Call> self = shared_from_this();
                std::string prefer = stale_addr_;
                l.unlock();
                impl_->RefreshAsync(prefer, [self](Status) { self->Reroute(false); });
                l.lock();
                return;
            }
            // Still stale after a fresh map (nodes disagree while a map
            // change spreads): send it without the hash, to be forwarded.
            Reroute(l, true);
            return;
        }
        if (last_.code == Code::kUnavailable) {
            std::optional<Target> t = impl_->Route(user_, tried_, false);
            if (t) {
                impl_->counters.failovers++;
                Launch(l, *t, false);
                return;
            }
            // Every replica answered UNAVAILABLE (restarting, or a shard
            // failing over): all of them again after a pause, doubling
            // from 20 ms up to 320 ms, while the deadline allows.
            auto pause = std::chrono::milliseconds(20 << std::min(rounds_, 4));
            if (Clock::now() + pause < deadline_) {
                rounds_++;
                impl_->counters.failovers++;
                std::weak_ptr<Call> w = shared_from_this();
                impl_->timers.At(Clock::now() + pause, [w] {
                    if (auto c = w.lock()) c->Reroute(false);
                });
                return;
            }
        }
        Finish(l, last_, nullptr, "");
    }

    void Reroute(bool unrouted)
    {
        std::unique_lock<std::mutex> l(mu_);
        Reroute(l, unrouted);
    }
    void Reroute(std::unique_lock<std::mutex> &l, bool unrouted)
    {
        if (finished_) return;
        if (cancelled_ || impl_->ShuttingDown()) {
            Finish(l, Make(Code::kCancelled, "client destroyed"), nullptr, "");
            return;
        }
        tried_.clear();
        std::optional<Target> t = impl_->Route(user_, tried_, unrouted);
        if (!t) {
            Finish(l, last_, nullptr, "");
            return;
        }
        Launch(l, *t, false);
    }

    // Ends the call: cancels the attempts still in flight, runs DONE
    // (without mu_), and with REFRESH reads the map from ADDR (an answer
    // named another map). Last the client forgets the call, after which
    // impl_ may be gone.
    void Finish(std::unique_lock<std::mutex> &l, Status s, grpc::ByteBuffer *resp,
                const std::string &addr, bool refresh = false)
    {
        finished_ = true;
        std::vector<grpc::ClientContext *> losers;
        for (auto &a : attempts_)
            if (!a->done) losers.push_back(a->ctx.get());
        Done done = std::move(done_);
        bool hedged = hedged_;
        l.unlock();
        for (auto *c : losers) c->TryCancel();
        done(std::move(s), resp, addr, hedged);
        if (refresh && !impl_->ShuttingDown()) impl_->RefreshAsync(addr, nullptr);
        impl_->Unregister(this);
        l.lock();
    }

    Client::Impl *impl_;
    const char *method_;
    const std::string user_;
    const grpc::ByteBuffer req_;
    const Clock::time_point deadline_;
    const bool hedgeable_;
    Done done_;

    std::mutex mu_;
    std::vector<std::unique_ptr<Attempt>> attempts_;
    std::set<std::string> tried_;
    int in_flight_ = 0;
    bool finished_ = false, cancelled_ = false, hedged_ = false, stale_ = false;
    int map_reads_ = 0;
    int rounds_ = 0; // times every replica was tried
    std::string stale_addr_;
    Status last_;
};

std::optional<Target> Client::Impl::Route(const std::string &user,
                                          const std::set<std::string> &tried, bool unrouted_only)
{
    std::shared_ptr<const Routing> r = Current();
    Clock::time_point now = Clock::now();
    int shard = unrouted_only || !opt.route ? -1 : r->ShardOf(user);
    if (shard >= 0) {
        const auto &reps = r->shards[static_cast<size_t>(shard)];
        // Three passes, each less picky: ready and not behind nor down
        // here; not down here; anything not tried.
        for (int pass = 0; pass < 3; pass++) {
            std::vector<const Replica *> ok;
            for (const Replica &rep : reps) {
                if (rep.address.empty() || tried.count(rep.address)) continue;
                bool down_here = IsDown(rep.address, now);
                bool behind = r->max_lag_ms > 0 && rep.lag_ms > static_cast<int64_t>(r->max_lag_ms);
                if (pass == 0 && (!rep.ready || behind || down_here)) continue;
                if (pass == 1 && down_here) continue;
                ok.push_back(&rep);
            }
            if (ok.empty()) continue;
            const auto &st = r->state[static_cast<size_t>(shard)];
            // The fewest attempts outstanding; of those, the one that
            // answered last (a node polls for rpc.spin_us after a call, so
            // the next call there is read without a wake-up; the cost of
            // taking replicas in turn is in docs/benchmarks.md); of those,
            // in turn. Under load this spreads calls as least-outstanding
            // does; one call at a time stays on one replica, and a hedge
            // that wins moves it to the replica that answered.
            uint32_t turn = st->turn.fetch_add(1, std::memory_order_relaxed);
            size_t best = 0;
            int best_out = 0;
            int64_t best_ok = 0;
            for (size_t k = 0; k < ok.size(); k++) {
                size_t i = (turn + k) % ok.size();
                std::shared_ptr<Conn> c = ConnTo(ok[i]->address);
                int out = c->outstanding.load(std::memory_order_relaxed);
                int64_t last = c->last_ok_ns.load(std::memory_order_relaxed);
                if (k == 0 || out < best_out || (out == best_out && last > best_ok)) {
                    best = i;
                    best_out = out;
                    best_ok = last;
                }
            }
            return Target{ok[best]->address, r->hash, shard, st};
        }
        return std::nullopt;
    }
    // No map (or the user cannot be routed): any node, seeds first, which
    // forwards the call to the owner.
    std::vector<std::string> all = opt.seeds;
    for (const auto &reps : r->shards)
        for (const Replica &rep : reps)
            if (!rep.address.empty() && std::find(all.begin(), all.end(), rep.address) == all.end())
                all.push_back(rep.address);
    for (int pass = 0; pass < 2; pass++) {
        std::vector<const std::string *> ok;
        for (const std::string &a : all)
            if (!tried.count(a) && (pass == 1 || !IsDown(a, now))) ok.push_back(&a);
        if (ok.empty()) continue;
        uint32_t turn = seed_turn_.fetch_add(1, std::memory_order_relaxed);
        return Target{*ok[turn % ok.size()], "", -1, nullptr};
    }
    return std::nullopt;
}

void Client::Impl::Install(const dedup::v1::ClusterMapResponse &m)
{
    auto r = std::make_shared<Routing>();
    r->hash = m.map_hash();
    r->partitioner_name = m.partitioner();
    r->partitioner = ParsePartitioner(m.partitioner());
    r->partition_count = m.partition_count();
    r->max_lag_ms = m.max_lag_ms();
    // Shards in shard order (shards[s].shard == s); a map that breaks
    // this is not routed by.
    bool sane = true;
    for (int s = 0; s < m.shards_size(); s++) {
        const auto &sh = m.shards(s);
        if (sh.shard() != static_cast<uint32_t>(s)) sane = false;
        std::vector<Replica> reps;
        for (const auto &ri : sh.replicas())
            reps.push_back(Replica{ri.address(), ri.ready(), ri.lag_ms()});
        r->shards.push_back(std::move(reps));
    }
    if (!sane) r->partition_count = 0;
    std::lock_guard<std::mutex> g(map_mu_);
    for (size_t s = 0; s < r->shards.size(); s++)
        r->state.push_back(routing_->state.size() == r->shards.size()
                               ? routing_->state[s]
                               : std::make_shared<ShardState>());
    routing_ = std::move(r);
    counters.map_reads++;
}

void Client::Impl::RefreshAsync(const std::string &prefer, std::function<void(Status)> done)
{
    {
        std::lock_guard<std::mutex> g(read_mu_);
        if (done) read_waiters_.push_back(std::move(done));
        if (reading_) return;
        reading_ = true;
    }
    auto addrs = std::make_shared<std::vector<std::string>>();
    auto add = [&](const std::string &a) {
        if (!a.empty() && std::find(addrs->begin(), addrs->end(), a) == addrs->end())
            addrs->push_back(a);
    };
    add(prefer);
    std::shared_ptr<const Routing> r = Current();
    Clock::time_point now = Clock::now();
    for (int pass = 0; pass < 2; pass++)
        for (const auto &reps : r->shards)
            for (const Replica &rep : reps)
                if ((pass == 0) == (rep.ready && !IsDown(rep.address, now))) add(rep.address);
    for (const auto &s : opt.seeds) add(s);
    ReadNext(addrs, 0, Make(Code::kUnavailable, "no node to read the map from"));
}

void Client::Impl::ReadNext(std::shared_ptr<std::vector<std::string>> addrs, size_t i, Status last)
{
    if (i >= addrs->size() || ShuttingDown()) {
        EndRead(ShuttingDown() ? Make(Code::kCancelled, "client destroyed") : last);
        return;
    }
    std::shared_ptr<Conn> conn = ConnTo((*addrs)[i]);
    grpc::ClientContext *ctx;
    {
        std::lock_guard<std::mutex> g(read_mu_);
        read_ctx_ = std::make_unique<grpc::ClientContext>();
        read_ctx_->set_deadline(std::chrono::system_clock::now() + kMapReadTimeout);
        Serialize(dedup::v1::ClusterMapRequest(), &read_req_);
        read_resp_.Clear();
        ctx = read_ctx_.get();
    }
    std::shared_ptr<Impl> self = shared_from_this();
    conn->stub->UnaryCall(
        ctx, kMapMethod, grpc::StubOptions(), &read_req_, &read_resp_,
        [self, addrs, i](grpc::Status gs) {
            if (!gs.ok()) {
                self->ReadNext(addrs, i + 1, FromGrpc(gs));
                return;
            }
            dedup::v1::ClusterMapResponse m;
            if (!Parse(&self->read_resp_, &m)) {
                self->ReadNext(addrs, i + 1, Make(Code::kInternal, "unparsable ClusterMap answer"));
                return;
            }
            self->Install(m);
            self->EndRead(Status{});
        });
}

void Client::Impl::EndRead(Status s)
{
    std::vector<std::function<void(Status)>> waiters;
    {
        std::lock_guard<std::mutex> g(read_mu_);
        reading_ = false;
        waiters.swap(read_waiters_);
    }
    for (auto &w : waiters) w(s);
}

void Client::Impl::SchedulePeriodic()
{
    std::weak_ptr<Impl> w = shared_from_this();
    timers.At(Clock::now() + opt.map_refresh, [w] {
        auto self = w.lock();
        if (!self || self->ShuttingDown()) return;
        self->RefreshAsync("", nullptr);
        self->SchedulePeriodic();
    });
}

void Client::Impl::Register(const std::shared_ptr<Call> &c)
{
    std::lock_guard<std::mutex> g(calls_mu_);
    calls_[c.get()] = c;
}

void Client::Impl::Unregister(Call *c)
{
    std::lock_guard<std::mutex> g(calls_mu_);
    calls_.erase(c);
    if (calls_.empty()) calls_cv_.notify_all();
}

void Client::Impl::Shutdown()
{
    shutting_down_ = true;
    std::vector<std::shared_ptr<Call>> live;
    {
        std::lock_guard<std::mutex> g(calls_mu_);
        for (auto &kv : calls_)
            if (auto c = kv.second.lock()) live.push_back(c);
    }
    for (auto &c : live) c->Cancel();
    live.clear();
    {
        std::lock_guard<std::mutex> g(read_mu_);
        if (reading_ && read_ctx_) read_ctx_->TryCancel();
    }
    std::unique_lock<std::mutex> l(calls_mu_);
    calls_cv_.wait(l, [this] { return calls_.empty(); });
    // A map read may still be ending: wait for it too.
    l.unlock();
    for (;;) {
        {
            std::lock_guard<std::mutex> g(read_mu_);
            if (!reading_) break;
            if (read_ctx_) read_ctx_->TryCancel();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

// ---- Client ----

Client::Client(std::shared_ptr<Impl> impl) : impl_(std::move(impl))
{
}

Client::~Client()
{
    impl_->Shutdown();
    impl_->timers.Stop(); // here: the last reference may go on another thread
}

std::unique_ptr<Client> Client::Create(const Options &o, std::string *err)
{
    std::string dummy;
    if (!err) err = &dummy;
    if (o.seeds.empty()) {
        *err = "no seed address";
        return nullptr;
    }
    for (const auto &s : o.seeds)
        if (s.empty()) {
            *err = "an empty seed address";
            return nullptr;
        }
    if (!(o.hedge_share >= 0 && o.hedge_share <= 1)) {
        *err = "hedge_share must be within 0..1";
        return nullptr;
    }
    if (o.deadline.count() <= 0 || o.map_refresh.count() <= 0) {
        *err = "deadline and map_refresh must be positive";
        return nullptr;
    }
    const Tls &t = o.tls;
    bool tls =
        !t.ca_file.empty() || !t.cert_file.empty() || !t.key_file.empty() || !t.server_name.empty();
    if (tls && t.ca_file.empty()) {
        *err = "tls: cert_file, key_file and server_name need ca_file";
        return nullptr;
    }
    if (t.cert_file.empty() != t.key_file.empty()) {
        *err = "tls: cert_file and key_file go together";
        return nullptr;
    }
    auto impl = std::make_shared<Impl>(o);
    if (tls) {
        grpc::SslCredentialsOptions so;
        if (!ReadFile(t.ca_file, &so.pem_root_certs, err)) return nullptr;
        if (!t.cert_file.empty() && (!ReadFile(t.cert_file, &so.pem_cert_chain, err) ||
                                     !ReadFile(t.key_file, &so.pem_private_key, err)))
            return nullptr;
        impl->creds = grpc::SslCredentials(so);
        if (!t.server_name.empty()) impl->args.SetSslTargetNameOverride(t.server_name);
    } else {
        impl->creds = grpc::InsecureChannelCredentials();
    }
    impl->args.SetMaxReceiveMessageSize(o.max_receive_bytes);
    // A node that restarts is reached again within 100 ms to 2 s, not
    // grpc's default backoff of up to 2 minutes, during which every call
    // to it would fail at once.
    impl->args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    impl->args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    impl->args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
    std::unique_ptr<Client> c(new Client(impl));
    c->RefreshMap(); // best effort: calls go to a seed until a map is read
    impl->SchedulePeriodic();
    return c;
}

Status Client::RefreshMap()
{
    auto p = std::make_shared<std::promise<Status>>();
    auto f = p->get_future();
    impl_->RefreshAsync("", [p](Status s) { p->set_value(std::move(s)); });
    return f.get();
}

MapView Client::Map() const
{
    std::shared_ptr<const Routing> r = impl_->Current();
    MapView v;
    v.hash = r->hash;
    v.partitioner = r->partitioner_name;
    v.partition_count = r->partition_count;
    v.max_lag_ms = r->max_lag_ms;
    for (const auto &reps : r->shards) {
        std::vector<ReplicaView> out;
        for (const auto &rep : reps) out.push_back(ReplicaView{rep.address, rep.ready, rep.lag_ms});
        v.shards.push_back(std::move(out));
    }
    return v;
}

Stats Client::GetStats() const
{
    const auto &c = impl_->counters;
    Stats s;
    s.filter_calls = c.filter_calls;
    s.hedges = c.hedges;
    s.hedge_wins = c.hedge_wins;
    s.failovers = c.failovers;
    s.map_reads = c.map_reads;
    s.stale_map = c.stale_map;
    s.unrouted = c.unrouted;
    s.request_bytes = c.request_bytes;
    return s;
}

int Client::ShardOf(const std::string &user) const
{
    return impl_->Current()->ShardOf(user);
}

namespace
{

Clock::time_point DeadlineOf(std::chrono::milliseconds asked, const Options &o)
{
    return Clock::now() + (asked.count() > 0 ? asked : o.deadline);
}

} // namespace

void Client::FilterAsync(const std::string &user, const std::vector<std::string> &candidates,
                         const FilterOptions &opts, FilterDone done)
{
    Impl *impl = impl_.get();
    if (impl->ShuttingDown()) {
        done(Make(Code::kCancelled, "client destroyed"), FilterResult{});
        return;
    }
    // The request, built from the caller's strings now: nothing of them
    // is kept after this returns.
    dedup::v1::FilterRequest req;
    req.set_user_id(user);
    req.set_scene(opts.scene);
    req.set_lookback_days(opts.lookback_days);
    if (impl->opt.compact) {
        auto *h = req.mutable_candidate_hashes();
        h->Reserve(static_cast<int>(candidates.size()));
        for (const auto &c : candidates) h->AddAlreadyReserved(ItemHash(c));
    } else {
        auto *ids = req.mutable_candidate_ids();
        ids->Reserve(static_cast<int>(candidates.size()));
        for (const auto &c : candidates) ids->Add()->assign(c);
        req.set_mode(dedup::v1::RESPONSE_MODE_INDEXES);
    }
    grpc::ByteBuffer buf;
    if (!Serialize(req, &buf)) {
        done(Make(Code::kInvalidArgument, "cannot serialise the request (too large?)"),
             FilterResult{});
        return;
    }
    impl->counters.filter_calls++;
    impl->counters.request_bytes += req.ByteSizeLong();
    impl->budget.OnCall();
    const size_t n = candidates.size();
    auto call = std::make_shared<Call>(
        impl, kFilterMethod, user, std::move(buf), DeadlineOf(opts.deadline, impl->opt), true,
        [done = std::move(done), n](Status s, grpc::ByteBuffer *resp, const std::string &addr,
                                    bool hedged) {
            FilterResult r;
            r.hedged = hedged;
            r.answered_by = addr;
            if (!s.ok()) {
                done(std::move(s), std::move(r));
                return;
            }
            dedup::v1::FilterResponse fr;
            if (!resp || !Parse(resp, &fr)) {
                done(Make(Code::kInternal, "unparsable Filter answer from " + addr), std::move(r));
                return;
            }
            // Indexes are validated before use: in range, ascending.
            r.kept_indexes.reserve(static_cast<size_t>(fr.kept_indexes_size()));
            for (uint32_t i : fr.kept_indexes()) {
                if (i >= n || (!r.kept_indexes.empty() && i <= r.kept_indexes.back())) {
                    done(Make(Code::kInternal, "Filter answer from " + addr +
                                                   " has kept indexes out of range or order"),
                         FilterResult{});
                    return;
                }
                r.kept_indexes.push_back(i);
            }
            if (fr.kept_ids_size() > 0) {
                done(Make(Code::kInternal, "Filter answer from " + addr + " has ids, not indexes"),
                     FilterResult{});
                return;
            }
            r.degraded = fr.degraded();
            r.removed_played = fr.removed_played();
            r.removed_delivered = fr.removed_delivered();
            r.removed_duplicate = fr.removed_duplicate();
            done(Status{}, std::move(r));
        });
    impl->Register(call);
    call->Start();
}

std::future<std::pair<Status, FilterResult>>
Client::FilterFuture(const std::string &user, const std::vector<std::string> &candidates,
                     const FilterOptions &opts)
{
    auto p = std::make_shared<std::promise<std::pair<Status, FilterResult>>>();
    auto f = p->get_future();
    FilterAsync(user, candidates, opts, [p](Status s, FilterResult r) {
        p->set_value(std::make_pair(std::move(s), std::move(r)));
    });
    return f;
}

Status Client::Filter(const std::string &user, const std::vector<std::string> &candidates,
                      const FilterOptions &opts, FilterResult *out)
{
    auto res = FilterFuture(user, candidates, opts).get();
    if (out) *out = std::move(res.second);
    return res.first;
}

namespace
{

// A write: routed and failed over, never hedged. PARSE reads the answer.
template <typename Msg>
void StartWrite(Client::Impl *impl, const char *method, const std::string &user, const Msg &req,
                std::chrono::milliseconds deadline,
                std::function<void(Status, grpc::ByteBuffer *)> done)
{
    if (impl->ShuttingDown()) {
        done(Make(Code::kCancelled, "client destroyed"), nullptr);
        return;
    }
    grpc::ByteBuffer buf;
    if (!Serialize(req, &buf)) {
        done(Make(Code::kInvalidArgument, "cannot serialise the request"), nullptr);
        return;
    }
    auto call = std::make_shared<Call>(
        impl, method, user, std::move(buf), DeadlineOf(deadline, impl->opt), false,
        [done = std::move(done)](Status s, grpc::ByteBuffer *resp, const std::string &, bool) {
            done(std::move(s), resp);
        });
    impl->Register(call);
    call->Start();
}

template <typename Resp>
Status Wait(std::function<void(std::function<void(Status, grpc::ByteBuffer *)>)> start, Resp *resp)
{
    std::promise<Status> p;
    auto f = p.get_future();
    start([&p, resp](Status s, grpc::ByteBuffer *buf) {
        if (s.ok() && resp && (!buf || !Parse(buf, resp)))
            s = Make(Code::kInternal, "unparsable answer");
        p.set_value(std::move(s));
    });
    return f.get();
}

dedup::v1::RecordDeliveryRequest DeliveryReq(const std::string &user,
                                             const std::vector<std::string> &items,
                                             const WriteOptions &opts, int64_t at)
{
    dedup::v1::RecordDeliveryRequest r;
    r.set_user_id(user);
    for (const auto &i : items) r.add_item_ids(i);
    r.set_scene(opts.scene);
    r.set_delivered_at_ms(at);
    return r;
}

dedup::v1::RecordPlaysRequest PlaysReq(const std::string &user, const std::vector<Play> &plays,
                                       const WriteOptions &opts)
{
    dedup::v1::RecordPlaysRequest r;
    r.set_user_id(user);
    for (const auto &p : plays) {
        auto *x = r.add_plays();
        x->set_item_id(p.item_id);
        x->set_played_at_ms(p.played_at_ms);
    }
    r.set_scene(opts.scene);
    return r;
}

} // namespace

Status Client::RecordDelivery(const std::string &user, const std::vector<std::string> &items,
                              const WriteOptions &opts, int64_t delivered_at_ms,
                              uint32_t *recent_size)
{
    Impl *impl = impl_.get();
    auto req = DeliveryReq(user, items, opts, delivered_at_ms);
    dedup::v1::RecordDeliveryResponse resp;
    Status s = Wait<dedup::v1::RecordDeliveryResponse>(
        [&](std::function<void(Status, grpc::ByteBuffer *)> d) {
            StartWrite(impl, kDeliveryMethod, user, req, opts.deadline, std::move(d));
        },
        &resp);
    if (s.ok() && recent_size) *recent_size = resp.recent_size();
    return s;
}

void Client::RecordDeliveryAsync(const std::string &user, const std::vector<std::string> &items,
                                 const WriteOptions &opts, int64_t delivered_at_ms, WriteDone done)
{
    StartWrite(impl_.get(), kDeliveryMethod, user, DeliveryReq(user, items, opts, delivered_at_ms),
               opts.deadline,
               [done = std::move(done)](Status s, grpc::ByteBuffer *) { done(std::move(s)); });
}

Status Client::RecordPlays(const std::string &user, const std::vector<Play> &plays,
                           const WriteOptions &opts, uint32_t *accepted)
{
    Impl *impl = impl_.get();
    auto req = PlaysReq(user, plays, opts);
    dedup::v1::RecordPlaysResponse resp;
    Status s = Wait<dedup::v1::RecordPlaysResponse>(
        [&](std::function<void(Status, grpc::ByteBuffer *)> d) {
            StartWrite(impl, kPlaysMethod, user, req, opts.deadline, std::move(d));
        },
        &resp);
    if (s.ok() && accepted) *accepted = resp.accepted();
    return s;
}

void Client::RecordPlaysAsync(const std::string &user, const std::vector<Play> &plays,
                              const WriteOptions &opts, WriteDone done)
{
    StartWrite(impl_.get(), kPlaysMethod, user, PlaysReq(user, plays, opts), opts.deadline,
               [done = std::move(done)](Status s, grpc::ByteBuffer *) { done(std::move(s)); });
}

Status Client::ForgetUser(const std::string &user, const WriteOptions &opts)
{
    Impl *impl = impl_.get();
    dedup::v1::ForgetUserRequest req;
    req.set_user_id(user);
    req.set_scene(opts.scene);
    dedup::v1::ForgetUserResponse resp;
    return Wait<dedup::v1::ForgetUserResponse>(
        [&](std::function<void(Status, grpc::ByteBuffer *)> d) {
            StartWrite(impl, kForgetMethod, user, req, opts.deadline, std::move(d));
        },
        &resp);
}

std::vector<std::string> KeptIds(const FilterResult &r, const std::vector<std::string> &candidates)
{
    std::vector<std::string> out;
    out.reserve(r.kept_indexes.size());
    for (uint32_t i : r.kept_indexes)
        if (i < candidates.size()) out.push_back(candidates[i]);
    return out;
}

} // namespace dedupd
