/* SPDX-License-Identifier: MIT
 * checkpoint.c — serializing working states into objects: checkpoint, fork,
 * rollback, session creation and diff.
 *
 * Serialization walks only dirty inodes: a directory is rewritten when one
 * of its entries changed; a file's new object reuses every chunk hash that
 * was not written. Cost: what changed, plus the sizes of the directories it
 * changed in, plus tree depth — never the workspace size.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "fs/store-internal.h"
#include "common/banned.h"

static void key2(uint8_t *k, uint64_t a, uint64_t b) {
        ntfs_put_be64(k, a);
        ntfs_put_be64(k + 8, b);
}

struct ws_hdr {
        ntfs_hash links;
        uint64_t view_next_ino;
};

static int hdr_rw(ntfs_store *st, uint64_t wsid, struct ws_hdr *h, bool write) {
        uint8_t k[16];
        key2(k, wsid, 0);
        if (write)
                return db_put(st, st->ino, k, 16, h, sizeof *h);
        MDB_val v;
        int r = db_get(st, st->ino, k, 16, &v);
        if (r < 0)
                return r;
        if (v.mv_size != sizeof *h)
                return -NTFS_ECORRUPT;
        memcpy(h, v.mv_data, sizeof *h);
        return 0;
}

static bool chunk_is_zero(const uint8_t *p, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (p[i])
                        return false;
        return true;
}

/* Commits the batch mid-way when it grew big (safe between inodes: each
 * inode's serialization is atomic within one batch, and a half-finished
 * checkpoint only leaves inodes re-based onto equal content). */
static int maybe_commit(ntfs_store *st) {
        if (st->txn_bytes < (64ull << 20))
                return 0;
        return store_fresh_txn(st);
}

struct written_chunk {
        uint64_t idx;
        struct chunk_rec cr;
};
struct written {
        struct written_chunk *c;
        size_t n, cap;
};

static int collect_written(uint64_t ino, uint64_t idx, const struct chunk_rec *cr, void *ud) {
        (void)ino;
        struct written *w = ud;
        if (NTFS_ROOM_FOR(w->c, w->cap, w->n) < 0)
                return -ENOMEM;
        w->c[w->n++] = (struct written_chunk){ idx, *cr };
        return 0;
}

static int serialize_file(ntfs_store *st, uint64_t wsid, uint64_t ino, struct ino_rec *rec) {
        uint64_t n = (rec->size + NTFS_CHUNK_SIZE - 1) / NTFS_CHUNK_SIZE;
        if (n > UINT32_MAX)
                return -EFBIG;
        /* which chunks were written, and where they are */
        struct written w = { 0 };
        int r = chunk_recs_each(st, wsid, ino, collect_written, &w);
        _cleanup_free_ struct written_chunk *wc = w.c;
        size_t nidx = w.n;
        if (r < 0)
                return r;

        /* the base chunk list */
        struct file_view base = { 0 };
        MDB_val bv;
        if (!ntfs_hash_is_zero(&rec->base)) {
                if ((r = obj_get_typed(st, &rec->base, OBJ_FILE, &bv)) < 0)
                        return r;
                if ((r = file_view_init(&base, bv.mv_data, bv.mv_size)) < 0)
                        return r;
                if (nidx == 0 && base.size == rec->size && base.n == n && rec->base_nchunks >= n)
                        return 0; /* content unchanged */
        }
        size_t objlen = 13 + (size_t)n * NTFS_HASH_LEN;
        _cleanup_free_ uint8_t *obj = calloc(1, objlen);
        _cleanup_free_ uint8_t *blob = malloc(NTFS_CHUNK_SIZE + 1);
        if (!obj || !blob)
                return -ENOMEM;
        obj[0] = OBJ_FILE;
        ntfs_put_be64(obj + 1, rec->size);
        ntfs_put_be32(obj + 9, (uint32_t)n);
        uint64_t keep = rec->base_nchunks < base.n ? rec->base_nchunks : base.n;
        if (keep > n)
                keep = n;
        if (keep)
                memcpy(obj + 13, base.hashes, (size_t)keep * NTFS_HASH_LEN);
        for (size_t i = 0; i < nidx; i++) {
                uint64_t idx = wc[i].idx;
                if (idx >= n)
                        continue;
                size_t len = wc[i].cr.len;
                /* a chunk's stored length never exceeds the file's size */
                uint64_t room = rec->size - idx * NTFS_CHUNK_SIZE;
                if (len > room)
                        len = (size_t)room;
                /* an inline chunk's bytes are in its record: looked up
                 * again, since obj_put may have moved it since the walk */
                if (wc[i].cr.inl && (r = chunk_rec_get(st, wsid, ino, idx, &wc[i].cr)) < 0)
                        return r;
                const uint8_t *data = chunk_data(st, wsid, &wc[i].cr, &r);
                if (!data)
                        return r;
                ntfs_hash h = { 0 };
                if (!chunk_is_zero(data, len)) {
                        /* trailing zeros of the last chunk are implicit */
                        blob[0] = OBJ_BLOB;
                        memcpy(blob + 1, data, len);
                        if ((r = obj_put(st, blob, len + 1, &h)) < 0)
                                return r;
                }
                memcpy(obj + 13 + idx * NTFS_HASH_LEN, h.b, NTFS_HASH_LEN);
        }
        /* stored bytes (st_blocks): every non-hole chunk, the last one partial */
        uint64_t stored = 0;
        for (uint64_t i = 0; i < n; i++) {
                static const uint8_t zero[NTFS_HASH_LEN];
                if (memcmp(obj + 13 + i * NTFS_HASH_LEN, zero, NTFS_HASH_LEN) != 0)
                        stored += i + 1 < n ? NTFS_CHUNK_SIZE : rec->size - i * NTFS_CHUNK_SIZE;
        }
        rec->rdev = stored;
        ntfs_hash fh;
        if ((r = obj_put(st, obj, objlen, &fh)) < 0)
                return r;
        if ((r = chunks_drop(st, wsid, ino, 0)) < 0)
                return r;
        rec->base = fh;
        rec->base_nchunks = (uint32_t)n;
        return 0;
}

