/* SPDX-License-Identifier: MIT
 * ws-rollback.c — a rollback in place (issue 61): the working state of a
 * session whose handle is open (a mount) is rewritten to a commit instead
 * of replaced by a fresh one, so that every materialized path that exists
 * in both states with the same type keeps its inode number, and the
 * handle's user learns exactly what changed (struct ntfs_ws_changes).
 *
 * The walk starts at the root and descends only into directories that
 * differ: a directory whose record is clean (no change since it was last
 * serialized or materialized) with the target's tree, attributes and
 * xattrs is equal below, since a change anywhere marks every ancestor dirty
 * (ws_mark_dirty). In a directory that differs, each materialized entry
 * (the overlay, dent records) is compared with the target's entry of that
 * name: kept with its number when the type and the hard-link group match
 * (its record reset to the target's when anything differs, its written
 * chunks and xattr rows dropped), removed otherwise. Names not materialized
 * come from the directory's new base tree on the next lookup, with new
 * numbers. Whiteouts go. Cost: the materialized entries of the directories
 * that differ, as a checkpoint's.
 *
 * A removed inode is treated as unlinked: nlink 0 and an orphan, freed when
 * the kernel forgets it (an fd open on it keeps its content; a directory is
 * empty and dead). Hard-link groups: their members' records live in the
 * link table. When the target's table equals the state's and no group has
 * changed since it was serialized, members are left as they are (a name
 * that no longer names the group just goes); otherwise ws_rollback_in_place
 * returns -EAGAIN and the caller replaces the state (ws_replace_state), as
 * every rollback did before.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/util.h"
#include "fs/ws-internal.h"
#include "common/banned.h"

#define RB_MAX_DEPTH 4096

struct rb {
        ntfs_store *st;
        uint64_t wsid;
        struct ws_changes *ch;
};

/* ---- the change list ---------------------------------------------------------------- */

struct ws_changes *ws_changes_new(void) {
        struct ws_changes *c = calloc(1, sizeof *c);
        if (c)
                c->refs = 1;
        return c;
}

void ws_changes_unref(struct ws_changes *c) {
        if (!c || --c->refs > 0)
                return;
        for (size_t i = 0; i < c->n; i++)
                free((char *)c->v[i].name);
        free(c->v);
        free(c);
}

static int ch_add(struct rb *t, enum ntfs_ws_change_kind kind, uint64_t parent, uint64_t ino, const char *name,
                  size_t nl) {
        struct ws_changes *c = t->ch;
        if (c->n == c->cap) {
                size_t nc = c->cap ? c->cap * 2 : 64;
                struct ntfs_ws_change *nv = realloc(c->v, nc * sizeof *nv);
                if (!nv)
                        return -ENOMEM;
                c->v = nv;
                c->cap = nc;
        }
        char *copy = NULL;
        if (name && !(copy = strndup(name, nl)))
                return -ENOMEM;
        c->v[c->n++] = (struct ntfs_ws_change){ .kind = (uint8_t)kind, .parent = parent, .ino = ino, .name = copy };
        return 0;
}

/* ---- comparing a record with a tree entry --------------------------------------------- */

/* Is ino's record, clean, what the entry would materialize to? */
static bool rec_is_entry(const struct ino_rec *r, const struct tree_entry *e) {
        if (r->flags & (INO_DIRTY | INO_XMAT))
                return false;
        uint32_t nlink = e->nlink ? e->nlink : 1;
        uint64_t size = S_ISDIR(e->mode) ? 0 : e->size;
        uint64_t rsize = S_ISDIR(r->mode) ? 0 : r->size;
        return r->mode == e->mode && r->uid == e->uid && r->gid == e->gid && r->nlink == nlink && rsize == size &&
               r->rdev == e->rdev && r->mtime == e->mtime && memcmp(r->base.b, e->content.b, NTFS_HASH_LEN) == 0 &&
               memcmp(r->xattr.b, e->xattr.b, NTFS_HASH_LEN) == 0;
}

/* Drops what the working state keeps of ino beside its record: written
 * chunks and materialized xattrs. */
static int drop_overlay_data(struct rb *t, uint64_t ino, const struct ino_rec *r) {
        int rc = chunks_drop(t->st, t->wsid, ino, 0);
        if (rc >= 0 && (r->flags & INO_XMAT)) {
                uint8_t k[16];
                key2(k, t->wsid, ino);
                rc = db_del_prefix(t->st, t->st->xattr, k, 16);
        }
        return rc < 0 ? rc : 0;
}

/* ---- a directory's materialized entries ---------------------------------------------- */

struct ov {
        uint64_t h, ino;
        uint16_t nl;
        char name[NTFS_NAME_MAX + 1];
};

