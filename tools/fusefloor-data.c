/* SPDX-License-Identifier: MIT
 * fusefloor-data.c — file contents and attributes: the block allocator
 * (2 MiB slabs, see fusefloor.h) and the requests that read and change a
 * node's data, attributes and xattrs (getattr, setattr, readlink, open,
 * read, write, fallocate, flush, fsync, statfs, the xattr requests, access).
 */
#define FUSE_USE_VERSION 312

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
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
#include "common/banned.h"

static char zero_block[BLK_SIZE];

struct slab *slabs;
char *blk_freelist; /* freed blocks */
static char *blk_zerolist; /* pre-faulted blocks, still zero (-o prealloc) */

/* a new block from the current slab (a new slab when it is full) */
static char *blk_carve(void) {
        if (!slabs || slabs->used == SLAB_SIZE) {
                struct slab *s = calloc(1, sizeof(*s));
                if (!s)
                        return NULL;
                /* map twice the size to carve out a 2 MiB-aligned slab */
                char *p = mmap(NULL, 2 * SLAB_SIZE, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (p == MAP_FAILED) {
                        free(s);
                        return NULL;
                }
                char *a = (char *)(((uintptr_t)p + SLAB_SIZE - 1) & ~(uintptr_t)(SLAB_SIZE - 1));
                if (a > p)
                        munmap(p, (size_t)(a - p));
                if (a + SLAB_SIZE < p + 2 * SLAB_SIZE)
                        munmap(a + SLAB_SIZE, (size_t)(p + 2 * SLAB_SIZE - (a + SLAB_SIZE)));
                (void)madvise(a, SLAB_SIZE, MADV_HUGEPAGE); /* best effort */
                s->mem = a;
                s->next = slabs;
                slabs = s;
        }
        char *b = slabs->mem + slabs->used;
        slabs->used += BLK_SIZE;
        return b;
}

static char *blk_alloc(void) {
        if (blk_zerolist) {
                char *b = blk_zerolist;
                memcpy(&blk_zerolist, b, sizeof(char *));
                memset(b, 0, sizeof(uintptr_t)); /* the list link */
                return b;
        }
        if (blk_freelist) {
                char *b = blk_freelist;
                memcpy(&blk_freelist, b, sizeof(char *));
                memset(b, 0, BLK_SIZE);
                return b;
        }
        return blk_carve();
}

/* -o prealloc=MIB: fault in MIB of blocks at start-up (off the clock) */
int blk_prealloc(size_t mib) {
        for (size_t i = 0; i < mib * ((size_t)1 << 20) / BLK_SIZE; i++) {
                char *b = blk_carve();
                if (!b)
                        return -ENOMEM;
                memset(b, 0, BLK_SIZE); /* the first touch */
                memcpy(b, &blk_zerolist, sizeof(char *));
                blk_zerolist = b;
        }
        return 0;
}

static bool is_owner(fuse_req_t req, const struct node *n) {
        const struct fuse_ctx *c = fuse_req_ctx(req);
        return F.default_permissions || c->uid == 0 || c->uid == n->uid;
}

static struct xattr **xattr_find(struct node *n, const char *name);
static void xattr_unlink(struct xattr **p);

/* The caller writes to, truncates or chowns n: drop setuid / setgid, and
 * with HANDLE_KILLPRIV_V2 (the kernel no longer does it) the file
 * capabilities. */
static void kill_priv(fuse_req_t req, struct node *n, bool always) {
        if (!S_ISREG(n->mode))
                return;
        if (!always && fuse_req_ctx(req)->uid == 0)
                return;
        n->mode &= ~(mode_t)S_ISUID;
        if (n->mode & S_IXGRP)
                n->mode &= ~(mode_t)S_ISGID;
        struct xattr **p = F.killpriv2_on ? xattr_find(n, "security.capability") : NULL;
        if (p && *p)
                xattr_unlink(p);
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        COUNT(OPC_GETATTR);
        RDLOCK();
        struct node *n = node_get(ino);
        struct stat st;
        if (n)
                fill_stat(n, &st);
        UNLOCK();
        if (n)
                fuse_reply_attr(req, &st, F.timeout);
        else
                fuse_reply_err(req, ENOENT);
}

/* Sets the size of n; frees blocks past the end and zeroes the tail of the last. */
static int set_size(struct node *n, uint64_t size) {
        if (size > MAX_FILE_SIZE)
                return -EFBIG;
        if (size < n->size) {
                uint64_t keep = (size + BLK_SIZE - 1) >> BLK_SHIFT;
                node_free_data(n, keep);
                size_t off = size & (BLK_SIZE - 1), cap = blk_cap(n, size >> BLK_SHIFT);
                if (off && off < cap)
                        memset(n->blocks[size >> BLK_SHIFT] + off, 0, cap - off);
        }
        n->size = size;
        return 0;
}

static void set_time(struct timespec *dst, const struct timespec *src, bool use_now) {
        if (use_now)
                now(dst);
        else
                *dst = *src;
}

void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                struct fuse_file_info *fi) {
        COUNT(OPC_SETATTR);
        WRLOCK();
        struct node *n = node_get(ino);
        int err = 0;
        const struct fuse_ctx *c = fuse_req_ctx(req);
        if (!n) {
                err = ENOENT;
                goto out;
        }
        if ((to_set & FUSE_SET_ATTR_MODE) && !is_owner(req, n))
                err = EPERM;
        if ((to_set & FUSE_SET_ATTR_UID) && !F.default_permissions && c->uid != 0 &&
            attr->st_uid != n->uid)
                err = EPERM;
        if ((to_set & FUSE_SET_ATTR_GID) && !F.default_permissions && c->uid != 0 &&
            (c->uid != n->uid || attr->st_gid != c->gid))
                err = EPERM;
        if ((to_set & FUSE_SET_ATTR_SIZE) && fi == NULL && !may(req, n, W_OK))
                err = EACCES;
        if ((to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME)) && !is_owner(req, n))
                err = EPERM;
        if ((to_set & (FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW)) &&
            !is_owner(req, n) && !may(req, n, W_OK))
                err = EACCES;
        if (err)
                goto out;
        if (to_set & FUSE_SET_ATTR_SIZE) {
                if (!S_ISREG(n->mode)) {
                        err = S_ISDIR(n->mode) ? EISDIR : EINVAL;
                        goto out;
                }
                int r = set_size(n, (uint64_t)attr->st_size);
                if (r < 0) {
                        err = -r;
                        goto out;
                }
                kill_priv(req, n, false);
                now(&n->mtime);
        }
        if (to_set & FUSE_SET_ATTR_MODE)
                n->mode = (n->mode & S_IFMT) | (attr->st_mode & 07777);
        if (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
                if (to_set & FUSE_SET_ATTR_UID)
                        n->uid = attr->st_uid;
                if (to_set & FUSE_SET_ATTR_GID)
                        n->gid = attr->st_gid;
                if (!(to_set & FUSE_SET_ATTR_MODE))
                        kill_priv(req, n, true);
        }
        if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW))
                set_time(&n->atime, &attr->st_atim, to_set & FUSE_SET_ATTR_ATIME_NOW);
        if (to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW))
                set_time(&n->mtime, &attr->st_mtim, to_set & FUSE_SET_ATTR_MTIME_NOW);
        if (to_set & FUSE_SET_ATTR_CTIME)
                n->ctime = attr->st_ctim;
        else
                now(&n->ctime);
