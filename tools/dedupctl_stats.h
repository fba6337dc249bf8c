/* SPDX-License-Identifier: Apache-2.0
 *
 * dedupctl_stats.h - `dedupctl stats`, on the client library's HTTP GET
 * and Prometheus text parser.
 */
#ifndef DEDUPCTL_STATS_H
#define DEDUPCTL_STATS_H

#include <stddef.h>
#include <stdio.h>

/* Scrape ADDR's /metrics twice, INTERVAL_MS apart, and print to OUT
 * requests/s (by method), error responses/s, Filter p99 over the interval,
 * degraded answers, ingest rate, consumer lag (in ms where the daemon
 * exports dedupd_ingest_lag_seconds, or the previous release's
 * dedupd_ingest_lag_ms with a value of 0 or more; in messages from
 * dedupd_ingest_consumer_lag, total and worst partition; else why neither
 * is known), pending window, and /readyz.
 * Returns 0, or an error as dd_http_get / dd_promtext_parse with a message
 * in ERR. */
int dedupctl_stats(const char *addr, int interval_ms, FILE *out, char *err, size_t errlen);

#endif
