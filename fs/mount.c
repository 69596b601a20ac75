/* SPDX-License-Identifier: MIT
 * mount.c — the FUSE low-level session of one mounted workspace.
 *
 * Every request maps to one ntfs_ws_* call (the handlers: mount-ops.c).
 * What lives here, or in mount-ops.c where it says so:
 *   - the kernel's lookup counts per inode (FORGET at zero -> ntfs_ws_forget;
 *     mount-ops.c)
 *   - the (parent, name) -> inode entries the kernel was told about (lookup,
 *     create, mknod, mkdir, symlink, link, readdirplus), kept up to date on
 *     unlink/rmdir/rename and dropped with their inode at FORGET, so that a
 *     rollback invalidates exactly what the kernel may cache
 *     and the negative entries the kernel caches (inode NULL, bounded;
 *     mount-ops.c)
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
#include <poll.h>
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
#include "fs/mount-flush.h"
#include "fs/mount.h"
#include "fs/mount-internal.h"
#include "common/banned.h"

bool mount_debug; /* mount-internal.h: mdebug */

/* Set in the threads that read /dev/fuse (libfuse's workers). */
static __thread bool tls_fuse_worker;

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
__thread bool mount_tls_write_kill;

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
        mount_tls_write_kill = false;
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
                        mount_tls_write_kill = (wi.write_flags & FUSE_WRITE_KILL_SUIDGID) != 0;
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

void mount_op_init(void *ud, struct fuse_conn_info *conn) {
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
        /* POSIX ACLs (docs/mount.md): the kernel enforces them (it reads
         * system.posix_acl_access for a permission check and caches it);
         * the store keeps them as xattrs, the mode in step with the access
         * ACL, and the parent's default ACL inherited on create, for which
         * the umask must not be applied first: DONT_MASK, and the umask
         * comes with MKNOD/MKDIR (op_mknod, op_mkdir). NTFS_FUSE_NO_POSIX_ACL=1
         * turns them off (to measure them; setting an ACL is then
         * EOPNOTSUPP). */
        const char *noacl = getenv("NTFS_FUSE_NO_POSIX_ACL");
        if ((conn->capable & FUSE_CAP_POSIX_ACL) && (conn->capable & FUSE_CAP_DONT_MASK) &&
            !(noacl && *noacl == '1')) {
                conn->want |= FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK;
                m->posix_acl = true;
        }
        /* The reply follows at once (the kernel holds requests until it has
         * it); io_writev marks INIT done too, after the patch. */
        pthread_mutex_lock(&m->lock);
        m->init_done = true;
        pthread_cond_broadcast(&m->cond);
        pthread_mutex_unlock(&m->lock);
}

/* ---- invalidation ---------------------------------------------------- */

struct inval_entry {
        uint64_t parent;
        char *name;
        size_t len;
};

/* The start of an invalidation run. A FUSE worker never notifies (the
 * kernel may wait on the very request it serves): it asks the invalidation
 * thread for a whole invalidation instead, as does a run on a stopping
 * mount, and false is returned. Else the run is counted (cb_running),
 * runs are serialized (inval_lock), and m->lock is held on return. */
static bool inval_run_begin(ntfs_mount *m) {
        if (tls_fuse_worker) {
                pthread_mutex_lock(&m->lock);
                m->inval_requested = true;
                pthread_cond_broadcast(&m->cond);
                pthread_mutex_unlock(&m->lock);
                return false;
        }
        pthread_mutex_lock(&m->lock);
        if (m->stopping || m->loop_ended) {
                pthread_mutex_unlock(&m->lock);
                return false;
        }
        m->cb_running++;
        pthread_mutex_unlock(&m->lock);
        pthread_mutex_lock(&m->inval_lock);
        pthread_mutex_lock(&m->lock);
        return true;
}

/* The end of a run begun by inval_run_begin, inval_lock released: done
 * counts it, else a whole invalidation is asked of the invalidation thread. */
static void inval_run_end(ntfs_mount *m, bool done) {
        pthread_mutex_lock(&m->lock);
        m->cb_running--;
        if (done)
                m->invalidations++;
        else
                m->inval_requested = true;
        pthread_cond_broadcast(&m->cond);
        pthread_mutex_unlock(&m->lock);
}

