/* SPDX-License-Identifier: MIT
 * mount-internal.h — private to the mount: the session's state shared by
 * mount.c (INIT, invalidation, lifecycle) and mount-ops.c (the kernel's
 * view of inodes and entries, replies, the request handlers).
 * Include after defining FUSE_USE_VERSION.
 */
#ifndef NTFS_FS_MOUNT_INTERNAL_H
#define NTFS_FS_MOUNT_INTERNAL_H

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "fs/mount.h"

#define MOUNT_MAX_WRITE (1024 * 1024)
/* st_blksize: a regular file's is the chunk size, so stdio and Python
 * buffer 64 KiB per write (each write() is a WRITE: no writeback cache).
 * Anything else reports ext4's 4 KiB: glibc's opendir sizes its buffer
 * max(st_blksize, 32 KiB), and 64 KiB buffers made git status's
 * malloc grow and trim its heap (650 brk calls and ~1,950 page faults
 * per status of the benchmark's tree, against 421 and ~1,620) for no
 * fewer getdents calls. */
#define MOUNT_BLKSIZE NTFS_CHUNK_SIZE
#define MOUNT_BLKSIZE_OTHER 4096
#define MOUNT_INIT_TIMEOUT_S 10
#define MOUNT_XATTR_MAX 65536
/* Negative entries recorded (so a rollback can invalidate them) at most;
 * at the bound they are all invalidated and forgotten (the kernel never
 * says when it drops a negative dentry). */
#define MOUNT_NEG_MAX 32768
/* Entry and attribute timeouts: long, since every change to the working
 * state that does not come through this mount replaces it (a rollback) and
 * invalidates explicitly; at most MOUNT_SHARED_TIMEOUT while another
 * read-write handle on the session is open (ntfs_ws_shared), whose changes
 * this mount's kernel does not hear of. docs/mount.md. */
#define MOUNT_TIMEOUT 86400.0
#define MOUNT_SHARED_TIMEOUT 1.0
#define MOUNT_DQ_MAX 256

struct kinode;

struct kentry {
        /* inode NULL: a negative entry (the kernel caches "no such name") */
        struct kentry *hnext;  /* chain in the entry hash */
        struct kentry *inext;  /* next entry of the same inode */
        struct kentry **iprev; /* the pointer that points at this entry */
        struct kinode *inode;
        uint64_t parent;
        uint64_t hash;
        size_t namelen;
        char name[];
};

struct kinode {
        struct kinode *hnext;
        uint64_t ino;
        uint64_t nlookup;
        struct kentry *entries;
};

struct ntfs_mount {
        ntfs_ws *ws;
        struct fuse_session *se;
        char *mountpoint;
        double entry_timeout, attr_timeout;
        uint32_t max_threads;
        bool read_only;
        bool relatime; /* opts.relatime on a read-write mount: OPEN answered, atime kept on READ */
        void (*on_exit)(ntfs_mount *m, void *ud);
        void *on_exit_ud;
        int (*on_fsync)(void *ud);
        void *on_fsync_ud;
        struct mount_wseq *wseq; /* write(2)s split into pieces (mount-flush.h) */

        pthread_t loop_thread;
        bool loop_started;
        dev_t dev; /* the mount's st_dev: /sys/fs/fuse/connections/<minor> */
        bool have_dev;

        /* INIT */
        uint32_t extra_flags; /* kernel flags added to the INIT reply */
        atomic_bool init_seen;
        bool init_done;
        bool parallel_dirops, handle_killpriv, handle_killpriv_v2;
        bool posix_acl; /* FUSE_POSIX_ACL and FUSE_DONT_MASK granted (mount_op_init) */
        uint32_t kernel_minor, kernel_flags; /* from the INIT request */
        _Atomic uint64_t opcounts[64]; /* requests per opcode (0: out of range) */
        _Atomic uint64_t opns[64];     /* with NTFS_FUSE_STATS: ns from request read to reply */
        _Atomic uint64_t opwait[64];   /* with NTFS_FUSE_STATS: of opns, ns waiting for the store's lock */
        const char *stats_path;        /* NTFS_FUSE_STATS at start (getenv: the daemons never change
                                        * their environment); NULL: none, nothing timed */

        pthread_mutex_t lock; /* guards everything below; never held across a ws call or a notify */
        pthread_cond_t cond;
        bool loop_ended, stopping;
        unsigned cb_running;
        struct kinode **ibuckets;
        size_t nibuckets, ninodes;
        struct kentry **ebuckets;
        size_t nebuckets, nentries;
        size_t nneg;       /* entries with inode NULL */
        struct kentry *negs; /* those entries, chained through inext/iprev */
        bool neg_purge;    /* asks inval_main to purge the negative entries */
        uint64_t invalidations;

        /* Invalidation requested from a FUSE worker thread (the store may run
         * the ws callback in any thread that leaves it) is handed to this
         * thread: a worker must never notify, the kernel may hold the very
         * directory lock the notification needs for the request it serves. */
        pthread_t inval_thread;
        bool inval_thread_started, inval_requested, inval_quit;
        pthread_mutex_t inval_lock; /* serializes whole invalidation runs */
        /* Inodes whose data another mount of the session changed, whose
         * pages this kernel may hold (ws_data_changed): inval_main drops
         * them. More than MOUNT_DQ_MAX at once: everything is invalidated. */
        uint64_t dq[MOUNT_DQ_MAX];
        size_t dq_n;
};

/* Debug trace (only with ntfs_mount_opts.debug, which also turns on
 * libfuse's request trace on stderr). */
extern bool mount_debug; /* mount.c */
#define mdebug(...)                                              \
        do {                                                     \
                if (mount_debug) {                               \
                        fprintf(stderr, "ntfs-mount: " __VA_ARGS__); \
                        fputc('\n', stderr);                     \
                }                                                \
        } while (0)

/* The kernel's inodes by number (mount-ops.c keeps them; ws_data_changed
 * in mount.c asks). Inline: on every request's path. */
static inline uint64_t ino_hash(uint64_t ino) {
        ino ^= ino >> 33;
        ino *= 0xff51afd7ed558ccdULL;
        ino ^= ino >> 33;
        return ino;
}

static inline struct kinode *kinode_find(ntfs_mount *m, uint64_t ino) {
        for (struct kinode *n = m->ibuckets[ino_hash(ino) & (m->nibuckets - 1)]; n; n = n->hnext)
                if (n->ino == ino)
                        return n;
        return NULL;
}

/* Unhooks e from its hash chain and its inode's list (or the negative
 * entries' list), and frees it (mount-ops.c; m->lock held). */
void mount_kentry_free(ntfs_mount *m, struct kentry *e);
/* The entry (parent, name), or NULL (mount-ops.c; m->lock held). */
struct kentry *mount_kentry_find(ntfs_mount *m, uint64_t parent, const char *name, size_t len);

/* The request handlers (mount-ops.c). mount_op_open and mount_op_opendir
 * are in mount_ops; ntfs_mount_start replaces both with
 * mount_op_open_noopen where the kernel can do without them. */
extern const struct fuse_lowlevel_ops mount_ops;
void mount_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void mount_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void mount_op_open_noopen(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

/* INIT (mount.c), in mount_ops. */
void mount_op_init(void *ud, struct fuse_conn_info *conn);
/* Set per request by io_read (mount.c) in the worker that then serves it:
 * the kernel's FUSE_WRITE_KILL_SUIDGID, read by op_write. */
extern __thread bool mount_tls_write_kill;

#endif
