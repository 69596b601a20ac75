/* SPDX-License-Identifier: MIT
 * ws.c — the live working state of a session, as a filesystem sees it.
 *
 * A working state (wsid) is an overlay on the trees of a commit: inode
 * records are created lazily, the first time a name is looked up
 * ("materialized"), so opening, forking and rolling back cost nothing per
 * file. Directory entries added, replaced or removed since the base tree
 * live in the dent database (a removal of a base entry is a whiteout, ino
 * 0); file chunks written since the base file object live in the chunk
 * database. Every change marks the inode and its ancestors dirty, which is
 * what checkpoint.c serializes.
 *
 * Here: handles, inode records, lookup, getattr, file content, setattr,
 * statfs, fsync, forget. Names (create, remove, link, rename, readdir):
 * ws-dir.c; xattrs: ws-xattr.c; what they share: ws-internal.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <linux/fs.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "fs/store-internal.h"
#include "fs/ws-internal.h"
#include "common/banned.h"

/* ---- keys -------------------------------------------------------------------- */

size_t ws_dent_key(uint8_t *k, uint64_t wsid, uint64_t dir, uint64_t h, const char *name, size_t nl) {
        ntfs_put_be64(k, wsid);
        ntfs_put_be64(k + 8, dir);
        ntfs_put_be64(k + 16, h);
        memcpy(k + 24, name, nl);
        return 24 + nl;
}

/* The working-state header (ino 0): the link table its inodes are based on. */
struct ws_hdr {
        ntfs_hash links;
        uint64_t view_next_ino;
};

/* The slot of (wsid, n) in a direct-mapped table of size slots (a power
 * of two, at least 2): the inode cache, keyed by inode, and the
 * inode-number blocks, keyed by directory. Fibonacci hashing: the
 * product's top bits. Its middle bits (bits 32 and up, until session 48)
 * repeat with the 64-number stride of a directory's block (section 4.1 of
 * docs/store.md): the benchmark tree's 45,000 inodes fell into 8,869 of
 * the cache's slots, whatever its size. */
size_t wsid_slot(uint64_t wsid, uint64_t n, size_t size) {
        uint64_t x = (n ^ (wsid << 40) ^ (wsid >> 24)) * 0x9e3779b97f4a7c15ULL;
        return (size_t)(x >> (64 - __builtin_ctzll(size)));
}

/* The inode cache slot of (wsid, ino); ino 0 (the working state's
 * header record) is never cached. */
static struct ino_cache_slot *icache_slot(ntfs_store *st, uint64_t wsid, uint64_t ino) {
        return &st->icache[wsid_slot(wsid, ino, INO_CACHE_SLOTS)];
}

int ino_get(ntfs_store *st, uint64_t wsid, uint64_t ino, struct ino_rec *ret) {
        struct ino_cache_slot *cs = icache_slot(st, wsid, ino);
        if (ino && cs->ino == ino && cs->wsid == wsid) {
                *ret = cs->rec;
                return 0;
        }
        uint8_t k[16];
        key2(k, wsid, ino);
        MDB_val v;
        int r = db_get(st, st->ino, k, 16, &v);
        if (r == -ENOENT)
                return -ESTALE;
        if (r < 0)
                return r;
        if (v.mv_size != sizeof *ret)
                return -NTFS_ECORRUPT;
        memcpy(ret, v.mv_data, sizeof *ret);
        if (ino && !cs->pending) { /* a pending record keeps its slot */
                cs->wsid = wsid;
                cs->ino = ino;
                cs->rec = *ret;
        }
        return 0;
}

static int icache_write(ntfs_store *st, struct ino_cache_slot *cs) {
        uint8_t k[16];
        key2(k, cs->wsid, cs->ino);
        int rc = db_put(st, st->ino, k, 16, &cs->rec, sizeof cs->rec);
        if (rc == 0)
                cs->pending = false;
        return rc;
}

static int pending_cmp(const void *a, const void *b, void *arg) {
        const struct ino_cache_slot *ic = arg, *x = &ic[*(const uint32_t *)a], *y = &ic[*(const uint32_t *)b];
        if (x->wsid != y->wsid)
                return x->wsid < y->wsid ? -1 : 1;
        return x->ino < y->ino ? -1 : x->ino > y->ino;
}

/* In key order: neighbouring records then share the B-tree's pages. On
 * error the batch is broken (db_put marked it) and will be aborted, which
 * drops the cache. */
int ino_flush(ntfs_store *st) {
        size_t n = st->nipending;
        if (n == 0)
                return 0;
        qsort_r(st->ipending, n, sizeof *st->ipending, pending_cmp, st->icache);
        for (size_t i = 0; i < n; i++) {
                struct ino_cache_slot *cs = &st->icache[st->ipending[i]];
                int rc = cs->pending ? icache_write(st, cs) : 0;
                if (rc < 0)
                        return rc;
        }
        st->nipending = 0;
        return 0;
}

int ino_put(ntfs_store *st, uint64_t wsid, uint64_t ino, const struct ino_rec *r) {
        if (!ino) {
                uint8_t k[16];
                key2(k, wsid, ino);
                return db_put(st, st->ino, k, 16, r, sizeof *r);
        }
        struct ino_cache_slot *cs = icache_slot(st, wsid, ino);
        int rc = 0;
        if (cs->pending && (cs->ino != ino || cs->wsid != wsid) && (rc = icache_write(st, cs)) < 0)
                return rc; /* the slot's record could not go to the batch */
        if (!cs->pending) {
                if (st->nipending == INO_CACHE_SLOTS && (rc = ino_flush(st)) < 0)
                        return rc;
                st->ipending[st->nipending++] = (uint32_t)(cs - st->icache);
        }
        cs->wsid = wsid;
        cs->ino = ino;
        cs->rec = *r;
        cs->pending = true;
        return 0;
}

int ino_del(ntfs_store *st, uint64_t wsid, uint64_t ino) {
        struct ino_cache_slot *cs = icache_slot(st, wsid, ino);
        bool pending = false;
        if (cs->ino == ino && cs->wsid == wsid) {
                pending = cs->pending;
                cs->ino = 0;
                cs->pending = false;
        }
        uint8_t k[16];
        key2(k, wsid, ino);
        int r = db_del(st, st->ino, k, 16);
        return r == -ENOENT && pending ? 0 : r; /* it was only in the cache */
}

static int hdr_get(ntfs_store *st, uint64_t wsid, struct ws_hdr *ret) {
        uint8_t k[16];
        key2(k, wsid, 0);
        MDB_val v;
        int r = db_get(st, st->ino, k, 16, &v);
        if (r < 0)
                return r == -ENOENT ? -ESTALE : r;
        if (v.mv_size != sizeof *ret)
                return -NTFS_ECORRUPT;
        memcpy(ret, v.mv_data, sizeof *ret);
        return 0;
}

int ws_links_get(ntfs_store *st, uint64_t wsid, ntfs_hash *ret) {
        struct ws_hdr h;
        int r = hdr_get(st, wsid, &h);
        if (r == 0)
                *ret = h.links;
        return r;
}