void ntfs_mount_invalidate_all(ntfs_mount *m) {
        if (!m)
                return;
        _cleanup_free_ struct inval_entry *ents = NULL;
        _cleanup_free_ uint64_t *inos = NULL;
        size_t ne = 0, ni = 0;

        if (!inval_run_begin(m))
                return;
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
                                mount_kentry_free(m, e);
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
        inval_run_end(m, true);
}

/* What the kernel is told after a rollback in place, in the order of the
 * store's list (a removed directory's entries before it). */
struct note {
        enum { NOTE_DELETE, NOTE_ENTRY, NOTE_INODE, NOTE_FORGET } kind;
        uint64_t parent, ino;
        char *name;
        size_t len;
};

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

/* Turns the store's changes into notes (m->lock held): an entry the kernel
 * was told of that the rollback removed is deleted; an inode it knows
 * whose attributes, content or entries changed is invalidated; a negative
 * entry under a changed directory is invalidated. A removed inode the
 * kernel never knew is forgotten at once (unless another mount of the
 * session may know it). Returns the number of notes, or -ENOMEM. */
static ssize_t changes_to_notes(ntfs_mount *m, const struct ntfs_ws_change *ch, size_t n, struct note *notes,
                                uint64_t *dirs) {
        size_t nn = 0, nd = 0;
        bool shared = ntfs_ws_shared(m->ws);
        for (size_t i = 0; i < n; i++) {
                const struct ntfs_ws_change *c = &ch[i];
                if (c->kind == NTFS_WS_CH_GONE) {
                        size_t len = strlen(c->name);
                        struct kentry *e = mount_kentry_find(m, c->parent, c->name, len);
                        bool known = kinode_find(m, c->ino) != NULL;
                        if (e && e->inode && e->inode->ino == c->ino) {
                                char *nm = strndup(c->name, len);
                                if (!nm)
                                        return -ENOMEM;
                                notes[nn++] = (struct note){NOTE_DELETE, c->parent, c->ino, nm, len};
                                mount_kentry_free(m, e);
                        }
                        if (!known && !shared)
                                notes[nn++] = (struct note){.kind = NOTE_FORGET, .ino = c->ino};
                        continue;
                }
                if (c->kind == NTFS_WS_CH_DIR)
                        dirs[nd++] = c->ino;
                if (kinode_find(m, c->ino))
                        notes[nn++] = (struct note){.kind = NOTE_INODE, .ino = c->ino};
        }
        if (!nd || !m->nneg)
                return (ssize_t)nn;
        qsort(dirs, nd, sizeof *dirs, cmp_u64);
        for (struct kentry *e = m->negs, *next; e; e = next) {
                next = e->inext;
                if (!bsearch(&e->parent, dirs, nd, sizeof *dirs, cmp_u64))
                        continue;
                char *nm = strndup(e->name, e->namelen);
                if (!nm)
                        return -ENOMEM;
                notes[nn++] = (struct note){NOTE_ENTRY, e->parent, 0, nm, e->namelen};
                mount_kentry_free(m, e);
        }
        return (ssize_t)nn;
}

static void send_note(ntfs_mount *m, const struct note *t) {
        int r = 0;
        switch (t->kind) {
        case NOTE_DELETE:
                /* The kernel refuses a directory still holding entries in
                 * use (a shell's cwd below it): then it is only unhashed. */
                r = fuse_lowlevel_notify_delete(m->se, t->parent, t->ino, t->name, t->len);
                if (r < 0 && r != -ENOENT)
                        r = fuse_lowlevel_notify_inval_entry(m->se, t->parent, t->name, t->len);
                break;
        case NOTE_ENTRY:
                r = fuse_lowlevel_notify_inval_entry(m->se, t->parent, t->name, t->len);
                break;
        case NOTE_INODE:
                r = fuse_lowlevel_notify_inval_inode(m->se, t->ino, 0, 0);
                break;
        case NOTE_FORGET:
                break; /* after the notifications, without inval_lock */
        }
        if (r < 0 && r != -ENOENT)
                mdebug("rollback note %d for %" PRIu64 "/%" PRIu64 ": %d", (int)t->kind, t->parent, t->ino, r);
}

