/* SPDX-License-Identifier: MIT
 * fusefloor — the FUSE floor: a minimal in-memory filesystem on the libfuse3
 * low-level API, tuned with the FUSE options that make FUSE fast. It keeps
 * everything in memory and does well under a microsecond of work per request,
 * so what it costs is what FUSE itself costs on this machine (issue 3). The
 * benchmark (tools/bench-fs.sh) holds the real mount against it.
 *
 *   fusefloor MOUNTPOINT [-f] [-d] [-s] [-o opts]
 *
 * Floor options (-o; the defaults are the fast choice, docs/bench-fs.md):
 *   writeback        turn the kernel's writeback cache on (default off)
 *   open, opendir    answer OPEN / OPENDIR instead of ENOSYS (no_open/no_opendir)
 *   timeout=SECS     entry and attr timeout (default 1.0)
 *   flush            answer FLUSH (default ENOSYS: the kernel stops sending it)
 *   nocreate         answer CREATE with ENOSYS (the kernel uses MKNOD instead)
 *   noxattr          answer the xattr requests with ENOSYS: the kernel then
 *                    stops asking, including the GETXATTR security.capability
 *                    it sends before every write(2) (default: xattrs work)
 *   nopatch          do not force FUSE_PARALLEL_DIROPS / FUSE_HANDLE_KILLPRIV
 *                    into the INIT reply (libfuse 3.14 drops them, see below)
 *   killpriv2        also FUSE_HANDLE_KILLPRIV_V2 (protocol 7.33, which libfuse
 *                    3.14 does not know), as the ntfs mount has: the kernel
 *                    stops asking for security.capability before writes, and
 *                    the floor drops setuid/setgid and that attribute itself
 *   noautoinval      no FUSE_AUTO_INVAL_DATA (libfuse asks for it by default):
 *                    the kernel then keeps a file's pages when a refreshed
 *                    mtime differs from its own, as the ntfs mount does
 *   growpool         libfuse's multithreaded loop (one worker at first, one
 *                    more whenever all are busy, up to max_threads) instead
 *                    of max_threads workers started at mount, as the ntfs
 *                    mount has (fs/fusepool.h); max_threads is libfuse's
 *                    option (-o max_threads=N, default 10, at most 256
 *                    without growpool); libfuse's clone_fd and
 *                    max_idle_threads apply only with growpool
 *   prealloc=MIB     fault in MIB of data blocks before mounting, so that
 *                    first-touch page clearing is not timed (default 0)
 *   stats=PATH       at exit, write one "OPCODE COUNT NS" line per request type
 *                    (NS: the handlers' total time, request read to reply)
 *   default_permissions  let the kernel check modes (default: the daemon does)
 * Any other -o option goes to libfuse (allow_other, fsname, ...).
 *
 * Model: inodes live in a table indexed by inode number (never reused; the
 * generation is always 0). A directory keeps its entries in an array whose
 * index+1 is the readdir offset (deleted slots become NULL, so offsets survive
 * concurrent changes; the array is reset when the directory empties); one
 * global hash of (parent, name) makes lookup O(1). File data lives in 64 KiB
 * blocks (NULL = hole), so sparse files cost nothing. One rwlock guards it
 * all: read, getattr, lookup, readdir and getxattr take it shared.
 *
 * An inode is freed when it has no links and the kernel has forgotten it.
 * Ownership: every node, dentry, block and xattr belongs to the one global
 * struct floor; floor_destroy() frees everything at exit.
 */
#define FUSE_USE_VERSION 312

#include <errno.h>
#include <limits.h>
#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "tools/fusefloor.h"
#include "fs/fusepool.h"
#include "common/banned.h"

static const char *const st_names[OPC__MAX] = {
        "LOOKUP", "FORGET", "GETATTR", "SETATTR", "READLINK", "MKNOD", "MKDIR",
        "UNLINK", "RMDIR", "SYMLINK", "RENAME", "LINK", "OPEN", "READ", "WRITE",
        "FLUSH", "RELEASE", "FSYNC", "OPENDIR", "READDIR", "READDIRPLUS", "RELEASEDIR",
        "STATFS", "SETXATTR", "GETXATTR", "LISTXATTR", "REMOVEXATTR", "ACCESS",
        "CREATE", "FALLOCATE",
};

