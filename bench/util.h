/* SPDX-License-Identifier: Apache-2.0
 *
 * util.h - small helpers every benchmark needs: removing its scratch
 * store and sorting its timings.
 */
#ifndef DD_BENCH_UTIL_H
#define DD_BENCH_UTIL_H

/* Remove PATH and everything under it (symbolic links not followed);
 * failures are ignored: a benchmark's scratch directory. */
void bench_rm_tree(const char *path);

/* qsort comparison of int64_t values, ascending. */
int bench_cmp_i64(const void *a, const void *b);

#endif
