/* SPDX-License-Identifier: MIT
 * mount.c — the FUSE low-level session of one mounted workspace.
 *
 * Every request maps to one ntfs_ws_* call. What lives here:
 *   - the kernel's lookup counts per inode (FORGET at zero -> ntfs_ws_forget)
 *   - the (parent, name) -> inode entries the kernel was told about (lookup,
 *     create, mknod, mkdir, symlink, link, readdirplus), kept up to date on
 *     unlink/rmdir/rename and dropped with their inode at FORGET, so that a
 *     rollback invalidates exactly what the kernel may cache
 *     and the negative entries the kernel caches (inode NULL, bounded)
 *   - the INIT patch: libfuse 3.14 never puts FUSE_PARALLEL_DIROPS and
 *     FUSE_HANDLE_KILLPRIV into the INIT reply; a custom writev adds them
 *     (same fix as tools/fusefloor.c; docs/bench-fs.md measured it), and
 *     FUSE_HANDLE_KILLPRIV_V2, which libfuse 3.14 does not know at all
 *   - request counts per opcode (NTFS_FUSE_STATS=PATH, written at stop)
 *   - the mount's read-ahead, raised to max_write through sysfs
 *   - while the session is shared, the pages of files another mount of it
 *     changed, dropped in this kernel (ws_data_changed; the mount has no
 *     FUSE_AUTO_INVAL_DATA)
 * docs/mount.md describes the options and the lifecycle.
 */
#define FUSE_USE_VERSION 314

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "fs/fusepool.h"
#include "fs/mount.h"
#include "common/banned.h"

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

/* ---- the kernel's view: inodes and entries ------------------------------ */

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
        void (*on_exit)(ntfs_mount *m, void *ud);
        void *on_exit_ud;
        int (*on_fsync)(void *ud);
        void *on_fsync_ud;

        pthread_t loop_thread;
        bool loop_started;
        dev_t dev; /* the mount's st_dev: /sys/fs/fuse/connections/<minor> */
        bool have_dev;

        /* INIT */
        uint32_t extra_flags; /* kernel flags added to the INIT reply */
        atomic_bool init_seen;
        bool init_done;
        bool parallel_dirops, handle_killpriv, handle_killpriv_v2;
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
static bool mount_debug;
#define mdebug(...)                                              \
        do {                                                     \
                if (mount_debug) {                               \
                        fprintf(stderr, "ntfs-mount: " __VA_ARGS__); \
                        fputc('\n', stderr);                     \
                }                                                \
        } while (0)

/* Set in the threads that read /dev/fuse (libfuse's workers). */
static __thread bool tls_fuse_worker;

static uint64_t ino_hash(uint64_t ino) {
        ino ^= ino >> 33;
        ino *= 0xff51afd7ed558ccdULL;
        ino ^= ino >> 33;
        return ino;
}

static uint64_t entry_hash(uint64_t parent, const char *name, size_t len) {
        uint64_t h = 0xcbf29ce484222325ULL ^ ino_hash(parent);
        for (size_t i = 0; i < len; i++) {
                h ^= (unsigned char)name[i];
                h *= 0x100000001b3ULL;
        }
        return h;
}

/* Doubles a bucket array when the load passes 1 (best effort: a failed
 * allocation keeps the old, longer chains). */
static void inodes_maybe_grow(ntfs_mount *m) {
        if (m->ninodes < m->nibuckets)
                return;
        size_t nb = m->nibuckets * 2;
        struct kinode **b = calloc(nb, sizeof(*b));
        if (!b)
                return;
        for (size_t i = 0; i < m->nibuckets; i++) {
                struct kinode *n = m->ibuckets[i];
                while (n) {
                        struct kinode *next = n->hnext;
                        size_t k = ino_hash(n->ino) & (nb - 1);
                        n->hnext = b[k];
                        b[k] = n;
                        n = next;
                }
        }
        free(m->ibuckets);
        m->ibuckets = b;
        m->nibuckets = nb;
}

static void entries_maybe_grow(ntfs_mount *m) {
        if (m->nentries < m->nebuckets)
                return;
        size_t nb = m->nebuckets * 2;
        struct kentry **b = calloc(nb, sizeof(*b));
        if (!b)
                return;
        for (size_t i = 0; i < m->nebuckets; i++) {
                struct kentry *e = m->ebuckets[i];
                while (e) {
                        struct kentry *next = e->hnext;
                        size_t k = e->hash & (nb - 1);
                        e->hnext = b[k];
                        b[k] = e;
                        e = next;
                }
        }
        free(m->ebuckets);
        m->ebuckets = b;
        m->nebuckets = nb;
}

static struct kinode *kinode_find(ntfs_mount *m, uint64_t ino) {
        for (struct kinode *n = m->ibuckets[ino_hash(ino) & (m->nibuckets - 1)]; n; n = n->hnext)
                if (n->ino == ino)
                        return n;
        return NULL;
}

static struct kinode *kinode_get(ntfs_mount *m, uint64_t ino) {
        struct kinode *n = kinode_find(m, ino);
        if (n)
                return n;
        n = calloc(1, sizeof(*n));
        if (!n)
                return NULL;
        n->ino = ino;
        size_t k = ino_hash(ino) & (m->nibuckets - 1);
        n->hnext = m->ibuckets[k];
        m->ibuckets[k] = n;
        m->ninodes++;
        inodes_maybe_grow(m);
        return n;
}

static struct kentry **kentry_slot(ntfs_mount *m, uint64_t parent, const char *name, size_t len) {
        uint64_t h = entry_hash(parent, name, len);
        struct kentry **p = &m->ebuckets[h & (m->nebuckets - 1)];
        for (; *p; p = &(*p)->hnext)
                if ((*p)->hash == h && (*p)->parent == parent && (*p)->namelen == len &&
                    memcmp((*p)->name, name, len) == 0)
                        return p;
        return p; /* *p == NULL: not found */
}

/* Unhooks e from its hash chain and its inode's list, and frees it. */
static void kentry_free(ntfs_mount *m, struct kentry *e) {
        struct kentry **p = kentry_slot(m, e->parent, e->name, e->namelen);
        if (*p == e)
                *p = e->hnext;
        if (e->iprev) {
                *e->iprev = e->inext;
                if (e->inext)
                        e->inext->iprev = e->iprev;
        }
        m->nentries--;
        if (!e->inode)
                m->nneg--;
        free(e);
}

static void kentry_attach(struct kentry *e, struct kinode *n) {
        e->inode = n;
        e->iprev = &n->entries;
        e->inext = n->entries;
        if (n->entries)
                n->entries->iprev = &e->inext;
        n->entries = e;
}

static void kentry_detach(struct kentry *e) {
        if (e->iprev) {
                *e->iprev = e->inext;
                if (e->inext)
                        e->inext->iprev = e->iprev;
        }
        e->iprev = NULL;
        e->inext = NULL;
        e->inode = NULL;
}

/* Records that (parent, name) names inode n (no lookup count change). */
static void entry_set(ntfs_mount *m, uint64_t parent, const char *name, struct kinode *n) {
        size_t len = strlen(name);
        struct kentry **p = kentry_slot(m, parent, name, len);
        struct kentry *e = *p;
        if (e) {
                if (e->inode == n)
                        return;
                if (!e->inode)
                        m->nneg--;
                kentry_detach(e);
                kentry_attach(e, n);
                return;
        }
        e = malloc(sizeof(*e) + len + 1);
        if (!e) {
                mdebug("no memory to track entry %s", name);
                return;
        }
        e->parent = parent;
        e->hash = entry_hash(parent, name, len);
        e->namelen = len;
        memcpy(e->name, name, len + 1);
        e->hnext = NULL;
        *p = e;
        m->nentries++;
        kentry_attach(e, n);
        entries_maybe_grow(m);
}

/* Records that the kernel may cache (parent, name) as absent. False when
 * it cannot be recorded (bound reached, no memory): then the miss must not
 * be cached. At the bound, inval_main is asked to purge the negatives. */
static bool entry_set_negative(ntfs_mount *m, uint64_t parent, const char *name) {
        size_t len = strlen(name);
        struct kentry **p = kentry_slot(m, parent, name, len);
        struct kentry *e = *p;
        if (e) {
                if (e->inode) { /* was a name the kernel knew: now absent */
                        kentry_detach(e);
                        m->nneg++;
                }
                return true;
        }
        if (m->nneg >= MOUNT_NEG_MAX) {
                if (!m->neg_purge) {
                        m->neg_purge = true;
                        pthread_cond_broadcast(&m->cond);
                }
                return false;
        }
        e = malloc(sizeof(*e) + len + 1);
        if (!e)
                return false;
        e->parent = parent;
        e->hash = entry_hash(parent, name, len);
        e->namelen = len;
        memcpy(e->name, name, len + 1);
        e->hnext = NULL;
        e->inode = NULL;
        e->iprev = NULL;
        e->inext = NULL;
        *p = e;
        m->nentries++;
        m->nneg++;
        entries_maybe_grow(m);
        return true;
}

static void entry_drop(ntfs_mount *m, uint64_t parent, const char *name) {
        struct kentry *e = *kentry_slot(m, parent, name, strlen(name));
        if (e)
                kentry_free(m, e);
}

/* The kernel now holds one more lookup reference on ino, named (parent,
 * name) when name is non-NULL. -ENOMEM when the count cannot be kept. */
static int remember(ntfs_mount *m, uint64_t parent, const char *name, uint64_t ino) {
        pthread_mutex_lock(&m->lock);
        struct kinode *n = kinode_get(m, ino);
        if (!n) {
                pthread_mutex_unlock(&m->lock);
                return -ENOMEM;
        }
        n->nlookup++;
        if (name)
                entry_set(m, parent, name, n);
        pthread_mutex_unlock(&m->lock);
        return 0;
}

/* Drops nlookup references; at zero the inode and its entries are
 * forgotten and the store told (outside the lock). */