struct floor F;
static struct node *node_new(mode_t mode, uid_t uid, gid_t gid) {
        if (F.next_ino >= F.ninodes) {
                size_t n = F.ninodes ? F.ninodes * 2 : 1024;
                struct node **t = realloc(F.inodes, n * sizeof(*t));
                if (!t)
                        return NULL;
                memset(t + F.ninodes, 0, (n - F.ninodes) * sizeof(*t));
                F.inodes = t;
                F.ninodes = n;
        }
        struct node *n = calloc(1, sizeof(*n));
        if (!n)
                return NULL;
        n->ino = F.next_ino++;
        n->mode = mode;
        n->uid = uid;
        n->gid = gid;
        n->nlink = S_ISDIR(mode) ? 2 : 1;
        now(&n->atime);
        n->mtime = n->ctime = n->atime;
        F.inodes[n->ino] = n;
        return n;
}

static void node_maybe_free(struct node *n) {
        if (n->nlink > 0 || n->nlookup > 0 || n->ino == FUSE_ROOT_ID)
                return;
        node_free_data(n, 0);
        free(n->blocks);
        free(n->target);
        free(n->ents);
        for (struct xattr *x = n->xattrs, *nx; x; x = nx) {
                nx = x->next;
                free(x->value);
                free(x);
        }
        F.inodes[n->ino] = NULL;
        free(n);
}

static void fill_entry(struct node *n, struct fuse_entry_param *e) {
        memset(e, 0, sizeof(*e));
        e->ino = n->ino;
        e->attr_timeout = F.timeout;
        e->entry_timeout = F.timeout;
        fill_stat(n, &e->attr);
}

/* ---- names ----------------------------------------------------------- */

static size_t hash_of(uint64_t parent, const char *name, size_t len) {
        uint64_t h = 1469598103934665603ull ^ (parent * 0x9e3779b97f4a7c15ull);
        for (size_t i = 0; i < len; i++)
                h = (h ^ (unsigned char)name[i]) * 1099511628211ull;
        return (size_t)(h ^ (h >> 29));
}

static struct dentry **dentry_slot(uint64_t parent, const char *name) {
        size_t len = strlen(name);
        struct dentry **p = &F.hash[hash_of(parent, name, len) & (F.hsize - 1)];
        for (; *p; p = &(*p)->hnext)
                if ((*p)->parent == parent && (*p)->len == len && memcmp((*p)->name, name, len) == 0)
                        return p;
        return p;
}

static struct node *child_get(uint64_t parent, const char *name) {
        struct dentry *d = *dentry_slot(parent, name);
        return d ? node_get(d->ino) : NULL;
}

static int hash_grow(void) {
        size_t n = F.hsize * 2;
        struct dentry **t = calloc(n, sizeof(*t));
        if (!t)
                return -ENOMEM;
        for (size_t i = 0; i < F.hsize; i++)
                for (struct dentry *d = F.hash[i], *nd; d; d = nd) {
                        nd = d->hnext;
                        size_t b = hash_of(d->parent, d->name, d->len) & (n - 1);
                        d->hnext = t[b];
                        t[b] = d;
                }
        free(F.hash);
        F.hash = t;
        F.hsize = n;
        return 0;
}

/* Links `child` into `dir` as `name` (which must not exist). */
static int dentry_add(struct node *dir, const char *name, struct node *child) {
        size_t len = strlen(name);
        if (len > 255)
                return -ENAMETOOLONG;
        if (F.hcount >= F.hsize && hash_grow() < 0)
                return -ENOMEM;
        if (dir->nents == dir->cap) {
                size_t c = dir->cap ? dir->cap * 2 : 16;
                struct dentry **e = realloc(dir->ents, c * sizeof(*e));
                if (!e)
                        return -ENOMEM;
                dir->ents = e;
                dir->cap = c;
        }
        struct dentry *d = malloc(sizeof(*d) + len + 1);
        if (!d)
                return -ENOMEM;
        d->parent = dir->ino;
        d->ino = child->ino;
        d->len = len;
        memcpy(d->name, name, len + 1);
        d->slot = dir->nents;
        dir->ents[dir->nents++] = d;
        dir->live++;
        struct dentry **p = dentry_slot(dir->ino, name);
        d->hnext = NULL;
        *p = d;
        F.hcount++;
        if (S_ISDIR(child->mode)) {
                child->parent = dir->ino;
                dir->nlink++;
        }
        return 0;
}

