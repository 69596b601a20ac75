/* SPDX-License-Identifier: MIT
 * import.c — the tree builder (store.h, "the tree builder"): a commit made
 * straight from a stream of entries, for bulk import (fs/sync/archive.c).
 *
 * The directory structure is kept in memory: per directory an open
 * addressing table of (name hash, name) -> node, per node the attributes
 * a tree entry needs. File content never is: each 64 KiB chunk is hashed
 * as it completes (outside the store lock) and stored as a blob unless the
 * store has it; a file object is stored at the file's end. At the commit
 * the trees are built bottom-up with the same encodings, orders and
 * attribute rules as a checkpoint (fs/checkpoint.c), so equal content gets
 * equal ids: directory nlink = 2 + subdirectories, a regular file's rdev
 * field = its stored bytes, all-zero chunks are holes, the last chunk ends
 * at the file size, hard-link groups are LINKREF entries plus a link table
 * with linkids in the order the groups were made, xattrs sorted by name.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/fault.h"
#include "fs/store-internal.h"
#include "common/banned.h"

#define B_MAX_PATH 4096
#define B_MAX_LINK 4095
#define B_MAX_DEPTH 4096
#define B_MAX_XATTR_VALUE (64u * 1024)
#define B_MAX_XATTR_TOTAL (1024u * 1024)
#define B_MAX_NLINK 65000

struct bxattr {
        char *name;
        uint8_t *val;
        size_t len;
};

struct bnode;
struct bdent {
        uint64_t h;
        char *name;
        uint16_t nl;
        struct bnode *node; /* NULL: an empty slot */
};

struct bnode {
        uint32_t mode, uid, gid, nlink; /* nlink: names (non-directories) */
        uint64_t size, rdev, stored;
        int64_t mtime;
        uint64_t linkid;
        ntfs_hash content;  /* file object (at file end), tree (at commit) */
        char *target;       /* symlinks */
        struct bxattr *xa;
        uint32_t nxa;
        size_t xa_bytes;
        /* directories: children */
        struct bdent *slots;
        uint32_t cap, n;
        /* commit */
        bool counted;
        ntfs_hash xattr;
};

struct ntfs_builder {
        ntfs_store *st;
        struct bnode *root;
        uint64_t next_linkid;
        bool committed;
        /* the open file */
        struct bnode *cur;
        ntfs_hash *hashes;
        uint64_t nhashes, hcap;
        uint8_t *chunk; /* 'B' + NTFS_CHUNK_SIZE */
        uint64_t chunk_idx;
        bool chunk_live;
        uint64_t cur_end, cur_stored;
        /* the last parent directory resolved */
        char cache[B_MAX_PATH + 1];
        size_t cache_len;
        struct bnode *cache_dir;
        char errpath[B_MAX_PATH + 1];
};

/* ---- nodes and directory tables ----------------------------------------------------------- */

static struct bnode *node_new(uint32_t mode, uint32_t uid, uint32_t gid, int64_t mtime) {
        struct bnode *n = calloc(1, sizeof *n);
        if (!n)
                return NULL;
        n->mode = mode;
        n->uid = uid;
        n->gid = gid;
        n->mtime = mtime;
        n->nlink = 1;
        return n;
}

static void xattrs_clear(struct bnode *n) {
        for (uint32_t i = 0; i < n->nxa; i++) {
                free(n->xa[i].name);
                free(n->xa[i].val);
        }
        free(n->xa);
        n->xa = NULL;
        n->nxa = 0;
        n->xa_bytes = 0;
}

/* Frees n and (for a directory) everything under it, without recursion. */
static void node_free_tree(struct bnode *top) {
        if (!top)
                return;
        /* a stack of directories whose slots still hold children */
        struct bnode **stack = NULL;
        size_t depth = 0, cap = 0;
        struct bnode *n = top;
        for (;;) {
                bool descended = false;
                if (S_ISDIR(n->mode)) {
                        for (uint32_t i = 0; i < n->cap; i++) {
                                struct bdent *d = &n->slots[i];
                                if (!d->node)
                                        continue;
                                struct bnode *c = d->node;
                                free(d->name);
                                d->node = NULL;
                                d->name = NULL;
                                if (!S_ISDIR(c->mode) && --c->nlink > 0)
                                        continue; /* another name still holds it */
                                if (depth == cap) {
                                        size_t nc = cap ? cap * 2 : 16;
                                        struct bnode **ns = realloc(stack, nc * sizeof *ns);
                                        if (!ns) {
                                                /* cannot descend: leak rather than crash */
                                                continue;
                                        }
                                        stack = ns;
                                        cap = nc;
                                }
                                stack[depth++] = n;
                                n = c;
                                descended = true;
                                break;
                        }
                }
                if (descended)
                        continue;
                free(n->slots);
                free(n->target);
                xattrs_clear(n);
                free(n);
                if (depth == 0)
                        break;
                n = stack[--depth];
        }
        free(stack);
}