static void forget_one(ntfs_mount *m, uint64_t ino, uint64_t nlookup) {
        bool gone = false;
        pthread_mutex_lock(&m->lock);
        struct kinode **p = &m->ibuckets[ino_hash(ino) & (m->nibuckets - 1)];
        while (*p && (*p)->ino != ino)
                p = &(*p)->hnext;
        struct kinode *n = *p;
        if (n) {
                n->nlookup = n->nlookup > nlookup ? n->nlookup - nlookup : 0;
                if (n->nlookup == 0) {
                        while (n->entries)
                                kentry_free(m, n->entries);
                        *p = n->hnext;
                        m->ninodes--;
                        free(n);
                        gone = true;
                }
        }
        pthread_mutex_unlock(&m->lock);
        if (gone)
                ntfs_ws_forget(m->ws, ino);
}

/* ---- replies ------------------------------------------------------------- */

static void attr_to_stat(const struct ntfs_attr *a, struct stat *st) {
        memset(st, 0, sizeof(*st));
        st->st_ino = a->ino;
        st->st_mode = a->mode;
        st->st_nlink = a->nlink;
        st->st_uid = a->uid;
        st->st_gid = a->gid;
        st->st_size = (off_t)a->size;
        st->st_blocks = (blkcnt_t)a->blocks;
        st->st_rdev = (dev_t)a->rdev;
        st->st_blksize = S_ISREG(a->mode) ? MOUNT_BLKSIZE : MOUNT_BLKSIZE_OTHER;
        st->st_atim = a->atime;
        st->st_mtim = a->mtime;
        st->st_ctim = a->ctime;
}

/* What may change the kernel's cached answers: a rollback (the
 * generation) or another handle opening on the session (the sharing
 * epoch); both only go up. A reply whose request straddled a change is
 * sent with zero timeouts. */
static uint64_t cache_epoch(ntfs_mount *m) { return ntfs_ws_generation(m->ws) + ntfs_ws_share_epoch(m->ws); }

/* A configured timeout t as the kernel gets it now: at most
 * MOUNT_SHARED_TIMEOUT while the session is shared. */
static double timeout_now(ntfs_mount *m, double t) {
        return ntfs_ws_shared(m->ws) ? NTFS_MIN(t, MOUNT_SHARED_TIMEOUT) : t;
}

static void fill_entry(ntfs_mount *m, const struct ntfs_attr *a, uint64_t gen, struct fuse_entry_param *e) {
        memset(e, 0, sizeof(*e));
        e->ino = a->ino;
        /* The kernel matches nodeid + generation: after a rollback an inode
         * number seen again with a new generation is a new inode. The root's
         * generation is fixed at 0 by the kernel. */
        e->generation = a->ino == NTFS_ROOT_INO ? 0 : gen;
        attr_to_stat(a, &e->attr);
        e->attr_timeout = timeout_now(m, m->attr_timeout);
        e->entry_timeout = timeout_now(m, m->entry_timeout);
}

static inline ntfs_mount *req_mount(fuse_req_t req) { return fuse_req_userdata(req); }

static void reply_err(fuse_req_t req, int r) { fuse_reply_err(req, r < 0 ? -r : 0); }

/* Records the new lookup reference and fills the entry to reply with; on
 * failure replies the error itself and returns false. */
static bool entry_for_reply(fuse_req_t req, uint64_t parent, const char *name, const struct ntfs_attr *a,
                            uint64_t epoch_before, struct fuse_entry_param *e) {
        ntfs_mount *m = req_mount(req);
        int r = remember(m, parent, name, a->ino);
        if (r < 0) {
                reply_err(req, r);
                return false;
        }
        fill_entry(m, a, ntfs_ws_generation(m->ws), e);
        if (cache_epoch(m) != epoch_before) {
                /* A rollback ran during this request (the answer may be of
                 * the old state) or the session became shared: the kernel
                 * must not keep it. */
                e->entry_timeout = 0;
                e->attr_timeout = 0;
        }
        return true;
}

/* Replies with the entry; undoes the lookup reference when the kernel did
 * not take it (interrupted request). */
static void reply_entry(fuse_req_t req, uint64_t parent, const char *name, const struct ntfs_attr *a,
                        uint64_t epoch_before) {
        struct fuse_entry_param e;
        if (entry_for_reply(req, parent, name, a, epoch_before, &e) && fuse_reply_entry(req, &e) < 0)
                forget_one(req_mount(req), a->ino, 1);
}

static void reply_create(fuse_req_t req, uint64_t parent, const char *name, const struct ntfs_attr *a,
                         uint64_t epoch_before, struct fuse_file_info *fi) {
        struct fuse_entry_param e;
        if (!entry_for_reply(req, parent, name, a, epoch_before, &e))
                return;
        ntfs_mount *m = req_mount(req);
        fi->fh = 0;
        fi->keep_cache = 1;
        fi->direct_io = 0;
        if (fuse_reply_create(req, &e, fi) < 0)
                forget_one(m, a->ino, 1);
}

static void reply_attr(fuse_req_t req, const struct ntfs_attr *a) {
        struct stat st;
        attr_to_stat(a, &st);
        ntfs_mount *m = req_mount(req);
        fuse_reply_attr(req, &st, timeout_now(m, m->attr_timeout));
}

/* Owner of a new inode: the caller's fsuid/fsgid, except in a setgid
 * directory, whose group it inherits (and a new directory inherits the
 * setgid bit). The kernel leaves this to FUSE filesystems. */
static int new_owner(fuse_req_t req, uint64_t parent, bool isdir, uint32_t *uid, uint32_t *gid, uint32_t *mode) {
        ntfs_mount *m = req_mount(req);
        const struct fuse_ctx *ctx = fuse_req_ctx(req);
        struct ntfs_attr pa;
        int r = ntfs_ws_getattr(m->ws, parent, &pa);
        if (r < 0)
                return r;
        *uid = ctx->uid;
        *gid = ctx->gid;
        if (pa.mode & S_ISGID) {
                *gid = pa.gid;
                if (isdir)
                        *mode |= S_ISGID;
        }
        return 0;
}

/* ---- INIT ------------------------------------------------------------ */

/* Request counts per opcode (NTFS_FUSE_STATS=PATH: written at stop, one
 * "OPCODE COUNT NS WAIT" line each: write_stats). */
#define MOUNT_NOPC 64
static const char *const opc_names[MOUNT_NOPC] = {
        [FUSE_LOOKUP] = "LOOKUP",       [FUSE_FORGET] = "FORGET",
        [FUSE_GETATTR] = "GETATTR",     [FUSE_SETATTR] = "SETATTR",
        [FUSE_READLINK] = "READLINK",   [FUSE_SYMLINK] = "SYMLINK",
        [FUSE_MKNOD] = "MKNOD",         [FUSE_MKDIR] = "MKDIR",
        [FUSE_UNLINK] = "UNLINK",       [FUSE_RMDIR] = "RMDIR",
        [FUSE_RENAME] = "RENAME",       [FUSE_LINK] = "LINK",
        [FUSE_OPEN] = "OPEN",           [FUSE_READ] = "READ",
        [FUSE_WRITE] = "WRITE",         [FUSE_STATFS] = "STATFS",
        [FUSE_RELEASE] = "RELEASE",     [FUSE_FSYNC] = "FSYNC",
        [FUSE_SETXATTR] = "SETXATTR",   [FUSE_GETXATTR] = "GETXATTR",
        [FUSE_LISTXATTR] = "LISTXATTR", [FUSE_REMOVEXATTR] = "REMOVEXATTR",
        [FUSE_FLUSH] = "FLUSH",         [FUSE_INIT] = "INIT",
        [FUSE_OPENDIR] = "OPENDIR",     [FUSE_READDIR] = "READDIR",
        [FUSE_RELEASEDIR] = "RELEASEDIR", [FUSE_FSYNCDIR] = "FSYNCDIR",
        [FUSE_GETLK] = "GETLK",         [FUSE_SETLK] = "SETLK",
        [FUSE_SETLKW] = "SETLKW",       [FUSE_ACCESS] = "ACCESS",
        [FUSE_CREATE] = "CREATE",       [FUSE_INTERRUPT] = "INTERRUPT",
        [FUSE_BMAP] = "BMAP",           [FUSE_DESTROY] = "DESTROY",
        [FUSE_IOCTL] = "IOCTL",         [FUSE_POLL] = "POLL",
        [FUSE_NOTIFY_REPLY] = "NOTIFY_REPLY", [FUSE_BATCH_FORGET] = "BATCH_FORGET",
        [FUSE_FALLOCATE] = "FALLOCATE", [FUSE_READDIRPLUS] = "READDIRPLUS",
        [FUSE_RENAME2] = "RENAME2",     [FUSE_LSEEK] = "LSEEK",
        [FUSE_COPY_FILE_RANGE] = "COPY_FILE_RANGE",
};

/* Set per request by io_read in the worker that then serves it (libfuse's
 * workers read and process in the same thread, splice is off): the
 * kernel's FUSE_WRITE_KILL_SUIDGID, which libfuse 3.14 does not pass on. */
static __thread bool tls_write_kill;

/* With NTFS_FUSE_STATS, the request this worker read and when: its reply
 * (io_writev, same thread) adds the time to opns. FORGETs have no reply;
 * the next read overwrites them. */
static __thread int64_t tls_req_start;
static __thread int64_t tls_req_wait0; /* ntfs_store_thread_wait_ns() then */
static __thread unsigned tls_req_opc;