/* A rollback in place changed what ch lists: the kernel drops exactly
 * that (docs/mount.md, "Rollback in place"). Inode numbers the kernel
 * holds stay valid, so its dentries of kept paths stay too: a process
 * sitting in a kept directory keeps its cwd. */
static void mount_apply_changes(ntfs_mount *m, const struct ntfs_ws_change *ch, size_t n) {
        if (!inval_run_begin(m)) /* never from a worker: all, by inval_main */
                return;
        ssize_t nn = -ENOMEM;
        size_t cap = 2 * n + m->nneg + 1; /* a removal: a delete and a forget */
        struct note *notes = calloc(cap, sizeof *notes);
        uint64_t *dirs = calloc(n + 1, sizeof *dirs);
        if (notes && dirs)
                nn = changes_to_notes(m, ch, n, notes, dirs);
        pthread_mutex_unlock(&m->lock);
        if (nn < 0) {
                /* out of memory: everything, the least that is right */
                for (size_t i = 0; notes && i < cap; i++)
                        free(notes[i].name);
                free(notes);
                free(dirs);
                pthread_mutex_unlock(&m->inval_lock);
                inval_run_end(m, false);
                return;
        }
        for (ssize_t i = 0; i < nn; i++)
                send_note(m, &notes[i]);
        pthread_mutex_unlock(&m->inval_lock);
        for (ssize_t i = 0; i < nn; i++) {
                if (notes[i].kind == NOTE_FORGET)
                        ntfs_ws_forget(m->ws, notes[i].ino);
                free(notes[i].name);
        }
        free(notes);
        free(dirs);
        inval_run_end(m, true);
}

static void ws_invalidated(ntfs_ws *ws, const struct ntfs_ws_change *ch, size_t n, void *ud) {
        (void)ws;
        if (ch)
                mount_apply_changes(ud, ch, n);
        else
                ntfs_mount_invalidate_all(ud);
}

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
        while (ents && m->negs && ne < cap) {
                struct kentry *e = m->negs;
                char *nm = malloc(e->namelen + 1);
                if (!nm)
                        break;
                memcpy(nm, e->name, e->namelen + 1);
                ents[ne++] = (struct inval_entry){e->parent, nm, e->namelen};
                mount_kentry_free(m, e);
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
        mount_wseq_free(m->wseq);
        if (m->se)
                fuse_session_destroy(m->se);
        for (size_t i = 0; m->ebuckets && i < m->nebuckets; i++)
                while (m->ebuckets[i])
                        mount_kentry_free(m, m->ebuckets[i]);
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

static int own_mount_call(const char *mountpoint, dev_t *dev, dev_t flush_dev);

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
        m->relatime = o->relatime && !m->read_only;
        if (!m->read_only && !(m->wseq = mount_wseq_new())) {
                mount_free(m);
                return -ENOMEM;
        }
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
        /* (no atime flag is relatime, the kernel's default: libfuse 3.14
         * does not know "relatime") */
        int n = snprintf(opts, sizeof(opts), "default_permissions%s,fsname=%s,subtype=ntfs%s%s",
                         m->relatime ? "" : ",noatime", fsname, o->allow_other ? ",allow_other" : "",
                         m->read_only ? ",ro" : "");
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
        ops.open = mount_op_open_noopen;
        ops.opendir = mount_op_open_noopen;
        /* relatime: OPEN answered without keep_cache, so that the kernel
         * drops a file's pages at open and its first read reaches op_read,
         * which keeps atime (FUSE inodes are S_NOATIME: the kernel leaves
         * atime to us and never sees a cached read). */
        if (m->relatime)
                ops.open = mount_op_open;
        (void)mount_op_opendir;
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
        /* A /dev/fuse this process cannot open is said as such (libfuse
         * only prints it and fails): -EACCES, -ENOENT... for the caller. */
        int dev = open("/dev/fuse", O_RDWR | O_CLOEXEC);
        if (dev < 0) {
                int e = errno;
                mount_free(m);
                return -e;
        }
        close(dev);
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
        if (own_mount_call(m->mountpoint, &m->dev, 0) == 0)
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
        char op;   /* 's' syncfs, 'd' st_dev, 'p' probe inodes (mount-flush.h), 'c' close what 'p' kept */
        dev_t dev; /* 's': the mount's st_dev, 0 unknown (then syncfs only); 'p', 'c': whose files are kept */
        uint32_t n, gen;                /* 'p' */
        uint64_t ino[MOUNT_PROBE_MAX]; /* 'p' */
        char path[PATH_MAX];
};
struct helper_reply {
        int err;
        dev_t dev;
        uint64_t stale; /* 'p' */
};
static pthread_mutex_t helper_lock = PTHREAD_MUTEX_INITIALIZER;
static int helper_fd = -1;
static pid_t helper_pid;