static struct bdent *dir_find(struct bnode *d, uint64_t h, const char *name, size_t nl) {
        if (!d->cap)
                return NULL;
        for (uint32_t i = (uint32_t)h & (d->cap - 1);; i = (i + 1) & (d->cap - 1)) {
                struct bdent *e = &d->slots[i];
                if (!e->node)
                        return NULL;
                if (e->h == h && e->nl == nl && memcmp(e->name, name, nl) == 0)
                        return e;
        }
}

static int dir_insert(struct bnode *d, uint64_t h, const char *name, size_t nl, struct bnode *child) {
        if ((d->n + 1) * 2 > d->cap) {
                uint32_t nc = d->cap ? d->cap * 2 : 8;
                if (nc < d->cap)
                        return -EFBIG;
                struct bdent *ns = calloc(nc, sizeof *ns);
                if (!ns)
                        return -ENOMEM;
                for (uint32_t i = 0; i < d->cap; i++) {
                        if (!d->slots[i].node)
                                continue;
                        uint32_t j = (uint32_t)d->slots[i].h & (nc - 1);
                        while (ns[j].node)
                                j = (j + 1) & (nc - 1);
                        ns[j] = d->slots[i];
                }
                free(d->slots);
                d->slots = ns;
                d->cap = nc;
        }
        char *copy = malloc(nl + 1);
        if (!copy)
                return -ENOMEM;
        memcpy(copy, name, nl);
        copy[nl] = 0;
        uint32_t i = (uint32_t)h & (d->cap - 1);
        while (d->slots[i].node)
                i = (i + 1) & (d->cap - 1);
        d->slots[i] = (struct bdent){ h, copy, (uint16_t)nl, child };
        d->n++;
        return 0;
}

/* Removes slot e from d (backward-shift deletion keeps probes intact). */
static void dir_remove(struct bnode *d, struct bdent *e) {
        uint32_t i = (uint32_t)(e - d->slots);
        free(e->name);
        d->slots[i] = (struct bdent){ 0 };
        d->n--;
        for (uint32_t j = (i + 1) & (d->cap - 1); d->slots[j].node; j = (j + 1) & (d->cap - 1)) {
                uint32_t want = (uint32_t)d->slots[j].h & (d->cap - 1);
                /* can slot j move to the hole at i? (want not in (i, j]) */
                bool move = i <= j ? (want <= i || want > j) : (want <= i && want > j);
                if (move) {
                        d->slots[i] = d->slots[j];
                        d->slots[j] = (struct bdent){ 0 };
                        i = j;
                }
        }
}

/* ---- paths ---------------------------------------------------------------------------------- */

static int fail_at(ntfs_builder *b, int err, const char *path, size_t len) {
        if (len > B_MAX_PATH)
                len = B_MAX_PATH;
        memcpy(b->errpath, path, len);
        b->errpath[len] = 0;
        return err;
}

static int check_path(ntfs_builder *b, const char *path, bool root_ok) {
        size_t len = strnlen(path, B_MAX_PATH + 1);
        if (len > B_MAX_PATH)
                return fail_at(b, -ENAMETOOLONG, path, B_MAX_PATH);
        if (len == 0)
                return root_ok ? 0 : fail_at(b, -EINVAL, path, 0);
        for (const char *p = path;;) {
                const char *s = strchr(p, '/');
                size_t n = s ? (size_t)(s - p) : strlen(p);
                if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
                        return fail_at(b, -EINVAL, path, len);
                if (n > NTFS_NAME_MAX)
                        return fail_at(b, -ENAMETOOLONG, path, len);
                if (!s)
                        break;
                p = s + 1;
        }
        return 0;
}

/* Resolves the parent directory of path (checked); with create, makes the
 * missing directories. *ret_leaf points into path. */