static int hdr_put(ntfs_store *st, uint64_t wsid, const struct ws_hdr *h) {
        uint8_t k[16];
        key2(k, wsid, 0);
        return db_put(st, st->ino, k, 16, h, sizeof *h);
}

void ino_from_entry(const struct tree_entry *e, struct ino_rec *r) {
        memset(r, 0, sizeof *r);
        r->mode = e->mode;
        r->uid = e->uid;
        r->gid = e->gid;
        r->nlink = e->nlink ? e->nlink : 1;
        r->size = e->size;
        r->rdev = e->rdev;
        r->mtime = r->ctime = r->atime = e->mtime;
        r->base = e->content;
        r->xattr = e->xattr;
        r->linkid = e->linkid;
        r->base_nchunks = S_ISREG(e->mode) ? (uint32_t)((e->size + NTFS_CHUNK_SIZE - 1) / NTFS_CHUNK_SIZE) : 0;
}

int ws_init_from_commit(ntfs_store *st, uint64_t wsid, const struct commit_obj *c) {
        struct ino_rec root;
        ino_from_entry(&c->root, &root);
        root.parent = 0;
        root.linkid = 0;
        struct ws_hdr h = { .links = c->links, .view_next_ino = NTFS_ROOT_INO + 1 };
        int r = hdr_put(st, wsid, &h);
        if (r == 0)
                r = ino_put(st, wsid, NTFS_ROOT_INO, &root);
        return r;
}

/* ---- per-call context ------------------------------------------------------------ */

/* A call that fails may already have written records with numbers from
 * the blocks it took (readdir materializes entry after entry; the batch
 * keeps them): the counter's advance is saved on its own, so that no
 * number is handed out twice. */
static int keep_ino_counter(struct ctx *c) {
        struct sess_rec cur;
        int r = sess_get(c->st, c->ws->session, &cur);
        if (r == 0 && cur.next_ino < c->sr.next_ino) {
                cur.next_ino = c->sr.next_ino;
                r = sess_put_lazy(c->st, c->ws->session, &cur);
        }
        return r;
}

int ws_ctx_leave(struct ctx *c, int r) {
        if (c->sr_changed && c->ws->session) {
                int r2 = r >= 0 ? sess_put_lazy(c->st, c->ws->session, &c->sr)
                         : c->took_block ? keep_ino_counter(c)
                                         : 0;
                if (r2 < 0 && c->took_block) /* the counter did not move past them */
                        memset(c->st->iblocks, 0, sizeof c->st->iblocks);
                if (r2 < 0 && r >= 0)
                        r = r2;
        }
        if (r >= 0 && c->write)
                c->ws->changes++;
        store_leave(c->st);
        return r;
}

/* A new inode number for an entry of dir: the next of dir's block, or the
 * first of a new block taken from the session's counter (store-internal.h
 * INO_BLOCK). The counter's advance is saved even when the call fails
 * (ws_ctx_leave); if it cannot be, every block is forgotten. Read-only views
 * count one by one. */
uint64_t ws_ino_alloc(struct ctx *c, uint64_t dir) {
        if (!c->ws->session)
                return c->ws->view_next_ino++;
        struct ino_block *b = &c->st->iblocks[wsid_slot(c->wsid, dir, INO_BLOCK_SLOTS)];
        if (b->wsid == c->wsid && b->dir == dir && b->next < b->end)
                return b->next++;
        uint64_t ino = c->sr.next_ino;
        c->sr.next_ino += INO_BLOCK;
        c->sr_changed = true;
        *b = (struct ino_block){ .wsid = c->wsid, .dir = dir, .next = ino + 1, .end = ino + INO_BLOCK };
        c->took_block = true;
        return ino;
}

void ws_attr_from(uint64_t ino, const struct ino_rec *r, struct ntfs_attr *a) {
        memset(a, 0, sizeof *a);
        a->ino = ino;
        a->mode = r->mode;
        a->uid = r->uid;
        a->gid = r->gid;
        a->nlink = r->nlink;
        a->size = r->size;
        /* For regular files the rdev field holds the bytes actually stored
         * (an upper bound between checkpoints, exact after one): holes of a
         * sparse file take no blocks. */
        if (S_ISREG(r->mode)) {
                a->rdev = 0;
                a->blocks = ((r->rdev < r->size ? r->rdev : r->size) + 511) / 512;
        } else {
                a->rdev = r->rdev;
                a->blocks = S_ISDIR(r->mode) ? 8 : (r->size + 511) / 512;
        }
        a->atime.tv_sec = r->atime / 1000000000LL;
        a->atime.tv_nsec = r->atime % 1000000000LL;
        a->mtime.tv_sec = r->mtime / 1000000000LL;
        a->mtime.tv_nsec = r->mtime % 1000000000LL;
        a->ctime.tv_sec = r->ctime / 1000000000LL;
        a->ctime.tv_nsec = r->ctime % 1000000000LL;
}

/* Marks ino dirty and every ancestor up to the first one already dirty.
 * Members of hard-link groups keep their content in the link table, so they
 * go to the dlink set; the root is marked so that a change is seen. */
int ws_mark_dirty(struct ctx *c, uint64_t ino, struct ino_rec *rec) {
        rec->flags |= INO_DIRTY;
        int r = ino_put(c->st, c->wsid, ino, rec);
        if (r < 0)
                return r;
        uint64_t p = rec->parent;
        if (rec->linkid) {
                uint8_t k[16];
                key2(k, c->wsid, ino);
                if ((r = db_put(c->st, c->st->dlink, k, 16, "", 0)) < 0)
                        return r;
                p = NTFS_ROOT_INO;
                if (ino == NTFS_ROOT_INO)
                        return 0;
        }
        while (p) {
                struct ino_rec pr;
                if ((r = ino_get(c->st, c->wsid, p, &pr)) < 0)
                        return r;
                if (pr.flags & INO_DIRTY)
                        break;
                pr.flags |= INO_DIRTY;
                if ((r = ino_put(c->st, c->wsid, p, &pr)) < 0)
                        return r;
                p = pr.parent;
        }
        return 0;
}

bool ws_name_ok(const char *name) {
        size_t n = strnlen(name, NTFS_NAME_MAX + 1);
        return n > 0 && n <= NTFS_NAME_MAX && !strchr(name, '/') && strcmp(name, ".") != 0 &&
               strcmp(name, "..") != 0;
}

/* ---- link table ------------------------------------------------------------------- */