static ssize_t io_read(int fd, void *buf, size_t len, void *ud) {
        ntfs_mount *m = ud;
        tls_fuse_worker = true;
        ssize_t r = read(fd, buf, len);
        tls_write_kill = false;
        tls_req_start = 0;
        if (r >= (ssize_t)sizeof(struct fuse_in_header)) {
                const struct fuse_in_header *ih = buf;
                unsigned opc = ih->opcode < MOUNT_NOPC && opc_names[ih->opcode] ? ih->opcode : 0;
                atomic_fetch_add_explicit(&m->opcounts[opc], 1, memory_order_relaxed);
                if (m->stats_path) {
                        tls_req_opc = opc;
                        tls_req_start = ntfs_mono_ns();
                        tls_req_wait0 = ntfs_store_thread_wait_ns();
                }
                if (ih->opcode == FUSE_INIT && (size_t)r >= sizeof(*ih) + 16) {
                        /* What the kernel offers: libfuse 3.14 has no
                         * capability bit for HANDLE_KILLPRIV_V2. */
                        struct fuse_init_in ii;
                        memcpy(&ii, (const char *)buf + sizeof(*ih), 16);
                        m->kernel_minor = ii.minor;
                        m->kernel_flags = ii.flags;
                }
                if (ih->opcode == FUSE_WRITE &&
                    (size_t)r >= sizeof(*ih) + offsetof(struct fuse_write_in, flags)) {
                        struct fuse_write_in wi;
                        memcpy(&wi, (const char *)buf + sizeof(*ih), offsetof(struct fuse_write_in, flags));
                        tls_write_kill = (wi.write_flags & FUSE_WRITE_KILL_SUIDGID) != 0;
                }
        }
        return r;
}

/* libfuse 3.14 builds the INIT reply's flags from conn->want but has no
 * line for FUSE_CAP_PARALLEL_DIROPS and FUSE_CAP_HANDLE_KILLPRIV (fixed in
 * later libfuse). The INIT reply is the first message a session writes:
 * add the two kernel flags on the way out. */
static ssize_t io_writev(int fd, struct iovec *iov, int count, void *ud) {
        ntfs_mount *m = ud;
        bool is_init = false;
        if (!atomic_load(&m->init_seen) && count >= 2 && iov[0].iov_len == sizeof(struct fuse_out_header) &&
            iov[1].iov_len >= offsetof(struct fuse_init_out, max_background)) {
                atomic_store(&m->init_seen, true);
                is_init = true;
                struct fuse_out_header *oh = iov[0].iov_base;
                struct fuse_init_out *io = iov[1].iov_base;
                if (oh->error == 0) {
                        io->flags |= m->extra_flags;
                        m->parallel_dirops = io->flags & FUSE_PARALLEL_DIROPS;
                        m->handle_killpriv = io->flags & FUSE_HANDLE_KILLPRIV;
                        m->handle_killpriv_v2 = io->flags & FUSE_HANDLE_KILLPRIV_V2;
                }
        }
        if (tls_req_start) {
                atomic_fetch_add_explicit(&m->opns[tls_req_opc], (uint64_t)(ntfs_mono_ns() - tls_req_start),
                                          memory_order_relaxed);
                atomic_fetch_add_explicit(&m->opwait[tls_req_opc],
                                          (uint64_t)(ntfs_store_thread_wait_ns() - tls_req_wait0),
                                          memory_order_relaxed);
                tls_req_start = 0;
        }
        ssize_t r = writev(fd, iov, count);
        if (is_init) {
                pthread_mutex_lock(&m->lock);
                m->init_done = true;
                pthread_cond_broadcast(&m->cond);
                pthread_mutex_unlock(&m->lock);
        }
        return r;
}

static void op_init(void *ud, struct fuse_conn_info *conn) {
        ntfs_mount *m = ud;
        conn->max_write = MOUNT_MAX_WRITE;
        conn->max_readahead = MOUNT_MAX_WRITE;
        conn->time_gran = 1;
        conn->want |= conn->capable & (FUSE_CAP_READDIRPLUS | FUSE_CAP_ASYNC_READ);
        /* No AUTO_INVAL_DATA (libfuse asks for it by default): with it the
         * kernel drops a file's pages whenever a refreshed mtime differs
         * from its own, and after every write(2) its own is stale, so a
         * compiler's object file was read back from the daemon after each
         * GETATTR. Only this mount changes the session's files while it is
         * alone on it; rollback drops every page (ntfs_mount_invalidate_all),
         * and a change through another mount of the session drops that
         * file's (ws_data_changed). NTFS_FUSE_AUTO_INVAL=1 turns it back on
         * (to measure it). */
        const char *ai = getenv("NTFS_FUSE_AUTO_INVAL");
        if (ai && *ai == '1')
                conn->want |= conn->capable & FUSE_CAP_AUTO_INVAL_DATA;
        else
                conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA;
        /* Always readdirplus: one READDIRPLUS instead of READDIR + a LOOKUP
         * per entry (ls -l, find, du, git status). */
        conn->want &= ~(unsigned)FUSE_CAP_READDIRPLUS_AUTO;
        /* Writeback cache off: every write() then reaches the store before
         * it returns and gets its own EDQUOT/ENOSPC (with it on, the error
         * would come at write-back, seen only by fsync), and a checkpoint
         * needs no page flush. It costs compiles requests (docs/mount.md). */
        conn->want &= ~(unsigned)(FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_ATOMIC_O_TRUNC);
        /* No splice: the store copies anyway. */
        conn->want &= ~(unsigned)(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
        if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
                m->extra_flags |= FUSE_PARALLEL_DIROPS;
        /* HANDLE_KILLPRIV: the store clears setuid/setgid on write, op_setattr
         * on chown and truncate; the kernel then skips a GETATTR per chown. */
        if ((conn->capable & FUSE_CAP_HANDLE_KILLPRIV) && !m->read_only)
                m->extra_flags |= FUSE_HANDLE_KILLPRIV;
        /* HANDLE_KILLPRIV_V2 (protocol 7.33): the kernel then sets SB_NOSEC
         * and stops asking for security.capability (a GETXATTR) before
         * every write: after one check per inode and attribute refresh it
         * marks the inode S_NOSEC. In exchange the daemon kills
         * setuid/setgid and security.capability itself: op_write (on
         * FUSE_WRITE_KILL_SUIDGID, seen by io_read), op_setattr (chown,
         * truncate, FATTR_KILL_SUIDGID). NTFS_FUSE_NO_KILLPRIV_V2=1 turns it
         * off (to measure it). */
        const char *nov2 = getenv("NTFS_FUSE_NO_KILLPRIV_V2");
        if (m->kernel_minor >= 33 && (m->kernel_flags & FUSE_HANDLE_KILLPRIV_V2) && !m->read_only &&
            !(nov2 && *nov2 == '1'))
                m->extra_flags |= FUSE_HANDLE_KILLPRIV_V2;
        /* The reply follows at once (the kernel holds requests until it has
         * it); io_writev marks INIT done too, after the patch. */
        pthread_mutex_lock(&m->lock);
        m->init_done = true;
        pthread_cond_broadcast(&m->cond);
        pthread_mutex_unlock(&m->lock);
}

/* ---- operations ------------------------------------------------------ */

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
        ntfs_mount *m = req_mount(req);
        uint64_t epoch = cache_epoch(m);
        struct ntfs_attr a;
        int r = ntfs_ws_lookup(m->ws, parent, name, &a);
        if (r == -ENOENT && m->entry_timeout > 0) {
                /* A cached negative entry: ino 0 with the entry timeout
                 * (git, make, compilers and Python look up the same
                 * missing names again and again). Recorded first, so that
                 * a rollback invalidates it; not cached if a rollback ran
                 * during the request. Creating the name through the kernel
                 * replaces the kernel's negative dentry itself. */
                pthread_mutex_lock(&m->lock);
                bool rec = entry_set_negative(m, parent, name);
                pthread_mutex_unlock(&m->lock);
                if (rec && cache_epoch(m) == epoch) {
                        struct fuse_entry_param e = {.ino = 0, .entry_timeout = timeout_now(m, m->entry_timeout)};
                        fuse_reply_entry(req, &e);
                        return;
                }
        }
        if (r < 0) {
                reply_err(req, r);
                return;
        }
        reply_entry(req, parent, name, &a, epoch);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
        forget_one(req_mount(req), ino, nlookup);
        fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets) {
        ntfs_mount *m = req_mount(req);
        for (size_t i = 0; i < count; i++)
                forget_one(m, forgets[i].ino, forgets[i].nlookup);
        fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        struct ntfs_attr a;
        int r = ntfs_ws_getattr(req_mount(req)->ws, ino, &a);
        if (r < 0)
                reply_err(req, r);
        else
                reply_attr(req, &a);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set, struct fuse_file_info *fi) {
        ntfs_mount *m = req_mount(req);
        const struct fuse_ctx *ctx = fuse_req_ctx(req);
        struct ntfs_attr in = {.ino = ino};
        unsigned set = 0;
        int r;

        if (to_set & FUSE_SET_ATTR_MODE) {
                in.mode = attr->st_mode;
                set |= NTFS_SET_MODE;
        }
        if (to_set & FUSE_SET_ATTR_UID) {
                in.uid = attr->st_uid;
                set |= NTFS_SET_UID;
        }
        if (to_set & FUSE_SET_ATTR_GID) {
                in.gid = attr->st_gid;
                set |= NTFS_SET_GID;
        }
        if (to_set & FUSE_SET_ATTR_SIZE) {
                if (attr->st_size < 0) {
                        fuse_reply_err(req, EINVAL);
                        return;
                }
                in.size = (uint64_t)attr->st_size;
                set |= NTFS_SET_SIZE;
        }
        if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
                set |= NTFS_SET_ATIME_NOW;
        } else if (to_set & FUSE_SET_ATTR_ATIME) {
                in.atime = attr->st_atim;
                set |= NTFS_SET_ATIME;
        }
        if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
                set |= NTFS_SET_MTIME_NOW;
        } else if (to_set & FUSE_SET_ATTR_MTIME) {
                in.mtime = attr->st_mtim;
                set |= NTFS_SET_MTIME;
        }
        if (to_set & FUSE_SET_ATTR_CTIME) {
                in.ctime = attr->st_ctim;
                set |= NTFS_SET_CTIME;
        }

        /* Killing setuid/setgid: with FUSE_HANDLE_KILLPRIV that is ours on
         * chown (always, for non-directories, as chown_common() does) and on
         * truncate by a caller other than root; explicit KILL flags too. */
        bool kill = (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID | FUSE_SET_ATTR_KILL_SUID |
                               FUSE_SET_ATTR_KILL_SGID | FUSE_SET_ATTR_KILL_PRIV)) ||
                    ((to_set & FUSE_SET_ATTR_SIZE) && m->handle_killpriv && ctx->uid != 0);
        if (kill && !(set & NTFS_SET_MODE)) {
                struct ntfs_attr cur;
                r = ntfs_ws_getattr(m->ws, ino, &cur);
                if (r < 0) {
                        reply_err(req, r);
                        return;
                }
                uint32_t mode = cur.mode;
                if (!S_ISDIR(mode)) {
                        mode &= ~(uint32_t)S_ISUID;
                        if (mode & S_IXGRP)
                                mode &= ~(uint32_t)S_ISGID;
                }
                if (mode != cur.mode) {
                        in.mode = mode;
                        set |= NTFS_SET_MODE;
                }
        }

        struct ntfs_attr out;
        if (set == 0)
                r = ntfs_ws_getattr(m->ws, ino, &out);
        else
                r = ntfs_ws_setattr(m->ws, ino, &in, set, &out);
        if (r < 0)
                reply_err(req, r);
        else
                reply_attr(req, &out);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev) {
        ntfs_mount *m = req_mount(req);
        uint64_t epoch = cache_epoch(m);
        uint32_t uid, gid, md = mode;
        int r = new_owner(req, parent, false, &uid, &gid, &md);
        struct ntfs_attr a;
        if (r >= 0)
                r = ntfs_ws_mknod(m->ws, parent, name, md, rdev, uid, gid, &a);
        if (r < 0)
                reply_err(req, r);
        else
                reply_entry(req, parent, name, &a, epoch);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
        ntfs_mount *m = req_mount(req);
        uint64_t epoch = cache_epoch(m);
        uint32_t uid, gid, md = mode & 07777;
        int r = new_owner(req, parent, true, &uid, &gid, &md);
        struct ntfs_attr a;
        if (r >= 0)
                r = ntfs_ws_mkdir(m->ws, parent, name, md, uid, gid, &a);
        if (r < 0)
                reply_err(req, r);
        else
                reply_entry(req, parent, name, &a, epoch);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name) {
        ntfs_mount *m = req_mount(req);
        uint64_t epoch = cache_epoch(m);
        uint32_t uid, gid, md = 0;
        int r = new_owner(req, parent, false, &uid, &gid, &md);
        struct ntfs_attr a;
        if (r >= 0)
                r = ntfs_ws_symlink(m->ws, parent, name, link, uid, gid, &a);
        if (r < 0)
                reply_err(req, r);
        else
                reply_entry(req, parent, name, &a, epoch);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino) {
        char buf[PATH_MAX + 1];
        ssize_t r = ntfs_ws_readlink(req_mount(req)->ws, ino, buf, PATH_MAX);
        if (r < 0) {
                reply_err(req, (int)r);
                return;
        }
        buf[NTFS_MIN((size_t)r, (size_t)PATH_MAX)] = 0;
        fuse_reply_readlink(req, buf);
}

