/* SPDX-License-Identifier: MIT
 * treewalk.c — read a commit's tree straight from its objects (store.h,
 * "tree walk"): for bulk export. Nothing is written: no view, no inode
 * records, no batch writes that a flush would have to sync.
 *
 * Locking: every object is copied out of the map under the store lock and
 * the lock is released before any callback runs, so a slow consumer (a
 * pipe, a socket) never holds up other users of the store.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "fs/store-internal.h"
#include "common/banned.h"

#define WALK_MAX_DEPTH 4096
#define LINK_MAX_BYTES 4095

/* Copies object h (of type type) out of the map into a malloc'd buffer. */
static int obj_copy(ntfs_store *st, const ntfs_hash *h, uint8_t type, uint8_t **ret, size_t *ret_len) {
        int r = store_enter(st);
        if (r < 0)
                return r;
        MDB_val v;
        uint8_t *copy = NULL;
        r = obj_get_typed(st, h, type, &v);
        if (r == 0 && !(copy = malloc(v.mv_size)))
                r = -ENOMEM;
        if (r == 0)
                memcpy(copy, v.mv_data, v.mv_size);
        store_leave(st);
        if (r < 0)
                return r;
        *ret = copy;
        *ret_len = v.mv_size;
        return 0;
}

struct wframe {
        uint8_t *tree; /* owned copy of the tree object */
        struct tree_view tv;
        uint32_t *order; /* entry indexes in byte order of names */
        uint32_t next;
        size_t path_len;
};

struct walker {
        ntfs_store *st;
        uint8_t *links; /* the commit's link table (copy), NULL if none */
        struct tree_view ltv;
        struct wframe *stack;
        size_t depth, cap;
        char *path;
        size_t path_cap;
        char target[LINK_MAX_BYTES + 1];
};

static int name_order(const void *a, const void *b, void *ud) {
        const struct tree_view *tv = ud;
        struct tree_entry x, y;
        /* entries were validated when the frame was pushed */
        (void)tree_view_get(tv, *(const uint32_t *)a, &x);
        (void)tree_view_get(tv, *(const uint32_t *)b, &y);
        size_t m = x.namelen < y.namelen ? x.namelen : y.namelen;
        int c = memcmp(x.name, y.name, m);
        return c ? c : (x.namelen > y.namelen) - (x.namelen < y.namelen);
}

static int push(struct walker *w, const ntfs_hash *tree, size_t path_len) {
        if (w->depth >= WALK_MAX_DEPTH)
                return -ELOOP;
        if (w->depth == w->cap) {
                size_t nc = w->cap ? w->cap * 2 : 16;
                struct wframe *ns = realloc(w->stack, nc * sizeof *ns);
                if (!ns)
                        return -ENOMEM;
                w->stack = ns;
                w->cap = nc;
        }
        struct wframe f = { .path_len = path_len };
        size_t len;
        int r = obj_copy(w->st, tree, OBJ_TREE, &f.tree, &len);
        if (r < 0)
                return r;
        if ((r = tree_view_init(&f.tv, f.tree, len)) < 0)
                goto fail;
        f.order = malloc(((size_t)f.tv.count + 1) * sizeof *f.order);
        if (!f.order) {
                r = -ENOMEM;
                goto fail;
        }
        for (uint32_t i = 0; i < f.tv.count; i++) {
                struct tree_entry e;
                if ((r = tree_view_get(&f.tv, i, &e)) < 0)
                        goto fail;
                f.order[i] = i;
        }
        qsort_r(f.order, f.tv.count, sizeof *f.order, name_order, &f.tv);
        w->stack[w->depth++] = f;
        return 0;
fail:
        free(f.order);
        free(f.tree);
        return r;
}

static void pop(struct walker *w) {
        struct wframe *f = &w->stack[--w->depth];
        free(f->order);
        free(f->tree);
}

