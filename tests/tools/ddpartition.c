/* SPDX-License-Identifier: Apache-2.0
 *
 * ddpartition.c - the partition dd_partition_of gives each key, for the
 * test that compares it with where a real producer put the message
 * (tests/integration/test_partitioner.py). A test tool (tests/tools/); it
 * links partition.c alone, so what it prints is that file's answer.
 *
 *   ddpartition [-Z] PARTITIONER PARTITIONS  < keys
 *
 * Reads keys from stdin, one a line (any bytes but '\n'; an empty line is
 * an empty key, or with -Z a message without a key, as kcat -Z sends it),
 * and prints "KEY<TAB>PARTITION" for each, the key as read: PARTITION is
 * -1 where librdkafka picks at random (partition.h). PARTITIONER is one of
 * librdkafka's names. Exits 0, 1 on a read or write error, 2 on bad
 * arguments.
 */
#include "partition.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

static int usage(void)
{
    fprintf(stderr, "usage: ddpartition [-Z] PARTITIONER PARTITIONS  (PARTITIONER:");
    for (size_t i = 0; dd_partitioner_names[i]; i++) fprintf(stderr, " %s", dd_partitioner_names[i]);
    fprintf(stderr, ")\n");
    return 2;
}

int main(int argc, char **argv)
{
    int null_empty = 0, a = 1;
    if (a < argc && strcmp(argv[a], "-Z") == 0) {
        null_empty = 1;
        a++;
    }
    if (argc - a != 2) return usage();

    enum dd_partitioner p;
    if (dd_partitioner_parse(argv[a], &p) != 0) {
        fprintf(stderr, "ddpartition: unknown partitioner '%s'\n", argv[a]);
        return usage();
    }
    char *end;
    errno = 0;
    long n = strtol(argv[a + 1], &end, 10);
    if (errno || end == argv[a + 1] || *end || n < 1 || n > INT32_MAX) {
        fprintf(stderr, "ddpartition: PARTITIONS '%s' is not 1 to %" PRId32 "\n", argv[a + 1],
                INT32_MAX);
        return usage();
    }

    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    for (;;) {
        errno = 0;
        len = getline(&line, &cap, stdin);
        if (len < 0) {
            if (!feof(stdin)) { /* a read error, or no memory for the line */
                fprintf(stderr, "ddpartition: reading stdin: %s\n", strerror(errno));
                rc = 1;
            }
            break;
        }
        if (len > 0 && line[len - 1] == '\n') len--;
        const char *key = (len == 0 && null_empty) ? NULL : line;
        int32_t part = dd_partition_of(p, key, (size_t)len, (int32_t)n);
        if (fwrite(line, 1, (size_t)len, stdout) != (size_t)len ||
            printf("\t%" PRId32 "\n", part) < 0) {
            rc = 1;
            break;
        }
    }
    free(line);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "ddpartition: writing stdout: %s\n", strerror(errno));
        rc = 1;
    }
    return rc;
}