static int serialize_xattrs(ntfs_store *st, uint64_t wsid, uint64_t ino, struct ino_rec *rec) {
        if (!(rec->flags & INO_XMAT))
                return 0;
        uint8_t k0[16];
        key2(k0, wsid, ino);
        MDB_cursor *cur;
        int rc = mdb_cursor_open(st->txn, st->xattr, &cur);
        if (rc)
                return lmdb_err(rc);
        uint8_t *buf = NULL;
        size_t len = 5, cap = 0;
        uint32_t count = 0;
        int r = 0;
        MDB_val k = { 16, k0 }, v;
        for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
             rc == 0 && k.mv_size > 16 && memcmp(k.mv_data, k0, 16) == 0;
             rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                size_t nl = k.mv_size - 16;
                size_t need = len + 6 + nl + v.mv_size;
                if (need > cap) {
                        size_t nc = cap ? cap : 256;
                        while (nc < need)
                                nc *= 2;
                        uint8_t *nb = realloc(buf, nc);
                        if (!nb) {
                                r = -ENOMEM;
                                break;
                        }
                        buf = nb;
                        cap = nc;
                }
                buf[len] = (uint8_t)(nl >> 8);
                buf[len + 1] = (uint8_t)nl;
                memcpy(buf + len + 2, (const uint8_t *)k.mv_data + 16, nl);
                ntfs_put_be32(buf + len + 2 + nl, (uint32_t)v.mv_size);
                memcpy(buf + len + 6 + nl, v.mv_data, v.mv_size);
                len = need;
                count++;
        }
        mdb_cursor_close(cur);
        _cleanup_free_ uint8_t *owned = buf;
        if (r < 0)
                return r;
        if (count == 0) {
                memset(&rec->xattr, 0, sizeof rec->xattr);
        } else {
                buf[0] = OBJ_XATTR;
                ntfs_put_be32(buf + 1, count);
                if ((r = obj_put(st, buf, len, &rec->xattr)) < 0)
                        return r;
        }
        if ((r = db_del_prefix(st, st->xattr, k0, 16)) < 0)
                return r;
        rec->flags &= ~(uint32_t)INO_XMAT;
        return 0;
}

static void entry_from_rec(const struct ino_rec *rec, struct tree_entry *e) {
        e->linkid = 0;
        e->mode = rec->mode;
        e->uid = rec->uid;
        e->gid = rec->gid;
        e->nlink = rec->nlink;
        e->rdev = rec->rdev;
        e->size = S_ISDIR(rec->mode) ? 0 : rec->size;
        e->mtime = rec->mtime;
        e->content = rec->base;
        e->xattr = rec->xattr;
}

static int serialize_dir(ntfs_store *st, uint64_t wsid, uint64_t ino, struct ino_rec *rec, int depth);

/* Serializes a dirty inode in place (rec is updated and stored). */
static int serialize_inode(ntfs_store *st, uint64_t wsid, uint64_t ino, struct ino_rec *rec, int depth) {
        int r = 0;
        if (!(rec->flags & INO_DIRTY))
                return 0;
        if (S_ISDIR(rec->mode))
                r = serialize_dir(st, wsid, ino, rec, depth);
        else if (S_ISREG(rec->mode))
                r = serialize_file(st, wsid, ino, rec);
        if (r == 0)
                r = serialize_xattrs(st, wsid, ino, rec);
        if (r < 0)
                return r;
        rec->flags &= ~(uint32_t)INO_DIRTY;
        if ((r = ino_put(st, wsid, ino, rec)) < 0)
                return r;
        return maybe_commit(st);
}

struct ov_item {
        uint64_t h;
        uint16_t nl;
        char name[NTFS_NAME_MAX + 1];
        uint64_t ino;
};