static int resolve_parent(ntfs_builder *b, const char *path, bool create, uint32_t uid, uint32_t gid,
                          struct bnode **ret_dir, const char **ret_leaf) {
        const char *slash = strrchr(path, '/');
        size_t plen = slash ? (size_t)(slash - path) : 0;
        *ret_leaf = slash ? slash + 1 : path;
        if (plen == 0) {
                *ret_dir = b->root;
                return 0;
        }
        if (b->cache_dir && b->cache_len == plen && memcmp(b->cache, path, plen) == 0) {
                *ret_dir = b->cache_dir;
                return 0;
        }
        struct bnode *cur = b->root;
        int64_t now = ntfs_now_ns();
        int depth = 0;
        for (size_t i = 0; i < plen;) {
                size_t j = i;
                while (j < plen && path[j] != '/')
                        j++;
                if (++depth > B_MAX_DEPTH)
                        return fail_at(b, -ELOOP, path, j);
                uint64_t h = name_hash(path + i, j - i);
                struct bdent *e = dir_find(cur, h, path + i, j - i);
                struct bnode *next;
                if (!e) {
                        if (!create)
                                return fail_at(b, -ENOENT, path, j);
                        next = node_new(S_IFDIR | 0755, uid, gid, now);
                        if (!next)
                                return -ENOMEM;
                        int r = dir_insert(cur, h, path + i, j - i, next);
                        if (r < 0) {
                                free(next);
                                return r;
                        }
                } else {
                        next = e->node;
                        if (S_ISLNK(next->mode))
                                return fail_at(b, -NTFS_EDENIED, path, j);
                        if (!S_ISDIR(next->mode))
                                return fail_at(b, -ENOTDIR, path, j);
                }
                cur = next;
                i = j + 1;
        }
        memcpy(b->cache, path, plen);
        b->cache_len = plen;
        b->cache_dir = cur;
        *ret_dir = cur;
        return 0;
}

/* The node at path (checked), or -ENOENT. */
static int lookup(ntfs_builder *b, const char *path, struct bnode **ret) {
        if (!path[0]) {
                *ret = b->root;
                return 0;
        }
        struct bnode *dir;
        const char *leaf;
        int r = resolve_parent(b, path, false, 0, 0, &dir, &leaf);
        if (r < 0)
                return r;
        struct bdent *e = dir_find(dir, name_hash(leaf, strlen(leaf)), leaf, strlen(leaf));
        if (!e)
                return fail_at(b, -ENOENT, path, strlen(path));
        *ret = e->node;
        return 0;
}

/* Removes the entry e (in dir) so that a new one can take its name. */
static int make_room(ntfs_builder *b, struct bnode *dir, struct bdent *e, const char *path) {
        struct bnode *old = e->node;
        if (S_ISDIR(old->mode) && old->n > 0)
                return fail_at(b, -ENOTEMPTY, path, strlen(path));
        dir_remove(dir, e);
        b->cache_dir = NULL; /* the cached directory may be gone */
        if (S_ISDIR(old->mode) || --old->nlink == 0)
                node_free_tree(old);
        return 0;
}

/* Puts a new node at path (checked), replacing what is there. */
static int place(ntfs_builder *b, const char *path, struct bnode *n) {
        struct bnode *dir;
        const char *leaf;
        int r = resolve_parent(b, path, true, n->uid, n->gid, &dir, &leaf);
        if (r < 0)
                return r;
        size_t nl = strlen(leaf);
        uint64_t h = name_hash(leaf, nl);
        struct bdent *e = dir_find(dir, h, leaf, nl);
        if (e && (r = make_room(b, dir, e, path)) < 0)
                return r;
        return dir_insert(dir, h, leaf, nl, n);
}

/* ---- public: entries ------------------------------------------------------------------------ */

int ntfs_builder_new(ntfs_store *st, ntfs_builder **ret) {
        if (!st || !ret)
                return -EINVAL;
        ntfs_builder *b = calloc(1, sizeof *b);
        if (!b)
                return -ENOMEM;
        b->st = st;
        b->next_linkid = 1;
        b->root = node_new(S_IFDIR | 0755, 0, 0, ntfs_now_ns());
        b->chunk = malloc(1 + NTFS_CHUNK_SIZE);
        if (!b->root || !b->chunk) {
                ntfs_builder_free(b);
                return -ENOMEM;
        }
        b->chunk[0] = OBJ_BLOB;
        *ret = b;
        return 0;
}

void ntfs_builder_free(ntfs_builder *b) {
        if (!b)
                return;
        node_free_tree(b->root);
        free(b->hashes);
        free(b->chunk);
        free(b);
}

const char *ntfs_builder_error_path(const ntfs_builder *b) {
        return b ? b->errpath : "";
}

static int usable(ntfs_builder *b) {
        b->errpath[0] = 0;
        if (b->committed)
                return -EINVAL;
        return b->cur ? -EBUSY : 0;
}