/* A LINKREF entry takes its group's attributes from the link table. */
static int resolve_link(struct walker *w, struct tree_entry *e) {
        uint32_t lo = 0, hi = w->links ? w->ltv.count : 0;
        while (lo < hi) {
                uint32_t mid = lo + (hi - lo) / 2;
                struct tree_entry g;
                int r = tree_view_get(&w->ltv, mid, &g);
                if (r < 0)
                        return r;
                if (g.linkid == e->linkid) {
                        const char *name = e->name;
                        uint16_t nl = e->namelen;
                        uint64_t h = e->h;
                        *e = g;
                        e->name = name;
                        e->namelen = nl;
                        e->h = h;
                        return 0;
                }
                if (g.linkid < e->linkid)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return -NTFS_ECORRUPT; /* a reference to a group the table lacks */
}

static int read_target(struct walker *w, const ntfs_hash *h) {
        int r = store_enter(w->st);
        if (r < 0)
                return r;
        MDB_val v;
        r = obj_get_typed(w->st, h, OBJ_BLOB, &v);
        if (r == 0 && (v.mv_size < 2 || v.mv_size - 1 > LINK_MAX_BYTES))
                r = -NTFS_ECORRUPT;
        if (r == 0) {
                memcpy(w->target, (const uint8_t *)v.mv_data + 1, v.mv_size - 1);
                w->target[v.mv_size - 1] = 0;
        }
        store_leave(w->st);
        return r;
}

static int path_set(struct walker *w, size_t plen, const char *name, size_t nl) {
        size_t need = plen + 1 + nl + 1;
        if (need > w->path_cap) {
                size_t nc = w->path_cap ? w->path_cap : 256;
                while (nc < need)
                        nc *= 2;
                char *np = realloc(w->path, nc);
                if (!np)
                        return -ENOMEM;
                w->path = np;
                w->path_cap = nc;
        }
        size_t o = plen;
        if (plen)
                w->path[o++] = '/';
        memcpy(w->path + o, name, nl);
        w->path[o + nl] = 0;
        return (int)(o + nl);
}

static int emit(struct walker *w, const struct tree_entry *e, const char *name, int depth,
                int (*cb)(const struct ntfs_walk_entry *, void *), void *ud) {
        struct ntfs_walk_entry we = {
                .path = w->path,
                .name = name,
                .depth = depth,
                .mode = e->mode,
                .uid = e->uid,
                .gid = e->gid,
                .nlink = e->nlink,
                .size = S_ISREG(e->mode) || S_ISLNK(e->mode) ? e->size : 0,
                .rdev = S_ISCHR(e->mode) || S_ISBLK(e->mode) ? e->rdev : 0,
                .mtime_ns = e->mtime,
                .linkid = e->linkid,
                .content = e->content,
                .xattr = e->xattr,
        };
        if (S_ISLNK(e->mode)) {
                int r = read_target(w, &e->content);
                if (r < 0)
                        return r;
                we.target = w->target;
        }
        return cb(&we, ud);
}

int ntfs_tree_walk(ntfs_store *st, const ntfs_hash *commit, int (*cb)(const struct ntfs_walk_entry *e, void *ud),
                   void *ud) {
        if (!st || !commit || !cb)
                return -EINVAL;
        struct commit_obj c;
        struct tree_entry root;
        ntfs_hash links;
        int r = store_enter(st);
        if (r < 0)
                return r;
        r = commit_load(st, commit, &c);
        if (r == 0) {
                root = c.root; /* its name and strings are not used */
                root.name = "";
                root.namelen = 0;
                links = c.links;
        }
        store_leave(st);
        if (r < 0)
                return r;

        struct walker w = { .st = st };
        size_t llen;
        if (!ntfs_hash_is_zero(&links)) {
                if ((r = obj_copy(st, &links, OBJ_LINKS, &w.links, &llen)) < 0)
                        return r;
                if ((r = tree_view_init(&w.ltv, w.links, llen)) < 0)
                        goto out;
        }
        if ((r = path_set(&w, 0, "", 0)) < 0)
                goto out;
        r = emit(&w, &root, "", 0, cb, ud);
        if (r < 0)
                goto out;
        if (r == 1) {
                r = 0;
                goto out;
        }
        if ((r = push(&w, &root.content, 0)) < 0)
                goto out;
        while (w.depth > 0) {
                struct wframe *f = &w.stack[w.depth - 1];
                if (f->next == f->tv.count) {
                        pop(&w);
                        continue;
                }
                struct tree_entry e;
                if ((r = tree_view_get(&f->tv, f->order[f->next++], &e)) < 0)
                        goto out;
                if (e.linkid && e.namelen && (r = resolve_link(&w, &e)) < 0)
                        goto out;
                int plen = path_set(&w, f->path_len, e.name, e.namelen);
                if (plen < 0) {
                        r = plen;
                        goto out;
                }
                const char *name = w.path + (size_t)plen - e.namelen;
                r = emit(&w, &e, name, (int)w.depth, cb, ud);
                if (r < 0)
                        goto out;
                if (r == 0 && S_ISDIR(e.mode) && (r = push(&w, &e.content, (size_t)plen)) < 0)
                        goto out;
                r = 0;
        }
out:
        while (w.depth > 0)
                pop(&w);
        free(w.stack);
        free(w.path);
        free(w.links);
        return r;
}

int ntfs_file_read_chunks(ntfs_store *st, const ntfs_hash *file,
                          int (*cb)(const void *data, size_t len, uint64_t off, void *ud), void *ud) {
        if (!st || !file || !cb)
                return -EINVAL;
        _cleanup_free_ uint8_t *buf = malloc(NTFS_CHUNK_SIZE);
        if (!buf)
                return -ENOMEM;
        uint64_t size = 0, n = 1;
        for (uint64_t i = 0; i < n; i++) {
                int r = store_enter(st);
                if (r < 0)
                        return r;
                MDB_val v;
                struct file_view fv;
                size_t len = 0;
                r = obj_get_typed(st, file, OBJ_FILE, &v);
                if (r == 0)
                        r = file_view_init(&fv, v.mv_data, v.mv_size);
                if (r == 0) {
                        size = fv.size;
                        n = fv.n;
                }
                if (r == 0 && i < n) {
                        ntfs_hash h;
                        memcpy(h.b, fv.hashes + (size_t)i * NTFS_HASH_LEN, NTFS_HASH_LEN);
                        len = (size_t)NTFS_MIN((uint64_t)NTFS_CHUNK_SIZE, size - i * NTFS_CHUNK_SIZE);
                        size_t have = 0;
                        if (!ntfs_hash_is_zero(&h) && (r = obj_get_typed(st, &h, OBJ_BLOB, &v)) == 0) {
                                have = v.mv_size - 1;
                                if (have > len)
                                        r = -NTFS_ECORRUPT;
                                else
                                        memcpy(buf, (const uint8_t *)v.mv_data + 1, have);
                        }
                        if (r == 0 && have < len) /* a hole, or the implicit zeros after a short blob */
                                memset(buf + have, 0, len - have);
                }
                store_leave(st);
                if (r < 0)
                        return r;
                if (i >= n)
                        break; /* the empty file */
                if ((r = cb(buf, len, i * NTFS_CHUNK_SIZE, ud)) < 0)
                        return r;
        }
        return 0;
}

int ntfs_xattr_read(ntfs_store *st, const ntfs_hash *xattr,
                    int (*cb)(const char *name, const void *value, size_t len, void *ud), void *ud) {
        if (!st || !xattr || !cb)
                return -EINVAL;
        if (ntfs_hash_is_zero(xattr))
                return 0;
        _cleanup_free_ uint8_t *obj = NULL;
        size_t len;
        int r = obj_copy(st, xattr, OBJ_XATTR, &obj, &len);
        if (r < 0)
                return r;
        if ((r = object_check(obj, len, NULL, NULL)) < 0)
                return r;
        uint32_t n = ntfs_get_be32(obj + 1);
        size_t off = 5;
        char name[NTFS_NAME_MAX + 1];
        for (uint32_t i = 0; i < n; i++) {
                /* object_check validated the bounds */
                size_t nl = (size_t)obj[off] << 8 | obj[off + 1];
                if (nl == 0 || nl > NTFS_NAME_MAX || memchr(obj + off + 2, 0, nl))
                        return -NTFS_ECORRUPT;
                memcpy(name, obj + off + 2, nl);
                name[nl] = 0;
                size_t vl = ntfs_get_be32(obj + off + 2 + nl);
                if ((r = cb(name, obj + off + 6 + nl, vl, ud)) < 0)
                        return r;
                off += 6 + nl + vl;
        }
        return 0;
}