out:;
        struct stat st;
        if (!err)
                fill_stat(n, &st);
        UNLOCK();
        if (err)
                fuse_reply_err(req, err);
        else
                fuse_reply_attr(req, &st, F.timeout);
}

void op_readlink(fuse_req_t req, fuse_ino_t ino) {
        COUNT(OPC_READLINK);
        RDLOCK();
        struct node *n = node_get(ino);
        char *t = n && n->target ? strdup(n->target) : NULL;
        UNLOCK();
        if (!n || !S_ISLNK(n->mode))
                fuse_reply_err(req, EINVAL);
        else if (!t)
                fuse_reply_err(req, ENOMEM);
        else
                fuse_reply_readlink(req, t);
        free(t);
}

void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        COUNT(OPC_OPEN);
        if (!F.open) {
                fuse_reply_err(req, ENOSYS); /* the kernel stops sending OPEN */
                return;
        }
        RDLOCK();
        struct node *n = node_get(ino);
        int acc = fi->flags & O_ACCMODE;
        int mask = acc == O_RDONLY ? R_OK : acc == O_WRONLY ? W_OK : R_OK | W_OK;
        int err = !n ? ENOENT : !may(req, n, mask) ? EACCES : 0;
        UNLOCK();
        if (!err && (fi->flags & O_TRUNC)) {
                WRLOCK();
                n = node_get(ino);
                if (n && S_ISREG(n->mode)) {
                        set_size(n, 0);
                        now(&n->mtime);
                        n->ctime = n->mtime;
                }
                UNLOCK();
        }
        fi->keep_cache = 1;
        if (err)
                fuse_reply_err(req, err);
        else
                fuse_reply_open(req, fi);
}

void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        COUNT(OPC_RELEASE);
        fuse_reply_err(req, 0);
}