static _Noreturn void helper_main(int fd) {
        if (fd > 3)
                (void)close_range(3, (unsigned)fd - 1, 0);
        (void)close_range((unsigned)fd + 1, ~0u, 0);
        struct helper_req q;
        int probed[MOUNT_PROBE_MAX];
        for (int i = 0; i < MOUNT_PROBE_MAX; i++)
                probed[i] = -1;
        /* 'p' leaves the probed files open (mount-flush.h): closed by 'c'
         * for their mount once its hold is over. */
        struct {
                dev_t dev;
                int fd;
        } kept[4 * MOUNT_PROBE_MAX];
        for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
                kept[i].fd = -1;
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
                } else if (q.op == 'c') {
                        for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
                                if (kept[i].fd >= 0 && kept[i].dev == q.dev) {
                                        close(kept[i].fd);
                                        kept[i].fd = -1;
                                }
                } else if (q.op == 'p') {
                        /* Probes no more inodes than there is room to keep
                         * open: closing one now could wait for the hold
                         * (mount-flush.h) while the holder waits for this
                         * helper. One not probed counts as stale. */
                        unsigned room = 0;
                        for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
                                room += kept[i].fd < 0;
                        unsigned np = q.n < room ? q.n : room;
                        int f = open(q.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                        if (f < 0)
                                a.err = errno;
                        else {
                                (void)mount_probe_inodes(f, q.ino, np, q.gen, &a.stale, probed);
                                close(f);
                                for (unsigned i = np; i < q.n && i < MOUNT_PROBE_MAX; i++)
                                        a.stale |= 1ull << i;
                        }
                } else {
                        int f = open(q.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                        if (f < 0 || syncfs(f) < 0)
                                a.err = errno;
                        if (f >= 0)
                                close(f);
                        /* syncfs started the write-back of mapped pages
                         * but does not wait for it on FUSE (mount-flush.c) */
                        if (!a.err && q.dev)
                                (void)mount_flush_mapped(q.dev);
                }
                if (send(fd, &a, sizeof a, MSG_NOSIGNAL) != (ssize_t)sizeof a)
                        _exit(0);
                /* Kept (there is room: above) until 'c' for q.dev. */
                size_t k = 0;
                for (int i = 0; i < MOUNT_PROBE_MAX; i++) {
                        if (probed[i] < 0)
                                continue;
                        while (k < sizeof kept / sizeof kept[0] && kept[k].fd >= 0)
                                k++;
                        if (k == sizeof kept / sizeof kept[0])
                                break; /* cannot happen: the probe took no more than the room */
                        kept[k].dev = q.dev;
                        kept[k].fd = probed[i];
                        probed[i] = -1;
                }
        }
}

/* Sends q to the helper (started if need be) and waits for its answer. With
 * wait_ms >= 0 and a late callback: after wait_ms without an answer, calls
 * late(ud) and *ret_late = true, then waits on. */