int ntfs_builder_add_dir(ntfs_builder *b, const char *path, uint32_t mode, uint32_t uid, uint32_t gid,
                         int64_t mtime_ns) {
        if (!b || !path)
                return -EINVAL;
        int r = usable(b);
        if (r == 0)
                r = check_path(b, path, true);
        if (r < 0)
                return r;
        struct bnode *n = NULL;
        if (!path[0])
                n = b->root;
        else {
                struct bnode *dir;
                const char *leaf;
                if ((r = resolve_parent(b, path, true, uid, gid, &dir, &leaf)) < 0)
                        return r;
                struct bdent *e = dir_find(dir, name_hash(leaf, strlen(leaf)), leaf, strlen(leaf));
                if (e && S_ISDIR(e->node->mode))
                        n = e->node; /* keeps its children, takes the new attributes */
        }
        if (n) {
                n->mode = S_IFDIR | (mode & 07777);
                n->uid = uid;
                n->gid = gid;
                n->mtime = mtime_ns;
                return 0;
        }
        if (!(n = node_new(S_IFDIR | (mode & 07777), uid, gid, mtime_ns)))
                return -ENOMEM;
        if ((r = place(b, path, n)) < 0)
                free(n);
        return r;
}

int ntfs_builder_add_node(ntfs_builder *b, const char *path, uint32_t mode, uint64_t rdev, uint32_t uid,
                          uint32_t gid, int64_t mtime_ns) {
        if (!b || !path || !(S_ISFIFO(mode) || S_ISSOCK(mode) || S_ISCHR(mode) || S_ISBLK(mode)))
                return -EINVAL;
        int r = usable(b);
        if (r == 0)
                r = check_path(b, path, false);
        if (r < 0)
                return r;
        struct bnode *n = node_new((mode & S_IFMT) | (mode & 07777), uid, gid, mtime_ns);
        if (!n)
                return -ENOMEM;
        n->rdev = S_ISCHR(mode) || S_ISBLK(mode) ? rdev : 0;
        if ((r = place(b, path, n)) < 0)
                free(n);
        return r;
}

int ntfs_builder_add_symlink(ntfs_builder *b, const char *path, const char *target, uint32_t uid, uint32_t gid,
                             int64_t mtime_ns) {
        if (!b || !path || !target)
                return -EINVAL;
        int r = usable(b);
        if (r == 0)
                r = check_path(b, path, false);
        if (r < 0)
                return r;
        size_t tl = strnlen(target, B_MAX_LINK + 1);
        if (tl == 0)
                return fail_at(b, -EINVAL, path, strlen(path));
        if (tl > B_MAX_LINK)
                return fail_at(b, -ENAMETOOLONG, path, strlen(path));
        struct bnode *n = node_new(S_IFLNK | 0777, uid, gid, mtime_ns);
        if (!n || !(n->target = strdup(target))) {
                free(n);
                return -ENOMEM;
        }
        n->size = tl;
        if ((r = place(b, path, n)) < 0) {
                free(n->target);
                free(n);
        }
        return r;
}

int ntfs_builder_add_hardlink(ntfs_builder *b, const char *path, const char *target) {
        if (!b || !path || !target)
                return -EINVAL;
        int r = usable(b);
        if (r == 0)
                r = check_path(b, target, false);
        if (r == 0)
                r = check_path(b, path, false);
        if (r < 0)
                return r;
        struct bnode *t;
        if ((r = lookup(b, target, &t)) < 0)
                return r;
        if (S_ISDIR(t->mode))
                return fail_at(b, -EPERM, target, strlen(target));
        struct bnode *dir;
        const char *leaf;
        if ((r = resolve_parent(b, path, true, t->uid, t->gid, &dir, &leaf)) < 0)
                return r;
        size_t nl = strlen(leaf);
        uint64_t h = name_hash(leaf, nl);
        struct bdent *e = dir_find(dir, h, leaf, nl);
        if (e && e->node == t)
                return 0; /* already that file */
        if (t->nlink >= B_MAX_NLINK)
                return fail_at(b, -EMLINK, path, strlen(path));
        /* t survives make_room: it is not at path */
        if (e && (r = make_room(b, dir, e, path)) < 0)
                return r;
        if ((r = dir_insert(dir, h, leaf, nl, t)) < 0)
                return r;
        t->nlink++;
        if (!t->linkid)
                t->linkid = b->next_linkid++;
        return 0;
}