static int serialize_dir(ntfs_store *st, uint64_t wsid, uint64_t ino, struct ino_rec *rec, int depth) {
        if (depth > 4096)
                return -ELOOP;
        int r;
        /* Copy the base tree and the overlay entries out of the map: child
         * serialization may commit the batch and move pages. */
        _cleanup_free_ uint8_t *base = NULL;
        size_t base_len = 0;
        if (!ntfs_hash_is_zero(&rec->base)) {
                MDB_val v;
                if ((r = obj_get_typed(st, &rec->base, OBJ_TREE, &v)) < 0)
                        return r;
                base = malloc(v.mv_size);
                if (!base)
                        return -ENOMEM;
                memcpy(base, v.mv_data, v.mv_size);
                base_len = v.mv_size;
        }
        struct tree_view tv = { 0 };
        if (base && (r = tree_view_init(&tv, base, base_len)) < 0)
                return r;

        struct ov_item *ov = NULL;
        size_t nov = 0, cap = 0;
        uint8_t k0[16];
        key2(k0, wsid, ino);
        MDB_cursor *cur;
        int rc = mdb_cursor_open(st->txn, st->dent, &cur);
        if (rc)
                return lmdb_err(rc);
        MDB_val k = { 16, k0 }, v;
        r = 0;
        for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
             rc == 0 && k.mv_size > 24 && memcmp(k.mv_data, k0, 16) == 0;
             rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                if (v.mv_size != 16 || k.mv_size - 24 > NTFS_NAME_MAX) {
                        r = -NTFS_ECORRUPT;
                        break;
                }
                if (nov == cap) {
                        cap = cap ? cap * 2 : 32;
                        struct ov_item *n = realloc(ov, cap * sizeof *n);
                        if (!n) {
                                r = -ENOMEM;
                                break;
                        }
                        ov = n;
                }
                struct ov_item *it = &ov[nov++];
                it->h = ntfs_get_be64((const uint8_t *)k.mv_data + 16);
                it->nl = (uint16_t)(k.mv_size - 24);
                memcpy(it->name, (const uint8_t *)k.mv_data + 24, it->nl);
                it->name[it->nl] = 0;
                memcpy(&it->ino, v.mv_data, 8);
        }
        mdb_cursor_close(cur);
        _cleanup_free_ struct ov_item *ov_owned = ov;
        if (r < 0)
                return r;

        struct tree_builder b = { 0 };
        uint32_t ti = 0;
        size_t oi = 0;
        while (r == 0 && (ti < tv.count || oi < nov)) {
                struct tree_entry te;
                if (ti < tv.count && (r = tree_view_get(&tv, ti, &te)) < 0)
                        break;
                int cmp = ti >= tv.count ? 1 : oi >= nov ? -1
                                                         : entry_cmp(te.h, te.name, te.namelen, ov[oi].h,
                                                                     ov[oi].name, ov[oi].nl);
                if (cmp < 0) {
                        r = tree_builder_add(&b, &te);
                        ti++;
                        continue;
                }
                if (cmp == 0)
                        ti++;
                struct ov_item *it = &ov[oi++];
                if (it->ino == 0)
                        continue; /* whiteout */
                struct ino_rec crec;
                if ((r = ino_get(st, wsid, it->ino, &crec)) < 0)
                        break;
                struct tree_entry e = { .h = it->h, .name = it->name, .namelen = it->nl };
                if (crec.linkid) {
                        e.linkid = crec.linkid;
                        e.mode = crec.mode;
                } else {
                        if ((r = serialize_inode(st, wsid, it->ino, &crec, depth + 1)) < 0)
                                break;
                        entry_from_rec(&crec, &e);
                }
                r = tree_builder_add(&b, &e);
        }
        if (r < 0) {
                tree_builder_release(&b);
                return r;
        }
        _cleanup_free_ uint8_t *obj = NULL;
        size_t objlen;
        if ((r = tree_builder_finish(&b, OBJ_TREE, &obj, &objlen)) < 0)
                return r;
        if ((r = obj_put(st, obj, objlen, &rec->base)) < 0)
                return r;
        /* whiteouts are folded into the new base */
        for (size_t i = 0; i < nov; i++) {
                if (ov[i].ino)
                        continue;
                uint8_t dk[24 + NTFS_NAME_MAX];
                key2(dk, wsid, ino);
                ntfs_put_be64(dk + 16, ov[i].h);
                memcpy(dk + 24, ov[i].name, ov[i].nl);
                if ((r = db_del(st, st->dent, dk, 24 + ov[i].nl)) < 0 && r != -ENOENT)
                        return r;
        }
        return 0;
}

struct lt_item {
        uint64_t linkid;
        uint64_t ino;
        struct ino_rec rec;
};

static int lt_cmp(const void *a, const void *b) {
        const struct lt_item *x = a, *y = b;
        return x->linkid < y->linkid ? -1 : x->linkid > y->linkid ? 1 : 0;
}

