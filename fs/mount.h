/* SPDX-License-Identifier: MIT
 * mount.h — a session's working state (or a read-only view) served as a real
 * POSIX filesystem through the FUSE low-level API (libfuse 3.14).
 *
 * One ntfs_mount is one FUSE session at one mountpoint, served by a pool of
 * worker threads of its own, all started at mount (fs/fusepool.h). Every
 * request maps to one ntfs_ws_* call (fs/store.h); the only state kept here
 * is the kernel's lookup counts and the (parent, name) entries it was told
 * about, so that a rollback can invalidate exactly what the kernel caches.
 * docs/mount.md says which FUSE options are used and why.
 *
 * Lifecycle and ownership:
 *   ntfs_mount_start(ws, opts, &m)   mounts; returns once the kernel's INIT
 *                                    has been answered (the mount is usable).
 *                                    m borrows ws: the caller keeps it open
 *                                    until ntfs_mount_stop() returned, then
 *                                    closes it. The mount installs ws's
 *                                    invalidate callback (one mount per ws).
 *   ntfs_mount_stop(m)               unmounts (lazily, aborting the FUSE
 *                                    connection if the mount is busy), joins
 *                                    the loop threads and frees m. NULL is a
 *                                    no-op. Safe after the mount died or was
 *                                    unmounted from outside.
 *
 * Threading: start/stop/flush_kernel from any thread except a FUSE worker of
 * the same mount. A rollback's invalidation runs in the thread that calls
 * ntfs_rollback() (the ws callback) and is complete when that call returns;
 * that thread must not be a FUSE worker of this mount.
 *
 * Errors: negative errno (or -NTFS_E*); nothing here prints except
 * log_debug.
 */
#ifndef NTFS_FS_MOUNT_H
#define NTFS_FS_MOUNT_H

#include <stdbool.h>
#include <stdint.h>

#include "fs/store.h"

typedef struct ntfs_mount ntfs_mount;

struct ntfs_mount_opts {
        const char *mountpoint;  /* an existing directory; required */
        bool allow_other;        /* default true (see ntfs_mount_opts_init): the jail's root must see it */
        bool read_only;          /* forced true for a read-only view */
        uint32_t max_threads;    /* FUSE worker threads, all started at mount (fs/fusepool.h); 0: default (8), at most 256 */
        double entry_timeout;    /* seconds; default 86,400; at most 1 while the session is shared */
        double attr_timeout;     /* seconds; default 86,400 (the same) */
        bool debug;              /* libfuse's request trace on stderr */
        bool relatime;           /* atime kept as ext4's relatime does (read-write mounts); default
                                  * false: noatime (docs/mount.md, "atime") */
        const char *fsname;      /* shown in /proc/mounts; default "ntfs" */
        /* Called once from the loop thread when the loop ended without
         * ntfs_mount_stop() (unmounted from outside, connection aborted).
         * It must not call ntfs_mount_stop() itself. */
        void (*on_exit)(ntfs_mount *m, void *ud);
        void *on_exit_ud;
        /* Called in the worker thread after an FSYNC or FSYNCDIR made the
         * working state durable, before the reply: a negative errno from it
         * is the reply (the caller's fsync fails). NULL: none. */
        int (*on_fsync)(void *ud);
        void *on_fsync_ud;
};

/* Fills o with the defaults above (mountpoint NULL). */
void ntfs_mount_opts_init(struct ntfs_mount_opts *o);

/* Mounts ws at o->mountpoint. -ENOTDIR/-ENOENT for a bad mountpoint,
 * -EBUSY if ws is already mounted by this library, -EIO if libfuse could
 * not mount, -ETIMEDOUT if the kernel never sent INIT (10 s). */
int ntfs_mount_start(ntfs_ws *ws, const struct ntfs_mount_opts *o, ntfs_mount **ret);

/* Unmounts, joins the threads, frees m. Returns 0, or the first error met
 * while unmounting (m is freed regardless). ws stays open. */
int ntfs_mount_stop(ntfs_mount *m);

const char *ntfs_mount_point(const ntfs_mount *m);
ntfs_ws *ntfs_mount_ws(const ntfs_mount *m);
/* false once the loop ended (unmounted from outside, daemon stopping). */
bool ntfs_mount_alive(const ntfs_mount *m);

/* Makes sure every write(2) that returned on the mount is in the store.
 * Writeback caching is off (docs/mount.md), so a returned write already
 * is; this still syncfs()es the mountpoint so that dirty pages of shared
 * writable mmaps reach the store too. Call before a checkpoint.
 * The open + syncfs (like the stat after a mount) is made by a helper child
 * process (forked on first use, one per process, exits at this process's
 * exit), never by a thread of this process: see own_mount_call() in mount.c
 * for why a kill -9 must not find a thread waiting on its own mount. */
int ntfs_mount_flush_kernel(ntfs_mount *m);

/* ntfs_mount_flush_kernel, then keeps the mount's WRITEs from being
 * applied (they wait in their workers) until ntfs_mount_release_writes,
 * once no write(2) the kernel split into several WRITE requests is
 * halfway in (probed through the helper: fs/mount-flush.h), so that a
 * checkpoint or fork taken in between holds each write(2) whole or not at
 * all. A write(2) in flight is let in and probed again; past 1 s of that
 * the hold is taken anyway. Every hold is followed by exactly one
 * release, from any thread; nothing in between may wait for this mount's
 * requests (a rollback's invalidation does: take no hold for it). Returns
 * the flush's error; the hold is taken either way. */
int ntfs_mount_hold_writes(ntfs_mount *m);
void ntfs_mount_release_writes(ntfs_mount *m);

/* Drops the kernel's cached entries, attributes and pages for everything
 * this mount told the kernel about; complete when it returns. Runs
 * automatically after a rollback (the ws invalidate callback), but the
 * store may run that callback in another thread (then it is handed to the
 * mount's invalidation thread), so a caller that must know the caches are
 * gone when it reports the rollback calls this after ntfs_rollback().
 * Never call it from a FUSE worker (it then only queues the work). */
void ntfs_mount_invalidate_all(ntfs_mount *m);

struct ntfs_mount_stats {
        uint64_t known_inodes;   /* inodes with a kernel lookup count */
        uint64_t known_entries;  /* (parent, name) entries the kernel may cache */
        uint64_t invalidations;  /* completed ntfs_mount_invalidate_all() runs */
        bool parallel_dirops;    /* FUSE_PARALLEL_DIROPS reached the kernel */
        bool handle_killpriv;    /* FUSE_HANDLE_KILLPRIV reached the kernel */
};
void ntfs_mount_get_stats(ntfs_mount *m, struct ntfs_mount_stats *ret);

#endif
