/* SPDX-License-Identifier: Apache-2.0
 *
 * dedupctl_stats.h - `dedupctl stats`, on the client library's HTTP GET
 * and Prometheus text parser.
 */
#ifndef DEDUPCTL_STATS_H
#define DEDUPCTL_STATS_H

#include <stddef.h>
#include <stdio.h>

#include "dedupctl_out.h"

/* Scrape ADDR's /metrics twice, INTERVAL_MS apart (each request within
 * TIMEOUT_MS), and print to OUT
 * requests/s (by method), error responses/s, Filter p99 over the interval,
 * degraded answers, ingest rate, consumer lag (in ms where the daemon
 * exports dedupd_ingest_lag_seconds, or the previous release's
 * dedupd_ingest_lag_ms with a value of 0 or more; in messages from
 * dedupd_ingest_consumer_lag, total and worst partition; else why neither
 * is known), pending window, and /readyz.
 * With OUT->json the same figures as one JSON object: requests_per_s,
 * methods {name: per s}, errors_per_s, filter_p99_ms (null: no calls),
 * filter_p99_since_start, degraded_per_s, degraded_total, ingest (null:
 * off; else messages_per_s, bad_per_s, lag_ms, consumer_lag_messages,
 * pending_users, pending_bytes, each null when not exported), ready
 * (null: /readyz did not answer) and ready_detail.
 * Returns 0, or an error as dd_http_get / dd_promtext_parse with a message
 * in ERR. */
int dedupctl_stats(const char *addr, int interval_ms, int timeout_ms, struct dedupctl_out *out,
                   char *err, size_t errlen);

#endif