int ntfs_builder_set_xattr(ntfs_builder *b, const char *path, const char *name, const void *value, size_t len) {
        if (!b || !path || !name || (len && !value))
                return -EINVAL;
        int r = usable(b);
        if (r == 0)
                r = check_path(b, path, true);
        if (r < 0)
                return r;
        size_t nl = strnlen(name, NTFS_NAME_MAX + 1);
        if (nl == 0 || nl > NTFS_NAME_MAX)
                return fail_at(b, -EINVAL, path, strlen(path));
        if (len > B_MAX_XATTR_VALUE)
                return fail_at(b, -E2BIG, path, strlen(path));
        struct bnode *n;
        if ((r = lookup(b, path, &n)) < 0)
                return r;
        uint32_t i = 0;
        while (i < n->nxa && strcmp(n->xa[i].name, name) != 0)
                i++;
        size_t old = i < n->nxa ? n->xa[i].len + nl : 0;
        if (n->xa_bytes - old + nl + len > B_MAX_XATTR_TOTAL)
                return fail_at(b, -E2BIG, path, strlen(path));
        uint8_t *v = malloc(len ? len : 1);
        if (!v)
                return -ENOMEM;
        if (len)
                memcpy(v, value, len);
        if (i == n->nxa) {
                struct bxattr *nx = realloc(n->xa, (n->nxa + 1) * sizeof *nx);
                char *nm = strdup(name);
                if (!nx || !nm) {
                        if (nx)
                                n->xa = nx;
                        free(nm);
                        free(v);
                        return -ENOMEM;
                }
                n->xa = nx;
                n->xa[n->nxa++] = (struct bxattr){ nm, NULL, 0 };
        } else
                free(n->xa[i].val);
        n->xa[i].val = v;
        n->xa[i].len = len;
        n->xa_bytes = n->xa_bytes - old + nl + len;
        return 0;
}

/* ---- public: file content ------------------------------------------------------------------ */

/* Stores data (type byte first) under its precomputed hash unless the store
 * has it. Lock held. */
static int put_hashed(ntfs_store *st, const ntfs_hash *h, const void *data, size_t len) {
        MDB_val key = { NTFS_HASH_LEN, (void *)h->b }, val;
        int rc = mdb_get(st->txn, st->obj, &key, &val);
        if (rc == 0)
                return 0; /* existing objects are never rewritten */
        if (rc != MDB_NOTFOUND)
                return lmdb_err(rc);
        val = (MDB_val){ len, (void *)data };
        rc = mdb_put(st->txn, st->obj, &key, &val, MDB_NOOVERWRITE);
        if (rc == MDB_KEYEXIST)
                return 0;
        if (rc) {
                st->txn_broken = true;
                return lmdb_err(rc);
        }
        st->txn_bytes += len;
        return 0;
}

static int put_object(ntfs_store *st, const void *data, size_t len, ntfs_hash *ret) {
        ntfs_hash h;
        ntfs_sha256(data, len, h.b); /* outside the lock */
        int r = store_enter(st);
        if (r < 0)
                return r;
        r = put_hashed(st, &h, data, len);
        store_leave(st);
        if (r == 0)
                *ret = h;
        return r;
}