void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
             struct fuse_file_info *fi) {
        COUNT(OPC_READ);
        struct iovec iov[MAX_WRITE / BLK_SIZE + 3];
        int cnt = 0;
        if (size > MAX_WRITE)
                size = MAX_WRITE;
        RDLOCK();
        struct node *n = node_get(ino);
        if (!n || S_ISDIR(n->mode)) {
                UNLOCK();
                fuse_reply_err(req, n ? EISDIR : ENOENT);
                return;
        }
        uint64_t pos = (uint64_t)off, end = pos + size;
        if (end > n->size)
                end = n->size;
        while (pos < end) {
                uint64_t b = pos >> BLK_SHIFT;
                size_t boff = pos & (BLK_SIZE - 1);
                size_t len = (size_t)NTFS_MIN((uint64_t)(BLK_SIZE - boff), end - pos);
                size_t cap = blk_cap(n, b);
                if (boff < cap)
                        len = NTFS_MIN(len, cap - boff);
                iov[cnt].iov_base = boff < cap ? n->blocks[b] + boff : zero_block;
                iov[cnt].iov_len = len;
                cnt++;
                pos += len;
        }
        fuse_reply_iov(req, iov, cnt); /* copies under the lock */
        UNLOCK();
}

static int ensure_blocks(struct node *n, uint64_t nb) {
        if (nb <= n->nblocks)
                return 0;
        size_t c = n->nblocks ? n->nblocks : 16;
        while (c < nb)
                c *= 2;
        char **t = realloc(n->blocks, c * sizeof(*t));
        if (!t)
                return -ENOMEM;
        memset(t + n->nblocks, 0, (c - n->nblocks) * sizeof(*t));
        n->blocks = t;
        n->nblocks = c;
        return 0;
}

void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
              struct fuse_file_info *fi) {
        COUNT(OPC_WRITE);
        WRLOCK();
        struct node *n = node_get(ino);
        int err = 0;
        uint64_t pos = (uint64_t)off;
        if (!n)
                err = ENOENT;
        else if (!S_ISREG(n->mode))
                err = EINVAL;
        else if (off < 0 || pos + size > MAX_FILE_SIZE)
                err = EFBIG;
        else if (size > 0)
                err = -ensure_blocks(n, ((pos + size - 1) >> BLK_SHIFT) + 1);
        for (size_t done = 0; !err && done < size;) {
                uint64_t b = pos >> BLK_SHIFT;
                size_t boff = pos & (BLK_SIZE - 1);
                size_t len = NTFS_MIN(BLK_SIZE - boff, size - done);
                if (b == 0 && n->cap0 < boff + len) { /* grow block 0 */
                        size_t c = NTFS_MAX(boff + len, n->cap0 * 2);
                        c = NTFS_MIN((c + 63) & ~(size_t)63, BLK_SIZE);
                        char *nb = realloc(n->blocks[0], c);
                        if (!nb) {
                                err = ENOMEM;
                                break;
                        }
                        memset(nb + n->cap0, 0, c - n->cap0);
                        n->blocks[0] = nb;
                        n->cap0 = c;
                } else if (!n->blocks[b] && !(n->blocks[b] = blk_alloc())) {
                        err = ENOMEM;
                        break;
                }
                memcpy(n->blocks[b] + boff, buf + done, len);
                done += len;
                pos += len;
        }
        if (!err) {
                if (pos > n->size)
                        n->size = pos;
                kill_priv(req, n, false);
                now(&n->mtime);
                n->ctime = n->mtime;
        }
        UNLOCK();
        if (err)
                fuse_reply_err(req, err);
        else
                fuse_reply_write(req, size);
}

void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                  struct fuse_file_info *fi) {
        COUNT(OPC_FALLOCATE);
        if (mode != 0) {
                fuse_reply_err(req, EOPNOTSUPP);
                return;
        }
        WRLOCK();
        struct node *n = node_get(ino);
        int err = !n ? ENOENT : !S_ISREG(n->mode) ? ENODEV : off < 0 || len <= 0 ? EINVAL : 0;
        uint64_t end = (uint64_t)off + (uint64_t)len;
        if (!err && end > MAX_FILE_SIZE)
                err = EFBIG;
        if (!err && end > n->size) {
                n->size = end; /* holes read as zeroes; blocks come on write */
                now(&n->ctime);
        }
        UNLOCK();
        fuse_reply_err(req, err);
}

void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        COUNT(OPC_FLUSH);
        fuse_reply_err(req, F.flush ? 0 : ENOSYS); /* ENOSYS: no FLUSH per close() any more */
}

void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
        COUNT(OPC_FSYNC);
        fuse_reply_err(req, 0); /* memory is as durable as the floor gets */
}

void op_statfs(fuse_req_t req, fuse_ino_t ino) {
        COUNT(OPC_STATFS);
        struct statvfs sv = {
                .f_bsize = 4096, .f_frsize = 4096,
                .f_blocks = (MAX_FILE_SIZE * 16) / 4096, .f_bfree = (MAX_FILE_SIZE * 16) / 4096,
                .f_bavail = (MAX_FILE_SIZE * 16) / 4096, .f_files = 1u << 30,
                .f_ffree = 1u << 30, .f_favail = 1u << 30, .f_namemax = 255,
        };
        fuse_reply_statfs(req, &sv);
}