/* Unlinks the entry *p from `dir`; the child's nlink is the caller's. */
static void dentry_del(struct node *dir, struct dentry **p) {
        struct dentry *d = *p;
        *p = d->hnext;
        F.hcount--;
        dir->ents[d->slot] = NULL;
        if (--dir->live == 0)
                dir->nents = 0; /* offsets restart only in an empty directory */
        struct node *child = node_get(d->ino);
        if (child && S_ISDIR(child->mode))
                dir->nlink--;
        free(d);
}

/* Sticky directories: only the owner of the entry or the directory may remove it. */
static bool may_delete(fuse_req_t req, const struct node *dir, const struct node *victim) {
        if (!may(req, dir, W_OK | X_OK))
                return false;
        if (F.default_permissions || !(dir->mode & S_ISVTX))
                return true;
        uid_t uid = fuse_req_ctx(req)->uid;
        return uid == 0 || uid == dir->uid || uid == victim->uid;
}

/* ---- operations ------------------------------------------------------ */

static void reply_entry_of(fuse_req_t req, struct node *n) {
        struct fuse_entry_param e;
        n->nlookup++;
        fill_entry(n, &e);
        fuse_reply_entry(req, &e);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
        COUNT(OPC_LOOKUP);
        WRLOCK(); /* nlookup changes */
        struct node *dir = node_get(parent);
        int err = 0;
        if (!dir || !S_ISDIR(dir->mode))
                err = ENOTDIR;
        else if (!may(req, dir, X_OK))
                err = EACCES;
        else if (strlen(name) > 255)
                err = ENAMETOOLONG;
        if (err) {
                UNLOCK();
                fuse_reply_err(req, err);
                return;
        }
        struct node *n = strcmp(name, "..") == 0 ? node_get(dir->parent)
                       : strcmp(name, ".") == 0  ? dir
                                                 : child_get(parent, name);
        if (n) {
                reply_entry_of(req, n);
        } else {
                struct fuse_entry_param e = {.ino = 0, .entry_timeout = F.timeout}; /* negative */
                fuse_reply_entry(req, &e);
        }
        UNLOCK();
}

static void forget_one(fuse_ino_t ino, uint64_t nlookup) {
        struct node *n = node_get(ino);
        if (!n)
                return;
        n->nlookup = n->nlookup > nlookup ? n->nlookup - nlookup : 0;
        node_maybe_free(n);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
        COUNT(OPC_FORGET);
        WRLOCK();
        forget_one(ino, nlookup);
        UNLOCK();
        fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f) {
        COUNT(OPC_FORGET);
        WRLOCK();
        for (size_t i = 0; i < count; i++)
                forget_one(f[i].ino, f[i].nlookup);
        UNLOCK();
        fuse_reply_none(req);
}

/* Creates a node in parent; returns it (with the lock held by the caller) or sets *err. */
static struct node *make_node(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                              dev_t rdev, const char *target, int *err) {
        struct node *dir = node_get(parent);
        const struct fuse_ctx *c = fuse_req_ctx(req);
        *err = 0;
        if (!dir || !S_ISDIR(dir->mode))
                *err = ENOTDIR;
        else if (dir->nlink == 0)
                *err = ENOENT;
        else if (!may(req, dir, W_OK | X_OK))
                *err = EACCES;
        else if (strlen(name) > 255)
                *err = ENAMETOOLONG;
        else if (child_get(parent, name))
                *err = EEXIST;
        if (*err)
                return NULL;
        gid_t gid = (dir->mode & S_ISGID) ? dir->gid : c->gid;
        if ((dir->mode & S_ISGID) && S_ISDIR(mode))
                mode |= S_ISGID;
        struct node *n = node_new(mode, c->uid, gid);
        if (!n) {
                *err = ENOMEM;
                return NULL;
        }
        n->rdev = rdev;
        if (target && !(n->target = strdup(target))) {
                *err = ENOMEM;
        } else {
                int r = dentry_add(dir, name, n);
                if (r < 0)
                        *err = -r;
        }
        if (*err) {
                n->nlink = 0;
                node_maybe_free(n);
                return NULL;
        }
        if (target)
                n->size = strlen(target);
        now(&dir->mtime);
        dir->ctime = dir->mtime;
        return n;
}