/* An unlink or rmdir is answered once the store's checks have passed
 * (ntfs_ws_unlink_then): its records change after the reply, while the
 * caller is already on its way to its next call, and the store's lock keeps
 * every other request out until they have. The entry is dropped before the
 * reply, so that a new entry of the same name (the kernel sends its create
 * only after this reply) cannot be dropped in its place. */
struct removal {
        ntfs_mount *m;
        fuse_req_t req;
        fuse_ino_t parent;
        const char *name;
        bool replied;
};

static void removal_reply(void *arg) {
        struct removal *x = arg;
        pthread_mutex_lock(&x->m->lock);
        entry_drop(x->m, x->parent, x->name);
        pthread_mutex_unlock(&x->m->lock);
        fuse_reply_err(x->req, 0);
        x->replied = true;
}

static void removal_done(struct removal *x, const char *op, int r) {
        if (!x->replied)
                reply_err(x->req, r);
        else if (r < 0) /* the batch is broken and will be aborted */
                log_warn("mount: %s of %s after its reply: %s", op, x->name, ntfs_strerror(r));
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name) {
        struct removal x = { req_mount(req), req, parent, name, false };
        removal_done(&x, "unlink", ntfs_ws_unlink_then(x.m->ws, parent, name, removal_reply, &x));
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name) {
        struct removal x = { req_mount(req), req, parent, name, false };
        removal_done(&x, "rmdir", ntfs_ws_rmdir_then(x.m->ws, parent, name, removal_reply, &x));
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags) {
        ntfs_mount *m = req_mount(req);
        if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE)) {
                fuse_reply_err(req, EINVAL); /* RENAME_WHITEOUT */
                return;
        }
        int r = ntfs_ws_rename(m->ws, parent, name, newparent, newname, flags);
        if (r >= 0) {
                pthread_mutex_lock(&m->lock);
                struct kentry *src = *kentry_slot(m, parent, name, strlen(name));
                struct kentry *dst = *kentry_slot(m, newparent, newname, strlen(newname));
                struct kinode *a = src ? src->inode : NULL, *b = dst ? dst->inode : NULL;
                if (src == dst)
                        dst = NULL;
                if (src)
                        kentry_free(m, src);
                if (dst)
                        kentry_free(m, dst);
                if (a)
                        entry_set(m, newparent, newname, a);
                if (b && (flags & RENAME_EXCHANGE))
                        entry_set(m, parent, name, b);
                pthread_mutex_unlock(&m->lock);
        }
        reply_err(req, r);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname) {
        ntfs_mount *m = req_mount(req);
        uint64_t epoch = cache_epoch(m);
        struct ntfs_attr a;
        int r = ntfs_ws_link(m->ws, ino, newparent, newname, &a);
        if (r < 0)
                reply_err(req, r);
        else
                reply_entry(req, newparent, newname, &a, epoch);
}

/* No per-open state: the first OPEN / OPENDIR answered ENOSYS makes the
 * kernel stop sending them (and keep page and readdir caches across
 * opens). The fallback answers for kernels without that support. */
static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        fi->fh = 0;
        fi->keep_cache = 1;
        fi->direct_io = 0;
        fuse_reply_open(req, fi);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        fi->fh = 0;
        fuse_reply_open(req, fi);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi) {
        ntfs_mount *m = req_mount(req);
        uint64_t epoch = cache_epoch(m);
        uint32_t uid, gid, md = S_IFREG | (mode & 07777);
        int r = new_owner(req, parent, false, &uid, &gid, &md);
        struct ntfs_attr a;
        if (r >= 0)
                r = ntfs_ws_mknod(m->ws, parent, name, md, 0, uid, gid, &a);
        if (r == -EEXIST && !(fi->flags & O_EXCL)) {
                /* Created by someone else since the kernel's lookup: open it. */
                r = ntfs_ws_lookup(m->ws, parent, name, &a);
                if (r >= 0 && S_ISDIR(a.mode))
                        r = -EISDIR;
                if (r >= 0 && (fi->flags & O_TRUNC) && S_ISREG(a.mode)) {
                        struct ntfs_attr t = {.ino = a.ino, .size = 0};
                        r = ntfs_ws_setattr(m->ws, a.ino, &t, NTFS_SET_SIZE, &a);
                }
        }
        if (r < 0)
                reply_err(req, r);
        else
                reply_create(req, parent, name, &a, epoch, fi);
}

/* One read buffer per worker thread, freed when the thread ends. */
static pthread_key_t rbuf_key;
static pthread_once_t rbuf_once = PTHREAD_ONCE_INIT;
static void rbuf_key_init(void) {
        if (pthread_key_create(&rbuf_key, free) != 0)
                abort();
}

static void *rbuf_get(size_t size) {
        pthread_once(&rbuf_once, rbuf_key_init);
        if (size > MOUNT_MAX_WRITE)
                return NULL;
        void *b = pthread_getspecific(rbuf_key);
        if (!b) {
                b = malloc(MOUNT_MAX_WRITE);
                if (!b)
                        return NULL;
                if (pthread_setspecific(rbuf_key, b) != 0) {
                        free(b);
                        return NULL;
                }
        }
        return b;
}

static int reply_iov_cb(const struct iovec *iov, int n, size_t total, void *ud) {
        (void)total;
        /* a failed reply (the request was interrupted) has no one to tell */
        (void)fuse_reply_iov(ud, iov, n);
        return 0;
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
        ntfs_mount *m = req_mount(req);
        if (off < 0) {
                fuse_reply_err(req, EINVAL);
                return;
        }
        /* Straight from the store's map into the reply: one copy (the
         * kernel's) instead of two. Only a read larger than any the kernel
         * sends (max_read) takes the buffered path below. */
        int d = ntfs_ws_read_iov(m->ws, ino, size, (uint64_t)off, reply_iov_cb, req);
        if (d != -E2BIG) {
                if (d < 0)
                        reply_err(req, d);
                return;
        }
        _cleanup_free_ void *heap = NULL;
        void *buf = rbuf_get(size);
        if (!buf) {
                buf = heap = malloc(size ? size : 1);
                if (!buf) {
                        fuse_reply_err(req, ENOMEM);
                        return;
                }
        }
        ssize_t r = ntfs_ws_read(m->ws, ino, buf, size, (uint64_t)off);
        if (r < 0)
                reply_err(req, (int)r);
        else
                fuse_reply_buf(req, buf, (size_t)r);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi) {
        if (off < 0) {
                fuse_reply_err(req, EINVAL);
                return;
        }
        ntfs_mount *m = req_mount(req);
        /* HANDLE_KILLPRIV_V2: the kernel asks us to kill setuid/setgid (it
         * sets the flag for a writer without CAP_FSETID). With only
         * HANDLE_KILLPRIV (v1) the kernel leaves it to us without a flag:
         * approximate CAP_FSETID by uid 0. Killed as should_remove_suid()
         * does: setuid always, setgid when group-executable. */
        bool kill = m->handle_killpriv_v2 ? tls_write_kill : m->handle_killpriv && fuse_req_ctx(req)->uid != 0;
        if (kill) {
                struct ntfs_attr cur;
                int k = ntfs_ws_getattr(m->ws, ino, &cur);
                if (k >= 0 && S_ISREG(cur.mode)) {
                        uint32_t mode = cur.mode & ~(uint32_t)S_ISUID;
                        if (mode & S_IXGRP)
                                mode &= ~(uint32_t)S_ISGID;
                        if (mode != cur.mode) {
                                struct ntfs_attr in = {.ino = ino, .mode = mode}, out;
                                k = ntfs_ws_setattr(m->ws, ino, &in, NTFS_SET_MODE, &out);
                        }
                }
                if (k < 0) {
                        reply_err(req, k);
                        return;
                }
        }
        /* O_APPEND: the kernel already put off at its i_size, under the
         * inode lock; every writer goes through this one kernel. */
        ssize_t r = ntfs_ws_write(m->ws, ino, buf, size, (uint64_t)off, false);
        if (r < 0)
                reply_err(req, (int)r);
        else
                fuse_reply_write(req, (size_t)r);
}

