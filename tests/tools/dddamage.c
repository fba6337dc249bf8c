/* SPDX-License-Identifier: Apache-2.0
 *
 * dddamage.c - damage one user's stored history the way a bad disk, a bad
 * copy or a bug of ours would, but below RocksDB's own checks: each of the
 * user's segment values is read, one byte in its middle is flipped, and
 * the result is written back through RocksDB (a Put), so RocksDB's block
 * checksums hold and only dedupd's own checksum fails. A test tool
 * (tests/integration/test_fleet_corrupt.py); dedupd must not be running
 * on the store (RocksDB's lock).
 *
 *   dddamage STORE_PATH SCENE USER
 *
 * Prints "damaged=N" (values rewritten). Exits 0 when N > 0, 1 when the
 * user has no stored value, 2 on any error. Flipping bytes in an SST file
 * instead would fail RocksDB's block checksum: a read error dedupd already
 * reports, not the case under test.
 */
#include "fold.h"
#include "segment.h"

#include <rocksdb/c.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 4 || strlen(argv[2]) > DD_SCENE_MAX || strlen(argv[3]) > DD_USER_MAX ||
        argv[3][0] == '\0') {
        fprintf(stderr, "usage: dddamage STORE_PATH SCENE USER\n");
        return 2;
    }
    /* The store's merge operator, so a Get folds pending operands first
     * (RocksDB refuses to open a store whose operator name differs). */
    static struct dd_fold fold;
    struct dd_segments g = {30, 90};
    dd_fold_init(&fold, &g, 0.01, NULL, NULL);
    rocksdb_options_t *o = rocksdb_options_create();
    rocksdb_options_set_merge_operator(o, dd_fold_merge_operator(&fold));
    char *e = NULL;
    rocksdb_t *db = rocksdb_open(o, argv[1], &e);
    if (e) {
        fprintf(stderr, "dddamage: open %s: %s\n", argv[1], e);
        rocksdb_free(e);
        rocksdb_options_destroy(o);
        return 2;
    }
    static uint8_t prefix[DD_KEY_MAX];
    size_t plen = dd_key_prefix(prefix, argv[2], strlen(argv[2]), argv[3], strlen(argv[3]));
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(wo, 1);
    rocksdb_iterator_t *it = rocksdb_create_iterator(db, ro);
    int n = 0, rc = 0;
    for (rocksdb_iter_seek(it, (const char *)prefix, plen); rocksdb_iter_valid(it);
         rocksdb_iter_next(it)) {
        size_t kl, vl;
        const char *k = rocksdb_iter_key(it, &kl);
        if (kl != plen + 4 || memcmp(k, prefix, plen) != 0) break;
        const char *v = rocksdb_iter_value(it, &vl);
        if (vl == 0) continue;
        char *m = malloc(vl);
        if (!m) {
            fprintf(stderr, "dddamage: out of memory\n");
            rc = 2;
            break;
        }
        memcpy(m, v, vl);
        m[vl / 2] ^= 0x10;
        rocksdb_put(db, wo, k, kl, m, vl, &e);
        free(m);
        if (e) {
            fprintf(stderr, "dddamage: put: %s\n", e);
            rocksdb_free(e);
            rc = 2;
            break;
        }
        n++;
    }
    rocksdb_iter_get_error(it, &e);
    if (e) {
        fprintf(stderr, "dddamage: read: %s\n", e);
        rocksdb_free(e);
        rc = 2;
    }
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    rocksdb_writeoptions_destroy(wo);
    rocksdb_close(db);
    rocksdb_options_destroy(o);
    if (rc) return rc;
    printf("damaged=%d\n", n);
    return n > 0 ? 0 : 1;
}
