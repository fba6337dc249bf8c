/* SPDX-License-Identifier: Apache-2.0
 *
 * snapshot.c - see snapshot.h.
 */
#include "snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <xxhash.h>

#include "api.h"
#include "cluster_map.h"
#include "dd.h"
#include "dedup.pb-c.h"
#include "log.h"
#include "sys.h"
#include "unary.h"

#define MOD "snapshot"
/* Throttled reads wait until this many bytes are allowed at once. */
#define MIN_GRANT (64u * 1024u)

void dd_snapshot_manifest_free(struct dd_snapshot_manifest *m)
{
    free(m->files);
    m->files = NULL;
    m->n = 0;
}

bool dd_snapshot_name_ok(const char *name)
{
    size_t n = strlen(name);
    return n > 0 && n <= DD_SNAPSHOT_NAME_MAX && name[0] != '.' && !strchr(name, '/');
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(p);
    return 0;
}

/* Remove PATH and everything under it; a missing PATH is fine. */
static void rm_tree(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* XXH3-64 of the file at PATH into *H. 0 or DD_ERR_IO. */
static int hash_file(const char *path, uint64_t *h, uint64_t *size, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dd_fail(DD_ERR_IO, err, errlen, "%s: %s", path, strerror(errno));
    XXH3_state_t *st = XXH3_createState();
    uint8_t *buf = malloc(DD_SNAPSHOT_CHUNK_MAX);
    int rc = DD_OK;
    if (!st || !buf) {
        rc = dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
        goto out;
    }
    XXH3_64bits_reset(st);
    uint64_t total = 0;
    for (;;) {
        ssize_t r = read(fd, buf, DD_SNAPSHOT_CHUNK_MAX);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            rc = dd_fail(DD_ERR_IO, err, errlen, "%s: %s", path, strerror(errno));
            goto out;
        }
        if (r == 0) break;
        XXH3_64bits_update(st, buf, (size_t)r);
        total += (uint64_t)r;
    }
    *h = XXH3_64bits_digest(st);
    if (size) *size = total;
out:
    free(buf);
    if (st) XXH3_freeState(st);
    close(fd);
    return rc;
}

/* ---- the lending side --------------------------------------------------- */

/* ST_READY: lent, until its thread releases it (lend()); ST_RELEASING: a
 * SnapshotBegin found it too old or idle and asked its thread to. */
enum { ST_NONE, ST_MAKING, ST_READY, ST_RELEASING, ST_FAILED };

struct dd_snapshot_server {
    dd_history *h;
    char *root; /* <history.path>.snapshot */
    pthread_mutex_t mu;
    pthread_cond_t cond; /* on CLOCK_MONOTONIC: wakes the lending thread */
    bool stop;           /* the server is being freed */
    int state;
    bool joinable; /* thread started and not joined */
    pthread_t thread;
    char id[48]; /* current checkpoint (ST_READY) or the one being made */
    struct dd_snapshot_file *files;
    size_t n;
    char fail[256];
    int64_t last_used_ns;
    int64_t made_ns;    /* when the lent checkpoint became ready */
    int64_t max_age_ns; /* cluster.snapshot_max_age_s */
    double rate;        /* bytes per second, 0 = no limit */
    double tokens;
    int64_t tokens_ns;
    _Atomic uint64_t bytes, throttled;
};

int dd_snapshot_server_new(dd_snapshot_server **out, dd_history *h, uint32_t mbps,
                           uint32_t max_age_s, char *err, size_t errlen)
{
    *out = NULL;
    dd_snapshot_server *s = calloc(1, sizeof *s);
    if (!s) return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    size_t n = strlen(dd_history_path(h)) + sizeof ".snapshot";
    if (!(s->root = malloc(n))) {
        free(s);
        return dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
    }
    snprintf(s->root, n, "%s.snapshot", dd_history_path(h));
    rm_tree(s->root); /* a crashed run's checkpoint */
    s->h = h;
    s->rate = (double)mbps * 125000.0;
    s->tokens = s->rate;
    s->tokens_ns = dd_mono_ns();
    s->max_age_ns = (int64_t)(max_age_s ? max_age_s : 1) * 1000000000;
    if (dd_sys_lock_init(&s->mu, &s->cond) != DD_OK) {
        free(s->root);
        free(s);
        return dd_fail(DD_ERR_NOMEM, err, errlen, "cannot create a condition variable");
    }
    *out = s;
    return DD_OK;
}

void dd_snapshot_server_free(dd_snapshot_server *s)
{
    if (!s) return;
    /* The lending thread releases its checkpoint and returns. */
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->mu);
    if (s->joinable) pthread_join(s->thread, NULL);
    rm_tree(s->root);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->mu);
    free(s->files);
    free(s->root);
    free(s);
}