/* ENOSYS: the kernel stops sending FLUSH on every close(). Nothing is
 * buffered here. */
static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) { fuse_reply_err(req, ENOSYS); }

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) { fuse_reply_err(req, 0); }

/* fsync(2) and fdatasync(2) of a file or a directory: the whole working
 * state is made durable (one LMDB commit), then the owner's hook runs. */
static void do_fsync(fuse_req_t req) {
        ntfs_mount *m = req_mount(req);
        int r = ntfs_ws_fsync(m->ws);
        if (r == 0 && m->on_fsync)
                r = m->on_fsync(m->on_fsync_ud);
        reply_err(req, r);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) { do_fsync(req); }

struct rd_ctx {
        fuse_req_t req;
        ntfs_mount *m;
        char *buf;
        size_t size, pos;
        uint64_t dir, gen;
        bool plus;
        int err;
};

static int rd_cb(const char *name, const struct ntfs_attr *attr, uint64_t next_cookie, void *ud) {
        struct rd_ctx *c = ud;
        size_t n;
        if (c->plus) {
                struct fuse_entry_param e;
                fill_entry(c->m, attr, c->gen, &e);
                n = fuse_add_direntry_plus(c->req, c->buf + c->pos, c->size - c->pos, name, &e,
                                           (off_t)next_cookie);
                if (n > c->size - c->pos)
                        return 1;
                /* Every entry of a READDIRPLUS reply is a lookup reference. */
                int r = remember(c->m, c->dir, name, attr->ino);
                if (r < 0) {
                        c->err = r;
                        return 1;
                }
        } else {
                struct stat st = {.st_ino = attr->ino, .st_mode = attr->mode & S_IFMT};
                n = fuse_add_direntry(c->req, c->buf + c->pos, c->size - c->pos, name, &st, (off_t)next_cookie);
                if (n > c->size - c->pos)
                        return 1;
        }
        c->pos += n;
        return 0;
}

/* Zeroes the entry and attribute timeouts of the READDIRPLUS records in
 * buf[0, len) (the kernel's layout, linux/fuse.h). */
static void direntplus_expire(char *buf, size_t len) {
        size_t off = 0;
        while (len - off >= FUSE_NAME_OFFSET_DIRENTPLUS) {
                struct fuse_direntplus *d = (struct fuse_direntplus *)(void *)(buf + off);
                size_t rec = FUSE_DIRENTPLUS_SIZE(d);
                if (rec > len - off)
                        break;
                d->entry_out.entry_valid = d->entry_out.attr_valid = 0;
                d->entry_out.entry_valid_nsec = d->entry_out.attr_valid_nsec = 0;
                off += rec;
        }
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus) {
        ntfs_mount *m = req_mount(req);
        if (off < 0) {
                fuse_reply_err(req, EINVAL);
                return;
        }
        size = NTFS_MIN(size, (size_t)MOUNT_MAX_WRITE);
        _cleanup_free_ char *buf = malloc(size ? size : 1);
        if (!buf) {
                fuse_reply_err(req, ENOMEM);
                return;
        }
        struct rd_ctx c = {.req = req, .m = m, .buf = buf, .size = size, .dir = ino, .plus = plus};
        uint64_t epoch = cache_epoch(m);
        c.gen = ntfs_ws_generation(m->ws);
        /* no more entries are read than the smallest records could fill */
        size_t rec_min = plus ? FUSE_DIRENT_ALIGN(FUSE_NAME_OFFSET_DIRENTPLUS + 1)
                              : FUSE_DIRENT_ALIGN(FUSE_NAME_OFFSET + 1);
        int r = ntfs_ws_readdir(m->ws, ino, (uint64_t)off, plus, size / rec_min + 1, rd_cb, &c);
        if (r < 0 && c.pos == 0) {
                reply_err(req, r);
                return;
        }
        if (c.err < 0 && c.pos == 0) {
                reply_err(req, c.err);
                return;
        }
        if (plus && cache_epoch(m) != epoch)
                direntplus_expire(buf, c.pos); /* as reply_entry does */
        fuse_reply_buf(req, buf, c.pos);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
        do_readdir(req, ino, size, off, false);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
        do_readdir(req, ino, size, off, true);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) { fuse_reply_err(req, 0); }

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) { do_fsync(req); }

static void op_statfs(fuse_req_t req, fuse_ino_t ino) {
        struct statvfs sv;
        int r = ntfs_ws_statfs(req_mount(req)->ws, &sv);
        if (r < 0)
                reply_err(req, r);
        else
                fuse_reply_statfs(req, &sv);
}

/* POSIX ACLs are not supported (no FUSE_CAP_POSIX_ACL: the kernel would
 * fetch ACLs for permission checks). Without it the kernel hands
 * system.posix_acl_* to us as plain xattrs; storing them would be a lie
 * that cp -a and rsync -A fall for (they set a mode-equivalent ACL instead
 * of chmod). A mode-equivalent access ACL is applied as chmod; anything
 * else is EOPNOTSUPP, which makes those programs fall back to chmod. */
#define ACL_XATTR_VERSION 2
#define ACL_USER_OBJ 0x01
#define ACL_GROUP_OBJ 0x04
#define ACL_MASK 0x10
#define ACL_OTHER 0x20

static int acl_to_mode(const char *value, size_t size, uint32_t *ret) {
        if (size < 4 || (size - 4) % 8 != 0)
                return -EINVAL;
        uint32_t version;
        memcpy(&version, value, 4);
        if (version != ACL_XATTR_VERSION)
                return -EINVAL;
        uint32_t mode = 0, seen = 0;
        for (size_t off = 4; off < size; off += 8) {
                uint16_t tag, perm;
                memcpy(&tag, value + off, 2);
                memcpy(&perm, value + off + 2, 2);
                perm &= 7;
                switch (tag) {
                case ACL_USER_OBJ: mode |= (uint32_t)perm << 6; break;
                case ACL_GROUP_OBJ: mode |= (uint32_t)perm << 3; break;
                case ACL_OTHER: mode |= perm; break;
                default: return -EOPNOTSUPP; /* named users/groups, mask: a real ACL */
                }
                if (seen & tag)
                        return -EINVAL;
                seen |= tag;
        }
        if (seen != (ACL_USER_OBJ | ACL_GROUP_OBJ | ACL_OTHER))
                return -EINVAL;
        *ret = mode;
        return 0;
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
                        int flags) {
        ntfs_mount *m = req_mount(req);
        if (strncmp(name, "system.posix_acl_", 17) == 0) {
                uint32_t perm;
                int r = strcmp(name, "system.posix_acl_access") == 0 ? acl_to_mode(value, size, &perm)
                                                                      : -EOPNOTSUPP;
                struct ntfs_attr cur, out;
                if (r >= 0)
                        r = ntfs_ws_getattr(m->ws, ino, &cur);
                if (r >= 0 && fuse_req_ctx(req)->uid != 0 && fuse_req_ctx(req)->uid != cur.uid)
                        r = -EPERM;
                if (r >= 0) {
                        struct ntfs_attr in = {.ino = ino, .mode = (cur.mode & ~(uint32_t)0777) | perm};
                        r = ntfs_ws_setattr(m->ws, ino, &in, NTFS_SET_MODE, &out);
                }
                reply_err(req, r);
                return;
        }
        reply_err(req, ntfs_ws_setxattr(m->ws, ino, name, value, size, flags));
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size) {
        ntfs_mount *m = req_mount(req);
        if (size == 0) {
                ssize_t r = ntfs_ws_getxattr(m->ws, ino, name, NULL, 0);
                if (r < 0)
                        reply_err(req, (int)r);
                else
                        fuse_reply_xattr(req, (size_t)r);
                return;
        }
        size = NTFS_MIN(size, (size_t)MOUNT_XATTR_MAX);
        _cleanup_free_ char *buf = malloc(size);
        if (!buf) {
                fuse_reply_err(req, ENOMEM);
                return;
        }
        ssize_t r = ntfs_ws_getxattr(m->ws, ino, name, buf, size);
        if (r < 0)
                reply_err(req, (int)r);
        else if ((size_t)r > size)
                fuse_reply_err(req, ERANGE);
        else
                fuse_reply_buf(req, buf, (size_t)r);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
        ntfs_mount *m = req_mount(req);
        if (size == 0) {
                ssize_t r = ntfs_ws_listxattr(m->ws, ino, NULL, 0);
                if (r < 0)
                        reply_err(req, (int)r);
                else
                        fuse_reply_xattr(req, (size_t)r);
                return;
        }
        size = NTFS_MIN(size, (size_t)MOUNT_XATTR_MAX);
        _cleanup_free_ char *buf = malloc(size);
        if (!buf) {
                fuse_reply_err(req, ENOMEM);
                return;
        }
        ssize_t r = ntfs_ws_listxattr(m->ws, ino, buf, size);
        if (r < 0)
                reply_err(req, (int)r);
        else if ((size_t)r > size)
                fuse_reply_err(req, ERANGE);
        else
                fuse_reply_buf(req, buf, (size_t)r);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name) {
        reply_err(req, ntfs_ws_removexattr(req_mount(req)->ws, ino, name));
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                         struct fuse_file_info *fi) {
        if (off < 0 || len <= 0) {
                fuse_reply_err(req, EINVAL);
                return;
        }
        if (mode != 0) {
                fuse_reply_err(req, EOPNOTSUPP);
                return;
        }
        reply_err(req, ntfs_ws_fallocate(req_mount(req)->ws, ino, mode, (uint64_t)off, (uint64_t)len));
}