static int helper_call(struct helper_req *q, const char *mountpoint, struct helper_reply *ret, int wait_ms,
                       void (*late)(void *), void *ud, bool *ret_late) {
        if (strlen(mountpoint) >= sizeof q->path)
                return -ENAMETOOLONG;
        memcpy(q->path, mountpoint, strlen(mountpoint) + 1);
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
                ssize_t n = send(helper_fd, q, offsetof(struct helper_req, path) + strlen(q->path) + 1,
                                 MSG_NOSIGNAL);
                if (n > 0 && wait_ms >= 0 && late && !*ret_late) {
                        struct pollfd pf = { .fd = helper_fd, .events = POLLIN };
                        int pr;
                        do
                                pr = poll(&pf, 1, wait_ms);
                        while (pr < 0 && errno == EINTR);
                        if (pr == 0) {
                                *ret_late = true;
                                late(ud);
                        }
                }
                if (n > 0) {
                        do
                                n = recv(helper_fd, &a, sizeof a, 0);
                        while (n < 0 && errno == EINTR);
                }
                if (n == (ssize_t)sizeof a) {
                        r = -a.err;
                        *ret = a;
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

static int own_mount_call(const char *mountpoint, dev_t *dev, dev_t flush_dev) {
        struct helper_req q = { .op = dev ? 'd' : 's', .dev = flush_dev };
        struct helper_reply a;
        int r = helper_call(&q, mountpoint, &a, -1, NULL, NULL, NULL);
        if (r == 0 && dev)
                *dev = a.dev;
        return r;
}

int ntfs_mount_flush_kernel(ntfs_mount *m) {
        if (!m)
                return -EINVAL;
        if (!ntfs_mount_alive(m))
                return 0;
        return own_mount_call(m->mountpoint, NULL, m->have_dev ? m->dev : 0);
}

static void wseq_unlock_cb(void *ud) { mount_wseq_unlock(ud); }

/* Has the helper close the files its probes of m left open (helper_main):
 * only while m's WRITEs are let in, since closing writes dirty pages back
 * and waits. */
static void close_probed(ntfs_mount *m) {
        if (!m->have_dev || !mount_wseq_kept(m->wseq))
                return;
        mount_wseq_set_kept(m->wseq, false);
        struct helper_req q = { .op = 'c', .dev = m->dev };
        struct helper_reply a;
        (void)helper_call(&q, m->mountpoint, &a, -1, NULL, NULL, NULL);
}

int ntfs_mount_hold_writes(ntfs_mount *m) {
        if (!m)
                return -EINVAL;
        int r = ntfs_mount_flush_kernel(m);
        if (!m->wseq)
                return r;
        /* mount-flush.h: keep WRITEs out, then make sure no open inode is
         * halfway through a write(2). */
        int64_t start = ntfs_mono_ns();
        for (;;) {
                close_probed(m);
                mount_wseq_lock(m->wseq);
                struct helper_req q = { .op = 'p', .dev = m->dev, .gen = (uint32_t)ntfs_ws_generation(m->ws) };
                int64_t at[MOUNT_PROBE_MAX];
                q.n = mount_wseq_open(m->wseq, q.ino, at, MOUNT_PROBE_MAX);
                int64_t now = ntfs_mono_ns();
                if (mount_wseq_wb_pending(m->wseq) > 0 && now - start < MOUNT_WSEQ_MAX_NS && ntfs_mount_alive(m)) {
                        /* a page write-back came in (mount-flush.h): let it in */
                        mount_wseq_unlock(m->wseq);
                        struct timespec ts = { 0, 1000000L };
                        nanosleep(&ts, NULL);
                        continue;
                }
                if (q.n == 0 || now - start >= MOUNT_WSEQ_MAX_NS || !ntfs_mount_alive(m) || !m->have_dev)
                        return r;
                struct helper_reply a = { 0 };
                bool late = false;
                mount_wseq_set_kept(m->wseq, true);
                int pr = helper_call(&q, m->mountpoint, &a, MOUNT_PROBE_WAIT_MS, wseq_unlock_cb, m->wseq, &late);
                if (late)
                        continue; /* unlocked: the writer went on; probe again */
                bool young = false;
                for (unsigned i = 0; i < q.n; i++) {
                        /* Probed: whole. Not openable by its handle (gone
                         * from the kernel's cache, or of another
                         * generation): whole once quiet for a while. */
                        bool stale = pr < 0 || (a.stale >> i & 1);
                        if (!stale || now - at[i] >= MOUNT_WSEQ_QUIET_NS)
                                mount_wseq_close(m->wseq, q.ino[i]);
                        else
                                young = true;
                }
                if (!young)
                        return r;
                mount_wseq_unlock(m->wseq);
                struct timespec ts = { 0, 1000000L };
                nanosleep(&ts, NULL);
        }
}

void ntfs_mount_release_writes(ntfs_mount *m) {
        if (m && m->wseq) {
                mount_wseq_unlock(m->wseq);
                close_probed(m);
        }
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