static int link_entry(struct ctx *c, uint64_t linkid, struct tree_entry *ret) {
        struct ws_hdr h;
        int r = hdr_get(c->st, c->wsid, &h);
        if (r < 0)
                return r;
        if (ntfs_hash_is_zero(&h.links))
                return -NTFS_ECORRUPT;
        MDB_val v;
        if ((r = obj_get_typed(c->st, &h.links, OBJ_LINKS, &v)) < 0)
                return r;
        struct tree_view tv;
        if ((r = tree_view_init(&tv, v.mv_data, v.mv_size)) < 0)
                return r;
        uint32_t lo = 0, hi = tv.count;
        while (lo < hi) {
                uint32_t mid = lo + (hi - lo) / 2;
                struct tree_entry e;
                if ((r = tree_view_get(&tv, mid, &e)) < 0)
                        return r;
                if (e.linkid == linkid) {
                        *ret = e;
                        return 0;
                }
                if (e.linkid < linkid)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return -NTFS_ECORRUPT;
}

/* ---- lookup and materialization ---------------------------------------------------- */

/* Finds name in directory dir. Returns 0 and the child's ino + record;
 * -ENOENT when absent. Materializes base entries. */
int ws_child_get(struct ctx *c, uint64_t dir, const struct ino_rec *drec, const char *name,
                 uint64_t *ret_ino, struct ino_rec *ret) {
        size_t nl = strlen(name);
        uint64_t h = ctx_name_hash(c, name, nl);
        uint8_t k[24 + NTFS_NAME_MAX];
        size_t kl = ws_dent_key(k, c->wsid, dir, h, name, nl);
        MDB_val v;
        int r = db_get(c->st, c->st->dent, k, kl, &v);
        if (r == 0) {
                if (v.mv_size != sizeof(struct dent_val))
                        return -NTFS_ECORRUPT;
                struct dent_val dv;
                memcpy(&dv, v.mv_data, sizeof dv);
                if (dv.ino == 0)
                        return -ENOENT;
                *ret_ino = dv.ino;
                return ino_get(c->st, c->wsid, dv.ino, ret);
        }
        if (r != -ENOENT)
                return r;
        if (base_empty(c, &drec->base))
                return -ENOENT;
        MDB_val tv_val;
        if ((r = obj_get_typed(c->st, &drec->base, OBJ_TREE, &tv_val)) < 0)
                return r;
        struct tree_view tv;
        if ((r = tree_view_init(&tv, tv_val.mv_data, tv_val.mv_size)) < 0)
                return r;
        uint32_t i = tree_view_seek(&tv, h, name, nl);
        if (i >= tv.count)
                return -ENOENT;
        struct tree_entry e;
        if ((r = tree_view_get(&tv, i, &e)) < 0)
                return r;
        if (e.h != h || e.namelen != nl || memcmp(e.name, name, nl) != 0)
                return -ENOENT;
        /* materialize */
        uint64_t ino = 0;
        struct ino_rec rec;
        if (e.linkid) {
                uint8_t lk[16];
                key2(lk, c->wsid, e.linkid);
                MDB_val lv;
                r = db_get(c->st, c->st->lmap, lk, 16, &lv);
                if (r == 0 && lv.mv_size == 8) {
                        memcpy(&ino, lv.mv_data, 8);
                        if ((r = ino_get(c->st, c->wsid, ino, &rec)) < 0)
                                return r;
                } else if (r == -ENOENT || r == 0) {
                        struct tree_entry le;
                        if ((r = link_entry(c, e.linkid, &le)) < 0)
                                return r;
                        ino_from_entry(&le, &rec);
                        rec.linkid = e.linkid;
                        ino = ws_ino_alloc(c, dir);
                        if ((r = ino_put(c->st, c->wsid, ino, &rec)) < 0)
                                return r;
                        if ((r = db_put(c->st, c->st->lmap, lk, 16, &ino, 8)) < 0)
                                return r;
                } else
                        return r;
        } else {
                ino_from_entry(&e, &rec);
                rec.parent = dir;
                ino = ws_ino_alloc(c, dir);
                if ((r = ino_put(c->st, c->wsid, ino, &rec)) < 0)
                        return r;
        }
        struct dent_val dv = { .ino = ino, .mode = rec.mode };
        if ((r = db_put(c->st, c->st->dent, k, kl, &dv, sizeof dv)) < 0)
                return r;
        *ret_ino = ino;
        *ret = rec;
        return 0;
}

int ws_dent_set(struct ctx *c, uint64_t dir, const char *name, uint64_t ino, uint32_t mode) {
        size_t nl = strlen(name);
        uint8_t k[24 + NTFS_NAME_MAX];
        size_t kl = ws_dent_key(k, c->wsid, dir, ctx_name_hash(c, name, nl), name, nl);
        struct dent_val dv = { .ino = ino, .mode = mode };
        return db_put(c->st, c->st->dent, k, kl, &dv, sizeof dv);
}

/* ---- public: handles ---------------------------------------------------------------- */

static int ws_new(ntfs_store *st, ntfs_ws **ret) {
        ntfs_ws *ws = calloc(1, sizeof *ws);
        if (!ws)
                return -ENOMEM;
        ws->st = st;
        pthread_mutex_init(&ws->fq_lock, NULL);
        *ret = ws;
        return 0;
}

/* Opens the batch if needed (lock held); false if it cannot be. */
static bool txn_ok(ntfs_store *st) { return store_txn_begin(st) == 0; }

static size_t forget_drain(ntfs_ws *ws, size_t *budget);

static void ws_free(ntfs_ws *ws) {
        ws_changes_unref(ws->pending_changes);
        pthread_mutex_destroy(&ws->fq_lock);
        free(ws->fq);
        free(ws->session);
        free(ws);
}

/* Purges inodes that were unlinked while open by a previous mount. */
static int purge_orphans(ntfs_store *st, uint64_t wsid);

/* Marks every read-write handle open on working state wsid shared, if it
 * was not already: its sharing epoch goes up and its invalidate callback
 * is due (ntfs_ws_shared). Lock held; returns whether there was one. */
static bool ws_share(ntfs_store *st, uint64_t wsid) {
        bool any = false;
        for (ntfs_ws *w = st->wss; w; w = w->next) {
                if (!w->session || w->wsid != wsid)
                        continue;
                any = true;
                if (!__atomic_load_n(&w->shared, __ATOMIC_ACQUIRE)) {
                        __atomic_add_fetch(&w->share_epoch, 1, __ATOMIC_RELEASE);
                        __atomic_store_n(&w->shared, true, __ATOMIC_RELEASE);
                        w->invalidate_pending = true;
                }
        }
        return any;
}

int ntfs_ws_open(ntfs_store *st, const char *session, ntfs_ws **ret) {
        if (!ntfs_name_valid(session))
                return -NTFS_EINVALNAME;
        ntfs_ws *ws;
        int r = ws_new(st, &ws);
        if (r < 0)
                return r;
        ws->session = strdup(session);
        if (!ws->session) {
                ws_free(ws);
                return -ENOMEM;
        }
        if ((r = store_enter(st)) < 0) {
                ws_free(ws);
                return r;
        }
        struct sess_rec sr;
        bool shared = false;
        r = sess_get(st, session, &sr);
        if (r == 0)
                shared = ws_share(st, sr.wsid);
        /* With another handle open, its kernel may still use the state's
         * unlinked inodes: they are not orphans yet. */
        if (r == 0 && !shared)
                r = purge_orphans(st, sr.wsid);
        if (r == 0) {
                ws->wsid = sr.wsid;
                ws->shared = shared;
                ws->next = st->wss;
                st->wss = ws;
                *ret = ws;
        }
        store_leave(st);
        if (r < 0) {
                ws_free(ws);
                return r;
        }
        /* the other handles' users drop what their kernels cached */
        if (shared)
                store_run_invalidations(st);
        return 0;
}

int ntfs_ws_open_view(ntfs_store *st, const char *ref, ntfs_ws **ret) {
        ntfs_ws *ws;
        int r = ws_new(st, &ws);
        if (r < 0)
                return r;
        ws->readonly = true;
        if ((r = store_enter(st)) < 0) {
                ws_free(ws);
                return r;
        }
        struct commit_obj c;
        r = resolve_locked(st, ref, &ws->view_commit, NULL, 0);
        if (r == 0)
                r = commit_load(st, &ws->view_commit, &c);
        if (r == 0) {
                ws->wsid = wsid_alloc(st);
                if (!ws->wsid)
                        r = -EIO;
        }
        if (r == 0)
                r = ws_init_from_commit(st, ws->wsid, &c);
        if (r == 0) {
                uint8_t k[13];
                memcpy(k, "view:", 5);
                ntfs_put_be64(k + 5, ws->wsid);
                r = db_put(st, st->meta, k, 13, "", 0);
        }
        if (r == 0) {
                ws->view_next_ino = NTFS_ROOT_INO + 1;
                ws->next = st->wss;
                st->wss = ws;
                *ret = ws;
        }
        store_leave(st);
        if (r < 0)
                ws_free(ws);
        return r;
}

void ntfs_ws_close(ntfs_ws *ws) {
        if (!ws)
                return;
        ntfs_store *st = ws->st;
        store_lock(st);
        /* forgotten inodes not yet looked at: freed now if possible, else
         * (no batch) purged as orphans at the next open */
        if (ws->fq_n && txn_ok(st)) {
                size_t all = SIZE_MAX;
                forget_drain(ws, &all);
                store_settle_locked(st);
        }
        for (ntfs_ws **p = &st->wss; *p; p = &(*p)->next)
                if (*p == ws) {
                        *p = ws->next;
                        break;
                }
        if (ws->session) {
                /* the last handle left on the session is no longer shared */
                ntfs_ws *last = NULL;
                size_t n = 0;
                for (ntfs_ws *w = st->wss; w; w = w->next)
                        if (w->session && w->wsid == ws->wsid) {
                                last = w;
                                n++;
                        }
                if (n == 1)
                        __atomic_store_n(&last->shared, false, __ATOMIC_RELEASE);
        }
        if (!ws->session) {
                /* A view's records are ephemeral: retire them (if no batch
                 * can be opened, the next open retires them). */
                if (txn_ok(st)) {
                        uint8_t k[13];
                        memcpy(k, "view:", 5);
                        ntfs_put_be64(k + 5, ws->wsid);
                        (void)db_del(st, st->meta, k, 13);
                        (void)wsid_retire(st, ws->wsid);
                }
        }
        pthread_mutex_unlock(&st->lock);
        ws_free(ws);
}

bool ntfs_ws_readonly(const ntfs_ws *ws) { return ws->readonly; }
const char *ntfs_ws_session(const ntfs_ws *ws) { return ws->session; }

void ntfs_ws_set_invalidate_cb(ntfs_ws *ws,
                               void (*cb)(ntfs_ws *, const struct ntfs_ws_change *, size_t, void *),
                               void *ud) {
        /* Taking inval_lock waits for a running callback: once this
         * returns, the old callback is not running and will not run. */
        pthread_mutex_lock(&ws->st->inval_lock);
        store_lock(ws->st);
        ws->inval_cb = cb;
        ws->inval_ud = ud;
        pthread_mutex_unlock(&ws->st->lock);
        pthread_mutex_unlock(&ws->st->inval_lock);
}

void ntfs_ws_set_data_cb(ntfs_ws *ws, void (*cb)(ntfs_ws *, uint64_t ino, void *), void *ud) {
        store_lock(ws->st);
        ws->data_cb = cb;
        ws->data_ud = ud;
        pthread_mutex_unlock(&ws->st->lock);
}

/* ino's data changed through c's handle: the session's other read-write
 * handles hear of it (ntfs_ws_set_data_cb). Lock held. */
static void data_changed(struct ctx *c, uint64_t ino) {
        if (!__atomic_load_n(&c->ws->shared, __ATOMIC_ACQUIRE))
                return;
        for (ntfs_ws *w = c->st->wss; w; w = w->next)
                if (w != c->ws && w->session && w->wsid == c->wsid && w->data_cb)
                        w->data_cb(w, ino, w->data_ud);
}

uint64_t ntfs_ws_changes(ntfs_ws *ws) {
        store_lock(ws->st);
        uint64_t n = ws->changes;
        pthread_mutex_unlock(&ws->st->lock);
        return n;
}

uint64_t ntfs_ws_generation(ntfs_ws *ws) { return __atomic_load_n(&ws->generation, __ATOMIC_ACQUIRE); }
uint64_t ntfs_ws_rollbacks(ntfs_ws *ws) { return __atomic_load_n(&ws->rollbacks, __ATOMIC_ACQUIRE); }
bool ntfs_ws_shared(ntfs_ws *ws) { return __atomic_load_n(&ws->shared, __ATOMIC_ACQUIRE); }
uint64_t ntfs_ws_share_epoch(ntfs_ws *ws) { return __atomic_load_n(&ws->share_epoch, __ATOMIC_ACQUIRE); }

/* ---- public: metadata ------------------------------------------------------------------ */

int ntfs_ws_lookup(ntfs_ws *ws, uint64_t parent, const char *name, struct ntfs_attr *ret) {
        struct ctx c;
        int r = ctx_enter(ws, &c, false);
        if (r < 0)
                return r;
        struct ino_rec d, rec;
        uint64_t ino;
        if (strnlen(name, NTFS_NAME_MAX + 1) > NTFS_NAME_MAX)
                r = -ENAMETOOLONG;
        if (r == 0)
                r = dir_get(&c, parent, &d);
        if (r == 0 && !ws_name_ok(name))
                r = -ENOENT;
        if (r == 0)
                r = ws_child_get(&c, parent, &d, name, &ino, &rec);
        if (r == 0)
                ws_attr_from(ino, &rec, ret);
        return ws_ctx_leave(&c, r);
}

int ntfs_ws_getattr(ntfs_ws *ws, uint64_t ino, struct ntfs_attr *ret) {
        struct ctx c;
        int r = ctx_enter(ws, &c, false);
        if (r < 0)
                return r;
        struct ino_rec rec;
        r = ino_get(c.st, c.wsid, ino, &rec);
        if (r == 0)
                ws_attr_from(ino, &rec, ret);
        return ws_ctx_leave(&c, r);
}

/* ---- file content ------------------------------------------------------------------------ */

static size_t chunk_len_in(uint64_t size, uint64_t idx) {
        uint64_t start = idx * NTFS_CHUNK_SIZE;
        if (size <= start)
                return 0;
        uint64_t n = size - start;
        return n > NTFS_CHUNK_SIZE ? NTFS_CHUNK_SIZE : (size_t)n;
}

/* Where chunk idx of a file is: in its chunk record or the working data
 * file (when the chunk was written since the base) or in the base content.
 * data points at its bytes in the store's map or the data file's mapping
 * (valid until the next change in this transaction, or until the lock is
 * released); bytes past len read as zeros, and len == 0 is an all-zero
 * (sparse) chunk. */
struct chunk_src {
        const uint8_t *data;
        size_t len;
};

static int base_ref(struct ctx *c, const struct ino_rec *rec, uint64_t idx, struct chunk_src *s) {
        if (idx >= rec->base_nchunks || ntfs_hash_is_zero(&rec->base))
                return 0;
        MDB_val fv;
        int r;
        if ((r = obj_get_typed(c->st, &rec->base, OBJ_FILE, &fv)) < 0)
                return r;
        struct file_view f;
        if ((r = file_view_init(&f, fv.mv_data, fv.mv_size)) < 0)
                return r;
        if (idx >= f.n)
                return 0;
        ntfs_hash h;
        memcpy(h.b, f.hashes + idx * NTFS_HASH_LEN, NTFS_HASH_LEN);
        if (ntfs_hash_is_zero(&h))
                return 0;
        MDB_val bv;
        if ((r = obj_get_typed(c->st, &h, OBJ_BLOB, &bv)) < 0)
                return r;
        size_t n = bv.mv_size - 1;
        if (n > NTFS_CHUNK_SIZE)
                return -NTFS_ECORRUPT;
        s->data = (const uint8_t *)bv.mv_data + 1;
        s->len = n;
        return 0;
}

static int chunk_src(struct ctx *c, uint64_t ino, const struct ino_rec *rec, uint64_t idx, struct chunk_src *s) {
        memset(s, 0, sizeof *s);
        struct chunk_rec cr;
        int r = chunk_rec_get(c->st, c->wsid, ino, idx, &cr);
        if (r == 0) {
                s->len = cr.len;
                s->data = chunk_data(c->st, c->wsid, &cr, &r);
                return s->data ? 0 : r;
        }
        return r == -ENOENT ? base_ref(c, rec, idx, s) : r;
}

/* Copies bytes [in, in + len) of a chunk into buf (zeros past its data). */
static void src_copy(const struct chunk_src *s, size_t in, uint8_t *buf, size_t len) {
        size_t have = in < s->len ? NTFS_MIN(s->len - in, len) : 0;
        if (have)
                memcpy(buf, s->data + in, have);
        memset(buf + have, 0, len - have);
}

/* Gives chunk idx of a file, which has no chunk record yet, stored bytes
 * [0, len): its base bytes up to len, with buf's n bytes at in (buf NULL:
 * the base bytes only). */
static int chunk_materialize(struct ctx *c, uint64_t ino, const struct ino_rec *rec, uint64_t idx, size_t len,
                             const uint8_t *buf, size_t in, size_t n) {
        bool whole = buf && in == 0 && n >= len; /* no byte of the base survives */
        struct chunk_src s;
        memset(&s, 0, sizeof s);
        int r = whole ? 0 : base_ref(c, rec, idx, &s);
        if (r < 0)
                return r;
        if (!buf && s.len == 0)
                return 0; /* nothing stored: it reads as zeros already */
        if (whole)
                return chunk_store(c->st, c->wsid, ino, idx, buf, len);
        _cleanup_free_ uint8_t *cb = malloc(NTFS_CHUNK_SIZE);
        if (!cb)
                return -ENOMEM;
        src_copy(&s, 0, cb, len);
        if (buf)
                memcpy(cb + in, buf, n);
        return chunk_store(c->st, c->wsid, ino, idx, cb, len);
}

/* Writes n bytes at byte in of chunk idx, whose length in a file of size
 * newsize is clen: into its chunk record or slot when it has one (zeroing
 * any gap past its stored bytes), else into a new one. */
static int chunk_write(struct ctx *c, uint64_t ino, const struct ino_rec *rec, uint64_t idx, size_t clen,
                       const uint8_t *buf, size_t in, size_t n) {
        struct chunk_rec cr;
        int r = chunk_rec_get(c->st, c->wsid, ino, idx, &cr);
        if (r == -ENOENT)
                return chunk_materialize(c, ino, rec, idx, NTFS_MAX(clen, in + n), buf, in, n);
        return r < 0 ? r : chunk_update(c->st, c->wsid, ino, idx, &cr, buf, in, n);
}

/* Free disk before a call that adds an inode or n bytes of content: every
 * 64 such calls or 4 MiB, and on every call once space is low, so that big
 * writes cannot eat through the reserve between two looks. The reserve
 * keeps LMDB's commits (and so the writes already acknowledged) from ever
 * meeting a full disk. */
int ws_check_space(struct ctx *c, uint64_t n) {
        ntfs_store *st = c->st;
        st->bytes_since_space_check += n;
        if (++st->ops_since_space_check < 64 && st->bytes_since_space_check < (4u << 20) && !st->low_space)
                return 0;
        st->ops_since_space_check = 0;
        st->bytes_since_space_check = 0;
        struct statvfs sv;
        if (statvfs(st->dir, &sv) < 0)
                return 0;
        uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
        /* With the reserve held in LMDB's file (reserve_hold, store.c) the
         * free disk need only take the content; else keep the reserve and
         * room for the batch free here. n capped at avail: big enough to
         * refuse, and the sum cannot wrap. */
        uint64_t keep = store_reserve_held(st) ? 0 : st->reserve_bytes + 2 * st->txn_bytes;
        st->low_space = avail < keep + (8u << 20) + NTFS_MIN(n, avail);
        return st->low_space ? -ENOSPC : 0;
}

static int quota_bytes(struct ctx *c, uint64_t oldsize, uint64_t newsize) {
        if (!c->ws->session || newsize <= oldsize)
                return 0;
        if (c->sr.quota_bytes && c->sr.bytes + (newsize - oldsize) > c->sr.quota_bytes)
                return -EDQUOT;
        return 0;
}

static void account_size(struct ctx *c, uint64_t oldsize, uint64_t newsize) {
        if (!c->ws->session)
                return;
        c->sr.bytes = c->sr.bytes + newsize - oldsize; /* wraps correctly for shrink */
        c->sr_changed = true;
}

/* Changes a regular file's size; chunks past the end are dropped and the
 * partial last chunk is zero-filled, so a later extension reads zeros. */
static int do_truncate(struct ctx *c, uint64_t ino, struct ino_rec *rec, uint64_t size) {
        if (size == rec->size)
                return 0;
        int r = quota_bytes(c, rec->size, size);
        if (r < 0)
                return r;
        if (size < rec->size) {
                uint64_t keep = (size + NTFS_CHUNK_SIZE - 1) / NTFS_CHUNK_SIZE;
                if ((r = chunks_drop(c->st, c->wsid, ino, keep)) < 0)
                        return r;
                if (size % NTFS_CHUNK_SIZE) {
                        /* the partial last chunk keeps only its bytes below size */
                        uint64_t idx = size / NTFS_CHUNK_SIZE;
                        size_t len = size % NTFS_CHUNK_SIZE;
                        struct chunk_rec cr;
                        r = chunk_rec_get(c->st, c->wsid, ino, idx, &cr);
                        if (r == 0) {
                                r = chunk_shorten(c->st, c->wsid, ino, idx, &cr, len);
                        } else if (r == -ENOENT) {
                                r = chunk_materialize(c, ino, rec, idx, len, NULL, 0, 0);
                        }
                        if (r < 0)
                                return r;
                }
                if (rec->base_nchunks > keep)
                        rec->base_nchunks = (uint32_t)keep;
                if (rec->rdev > size)
                        rec->rdev = size;
        }
        account_size(c, rec->size, size);
        rec->size = size;
        return 0;
}

/* Walks bytes [off, off + size) of regular file ino, cut at its size, as
 * pieces in order: fn(data, len, ud) with data pointing into the store's map
 * or the data file's mapping (valid until the next change in this
 * transaction, or until the lock is released; behind the copy gate, until
 * store_copy_end), or data NULL for len zero
 * bytes (a hole, or the zeros after a short chunk). *walked gets the bytes
 * walked. The one read loop behind ntfs_ws_read and ntfs_ws_read_iov. */
static int read_pieces(struct ctx *c, uint64_t ino, size_t size, uint64_t off,
                       int (*fn)(const uint8_t *data, size_t len, void *ud), void *ud, size_t *walked) {
        struct ino_rec rec;
        size_t done = 0;
        *walked = 0;
        int r = ino_get(c->st, c->wsid, ino, &rec);
        if (r == 0 && S_ISDIR(rec.mode))
                r = -EISDIR;
        else if (r == 0 && !S_ISREG(rec.mode))
                r = -EINVAL;
        if (r < 0 || off >= rec.size)
                return r;
        if (size > rec.size - off)
                size = (size_t)(rec.size - off);
        while (done < size) {
                uint64_t pos = off + done;
                size_t in = (size_t)(pos % NTFS_CHUNK_SIZE);
                size_t want = NTFS_MIN(NTFS_CHUNK_SIZE - in, size - done);
                struct chunk_src s;
                if ((r = chunk_src(c, ino, &rec, pos / NTFS_CHUNK_SIZE, &s)) < 0)
                        return r;
                size_t from = in < s.len ? NTFS_MIN(s.len - in, want) : 0; /* stored bytes in range */
                if (from && (r = fn(s.data + in, from, ud)) < 0)
                        return r;
                if (want > from && (r = fn(NULL, want - from, ud)) < 0)
                        return r;
                done += want;
                *walked = done;
        }
        return 0;
}

static int copy_piece(const uint8_t *data, size_t len, void *ud) {
        uint8_t **at = ud;
        if (data)
                memcpy(*at, data, len);
        else
                memset(*at, 0, len);
        *at += len;
        return 0;
}

ssize_t ntfs_ws_read(ntfs_ws *ws, uint64_t ino, void *buf, size_t size, uint64_t off) {
        struct ctx c;
        int r = ctx_enter(ws, &c, false);
        if (r < 0)
                return r;
        /* copies only the asked-for bytes, straight from the maps */
        uint8_t *at = buf;
        size_t done;
        r = ws_ctx_leave(&c, read_pieces(&c, ino, size, off, copy_piece, &at, &done));
        return r < 0 ? r : (ssize_t)done;
}

/* Up to two pieces per chunk (stored bytes, then zeros), plus one for a
 * start that is not chunk-aligned. */
#define READ_IOV_MAX ((int)(2 * (NTFS_WS_READ_IOV_MAX_BYTES / NTFS_CHUNK_SIZE) + 2))
static const uint8_t zero_chunk[NTFS_CHUNK_SIZE];

struct iov_pieces {
        struct iovec iov[READ_IOV_MAX];
        int n;
};

static int iov_piece(const uint8_t *data, size_t len, void *ud) {
        struct iov_pieces *v = ud;
        if (v->n == READ_IOV_MAX)
                return -E2BIG; /* cannot happen: READ_IOV_MAX covers the largest size */
        /* a piece that follows its predecessor in memory extends it */
        struct iovec *last = v->n ? &v->iov[v->n - 1] : NULL;
        if (data && last && (const uint8_t *)last->iov_base + last->iov_len == data)
                last->iov_len += len;
        else
                v->iov[v->n++] = (struct iovec){ (void *)(data ? data : zero_chunk), len };
        return 0;
}

int ntfs_ws_read_iov(ntfs_ws *ws, uint64_t ino, size_t size, uint64_t off,
                     int (*fn)(const struct iovec *iov, int n, size_t total, void *ud), void *ud) {
        if (size > NTFS_WS_READ_IOV_MAX_BYTES)
                return -E2BIG;
        struct ctx c;
        int r = ctx_enter_as(ws, &c, false, true);
        if (r < 0)
                return r;
        struct iov_pieces v;
        v.n = 0;
        size_t done;
        r = read_pieces(&c, ino, size, off, iov_piece, &v, &done);
        /* The reply is copied with the lock released, so that the kernel's
         * read-ahead READs are copied two at a time (docs/store.md, "The
         * copy gate"); the pieces stay valid because whatever could change
         * or unmap them waits for the copy first. Only when leaving must
         * commit or unmap is it copied under the lock, as before. */
        if (r == 0 && store_copy_begin(c.st)) {
                ntfs_store *st = c.st;
                r = ws_ctx_leave(&c, 0);
                if (r == 0)
                        r = fn(v.iov, v.n, done, ud);
                store_copy_end(st);
                return r;
        }
        if (r == 0)
                r = fn(v.iov, v.n, done, ud);
        return ws_ctx_leave(&c, r);
}

ssize_t ntfs_ws_write(ntfs_ws *ws, uint64_t ino, const void *buf, size_t size, uint64_t off, bool append) {
        struct ctx c;
        int r = ctx_enter(ws, &c, true);
        if (r < 0)
                return r;
        struct ino_rec rec;
        r = ino_get(c.st, c.wsid, ino, &rec);
        if (r == 0 && S_ISDIR(rec.mode))
                r = -EISDIR;
        else if (r == 0 && !S_ISREG(rec.mode))
                r = -EINVAL;
        if (r == 0 && append)
                off = rec.size;
        if (r == 0 && (off > (1ull << 50) || size > (1ull << 50) - off))
                r = -EFBIG;
        if (r == 0)
                r = ws_check_space(&c, size);
        uint64_t end = off + size;
        if (r == 0 && end > rec.size)
                r = quota_bytes(&c, rec.size, end);
        size_t done = 0;
        if (r == 0 && size > 0) {
                uint64_t newsize = end > rec.size ? end : rec.size;
                while (r == 0 && done < size) {
                        uint64_t pos = off + done;
                        uint64_t idx = pos / NTFS_CHUNK_SIZE;
                        size_t in = (size_t)(pos % NTFS_CHUNK_SIZE);
                        size_t n = NTFS_MIN(NTFS_CHUNK_SIZE - in, size - done);
                        r = chunk_write(&c, ino, &rec, idx, chunk_len_in(newsize, idx), (const uint8_t *)buf + done,
                                        in, n);
                        if (r == 0)
                                done += n;
                }
                if (r == 0 && newsize != rec.size) {
                        account_size(&c, rec.size, newsize);
                        rec.size = newsize;
                }
                if (r == 0) /* stored bytes: an upper bound until the next checkpoint */
                        rec.rdev = rec.rdev + done > rec.size ? rec.size : rec.rdev + done;
        }
        if (r == 0) {
                rec.mtime = rec.ctime = now_ns();
                r = ws_mark_dirty(&c, ino, &rec);
        }
        if (r == 0)
                data_changed(&c, ino);
        r = ws_ctx_leave(&c, r);
        return r < 0 ? r : (ssize_t)done;
}

int ntfs_ws_fallocate(ntfs_ws *ws, uint64_t ino, int mode, uint64_t off, uint64_t len) {
        if (mode & ~FALLOC_FL_KEEP_SIZE)
                return -EOPNOTSUPP;
        struct ctx c;
        int r = ctx_enter(ws, &c, true);
        if (r < 0)
                return r;
        struct ino_rec rec;
        r = ino_get(c.st, c.wsid, ino, &rec);
        if (r == 0 && !S_ISREG(rec.mode))
                r = S_ISDIR(rec.mode) ? -EISDIR : -ENODEV;
        if (r == 0 && (off > (1ull << 50) || len > (1ull << 50) - off))
                r = -EFBIG;
        /* Nothing is reserved (chunks are stored when written, and equal
         * ones once), but a program that preallocates must hear ENOSPC now
         * rather than in the middle of its writes: the free disk is checked
         * for the whole range (EDQUOT past the session's quota comes from
         * do_truncate, as for a write). The range then counts as stored
         * (st_blocks, an upper bound until the next checkpoint, like a
         * write's), so writing into it does not grow du, as on ext4. */
        if (r == 0)
                r = ws_check_space(&c, len);
        bool grow = off + len > rec.size && !(mode & FALLOC_FL_KEEP_SIZE);
        if (r == 0 && grow)
                r = do_truncate(&c, ino, &rec, off + len);
        if (r == 0) {
                uint64_t end = NTFS_MIN(off + len, rec.size);
                uint64_t counted = end > off ? end - off : 0;
                rec.rdev = rec.rdev + counted > rec.size ? rec.size : rec.rdev + counted;
                if (grow)
                        rec.ctime = now_ns();
                r = ws_mark_dirty(&c, ino, &rec);
        }
        if (r == 0 && grow)
                data_changed(&c, ino);
        return ws_ctx_leave(&c, r);
}

/* ---- setattr ---------------------------------------------------------------------------- */

int ntfs_ws_setattr(ntfs_ws *ws, uint64_t ino, const struct ntfs_attr *in, unsigned to_set,
                    struct ntfs_attr *ret) {
        struct ctx c;
        bool only_atime = !(to_set & ~(unsigned)(NTFS_SET_ATIME | NTFS_SET_ATIME_NOW));
        int r = ctx_enter(ws, &c, !only_atime || to_set == 0 ? true : true);
        if (r < 0)
                return r;
        struct ino_rec rec;
        r = ino_get(c.st, c.wsid, ino, &rec);
        int64_t now = now_ns();
        if (r == 0 && (to_set & NTFS_SET_SIZE)) {
                if (S_ISDIR(rec.mode))
                        r = -EISDIR;
                else if (!S_ISREG(rec.mode))
                        r = -EINVAL;
                else if (in->size > (1ull << 50))
                        r = -EFBIG;
                else if (in->size != rec.size) {
                        r = do_truncate(&c, ino, &rec, in->size);
                        rec.mtime = now;
                        if (r == 0)
                                data_changed(&c, ino);
                }
        }
        if (r == 0) {
                if (to_set & NTFS_SET_MODE)
                        rec.mode = (rec.mode & S_IFMT) | (in->mode & 07777);
                if (to_set & NTFS_SET_UID)
                        rec.uid = in->uid;
                if (to_set & NTFS_SET_GID)
                        rec.gid = in->gid;
                if (to_set & NTFS_SET_ATIME_NOW)
                        rec.atime = now;
                else if (to_set & NTFS_SET_ATIME)
                        rec.atime = (int64_t)in->atime.tv_sec * 1000000000LL + in->atime.tv_nsec;
                if (to_set & NTFS_SET_MTIME_NOW)
                        rec.mtime = now;
                else if (to_set & NTFS_SET_MTIME)
                        rec.mtime = (int64_t)in->mtime.tv_sec * 1000000000LL + in->mtime.tv_nsec;
                if (to_set & NTFS_SET_CTIME)
                        rec.ctime = (int64_t)in->ctime.tv_sec * 1000000000LL + in->ctime.tv_nsec;
                else
                        rec.ctime = now;
                /* a chmod changes the access ACL too, as on ext4 */
                if (to_set & NTFS_SET_MODE)
                        r = ws_acl_chmod_locked(&c, ino, &rec);
                if (r == 0)
                        r = only_atime ? ino_put(c.st, c.wsid, ino, &rec) : ws_mark_dirty(&c, ino, &rec);
        }
        if (r == 0)
                ws_attr_from(ino, &rec, ret);
        return ws_ctx_leave(&c, r);
}

int ntfs_ws_touch_atime(ntfs_ws *ws, uint64_t ino) {
        struct ctx c;
        int r = ctx_enter(ws, &c, true);
        if (r < 0)
                return r;
        struct ino_rec rec;
        r = ino_get(c.st, c.wsid, ino, &rec);
        int64_t now = now_ns();
        if (r == 0 && (rec.atime <= rec.mtime || rec.atime <= rec.ctime || now - rec.atime >= 86400LL * 1000000000LL)) {
                rec.atime = now;
                r = ino_put(c.st, c.wsid, ino, &rec);
                if (r == 0)
                        r = 1;
        }
        c.write = false; /* a read is no change (ntfs_ws_changes: autocheckpoints) */
        return ws_ctx_leave(&c, r);
}

/* ---- misc ---------------------------------------------------------------------------------- */

int ntfs_ws_statfs(ntfs_ws *ws, struct statvfs *ret) {
        struct ctx c;
        int r = ctx_enter(ws, &c, false);
        if (r < 0)
                return r;
        struct statvfs sv;
        if (statvfs(c.st->dir, &sv) < 0)
                r = -errno;
        if (r == 0) {
                memset(ret, 0, sizeof *ret);
                ret->f_bsize = 4096;
                ret->f_frsize = 4096;
                ret->f_namemax = NTFS_NAME_MAX;
                uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
                avail = avail > c.st->reserve_bytes ? avail - c.st->reserve_bytes : 0;
                /* the blocks of freed slots, still allocated until the next
                 * pause, are this session's to write again */
                avail += wsdata_pool_bytes(c.st, c.wsid);
                uint64_t used = ws->session ? c.sr.bytes : 0;
                uint64_t total = used + avail;
                if (ws->session && c.sr.quota_bytes) {
                        total = c.sr.quota_bytes;
                        avail = total > used ? total - used : 0;
                }
                ret->f_blocks = total / 4096;
                ret->f_bfree = ret->f_bavail = avail / 4096;
                uint64_t files = ws->session && c.sr.quota_inodes ? c.sr.quota_inodes : (1ull << 32);
                uint64_t used_i = ws->session ? c.sr.inodes : 0;
                ret->f_files = files;
                ret->f_ffree = ret->f_favail = files > used_i ? files - used_i : 0;
        }
        return ws_ctx_leave(&c, r);
}

int ntfs_ws_fsync(ntfs_ws *ws) {
        int r = store_enter(ws->st);
        if (r < 0)
                return r;
        wsdata_presync_unlocked(ws->st, true); /* the bulk of the data sync off the lock */
        r = store_commit_locked(ws->st, true);
        store_leave(ws->st);
        return r;
}

/* The kernel forgot ino: free it if it was the last trace of an unlinked
 * inode (a hard-link group member waits for the checkpoint). Lock held. */
static int forget_one_locked(struct ctx *c, uint64_t ino) {
        struct ino_rec rec;
        int r = ino_get(c->st, c->wsid, ino, &rec);
        if (r == 0 && rec.nlink == 0 && !(rec.linkid && (rec.flags & INO_DIRTY)))
                r = ws_ino_free(c, ino, &rec);
        return r == -ESTALE ? 0 : r;
}

void ntfs_ws_forget(ntfs_ws *ws, uint64_t ino) {
        /* With a flusher, queue it (ws_forget_drain_all); without one, or
         * when the queue is full, look at it now. */
        if (ws->st->flusher_running) {
                bool queued = false;
                pthread_mutex_lock(&ws->fq_lock);
                if (ws->fq_n == ws->fq_cap && ws->fq_cap < FORGET_QUEUE_MAX) {
                        size_t nc = ws->fq_cap ? ws->fq_cap * 2 : 256;
                        uint64_t *nq = realloc(ws->fq, nc * sizeof *nq);
                        if (nq) {
                                ws->fq = nq;
                                ws->fq_cap = nc;
                        }
                }
                if (ws->fq_n < ws->fq_cap) {
                        ws->fq[ws->fq_n++] = ino;
                        queued = true;
                }
                pthread_mutex_unlock(&ws->fq_lock);
                if (queued)
                        return;
        }
        struct ctx c;
        if (ctx_enter(ws, &c, false) < 0)
                return;
        ws_ctx_leave(&c, forget_one_locked(&c, ino));
}

/* Looks at ws's queued forgets, the most recent first, while *budget lasts,
 * counting them off it (store lock held, batch open); returns how many are
 * left queued. A failure leaves the rest of its slice as orphans, purged
 * at the next open, and the queue to the next drain. */
static size_t forget_drain(ntfs_ws *ws, size_t *budget) {
        uint64_t q[FORGET_SLICE];
        struct ctx c = { .st = ws->st, .ws = ws, .wsid = ws->wsid };
        size_t n, left;
        int r = 0;
        do {
                pthread_mutex_lock(&ws->fq_lock);
                n = ws->fq_n < FORGET_SLICE ? ws->fq_n : FORGET_SLICE;
                if (n > *budget)
                        n = *budget;
                ws->fq_n -= n;
                if (n) /* fq is NULL while nothing was ever queued */
                        memcpy(q, ws->fq + ws->fq_n, n * sizeof *q);
                left = ws->fq_n;
                pthread_mutex_unlock(&ws->fq_lock);
                *budget -= n;
                for (size_t i = 0; i < n && r >= 0; i++)
                        r = forget_one_locked(&c, q[i]);
        } while (n && left && *budget && r >= 0);
        if (r < 0)
                log_debug("ws: freeing forgotten inodes failed: %s", ntfs_strerror(r));
        return r < 0 ? 0 : left;
}

/* Queued forgets over all handles (store lock held). */
static size_t ws_forget_queued(ntfs_store *st) {
        size_t n = 0;
        for (ntfs_ws *w = st->wss; w; w = w->next) {
                pthread_mutex_lock(&w->fq_lock);
                n += w->fq_n;
                pthread_mutex_unlock(&w->fq_lock);
        }
        return n;
}

size_t ws_forget_drain_all(ntfs_store *st) {
        if (ws_forget_queued(st) == 0 || !txn_ok(st))
                return 0;
        /* one slice in all, however many workspaces are mounted */
        size_t budget = FORGET_SLICE, left = 0;
        for (ntfs_ws *w = st->wss; w; w = w->next)
                left += forget_drain(w, &budget);
        store_settle_locked(st); /* as store_leave */
        return left;
}

static int purge_orphans(ntfs_store *st, uint64_t wsid) {
        struct ctx c = { .st = st, .wsid = wsid };
        ntfs_ws dummy = { .st = st, .wsid = wsid };
        c.ws = &dummy;
        uint8_t k0[8];
        ntfs_put_be64(k0, wsid);
        for (;;) {
                MDB_cursor *cur;
                int rc = mdb_cursor_open(st->txn, st->orph, &cur);
                if (rc)
                        return lmdb_err(rc);
                MDB_val k = { 8, k0 }, v;
                rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
                uint64_t ino = 0;
                if (rc == 0 && k.mv_size == 16 && memcmp(k.mv_data, k0, 8) == 0)
                        ino = ntfs_get_be64((const uint8_t *)k.mv_data + 8);
                mdb_cursor_close(cur);
                if (!ino)
                        return 0;
                struct ino_rec rec;
                int r = ino_get(st, wsid, ino, &rec);
                if (r == 0 && rec.nlink == 0 && !(rec.linkid && (rec.flags & INO_DIRTY)))
                        r = ws_ino_free(&c, ino, &rec);
                else if (r == 0 || r == -ESTALE) {
                        uint8_t ok[16];
                        key2(ok, wsid, ino);
                        r = db_del(st, st->orph, ok, 16);
                }
                if (r < 0)
                        return r;
                /* a linked orphan stays until the checkpoint drops its group */
                if (rec.linkid && (rec.flags & INO_DIRTY)) {
                        uint8_t ok[16];
                        key2(ok, wsid, ino);
                        r = db_del(st, st->orph, ok, 16);
                        if (r < 0 && r != -ENOENT)
                                return r;
                }
        }
}