/* No getlk/setlk/flock: the kernel then does POSIX and flock locking
 * locally, which is exact since every user of the workspace goes through
 * this one mount. */
static const struct fuse_lowlevel_ops mount_ops = {
        .init = op_init,
        .lookup = op_lookup,
        .forget = op_forget,
        .forget_multi = op_forget_multi,
        .getattr = op_getattr,
        .setattr = op_setattr,
        .readlink = op_readlink,
        .mknod = op_mknod,
        .mkdir = op_mkdir,
        .unlink = op_unlink,
        .rmdir = op_rmdir,
        .symlink = op_symlink,
        .rename = op_rename,
        .link = op_link,
        .open = op_open,
        .read = op_read,
        .write = op_write,
        .flush = op_flush,
        .release = op_release,
        .fsync = op_fsync,
        .opendir = op_opendir,
        .readdir = op_readdir,
        .readdirplus = op_readdirplus,
        .releasedir = op_releasedir,
        .fsyncdir = op_fsyncdir,
        .statfs = op_statfs,
        .setxattr = op_setxattr,
        .getxattr = op_getxattr,
        .listxattr = op_listxattr,
        .removexattr = op_removexattr,
        .create = op_create,
        .fallocate = op_fallocate,
};

/* op_open / op_opendir answer ENOSYS when the kernel can do without them;
 * decided per request because capable is only known at INIT. */
static void op_open_noopen(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        fuse_reply_err(req, ENOSYS);
}

/* ---- invalidation ---------------------------------------------------- */

struct inval_entry {
        uint64_t parent;
        char *name;
        size_t len;
};

void ntfs_mount_invalidate_all(ntfs_mount *m) {
        if (!m)
                return;
        _cleanup_free_ struct inval_entry *ents = NULL;
        _cleanup_free_ uint64_t *inos = NULL;
        size_t ne = 0, ni = 0;

        if (tls_fuse_worker) {
                pthread_mutex_lock(&m->lock);
                m->inval_requested = true;
                pthread_cond_broadcast(&m->cond);
                pthread_mutex_unlock(&m->lock);
                return;
        }
        pthread_mutex_lock(&m->lock);
        if (m->stopping || m->loop_ended) {
                pthread_mutex_unlock(&m->lock);
                return;
        }
        m->cb_running++;
        pthread_mutex_unlock(&m->lock);
        pthread_mutex_lock(&m->inval_lock);
        pthread_mutex_lock(&m->lock);
        ents = calloc(m->nentries ? m->nentries : 1, sizeof(*ents));
        inos = calloc(m->ninodes + 1, sizeof(*inos));
        if (ents && inos) {
                /* Entries: copied out, then forgotten (the kernel drops its
                 * dentries now; new lookups record new ones). Inodes keep
                 * their lookup counts: the kernel still FORGETs them. */
                for (size_t i = 0; i < m->nebuckets; i++) {
                        while (m->ebuckets[i]) {
                                struct kentry *e = m->ebuckets[i];
                                char *nm = malloc(e->namelen + 1);
                                if (nm) {
                                        memcpy(nm, e->name, e->namelen + 1);
                                        ents[ne++] = (struct inval_entry){e->parent, nm, e->namelen};
                                }
                                kentry_free(m, e);
                        }
                }
                inos[ni++] = NTFS_ROOT_INO;
                for (size_t i = 0; i < m->nibuckets; i++)
                        for (struct kinode *n = m->ibuckets[i]; n; n = n->hnext)
                                if (n->ino != NTFS_ROOT_INO)
                                        inos[ni++] = n->ino;
        }
        pthread_mutex_unlock(&m->lock);

        if (!ents || !inos) {
                /* Out of memory: the least we can do is the root. */
                fuse_lowlevel_notify_inval_inode(m->se, NTFS_ROOT_INO, 0, 0);
        } else {
                for (size_t i = 0; i < ne; i++) {
                        int r = fuse_lowlevel_notify_inval_entry(m->se, ents[i].parent, ents[i].name,
                                                                 ents[i].len);
                        if (r < 0 && r != -ENOENT)
                                mdebug("inval_entry %" PRIu64 "/%s: %d", ents[i].parent,
                                          ents[i].name, r);
                        free(ents[i].name);
                }
                for (size_t i = 0; i < ni; i++)
                        (void)fuse_lowlevel_notify_inval_inode(m->se, inos[i], 0, 0);
        }

        pthread_mutex_unlock(&m->inval_lock);
        pthread_mutex_lock(&m->lock);
        m->cb_running--;
        m->invalidations++;
        pthread_cond_broadcast(&m->cond);
        pthread_mutex_unlock(&m->lock);
}

static void ws_invalidated(ntfs_ws *ws, void *ud) { ntfs_mount_invalidate_all(ud); }

/* Another mount of the session changed ino's data (the store calls this
 * with its lock held, in the writer's thread): queue it for inval_main if
 * this kernel knows the inode. Without FUSE_AUTO_INVAL_DATA nothing else
 * would drop the pages it holds: a same-size rewrite changes only the
 * mtime, which the kernel then does not compare. */
static void ws_data_changed(ntfs_ws *ws, uint64_t ino, void *ud) {
        (void)ws;
        ntfs_mount *m = ud;
        pthread_mutex_lock(&m->lock);
        if (!m->inval_requested && kinode_find(m, ino)) {
                bool queued = false;
                for (size_t i = m->dq_n; i-- > 0 && !queued;)
                        queued = m->dq[i] == ino;
                if (!queued && m->dq_n == MOUNT_DQ_MAX) {
                        m->inval_requested = true; /* too many: all of it */
                        m->dq_n = 0;
                } else if (!queued)
                        m->dq[m->dq_n++] = ino;
                pthread_cond_broadcast(&m->cond);
        }
        pthread_mutex_unlock(&m->lock);
}

/* Drops the queued inodes' attributes and pages in the kernel (inval_main,
 * m->lock held on entry and exit). */
static void drop_queued_data(ntfs_mount *m) {
        uint64_t inos[MOUNT_DQ_MAX];
        size_t n = m->dq_n;
        memcpy(inos, m->dq, n * sizeof(inos[0]));
        m->dq_n = 0;
        if (m->stopping || m->loop_ended)
                return;
        pthread_mutex_unlock(&m->lock);
        pthread_mutex_lock(&m->inval_lock);
        for (size_t i = 0; i < n; i++)
                (void)fuse_lowlevel_notify_inval_inode(m->se, inos[i], 0, 0);
        pthread_mutex_unlock(&m->inval_lock);
        pthread_mutex_lock(&m->lock);
}

/* The negative entries reached MOUNT_NEG_MAX: invalidate them in the kernel
 * and forget them (run by inval_main, never by a worker). Holds inval_lock
 * so that a rollback's invalidation does not interleave. */
static void purge_negatives(ntfs_mount *m) {
        pthread_mutex_lock(&m->inval_lock);
        pthread_mutex_lock(&m->lock);
        m->neg_purge = false;
        size_t cap = m->nneg, ne = 0;
        struct inval_entry *ents = calloc(cap ? cap : 1, sizeof(*ents));
        for (size_t i = 0; ents && i < m->nebuckets; i++) {
                struct kentry **p = &m->ebuckets[i];
                while (*p) {
                        struct kentry *e = *p;
                        if (e->inode || ne >= cap) {
                                p = &e->hnext;
                                continue;
                        }
                        char *nm = malloc(e->namelen + 1);
                        if (!nm) {
                                p = &e->hnext;
                                continue;
                        }
                        memcpy(nm, e->name, e->namelen + 1);
                        ents[ne++] = (struct inval_entry){e->parent, nm, e->namelen};
                        *p = e->hnext;
                        m->nentries--;
                        m->nneg--;
                        free(e);
                }
        }
        pthread_mutex_unlock(&m->lock);
        for (size_t i = 0; i < ne; i++) {
                (void)fuse_lowlevel_notify_inval_entry(m->se, ents[i].parent, ents[i].name, ents[i].len);
                free(ents[i].name);
        }
        free(ents);
        pthread_mutex_unlock(&m->inval_lock);
}

static void *inval_main(void *p) {
        ntfs_mount *m = p;
        pthread_setname_np(pthread_self(), "ntfs-inval");
        pthread_mutex_lock(&m->lock);
        for (;;) {
                while (!m->inval_requested && !m->neg_purge && !m->dq_n && !m->inval_quit)
                        pthread_cond_wait(&m->cond, &m->lock);
                if (m->inval_quit)
                        break;
                if (m->dq_n && !m->inval_requested) {
                        drop_queued_data(m);
                        continue;
                }
                if (m->neg_purge && !m->inval_requested) {
                        pthread_mutex_unlock(&m->lock);
                        purge_negatives(m);
                        pthread_mutex_lock(&m->lock);
                        continue;
                }
                m->inval_requested = false;
                m->dq_n = 0; /* the whole run drops those too */
                pthread_mutex_unlock(&m->lock);
                ntfs_mount_invalidate_all(m);
                pthread_mutex_lock(&m->lock);
        }
        pthread_mutex_unlock(&m->lock);
        return NULL;
}

/* ---- lifecycle ----------------------------------------------------------- */

