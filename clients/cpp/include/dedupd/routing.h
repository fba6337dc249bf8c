// SPDX-License-Identifier: Apache-2.0
//
// dedupd/routing.h - what a client computes exactly as dedupd does: the
// Kafka partition of a user (librdkafka's key partitioners, as
// src/partition.h in the server) and the item hash of a candidate (XXH3-64
// with dedupd's seed, as src/dd.h). Both are part of the wire contract
// (proto/dedup.proto: ClusterMap, FilterRequest.candidate_hashes) and are
// checked against the shared vectors tests/vectors/partition.tsv and
// tests/vectors/item_hash.tsv. Pure functions: no I/O, no allocation, no
// state; callable from any thread.
#ifndef DEDUPD_ROUTING_H
#define DEDUPD_ROUTING_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#if defined(__GNUC__)
#define DEDUPD_API __attribute__((visibility("default")))
#else
#define DEDUPD_API
#endif

namespace dedupd
{

// librdkafka's key partitioners but "random", under librdkafka's names.
enum class Partitioner {
    kMurmur2Random,    // "murmur2_random": the Java client's default; dedupd's default
    kConsistentRandom, // "consistent_random": librdkafka's default (CRC-32)
    kMurmur2,          // "murmur2"
    kConsistent,       // "consistent"
    kFnv1a,            // "fnv1a"
    kFnv1aRandom,      // "fnv1a_random"
};

// NAME (exactly as librdkafka spells it) -> the partitioner; nullopt for
// an unknown name (including "random", which cannot be routed by).
DEDUPD_API std::optional<Partitioner> ParsePartitioner(std::string_view name);

// librdkafka's name of P.
DEDUPD_API const char *PartitionerName(Partitioner p);

// The partition (0..partitions-1) partitioner P gives a message whose key
// is KEY (present, possibly empty) on a topic of PARTITIONS partitions.
// -1 when PARTITIONS < 1, or where librdkafka would pick at random
// (consistent_random with an empty key): such a key cannot be routed.
DEDUPD_API int32_t PartitionOf(Partitioner p, std::string_view key, int32_t partitions);

// dedupd's item hash seed, "ddupdh01" (proto/dedup.proto, src/dd.h).
constexpr uint64_t kItemHashSeed = 0x6464757064683031ull;

// The item hash of candidate ID: XXH3-64 over its bytes with kItemHashSeed,
// what FilterRequest.candidate_hashes carries.
DEDUPD_API uint64_t ItemHash(std::string_view id);

} // namespace dedupd

#endif
