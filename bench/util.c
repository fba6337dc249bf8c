/* SPDX-License-Identifier: Apache-2.0
 *
 * util.c - helpers the benchmarks share (util.h).
 */
#include "util.h"

#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void bench_rm_tree(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int bench_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}
