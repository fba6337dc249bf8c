/* SPDX-License-Identifier: Apache-2.0
 *
 * ddcheck.c - verify a history store offline: which of a list of plays
 * does the store say were seen? For operators ("did these plays make it?")
 * and for the ingest tests (zero false negatives, the fp of unplayed items).
 *
 *   ddcheck [-c FILE] [-o section.key=value]... [-l LOOKBACK_DAYS] [-v|-V] [LIST]
 *   ddcheck -D [-c FILE] [-o section.key=value]...
 *   ddcheck --help | --version
 *
 * LIST (or stdin) holds lines "user<TAB>item[<TAB>scene]"; blank lines
 * are skipped, and any other line that is not that (no tab, as when spaces
 * stand for tabs; an empty user or item; a fourth field) stops ddcheck
 * naming LIST and the line number. The store is opened with the same
 * configuration as dedupd (history.path and the segment settings must
 * match), so dedupd must not be running on it (RocksDB's lock); a
 * history.path that holds no store is refused, never created (a typo must
 * not report every play unseen). Lines are grouped by (scene, user) and each group is
 * probed with one dd_history_probe. Prints
 *   total=N seen=S unseen=U
 * after, with -v, the first 20 unseen lines ("unseen<TAB>user<TAB>item<TAB>
 * scene"), with -V all of them. Exit 0, or 2 on any error (a
 * store that cannot be read, or a damaged value, is an error, never
 * "unseen").
 *
 * -D: list the damaged users instead (history.h, "Damage"): every live
 * segment value of the store is checked to the last bit, and each that
 * fails prints "damaged<TAB>scene<TAB>user<TAB>segment" (bytes outside
 * printable ASCII, a backslash and a tab as \xNN), then
 *   values=N damaged=D
 * Exit 0 when none is damaged, 1 when some are, 2 on any error. Repair a
 * listed user with ForgetUser (its plays are gone; re-record what is still
 * known) or replace the store with a replica's copy (README, "Damaged
 * history").
 */
#include "bloom.h"
#include "buildinfo.h"
#include "config.h"
#include "dd.h"
#include "history.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct play {
    char *user, *scene;
    size_t user_len, scene_len;
    uint64_t item;
    const char *line_item; /* for -v */
};

static int cmp_play(const void *a, const void *b)
{
    const struct play *x = a, *y = b;
    int c = strcmp(x->scene, y->scene);
    return c ? c : strcmp(x->user, y->user);
}

#define USAGE_LINES \
    "usage: ddcheck [-c FILE] [-o section.key=value]... [-l DAYS] [-v|-V] [LIST]\n" \
    "       ddcheck -D [-c FILE] [-o section.key=value]...\n"

/* --help: every option (man/gen_man.py and the completion read it). */
static void help(FILE *f)
{
    fprintf(f, USAGE_LINES
            "Probe a stopped dedupd store offline: which plays of LIST (or stdin) does it\n"
            "say were seen? LIST lines are user<TAB>item[<TAB>scene]. The store must exist\n"
            "(ddcheck never creates one) and dedupd must not be running on it.\n"
            "\n"
            "  -c, --config FILE          dedupd's configuration file (history.path and the\n"
            "                             segment settings must match the store's)\n"
            "  -o, --set K=V              override one key, e.g. -o history.path=/data\n"
            "  -l, --lookback-days DAYS   only plays of the last DAYS days (default: all live)\n"
            "  -v, --verbose              print the first 20 unseen lines\n"
            "  -V, --all-unseen           print every unseen line\n"
            "  -D, --damaged              list the damaged users instead of probing\n"
            "  -h, --help                 this help\n"
            "      --version              version, git revision and library versions\n"
            "\n"
            "Output: total=N seen=S unseen=U (with -D: values=N damaged=D).\n"
            "Exit status: 0 done; 1 with -D when some value is damaged; 2 error (no store\n"
            "at history.path, a malformed LIST line, a store that cannot be read) or\n"
            "usage error.\n");
}

static int usage_error(void)
{
    fputs(USAGE_LINES "Try 'ddcheck --help' for more information.\n", stderr);
    return 2;
}

/* An id as one field of a tab-separated line. */
static void put_id(const char *p, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x20 || c >= 0x7f || c == '\\')
            printf("\\x%02x", c);
        else
            putchar(c);
    }
}

