/* SPDX-License-Identifier: Apache-2.0
 *
 * sys.h - operating system calls that several modules make the same way,
 * written once: a condition variable whose timed waits run on the
 * monotonic clock (alone or with its mutex), the free space of a
 * path's filesystem, and the directories above a path.
 *
 * No allocation; safe from any thread. It knows nothing of what the
 * callers wait for or store.
 */
#ifndef DD_SYS_H
#define DD_SYS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Initialise CV so that pthread_cond_timedwait reads its deadline on
 * CLOCK_MONOTONIC (the clock of dd_mono_ns), which wall-clock steps do
 * not move. The caller owns CV and destroys it with pthread_cond_destroy.
 * Returns DD_OK, or DD_ERR_NOMEM when the attributes or the variable
 * cannot be created (CV is then not initialised). */
int dd_sys_cond_init_monotonic(pthread_cond_t *cv);

/* Initialise MU (default attributes) and CV (dd_sys_cond_init_monotonic),
 * the pair a thread and its waker share: both or neither. The caller owns
 * both and destroys them. Returns DD_OK, or DD_ERR_NOMEM with neither
 * initialised. */
int dd_sys_lock_init(pthread_mutex_t *mu, pthread_cond_t *cv);

/* Bytes free to an unprivileged writer on the filesystem holding PATH;
 * UINT64_MAX when statvfs fails (callers then refuse nothing for it). The
 * filesystem's size goes into *SIZE when SIZE is not NULL (UINT64_MAX
 * when unknown). */
uint64_t dd_sys_free_bytes(const char *path, uint64_t *size);

/* Create every missing directory above PATH's last component, as
 * `mkdir -p "$(dirname PATH)"` (mode 0755 less the umask), so that PATH
 * itself (a store's directory, a log file) can then be created. "a/b/c"
 * creates a and a/b; "c" and "/c" create nothing. Returns DD_OK, or
 * DD_ERR_INVALID (PATH longer than PATH_MAX) or DD_ERR_IO (a component
 * that cannot be created or is not a directory) with a message naming the
 * directory in ERR. */
int dd_sys_mkdir_parents(const char *path, char *err, size_t errlen);

#endif
