// SPDX-License-Identifier: Apache-2.0
//
// test_routing.cc - the client computes what the server computes: every
// row of the shared vectors (argv[1]: tests/vectors/partition.tsv, user id
// -> partition per partitioner and partition count; argv[2]:
// tests/vectors/item_hash.tsv, item id -> XXH3-64 with dedupd's seed), the
// same files the C unit tests and the Java tests check.
//
// Both files: '#' lines are comments; other lines are fields separated by
// one TAB, ids as their bytes in lowercase hex (empty for the empty id):
//   partition.tsv  PARTITIONER  COUNT  KEY_HEX  PARTITION (-1: cannot be routed)
//   item_hash.tsv  ID_HEX  HASH (16 hex digits)
#include "dedupd/routing.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace
{

int failures = 0;

std::vector<std::string> Split(const std::string &line)
{
    std::vector<std::string> out;
    std::string f;
    std::istringstream in(line);
    while (std::getline(in, f, '\t')) out.push_back(f);
    if (!line.empty() && line.back() == '\t') out.push_back("");
    return out;
}

bool Unhex(const std::string &h, std::string *out)
{
    if (h.size() % 2) return false;
    out->clear();
    for (size_t i = 0; i < h.size(); i += 2) {
        char *end;
        std::string b = h.substr(i, 2);
        long v = std::strtol(b.c_str(), &end, 16);
        if (*end) return false;
        out->push_back(static_cast<char>(v));
    }
    return true;
}

// The data lines of PATH, split at TABs; false (and a message) when it
// cannot be read or a line has not NFIELDS fields.
bool ReadRows(const char *path, size_t nfields, std::vector<std::vector<std::string>> *rows)
{
    std::ifstream in(path);
    if (!in) {
        std::fprintf(stderr, "cannot read %s\n", path);
        return false;
    }
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
        lineno++;
        if (line.empty() || line[0] == '#') continue;
        std::vector<std::string> f = Split(line);
        if (f.size() != nfields) {
            std::fprintf(stderr, "%s:%d: %zu fields, want %zu\n", path, lineno, f.size(), nfields);
            return false;
        }
        rows->push_back(std::move(f));
    }
    return true;
}

int Partitions(const char *path)
{
    std::vector<std::vector<std::string>> rows;
    if (!ReadRows(path, 4, &rows)) return -1;
    int n = 0;
    for (const auto &row : rows) {
        auto p = dedupd::ParsePartitioner(row[0]);
        std::string user;
        if (!p || !Unhex(row[2], &user)) {
            std::fprintf(stderr, "%s: bad row (partitioner %s, key %s)\n", path, row[0].c_str(),
                         row[2].c_str());
            failures++;
            continue;
        }
        long count = std::atol(row[1].c_str());
        long want = std::atol(row[3].c_str());
        int32_t got = dedupd::PartitionOf(*p, user, static_cast<int32_t>(count));
        if (got != want) {
            if (failures < 10)
                std::fprintf(stderr, "%s %ld partitions, key %s: partition %d, want %ld\n",
                             row[0].c_str(), count, row[2].c_str(), got, want);
            failures++;
        }
        n++;
    }
    return n;
}

int Hashes(const char *path)
{
    std::vector<std::vector<std::string>> rows;
    if (!ReadRows(path, 2, &rows)) return -1;
    int n = 0;
    for (const auto &row : rows) {
        std::string id;
        if (!Unhex(row[0], &id) || row[1].size() != 16) {
            std::fprintf(stderr, "%s: bad row %s\n", path, row[0].c_str());
            failures++;
            continue;
        }
        unsigned long long want = std::strtoull(row[1].c_str(), nullptr, 16);
        uint64_t got = dedupd::ItemHash(id);
        if (got != want) {
            if (failures < 10)
                std::fprintf(stderr, "item %s: hash %016llx, want %s\n", row[0].c_str(),
                             static_cast<unsigned long long>(got), row[1].c_str());
            failures++;
        }
        n++;
    }
    return n;
}

} // namespace

int main(int argc, char **argv)
{
    if (argc != 3) {
        std::fprintf(stderr, "usage: test_cpp_routing partition.tsv item_hash.tsv\n");
        return 2;
    }
    int np = Partitions(argv[1]);
    int nh = Hashes(argv[2]);
    if (np <= 0 || nh <= 0) {
        std::fprintf(stderr, "FAILED: no vectors read (%d partition rows, %d hash rows)\n", np, nh);
        return 1;
    }
    // The names round-trip; "random" cannot be routed by.
    for (const char *n : {"murmur2_random", "consistent_random", "murmur2", "consistent", "fnv1a",
                          "fnv1a_random"}) {
        auto p = dedupd::ParsePartitioner(n);
        if (!p || std::string(dedupd::PartitionerName(*p)) != n) {
            std::fprintf(stderr, "FAILED: partitioner name %s\n", n);
            failures++;
        }
    }
    if (dedupd::ParsePartitioner("random") || dedupd::ParsePartitioner("Murmur2")) {
        std::fprintf(stderr, "FAILED: random or Murmur2 parsed\n");
        failures++;
    }
    std::fprintf(stderr, "test_cpp_routing: %d partition rows, %d hash rows, %d failed\n", np, nh,
                 failures);
    return failures ? 1 : 0;
}
