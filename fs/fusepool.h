/* SPDX-License-Identifier: MIT
 * fusepool.h — a fixed pool of threads serving one FUSE session.
 *
 * libfuse's multithreaded loop starts with one worker and adds one
 * whenever every worker is busy; a single caller's burst (an untar, an
 * rm -rf) then runs on 3-5 workers, added while it runs. The same
 * requests served by a pool of all its workers from the start were ~20%
 * faster on this kind of machine, for the ntfs mount and the FUSE floor
 * alike (docs/mount.md, "Worker threads"). Both run their session on this.
 */
#ifndef NTFS_FS_FUSEPOOL_H
#define NTFS_FS_FUSEPOOL_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 312
#endif
#include <fuse_lowlevel.h>

#define FUSEPOOL_MAX 256

/* Serves se on nthreads (1..FUSEPOOL_MAX) threads named name (at most 15
 * bytes), all started at once with SIGTERM, SIGINT, SIGHUP and SIGQUIT
 * blocked (the caller's threads take the signals); returns when every one
 * has ended. A thread ends when the connection does (unmount, abort) or a
 * read from it fails otherwise, and then ends the session
 * (fuse_session_exit); the first to end cancels the others at their wait
 * for a request, as libfuse's loop does (a request being served is
 * finished first). Returns 0, -EINVAL for a bad count, or the negative
 * errno of pthread_create when not one thread could start; when only some
 * could, the session runs on those. */
int fusepool_run(struct fuse_session *se, unsigned nthreads, const char *name);

#endif
