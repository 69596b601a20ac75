/* SPDX-License-Identifier: MIT
 * fusefloor-names.c — the namespace: nodes made and freed, the global hash
 * of (parent, name), directory entries, and the requests that look up,
 * forget, create, link, unlink, rename and list names (lookup, forget,
 * mknod, mkdir, symlink, create, unlink, rmdir, rename, link, opendir,
 * readdir, readdirplus, releasedir).
 */
#define FUSE_USE_VERSION 312

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tools/fusefloor.h"
#include "common/banned.h"

struct node *node_new(mode_t mode, uid_t uid, gid_t gid) {
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

static void reply_entry_of(fuse_req_t req, struct node *n) {
        struct fuse_entry_param e;
        n->nlookup++;
        fill_entry(n, &e);
        fuse_reply_entry(req, &e);
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
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

void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
        COUNT(OPC_FORGET);
        WRLOCK();
        forget_one(ino, nlookup);
        UNLOCK();
        fuse_reply_none(req);
}

void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f) {
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

void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev) {
        COUNT(OPC_MKNOD);
        reply_new(req, parent, name, mode, rdev, NULL);
}

void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode) {
        COUNT(OPC_MKDIR);
        reply_new(req, parent, name, S_IFDIR | (mode & 07777), 0, NULL);
}

void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name) {
        COUNT(OPC_SYMLINK);
        if (strlen(link) >= 4096) {
                fuse_reply_err(req, ENAMETOOLONG);
                return;
        }
        reply_new(req, parent, name, S_IFLNK | 0777, 0, link);
}

void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
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

void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name) {
        COUNT(OPC_UNLINK);
        WRLOCK();
        int err = do_unlink(req, parent, name, false);
        UNLOCK();
        fuse_reply_err(req, err);
}

void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name) {
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

void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
               const char *newname, unsigned int flags) {
        COUNT(OPC_RENAME);
        WRLOCK();
        int err = do_rename(req, parent, name, newparent, newname, flags);
        UNLOCK();
        fuse_reply_err(req, err);
}

void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname) {
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

void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
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

void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
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

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                struct fuse_file_info *fi) {
        do_readdir(req, ino, size, off, false);
}

void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi) {
        do_readdir(req, ino, size, off, true);
}