static void reply_new(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      dev_t rdev, const char *target) {
        int err;
        WRLOCK();
        struct node *n = make_node(req, parent, name, mode, rdev, target, &err);
        if (n)
                reply_entry_of(req, n);
        UNLOCK();
        if (!n)
                fuse_reply_err(req, err);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev) {
        COUNT(OPC_MKNOD);
        reply_new(req, parent, name, mode, rdev, NULL);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
        COUNT(OPC_MKDIR);
        reply_new(req, parent, name, S_IFDIR | (mode & 07777), 0, NULL);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name) {
        COUNT(OPC_SYMLINK);
        if (strlen(link) >= 4096) {
                fuse_reply_err(req, ENAMETOOLONG);
                return;
        }
        reply_new(req, parent, name, S_IFLNK | 0777, 0, link);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi) {
        COUNT(OPC_CREATE);
        if (F.nocreate) { /* the kernel falls back to MKNOD (+ OPEN, which is ENOSYS) */
                fuse_reply_err(req, ENOSYS);
                return;
        }
        int err;
        WRLOCK();
        struct node *n = make_node(req, parent, name, S_IFREG | (mode & 07777), 0, NULL, &err);
        if (n) {
                struct fuse_entry_param e;
                n->nlookup++;
                fill_entry(n, &e);
                fi->fh = 0;
                fi->keep_cache = 1;
                fuse_reply_create(req, &e, fi);
        }
        UNLOCK();
        if (!n)
                fuse_reply_err(req, err);
}

static int do_unlink(fuse_req_t req, fuse_ino_t parent, const char *name, bool isdir) {
        struct node *dir = node_get(parent);
        if (!dir || !S_ISDIR(dir->mode))
                return ENOTDIR;
        struct dentry **p = dentry_slot(parent, name);
        struct node *n = *p ? node_get((*p)->ino) : NULL;
        if (!n)
                return ENOENT;
        if (!may_delete(req, dir, n))
                return EACCES;
        if (isdir && !S_ISDIR(n->mode))
                return ENOTDIR;
        if (!isdir && S_ISDIR(n->mode))
                return EISDIR;
        if (isdir && n->live > 0)
                return ENOTEMPTY;
        dentry_del(dir, p);
        n->nlink = isdir ? 0 : n->nlink - 1;
        now(&n->ctime);
        dir->mtime = dir->ctime = n->ctime;
        node_maybe_free(n);
        return 0;
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name) {
        COUNT(OPC_UNLINK);
        WRLOCK();
        int err = do_unlink(req, parent, name, false);
        UNLOCK();
        fuse_reply_err(req, err);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name) {
        COUNT(OPC_RMDIR);
        WRLOCK();
        int err = do_unlink(req, parent, name, true);
        UNLOCK();
        fuse_reply_err(req, err);
}

/* true if `anc` is `ino` or one of its ancestors */
static bool is_ancestor(uint64_t anc, uint64_t ino) {
        for (struct node *n = node_get(ino); n; n = node_get(n->parent)) {
                if (n->ino == anc)
                        return true;
                if (n->ino == FUSE_ROOT_ID)
                        break;
        }
        return false;
}

