/* SPDX-License-Identifier: Apache-2.0
 *
 * marker.h - the authentication of forget markers (ingest.h): a marker is
 * applied only when it carries an HMAC-SHA256 over its user, scene and
 * time, keyed by a secret every node of the cluster reads from
 * cluster.forget_key_file. Writing the plays topic then lets a producer
 * add plays (items filtered: false positives), never delete them (false
 * negatives); proto/dedup.proto, "Forget marker", states the trust
 * boundary. Knows nothing of Kafka, gRPC or the store.
 *
 * What is MACed (the exact bytes, so other producers can sign):
 *
 *   "dedupd forget v1"            16 bytes of ASCII, no terminator
 *   u32 big-endian | user         the user id's length, then its bytes
 *   u32 big-endian | scene        the scene's length ("" = 0), then its bytes
 *   i64 big-endian                the marker's time: its PlayEvent's
 *                                 played_at_ms as sent (0 when left out)
 *
 * An all-scenes marker (proto/dedup.proto: dedupd-op "forget-all-scenes")
 * deletes the user's plays in every scene; its MAC covers another message,
 * with no scene:
 *
 *   "dedupd forget all"           17 bytes of ASCII, no terminator
 *   u32 big-endian | user         the user id's length, then its bytes
 *   i64 big-endian                the marker's time, as above
 *
 * The two labels differ at their 15th byte, so neither kind's MAC is ever
 * valid for the other: a one-scene marker cannot be widened to all scenes,
 * and markers signed before all-scenes ones existed keep their meaning.
 *
 * The key is the key file's bytes exactly as stored (a trailing newline is
 * part of it). The MAC travels in the message header "dedupd-mac" as 64
 * hexadecimal characters (either case); anything else is refused.
 */
#ifndef DD_MARKER_H
#define DD_MARKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DD_MARKER_HEADER "dedupd-mac"
/* The dedupd-op header's value of an all-scenes marker ("forget": one scene). */
#define DD_MARKER_OP_ALL "forget-all-scenes"
#define DD_MARKER_MAC_BYTES 32
#define DD_MARKER_MAC_HEX (2 * DD_MARKER_MAC_BYTES)
/* The key file's size bounds, in bytes: at least the MAC's strength, and
 * small enough to read whole at start. */
#define DD_MARKER_KEY_MIN 32
#define DD_MARKER_KEY_MAX 4096

typedef struct dd_marker_key dd_marker_key;

/* Read the key from the file at PATH, once: a regular file of
 * DD_MARKER_KEY_MIN..DD_MARKER_KEY_MAX bytes. *WORLD_READABLE (may be NULL)
 * says whether any user may read it (the caller warns: anyone who can read
 * it can forge markers). Returns 0, DD_ERR_INVALID (cannot be opened or
 * read, not a regular file, too short or too long: err says which, without
 * the key name, which the caller adds) or DD_ERR_NOMEM; *out is NULL on
 * error. Free with dd_marker_key_free. */
int dd_marker_key_load(dd_marker_key **out, const char *path, bool *world_readable, char *err,
                       size_t errlen);

/* The same from LEN bytes at KEY (copied), with the same bounds. */
int dd_marker_key_new(dd_marker_key **out, const void *key, size_t len, char *err, size_t errlen);

/* Wipe and free. NULL is a no-op. */
void dd_marker_key_free(dd_marker_key *k);

/* Write the bytes that are MACed (above) for USER, SCENE and AT_MS to OUT,
 * which has room for CAP bytes. Returns how many bytes the message has;
 * OUT holds it only when that is <= CAP. Cannot fail. */
size_t dd_marker_message(uint8_t *out, size_t cap, const char *user, size_t user_len,
                         const char *scene, size_t scene_len, int64_t at_ms);

/* The MAC of (USER, SCENE, AT_MS) under K, as DD_MARKER_MAC_HEX lowercase
 * hexadecimal characters and a NUL in HEX. Returns 0, or DD_ERR_NOMEM when
 * libcrypto cannot allocate (HEX is then ""). Safe from any thread. */
int dd_marker_sign(const dd_marker_key *k, const char *user, size_t user_len, const char *scene,
                   size_t scene_len, int64_t at_ms, char hex[DD_MARKER_MAC_HEX + 1]);

/* The same three for an all-scenes marker of USER at AT_MS (the message
 * above without a scene). Same failures, same threads. */
size_t dd_marker_message_all(uint8_t *out, size_t cap, const char *user, size_t user_len,
                             int64_t at_ms);
int dd_marker_sign_all(const dd_marker_key *k, const char *user, size_t user_len, int64_t at_ms,
                       char hex[DD_MARKER_MAC_HEX + 1]);

/* What a marker's MAC header says. */
enum dd_marker_check {
    DD_MARKER_VALID = 0,
    DD_MARKER_NO_KEY = 1,    /* no key configured: no marker is applied */
    DD_MARKER_MISSING = 2,   /* no dedupd-mac header */
    DD_MARKER_MALFORMED = 3, /* not 64 hexadecimal characters */
    DD_MARKER_MISMATCH = 4,  /* not the MAC of this marker under the key */
    DD_MARKER_ERROR = 5,     /* libcrypto failed (out of memory): not applied */
};

/* Check MAC (MAC_LEN bytes, the header's value; NULL = no header) against
 * (USER, SCENE, AT_MS) under K (NULL = no key). The comparison takes the
 * same time wherever the MACs differ. Safe from any thread. */
enum dd_marker_check dd_marker_verify(const dd_marker_key *k, const char *user, size_t user_len,
                                      const char *scene, size_t scene_len, int64_t at_ms,
                                      const void *mac, size_t mac_len);

/* The same check for an all-scenes marker of (USER, AT_MS). */
enum dd_marker_check dd_marker_verify_all(const dd_marker_key *k, const char *user, size_t user_len,
                                          int64_t at_ms, const void *mac, size_t mac_len);

/* "valid", "no key", "no MAC", "malformed MAC", "wrong MAC", "MAC error". */
const char *dd_marker_strerror(enum dd_marker_check c);

#endif
