/* SPDX-License-Identifier: Apache-2.0
 *
 * testlib.h's tl_free_port when tests run two at a time: its ports lie
 * outside the kernel's ephemeral range (so no bind(0) and no connection's
 * source port takes one before the test binds it), are distinct and free,
 * and a port one process holds is never handed to another while the first
 * lives (a child process takes ports while the parent holds 100).
 */
#include "testlib.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>

enum { OURS = 100, THEIRS = 100 };

static bool bindable(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

int main(void)
{
    int eph_lo = 0, eph_hi = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    REQUIRE(f != NULL);
    REQUIRE(fscanf(f, "%d %d", &eph_lo, &eph_hi) == 2);
    fclose(f);

    int ours[OURS];
    for (int i = 0; i < OURS; i++) {
        ours[i] = tl_free_port();
        CHECK_MSG(ours[i] < eph_lo || ours[i] > eph_hi,
                  "port %d inside the ephemeral range %d-%d", ours[i], eph_lo, eph_hi);
        CHECK_MSG(bindable(ours[i]), "port %d is bound", ours[i]);
        for (int j = 0; j < i; j++)
            CHECK_MSG(ours[j] != ours[i], "port %d handed out twice", ours[i]);
    }

    /* A child takes THEIRS ports while we hold ours; it sends them up a
     * pipe and waits for us to close the other one before it exits. */
    int up[2], down[2];
    REQUIRE(pipe(up) == 0 && pipe(down) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        for (int i = 0; i < THEIRS; i++) {
            int p = tl_free_port();
            if (write(up[1], &p, sizeof p) != (ssize_t)sizeof p)
                _exit(2);
        }
        close(up[1]);
        char c;
        (void)!read(down[0], &c, 1);
        _exit(0);
    }
    close(up[1]);
    close(down[0]);
    int theirs[THEIRS];
    for (int i = 0; i < THEIRS; i++) {
        REQUIRE(read(up[0], &theirs[i], sizeof theirs[i]) == (ssize_t)sizeof theirs[i]);
        for (int j = 0; j < OURS; j++)
            CHECK_MSG(theirs[i] != ours[j], "port %d given to the child while we hold it",
                      theirs[i]);
    }
    /* And ours cannot be taken through the lock files while we live. */
    const char *dir = getenv("DD_TEST_PORT_DIR");
    for (int j = 0; j < OURS; j++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%d", dir && dir[0] ? dir : "/tmp/dedupd-test-ports",
                 ours[j]);
        int fd = open(path, O_RDWR);
        CHECK_MSG(fd >= 0, "no lock file for port %d", ours[j]);
        if (fd >= 0) {
            CHECK_MSG(flock(fd, LOCK_EX | LOCK_NB) != 0, "port %d not locked", ours[j]);
            close(fd);
        }
    }
    close(down[1]);
    int st = 0;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(up[0]);
    TEST_MAIN_END();
}