static int do_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                     const char *newname, unsigned flags) {
        struct node *sd = node_get(parent), *dd = node_get(newparent);
        if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE))
                return EINVAL;
        if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE))
                return EINVAL;
        if (!sd || !dd || !S_ISDIR(sd->mode) || !S_ISDIR(dd->mode))
                return ENOTDIR;
        if (strlen(newname) > 255)
                return ENAMETOOLONG;
        struct dentry **sp = dentry_slot(parent, name);
        struct node *src = *sp ? node_get((*sp)->ino) : NULL;
        if (!src)
                return ENOENT;
        struct dentry **dp = dentry_slot(newparent, newname);
        struct node *dst = *dp ? node_get((*dp)->ino) : NULL;
        if (!may_delete(req, sd, src) || !may(req, dd, W_OK | X_OK))
                return EACCES;
        if (dst && !may_delete(req, dd, dst))
                return EACCES;
        if (src == dst)
                return 0;
        if (S_ISDIR(src->mode) && is_ancestor(src->ino, newparent))
                return EINVAL;
        if (flags & RENAME_EXCHANGE) {
                if (!dst)
                        return ENOENT;
                if (S_ISDIR(dst->mode) && is_ancestor(dst->ino, parent))
                        return EINVAL;
                /* swap the inodes the two entries name */
                (*sp)->ino = dst->ino;
                (*dp)->ino = src->ino;
                if (S_ISDIR(src->mode) != S_ISDIR(dst->mode) && sd != dd) {
                        int d = S_ISDIR(src->mode) ? 1 : -1;
                        dd->nlink += d;
                        sd->nlink -= d;
                }
                if (S_ISDIR(src->mode))
                        src->parent = dd->ino;
                if (S_ISDIR(dst->mode))
                        dst->parent = sd->ino;
        } else {
                if (dst) {
                        if (flags & RENAME_NOREPLACE)
                                return EEXIST;
                        if (S_ISDIR(src->mode) && !S_ISDIR(dst->mode))
                                return ENOTDIR;
                        if (!S_ISDIR(src->mode) && S_ISDIR(dst->mode))
                                return EISDIR;
                        if (S_ISDIR(dst->mode) && dst->live > 0)
                                return ENOTEMPTY;
                }
                if (F.hcount >= F.hsize) { /* dentry_add may grow: do it before any change */
                        if (hash_grow() < 0)
                                return ENOMEM;
                        sp = dentry_slot(parent, name);
                        dp = dentry_slot(newparent, newname);
                }
                if (dd->nents == dd->cap) {
                        size_t c = dd->cap ? dd->cap * 2 : 16;
                        struct dentry **e = realloc(dd->ents, c * sizeof(*e));
                        if (!e)
                                return ENOMEM;
                        dd->ents = e;
                        dd->cap = c;
                }
                if (dst) {
                        dentry_del(dd, dp);
                        dst->nlink = S_ISDIR(dst->mode) ? 0 : dst->nlink - 1;
                        now(&dst->ctime);
                        node_maybe_free(dst);
                }
                sp = dentry_slot(parent, name);
                dentry_del(sd, sp);
                if (dentry_add(dd, newname, src) < 0) /* cannot fail: space reserved above */
                        return ENOMEM;
        }
        now(&src->ctime);
        sd->mtime = sd->ctime = dd->mtime = dd->ctime = src->ctime;
        return 0;
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags) {
        COUNT(OPC_RENAME);
        WRLOCK();
        int err = do_rename(req, parent, name, newparent, newname, flags);
        UNLOCK();
        fuse_reply_err(req, err);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname) {
        COUNT(OPC_LINK);
        WRLOCK();
        struct node *n = node_get(ino), *dir = node_get(newparent);
        int err = 0;
        if (!n)
                err = ENOENT;
        else if (S_ISDIR(n->mode))
                err = EPERM;
        else if (!dir || !S_ISDIR(dir->mode))
                err = ENOTDIR;
        else if (!may(req, dir, W_OK | X_OK))
                err = EACCES;
        else if (child_get(newparent, newname))
                err = EEXIST;
        else
                err = -dentry_add(dir, newname, n);
        if (!err) {
                n->nlink++;
                now(&n->ctime);
                dir->mtime = dir->ctime = n->ctime;
                reply_entry_of(req, n);
        }
        UNLOCK();
        if (err)
                fuse_reply_err(req, err);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        COUNT(OPC_OPENDIR);
        if (!F.opendir) {
                fuse_reply_err(req, ENOSYS);
                return;
        }
        RDLOCK();
        struct node *n = node_get(ino);
        int err = !n ? ENOENT : !S_ISDIR(n->mode) ? ENOTDIR : !may(req, n, R_OK) ? EACCES : 0;
        UNLOCK();
        fi->cache_readdir = 1;
        fi->keep_cache = 1;
        if (err)
                fuse_reply_err(req, err);
        else
                fuse_reply_open(req, fi);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        COUNT(OPC_RELEASEDIR);
        fuse_reply_err(req, 0);
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus) {
        COUNT(plus ? OPC_READDIRPLUS : OPC_READDIR);
        if (size > 128 * 1024)
                size = 128 * 1024;
        char *buf = malloc(size);
        if (!buf) {
                fuse_reply_err(req, ENOMEM);
                return;
        }
        size_t used = 0;
        WRLOCK(); /* readdirplus takes lookup references */
        struct node *dir = node_get(ino);
        if (!dir || !S_ISDIR(dir->mode)) {
                UNLOCK();
                free(buf);
                fuse_reply_err(req, ENOTDIR);
                return;
        }
        /* offsets: 1 = ".", 2 = "..", 2+i+1 = ents[i] */
        for (uint64_t o = (uint64_t)off; o < dir->nents + 2; o++) {
                struct node *n;
                const char *name;
                if (o == 0) {
                        n = dir, name = ".";
                } else if (o == 1) {
                        n = node_get(dir->parent), name = "..";
                        if (!n)
                                n = dir;
                } else {
                        struct dentry *d = dir->ents[o - 2];
                        if (!d)
                                continue;
                        n = node_get(d->ino);
                        name = d->name;
                }
                size_t need;
                if (plus) {
                        struct fuse_entry_param e;
                        fill_entry(n, &e);
                        need = fuse_add_direntry_plus(req, buf + used, size - used, name, &e,
                                                      (off_t)o + 1);
                        if (need > size - used)
                                break;
                        if (o >= 2) /* the kernel keeps no reference for . and .. */
                                n->nlookup++;
                } else {
                        struct stat st = {.st_ino = n->ino, .st_mode = n->mode};
                        need = fuse_add_direntry(req, buf + used, size - used, name, &st,
                                                 (off_t)o + 1);
                        if (need > size - used)
                                break;
                }
                used += need;
        }
        UNLOCK();
        fuse_reply_buf(req, buf, used);
        free(buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi) {
        do_readdir(req, ino, size, off, false);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi) {
        do_readdir(req, ino, size, off, true);
}

static const struct fuse_lowlevel_ops floor_ops = {
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
        .fsyncdir = op_fsync,
        .statfs = op_statfs,
        .setxattr = op_setxattr,
        .getxattr = op_getxattr,
        .listxattr = op_listxattr,
        .removexattr = op_removexattr,
        .access = op_access,
        .create = op_create,
        .fallocate = op_fallocate,
};

/* ---- setup ----------------------------------------------------------- */

static int floor_init(void) {
        if (pthread_rwlock_init(&F.lock, NULL) != 0)
                return -ENOMEM;
        F.hsize = 1024;
        F.hash = calloc(F.hsize, sizeof(*F.hash));
        F.next_ino = FUSE_ROOT_ID;
        if (!F.hash)
                return -ENOMEM;
        struct node *root = node_new(S_IFDIR | 0755, getuid(), getgid());
        if (!root)
                return -ENOMEM;
        root->parent = FUSE_ROOT_ID;
        return 0;
}

static void floor_destroy(void) {
        for (size_t i = 0; i < F.hsize; i++)
                for (struct dentry *d = F.hash ? F.hash[i] : NULL, *nd; d; d = nd) {
                        nd = d->hnext;
                        free(d);
                }
        free(F.hash);
        for (size_t i = 0; i < F.ninodes; i++) {
                struct node *n = F.inodes[i];
                if (!n)
                        continue;
                node_free_data(n, 0);
                free(n->blocks);
                free(n->target);
                free(n->ents);
                for (struct xattr *x = n->xattrs, *nx; x; x = nx) {
                        nx = x->next;
                        free(x->value);
                        free(x);
                }
                free(n);
                F.inodes[i] = NULL;
        }
        free(F.inodes);
        for (struct slab *sl = slabs, *ns; sl; sl = ns) {
                ns = sl->next;
                munmap(sl->mem, SLAB_SIZE);
                free(sl);
        }
        pthread_rwlock_destroy(&F.lock);
}

static void write_stats(void) {
        if (!F.stats)
                return;
        FILE *f = fopen(F.stats, "we");
        if (!f) {
                fprintf(stderr, "fusefloor: %s: %m\n", F.stats);
                return;
        }
        for (int i = 0; i < OPC__MAX; i++)
                fprintf(f, "%s %llu %llu\n", st_names[i], (unsigned long long)atomic_load(&F.counts[i]),
                        (unsigned long long)atomic_load(&F.ns[i]));
        if (fclose(f) != 0)
                fprintf(stderr, "fusefloor: %s: %m\n", F.stats);
}

#define FLOOR_OPT(t, p) {t, offsetof(struct floor, p), 1}
static const struct fuse_opt floor_opts[] = {
        FLOOR_OPT("writeback", writeback),
        FLOOR_OPT("open", open),
        FLOOR_OPT("opendir", opendir),
        FLOOR_OPT("nopatch", nopatch),
        FLOOR_OPT("flush", flush),
        FLOOR_OPT("nocreate", nocreate),
        FLOOR_OPT("noxattr", noxattr),
        FLOOR_OPT("killpriv2", killpriv2),
        FLOOR_OPT("noautoinval", noautoinval),
        FLOOR_OPT("growpool", growpool),
        {"timeout=%lf", offsetof(struct floor, timeout), 0},
        {"prealloc=%u", offsetof(struct floor, prealloc), 0},
        {"stats=%s", offsetof(struct floor, stats), 0},
        FUSE_OPT_END,
};

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs) {
        if (strcmp(arg, "default_permissions") == 0)
                F.default_permissions = 1;
        return 1; /* keep it for libfuse */
}

