// SPDX-License-Identifier: Apache-2.0
//
// test_routing.cc - the client computes what the server computes: every
// row of the shared vectors (argv[1]: tests/vectors/partition.tsv, user id
// -> partition per partitioner and partition count; argv[2]:
// tests/vectors/item_hash.tsv, item id -> XXH3-64 with dedupd's seed), the
// same files the C unit tests and the Java tests check.
//
// Both files: '#' lines are comments, fields are separated by tabs, and an
// id is written as its bytes in hex when the header names the column
// *_hex (ids with tabs, newlines or no bytes at all). The first line that
// is not a comment names the columns.
#include "dedupd/routing.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
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

// Rows of PATH as column name -> value (ids unhexed under their name
// without _hex); false when it cannot be read.
bool ReadTable(const char *path, std::vector<std::map<std::string, std::string>> *rows)
{
    std::ifstream in(path);
    if (!in) {
        std::fprintf(stderr, "cannot read %s\n", path);
        return false;
    }
    std::vector<std::string> cols;
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
        lineno++;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty() || line[0] == '#') continue;
        std::vector<std::string> f = Split(line);
        if (cols.empty()) {
            cols = f;
            continue;
        }
        if (f.size() != cols.size()) {
            std::fprintf(stderr, "%s:%d: %zu fields, the header has %zu\n", path, lineno, f.size(),
                         cols.size());
            return false;
        }
        std::map<std::string, std::string> row;
        for (size_t i = 0; i < cols.size(); i++) {
            const std::string &c = cols[i];
            if (c.size() > 4 && c.compare(c.size() - 4, 4, "_hex") == 0) {
                std::string raw;
                if (!Unhex(f[i], &raw)) {
                    std::fprintf(stderr, "%s:%d: bad hex %s\n", path, lineno, f[i].c_str());
                    return false;
                }
                row[c.substr(0, c.size() - 4)] = raw;
            } else {
                row[c] = f[i];
            }
        }
        rows->push_back(std::move(row));
    }
    return true;
}

std::string Get(const std::map<std::string, std::string> &row,
                std::initializer_list<const char *> names)
{
    for (const char *n : names) {
        auto it = row.find(n);
        if (it != row.end()) return it->second;
    }
    return "";
}

bool Has(const std::map<std::string, std::string> &row, std::initializer_list<const char *> names)
{
    for (const char *n : names)
        if (row.count(n)) return true;
    return false;
}

int Partitions(const char *path)
{
    std::vector<std::map<std::string, std::string>> rows;
    if (!ReadTable(path, &rows)) return -1;
    int n = 0;
    for (const auto &row : rows) {
        std::string name = Get(row, {"partitioner"});
        auto p = dedupd::ParsePartitioner(name);
        if (!p) {
            std::fprintf(stderr, "%s: unknown partitioner %s\n", path, name.c_str());
            failures++;
            continue;
        }
        if (!Has(row, {"user_id", "user", "key"})) {
            std::fprintf(stderr, "%s: no user id column\n", path);
            return -1;
        }
        std::string user = Get(row, {"user_id", "user", "key"});
        long count = std::atol(Get(row, {"partition_count", "partitions", "count"}).c_str());
        long want = std::atol(Get(row, {"partition"}).c_str());
        int32_t got = dedupd::PartitionOf(*p, user, static_cast<int32_t>(count));
        if (got != want) {
            if (failures < 10)
                std::fprintf(stderr,
                             "%s %ld partitions, user of %zu bytes: partition %d, want %ld\n",
                             name.c_str(), count, user.size(), got, want);
            failures++;
        }
        n++;
    }
    return n;
}

int Hashes(const char *path)
{
    std::vector<std::map<std::string, std::string>> rows;
    if (!ReadTable(path, &rows)) return -1;
    int n = 0;
    for (const auto &row : rows) {
        if (!Has(row, {"item_id", "id", "item"})) {
            std::fprintf(stderr, "%s: no item id column\n", path);
            return -1;
        }
        std::string id = Get(row, {"item_id", "id", "item"});
        std::string hex = Get(row, {"hash", "xxh3", "item_hash"});
        unsigned long long want = std::strtoull(hex.c_str(), nullptr, 16);
        uint64_t got = dedupd::ItemHash(id);
        if (got != want) {
            if (failures < 10)
                std::fprintf(stderr, "item of %zu bytes: hash %016llx, want %s\n", id.size(),
                             static_cast<unsigned long long>(got), hex.c_str());
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
