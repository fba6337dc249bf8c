/* SPDX-License-Identifier: Apache-2.0
 *
 * dedupctl_out.h - where a dedupctl command writes its answer and what it
 * learnt on the way, shared by the commands that ask the admin listener
 * (dedupctl_stats.h, dedupctl_cluster.h, dedupctl_trace.h) and dedupctl.c,
 * which turns it into an exit code.
 */
#ifndef DEDUPCTL_OUT_H
#define DEDUPCTL_OUT_H

#include <stdbool.h>
#include <stdio.h>

struct dedupctl_out {
    FILE *f;         /* the answer: text, or one JSON object and a newline */
    bool json;       /* -o json */
    int http_status; /* set by a command whose request the listener refused
                      * (an HTTP status other than 200); 0 = none */
    bool degraded;   /* set by a command whose answer was degraded (why) */
};

#endif
