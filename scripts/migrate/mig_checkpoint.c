/* SPDX-License-Identifier: Apache-2.0
 *
 * mig_checkpoint.c - dedupd-migrate's checkpoint file: a few key=value
 * lines (readable with cat, editable in an emergency), replaced atomically
 * so a crash at any moment leaves either the old or the new file whole.
 */
#include "migrate.h"

#include "dd.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAGIC "# dedupd-migrate checkpoint"
#define VERSION 1

/* The counters, by name, for both directions. */
struct field {
    const char *name;
    size_t off;
};
#define STAT(f) {#f, offsetof(struct mig_stats, f)}
static const struct field stat_fields[] = {
    STAT(keys), STAT(users), STAT(entries), STAT(expired), STAT(deliveries), STAT(failed_users),
};

static uint64_t *stat_ptr(struct mig_stats *s, size_t off)
{
    return (uint64_t *)((char *)s + off);
}

static int write_all(int fd, const char *buf, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

static int fsync_dir_of(const char *path)
{
    char *copy = strdup(path);
    if (!copy) return -1;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(copy);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int mig_checkpoint_write(const char *path, const struct mig_checkpoint *cp, char *err,
                         size_t errlen)
{
    char buf[8192];
    size_t n = 0;
    int w = snprintf(buf, sizeof buf,
                     MAGIC "\nversion=%d\nplays_pattern=%s\ndeliveries_pattern=%s\nscene=%s\nphase=%d\n"
                           "cursor=%s\ndone=%d\nelapsed_ms=%" PRId64 "\n",
                     VERSION, cp->plays, cp->deliveries, cp->scene, cp->phase, cp->cursor,
                     cp->done ? 1 : 0, cp->elapsed_ms);
    if (w < 0 || (size_t)w >= sizeof buf) goto too_long;
    n = (size_t)w;
    struct mig_stats st = cp->stats;
    for (size_t i = 0; i < DD_ARRAY_LEN(stat_fields); i++) {
        w = snprintf(buf + n, sizeof buf - n, "%s=%" PRIu64 "\n", stat_fields[i].name,
                     *stat_ptr(&st, stat_fields[i].off));
        if (w < 0 || (size_t)w >= sizeof buf - n) goto too_long;
        n += (size_t)w;
    }
    for (int i = 0; i < MIG_BAD_COUNT; i++) {
        w = snprintf(buf + n, sizeof buf - n, "bad.%s=%" PRIu64 "\n", mig_bad_name(i), st.bad[i]);
        if (w < 0 || (size_t)w >= sizeof buf - n) goto too_long;
        n += (size_t)w;
    }

    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
        dd_set_err(err, errlen, "checkpoint path too long");
        return DD_ERR_IO;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        dd_set_err(err, errlen, "%s: %s", tmp, strerror(errno));
        return DD_ERR_IO;
    }
    if (write_all(fd, buf, n) != 0 || fsync(fd) != 0) {
        dd_set_err(err, errlen, "%s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        return DD_ERR_IO;
    }
    if (close(fd) != 0) {
        dd_set_err(err, errlen, "%s: %s", tmp, strerror(errno));
        unlink(tmp);
        return DD_ERR_IO;
    }
    if (rename(tmp, path) != 0) {
        dd_set_err(err, errlen, "rename %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        return DD_ERR_IO;
    }
    if (fsync_dir_of(path) != 0) {
        dd_set_err(err, errlen, "fsync of the directory of %s: %s", path, strerror(errno));
        return DD_ERR_IO;
    }
    return DD_OK;

too_long:
    dd_set_err(err, errlen, "checkpoint does not fit its buffer (patterns too long)");
    return DD_ERR_IO;
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (*s == '-' || *s == '\0') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

static int copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap) return -1;
    memcpy(dst, src, n + 1);
    return 0;
}

int mig_checkpoint_read(const char *path, struct mig_checkpoint *cp, char *err, size_t errlen)
{
    memset(cp, 0, sizeof *cp);
    FILE *f = fopen(path, "re");
    if (!f) {
        dd_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return errno == ENOENT ? DD_ERR_NOTFOUND : DD_ERR_IO;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, rc = DD_OK;
    bool have_version = false, have_cursor = false;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (len > 0 && line[len - 1] == '\n') line[--len] = '\0';
        if (lineno == 1) {
            if (strcmp(line, MAGIC) != 0) goto corrupt;
            continue;
        }
        char *eq = strchr(line, '=');
        if (!eq) goto corrupt;
        *eq = '\0';
        const char *k = line, *v = eq + 1;
        uint64_t u;
        if (strcmp(k, "version") == 0) {
            if (parse_u64(v, &u) != 0 || u != VERSION) goto corrupt;
            have_version = true;
        } else if (strcmp(k, "plays_pattern") == 0) {
            if (copy_str(cp->plays, sizeof cp->plays, v) != 0) goto corrupt;
        } else if (strcmp(k, "deliveries_pattern") == 0) {
            if (copy_str(cp->deliveries, sizeof cp->deliveries, v) != 0) goto corrupt;
        } else if (strcmp(k, "scene") == 0) {
            if (copy_str(cp->scene, sizeof cp->scene, v) != 0) goto corrupt;
        } else if (strcmp(k, "phase") == 0) {
            if (parse_u64(v, &u) != 0 || u > 1) goto corrupt;
            cp->phase = (int)u;
        } else if (strcmp(k, "cursor") == 0) {
            if (parse_u64(v, &u) != 0 || copy_str(cp->cursor, sizeof cp->cursor, v) != 0)
                goto corrupt;
            have_cursor = true;
        } else if (strcmp(k, "done") == 0) {
            if (parse_u64(v, &u) != 0 || u > 1) goto corrupt;
            cp->done = u == 1;
        } else if (strcmp(k, "elapsed_ms") == 0) {
            if (parse_u64(v, &u) != 0 || u > INT64_MAX) goto corrupt;
            cp->elapsed_ms = (int64_t)u;
        } else {
            bool known = false;
            for (size_t i = 0; i < DD_ARRAY_LEN(stat_fields) && !known; i++) {
                if (strcmp(k, stat_fields[i].name) != 0) continue;
                if (parse_u64(v, stat_ptr(&cp->stats, stat_fields[i].off)) != 0) goto corrupt;
                known = true;
            }
            for (int i = 0; i < MIG_BAD_COUNT && !known; i++) {
                if (strncmp(k, "bad.", 4) != 0 || strcmp(k + 4, mig_bad_name(i)) != 0) continue;
                if (parse_u64(v, &cp->stats.bad[i]) != 0) goto corrupt;
                known = true;
            }
            if (!known) goto corrupt;
        }
    }
    if (ferror(f)) {
        dd_set_err(err, errlen, "%s: %s", path, strerror(errno));
        rc = DD_ERR_IO;
    } else if (!have_version || !have_cursor) {
        dd_set_err(err, errlen, "%s: not a dedupd-migrate checkpoint (no version or cursor)", path);
        rc = DD_ERR_CORRUPT;
    }
    free(line);
    fclose(f);
    return rc;

corrupt:
    dd_set_err(err, errlen, "%s:%d: not a dedupd-migrate checkpoint line", path, lineno);
    free(line);
    fclose(f);
    return DD_ERR_CORRUPT;
}