/* Folds dirty hard-link groups into a new link table. */
static int serialize_links(ntfs_store *st, uint64_t wsid, const ntfs_hash *old, ntfs_hash *ret) {
        uint8_t k0[8];
        ntfs_put_be64(k0, wsid);
        struct lt_item *items = NULL;
        size_t n = 0, cap = 0;
        int r = 0;
        MDB_cursor *cur;
        int rc = mdb_cursor_open(st->txn, st->dlink, &cur);
        if (rc)
                return lmdb_err(rc);
        MDB_val k = { 8, k0 }, v;
        for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
             rc == 0 && k.mv_size == 16 && memcmp(k.mv_data, k0, 8) == 0;
             rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                if (n == cap) {
                        cap = cap ? cap * 2 : 16;
                        struct lt_item *ni = realloc(items, cap * sizeof *ni);
                        if (!ni) {
                                r = -ENOMEM;
                                break;
                        }
                        items = ni;
                }
                items[n++].ino = ntfs_get_be64((const uint8_t *)k.mv_data + 8);
        }
        mdb_cursor_close(cur);
        _cleanup_free_ struct lt_item *owned = items;
        if (r < 0)
                return r;
        if (n == 0) {
                *ret = *old;
                return 0;
        }
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
                struct lt_item *it = &items[m];
                it->ino = items[i].ino;
                r = ino_get(st, wsid, it->ino, &it->rec);
                if (r == -ESTALE)
                        continue;
                if (r < 0)
                        return r;
                if (!it->rec.linkid)
                        continue;
                it->linkid = it->rec.linkid;
                /* in the link table from now on: a group for good (stored
                 * by serialize_inode, which stores every dirty member) */
                bool onedir = it->rec.flags & INO_ONEDIR;
                it->rec.flags &= ~(uint32_t)INO_ONEDIR;
                bool serialize = it->rec.nlink > 0 && (it->rec.flags & INO_DIRTY);
                if (serialize && (r = serialize_inode(st, wsid, it->ino, &it->rec, 0)) < 0)
                        return r;
                if (!serialize && onedir && (r = ino_put(st, wsid, it->ino, &it->rec)) < 0)
                        return r;
                m++;
        }
        qsort(items, m, sizeof *items, lt_cmp);

        struct tree_view tv = { 0 };
        _cleanup_free_ uint8_t *oldcopy = NULL;
        if (!ntfs_hash_is_zero(old)) {
                MDB_val ov;
                if ((r = obj_get_typed(st, old, OBJ_LINKS, &ov)) < 0)
                        return r;
                oldcopy = malloc(ov.mv_size);
                if (!oldcopy)
                        return -ENOMEM;
                memcpy(oldcopy, ov.mv_data, ov.mv_size);
                if ((r = tree_view_init(&tv, oldcopy, ov.mv_size)) < 0)
                        return r;
        }
        struct tree_builder b = { 0 };
        uint32_t ti = 0;
        size_t ui = 0;
        while (r == 0 && (ti < tv.count || ui < m)) {
                struct tree_entry te;
                if (ti < tv.count && (r = tree_view_get(&tv, ti, &te)) < 0)
                        break;
                if (ui >= m || (ti < tv.count && te.linkid < items[ui].linkid)) {
                        r = tree_builder_add(&b, &te);
                        ti++;
                        continue;
                }
                if (ti < tv.count && te.linkid == items[ui].linkid)
                        ti++;
                struct lt_item *it = &items[ui++];
                if (it->rec.nlink == 0)
                        continue; /* the group is gone */
                struct tree_entry e = { 0 };
                entry_from_rec(&it->rec, &e);
                e.linkid = it->linkid;
                e.name = "";
                r = tree_builder_add(&b, &e);
        }
        if (r < 0) {
                tree_builder_release(&b);
                return r;
        }
        if (b.count == 0) {
                tree_builder_release(&b);
                memset(ret, 0, sizeof *ret);
        } else {
                _cleanup_free_ uint8_t *obj = NULL;
                size_t objlen;
                if ((r = tree_builder_finish(&b, OBJ_LINKS, &obj, &objlen)) < 0)
                        return r;
                if ((r = obj_put(st, obj, objlen, ret)) < 0)
                        return r;
        }
        /* clear the dirty set; free groups that died */
        for (size_t i = 0; i < m; i++) {
                uint8_t kk[16];
                key2(kk, wsid, items[i].ino);
                if (items[i].rec.nlink == 0) {
                        if ((r = ino_del(st, wsid, items[i].ino)) < 0 && r != -ENOENT)
                                return r;
                        if ((r = chunks_drop(st, wsid, items[i].ino, 0)) < 0)
                                return r;
                }
        }
        if ((r = db_del_prefix(st, st->dlink, k0, 8)) < 0)
                return r;
        return 0;
}

int ws_serialize(ntfs_store *st, uint64_t wsid, const ntfs_hash *old_links, struct tree_entry *ret_root,
                 ntfs_hash *ret_links) {
        (void)old_links;
        struct ino_rec root;
        int r = ino_get(st, wsid, NTFS_ROOT_INO, &root);
        if (r < 0)
                return r;
        struct ws_hdr h;
        if ((r = hdr_rw(st, wsid, &h, false)) < 0)
                return r;
        ntfs_hash links;
        if ((r = serialize_links(st, wsid, &h.links, &links)) < 0)
                return r;
        if ((r = NTFS_FAULT("store.serialize")) < 0)
                return r;
        if ((r = ino_get(st, wsid, NTFS_ROOT_INO, &root)) < 0)
                return r;
        if ((r = serialize_inode(st, wsid, NTFS_ROOT_INO, &root, 0)) < 0)
                return r;
        if (memcmp(h.links.b, links.b, NTFS_HASH_LEN) != 0) {
                h.links = links;
                if ((r = hdr_rw(st, wsid, &h, true)) < 0)
                        return r;
        }
        memset(ret_root, 0, sizeof *ret_root);
        entry_from_rec(&root, ret_root);
        ret_root->name = "";
        *ret_links = links;
        return 0;
}

static bool same_state(const struct tree_entry *root, const ntfs_hash *links, const struct commit_obj *c) {
        return memcmp(root->content.b, c->root.content.b, NTFS_HASH_LEN) == 0 &&
               memcmp(root->xattr.b, c->root.xattr.b, NTFS_HASH_LEN) == 0 &&
               memcmp(links->b, c->links.b, NTFS_HASH_LEN) == 0 && root->mode == c->root.mode &&
               root->uid == c->root.uid && root->gid == c->root.gid;
}

/* ---- checkpoint ------------------------------------------------------------------------ */