static int cmp_file(const void *a, const void *b)
{
    return strcmp(((const struct dd_snapshot_file *)a)->name,
                  ((const struct dd_snapshot_file *)b)->name);
}

/* With s->mu held and the checkpoint in DIR ready (ST_READY): lend it
 * until it is cluster.snapshot_max_age_s old, DD_SNAPSHOT_IDLE_S unread,
 * asked to go by SnapshotBegin (ST_RELEASING) or the server is freed,
 * whichever comes first, however often it is read meanwhile: its hard
 * links pin SST files compaction would delete, so a receiver that keeps
 * reading, or one that never finishes, must not hold them for ever. Then
 * release it (ST_NONE; the directory removed after unlocking). Returns
 * with s->mu unlocked. */
static void lend(dd_snapshot_server *s, const char *dir)
{
    const char *why = "the server stops";
    for (;;) {
        if (s->stop) break;
        if (s->state == ST_RELEASING) {
            why = "replaced by a fresh one";
            break;
        }
        int64_t now = dd_mono_ns();
        int64_t age_end = s->made_ns + s->max_age_ns;
        int64_t idle_end = s->last_used_ns + (int64_t)DD_SNAPSHOT_IDLE_S * 1000000000;
        if (now >= age_end) {
            why = "cluster.snapshot_max_age_s";
            break;
        }
        if (now >= idle_end) {
            why = "idle";
            break;
        }
        int64_t until = age_end < idle_end ? age_end : idle_end;
        struct timespec ts = {(time_t)(until / 1000000000), (long)(until % 1000000000)};
        pthread_cond_timedwait(&s->cond, &s->mu, &ts);
    }
    dd_info(MOD, "msg=\"checkpoint released\" id=%s reason=\"%s\" age_ms=%" PRId64, s->id, why,
            (dd_mono_ns() - s->made_ns) / 1000000);
    s->state = ST_NONE;
    free(s->files);
    s->files = NULL;
    s->n = 0;
    pthread_mutex_unlock(&s->mu);
    rm_tree(dir);
}

/* The thread that makes checkpoint s->id: checkpoint, list, hash. */
static void *make_main(void *arg)
{
    dd_snapshot_server *s = arg;
    char err[256] = "", dir[4096], path[4096 + DD_SNAPSHOT_NAME_MAX + 2];
    struct dd_snapshot_file *files = NULL;
    size_t n = 0, cap = 0;
    uint64_t total = 0;
    int64_t t0 = dd_mono_ns();
    pthread_mutex_lock(&s->mu);
    snprintf(dir, sizeof dir, "%s/%s", s->root, s->id);
    pthread_mutex_unlock(&s->mu);
    int rc = DD_OK;
    if (mkdir(s->root, 0700) != 0 && errno != EEXIST)
        rc = dd_fail(DD_ERR_IO, err, sizeof err, "%s: %s", s->root, strerror(errno));
    if (rc == DD_OK) rc = dd_history_checkpoint(s->h, dir, err, sizeof err);
    DIR *d = rc == DD_OK ? opendir(dir) : NULL;
    if (rc == DD_OK && !d) rc = dd_fail(DD_ERR_IO, err, sizeof err, "%s: %s", dir, strerror(errno));
    struct dirent *e;
    while (rc == DD_OK && d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (!dd_snapshot_name_ok(e->d_name) || n >= DD_SNAPSHOT_FILES_MAX) {
            rc = dd_fail(DD_ERR_IO, err, sizeof err,
                         "checkpoint file %.64s: name too long or "
                         "too many files",
                         e->d_name);
            break;
        }
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 64;
            struct dd_snapshot_file *f = realloc(files, nc * sizeof *f);
            if (!f) {
                rc = dd_fail(DD_ERR_NOMEM, err, sizeof err, "out of memory");
                break;
            }
            files = f;
            cap = nc;
        }
        size_t nl = strlen(e->d_name); /* <= DD_SNAPSHOT_NAME_MAX: checked above */
        memcpy(files[n].name, e->d_name, nl + 1);
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, files[n].name) >= sizeof path) {
            rc = dd_fail(DD_ERR_IO, err, sizeof err, "checkpoint path too long");
            break;
        }
        rc = hash_file(path, &files[n].xxh3, &files[n].size, err, sizeof err);
        if (rc == DD_OK) total += files[n++].size;
    }
    if (d) closedir(d);
    if (rc == DD_OK) qsort(files, n, sizeof *files, cmp_file);
    pthread_mutex_lock(&s->mu);
    if (rc == DD_OK) {
        free(s->files);
        s->files = files;
        s->n = n;
        s->state = ST_READY;
        s->made_ns = s->last_used_ns = dd_mono_ns();
        dd_info(MOD,
                "msg=\"checkpoint ready to lend\" id=%s files=%zu bytes=%" PRIu64 " ms=%" PRId64,
                s->id, n, total, (dd_mono_ns() - t0) / 1000000);
        lend(s, dir);
        return NULL;
    } else {
        free(files);
        snprintf(s->fail, sizeof s->fail, "%s", err);
        s->state = ST_FAILED;
        dd_error(MOD, "msg=\"cannot make a checkpoint to lend\" error=\"%s\"", err);
    }
    pthread_mutex_unlock(&s->mu);
    if (rc != DD_OK) rm_tree(dir);
    return NULL;
}

