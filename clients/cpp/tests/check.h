// SPDX-License-Identifier: Apache-2.0
//
// check.h - the C++ tests' CHECK: a failed condition is counted in
// `failures` and printed with its file, line and a printf-style message;
// the test goes on and exits non-zero at the end when any failed. For
// test programs of one source file each (the counter is that file's own).
#pragma once

#include <cstdio>

namespace
{
int failures = 0;
} // namespace

#define CHECK(cond, ...) \
    do { \
        if (!(cond)) { \
            failures++; \
            std::fprintf(stderr, "%s:%d: FAILED: %s: ", __FILE__, __LINE__, #cond); \
            std::fprintf(stderr, __VA_ARGS__); \
            std::fputc('\n', stderr); \
        } \
    } while (0)