static int checkpoint(ntfs_store *st, const char *name, const char *message, const char *effect, bool always,
                      ntfs_hash *ret, bool *ret_changed) {
        int r = store_enter(st);
        if (r < 0)
                return r;
        struct sess_rec sr;
        struct commit_obj head;
        struct tree_entry root;
        ntfs_hash links, id;
        bool changed = false, commit = false;
        r = store_fresh_txn(st);
        if (r == 0)
                r = sess_get(st, name, &sr);
        if (r == 0)
                r = commit_load(st, &sr.head, &head);
        if (r == 0)
                r = ws_serialize(st, sr.wsid, &head.links, &root, &links);
        if (r == 0 && (r = commit_load(st, &sr.head, &head)) == 0)
                commit = (changed = !same_state(&root, &links, &head)) || always;
        if (r == 0 && commit) {
                r = store_make_commit(st, &root, &links, &sr.head, NULL, message, effect, name, sr.bytes,
                                      sr.inodes, &id);
                if (r == 0)
                        r = NTFS_FAULT("store.checkpoint.objects");
                if (r == 0)
                        r = reflog_append(st, name, &sr, &sr.head, &id, "checkpoint");
                if (r == 0) {
                        sr.head = id;
                        sr.flags &= ~1u;
                        r = sess_put(st, name, &sr);
                }
        } else if (r == 0) {
                id = sr.head;
                if (sr.flags & 1) {
                        sr.flags &= ~1u;
                        r = sess_put(st, name, &sr);
                }
        }
        /* A new commit is made durable before returning; an unchanged
         * checkpoint returns the head, which already is. */
        r = store_finish(st, r, commit);
        store_leave(st);
        if (r == 0) {
                *ret = id;
                if (ret_changed)
                        *ret_changed = changed;
        }
        return r;
}

int ntfs_checkpoint(ntfs_store *st, const char *name, const char *message, const char *effect, ntfs_hash *ret,
                    bool *ret_changed) {
        return checkpoint(st, name, message, effect, false, ret, ret_changed);
}

int ntfs_checkpoint_always(ntfs_store *st, const char *name, const char *message, const char *effect,
                           ntfs_hash *ret, bool *ret_changed) {
        return checkpoint(st, name, message, effect, true, ret, ret_changed);
}

int ntfs_checkpoint_merge(ntfs_store *st, const char *name, const char *message, const ntfs_hash *second_parent,
                          ntfs_hash *ret) {
        if (!name || !second_parent || !ret || ntfs_hash_is_zero(second_parent))
                return -EINVAL;
        int r = store_enter(st);
        if (r < 0)
                return r;
        struct sess_rec sr;
        struct commit_obj head, other;
        struct tree_entry root;
        ntfs_hash links, id;
        r = store_fresh_txn(st);
        if (r == 0)
                r = sess_get(st, name, &sr);
        if (r == 0)
                r = commit_load(st, second_parent, &other);
        if (r == 0)
                r = commit_load(st, &sr.head, &head);
        if (r == 0)
                r = ws_serialize(st, sr.wsid, &head.links, &root, &links);
        if (r == 0)
                r = store_make_commit(st, &root, &links, &sr.head, second_parent, message ? message : "merge", NULL,
                                      name, sr.bytes, sr.inodes, &id);
        if (r == 0)
                r = NTFS_FAULT("store.checkpoint.merge");
        if (r == 0)
                r = reflog_append(st, name, &sr, &sr.head, &id, "merge");
        if (r == 0) {
                sr.head = id;
                sr.flags &= ~1u;
                r = sess_put(st, name, &sr);
        }
        r = store_finish(st, r, true);
        store_leave(st);
        if (r == 0)
                *ret = id;
        return r;
}

/* ---- sessions: create, fork, rollback --------------------------------------------------- */

static uint64_t max_linkid(ntfs_store *st, const ntfs_hash *links) {
        if (ntfs_hash_is_zero(links))
                return 0;
        MDB_val v;
        struct tree_view tv;
        struct tree_entry e;
        if (obj_get_typed(st, links, OBJ_LINKS, &v) < 0 || tree_view_init(&tv, v.mv_data, v.mv_size) < 0 ||
            tv.count == 0 || tree_view_get(&tv, tv.count - 1, &e) < 0)
                return 0;
        return e.linkid;
}

int new_session_at(ntfs_store *st, const char *name, const ntfs_hash *commit, const char *op) {
        struct commit_obj c;
        int r = commit_load(st, commit, &c);
        if (r < 0)
                return r;
        struct sess_rec sr = { 0 };
        sr.version = 1;
        sr.wsid = wsid_alloc(st);
        if (!sr.wsid)
                return -EIO;
        sr.next_ino = NTFS_ROOT_INO + 1;
        sr.next_linkid = max_linkid(st, &c.links) + 1;
        sr.head = sr.floor = *commit;
        sr.created = ntfs_now_ns();
        sr.bytes = c.bytes;
        sr.inodes = c.inodes;
        sr.quota_bytes = st->default_quota_bytes;
        sr.quota_inodes = st->default_quota_inodes;
        if ((r = ws_init_from_commit(st, sr.wsid, &c)) < 0)
                return r;
        static const ntfs_hash zero;
        if ((r = reflog_append(st, name, &sr, &zero, commit, op)) < 0)
                return r;
        return sess_put(st, name, &sr);
}

int name_free(ntfs_store *st, const char *name) {
        if (!ntfs_name_valid(name))
                return -NTFS_EINVALNAME;
        MDB_val v;
        if (db_get(st, st->sess, name, strlen(name), &v) == 0)
                return -NTFS_ESESSEXISTS;
        if (db_get(st, st->tags, name, strlen(name), &v) == 0)
                return -NTFS_ETAGEXISTS; /* sessions and tags share one namespace of refs */
        return 0;
}