/* Copies out dir's dent records (the cursor is closed before anything is
 * written); with del, deletes them all. */
static int overlay_take(struct rb *t, uint64_t dir, bool del, struct ov **ret, size_t *ret_n) {
        uint8_t k0[16];
        key2(k0, t->wsid, dir);
        MDB_cursor *cur;
        int rc = mdb_cursor_open(t->st->txn, t->st->dent, &cur);
        if (rc)
                return lmdb_err(rc);
        struct ov *v = NULL;
        size_t n = 0, cap = 0;
        int r = 0;
        MDB_val k = { 16, k0 }, val;
        for (rc = mdb_cursor_get(cur, &k, &val, MDB_SET_RANGE);
             rc == 0 && k.mv_size > 24 && memcmp(k.mv_data, k0, 16) == 0;
             rc = mdb_cursor_get(cur, &k, &val, MDB_NEXT)) {
                if (val.mv_size != sizeof(struct dent_val) || k.mv_size - 24 > NTFS_NAME_MAX) {
                        r = -NTFS_ECORRUPT;
                        break;
                }
                if (n == cap) {
                        cap = cap ? cap * 2 : 16;
                        struct ov *nv = realloc(v, cap * sizeof *nv);
                        if (!nv) {
                                r = -ENOMEM;
                                break;
                        }
                        v = nv;
                }
                struct ov *it = &v[n++];
                it->h = ntfs_get_be64((const uint8_t *)k.mv_data + 16);
                it->nl = (uint16_t)(k.mv_size - 24);
                memcpy(it->name, (const uint8_t *)k.mv_data + 24, it->nl);
                it->name[it->nl] = 0;
                memcpy(&it->ino, val.mv_data, 8);
        }
        if (r == 0 && rc != 0 && rc != MDB_NOTFOUND)
                r = lmdb_err(rc);
        mdb_cursor_close(cur);
        if (r == 0 && n > 0 && del)
                r = db_del_prefix(t->st, t->st->dent, k0, 16);
        if (r < 0) {
                free(v);
                return r;
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

static int dent_del(struct rb *t, uint64_t dir, const struct ov *it) {
        uint8_t k[24 + NTFS_NAME_MAX];
        size_t kl = ws_dent_key(k, t->wsid, dir, it->h, it->name, it->nl);
        return db_del(t->st, t->st->dent, k, kl);
}

/* ---- removal ------------------------------------------------------------------------- */

static int orphan(struct rb *t, uint64_t ino, struct ino_rec *r) {
        r->nlink = 0;
        r->flags &= ~(uint32_t)INO_DIRTY;
        int rc = ino_put(t->st, t->wsid, ino, r);
        if (rc < 0)
                return rc;
        uint8_t k[16];
        key2(k, t->wsid, ino);
        return db_put(t->st, t->st->orph, k, 16, "", 0);
}

/* (dir, it->name) no longer names it->ino (its dent is deleted): the inode is
 * unlinked (a directory with everything materialized below it, deepest
 * first), unless it is a hard-link group member, which lives on in the
 * group. Told deepest first: the kernel deletes a directory's entry only
 * once it holds no child. */
static int detach(struct rb *t, uint64_t dir, const struct ov *it, int depth) {
        if (depth > RB_MAX_DEPTH)
                return -ELOOP;
        struct ino_rec r;
        int rc = ino_get(t->st, t->wsid, it->ino, &r);
        if (rc < 0)
                return rc;
        if (!r.linkid && S_ISDIR(r.mode)) {
                _cleanup_free_ struct ov *v = NULL;
                size_t n = 0;
                if ((rc = overlay_take(t, it->ino, true, &v, &n)) < 0)
                        return rc;
                for (size_t i = 0; i < n; i++)
                        if (v[i].ino && (rc = detach(t, it->ino, &v[i], depth + 1)) < 0)
                                return rc;
        }
        if (!r.linkid && (rc = orphan(t, it->ino, &r)) < 0)
                return rc;
        return ch_add(t, NTFS_WS_CH_GONE, dir, it->ino, it->name, it->nl);
}

/* ---- the walk ------------------------------------------------------------------------ */

/* Makes ino's record the entry's (keeping its parent), dropping its
 * written data and xattr rows. */
static int reset_rec(struct rb *t, uint64_t ino, const struct ino_rec *old, const struct tree_entry *e) {
        int rc = drop_overlay_data(t, ino, old);
        if (rc < 0)
                return rc;
        struct ino_rec nr;
        ino_from_entry(e, &nr);
        nr.parent = old->parent;
        nr.linkid = 0;
        return ino_put(t->st, t->wsid, ino, &nr);
}

static int rb_dir(struct rb *t, uint64_t dir, const struct ino_rec *drec, const struct tree_entry *te, int depth);

static int rb_child(struct rb *t, uint64_t dir, const struct ov *it, const struct tree_view *tv, int depth) {
        struct ino_rec cr;
        int rc = ino_get(t->st, t->wsid, it->ino, &cr);
        if (rc < 0)
                return rc;
        struct tree_entry te;
        bool found = false;
        uint32_t i = tv->count ? tree_view_seek(tv, it->h, it->name, it->nl) : 0;
        if (i < tv->count) {
                if ((rc = tree_view_get(tv, i, &te)) < 0)
                        return rc;
                found = te.h == it->h && te.namelen == it->nl && memcmp(te.name, it->name, it->nl) == 0;
        }
        bool keep = found && (te.mode & S_IFMT) == (cr.mode & S_IFMT) && te.linkid == cr.linkid;
        if (!keep) {
                if ((rc = dent_del(t, dir, it)) < 0)
                        return rc;
                return detach(t, dir, it, depth + 1);
        }
        if (cr.linkid || rec_is_entry(&cr, &te))
                return 0; /* the same group, same table; or equal */
        if (S_ISDIR(cr.mode))
                return rb_dir(t, it->ino, &cr, &te, depth + 1);
        if ((rc = reset_rec(t, it->ino, &cr, &te)) < 0)
                return rc;
        return ch_add(t, NTFS_WS_CH_INODE, dir, it->ino, NULL, 0);
}

static int rb_dir(struct rb *t, uint64_t dir, const struct ino_rec *drec, const struct tree_entry *te, int depth) {
        if (depth > RB_MAX_DEPTH)
                return -ELOOP;
        /* the target's tree, copied: LMDB memory stays valid in a write
         * transaction only until pages are touched */
        _cleanup_free_ uint8_t *tree = NULL;
        struct tree_view tv = { 0 };
        int rc;
        if (!ntfs_hash_is_zero(&te->content)) {
                MDB_val v;
                if ((rc = obj_get_typed(t->st, &te->content, OBJ_TREE, &v)) < 0)
                        return rc;
                if (!(tree = malloc(v.mv_size ? v.mv_size : 1)))
                        return -ENOMEM;
                memcpy(tree, v.mv_data, v.mv_size);
                if ((rc = tree_view_init(&tv, tree, v.mv_size)) < 0)
                        return rc;
        }
        _cleanup_free_ struct ov *ov = NULL;
        size_t n = 0;
        if ((rc = overlay_take(t, dir, false, &ov, &n)) < 0)
                return rc;
        for (size_t i = 0; i < n; i++) {
                rc = ov[i].ino ? rb_child(t, dir, &ov[i], &tv, depth) : dent_del(t, dir, &ov[i]); /* a whiteout */
                if (rc < 0)
                        return rc;
        }
        if ((rc = reset_rec(t, dir, drec, te)) < 0)
                return rc;
        return ch_add(t, NTFS_WS_CH_DIR, drec->parent, dir, NULL, 0);
}

/* Is any hard-link group of the state changed since it was serialized? */
static int links_dirty(struct rb *t, bool *ret) {
        uint8_t k0[8];
        ntfs_put_be64(k0, t->wsid);
        MDB_cursor *cur;
        int rc = mdb_cursor_open(t->st->txn, t->st->dlink, &cur);
        if (rc)
                return lmdb_err(rc);
        MDB_val k = { 8, k0 }, v;
        rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        *ret = rc == 0 && k.mv_size >= 8 && memcmp(k.mv_data, k0, 8) == 0;
        mdb_cursor_close(cur);
        return rc == 0 || rc == MDB_NOTFOUND ? 0 : lmdb_err(rc);
}

int ws_rollback_in_place(ntfs_store *st, uint64_t wsid, const struct commit_obj *c, struct ws_changes **ret) {
        struct rb t = { .st = st, .wsid = wsid };
        ntfs_hash links;
        int r = ws_links_get(st, wsid, &links);
        if (r < 0)
                return r;
        bool dirty_links;
        if ((r = links_dirty(&t, &dirty_links)) < 0)
                return r;
        if (dirty_links || memcmp(links.b, c->links.b, NTFS_HASH_LEN) != 0)
                return -EAGAIN;
        if (!(t.ch = ws_changes_new()))
                return -ENOMEM;
        struct ino_rec root;
        r = ino_get(st, wsid, NTFS_ROOT_INO, &root);
        struct tree_entry te = c->root;
        if (r == 0 && !rec_is_entry(&root, &te)) {
                root.parent = 0;
                r = rb_dir(&t, NTFS_ROOT_INO, &root, &te, 0);
        }
        if (r < 0) {
                ws_changes_unref(t.ch);
                return r;
        }
        *ret = t.ch;
        return 0;
}
