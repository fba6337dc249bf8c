/* SPDX-License-Identifier: Apache-2.0
 *
 * httpget.h - a minimal HTTP/1.0 request (GET, or POST/DELETE without a
 * body) over loopback or any host:port, enough for dedupd's admin listener
 * (/metrics, /healthz, /readyz, /why, /trace): dedupctl and the tests use
 * it.
 */
#ifndef DD_HTTPGET_H
#define DD_HTTPGET_H

#include <stddef.h>

/* GET http://ADDR PATH (ADDR = host:port or [v6]:port) with a TIMEOUT_MS
 * for the whole exchange. On success returns 0, *STATUS = the HTTP status
 * and *BODY = the body, NUL-terminated (caller frees with free()), *LEN its
 * length. DD_ERR_INVALID (bad address or reply), DD_ERR_UNAVAILABLE
 * (cannot connect), DD_ERR_TIMEOUT, DD_ERR_IO or DD_ERR_NOMEM otherwise,
 * with a message in ERR; *BODY is NULL then. */
int dd_http_get(const char *addr, const char *path, int timeout_ms, int *status, char **body,
                size_t *len, char *err, size_t errlen);

/* The same with METHOD ("GET", "POST", "DELETE", ...; no request body).
 * PATH (with its query) is at most DD_HTTP_PATH_MAX bytes, under the
 * admin listener's 32 KiB request limit. */
#define DD_HTTP_PATH_MAX 30000
int dd_http_request(const char *addr, const char *method, const char *path, int timeout_ms,
                    int *status, char **body, size_t *len, char *err, size_t errlen);

/* The same with the header lines HEADERS (each "Name: value\r\n"; NULL or
 * "" = none; at most DD_HTTP_HEADERS_MAX bytes) added to the request. */
#define DD_HTTP_HEADERS_MAX 2048
int dd_http_request_h(const char *addr, const char *method, const char *path, const char *headers,
                      int timeout_ms, int *status, char **body, size_t *len, char *err,
                      size_t errlen);

#endif