static int fork_locked(ntfs_store *st, const char *src, const char *newname, ntfs_hash *ret) {
        int r = name_free(st, newname);
        if (r < 0)
                return r;
        ntfs_hash base;
        struct sess_rec sr;
        uint64_t next_linkid = 0;
        bool from_session = false;
        MDB_val v;
        bool is_tag = db_get(st, st->tags, src, strnlen(src, NTFS_NAME_MAX + 1), &v) == 0;
        if (!is_tag && ntfs_name_valid(src) && sess_get(st, src, &sr) == 0) {
                /* fork the live state: serialize what is uncommitted */
                struct commit_obj head;
                struct tree_entry root;
                ntfs_hash links;
                if ((r = commit_load(st, &sr.head, &head)) < 0)
                        return r;
                if ((r = ws_serialize(st, sr.wsid, &head.links, &root, &links)) < 0)
                        return r;
                if ((r = commit_load(st, &sr.head, &head)) < 0)
                        return r;
                if (same_state(&root, &links, &head)) {
                        base = sr.head;
                } else {
                        char msg[NTFS_NAME_MAX + 64];
                        snprintf(msg, sizeof msg, "fork of %s (uncommitted state)", src);
                        if ((r = store_make_commit(st, &root, &links, &sr.head, NULL, msg, NULL, newname, sr.bytes,
                                                   sr.inodes, &base)) < 0)
                                return r;
                        sr.flags |= 1; /* src's working state now differs from its head */
                        if ((r = sess_put(st, src, &sr)) < 0)
                                return r;
                }
                next_linkid = sr.next_linkid;
                from_session = true;
        } else if ((r = resolve_locked(st, src, &base, NULL, 0)) < 0) {
                return r;
        }
        if ((r = new_session_at(st, newname, &base, "fork")) < 0)
                return r;
        if (from_session) { /* same workspace: its link ids go on, its quota is kept */
                struct sess_rec nr;
                if ((r = sess_get(st, newname, &nr)) < 0)
                        return r;
                if (nr.next_linkid < next_linkid)
                        nr.next_linkid = next_linkid;
                nr.quota_bytes = sr.quota_bytes;
                nr.quota_inodes = sr.quota_inodes;
                if ((r = sess_put(st, newname, &nr)) < 0)
                        return r;
        }
        *ret = base;
        return 0;
}

int ntfs_fork(ntfs_store *st, const char *src, const char *newname, ntfs_hash *ret_head) {
        if (!src || !*src)
                return -NTFS_EINVALNAME;
        int r = store_enter(st);
        if (r < 0)
                return r;
        ntfs_hash h;
        r = store_fresh_txn(st);
        if (r == 0)
                r = fork_locked(st, src, newname, &h);
        r = store_finish(st, r, true);
        store_leave(st);
        if (r == 0 && ret_head)
                *ret_head = h;
        return r;
}

int ntfs_session_create(ntfs_store *st, const char *name, const char *from, ntfs_hash *ret_head) {
        if (from)
                return ntfs_fork(st, from, name, ret_head);
        int r = store_enter(st);
        if (r < 0)
                return r;
        ntfs_hash h;
        r = store_fresh_txn(st);
        if (r == 0)
                r = name_free(st, name);
        if (r == 0) {
                struct tree_entry root = { .mode = S_IFDIR | 0755, .nlink = 2, .mtime = ntfs_now_ns() };
                r = obj_put(st, obj_empty_tree, sizeof obj_empty_tree, &root.content);
                if (r == 0)
                        r = store_make_commit(st, &root, NULL, NULL, NULL, "session created", NULL, name, 0, 1, &h);
                if (r == 0)
                        r = new_session_at(st, name, &h, "create");
        }
        r = store_finish(st, r, true);
        store_leave(st);
        if (r == 0 && ret_head)
                *ret_head = h;
        return r;
}

/* Is a handle open on the session's working state? Then its user (a
 * mount's kernel) may hold its inode numbers. */
static bool state_open(ntfs_store *st, const char *name, uint64_t wsid) {
        for (ntfs_ws *w = st->wss; w; w = w->next)
                if (w->session && w->wsid == wsid && strcmp(w->session, name) == 0)
                        return true;
        return false;
}

/* A fresh working state at c replaces sr's (retired). */
static int replace_state(ntfs_store *st, struct sess_rec *sr, const struct commit_obj *c) {
        uint64_t nw = wsid_alloc(st);
        if (!nw)
                return -EIO;
        int r = ws_init_from_commit(st, nw, c);
        if (r == 0)
                r = wsid_retire(st, sr->wsid);
        if (r == 0)
                sr->wsid = nw;
        return r;
}

/* Moves the session's head and working state to commit: the state is
 * rewritten in place while a handle is open on it (*ret_ch: what changed;
 * fs/ws-rollback.c), else, or when hard-link groups differ, replaced by a
 * fresh one (*ret_ch NULL). */
int ws_replace_state(ntfs_store *st, const char *name, struct sess_rec *sr, const ntfs_hash *commit,
                     struct ws_changes **ret_ch) {
        *ret_ch = NULL;
        struct commit_obj c;
        int r = commit_load(st, commit, &c);
        if (r < 0)
                return r;
        r = state_open(st, name, sr->wsid) ? ws_rollback_in_place(st, sr->wsid, &c, ret_ch) : -EAGAIN;
        if (r == -EAGAIN)
                r = replace_state(st, sr, &c);
        if (r < 0)
                return r;
        uint64_t ml = max_linkid(st, &c.links) + 1;
        if (sr->next_linkid < ml)
                sr->next_linkid = ml;
        sr->bytes = c.bytes;
        sr->inodes = c.inodes;
        sr->flags &= ~1u;
        if ((r = reflog_append(st, name, sr, &sr->head, commit, "rollback")) < 0)
                return r;
        sr->head = *commit;
        return sess_put(st, name, sr);
}

