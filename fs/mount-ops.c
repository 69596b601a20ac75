/* SPDX-License-Identifier: MIT
 * mount-ops.c — the FUSE requests of a mounted workspace: the kernel's view
 * (lookup counts per inode, the entries and negative entries it was told
 * about), the replies, and one handler per request, each one ntfs_ws_*
 * call (mount_ops). Moved out of mount.c (issue 68), which keeps INIT,
 * invalidation and the lifecycle; mount-internal.h has the shared state.
 */
#define FUSE_USE_VERSION 314

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/util.h"
#include "fs/acl.h"
#include "fs/mount-flush.h"
#include "fs/mount-internal.h"
#include "common/banned.h"

/* ---- the kernel's view: inodes and entries ------------------------------ */

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
void mount_kentry_free(ntfs_mount *m, struct kentry *e) {
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

struct kentry *mount_kentry_find(ntfs_mount *m, uint64_t parent, const char *name, size_t len) {
        return *kentry_slot(m, parent, name, len);
}

/* Puts e at the head of list *head (an inode's entries, or the negative
 * entries). */
static void kentry_link(struct kentry *e, struct kentry **head) {
        e->iprev = head;
        e->inext = *head;
        if (*head)
                (*head)->iprev = &e->inext;
        *head = e;
}

static void kentry_attach(struct kentry *e, struct kinode *n) {
        e->inode = n;
        kentry_link(e, &n->entries);
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
                        kentry_link(e, &m->negs);
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
        kentry_link(e, &m->negs);
        *p = e;
        m->nentries++;
        m->nneg++;
        entries_maybe_grow(m);
        return true;
}

static void entry_drop(ntfs_mount *m, uint64_t parent, const char *name) {
        struct kentry *e = *kentry_slot(m, parent, name, strlen(name));
        if (e)
                mount_kentry_free(m, e);
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
                                mount_kentry_free(m, n->entries);
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

/* What may change the kernel's cached answers: a rollback (in place or
 * not) or another handle opening on the session (the sharing
 * epoch); both only go up. A reply whose request straddled a change is
 * sent with zero timeouts. */
static uint64_t cache_epoch(ntfs_mount *m) { return ntfs_ws_rollbacks(m->ws) + ntfs_ws_share_epoch(m->ws); }

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

/* Whether the caller is root (CAP_FSETID, approximated) or in group gid, as
 * the kernel's in_group_or_capable(). */
static bool in_group_or_root(fuse_req_t req, uint32_t gid) {
        const struct fuse_ctx *ctx = fuse_req_ctx(req);
        if (ctx->uid == 0 || ctx->gid == gid)
                return true;
        gid_t groups[64];
        int n = fuse_req_getgroups(req, (int)ARRAY_SIZE(groups), groups);
        for (int i = 0; i < n && i < (int)ARRAY_SIZE(groups); i++)
                if (groups[i] == gid)
                        return true;
        return false;
}

/* cur's mode once setuid/setgid are killed for the caller, as the kernel's
 * setattr_should_drop_suidgid() decides: setuid always; setgid when the file
 * is group-executable, or when the caller is neither root nor in its group. */
static uint32_t mode_killed(fuse_req_t req, const struct ntfs_attr *cur) {
        uint32_t mode = cur->mode & ~(uint32_t)S_ISUID;
        if ((mode & S_ISGID) && ((mode & S_IXGRP) || !in_group_or_root(req, cur->gid)))
                mode &= ~(uint32_t)S_ISGID;
        return mode;
}

/* Kills setuid/setgid of regular file ino for a content change (write,
 * fallocate) the reply of which carries no attributes: the kernel's cached
 * mode is then dropped before the reply, so the writer's next stat sees it
 * (as on a local filesystem). 0 or a negative errno. */
static int kill_suidgid_for_content(fuse_req_t req, ntfs_mount *m, fuse_ino_t ino) {
        struct ntfs_attr cur;
        int r = ntfs_ws_getattr(m->ws, ino, &cur);
        if (r < 0 || !S_ISREG(cur.mode) || !(cur.mode & (S_ISUID | S_ISGID)))
                return r < 0 ? r : 0;
        uint32_t mode = mode_killed(req, &cur);
        if (mode == cur.mode)
                return 0;
        struct ntfs_attr in = {.ino = ino, .mode = mode}, out;
        r = ntfs_ws_setattr(m->ws, ino, &in, NTFS_SET_MODE, &out);
        if (r == 0) /* attributes only (negative offset): takes no inode lock */
                (void)fuse_lowlevel_notify_inval_inode(m->se, ino, -1, 0);
        return r;
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
         * truncate by a caller other than root; explicit KILL flags too.
         * This reply carries the new mode to the kernel. */
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
                uint32_t mode = S_ISDIR(cur.mode) ? cur.mode : mode_killed(req, &cur);
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

/* A node made by a program: with POSIX ACLs on, the kernel left the umask
 * to us (DONT_MASK): the store applies it, or the parent's default ACL
 * instead (ntfs_ws_create). */
static int create_in_store(fuse_req_t req, uint64_t parent, const char *name, uint32_t mode, uint64_t rdev,
                           uint32_t uid, uint32_t gid, struct ntfs_attr *ret) {
        ntfs_mount *m = req_mount(req);
        if (m->posix_acl)
                return ntfs_ws_create(m->ws, parent, name, mode, rdev, uid, gid, fuse_req_ctx(req)->umask, ret);
        if (S_ISDIR(mode))
                return ntfs_ws_mkdir(m->ws, parent, name, mode & 07777, uid, gid, ret);
        return ntfs_ws_mknod(m->ws, parent, name, mode, rdev, uid, gid, ret);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev) {
        ntfs_mount *m = req_mount(req);
        uint64_t epoch = cache_epoch(m);
        uint32_t uid, gid, md = mode;
        int r = new_owner(req, parent, false, &uid, &gid, &md);
        struct ntfs_attr a;
        if (r >= 0)
                r = create_in_store(req, parent, name, md, rdev, uid, gid, &a);
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
                r = create_in_store(req, parent, name, S_IFDIR | md, 0, uid, gid, &a);
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
                        mount_kentry_free(m, src);
                if (dst)
                        mount_kentry_free(m, dst);
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
void mount_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        fi->fh = 0;
        fi->keep_cache = !req_mount(req)->relatime; /* relatime: the first read after open is ours */
        fi->direct_io = 0;
        fuse_reply_open(req, fi);
}

void mount_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
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
                r = create_in_store(req, parent, name, md, 0, uid, gid, &a);
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
        /* relatime: atime before the reply, so that a stat after the read
         * (the kernel refetches atime after a READ) sees it */
        if (m->relatime)
                (void)ntfs_ws_touch_atime(m->ws, ino); /* best effort, as a read's atime is */
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
         * approximate CAP_FSETID by uid 0 (mode_killed). Every path of a
         * write comes here: buffered, O_DIRECT, AIO, and the kernel's
         * fallback for copy_file_range. */
        bool kill = m->handle_killpriv_v2 ? mount_tls_write_kill : m->handle_killpriv && fuse_req_ctx(req)->uid != 0;
        if (kill) {
                int k = kill_suidgid_for_content(req, m, ino);
                if (k < 0) {
                        reply_err(req, k);
                        return;
                }
        }
        /* O_APPEND: the kernel already put off at its i_size, under the
         * inode lock; every writer goes through this one kernel. */
        /* A page write-back (a store through a shared mapping); a test
         * slows them down (NTFS_FAULT=mount.writepage:1+:sleepMS) to show
         * that a checkpoint waits for them (docs/mount.md). */
        bool wb = m->wseq && fi->writepage;
        if (wb)
                mount_wseq_wb_begin(m->wseq);
        if (fi->writepage)
                (void)NTFS_FAULT("mount.writepage");
        /* A checkpoint keeps WRITEs out while it makes sure no write(2)
         * the kernel split into pieces is halfway in (mount-flush.h). */
        if (m->wseq)
                mount_wseq_enter(m->wseq);
        ssize_t r = ntfs_ws_write(m->ws, ino, buf, size, (uint64_t)off, false);
        if (m->wseq)
                mount_wseq_leave(m->wseq, ino, (uint64_t)off + (r > 0 ? (uint64_t)r : 0), r > 0,
                                 fi->writepage);
        if (wb)
                mount_wseq_wb_end(m->wseq);
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

/* A listing's offsets: 0 starts with ".", 1 with "..", and N >= 2 resumes
 * the working state's listing at its cookie N - 1 (its cookies are name
 * hash + 1 >= 2, and cookie 1 is its start: every name hash is >= 1; see
 * name_hash). Offsets are handled as unsigned: the largest cookie, 2^63 - 1,
 * is offset 2^63, which the kernel carries through as a negative loff_t. */
static off_t rd_offset(uint64_t cookie) { return (off_t)(cookie + 1); }

/* The parent of directory ino as the kernel knows it (a directory has one
 * name); the root, or a directory the kernel holds no name of, is its own. */
static uint64_t rd_parent(ntfs_mount *m, uint64_t ino) {
        uint64_t parent = ino;
        pthread_mutex_lock(&m->lock);
        struct kinode *n = ino == NTFS_ROOT_INO ? NULL : kinode_find(m, ino);
        if (n && n->entries)
                parent = n->entries->parent;
        pthread_mutex_unlock(&m->lock);
        return parent;
}

/* Adds "." (which 0) or ".." (which 1) of directory dir. Their READDIRPLUS
 * records carry node id 0: the kernel takes no reference on them (as
 * fuse_direntplus_link skips both names), so none is remembered. */
static int rd_dot(struct rd_ctx *c, int which) {
        struct stat st = {.st_ino = which ? rd_parent(c->m, c->dir) : c->dir, .st_mode = S_IFDIR};
        const char *name = which ? ".." : ".";
        size_t n;
        if (c->plus) {
                struct fuse_entry_param e = {.attr = st};
                n = fuse_add_direntry_plus(c->req, c->buf + c->pos, c->size - c->pos, name, &e, which + 1);
        } else {
                n = fuse_add_direntry(c->req, c->buf + c->pos, c->size - c->pos, name, &st, which + 1);
        }
        if (n > c->size - c->pos)
                return 1;
        c->pos += n;
        return 0;
}

static int rd_cb(const char *name, const struct ntfs_attr *attr, uint64_t next_cookie, void *ud) {
        struct rd_ctx *c = ud;
        size_t n;
        if (c->plus) {
                struct fuse_entry_param e;
                fill_entry(c->m, attr, c->gen, &e);
                n = fuse_add_direntry_plus(c->req, c->buf + c->pos, c->size - c->pos, name, &e,
                                           rd_offset(next_cookie));
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
                n = fuse_add_direntry(c->req, c->buf + c->pos, c->size - c->pos, name, &st, rd_offset(next_cookie));
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
        uint64_t uoff = (uint64_t)off; /* rd_offset */
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
        for (int which = (int)NTFS_MIN(uoff, 2u); which < 2; which++)
                if (rd_dot(&c, which)) {
                        fuse_reply_buf(req, buf, c.pos);
                        return;
                }
        size_t dots = c.pos; /* an error with nothing but the dots is the reply */
        int r = ntfs_ws_readdir(m->ws, ino, uoff < 2 ? 0 : uoff - 1, plus, size / rec_min + 1, rd_cb, &c);
        if (r < 0 && c.pos == dots) {
                reply_err(req, r);
                return;
        }
        if (c.err < 0 && c.pos == dots) {
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

/* security.* and trusted.* are refused: what they hold is read by the
 * host's kernel and LSMs (file capabilities, SELinux labels, overlayfs
 * whiteouts), and a workspace is exported and mounted elsewhere; nothing a
 * program in the workspace stores there may grant anything (issue 63). */
static bool xattr_refused(const char *name) {
        return strncmp(name, "security.", 9) == 0 || strncmp(name, "trusted.", 8) == 0;
}

/* POSIX ACLs: with FUSE_POSIX_ACL the kernel checks them (reading
 * system.posix_acl_access) and has checked the value it sends; the store
 * keeps it as an xattr, sets the mode from an access ACL and drops an ACL
 * that only repeats the mode (ntfs_ws_setxattr). What the kernel leaves to
 * us (fs/fuse/acl.c): the owner check again, and clearing setgid when the
 * caller is outside the file's group (posix_acl_update_mode()). Without
 * FUSE_POSIX_ACL nothing would enforce a stored ACL: refused. */
static int acl_change(fuse_req_t req, ntfs_mount *m, fuse_ino_t ino, const char *name, bool set,
                      const char *value, size_t size) {
        if (!m->posix_acl)
                return -EOPNOTSUPP;
        struct ntfs_attr cur;
        int r = ntfs_ws_getattr(m->ws, ino, &cur);
        if (r < 0)
                return r;
        if (fuse_req_ctx(req)->uid != 0 && fuse_req_ctx(req)->uid != cur.uid)
                return -EPERM;
        r = set ? ntfs_ws_setxattr(m->ws, ino, name, value, size, 0) : ntfs_ws_removexattr(m->ws, ino, name);
        if (r < 0 || !set || ntfs_acl_kind(name) != 1 || !(cur.mode & S_ISGID) || in_group_or_root(req, cur.gid))
                return r;
        if ((r = ntfs_ws_getattr(m->ws, ino, &cur)) < 0)
                return r;
        struct ntfs_attr in = {.ino = ino, .mode = cur.mode & ~(uint32_t)S_ISGID}, out;
        return ntfs_ws_setattr(m->ws, ino, &in, NTFS_SET_MODE, &out);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
                        int flags) {
        ntfs_mount *m = req_mount(req);
        if (xattr_refused(name))
                reply_err(req, -EPERM);
        else if (ntfs_acl_kind(name))
                reply_err(req, acl_change(req, m, ino, name, true, value, size));
        else
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
        ntfs_mount *m = req_mount(req);
        if (xattr_refused(name))
                reply_err(req, -EPERM);
        else if (ntfs_acl_kind(name))
                reply_err(req, acl_change(req, m, ino, name, false, NULL, 0));
        else
                reply_err(req, ntfs_ws_removexattr(m->ws, ino, name));
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
        /* The kernel's file_modified() asks no kill of us (its SETATTR
         * carries none with HANDLE_KILLPRIV): a caller other than root
         * kills setuid/setgid, as on a local filesystem. */
        ntfs_mount *m = req_mount(req);
        int r = 0;
        if (m->handle_killpriv || m->handle_killpriv_v2) {
                if (fuse_req_ctx(req)->uid != 0)
                        r = kill_suidgid_for_content(req, m, ino);
        }
        if (r == 0)
                r = ntfs_ws_fallocate(m->ws, ino, mode, (uint64_t)off, (uint64_t)len);
        reply_err(req, r);
}

/* No getlk/setlk/flock: the kernel then does POSIX and flock locking
 * locally, which is exact since every user of the workspace goes through
 * this one mount. */
const struct fuse_lowlevel_ops mount_ops = {
        .init = mount_op_init,
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
        .open = mount_op_open,
        .read = op_read,
        .write = op_write,
        .flush = op_flush,
        .release = op_release,
        .fsync = op_fsync,
        .opendir = mount_op_opendir,
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
void mount_op_open_noopen(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        fuse_reply_err(req, ENOSYS);
}
