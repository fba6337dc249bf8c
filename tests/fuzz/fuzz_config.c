/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz_config.c - config files (config.h): the input is an INI file, loaded
 * over the defaults. A refusal must leave a message. A file that loads is
 * written out (dd_config_write), that text loaded into fresh defaults and
 * written again: the two writes must be identical (a write reads back to
 * the same values).
 */
#include "fuzz.h"

#include "config.h"
#include "dd.h"

#include <unistd.h>

static char path[64];

static void cleanup(void)
{
    unlink(path);
}

/* Write LEN bytes of DATA to the scratch file, replacing it. */
static void put_file(const void *data, size_t len)
{
    FILE *f = fopen(path, "w");
    FUZZ_CHECK(f);
    FUZZ_CHECK(fwrite(data, 1, len, f) == len);
    FUZZ_CHECK(fclose(f) == 0);
}

/* Load PATH over the defaults into C: the dd_config_load_file code. */
static int load(struct dd_config *c, char *err, size_t errlen)
{
    FUZZ_CHECK(dd_config_init(c) == DD_OK);
    err[0] = '\0';
    return dd_config_load_file(c, path, err, errlen);
}

/* C written into a malloc'd string (*LEN bytes). */
static char *write_conf(const struct dd_config *c, size_t *len)
{
    char *buf = NULL;
    FILE *m = open_memstream(&buf, len);
    FUZZ_CHECK(m);
    FUZZ_CHECK(dd_config_write(c, m) == DD_OK);
    FUZZ_CHECK(fclose(m) == 0);
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!path[0]) {
        snprintf(path, sizeof path, "/tmp/dd-fuzz-config-XXXXXX");
        int fd = mkstemp(path);
        FUZZ_CHECK(fd >= 0);
        close(fd);
        atexit(cleanup);
    }
    char err[512];
    struct dd_config c;
    put_file(data, size);
    int rc = load(&c, err, sizeof err);
    if (rc != DD_OK) {
        FUZZ_CHECK(err[0] != '\0');
        dd_config_free(&c);
        return 0;
    }
    (void)dd_config_validate(&c, err, sizeof err);
    size_t len1, len2;
    char *w1 = write_conf(&c, &len1);
    dd_config_free(&c);

    put_file(w1, len1);
    rc = load(&c, err, sizeof err);
    if (rc != DD_OK) fprintf(stderr, "written config does not load: %s\n", err);
    FUZZ_CHECK(rc == DD_OK);
    char *w2 = write_conf(&c, &len2);
    dd_config_free(&c);
    if (len1 != len2 || memcmp(w1, w2, len1) != 0)
        fprintf(stderr, "first write:\n%.*s\nsecond write:\n%.*s\n", (int)len1, w1, (int)len2,
                w2);
    FUZZ_CHECK(len1 == len2 && memcmp(w1, w2, len1) == 0);
    free(w1);
    free(w2);
    return 0;
}