int ntfs_rollback(ntfs_store *st, const char *name, const char *to, int steps, ntfs_hash *ret) {
        if (!to && steps < 0)
                return -EINVAL;
        int r = store_enter(st);
        if (r < 0)
                return r;
        struct sess_rec sr;
        ntfs_hash target;
        r = store_fresh_txn(st);
        if (r == 0)
                r = sess_get(st, name, &sr);
        if (r == 0 && to) {
                r = resolve_locked(st, to, &target, NULL, 0);
        } else if (r == 0) {
                target = sr.head;
                for (int i = 0; r == 0 && i < steps; i++) {
                        struct commit_obj c;
                        if (memcmp(target.b, sr.floor.b, NTFS_HASH_LEN) == 0) {
                                r = -NTFS_EFLOOR;
                                break;
                        }
                        if ((r = commit_load(st, &target, &c)) < 0)
                                break;
                        if (c.nparents == 0) {
                                r = -NTFS_EFLOOR;
                                break;
                        }
                        target = c.parents[0];
                }
        }
        uint64_t old_wsid = sr.wsid;
        if (r == 0)
                r = NTFS_FAULT("store.rollback");
        struct ws_changes *ch = NULL;
        if (r == 0)
                r = ws_replace_state(st, name, &sr, &target, &ch);
        r = store_finish(st, r, true);
        if (r == 0) {
                for (ntfs_ws *w = st->wss; w; w = w->next)
                        if (w->session && strcmp(w->session, name) == 0 && w->wsid == old_wsid) {
                                w->wsid = sr.wsid;
                                __atomic_add_fetch(&w->rollbacks, 1, __ATOMIC_RELEASE);
                                if (!ch) {
                                        __atomic_add_fetch(&w->generation, 1, __ATOMIC_RELEASE);
                                        w->invalidate_pending = true;
                                } else if (w->pending_changes) {
                                        /* a list not yet delivered: everything */
                                        w->invalidate_pending = true;
                                } else if (ch->n) {
                                        ch->refs++;
                                        w->pending_changes = ch;
                                }
                        }
        }
        ws_changes_unref(ch);
        store_leave(st);
        /* Drop the kernel's caches of every mount of the session before
         * returning, in this thread (docs/mount.md). */
        if (r == 0)
                store_run_invalidations(st);
        if (r == 0 && ret)
                *ret = target;
        return r;
}

/* ---- diff ---------------------------------------------------------------------------------- */

struct diff_ctx {
        ntfs_store *st;
        ntfs_hash links[2];
        int (*cb)(const struct ntfs_diff_entry *, void *);
        void *ud;
        char path[4096];
        bool stop;
        /* collected results (the callback runs without the store lock) */
        struct ntfs_diff_entry *items;
        char **paths;
        size_t n, cap;
};

static int diff_emit(struct diff_ctx *d, size_t plen, enum ntfs_diff_kind kind, const struct tree_entry *a,
                     const struct tree_entry *b) {
        if (d->n == d->cap) {
                size_t nc = d->cap ? d->cap * 2 : 64;
                struct ntfs_diff_entry *ni = realloc(d->items, nc * sizeof *ni);
                if (!ni)
                        return -ENOMEM;
                d->items = ni;
                char **np = realloc(d->paths, nc * sizeof *np);
                if (!np)
                        return -ENOMEM;
                d->paths = np;
                d->cap = nc;
        }
        d->paths[d->n] = strndup(d->path, plen);
        if (!d->paths[d->n])
                return -ENOMEM;
        struct ntfs_diff_entry *e = &d->items[d->n++];
        memset(e, 0, sizeof *e);
        e->kind = kind;
        if (a) {
                e->old_mode = a->mode;
                e->old_size = a->size;
        }
        if (b) {
                e->new_mode = b->mode;
                e->new_size = b->size;
        }
        return 0;
}

