/* SPDX-License-Identifier: Apache-2.0
 *
 * dedupctl_trace.h - `dedupctl why` and `dedupctl trace`: the admin
 * listener's /why and /trace (src/why.h), for people: one line per item
 * or per traced user.
 */
#ifndef DEDUPCTL_TRACE_H
#define DEDUPCTL_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dedupctl_out.h"

/* TOKEN (NULL: none) is sent as "Authorization: Bearer TOKEN": the admin
 * listener's operator pages want admin.token_file's token (src/admin.h).
 *
 * GET ADDR's /why for USER in SCENE with LOOKBACK_DAYS and the N ITEMS,
 * and print to OUT a line on the user (traced since when, or that no
 * trace is kept) and one line per item: the item, its verdict (kept,
 * duplicate, delivered, played), the time (UTC ISO-8601, "-" when none is
 * known), the source ("kafka TOPIC/PARTITION@OFFSET", "RecordPlays",
 * "RecordDelivery", "-") and the detail (with ALSO, the scene a played or
 * delivered item was found in; with MIN_KEPT, a line with the lookback
 * used first). Returns 0, or an error with a
 * message in ERR: the server's {"error"} text (DD_ERR_INVALID for 4xx,
 * DD_ERR_UNAVAILABLE for 5xx; OUT->http_status then holds the status),
 * or as dd_http_request. With OUT->json the listener's JSON answer is
 * printed as one line instead. OUT->degraded: Redis did not answer. */
int dedupctl_why(const char *addr, const char *token, int timeout_ms, const char *user,
                 const char *scene, uint32_t lookback_days, uint32_t min_kept, char *const *also,
                 size_t n_also, char *const *items, size_t n, struct dedupctl_out *out, char *err,
                 size_t errlen);

/* `trace add USER`, `trace remove USER`, `trace list`: ACTION is "add",
 * "remove" or "list" (USER NULL). Prints one line per traced user for
 * list (user, since, from config or run time), a confirmation otherwise.
 * Returns as dedupctl_why. */
int dedupctl_trace(const char *addr, const char *token, int timeout_ms, const char *action,
                   const char *user, struct dedupctl_out *out, char *err, size_t errlen);

#endif