static struct xattr **xattr_find(struct node *n, const char *name) {
        struct xattr **p = &n->xattrs;
        while (*p && strcmp((*p)->name, name) != 0)
                p = &(*p)->next;
        return p;
}

/* Takes *p (an attribute) off its list and frees it. */
static void xattr_unlink(struct xattr **p) {
        struct xattr *x = *p;
        *p = x->next;
        free(x->value);
        free(x);
}

void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                 size_t size, int flags) {
        COUNT(OPC_SETXATTR);
        if (F.noxattr) {
                fuse_reply_err(req, ENOSYS);
                return;
        }
        if (size > MAX_XATTR_SIZE || strlen(name) > 255) {
                fuse_reply_err(req, size > MAX_XATTR_SIZE ? E2BIG : ERANGE);
                return;
        }
        WRLOCK();
        struct node *n = node_get(ino);
        int err = 0;
        struct xattr **p = n ? xattr_find(n, name) : NULL;
        if (!n)
                err = ENOENT;
        else if (!is_owner(req, n))
                err = EPERM;
        else if ((flags & XATTR_CREATE) && *p)
                err = EEXIST;
        else if ((flags & XATTR_REPLACE) && !*p)
                err = ENODATA;
        if (!err) {
                char *v = malloc(size ? size : 1);
                if (!v) {
                        err = ENOMEM;
                } else {
                        memcpy(v, value, size);
                        if (!*p) {
                                size_t nl = strlen(name);
                                struct xattr *x = calloc(1, sizeof(*x) + nl + 1);
                                if (!x) {
                                        free(v);
                                        err = ENOMEM;
                                        goto out;
                                }
                                memcpy(x->name, name, nl + 1);
                                *p = x;
                        }
                        free((*p)->value);
                        (*p)->value = v;
                        (*p)->size = size;
                        now(&n->ctime);
                }
        }
out:
        UNLOCK();
        fuse_reply_err(req, err);
}

void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size) {
        COUNT(OPC_GETXATTR);
        if (F.noxattr) {
                fuse_reply_err(req, ENOSYS);
                return;
        }
        RDLOCK();
        struct node *n = node_get(ino);
        struct xattr *x = n ? *xattr_find(n, name) : NULL;
        if (!n)
                fuse_reply_err(req, ENOENT);
        else if (!x)
                fuse_reply_err(req, ENODATA);
        else if (size == 0)
                fuse_reply_xattr(req, x->size);
        else if (size < x->size)
                fuse_reply_err(req, ERANGE);
        else
                fuse_reply_buf(req, x->value, x->size);
        UNLOCK();
}

void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
        COUNT(OPC_LISTXATTR);
        if (F.noxattr) {
                fuse_reply_err(req, ENOSYS);
                return;
        }
        RDLOCK();
        struct node *n = node_get(ino);
        size_t total = 0;
        for (struct xattr *x = n ? n->xattrs : NULL; x; x = x->next)
                total += strlen(x->name) + 1;
        char *buf = total && size >= total ? malloc(total) : NULL;
        if (buf) {
                size_t o = 0;
                for (struct xattr *x = n->xattrs; x; x = x->next) {
                        size_t l = strlen(x->name) + 1;
                        memcpy(buf + o, x->name, l);
                        o += l;
                }
        }
        UNLOCK();
        if (!n)
                fuse_reply_err(req, ENOENT);
        else if (size == 0)
                fuse_reply_xattr(req, total);
        else if (size < total)
                fuse_reply_err(req, ERANGE);
        else if (total && !buf)
                fuse_reply_err(req, ENOMEM);
        else
                fuse_reply_buf(req, buf, total);
        free(buf);
}

void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name) {
        COUNT(OPC_REMOVEXATTR);
        if (F.noxattr) {
                fuse_reply_err(req, ENOSYS);
                return;
        }
        WRLOCK();
        struct node *n = node_get(ino);
        struct xattr **p = n ? xattr_find(n, name) : NULL;
        int err = !n ? ENOENT : !is_owner(req, n) ? EPERM : !*p ? ENODATA : 0;
        if (!err) {
                xattr_unlink(p);
                now(&n->ctime);
        }
        UNLOCK();
        fuse_reply_err(req, err);
}

void op_access(fuse_req_t req, fuse_ino_t ino, int mask) {
        COUNT(OPC_ACCESS);
        RDLOCK();
        struct node *n = node_get(ino);
        int err = !n ? ENOENT : (mask != F_OK && !may(req, n, mask)) ? EACCES : 0;
        UNLOCK();
        fuse_reply_err(req, err);
}
