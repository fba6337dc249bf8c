// SPDX-License-Identifier: Apache-2.0
//
// dedupd/client.h - the C++ client of a dedupd fleet (recall services).
//
// ROUTING. A Client starts from seed addresses, reads the fleet's map
// (rpc ClusterMap, proto/dedup.proto) and sends each call straight to a
// replica of the shard that owns the user: partition = the map's
// partitioner over the user id (dedupd/routing.h), shard = partition mod
// the number of shards. Every routed call carries the metadata
// `dedupd-map-hash` (the map it was routed by), so a node with another map
// answers FAILED_PRECONDITION instead of forwarding; the client then reads
// the map again and routes the call once more. The map is also read again
// when an answer names another hash, and every Options::map_refresh.
// While the map gives no partition count (a fleet still starting) calls go
// to a seed without the metadata, and that node forwards them.
//
// REPLICAS. Of the owning shard's replicas, those the map says are not
// ready or are behind (lag_ms > max_lag_ms) are skipped (unless all are),
// as is for Options::down_for a replica that answered UNAVAILABLE (or
// CANCELLED, below). Of the others, a call goes to the one with the fewest
// of this client's calls outstanding, and of those to the one that
// answered last (a node keeps polling briefly after a call, so one call at
// a time stays on one replica, and is answered without waking it), then in
// turn from a random start. A call answered UNAVAILABLE, or CANCELLED by
// the node (a node shutting down cancels the calls that reach it once its
// shutdown began, without working on them; the client cancels nothing it
// still waits for), goes to the next replica, as long as the caller's
// deadline allows; when every replica did, to all of them again after a
// pause (20 ms, doubling up to 320 ms). Writes are failed over too: an
// UNAVAILABLE write may have been applied, and RecordDelivery, RecordPlays
// and ForgetUser give the same result applied twice.
//
// HEDGING (Filter only, never the writes). When a Filter has no answer
// after the hedge delay (Options::hedge_delay, or by default the shard's
// recent p95 latency), the same request goes to another replica; the first
// answer wins and the other call is cancelled. Hedges are capped to
// Options::hedge_share of Filter calls (default 10 %): each call earns that
// share of a hedge, a hedge spends one, and unspent shares are kept up to
// a few hedges' worth; so a slow shard cannot double the load.
//
// COMPACT CANDIDATES. By default Filter sends the candidates as item hashes
// (FilterRequest.candidate_hashes, 8 bytes each) and reads kept indexes
// back, which index the caller's own list; Options::compact = false sends
// the id strings (and still reads indexes). The request is built from the
// caller's strings inside each call; nothing of them is kept after the
// call returns (the asynchronous forms copy what they need before
// returning).
//
// THREADS. A Client is safe to use from any number of threads. It owns one
// thread (timers: hedges, map refreshes); completions run on grpc's
// threads, and so do the callbacks of the asynchronous forms, which must
// not block. Destroying a Client cancels the calls in flight (their
// callbacks run with CANCELLED before the destructor returns) and must not
// happen from inside one of its callbacks.
#ifndef DEDUPD_CLIENT_H
#define DEDUPD_CLIENT_H

#include "dedupd/routing.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

