/* SPDX-License-Identifier: Apache-2.0
 *
 * filter_pace.c - one Filter call at a time to a dedupd, paced, each call's
 * latency printed as it ends, until SIGTERM or SIGINT. bench/run_snapshot.py
 * runs it against the node that lends its store and cuts the lines into
 * windows (before the copy, during it), so the latencies are a C client's
 * (libddclient), not the Python script's.
 *
 *   filter_pace --addr HOST:PORT --user ID [--rate CALLS_PER_S] [--candidates N]
 *
 * The request: N candidates (default 10,000) "pace-<i>" for USER, kept as
 * indexes. Each call is timed from when it was due (one every 1/RATE s,
 * default 100), so a slow call's delay to the next one counts as a
 * service would see it. Output, one line per call:
 *   call DUE_NS LATENCY_NS KEPT DEGRADED   (DUE_NS: CLOCK_MONOTONIC)
 *   error DUE_NS STATUS MESSAGE
 * DEGRADED is 1 when dedupd answered without the deliveries in Redis
 * (recent.timeout_ms ran out): an answer, counted apart, not an error. A
 * call whose kept count differs from the first call's is an error line
 * (the store does not change while the benchmark runs). Exit 0 when
 * stopped by a signal, 1 if the first call fails or on bad arguments.
 */
#include "client.h"
#include "dd.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

static void sleep_until(int64_t due_ns)
{
    int64_t now = dd_mono_ns();
    if (now >= due_ns) return;
    struct timespec ts = {(time_t)((due_ns - now) / 1000000000),
                          (long)((due_ns - now) % 1000000000)};
    nanosleep(&ts, NULL); /* a signal cuts it short: the loop then stops */
}

int main(int argc, char **argv)
{
    const char *addr = NULL, *user = NULL;
    double rate = 100;
    long n = 10000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--addr") && i + 1 < argc) addr = argv[++i];
        else if (!strcmp(argv[i], "--user") && i + 1 < argc) user = argv[++i];
        else if (!strcmp(argv[i], "--rate") && i + 1 < argc) rate = atof(argv[++i]);
        else if (!strcmp(argv[i], "--candidates") && i + 1 < argc) n = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: %s --addr HOST:PORT --user ID [--rate CALLS_PER_S] "
                            "[--candidates N]\n", argv[0]);
            return 1;
        }
    }
    if (!addr || !user || rate <= 0 || n < 1 || n > 1000000) {
        fprintf(stderr, "filter_pace: --addr and --user are required; --rate > 0; "
                        "--candidates from 1 to 1,000,000\n");
        return 1;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal; /* no SA_RESTART: a sleep ends at once */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    char **ids = calloc((size_t)n, sizeof *ids);
    char *text = malloc((size_t)n * 16);
    if (!ids || !text) {
        fprintf(stderr, "filter_pace: out of memory\n");
        return 1;
    }
    for (long i = 0; i < n; i++) {
        ids[i] = text + i * 16;
        snprintf(ids[i], 16, "pace-%ld", i);
    }
    Dedup__V1__FilterRequest req = DEDUP__V1__FILTER_REQUEST__INIT;
    req.user_id = (char *)user;
    req.n_candidate_ids = (size_t)n;
    req.candidate_ids = ids;
    req.mode = DEDUP__V1__RESPONSE_MODE__RESPONSE_MODE_INDEXES;

    char err[256];
    dd_client *c = NULL;
    if (dd_client_new(&c, addr, err, sizeof err)) {
        fprintf(stderr, "filter_pace: %s\n", err);
        return 1;
    }
    dd_client_set_timeout(c, 10000);
    const Dedup__V1__FilterResponse *resp;
    if (dd_client_filter(c, &req, &resp)) { /* connects; its time is not counted */
        fprintf(stderr, "filter_pace: %s: Filter: %s\n", addr, dd_client_errstr(c));
        return 1;
    }
    if (resp->degraded) {
        fprintf(stderr, "filter_pace: %s: Filter answered degraded (Redis unreachable?)\n", addr);
        return 1;
    }
    const size_t want = resp->n_kept_indexes;
    const int64_t every = (int64_t)(1e9 / rate);
    int64_t due = dd_mono_ns();
    while (!stopping) {
        sleep_until(due);
        if (stopping) break;
        int rc = dd_client_filter(c, &req, &resp);
        int64_t end = dd_mono_ns();
        if (rc)
            printf("error %lld %s %s\n", (long long)due, dd_client_status_name(dd_client_status(c)),
                   dd_client_errstr(c));
        else if (resp->n_kept_indexes != want)
            printf("error %lld OK kept %zu of %zu (first call %zu)\n", (long long)due,
                   resp->n_kept_indexes, (size_t)n, want);
        else
            printf("call %lld %lld %zu %d\n", (long long)due, (long long)(end - due),
                   resp->n_kept_indexes, resp->degraded ? 1 : 0);
        fflush(stdout);
        /* a call late by more than a period does not queue a burst behind it */
        due += every;
        if (due < end - every) due = end - every;
    }
    dd_client_free(c);
    free(ids);
    free(text);
    return 0;
}