/* Replaces a reference into the link table by the group's attributes. */
static int diff_resolve(struct diff_ctx *d, int side, struct tree_entry *e) {
        if (!e->linkid || !e->namelen)
                return 0;
        const char *name = e->name;
        uint16_t nl = e->namelen;
        uint64_t h = e->h, id = e->linkid;
        MDB_val v;
        struct tree_view tv;
        int r = obj_get_typed(d->st, &d->links[side], OBJ_LINKS, &v);
        if (r == 0)
                r = tree_view_init(&tv, v.mv_data, v.mv_size);
        if (r < 0)
                return r;
        uint32_t lo = 0, hi = tv.count;
        while (lo < hi) {
                uint32_t mid = lo + (hi - lo) / 2;
                struct tree_entry le;
                if ((r = tree_view_get(&tv, mid, &le)) < 0)
                        return r;
                if (le.linkid == id) {
                        *e = le;
                        e->name = name;
                        e->namelen = nl;
                        e->h = h;
                        return 0;
                }
                if (le.linkid < id)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return -NTFS_ECORRUPT;
}

static int diff_trees(struct diff_ctx *d, size_t plen, const ntfs_hash *ta, const ntfs_hash *tb, int depth);

static int diff_pair(struct diff_ctx *d, size_t plen, struct tree_entry *a, struct tree_entry *b, int depth) {
        const struct tree_entry *n = a ? a : b;
        size_t nl = plen + (plen ? 1 : 0) + n->namelen;
        if (nl >= sizeof d->path)
                return -ENAMETOOLONG;
        if (plen)
                d->path[plen] = '/';
        memcpy(d->path + plen + (plen ? 1 : 0), n->name, n->namelen);
        int r;
        if (a && (r = diff_resolve(d, 0, a)) < 0)
                return r;
        if (b && (r = diff_resolve(d, 1, b)) < 0)
                return r;
        if (!b)
                return diff_emit(d, nl, NTFS_DIFF_DELETED, a, NULL);
        if (!a)
                return diff_emit(d, nl, NTFS_DIFF_ADDED, NULL, b);
        if ((a->mode & S_IFMT) != (b->mode & S_IFMT))
                return diff_emit(d, nl, NTFS_DIFF_TYPE, a, b);
        bool content = memcmp(a->content.b, b->content.b, NTFS_HASH_LEN) != 0 || a->rdev != b->rdev;
        bool meta = a->mode != b->mode || a->uid != b->uid || a->gid != b->gid ||
                    memcmp(a->xattr.b, b->xattr.b, NTFS_HASH_LEN) != 0;
        if (S_ISDIR(a->mode)) {
                if (meta && (r = diff_emit(d, nl, NTFS_DIFF_MODE, a, b)) < 0)
                        return r;
                if (content) {
                        ntfs_hash ca = a->content, cb = b->content;
                        return diff_trees(d, nl, &ca, &cb, depth + 1);
                }
                return 0;
        }
        if (content)
                return diff_emit(d, nl, NTFS_DIFF_MODIFIED, a, b);
        if (meta)
                return diff_emit(d, nl, NTFS_DIFF_MODE, a, b);
        return 0;
}

static int diff_trees(struct diff_ctx *d, size_t plen, const ntfs_hash *ta, const ntfs_hash *tb, int depth) {
        if (depth > 4096)
                return -ELOOP;
        if (memcmp(ta->b, tb->b, NTFS_HASH_LEN) == 0)
                return 0;
        MDB_val va, vb;
        struct tree_view a, b;
        int r = obj_get_typed(d->st, ta, OBJ_TREE, &va);
        if (r == 0)
                r = obj_get_typed(d->st, tb, OBJ_TREE, &vb);
        if (r == 0)
                r = tree_view_init(&a, va.mv_data, va.mv_size);
        if (r == 0)
                r = tree_view_init(&b, vb.mv_data, vb.mv_size);
        uint32_t i = 0, j = 0;
        while (r == 0 && (i < a.count || j < b.count)) {
                struct tree_entry ea, eb;
                if (i < a.count && (r = tree_view_get(&a, i, &ea)) < 0)
                        break;
                if (j < b.count && (r = tree_view_get(&b, j, &eb)) < 0)
                        break;
                int cmp = i >= a.count ? 1 : j >= b.count ? -1
                                                          : entry_cmp(ea.h, ea.name, ea.namelen, eb.h, eb.name,
                                                                      eb.namelen);
                if (cmp == 0) {
                        i++;
                        j++;
                        if (ea.linkid && eb.linkid && ea.linkid == eb.linkid &&
                            memcmp(d->links[0].b, d->links[1].b, NTFS_HASH_LEN) == 0)
                                continue;
                        if (!ea.linkid && !eb.linkid && ea.mode == eb.mode && ea.uid == eb.uid &&
                            ea.gid == eb.gid && ea.rdev == eb.rdev &&
                            memcmp(ea.content.b, eb.content.b, NTFS_HASH_LEN) == 0 &&
                            memcmp(ea.xattr.b, eb.xattr.b, NTFS_HASH_LEN) == 0)
                                continue;
                        r = diff_pair(d, plen, &ea, &eb, depth);
                } else if (cmp < 0) {
                        i++;
                        r = diff_pair(d, plen, &ea, NULL, depth);
                } else {
                        j++;
                        r = diff_pair(d, plen, NULL, &eb, depth);
                }
        }
        return r;
}

int ntfs_diff(ntfs_store *st, const char *from, const char *to, const char *to_session,
              int (*cb)(const struct ntfs_diff_entry *, void *), void *ud) {
        if (!from || (!to && !to_session))
                return -EINVAL;
        int r = store_enter(st);
        if (r < 0)
                return r;
        struct diff_ctx d = { .st = st, .cb = cb, .ud = ud };
        ntfs_hash ha, hb;
        struct commit_obj ca, cb2;
        struct tree_entry rootb = { 0 };
        r = resolve_locked(st, from, &ha, NULL, 0);
        if (r == 0)
                r = commit_load(st, &ha, &ca);
        if (r == 0 && to) {
                r = resolve_locked(st, to, &hb, NULL, 0);
                if (r == 0)
                        r = commit_load(st, &hb, &cb2);
                if (r == 0) {
                        rootb = cb2.root;
                        d.links[1] = cb2.links;
                }
        } else if (r == 0) {
                struct sess_rec sr;
                struct commit_obj head;
                r = sess_get(st, to_session, &sr);
                if (r == 0)
                        r = commit_load(st, &sr.head, &head);
                if (r == 0)
                        r = ws_serialize(st, sr.wsid, &head.links, &rootb, &d.links[1]);
                if (r == 0 && (r = commit_load(st, &sr.head, &head)) == 0 &&
                    !same_state(&rootb, &d.links[1], &head) && !(sr.flags & 1)) {
                        sr.flags |= 1;
                        r = sess_put(st, to_session, &sr);
                }
                if (r == 0)
                        r = commit_load(st, &ha, &ca); /* pages may have moved */
        }
        if (r == 0) {
                d.links[0] = ca.links;
                ntfs_hash ta = ca.root.content, tb = rootb.content;
                r = diff_trees(&d, 0, &ta, &tb, 0);
        }
        store_leave(st);
        for (size_t i = 0; i < d.n; i++) {
                if (r == 0 && !d.stop) {
                        d.items[i].path = d.paths[i];
                        if (cb(&d.items[i], ud))
                                d.stop = true;
                }
                free(d.paths[i]);
        }
        free(d.items);
        free(d.paths);
        return r;
}