namespace dedupd
{

// grpc's status codes (the numbers are grpc's), as the calls report them.
enum class Code : int {
    kOk = 0,
    kCancelled = 1,
    kUnknown = 2,
    kInvalidArgument = 3,
    kDeadlineExceeded = 4,
    kNotFound = 5,
    kAlreadyExists = 6,
    kPermissionDenied = 7,
    kResourceExhausted = 8,
    kFailedPrecondition = 9,
    kAborted = 10,
    kOutOfRange = 11,
    kUnimplemented = 12,
    kInternal = 13,
    kUnavailable = 14,
    kDataLoss = 15,
    kUnauthenticated = 16,
};

struct Status {
    Code code = Code::kOk;
    std::string message; // grpc's or the client's; "" when ok
    bool ok() const
    {
        return code == Code::kOk;
    }
};

// TLS as dedupctl's --tls-ca/--tls-cert/--tls-key/--tls-name. All empty:
// plaintext. cert and key go together (mutual TLS: servers with
// rpc.tls_client_ca require them) and need ca.
struct Tls {
    std::string ca_file;     // PEM: the CA that signed the servers' certificates
    std::string cert_file;   // PEM: this client's certificate chain
    std::string key_file;    // PEM: its private key
    std::string server_name; // check the certificates for this name, not the address' host
};

struct Options {
    std::vector<std::string> seeds; // host:port of any nodes of the fleet; at least one
    Tls tls;
    std::chrono::milliseconds deadline{2000};     // a call's, when the caller gives none
    std::chrono::milliseconds map_refresh{10000}; // the map is read again this often
    std::chrono::milliseconds down_for{
        1000};           // a replica answering UNAVAILABLE is skipped this long
    bool route = true;   // false: every call goes to a seed, which forwards it (comparisons)
    bool compact = true; // Filter sends item hashes (candidate_hashes) instead of ids
    bool hedge = true;   // hedge Filter calls
    // Hedge after this long; 0 = the shard's recent p95 Filter latency
    // (hedge_default until enough calls were seen).
    std::chrono::microseconds hedge_delay{0};
    std::chrono::microseconds hedge_default{20000};
    std::chrono::microseconds hedge_min{500}; // the p95 delay is never shorter
    double hedge_share = 0.10;                // at most this share of Filter calls hedged (0..1)
    int max_receive_bytes = 64 << 20;
};

struct FilterOptions {
    std::string scene;                     // "" = the default scene
    uint32_t lookback_days = 0;            // 0 = the whole retention
    std::chrono::milliseconds deadline{0}; // 0 = Options::deadline
};

struct FilterResult {
    std::vector<uint32_t> kept_indexes; // positions in the caller's candidates, ascending
    bool degraded = false;              // a source was unavailable: seen items may be kept
    uint32_t removed_played = 0, removed_delivered = 0, removed_duplicate = 0;
    bool hedged = false;     // a second request was sent
    std::string answered_by; // the address of the replica whose answer this is
};

// The kept candidates themselves: CANDIDATES[i] for each kept index (the
// list the call was given; indexes past its end are left out).
DEDUPD_API std::vector<std::string> KeptIds(const FilterResult &r,
                                            const std::vector<std::string> &candidates);

struct Play {
    std::string item_id;
    int64_t played_at_ms = 0; // 0 = now
};

struct WriteOptions {
    std::string scene;
    std::chrono::milliseconds deadline{0}; // 0 = Options::deadline
};

// A replica as the map gives it.
struct ReplicaView {
    std::string address;
    bool ready = false;
    int64_t lag_ms = -1;
};

// The map a Client routes by (a copy).
struct MapView {
    std::string hash;        // "" before the first map was read
    std::string partitioner; // librdkafka's name
    uint32_t partition_count = 0;
    uint32_t max_lag_ms = 0;
    std::vector<std::vector<ReplicaView>> shards;
};

struct Stats {
    uint64_t filter_calls = 0;  // Filter calls begun
    uint64_t hedges = 0;        // second requests sent
    uint64_t hedge_wins = 0;    // answers that came from the hedge
    uint64_t failovers = 0;     // requests sent again to another replica after UNAVAILABLE
    uint64_t map_reads = 0;     // maps read (ClusterMap answers installed)
    uint64_t stale_map = 0;     // FAILED_PRECONDITION answers naming another map
    uint64_t unrouted = 0;      // calls sent without a map (forwarded by a node)
    uint64_t request_bytes = 0; // Filter request bytes serialised (once per call)
};

class DEDUPD_API Client
{
  public:
    // A client of the fleet SEEDS name; reads the map before returning
    // (asking the seeds in turn, at most 1 s each) but succeeds without it
    // (calls then go to a seed until a map is read). nullptr and *err set when the options are
    // invalid (no seed, hedge_share outside 0..1, a TLS file unreadable,
    // cert without key...).
    static std::unique_ptr<Client> Create(const Options &options, std::string *err);
    ~Client();
    Client(const Client &) = delete;
    Client &operator=(const Client &) = delete;

    // Of CANDIDATES (borrowed for the call only), those USER has neither
    // played within the lookback nor been delivered recently, in order.
    Status Filter(const std::string &user, const std::vector<std::string> &candidates,
                  const FilterOptions &opts, FilterResult *out);
    // The same, DONE called once on one of grpc's threads (or before this
    // returns, when the arguments are invalid).
    using FilterDone = std::function<void(Status, FilterResult)>;
    void FilterAsync(const std::string &user, const std::vector<std::string> &candidates,
                     const FilterOptions &opts, FilterDone done);
    std::future<std::pair<Status, FilterResult>>
    FilterFuture(const std::string &user, const std::vector<std::string> &candidates,
                 const FilterOptions &opts);

    // Writes: routed and failed over as Filter, never hedged.
    // *recent_size (if not null): deliveries kept for the user and scene.
    Status RecordDelivery(const std::string &user, const std::vector<std::string> &items,
                          const WriteOptions &opts, int64_t delivered_at_ms = 0,
                          uint32_t *recent_size = nullptr);
    using WriteDone = std::function<void(Status)>;
    void RecordDeliveryAsync(const std::string &user, const std::vector<std::string> &items,
                             const WriteOptions &opts, int64_t delivered_at_ms, WriteDone done);
    // *accepted (if not null): plays stored (others were past the retention).
    Status RecordPlays(const std::string &user, const std::vector<Play> &plays,
                       const WriteOptions &opts, uint32_t *accepted = nullptr);
    void RecordPlaysAsync(const std::string &user, const std::vector<Play> &plays,
                          const WriteOptions &opts, WriteDone done);
    Status ForgetUser(const std::string &user, const WriteOptions &opts);

    // Reads the map now (from the nodes of the current map, then the
    // seeds); the error of the last node tried when none answered.
    Status RefreshMap();
    MapView Map() const;
    Stats GetStats() const;
    // The owning shard of USER under the current map; -1 without one.
    int ShardOf(const std::string &user) const;

    class Impl;

  private:
    explicit Client(std::shared_ptr<Impl> impl);
    std::shared_ptr<Impl> impl_;
};

} // namespace dedupd

#endif