static bool all_zero(const uint8_t *p, size_t n) {
        return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

static int hashes_reserve(ntfs_builder *b, uint64_t n) {
        if (n <= b->hcap)
                return 0;
        if (n > UINT32_MAX)
                return -EFBIG;
        uint64_t nc = b->hcap ? b->hcap : 16;
        while (nc < n)
                nc *= 2;
        ntfs_hash *nh = realloc(b->hashes, (size_t)nc * sizeof *nh);
        if (!nh)
                return -ENOMEM;
        b->hashes = nh;
        b->hcap = nc;
        return 0;
}

/* Stores the buffered chunk (its first len bytes) and records its hash;
 * the chunks between the last recorded one and it are holes. */
static int flush_chunk(ntfs_builder *b, size_t len) {
        uint64_t idx = b->chunk_idx;
        int r = hashes_reserve(b, idx + 1);
        if (r < 0)
                return r;
        while (b->nhashes < idx)
                memset(&b->hashes[b->nhashes++], 0, sizeof(ntfs_hash));
        ntfs_hash h = { 0 };
        if (!all_zero(b->chunk + 1, len)) {
                if ((r = put_object(b->st, b->chunk, len + 1, &h)) < 0)
                        return r;
                b->cur_stored += len;
        }
        b->hashes[b->nhashes++] = h;
        b->chunk_live = false;
        return 0;
}

int ntfs_builder_file_begin(ntfs_builder *b, const char *path, uint32_t mode, uint32_t uid, uint32_t gid,
                            int64_t mtime_ns, unsigned flags) {
        if (!b || !path || (flags & ~(unsigned)NTFS_BUILD_REWRITE))
                return -EINVAL;
        int r = usable(b);
        if (r == 0)
                r = check_path(b, path, false);
        if (r < 0)
                return r;
        struct bnode *n = NULL;
        if (flags & NTFS_BUILD_REWRITE) {
                r = lookup(b, path, &n);
                if (r < 0 && r != -ENOENT)
                        return r;
                if (n && !S_ISREG(n->mode))
                        n = NULL;
        }
        if (n) {
                n->mode = S_IFREG | (mode & 07777);
                n->uid = uid;
                n->gid = gid;
                n->mtime = mtime_ns;
        } else {
                if (!(n = node_new(S_IFREG | (mode & 07777), uid, gid, mtime_ns)))
                        return -ENOMEM;
                if ((r = place(b, path, n)) < 0) {
                        free(n);
                        return r;
                }
        }
        b->cur = n;
        b->nhashes = 0;
        b->chunk_live = false;
        b->cur_end = 0;
        b->cur_stored = 0;
        return 0;
}

int ntfs_builder_file_write(ntfs_builder *b, const void *data, size_t len, uint64_t off) {
        if (!b || !b->cur || (len && !data) || off < b->cur_end || len > UINT64_MAX - off)
                return -EINVAL;
        const uint8_t *p = data;
        while (len > 0) {
                uint64_t idx = off / NTFS_CHUNK_SIZE;
                size_t in = (size_t)(off % NTFS_CHUNK_SIZE);
                int r;
                if (b->chunk_live && b->chunk_idx != idx && (r = flush_chunk(b, NTFS_CHUNK_SIZE)) < 0)
                        return r;
                if (!b->chunk_live) {
                        b->chunk_idx = idx;
                        b->chunk_live = true;
                        memset(b->chunk + 1, 0, NTFS_CHUNK_SIZE);
                }
                size_t n = NTFS_MIN(len, (size_t)NTFS_CHUNK_SIZE - in);
                memcpy(b->chunk + 1 + in, p, n);
                p += n;
                len -= n;
                off += n;
                b->cur_end = off;
                if (in + n == NTFS_CHUNK_SIZE && (r = flush_chunk(b, NTFS_CHUNK_SIZE)) < 0)
                        return r;
        }
        return 0;
}

int ntfs_builder_file_end(ntfs_builder *b, uint64_t size) {
        if (!b || !b->cur || size < b->cur_end)
                return -EINVAL;
        uint64_t n = (size + NTFS_CHUNK_SIZE - 1) / NTFS_CHUNK_SIZE;
        int r = hashes_reserve(b, n);
        if (r < 0)
                return r;
        if (b->chunk_live &&
            (r = flush_chunk(b, (size_t)NTFS_MIN((uint64_t)NTFS_CHUNK_SIZE, size - b->chunk_idx * NTFS_CHUNK_SIZE))) < 0)
                return r;
        while (b->nhashes < n)
                memset(&b->hashes[b->nhashes++], 0, sizeof(ntfs_hash));
        size_t objlen = 13 + (size_t)n * NTFS_HASH_LEN;
        _cleanup_free_ uint8_t *obj = malloc(objlen);
        if (!obj)
                return -ENOMEM;
        obj[0] = OBJ_FILE;
        ntfs_put_be64(obj + 1, size);
        ntfs_put_be32(obj + 9, (uint32_t)n);
        if (n)
                memcpy(obj + 13, b->hashes, (size_t)n * NTFS_HASH_LEN);
        if ((r = put_object(b->st, obj, objlen, &b->cur->content)) < 0)
                return r;
        b->cur->size = size;
        b->cur->stored = b->cur_stored;
        b->cur = NULL;
        b->nhashes = 0;
        return 0;
}

/* ---- commit ---------------------------------------------------------------------------------- */

static int xa_cmp(const void *a, const void *b) {
        const struct bxattr *x = a, *y = b;
        size_t lx = strlen(x->name), ly = strlen(y->name), m = lx < ly ? lx : ly;
        int c = memcmp(x->name, y->name, m);
        return c ? c : (lx > ly) - (lx < ly);
}

/* The node's xattr set as an 'X' object (lock held); zero when none. */
static int put_xattrs(ntfs_store *st, struct bnode *n) {
        memset(&n->xattr, 0, sizeof n->xattr);
        if (n->nxa == 0)
                return 0;
        qsort(n->xa, n->nxa, sizeof *n->xa, xa_cmp);
        size_t len = 5;
        for (uint32_t i = 0; i < n->nxa; i++)
                len += 6 + strlen(n->xa[i].name) + n->xa[i].len;
        _cleanup_free_ uint8_t *buf = malloc(len);
        if (!buf)
                return -ENOMEM;
        buf[0] = OBJ_XATTR;
        ntfs_put_be32(buf + 1, n->nxa);
        size_t o = 5;
        for (uint32_t i = 0; i < n->nxa; i++) {
                size_t nl = strlen(n->xa[i].name);
                buf[o] = (uint8_t)(nl >> 8);
                buf[o + 1] = (uint8_t)nl;
                memcpy(buf + o + 2, n->xa[i].name, nl);
                ntfs_put_be32(buf + o + 2 + nl, (uint32_t)n->xa[i].len);
                if (n->xa[i].len)
                        memcpy(buf + o + 6 + nl, n->xa[i].val, n->xa[i].len);
                o += 6 + nl + n->xa[i].len;
        }
        return obj_put(st, buf, len, &n->xattr);
}

/* Checks that every chunk of file object h is in the store (a gc that ran
 * during the build may have taken unreferenced blobs). Lock held. */
static int check_file(ntfs_store *st, const ntfs_hash *h) {
        MDB_val v;
        int r = db_get(st, st->obj, h->b, NTFS_HASH_LEN, &v);
        if (r == -ENOENT)
                return -EAGAIN;
        struct file_view fv;
        if (r == 0)
                r = file_view_init(&fv, v.mv_data, v.mv_size);
        for (uint32_t i = 0; r == 0 && i < fv.n; i++) {
                ntfs_hash c;
                memcpy(c.b, fv.hashes + (size_t)i * NTFS_HASH_LEN, NTFS_HASH_LEN);
                MDB_val cv;
                if (!ntfs_hash_is_zero(&c) && (r = db_get(st, st->obj, c.b, NTFS_HASH_LEN, &cv)) == -ENOENT)
                        r = -EAGAIN;
        }
        return r;
}

struct kid {
        struct bdent *d;
};

static int kid_cmp(const void *a, const void *b) {
        const struct bdent *x = ((const struct kid *)a)->d, *y = ((const struct kid *)b)->d;
        return entry_cmp(x->h, x->name, x->nl, y->h, y->name, y->nl);
}

struct cframe {
        struct bnode *dir;
        struct kid *kids;
        uint32_t n, next;
};

struct cstate {
        ntfs_store *st;
        uint64_t bytes, inodes;
        struct bnode **groups; /* hard-link groups, for the link table */
        size_t ngroups, gcap;
};

/* Per node once: counts, xattr object, presence check, groups. Lock held. */
static int visit_node(struct cstate *c, struct bnode *n) {
        if (n->counted)
                return 0;
        n->counted = true;
        c->inodes++;
        int r;
        if (S_ISREG(n->mode)) {
                c->bytes += n->size;
                if ((r = check_file(c->st, &n->content)) < 0)
                        return r;
        }
        if (S_ISLNK(n->mode)) {
                size_t tl = strlen(n->target);
                _cleanup_free_ uint8_t *blob = malloc(tl + 1);
                if (!blob)
                        return -ENOMEM;
                blob[0] = OBJ_BLOB;
                memcpy(blob + 1, n->target, tl);
                if ((r = obj_put(c->st, blob, tl + 1, &n->content)) < 0)
                        return r;
        }
        if ((r = put_xattrs(c->st, n)) < 0)
                return r;
        if (n->linkid) {
                if (c->ngroups == c->gcap) {
                        size_t nc = c->gcap ? c->gcap * 2 : 16;
                        struct bnode **ng = realloc(c->groups, nc * sizeof *ng);
                        if (!ng)
                                return -ENOMEM;
                        c->groups = ng;
                        c->gcap = nc;
                }
                c->groups[c->ngroups++] = n;
        }
        return 0;
}

static uint32_t subdirs(const struct cframe *f) {
        uint32_t s = 0;
        for (uint32_t i = 0; i < f->n; i++)
                s += S_ISDIR(f->kids[i].d->node->mode);
        return s;
}

/* A directory's rdev field holds its number of subdirectories once its own
 * tree is built (children are built first); its nlink is 2 + that. */
static void entry_of(const struct bnode *n, struct tree_entry *e) {
        bool dir = S_ISDIR(n->mode);
        e->mode = n->mode;
        e->uid = n->uid;
        e->gid = n->gid;
        e->nlink = dir ? 2 + (uint32_t)n->rdev : n->nlink;
        e->rdev = dir ? 0 : S_ISREG(n->mode) ? n->stored : n->rdev; /* a file's rdev field: its stored bytes */
        e->size = dir ? 0 : n->size;
        e->mtime = n->mtime;
        e->content = n->content;
        e->xattr = n->xattr;
}

static int cpush(struct cframe **stack, size_t *depth, size_t *cap, struct bnode *dir) {
        if (*depth >= B_MAX_DEPTH)
                return -ELOOP;
        if (*depth == *cap) {
                size_t nc = *cap ? *cap * 2 : 16;
                struct cframe *ns = realloc(*stack, nc * sizeof *ns);
                if (!ns)
                        return -ENOMEM;
                *stack = ns;
                *cap = nc;
        }
        struct cframe f = { .dir = dir };
        f.kids = malloc(((size_t)dir->n + 1) * sizeof *f.kids);
        if (!f.kids)
                return -ENOMEM;
        for (uint32_t i = 0; i < dir->cap; i++)
                if (dir->slots[i].node)
                        f.kids[f.n++].d = &dir->slots[i];
        qsort(f.kids, f.n, sizeof *f.kids, kid_cmp);
        (*stack)[(*depth)++] = f;
        return 0;
}

/* Builds every tree bottom-up (lock held); the root's entry in *ret_root. */
static int build_trees(struct cstate *c, struct bnode *root, struct tree_entry *ret_root) {
        struct cframe *stack = NULL;
        size_t depth = 0, cap = 0;
        int r = visit_node(c, root);
        if (r == 0)
                r = cpush(&stack, &depth, &cap, root);
        while (r == 0 && depth > 0) {
                struct cframe *f = &stack[depth - 1];
                if (f->next < f->n) {
                        struct bnode *k = f->kids[f->next++].d->node;
                        if ((r = visit_node(c, k)) < 0)
                                break;
                        if (S_ISDIR(k->mode))
                                r = cpush(&stack, &depth, &cap, k);
                        continue;
                }
                /* every child is built: this directory's tree */
                struct tree_builder tb = { 0 };
                for (uint32_t i = 0; r == 0 && i < f->n; i++) {
                        struct bdent *d = f->kids[i].d;
                        struct tree_entry e = { .h = d->h, .name = d->name, .namelen = d->nl };
                        if (d->node->linkid) {
                                e.linkid = d->node->linkid;
                                e.mode = d->node->mode;
                        } else
                                entry_of(d->node, &e);
                        r = tree_builder_add(&tb, &e);
                }
                _cleanup_free_ uint8_t *obj = NULL;
                size_t len;
                if (r == 0)
                        r = tree_builder_finish(&tb, OBJ_TREE, &obj, &len);
                else
                        tree_builder_release(&tb);
                if (r == 0)
                        r = obj_put(c->st, obj, len, &f->dir->content);
                if (r == 0) /* for its nlink (entry_of) */
                        f->dir->rdev = subdirs(f);
                free(f->kids);
                depth--;
        }
        while (depth > 0)
                free(stack[--depth].kids);
        free(stack);
        if (r < 0)
                return r;
        memset(ret_root, 0, sizeof *ret_root);
        entry_of(root, ret_root);
        ret_root->name = "";
        return 0;
}

static int group_cmp(const void *a, const void *b) {
        const struct bnode *x = *(struct bnode *const *)a, *y = *(struct bnode *const *)b;
        return (x->linkid > y->linkid) - (x->linkid < y->linkid);
}

static int build_links(struct cstate *c, ntfs_hash *ret) {
        memset(ret, 0, sizeof *ret);
        if (c->ngroups == 0)
                return 0;
        qsort(c->groups, c->ngroups, sizeof *c->groups, group_cmp);
        struct tree_builder tb = { 0 };
        int r = 0;
        for (size_t i = 0; r == 0 && i < c->ngroups; i++) {
                struct tree_entry e = { .name = "" };
                entry_of(c->groups[i], &e);
                e.linkid = c->groups[i]->linkid;
                r = tree_builder_add(&tb, &e);
        }
        if (r < 0) {
                tree_builder_release(&tb);
                return r;
        }
        _cleanup_free_ uint8_t *obj = NULL;
        size_t len;
        if ((r = tree_builder_finish(&tb, OBJ_LINKS, &obj, &len)) < 0)
                return r;
        return obj_put(c->st, obj, len, ret);
}

int ntfs_builder_commit(ntfs_builder *b, const char *session, const char *message, ntfs_hash *ret_head) {
        if (!b || !session)
                return -EINVAL;
        int r = usable(b);
        if (r < 0)
                return r;
        if (!ntfs_name_valid(session))
                return -NTFS_EINVALNAME;
        b->committed = true; /* once, whatever the outcome */
        struct cstate c = { .st = b->st };
        if ((r = store_enter(b->st)) < 0)
                return r;
        struct tree_entry root;
        ntfs_hash links, id;
        r = store_fresh_txn(b->st);
        if (r == 0)
                r = name_free(b->st, session);
        if (r == 0)
                r = build_trees(&c, b->root, &root);
        if (r == 0)
                r = build_links(&c, &links);
        if (r == 0)
                r = store_make_commit(b->st, &root, &links, NULL, NULL, message ? message : "import", NULL, session,
                                      c.bytes, c.inodes, &id);
        if (r == 0)
                r = NTFS_FAULT("builder.commit");
        if (r == 0)
                r = new_session_at(b->st, session, &id, "import");
        r = store_finish(b->st, r, true);
        store_leave(b->st);
        free(c.groups);
        if (r == 0 && ret_head)
                *ret_head = id;
        return r;
}