static int print_damaged(void *ud, const char *scene, size_t scene_len, const char *user,
                         size_t user_len, uint32_t segment)
{
    uint64_t *n = ud;
    fputs("damaged\t", stdout);
    put_id(scene, scene_len);
    putchar('\t');
    put_id(user, user_len);
    printf("\t%" PRIu32 "\n", segment);
    (*n)++;
    return 0;
}

int main(int argc, char **argv)
{
    struct dd_config cfg;
    char err[512];
    int opt, verbose = 0, rc = 2, damaged_mode = 0;
    unsigned long lookback = 0;
    const char *conf_path = NULL;
    dd_history *h = NULL;
    struct play *plays = NULL;
    size_t n = 0, cap = 0;
    uint64_t *hashes = NULL, *tmp = NULL;
    uint32_t *idx = NULL, *tmpidx = NULL;
    uint8_t *hit = NULL;

    if (dd_config_init(&cfg) != DD_OK) {
        fprintf(stderr, "ddcheck: out of memory\n");
        return 2;
    }
    static const struct option longopts[] = {{"config", required_argument, NULL, 'c'},
                                             {"set", required_argument, NULL, 'o'},
                                             {"lookback-days", required_argument, NULL, 'l'},
                                             {"verbose", no_argument, NULL, 'v'},
                                             {"all-unseen", no_argument, NULL, 'V'},
                                             {"damaged", no_argument, NULL, 'D'},
                                             {"help", no_argument, NULL, 'h'},
                                             {"version", no_argument, NULL, 'R'},
                                             {NULL, 0, NULL, 0}};
    while ((opt = getopt_long(argc, argv, "c:o:l:vVDh", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c': conf_path = optarg; break;
        case 'D': damaged_mode = 1; break;
        case 'o':
        case 'l': break;
        case 'v': verbose = 1; break;
        case 'V': verbose = 2; break;
        case 'h':
            help(stdout);
            dd_config_free(&cfg);
            return 0;
        case 'R':
            dd_buildinfo_print(stdout, "ddcheck");
            dd_config_free(&cfg);
            return 0;
        default: dd_config_free(&cfg); return usage_error();
        }
    }
    if (conf_path && dd_config_load_file(&cfg, conf_path, err, sizeof err) != DD_OK) {
        fprintf(stderr, "ddcheck: %s\n", err);
        goto out;
    }
    optind = 1;
    while ((opt = getopt_long(argc, argv, "c:o:l:vVDh", longopts, NULL)) != -1) {
        if (opt == 'l') {
            char *end;
            errno = 0;
            lookback = strtoul(optarg, &end, 10);
            if (errno || end == optarg || *end || optarg[0] == '-' || lookback > UINT32_MAX) {
                fprintf(stderr, "ddcheck: -l %s: want a number of days\n", optarg);
                dd_config_free(&cfg);
                return usage_error();
            }
            continue;
        }
        if (opt != 'o') continue;
        char *eq = strchr(optarg, '=');
        if (!eq) {
            fprintf(stderr, "ddcheck: -o %s: expected section.key=value\n", optarg);
            goto out;
        }
        *eq = '\0';
        int r = dd_config_set(&cfg, optarg, eq + 1, err, sizeof err);
        *eq = '=';
        if (r != DD_OK) {
            fprintf(stderr, "ddcheck: -o %s: %s\n", optarg, err);
            goto out;
        }
    }
    if (argc - optind > (damaged_mode ? 0 : 1)) {
        fprintf(stderr, "ddcheck: unexpected argument '%s'\n", argv[argc - 1]);
        rc = usage_error();
        goto out;
    }
    /* Probing a store that is not there would create an empty one and
     * report every play unseen: refused (history.h, must_exist). */
    cfg.history.must_exist = true;
    if (damaged_mode) {
        if (dd_history_open(&h, &cfg.history, &cfg.rocksdb, NULL, err, sizeof err) != DD_OK) {
            fprintf(stderr, "ddcheck: cannot open history at %s: %s\n", cfg.history.path, err);
            goto out;
        }
        uint64_t values = 0, bad = 0;
        if (dd_history_scan_damaged(h, print_damaged, &bad, &values, err, sizeof err) != DD_OK) {
            fprintf(stderr, "ddcheck: cannot scan history at %s: %s\n", cfg.history.path, err);
            goto out;
        }
        printf("values=%" PRIu64 " damaged=%" PRIu64 "\n", values, bad);
        rc = bad ? 1 : 0;
        goto out;
    }
    FILE *in = stdin;
    if (optind < argc && !(in = fopen(argv[optind], "r"))) {
        fprintf(stderr, "ddcheck: %s: %s\n", argv[optind], strerror(errno));
        goto out;
    }
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    const char *list_name = optind < argc ? argv[optind] : "stdin";
    uint64_t lineno = 0;
    while ((len = getline(&line, &lcap, in)) > 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0) continue; /* a blank line, e.g. the last of a file */
        char *tab = strchr(line, '\t');
        char *item = tab ? tab + 1 : NULL, *scene = item ? strchr(item, '\t') : NULL;
        if (scene) *scene++ = '\0';
        if (tab) *tab = '\0';
        const char *bad = !tab                           ? "no tab (want user<TAB>item[<TAB>scene])"
                          : tab == line                  ? "empty user"
                          : !*item                       ? "empty item"
                          : scene && strchr(scene, '\t') ? "more than three fields"
                                                         : NULL;
        if (bad) {
            fprintf(stderr, "ddcheck: %s:%" PRIu64 ": malformed line: %s\n", list_name, lineno,
                    bad);
            free(line);
            if (in != stdin) fclose(in);
            goto out;
        }
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 4096;
            struct play *p = realloc(plays, ncap * sizeof *p);
            if (!p) goto nomem_line;
            plays = p;
            cap = ncap;
        }
        struct play *p = &plays[n++]; /* counted now: freed at out whatever fails */
        p->scene = NULL;
        p->line_item = NULL;
        p->user = strdup(line);
        p->scene = strdup(scene ? scene : "");
        p->line_item = strdup(item);
        if (!p->user || !p->scene || !p->line_item) goto nomem_line;
        p->user_len = strlen(p->user);
        p->scene_len = strlen(p->scene);
        p->item = dd_hash(item, strlen(item));
        continue;
    nomem_line:
        fprintf(stderr, "ddcheck: out of memory\n");
        free(line);
        if (in != stdin) fclose(in);
        goto out;
    }
    free(line);
    if (in != stdin) fclose(in);
    qsort(plays, n, sizeof *plays, cmp_play);

    if (dd_history_open(&h, &cfg.history, &cfg.rocksdb, NULL, err, sizeof err) != DD_OK) {
        fprintf(stderr, "ddcheck: cannot open history at %s: %s\n", cfg.history.path, err);
        goto out;
    }
    /* Room for the largest group. */
    size_t maxg = 0;
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && cmp_play(&plays[i], &plays[j]) == 0; j++) {
        }
        if (j - i > maxg) maxg = j - i;
    }
    hashes = malloc((maxg + 1) * sizeof *hashes);
    tmp = malloc((maxg + 1) * sizeof *tmp);
    idx = malloc((maxg + 1) * sizeof *idx);
    tmpidx = malloc((maxg + 1) * sizeof *tmpidx);
    hit = malloc(maxg + 1);
    if (!hashes || !tmp || !idx || !tmpidx || !hit) {
        fprintf(stderr, "ddcheck: out of memory\n");
        goto out;
    }
    size_t seen = 0, shown = 0;
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && cmp_play(&plays[i], &plays[j]) == 0; j++) {
        }
        size_t g = j - i;
        for (size_t k = 0; k < g; k++) {
            hashes[k] = plays[i + k].item;
            idx[k] = (uint32_t)k;
        }
        dd_bloom_sort_hashes(hashes, idx, g, tmp, tmpidx);
        memset(hit, 0, g);
        if (dd_history_probe(h, plays[i].scene, plays[i].scene_len, plays[i].user,
                             plays[i].user_len, (uint32_t)lookback, hashes, g, hit, err,
                             sizeof err) != DD_OK) {
            fprintf(stderr, "ddcheck: cannot read user %s: %s\n", plays[i].user, err);
            goto out;
        }
        for (size_t k = 0; k < g; k++) {
            if (hit[k]) {
                seen++;
            } else if (verbose == 2 || (verbose && shown < 20)) {
                const struct play *p = &plays[i + idx[k]];
                printf("unseen\t%s\t%s\t%s\n", p->user, p->line_item, p->scene);
                shown++;
            }
        }
    }
    printf("total=%zu seen=%zu unseen=%zu\n", n, seen, n - seen);
    rc = 0;
out:
    dd_history_close(h);
    for (size_t i = 0; i < n; i++) {
        free(plays[i].user);
        free(plays[i].scene);
        free((char *)plays[i].line_item);
    }
    free(plays);
    free(hashes);
    free(tmp);
    free(idx);
    free(tmpidx);
    free(hit);
    dd_config_free(&cfg);
    return rc;
}