int dd_snapshot_begin(dd_snapshot_server *s, struct dd_snapshot_manifest *out, char *err,
                      size_t errlen)
{
    memset(out, 0, sizeof *out);
    int rc = DD_OK;
    pthread_mutex_lock(&s->mu);
    int64_t now = dd_mono_ns();
    bool fresh = now - s->last_used_ns < (int64_t)DD_SNAPSHOT_IDLE_S * 1000000000 &&
                 now - s->made_ns < s->max_age_ns;
    if (s->state == ST_READY && fresh) {
        out->files = malloc((s->n ? s->n : 1) * sizeof *out->files);
        if (!out->files) {
            rc = dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
        } else {
            memcpy(out->files, s->files, s->n * sizeof *out->files);
            out->n = s->n;
            out->ready = true;
            snprintf(out->id, sizeof out->id, "%s", s->id);
            s->last_used_ns = now;
        }
    } else if (s->state == ST_READY || s->state == ST_RELEASING) {
        /* Too old or idle: its thread releases it; a fresh one is made at
         * a later call (the receiver asks again while not ready). */
        s->state = ST_RELEASING;
        pthread_cond_broadcast(&s->cond);
    } else if (s->state == ST_FAILED) {
        rc = dd_fail(DD_ERR_IO, err, errlen, "%s", s->fail);
        s->state = ST_NONE; /* the next call tries again */
    } else if (s->state != ST_MAKING) {
        /* none yet, or the last one released: a fresh one. The last
         * thread has set ST_NONE as its last act under the lock, so the
         * join waits at most for its directory's removal. */
        if (s->joinable) pthread_join(s->thread, NULL);
        s->joinable = false;
        free(s->files);
        s->files = NULL;
        s->n = 0;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(s->id, sizeof s->id, "%lld-%ld-%d", (long long)ts.tv_sec, ts.tv_nsec / 1000,
                 (int)getpid());
        s->state = ST_MAKING;
        if (pthread_create(&s->thread, NULL, make_main, s) != 0) {
            s->state = ST_NONE;
            rc = dd_fail(DD_ERR_NOMEM, err, errlen, "cannot start a thread");
        } else {
            s->joinable = true;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int dd_snapshot_read(dd_snapshot_server *s, const char *id, const char *name, uint64_t offset,
                     size_t max, uint8_t *buf, size_t *n, uint32_t *retry_after_ms, char *err,
                     size_t errlen)
{
    *n = 0;
    *retry_after_ms = 0;
    if (!dd_snapshot_name_ok(name)) return dd_fail(DD_ERR_NOTFOUND, err, errlen, "no such file");
    if (max > DD_SNAPSHOT_CHUNK_MAX) max = DD_SNAPSHOT_CHUNK_MAX;
    char path[4096 + 64 + DD_SNAPSHOT_NAME_MAX];
    pthread_mutex_lock(&s->mu);
    if (s->state != ST_READY || strcmp(id, s->id) != 0) {
        pthread_mutex_unlock(&s->mu);
        return dd_fail(DD_ERR_NOTFOUND, err, errlen, "no checkpoint %.60s here (any more)", id);
    }
    if (dd_mono_ns() - s->made_ns >= s->max_age_ns) {
        pthread_mutex_unlock(&s->mu);
        return dd_fail(DD_ERR_NOTFOUND, err, errlen,
                       "checkpoint %.60s is past "
                       "cluster.snapshot_max_age_s and released",
                       id);
    }
    struct dd_snapshot_file key;
    snprintf(key.name, sizeof key.name, "%s", name);
    const struct dd_snapshot_file *f = bsearch(&key, s->files, s->n, sizeof *s->files, cmp_file);
    if (!f) {
        pthread_mutex_unlock(&s->mu);
        return dd_fail(DD_ERR_NOTFOUND, err, errlen, "no file %s in checkpoint %s", name, id);
    }
    if (offset > f->size) {
        pthread_mutex_unlock(&s->mu);
        return dd_fail(DD_ERR_INVALID, err, errlen,
                       "offset %" PRIu64 " past the end of %s (%" PRIu64 " bytes)", offset, name,
                       f->size);
    }
    int64_t now = dd_mono_ns();
    s->last_used_ns = now;
    uint64_t left = f->size - offset;
    size_t want = left < max ? (size_t)left : max;
    if (s->rate > 0 && want > 0) {
        s->tokens += s->rate * (double)(now - s->tokens_ns) / 1e9;
        if (s->tokens > s->rate) s->tokens = s->rate; /* a burst of at most one second */
        s->tokens_ns = now;
        size_t need = want < MIN_GRANT ? want : MIN_GRANT;
        if (s->tokens < (double)need) {
            double ms = ((double)need - s->tokens) / s->rate * 1000.0;
            *retry_after_ms = ms < 1 ? 1 : (uint32_t)(ms + 1);
            pthread_mutex_unlock(&s->mu);
            atomic_fetch_add_explicit(&s->throttled, 1, memory_order_relaxed);
            return DD_OK;
        }
        if ((double)want > s->tokens) want = (size_t)s->tokens;
        s->tokens -= (double)want;
    }
    snprintf(path, sizeof path, "%s/%s/%s", s->root, s->id, name);
    pthread_mutex_unlock(&s->mu);
    if (want == 0) return DD_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dd_fail(DD_ERR_IO, err, errlen, "%s: %s", path, strerror(errno));
    size_t got = 0;
    while (got < want) {
        ssize_t r = pread(fd, buf + got, want - got, (off_t)(offset + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    int e = errno;
    close(fd);
    if (got < want)
        return dd_fail(DD_ERR_IO, err, errlen, "%s: short read (%s)", path, strerror(e));
    *n = got;
    atomic_fetch_add_explicit(&s->bytes, got, memory_order_relaxed);
    return DD_OK;
}

void dd_snapshot_server_counts(dd_snapshot_server *s, uint64_t *bytes, uint64_t *throttled)
{
    *bytes = atomic_load_explicit(&s->bytes, memory_order_relaxed);
    *throttled = atomic_load_explicit(&s->throttled, memory_order_relaxed);
}

int dd_snapshot_may_lend(const struct dd_cluster_map *map, enum dd_cluster_relation rel,
                         uint32_t shard, uint32_t asker_shard, char *err, size_t errlen)
{
    bool lend =
        shard == map->shard && ((rel == DD_MAP_SAME && asker_shard == map->shard) ||
                                (rel == DD_MAP_NEWER && asker_shard % map->shards == map->shard));
    if (lend) return DD_OK;
    return dd_fail(DD_ERR_STATE, err, errlen,
                   "this node (shard %" PRIu32 " of %" PRIu32 ") does not hold every user of "
                   "shard %" PRIu32 " of the asker's map",
                   map->shard, map->shards, asker_shard);
}

/* ---- the receiving side ------------------------------------------------- */

/* One blocking call of METHOD to the peer with request REQ (unary.h);
 * the answer's bytes into *RESP (malloc'd) and *RLEN. 0, DD_ERR_NOTFOUND
 * (NOT_FOUND), DD_ERR_UNAVAILABLE (any other failure), DD_ERR_NOMEM. */
static int unary(const struct dd_snapshot_source *src, const char *method, const uint8_t *req,
                 size_t len, uint8_t **resp, size_t *rlen, char *err, size_t errlen)
{
    *resp = NULL;
    *rlen = 0;
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    if (!cq) return dd_fail(DD_ERR_NOMEM, err, errlen, "cannot create a completion queue");
    gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                         gpr_time_from_millis(src->timeout_ms, GPR_TIMESPAN));
    grpc_call *call =
        grpc_channel_create_call(src->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                 grpc_slice_from_static_string(method), NULL, deadline, NULL);
    struct dd_unary u;
    dd_unary_init(&u);
    grpc_slice sl = grpc_slice_from_copied_buffer((const char *)req, len);
    u.send = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    u.flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY;
    int rc = DD_OK;
    enum dd_unary_end end = call ? dd_unary_call(call, cq, &u, deadline, NULL) : DD_UNARY_UNSTARTED;
    grpc_slice all = grpc_empty_slice();
    if (end == DD_UNARY_UNSTARTED) {
        rc = dd_fail(DD_ERR_UNAVAILABLE, err, errlen, "cannot start a call to %s", src->peer);
    } else if (end != DD_UNARY_DONE) {
        rc = dd_fail(DD_ERR_UNAVAILABLE, err, errlen, "call to %s failed", src->peer);
    } else if (u.status != GRPC_STATUS_OK) {
        /* The peer's words (or grpc's, for a reply over the copy
         * channel's limits, peer.h): logged, so sanitized. */
        char d[160];
        dd_sanitize(d, sizeof d, (const char *)GRPC_SLICE_START_PTR(u.details),
                    GRPC_SLICE_LENGTH(u.details));
        rc = dd_fail(u.status == GRPC_STATUS_NOT_FOUND ? DD_ERR_NOTFOUND : DD_ERR_UNAVAILABLE, err,
                     errlen, "%s from %s: status %d: %s", method, src->peer, (int)u.status, d);
    } else if (u.recv && !dd_unary_reply(&u, &all)) {
        rc = dd_fail(DD_ERR_UNAVAILABLE, err, errlen, "unreadable answer from %s", src->peer);
    } else if (u.recv) {
        size_t n = GRPC_SLICE_LENGTH(all);
        *resp = malloc(n ? n : 1);
        if (!*resp) {
            rc = dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
        } else {
            memcpy(*resp, GRPC_SLICE_START_PTR(all), n);
            *rlen = n;
        }
        grpc_slice_unref(all);
    }
    grpc_byte_buffer_destroy(u.send);
    u.send = NULL;
    dd_unary_reset(&u);
    if (call) grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    grpc_completion_queue_destroy(cq);
    return rc;
}

static bool stopping(const struct dd_snapshot_source *src)
{
    return src->stop && src->stop(src->stop_ud);
}

/* SnapshotBegin until the manifest is ready (asking every 250 ms, for at
 * most an hour: hashing a large store takes a while), into *M, checked. */
static int get_manifest(const struct dd_snapshot_source *src, struct dd_snapshot_manifest *m,
                        char *err, size_t errlen)
{
    Dedup__V1__SnapshotBeginRequest req = DEDUP__V1__SNAPSHOT_BEGIN_REQUEST__INIT;
    req.map_hash = (char *)src->map_hash;
    req.split_hash = (char *)(src->split_hash ? src->split_hash : "");
    req.from = (char *)src->from;
    req.shard = src->shard;
    req.asker_shard = src->asker_shard;
    uint8_t buf[256];
    size_t len = dedup__v1__snapshot_begin_request__get_packed_size(&req);
    if (len > sizeof buf) return dd_fail(DD_ERR_INVALID, err, errlen, "request too large");
    dedup__v1__snapshot_begin_request__pack(&req, buf);
    for (int i = 0; i < 4 * 3600; i++) {
        if (stopping(src)) return dd_fail(DD_ERR_STATE, err, errlen, "stopped");
        uint8_t *resp;
        size_t rlen;
        int rc = unary(src, DD_API_PATH_SNAPSHOT_BEGIN, buf, len, &resp, &rlen, err, errlen);
        if (rc != DD_OK) return rc == DD_ERR_NOTFOUND ? DD_ERR_UNAVAILABLE : rc;
        Dedup__V1__SnapshotManifest *pm = dedup__v1__snapshot_manifest__unpack(NULL, rlen, resp);
        free(resp);
        if (!pm)
            return dd_fail(DD_ERR_UNAVAILABLE, err, errlen, "undecodable manifest from %s",
                           src->peer);
        if (!pm->ready) {
            dedup__v1__snapshot_manifest__free_unpacked(pm, NULL);
            dd_sleep_ms(250);
            continue;
        }
        rc = DD_OK;
        if (strlen(pm->id) == 0 || strlen(pm->id) >= sizeof m->id ||
            strspn(pm->id, "0123456789-") != strlen(pm->id) || pm->n_files > DD_SNAPSHOT_FILES_MAX)
            rc = dd_fail(DD_ERR_UNAVAILABLE, err, errlen, "bad manifest from %s", src->peer);
        m->files = rc == DD_OK ? calloc(pm->n_files ? pm->n_files : 1, sizeof *m->files) : NULL;
        if (rc == DD_OK && !m->files) rc = dd_fail(DD_ERR_NOMEM, err, errlen, "out of memory");
        for (size_t j = 0; rc == DD_OK && j < pm->n_files; j++) {
            const Dedup__V1__SnapshotFile *f = pm->files[j];
            if (!dd_snapshot_name_ok(f->name) || strcmp(f->name, "MANIFEST.copy") == 0) {
                rc = dd_fail(DD_ERR_UNAVAILABLE, err, errlen, "bad file name in the manifest");
                break;
            }
            snprintf(m->files[j].name, sizeof m->files[j].name, "%s", f->name);
            m->files[j].size = f->size;
            m->files[j].xxh3 = f->xxh3;
        }
        if (rc == DD_OK) {
            m->n = pm->n_files;
            m->ready = true;
            snprintf(m->id, sizeof m->id, "%s", pm->id);
        } else {
            dd_snapshot_manifest_free(m);
        }
        dedup__v1__snapshot_manifest__free_unpacked(pm, NULL);
        return rc;
    }
    return dd_fail(DD_ERR_UNAVAILABLE, err, errlen, "%s never finished its checkpoint", src->peer);
}

/* The copy's own record of which checkpoint it holds: "<id>\n". */
#define COPY_MANIFEST "MANIFEST.copy"

static bool same_copy(const char *inc, const char *id)
{
    char path[4096 + sizeof COPY_MANIFEST + 1], line[64] = "";
    snprintf(path, sizeof path, "%s/" COPY_MANIFEST, inc);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool same = fgets(line, sizeof line, f) && strcspn(line, "\n") == strlen(id) &&
                strncmp(line, id, strlen(id)) == 0;
    fclose(f);
    return same;
}

static int write_copy_manifest(const char *inc, const char *id, char *err, size_t errlen)
{
    char path[4096 + sizeof COPY_MANIFEST + 1];
    snprintf(path, sizeof path, "%s/" COPY_MANIFEST, inc);
    FILE *f = fopen(path, "w");
    if (!f || fprintf(f, "%s\n", id) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        if (f) fclose(f);
        return dd_fail(DD_ERR_IO, err, errlen, "%s: %s", path, strerror(errno));
    }
    fclose(f);
    return DD_OK;
}

/* Copy file F of checkpoint ID into DIR/F, from where an earlier copy
 * stopped; check its checksum. Adds the bytes fetched to *FETCHED. */
static int fetch_file(const struct dd_snapshot_source *src, const char *id, const char *dir,
                      const struct dd_snapshot_file *f, uint64_t *fetched, char *err, size_t errlen)
{
    char path[4096 + DD_SNAPSHOT_NAME_MAX + 2];
    snprintf(path, sizeof path, "%s/%s", dir, f->name);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return dd_fail(DD_ERR_IO, err, errlen, "%s: %s", path, strerror(errno));
    struct stat st;
    uint64_t off = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
    if (off > f->size) {
        if (ftruncate(fd, 0) != 0)
            off = f->size + 1;
        else
            off = 0;
    }
    Dedup__V1__SnapshotReadRequest req = DEDUP__V1__SNAPSHOT_READ_REQUEST__INIT;
    req.id = (char *)id;
    req.name = (char *)f->name;
    req.max_bytes = DD_SNAPSHOT_CHUNK_MAX;
    uint8_t rb[512];
    int rc = off > f->size ? dd_fail(DD_ERR_IO, err, errlen, "%s: cannot truncate", path) : DD_OK;
    while (rc == DD_OK && off < f->size) {
        if (stopping(src)) {
            rc = dd_fail(DD_ERR_STATE, err, errlen, "stopped");
            break;
        }
        req.offset = off;
        size_t len = dedup__v1__snapshot_read_request__get_packed_size(&req);
        if (len > sizeof rb) {
            rc = dd_fail(DD_ERR_INVALID, err, errlen, "request too large");
            break;
        }
        dedup__v1__snapshot_read_request__pack(&req, rb);
        uint8_t *resp;
        size_t rlen;
        rc = unary(src, DD_API_PATH_SNAPSHOT_READ, rb, len, &resp, &rlen, err, errlen);
        if (rc != DD_OK) break;
        Dedup__V1__SnapshotChunk *c = dedup__v1__snapshot_chunk__unpack(NULL, rlen, resp);
        free(resp);
        if (!c) {
            rc = dd_fail(DD_ERR_UNAVAILABLE, err, errlen, "undecodable chunk from %s", src->peer);
            break;
        }
        if (c->data.len == 0) {
            uint32_t wait = c->retry_after_ms;
            dedup__v1__snapshot_chunk__free_unpacked(c, NULL);
            if (wait == 0) {
                rc = dd_fail(DD_ERR_UNAVAILABLE, err, errlen,
                             "%s ended %s at %" PRIu64 " of %" PRIu64 " bytes", src->peer, f->name,
                             off, f->size);
                break;
            }
            dd_sleep_ms(wait > 5000 ? 5000 : wait);
            continue;
        }
        if (c->data.len > f->size - off) {
            dedup__v1__snapshot_chunk__free_unpacked(c, NULL);
            rc = dd_fail(DD_ERR_CORRUPT, err, errlen, "%s sent more of %s than its size", src->peer,
                         f->name);
            break;
        }
        size_t done = 0;
        while (done < c->data.len) {
            ssize_t w = pwrite(fd, c->data.data + done, c->data.len - done, (off_t)(off + done));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) break;
            done += (size_t)w;
        }
        size_t clen = c->data.len;
        dedup__v1__snapshot_chunk__free_unpacked(c, NULL);
        if (done < clen) {
            rc = dd_fail(DD_ERR_IO, err, errlen, "%s: %s", path, strerror(errno));
            break;
        }
        off += clen;
        *fetched += clen;
    }
    if (rc == DD_OK && fsync(fd) != 0)
        rc = dd_fail(DD_ERR_IO, err, errlen, "%s: %s", path, strerror(errno));
    close(fd);
    if (rc != DD_OK) return rc;
    uint64_t h = 0, size = 0;
    rc = hash_file(path, &h, &size, err, errlen);
    if (rc == DD_OK && (h != f->xxh3 || size != f->size)) {
        unlink(path);
        rc = dd_fail(DD_ERR_CORRUPT, err, errlen,
                     "%s: checksum or size differs from %s's; "
                     "removed, to be fetched again",
                     f->name, src->peer);
    }
    return rc;
}

int dd_snapshot_fetch(const struct dd_snapshot_source *src, const char *history_path, char *err,
                      size_t errlen)
{
    char inc[4096];
    if ((size_t)snprintf(inc, sizeof inc, "%s.incoming", history_path) >= sizeof inc)
        return dd_fail(DD_ERR_INVALID, err, errlen, "history.path too long");
    struct dd_snapshot_manifest m = {0};
    int rc = get_manifest(src, &m, err, errlen);
    if (rc != DD_OK) return rc;
    /* A store is never empty: a manifest without files (or without
     * RocksDB's CURRENT) would install an empty directory that opens as a
     * new store and serves as if complete. */
    bool current = false;
    for (size_t i = 0; i < m.n && !current; i++) current = strcmp(m.files[i].name, "CURRENT") == 0;
    if (!current) {
        rc = dd_fail(DD_ERR_UNAVAILABLE, err, errlen,
                     "the manifest from %s lists %s: not a store; refused", src->peer,
                     m.n ? "no CURRENT file" : "no files");
        dd_snapshot_manifest_free(&m);
        return rc;
    }
    uint64_t total = 0, fetched = 0;
    for (size_t i = 0; i < m.n; i++) total += m.files[i].size;
    bool resume = same_copy(inc, m.id);
    if (!resume) {
        rm_tree(inc);
        /* history.path's parents may not exist yet: the store opens after. */
        if ((rc = dd_sys_mkdir_parents(inc, err, errlen)) != DD_OK) goto out;
        if (mkdir(inc, 0700) != 0) {
            rc = dd_fail(DD_ERR_IO, err, errlen, "%s: %s", inc, strerror(errno));
            goto out;
        }
        if ((rc = write_copy_manifest(inc, m.id, err, errlen)) != DD_OK) goto out;
    }
    dd_info(MOD, "msg=\"%s a snapshot\" peer=%s id=%s files=%zu bytes=%" PRIu64,
            resume ? "resuming" : "fetching", src->peer, m.id, m.n, total);
    int64_t t0 = dd_mono_ns();
    for (size_t i = 0; i < m.n && rc == DD_OK; i++)
        rc = fetch_file(src, m.id, inc, &m.files[i], &fetched, err, errlen);
    if (rc != DD_OK) goto out;
    char cm[4096 + sizeof COPY_MANIFEST + 1];
    snprintf(cm, sizeof cm, "%s/" COPY_MANIFEST, inc);
    unlink(cm);
    /* An empty directory (a mount point's subdirectory made by an
     * installer) gives way; one that holds anything is never replaced. */
    rmdir(history_path);
    if (rename(inc, history_path) != 0) {
        rc = dd_fail(DD_ERR_IO, err, errlen, "cannot move %s to %s: %s", inc, history_path,
                     strerror(errno));
        goto out;
    }
    double s = (double)(dd_mono_ns() - t0) / 1e9;
    dd_info(MOD,
            "msg=\"snapshot installed\" peer=%s id=%s bytes=%" PRIu64 " fetched=%" PRIu64
            " seconds=%.1f mb_per_s=%.1f",
            src->peer, m.id, total, fetched, s, s > 0 ? (double)fetched / 1e6 / s : 0.0);
out:
    dd_snapshot_manifest_free(&m);
    return rc;
}

/* ---- bootstrap ---------------------------------------------------------- */

bool dd_snapshot_bootstrap_wanted(const char *bootstrap, const char *history_path)
{
    if (strcmp(bootstrap, "peer") != 0) return false;
    char p[4096 + sizeof "/CURRENT"];
    struct stat st;
    snprintf(p, sizeof p, "%s/CURRENT", history_path);
    return stat(p, &st) != 0;
}

bool dd_snapshot_progress_done(void *ud)
{
    (void)ud;
    return false;
}

bool dd_snapshot_progress_why(void *ud, char *why, size_t whylen)
{
    struct dd_snapshot_progress *b = ud;
    pthread_mutex_lock(&b->lock);
    snprintf(why, whylen, "%s", b->why);
    pthread_mutex_unlock(&b->lock);
    return true;
}

int dd_snapshot_bootstrap(const struct dd_snapshot_bootstrap *b, char *err, size_t errlen)
{
    const struct dd_cluster_map *map = b->map;
    char hash[17], split[17], from[32];
    dd_set_err(err, errlen, "no other replica in this shard");
    dd_cluster_map_hash_hex(map, hash);
    dd_cluster_map_split_hex(map, split);
    /* Other replicas of this shard first; then, for a new shard of a
     * split, its parent shard's (whose old-map nodes hold its users). */
    uint32_t shards_to_try[2] = {map->shard, dd_cluster_source_shard(map)};
    int nshards = shards_to_try[1] != map->shard ? 2 : 1;
    struct {
        uint32_t shard, replica;
    } peers[2 * DD_CLUSTER_MAX_REPLICAS];
    size_t npeers = 0;
    for (int si = 0; si < nshards; si++)
        for (uint32_t r = 0; r < map->nreplicas[shards_to_try[si]]; r++)
            if (shards_to_try[si] != map->shard || r != map->replica) {
                peers[npeers].shard = shards_to_try[si];
                peers[npeers++].replica = r;
            }
    snprintf(from, sizeof from, "%" PRIu32 ".%" PRIu32, map->shard, map->replica);
    grpc_init();
    int rc = DD_ERR_UNAVAILABLE;
    for (int round = 0; round < DD_SNAPSHOT_BOOTSTRAP_ROUNDS && rc != DD_OK && rc != DD_ERR_STATE;
         round++) {
        if (round) dd_sleep_ms(1000);
        for (size_t k = 0; k < npeers && rc != DD_OK && rc != DD_ERR_STATE; k++) {
            uint32_t src_shard = peers[k].shard;
            const char *addr = map->addr[src_shard][peers[k].replica];
            grpc_channel *ch = b->channel(b->channel_ud, addr, err, errlen);
            if (!ch) continue;
            struct dd_snapshot_source src = {.ch = ch,
                                             .peer = addr,
                                             .map_hash = hash,
                                             .split_hash = split,
                                             .from = from,
                                             .shard = src_shard,
                                             .asker_shard = map->shard,
                                             .timeout_ms = b->timeout_ms,
                                             .stop = b->stop,
                                             .stop_ud = b->stop_ud};
            /* A file whose checksum differed was removed: fetched again at once. */
            for (int tries = 0; tries < 3; tries++) {
                rc = dd_snapshot_fetch(&src, b->history_path, err, errlen);
                if (rc != DD_ERR_CORRUPT) break;
                dd_warn(MOD,
                        "msg=\"snapshot file damaged in transit; fetching it again\" "
                        "peer=%s error=\"%s\"",
                        addr, err);
            }
            grpc_channel_destroy(ch);
            static struct dd_log_limit lim;
            if (rc != DD_OK && rc != DD_ERR_STATE) {
                if (b->progress) {
                    pthread_mutex_lock(&b->progress->lock);
                    snprintf(b->progress->why, sizeof b->progress->why,
                             "store: copying from a peer: %s: %s", addr, err);
                    pthread_mutex_unlock(&b->progress->lock);
                }
                dd_log_limited(&lim, 10000, DD_LOG_WARN, MOD,
                               "msg=\"cannot copy the store from a peer\" peer=%s round=%d "
                               "error=\"%s\"",
                               addr, round + 1, err);
            }
        }
    }
    grpc_shutdown();
    if (rc == DD_ERR_STATE) {
        dd_info(MOD, "msg=\"asked to stop while copying a store; the copy resumes at the next "
                     "start\"");
        return rc;
    }
    if (rc != DD_OK)
        dd_error(MOD,
                 "msg=\"cluster.bootstrap = peer: no replica of shard %" PRIu32
                 "%s could give its store; stopping\" error=\"%s\"",
                 map->shard, nshards > 1 ? " or of its parent shard" : "", err);
    return rc;
}
