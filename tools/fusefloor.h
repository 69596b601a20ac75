/* SPDX-License-Identifier: MIT
 * fusefloor.h — what the source files of fusefloor share: the in-memory
 * model (nodes, directory entries, data blocks, xattrs) in the one global
 * struct floor, the per-request counters and lock macros, and the small
 * helpers both request files call, inline so that each request is served
 * by the code of one file. The design is described at the top of
 * tools/fusefloor.c.
 */
#ifndef NTFS_TOOLS_FUSEFLOOR_H
#define NTFS_TOOLS_FUSEFLOOR_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 312
#endif

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define BLK_SHIFT 16
#define BLK_SIZE ((size_t)1 << BLK_SHIFT)
#define MAX_FILE_SIZE ((uint64_t)64 << 30) /* bounds the block table: 8 MiB */
#define MAX_XATTR_SIZE 65536
#define MAX_WRITE ((unsigned)1 << 20)

struct xattr {
        struct xattr *next;
        size_t size;
        char *value;
        char name[];
};

struct dentry {
        struct dentry *hnext; /* hash chain */
        uint64_t parent;
        uint64_t ino;
        size_t slot; /* index in the parent's ents[] */
        size_t len;
        char name[];
};

struct node {
        uint64_t ino;
        uint64_t nlookup; /* the kernel's references */
        mode_t mode;
        uid_t uid;
        gid_t gid;
        dev_t rdev;
        nlink_t nlink;
        uint64_t size;
        struct timespec atime, mtime, ctime;
        char **blocks; /* regular file: nblocks pointers, NULL = hole */
        size_t nblocks;
        size_t cap0; /* bytes allocated for blocks[0] (malloc'd) */
        char *target; /* symlink */
        struct dentry **ents; /* directory */
        size_t nents, cap, live;
        uint64_t parent; /* directory: the parent's inode */
        struct xattr *xattrs;
};

enum { OPC_LOOKUP, OPC_FORGET, OPC_GETATTR, OPC_SETATTR, OPC_READLINK, OPC_MKNOD, OPC_MKDIR,
       OPC_UNLINK, OPC_RMDIR, OPC_SYMLINK, OPC_RENAME, OPC_LINK, OPC_OPEN, OPC_READ, OPC_WRITE,
       OPC_FLUSH, OPC_RELEASE, OPC_FSYNC, OPC_OPENDIR, OPC_READDIR, OPC_READDIRPLUS, OPC_RELEASEDIR,
       OPC_STATFS, OPC_SETXATTR, OPC_GETXATTR, OPC_LISTXATTR, OPC_REMOVEXATTR, OPC_ACCESS,
       OPC_CREATE, OPC_FALLOCATE, OPC__MAX };

struct floor {
        pthread_rwlock_t lock;
        struct node **inodes;
        size_t ninodes; /* table size */
        uint64_t next_ino;
        struct dentry **hash;
        size_t hsize, hcount;
        /* options */
        int writeback, open, opendir, nopatch, default_permissions, flush, nocreate, noxattr, killpriv2,
                noautoinval, growpool;
        unsigned prealloc; /* MiB */
        double timeout;
        char *stats;
        /* INIT reply patch: kernel flags libfuse 3.14 forgets to send */
        uint32_t extra_flags;
        atomic_bool init_seen;
        uint32_t kernel_minor, kernel_flags; /* what the kernel's INIT offered */
        bool killpriv2_on;                   /* FUSE_HANDLE_KILLPRIV_V2 sent */
        atomic_uint_fast64_t counts[OPC__MAX];
        atomic_uint_fast64_t ns[OPC__MAX]; /* with stats: from reading a request to its reply */
};

/* Defined in fusefloor.c. */
extern struct floor F;

/* The request this worker read and when (stats=PATH only): its handler
 * names the type (COUNT), the reply (io_writev, same thread) adds the time.
 * local-exec, as when they were static in one file: the program is the
 * only module that has them. Defined in fusefloor-io.c. */
extern __thread struct timespec tls_start __attribute__((tls_model("local-exec")));
extern __thread int tls_op __attribute__((tls_model("local-exec")));
#define COUNT(op) (atomic_fetch_add_explicit(&F.counts[op], 1, memory_order_relaxed), tls_op = (op))
#define WRLOCK() pthread_rwlock_wrlock(&F.lock)
#define RDLOCK() pthread_rwlock_rdlock(&F.lock)
#define UNLOCK() pthread_rwlock_unlock(&F.lock)

