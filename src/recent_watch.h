/* SPDX-License-Identifier: Apache-2.0
 *
 * recent_watch.h - whether Redis (recent.redis) answers, for /readyz and
 * dedupd_component_ready{component="redis"}: a thread of its own PINGs it
 * every DD_RECENT_WATCH_INTERVAL_MS over a connection of its own
 * (recent.h), so the answer holds with no traffic and never waits on
 * Redis in the HTTP thread that asks.
 *
 * Redis down does not make the node unready: Filter still answers from
 * the history, marking its answers degraded (recent deliveries unknown),
 * and taking every node out at once would answer nothing. /readyz stays
 * 200 and says "ready; degraded: redis ...".
 */
#ifndef DD_RECENT_WATCH_H
#define DD_RECENT_WATCH_H

#include <stdbool.h>
#include <stddef.h>

#include "recent.h"

#define DD_RECENT_WATCH_INTERVAL_MS 1000

typedef struct dd_recent_watch dd_recent_watch;

/* PING Redis once now (so the state is known on return) and start the
 * thread. CONF is copied. Returns 0, DD_ERR_INVALID (bad recent.redis) or
 * DD_ERR_NOMEM with a message in err; *out NULL on error. Free with
 * dd_recent_watch_free (NULL is a no-op), which stops the thread. */
int dd_recent_watch_new(dd_recent_watch **out, const struct dd_recent_conf *conf, char *err,
                        size_t errlen);
void dd_recent_watch_free(dd_recent_watch *w);

/* Whether the last PING was answered; if not, and WHY is not NULL, what
 * failed ("redis HOST:PORT: ...", printable) into WHY. Thread-safe and
 * quick (a copy under a mutex). */
bool dd_recent_watch_up(dd_recent_watch *w, char *why, size_t whylen);

#endif