void ntfs_mount_opts_init(struct ntfs_mount_opts *o) {
        memset(o, 0, sizeof(*o));
        o->allow_other = true;
        o->max_threads = 8;
        o->entry_timeout = MOUNT_TIMEOUT;
        o->attr_timeout = MOUNT_TIMEOUT;
        o->fsname = "ntfs";
}

static void *loop_main(void *p) {
        ntfs_mount *m = p;
        pthread_setname_np(pthread_self(), "ntfs-loop");
        int r = fusepool_run(m->se, m->max_threads, "ntfs-fuse-wk");
        mdebug("loop at %s ended (%d)", m->mountpoint, r);
        pthread_mutex_lock(&m->lock);
        m->loop_ended = true;
        bool notify = !m->stopping;
        pthread_cond_broadcast(&m->cond);
        pthread_mutex_unlock(&m->lock);
        if (notify && m->on_exit)
                m->on_exit(m, m->on_exit_ud);
        return NULL;
}

/* The kernel reads ahead at most the mount's bdi read_ahead_kb (128 KiB by
 * default; INIT's max_readahead can only lower it), which cut a sequential
 * read into 128-256 KiB READs, each a hand-off between FUSE worker threads.
 * Raised to MOUNT_MAX_WRITE, a sequential read is 1 MiB READs
 * (docs/mount.md). NTFS_FUSE_READAHEAD_KB=N sets another value (0 leaves
 * the kernel's), to measure it. Best effort: without sysfs the default
 * stays. */
static void set_readahead(ntfs_mount *m) {
        uint64_t kb = MOUNT_MAX_WRITE / 1024, v;
        const char *env = getenv("NTFS_FUSE_READAHEAD_KB");
        if (env && *env && ntfs_parse_u64(env, 1u << 20, &v) == 0)
                kb = v;
        else if (env && *env)
                mdebug("NTFS_FUSE_READAHEAD_KB=%s is not a number of KiB up to 1048576; using %" PRIu64, env, kb);
        if (!m->have_dev || kb == 0)
                return;
        char path[128], val[32];
        snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", major(m->dev), minor(m->dev));
        snprintf(val, sizeof(val), "%" PRIu64, kb);
        int r = ntfs_write_attr(path, val);
        if (r < 0)
                mdebug("cannot set %s to %s: %s", path, val, strerror(-r));
}

/* Aborts the FUSE connection through fusectl (mounting it when the host
 * has not: it is the only way to end a connection whose mount is lazily
 * detached but still in use). */
static void abort_connection(ntfs_mount *m) {
        if (!m->have_dev)
                return;
        char path[128];
        snprintf(path, sizeof(path), "/sys/fs/fuse/connections/%u/abort", minor(m->dev));
        bool mounted_ctl = false;
        int r = ntfs_write_attr(path, "1");
        if (r == -ENOENT && geteuid() == 0) {
                if (mount("fusectl", "/sys/fs/fuse/connections", "fusectl", 0, NULL) < 0)
                        mdebug("mounting fusectl: %s", strerror(errno));
                else
                        mounted_ctl = true;
                r = ntfs_write_attr(path, "1");
        }
        if (r < 0)
                mdebug("cannot abort connection %u: %s", minor(m->dev), strerror(-r));
        if (mounted_ctl) /* leave the host as it was */
                (void)umount2("/sys/fs/fuse/connections", MNT_DETACH);
}

/* Waits until the loop ended or timeout_ms passed; true if it ended. */
static bool wait_loop_end(ntfs_mount *m, int timeout_ms) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&m->lock);
        while (!m->loop_ended)
                if (pthread_cond_timedwait(&m->cond, &m->lock, &ts) == ETIMEDOUT)
                        break;
        bool ended = m->loop_ended;
        pthread_mutex_unlock(&m->lock);
        return ended;
}

extern char **environ;