static void usage(const char *prog) {
        printf("usage: %s MOUNTPOINT [-f] [-d] [-s] [-o opts]\n"
               "floor options: writeback, open, opendir, flush, nocreate, noxattr, nopatch, killpriv2,\n"
               "               noautoinval, growpool,\n"
               "               timeout=SECS,\n"
               "               prealloc=MIB, stats=PATH,\n"
               "               default_permissions (else the daemon checks modes)\n",
               prog);
        fuse_lowlevel_help();
}

int main(int argc, char *argv[]) {
        struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
        struct fuse_cmdline_opts cmd = {0};
        struct fuse_session *se = NULL;
        struct fuse_loop_config *cfg = NULL;
        int ret = 1;

        F.timeout = 1.0;
        if (fuse_opt_parse(&args, &F, floor_opts, opt_proc) != 0 ||
            fuse_parse_cmdline(&args, &cmd) != 0)
                goto out_args;
        if (cmd.show_help || !cmd.mountpoint) {
                usage(argv[0]);
                ret = cmd.show_help ? 0 : 2;
                goto out_args;
        }
        if (cmd.show_version) {
                fuse_lowlevel_version();
                ret = 0;
                goto out_args;
        }
        if (!F.growpool && !cmd.singlethread && (cmd.max_threads < 1 || cmd.max_threads > FUSEPOOL_MAX)) {
                fprintf(stderr, "fusefloor: max_threads is 1..%d\n", FUSEPOOL_MAX);
                goto out_args;
        }
        if (!(F.timeout >= 0 && F.timeout <= 86400 * 365)) {
                fprintf(stderr, "fusefloor: bad timeout\n");
                goto out_args;
        }
        if (fuse_opt_add_arg(&args, "-ofsname=fusefloor,subtype=fusefloor") != 0)
                goto out_args;
        if (F.prealloc > 65536) {
                fprintf(stderr, "fusefloor: prealloc is at most 65536 MiB\n");
                goto out_args;
        }
        if (floor_init() < 0 || blk_prealloc(F.prealloc) < 0) {
                fprintf(stderr, "fusefloor: out of memory\n");
                goto out_floor;
        }
        se = fuse_session_new(&args, &floor_ops, sizeof(floor_ops), &F);
        if (!se)
                goto out_floor;
        if (fuse_set_signal_handlers(se) != 0)
                goto out_session;
        if (fuse_session_mount(se, cmd.mountpoint) != 0)
                goto out_signals;
        static const struct fuse_custom_io io = {.writev = io_writev, .read = io_read};
        if (fuse_session_custom_io(se, &io, fuse_session_fd(se)) != 0) {
                fprintf(stderr, "fusefloor: cannot install the INIT patch\n");
                goto out_unmount;
        }
        if (fuse_daemonize(cmd.foreground) != 0)
                goto out_unmount;
        if (cmd.singlethread) {
                ret = fuse_session_loop(se);
        } else if (!F.growpool) {
                /* every worker from the start, as the ntfs mount (fs/fusepool.h) */
                ret = fusepool_run(se, cmd.max_threads, "fusefloor-wk");
        } else {
                cfg = fuse_loop_cfg_create();
                if (!cfg)
                        goto out_unmount;
                fuse_loop_cfg_set_clone_fd(cfg, cmd.clone_fd);
                if (cmd.max_idle_threads != UINT_MAX) /* UINT_MAX: not given */
                        fuse_loop_cfg_set_idle_threads(cfg, cmd.max_idle_threads);
                fuse_loop_cfg_set_max_threads(cfg, cmd.max_threads ? cmd.max_threads : 10);
                ret = fuse_session_loop_mt(se, cfg);
        }
        ret = ret == 0 ? 0 : 1;
        write_stats();
out_unmount:
        fuse_session_unmount(se);
out_signals:
        fuse_remove_signal_handlers(se);
out_session:
        fuse_session_destroy(se);
out_floor:
        floor_destroy();
out_args:
        fuse_loop_cfg_destroy(cfg);
        free(cmd.mountpoint);
        free(F.stats);
        fuse_opt_free_args(&args);
        return ret;
}