/* File data. Block 0 is malloc'd with a capacity that grows (cap0), so a
 * small file costs its size, not a block. Blocks 1.. come from 2 MiB slabs
 * backed by transparent huge pages: first-touch page faults on ordinary
 * memory cost ~5 us per 4 KiB page on this VM (1 GiB written at 130 MB/s
 * instead of ~1 GB/s), which is not what the floor is meant to measure.
 * Freed slab blocks go to a free list (zeroed on reuse). All of it runs
 * under the write lock. */
#define SLAB_SIZE ((size_t)2 << 20)
struct slab {
        struct slab *next;
        char *mem;
        size_t used;
};
/* Defined in fusefloor-data.c. */
extern struct slab *slabs;
extern char *blk_freelist; /* freed blocks */

/* ---- inodes ---------------------------------------------------------- */

static inline void now(struct timespec *ts) { clock_gettime(CLOCK_REALTIME, ts); }

static inline struct node *node_get(uint64_t ino) {
        return ino < F.ninodes ? F.inodes[ino] : NULL;
}

static inline void blk_free(char *b) {
        memcpy(b, &blk_freelist, sizeof(char *));
        blk_freelist = b;
}

/* bytes of block b that hold data (the rest reads as zeroes) */
static inline size_t blk_cap(const struct node *n, uint64_t b) {
        if (b >= n->nblocks || !n->blocks[b])
                return 0;
        return b == 0 ? n->cap0 : BLK_SIZE;
}

static inline void node_free_data(struct node *n, uint64_t from_block) {
        for (size_t i = from_block; i < n->nblocks; i++) {
                if (!n->blocks[i])
                        continue;
                if (i == 0)
                        free(n->blocks[0]);
                else
                        blk_free(n->blocks[i]);
                n->blocks[i] = NULL;
        }
        if (from_block == 0)
                n->cap0 = 0;
}

static inline void fill_stat(const struct node *n, struct stat *st) {
        memset(st, 0, sizeof(*st));
        st->st_ino = n->ino;
        st->st_mode = n->mode;
        st->st_nlink = n->nlink;
        st->st_uid = n->uid;
        st->st_gid = n->gid;
        st->st_rdev = n->rdev;
        st->st_size = (off_t)n->size;
        st->st_blksize = 4096;
        size_t used = 0;
        for (size_t i = 0; i < n->nblocks; i++)
                used += blk_cap(n, i);
        if (S_ISREG(n->mode) && used > n->size)
                used = (n->size + 4095) & ~(size_t)4095;
        st->st_blocks = (blkcnt_t)(used / 512);
        st->st_atim = n->atime;
        st->st_mtim = n->mtime;
        st->st_ctim = n->ctime;
}

/* ---- permissions (when the kernel does not check: no default_permissions) */

static inline bool may(fuse_req_t req, const struct node *n, int mask) {
        if (F.default_permissions)
                return true;
        const struct fuse_ctx *c = fuse_req_ctx(req);
        if (c->uid == 0)
                return !(mask & X_OK) || S_ISDIR(n->mode) || (n->mode & 0111);
        mode_t m = n->mode;
        int bits = c->uid == n->uid ? (m >> 6) & 7 : c->gid == n->gid ? (m >> 3) & 7 : m & 7;
        return (bits & mask) == mask;
}

/* ---- the kernel connection (fusefloor-io.c) ------------------------------ */
ssize_t io_read(int fd, void *buf, size_t len, void *ud);
ssize_t io_writev(int fd, struct iovec *iov, int count, void *ud);
void op_init(void *ud, struct fuse_conn_info *conn);

/* ---- file contents and attributes (fusefloor-data.c) --------------------- */
/* -o prealloc=MIB: fault in MIB of blocks at start-up (off the clock) */
int blk_prealloc(size_t mib);
void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                struct fuse_file_info *fi);
void op_readlink(fuse_req_t req, fuse_ino_t ino);
void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
             struct fuse_file_info *fi);
void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
              struct fuse_file_info *fi);
void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                  struct fuse_file_info *fi);
void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void op_statfs(fuse_req_t req, fuse_ino_t ino);
void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                 size_t size, int flags);
void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name);
void op_access(fuse_req_t req, fuse_ino_t ino, int mask);

/* ---- the namespace (fusefloor-names.c) ----------------------------------- */
struct node *node_new(mode_t mode, uid_t uid, gid_t gid);
void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f);
void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev);
void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name);
void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
               struct fuse_file_info *fi);
void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
               const char *newname, unsigned int flags);
void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname);
void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                struct fuse_file_info *fi);
void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi);

#endif