static int run_fusermount_lazy(const char *mp) {
        char *argv[] = {(char *)"fusermount3", (char *)"-u", (char *)"-z", (char *)"--", (char *)mp, NULL};
        pid_t pid;
        int r = posix_spawnp(&pid, "fusermount3", NULL, NULL, argv, environ);
        if (r != 0)
                return -r;
        int st;
        while (waitpid(pid, &st, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}

/* Unmounts the mountpoint: plain first, lazily if busy. */
static int do_unmount(ntfs_mount *m) {
        if (geteuid() != 0)
                return run_fusermount_lazy(m->mountpoint);
        if (umount2(m->mountpoint, UMOUNT_NOFOLLOW) == 0)
                return 0;
        int err = errno;
        if (err == EINVAL || err == ENOENT)
                return 0; /* not mounted any more */
        if (umount2(m->mountpoint, MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
                return 0;
        return errno == EINVAL ? 0 : -errno;
}

static void mount_free(ntfs_mount *m) {
        if (!m)
                return;
        if (m->se)
                fuse_session_destroy(m->se);
        for (size_t i = 0; m->ebuckets && i < m->nebuckets; i++)
                while (m->ebuckets[i])
                        kentry_free(m, m->ebuckets[i]);
        for (size_t i = 0; m->ibuckets && i < m->nibuckets; i++) {
                struct kinode *n = m->ibuckets[i];
                while (n) {
                        struct kinode *next = n->hnext;
                        free(n);
                        n = next;
                }
        }
        free(m->ebuckets);
        free(m->ibuckets);
        free(m->mountpoint);
        pthread_mutex_destroy(&m->lock);
        pthread_mutex_destroy(&m->inval_lock);
        pthread_cond_destroy(&m->cond);
        free(m);
}

/* NTFS_FUSE_STATS=PATH: the request counts, one "OPCODE COUNT NS WAIT" line
 * per opcode seen (fusefloor -o stats format plus NS, the handlers' total
 * time from reading the request to writing its reply, and WAIT, the part of
 * NS spent waiting for the store's lock; "OTHER" is out-of-table opcodes),
 * written when the mount stops (the file is replaced). A measuring aid:
 * failures are ignored. */
static void write_stats(ntfs_mount *m) {
        const char *path = m->stats_path;
        if (!path)
                return;
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return;
        char buf[4096];
        size_t pos = 0;
        for (int i = 0; i < MOUNT_NOPC; i++) {
                uint64_t n = atomic_load(&m->opcounts[i]);
                if (n == 0)
                        continue;
                int k = snprintf(buf + pos, sizeof(buf) - pos, "%s %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
                                 i ? opc_names[i] : "OTHER", n, atomic_load(&m->opns[i]),
                                 atomic_load(&m->opwait[i]));
                if (k < 0 || (size_t)k >= sizeof(buf) - pos)
                        break;
                pos += (size_t)k;
        }
        for (size_t off = 0; off < pos;) {
                ssize_t w = write(fd, buf + off, pos - off);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        break;
                off += (size_t)w;
        }
}

int ntfs_mount_stop(ntfs_mount *m) {
        if (!m)
                return 0;
        int ret = 0;

        ntfs_ws_set_invalidate_cb(m->ws, NULL, NULL);
        ntfs_ws_set_data_cb(m->ws, NULL, NULL);
        pthread_mutex_lock(&m->lock);
        m->stopping = true;
        while (m->cb_running > 0)
                pthread_cond_wait(&m->cond, &m->lock);
        bool ended = m->loop_ended;
        m->inval_quit = true;
        pthread_cond_broadcast(&m->cond);
        pthread_mutex_unlock(&m->lock);
        if (m->inval_thread_started)
                pthread_join(m->inval_thread, NULL);

        if (m->loop_started) {
                fuse_session_exit(m->se);
                if (!ended) {
                        int r = do_unmount(m);
                        if (r < 0) {
                                mdebug("unmount %s: %d", m->mountpoint, r);
                                ret = r;
                        }
                        /* A lazily unmounted, busy mount keeps its connection
                         * until its last user leaves: give it a moment, then
                         * abort the connection so the threads can end. */
                        if (!wait_loop_end(m, 2000)) {
                                abort_connection(m);
                                if (!wait_loop_end(m, 10000))
                                        mdebug("loop at %s does not end", m->mountpoint);
                        }
                }
                pthread_join(m->loop_thread, NULL);
        }
        /* The connection is gone (POLLERR on the fd): this only closes it. */
        fuse_session_unmount(m->se);
        write_stats(m);
        mount_free(m);
        return ret;
}

static int own_mount_call(const char *mountpoint, dev_t *dev);

int ntfs_mount_start(ntfs_ws *ws, const struct ntfs_mount_opts *o, ntfs_mount **ret) {
        if (!ws || !o || !o->mountpoint || !ret)
                return -EINVAL;
        struct stat st;
        if (stat(o->mountpoint, &st) < 0)
                return -errno;
        if (!S_ISDIR(st.st_mode))
                return -ENOTDIR;

        ntfs_mount *m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        pthread_mutex_init(&m->lock, NULL);
        pthread_mutex_init(&m->inval_lock, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_cond_init(&m->cond, &ca);
        pthread_condattr_destroy(&ca);
        m->ws = ws;
        m->read_only = o->read_only || ntfs_ws_readonly(ws);
        m->entry_timeout = o->entry_timeout >= 0 ? o->entry_timeout : MOUNT_TIMEOUT;
        m->attr_timeout = o->attr_timeout >= 0 ? o->attr_timeout : MOUNT_TIMEOUT;
        m->max_threads = o->max_threads ? NTFS_MIN(o->max_threads, FUSEPOOL_MAX) : 8;
        const char *stats = getenv("NTFS_FUSE_STATS");
        m->stats_path = stats && *stats ? stats : NULL;
        m->on_exit = o->on_exit;
        m->on_exit_ud = o->on_exit_ud;
        m->on_fsync = o->on_fsync;
        m->on_fsync_ud = o->on_fsync_ud;
        if (o->debug)
                mount_debug = true;
        m->nibuckets = 256;
        m->nebuckets = 256;
        m->ibuckets = calloc(m->nibuckets, sizeof(*m->ibuckets));
        m->ebuckets = calloc(m->nebuckets, sizeof(*m->ebuckets));
        m->mountpoint = realpath(o->mountpoint, NULL);
        if (!m->ibuckets || !m->ebuckets || !m->mountpoint) {
                mount_free(m);
                return -ENOMEM;
        }

        /* Mount options. default_permissions: the kernel checks modes and
         * ownership (docs/mount.md says why not the daemon). */
        const char *fsname = o->fsname && *o->fsname ? o->fsname : "ntfs";
        char opts[512];
        int n = snprintf(opts, sizeof(opts), "default_permissions,noatime,fsname=%s,subtype=ntfs%s%s", fsname,
                         o->allow_other ? ",allow_other" : "", m->read_only ? ",ro" : "");
        if (n < 0 || (size_t)n >= sizeof(opts) || strchr(fsname, ',')) {
                mount_free(m);
                return -EINVAL;
        }
        char *argv[] = {(char *)"ntfs", (char *)"-o", opts, (char *)"-d", NULL};
        struct fuse_args args = FUSE_ARGS_INIT(o->debug ? 4 : 3, argv);

        struct fuse_lowlevel_ops ops = mount_ops;
        /* FUSE_CAP_NO_OPEN_SUPPORT / NO_OPENDIR_SUPPORT exist on every kernel
         * this runs on (>= 5.1 / 5.1): ENOSYS makes the kernel stop sending
         * OPEN and OPENDIR. op_open is kept for the fallback case. */
        ops.open = op_open_noopen;
        ops.opendir = op_open_noopen;
        (void)op_open;
        (void)op_opendir;
        /* No CREATE: libfuse answers ENOSYS once, the kernel then creates
         * with MKNOD and opens without OPEN (no_open), so a created file
         * costs no RELEASE at close: -1 request per file (tar, creates;
         * docs/bench-fs.md). O_EXCL, O_TRUNC, umask, setgid directories and
         * writing a just-created 0444 file behave the same (tested).
         * NTFS_FUSE_CREATE=1 keeps CREATE, to measure it. */
        const char *withcreate = getenv("NTFS_FUSE_CREATE");
        if (!(withcreate && *withcreate == '1'))
                ops.create = NULL;

        m->se = fuse_session_new(&args, &ops, sizeof(ops), m);
        fuse_opt_free_args(&args);
        if (!m->se) {
                mount_free(m);
                return -EINVAL;
        }
        if (fuse_session_mount(m->se, m->mountpoint) != 0) {
                mount_free(m);
                return -EIO;
        }
        static const struct fuse_custom_io io = {.writev = io_writev, .read = io_read};
        if (fuse_session_custom_io(m->se, &io, fuse_session_fd(m->se)) != 0)
                mdebug("cannot install the INIT patch; running without it");

        ntfs_ws_set_invalidate_cb(ws, ws_invalidated, m);
        if (!m->read_only)
                ntfs_ws_set_data_cb(ws, ws_data_changed, m);

        /* The loop threads get every signal blocked: signals belong to the
         * program's own threads. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int r = pthread_create(&m->inval_thread, NULL, inval_main, m);
        if (r == 0) {
                m->inval_thread_started = true;
                r = pthread_create(&m->loop_thread, NULL, loop_main, m);
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r != 0) {
                if (m->inval_thread_started) {
                        pthread_mutex_lock(&m->lock);
                        m->inval_quit = true;
                        pthread_cond_broadcast(&m->cond);
                        pthread_mutex_unlock(&m->lock);
                        pthread_join(m->inval_thread, NULL);
                }
                ntfs_ws_set_invalidate_cb(ws, NULL, NULL);
                ntfs_ws_set_data_cb(ws, NULL, NULL);
                fuse_session_unmount(m->se);
                mount_free(m);
                return -r;
        }
        m->loop_started = true;

        /* Wait for INIT to be answered, so the caller can use the mount. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += MOUNT_INIT_TIMEOUT_S;
        pthread_mutex_lock(&m->lock);
        while (!m->init_done && !m->loop_ended)
                if (pthread_cond_timedwait(&m->cond, &m->lock, &ts) == ETIMEDOUT)
                        break;
        bool ok = m->init_done && !m->loop_ended;
        pthread_mutex_unlock(&m->lock);
        if (!ok) {
                ntfs_mount_stop(m);
                return -ETIMEDOUT;
        }
        if (own_mount_call(m->mountpoint, &m->dev) == 0)
                m->have_dev = true;
        set_readahead(m);
        *ret = m;
        return 0;
}

const char *ntfs_mount_point(const ntfs_mount *m) { return m ? m->mountpoint : NULL; }

ntfs_ws *ntfs_mount_ws(const ntfs_mount *m) { return m ? m->ws : NULL; }

bool ntfs_mount_alive(const ntfs_mount *m) {
        ntfs_mount *mm = (ntfs_mount *)m;
        pthread_mutex_lock(&mm->lock);
        bool alive = !mm->loop_ended;
        pthread_mutex_unlock(&mm->lock);
        return alive;
}

/* Requests to this process's own mounts (open + syncfs of a mountpoint
 * before a checkpoint, its st_dev after a mount) are made by a helper
 * process, not by a thread of this one. Made by a thread, a kill -9 arriving
 * after a FUSE worker has read such a request (and before it answered)
 * leaves that thread waiting for the answer uninterruptibly: the process
 * never finishes dying, so it never closes /dev/fuse, which is what would
 * abort the wait -- a zombie holding the store's lock and its mounts until
 * someone aborts the connections by hand (found by tools/crash-loop-fs.py).
 * The helper holds no /dev/fuse fd, so once the dying process's fds close,
 * its request fails with ENOTCONN; it exits at EOF on its socket, when this
 * process closes it or dies (no PR_SET_PDEATHSIG: that fires when the
 * forking THREAD exits). One helper per process,
 * forked on first use; calls are serialized by helper_lock. The child makes
 * system calls only (fork of a threaded process). It shares the daemon's
 * pages copy-on-write for as long as it lives: big tables written at
 * random are kept out of it (the store's inode cache, MADV_DONTFORK). */
struct helper_req {
        char op; /* 's' syncfs, 'd' st_dev */
        char path[PATH_MAX];
};
struct helper_reply {
        int err;
        dev_t dev;
};
static pthread_mutex_t helper_lock = PTHREAD_MUTEX_INITIALIZER;
static int helper_fd = -1;
static pid_t helper_pid;

static _Noreturn void helper_main(int fd) {
        if (fd > 3)
                (void)close_range(3, (unsigned)fd - 1, 0);
        (void)close_range((unsigned)fd + 1, ~0u, 0);
        struct helper_req q;
        for (;;) {
                ssize_t n = recv(fd, &q, sizeof q, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        _exit(0);
                struct helper_reply a = { 0 };
                q.path[sizeof q.path - 1] = 0;
                if (q.op == 'd') {
                        /* st_dev is the superblock's: AT_STATX_DONT_SYNC
                         * takes it without a GETATTR (and no open, so no
                         * OPENDIR). Fetched, the root's attributes could
                         * race a caller's first stat of the new mount and
                         * cost it a second GETATTR. */
                        struct statx sx;
                        if (statx(AT_FDCWD, q.path, AT_STATX_DONT_SYNC | AT_NO_AUTOMOUNT, STATX_TYPE,
                                  &sx) < 0)
                                a.err = errno;
                        else
                                a.dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
                } else {
                        int f = open(q.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                        if (f < 0 || syncfs(f) < 0)
                                a.err = errno;
                        if (f >= 0)
                                close(f);
                }
                if (send(fd, &a, sizeof a, MSG_NOSIGNAL) != (ssize_t)sizeof a)
                        _exit(0);
        }
}

static int own_mount_call(const char *mountpoint, dev_t *dev) {
        struct helper_req q = { .op = dev ? 'd' : 's' };
        if (strlen(mountpoint) >= sizeof q.path)
                return -ENAMETOOLONG;
        memcpy(q.path, mountpoint, strlen(mountpoint) + 1);
        pthread_mutex_lock(&helper_lock);
        int r = 0;
        for (int attempt = 0; attempt < 2; attempt++) {
                if (helper_fd < 0) {
                        int sv[2];
                        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
                                r = -errno;
                                break;
                        }
                        pid_t pid = fork();
                        if (pid < 0) {
                                r = -errno;
                                close(sv[0]);
                                close(sv[1]);
                                break;
                        }
                        if (pid == 0)
                                helper_main(sv[1]);
                        close(sv[1]);
                        helper_fd = sv[0];
                        helper_pid = pid;
                }
                struct helper_reply a;
                ssize_t n = send(helper_fd, &q, offsetof(struct helper_req, path) + strlen(q.path) + 1,
                                 MSG_NOSIGNAL);
                if (n > 0) {
                        do
                                n = recv(helper_fd, &a, sizeof a, 0);
                        while (n < 0 && errno == EINTR);
                }
                if (n == (ssize_t)sizeof a) {
                        r = -a.err;
                        if (r == 0 && dev)
                                *dev = a.dev;
                        break;
                }
                /* The helper died (killed from outside): reap it, start another. */
                close(helper_fd);
                helper_fd = -1;
                while (waitpid(helper_pid, NULL, 0) < 0 && errno == EINTR)
                        ;
                r = -EIO;
        }
        pthread_mutex_unlock(&helper_lock);
        return r;
}

int ntfs_mount_flush_kernel(ntfs_mount *m) {
        if (!m)
                return -EINVAL;
        if (!ntfs_mount_alive(m))
                return 0;
        return own_mount_call(m->mountpoint, NULL);
}

void ntfs_mount_get_stats(ntfs_mount *m, struct ntfs_mount_stats *ret) {
        memset(ret, 0, sizeof(*ret));
        pthread_mutex_lock(&m->lock);
        ret->known_inodes = m->ninodes;
        ret->known_entries = m->nentries;
        ret->invalidations = m->invalidations;
        ret->parallel_dirops = m->parallel_dirops;
        ret->handle_killpriv = m->handle_killpriv;
        pthread_mutex_unlock(&m->lock);
}
