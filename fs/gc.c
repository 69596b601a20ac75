/* SPDX-License-Identifier: MIT
 * gc.c — mark and sweep, and fsck.
 *
 * Roots: every session's head, floor and reflog; every tag; every live
 * working state's inode records (their base objects) and link tables; and
 * the extra roots the caller passes (commits the journal pins). Retired
 * working states are reclaimed first. The store lock is held throughout, so
 * no reader or writer runs concurrently (gc is "safe while readers are
 * active" because readers wait for it).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "fs/store-internal.h"
#include "common/banned.h"

/* ---- a set of hashes (open addressing) ----------------------------------------- */

struct hset {
        ntfs_hash *slots;
        size_t cap, n;
};

static bool hset_has(const struct hset *s, const ntfs_hash *h) {
        if (!s->cap)
                return false;
        size_t i = ntfs_get_be64(h->b) & (s->cap - 1);
        for (;;) {
                if (ntfs_hash_is_zero(&s->slots[i]))
                        return false;
                if (memcmp(s->slots[i].b, h->b, NTFS_HASH_LEN) == 0)
                        return true;
                i = (i + 1) & (s->cap - 1);
        }
}

/* Returns 1 if added, 0 if present, -ENOMEM. */
static int hset_add(struct hset *s, const ntfs_hash *h) {
        if ((s->n + 1) * 2 > s->cap) {
                size_t nc = s->cap ? s->cap * 2 : 1024;
                ntfs_hash *ns = calloc(nc, sizeof *ns);
                if (!ns)
                        return -ENOMEM;
                for (size_t i = 0; i < s->cap; i++) {
                        if (ntfs_hash_is_zero(&s->slots[i]))
                                continue;
                        size_t j = ntfs_get_be64(s->slots[i].b) & (nc - 1);
                        while (!ntfs_hash_is_zero(&ns[j]))
                                j = (j + 1) & (nc - 1);
                        ns[j] = s->slots[i];
                }
                free(s->slots);
                s->slots = ns;
                s->cap = nc;
        }
        size_t i = ntfs_get_be64(h->b) & (s->cap - 1);
        for (;;) {
                if (ntfs_hash_is_zero(&s->slots[i])) {
                        s->slots[i] = *h;
                        s->n++;
                        return 1;
                }
                if (memcmp(s->slots[i].b, h->b, NTFS_HASH_LEN) == 0)
                        return 0;
                i = (i + 1) & (s->cap - 1);
        }
}

/* ---- the walk ------------------------------------------------------------------- */

struct walk {
        ntfs_store *st;
        struct hset seen;
        ntfs_hash *stack;
        size_t sn, scap;
        bool verify;
        void (*problem)(const char *, void *);
        void *ud;
        uint64_t problems, checked, commits;
        ntfs_hash current; /* the object whose references are being pushed */
};

/* One line per problem: "object HASH: WHAT". */
static void report(struct walk *w, const char *what, const ntfs_hash *a) {
        w->problems++;
        if (!w->problem)
                return;
        char ha[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(a, ha);
        char line[512];
        snprintf(line, sizeof line, "object %s: %s", ha, what);
        w->problem(line, w->ud);
}

static int push(const ntfs_hash *h, void *ud) {
        struct walk *w = ud;
        if (ntfs_hash_is_zero(h))
                return 0;
        int r = hset_add(&w->seen, h);
        if (r <= 0)
                return r;
        if (w->sn == w->scap) {
                size_t nc = w->scap ? w->scap * 2 : 1024;
                ntfs_hash *ns = realloc(w->stack, nc * sizeof *ns);
                if (!ns)
                        return -ENOMEM;
                w->stack = ns;
                w->scap = nc;
        }
        w->stack[w->sn++] = *h;
        return 0;
}

static int walk_run(struct walk *w) {
        while (w->sn) {
                ntfs_hash h = w->stack[--w->sn];
                MDB_val v;
                int r = db_get(w->st, w->st->obj, h.b, NTFS_HASH_LEN, &v);
                if (r == -ENOENT) {
                        report(w, "missing (referenced but not in the store)", &h);
                        continue;
                }
                if (r < 0)
                        return r;
                w->checked++;
                const uint8_t *p = v.mv_data;
                if (v.mv_size && p[0] == OBJ_BLOB && !w->verify)
                        continue; /* chunks reference nothing */
                if (w->verify) {
                        ntfs_hash got;
                        ntfs_sha256(v.mv_data, v.mv_size, got.b);
                        if (memcmp(got.b, h.b, NTFS_HASH_LEN) != 0) {
                                report(w, "content does not match its hash (corrupt)", &h);
                                continue;
                        }
                }
                if (v.mv_size && p[0] == OBJ_COMMIT)
                        w->commits++;
                w->current = h;
                r = object_check(v.mv_data, v.mv_size, push, w);
                if (r == -ENOMEM)
                        return r;
                if (r < 0)
                        report(w, "cannot be decoded (corrupt)", &h);
        }
        return 0;
}

/* Pushes every root. */
static int push_roots(struct walk *w, const ntfs_hash *extra, size_t n_extra) {
        ntfs_store *st = w->st;
        int r;
        for (size_t i = 0; i < n_extra; i++)
                if ((r = push(&extra[i], w)) < 0)
                        return r;
        struct {
                MDB_dbi dbi;
                int kind;
        } scans[] = { { st->sess, 0 }, { st->tags, 1 }, { st->reflog, 2 }, { st->ino, 3 } };
        if ((r = sess_flush(st)) < 0 || (r = ino_flush(st)) < 0) /* fsck does not commit first */
                return r;
        for (size_t s = 0; s < ARRAY_SIZE(scans); s++) {
                MDB_cursor *cur;
                int rc = mdb_cursor_open(st->txn, scans[s].dbi, &cur);
                if (rc)
                        return lmdb_err(rc);
                MDB_val k, v;
                r = 0;
                for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && r == 0;
                     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                        switch (scans[s].kind) {
                        case 0:
                                if (v.mv_size == sizeof(struct sess_rec)) {
                                        struct sess_rec sr;
                                        memcpy(&sr, v.mv_data, sizeof sr);
                                        r = push(&sr.head, w);
                                        if (r == 0)
                                                r = push(&sr.floor, w);
                                }
                                break;
                        case 1:
                                if (v.mv_size >= NTFS_HASH_LEN) {
                                        ntfs_hash h;
                                        memcpy(h.b, v.mv_data, NTFS_HASH_LEN);
                                        r = push(&h, w);
                                }
                                break;
                        case 2:
                                if (v.mv_size >= 2 * NTFS_HASH_LEN) {
                                        ntfs_hash a, b;
                                        memcpy(a.b, v.mv_data, NTFS_HASH_LEN);
                                        memcpy(b.b, (const uint8_t *)v.mv_data + NTFS_HASH_LEN, NTFS_HASH_LEN);
                                        r = push(&a, w);
                                        if (r == 0)
                                                r = push(&b, w);
                                }
                                break;
                        case 3:
                                if (k.mv_size == 16 && ntfs_get_be64((const uint8_t *)k.mv_data + 8) == 0 &&
                                    v.mv_size >= NTFS_HASH_LEN) {
                                        ntfs_hash h; /* working-state header: link table */
                                        memcpy(h.b, v.mv_data, NTFS_HASH_LEN);
                                        r = push(&h, w);
                                } else if (v.mv_size == sizeof(struct ino_rec)) {
                                        struct ino_rec rec;
                                        memcpy(&rec, v.mv_data, sizeof rec);
                                        r = push(&rec.base, w);
                                        if (r == 0)
                                                r = push(&rec.xattr, w);
                                }
                                break;
                        }
                }
                mdb_cursor_close(cur);
                if (r < 0)
                        return r;
        }
        return 0;
}

static void walk_release(struct walk *w) {
        free(w->seen.slots);
        free(w->stack);
}

int ntfs_gc(ntfs_store *st, const ntfs_hash *extra_roots, size_t n_extra, struct ntfs_gc_stats *ret) {
        int r = store_enter(st);
        if (r < 0)
                return r;
        struct ntfs_gc_stats stats = { 0 };
        struct walk w = { .st = st };
        r = store_fresh_txn(st);
        if (r == 0)
                r = wsid_reclaim_all(st, &stats.states_freed);
        if (r == 0)
                r = push_roots(&w, extra_roots, n_extra);
        if (r == 0)
                r = walk_run(&w);
        if (r == 0 && w.problems)
                r = -NTFS_ECORRUPT; /* never sweep a store with missing objects */
        if (r == 0) {
                st->empty_file_ok = false; /* the sweep may remove it */
                MDB_cursor *cur;
                int rc = mdb_cursor_open(st->txn, st->obj, &cur);
                if (rc)
                        r = lmdb_err(rc);
                else {
                        MDB_val k, v;
                        for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;) {
                                stats.objects_before++;
                                ntfs_hash h;
                                if (k.mv_size != NTFS_HASH_LEN) {
                                        rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
                                        continue;
                                }
                                memcpy(h.b, k.mv_data, NTFS_HASH_LEN);
                                if (hset_has(&w.seen, &h)) {
                                        rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
                                        continue;
                                }
                                bool commit = v.mv_size && ((const uint8_t *)v.mv_data)[0] == OBJ_COMMIT;
                                stats.objects_freed++;
                                stats.bytes_freed += v.mv_size;
                                if ((rc = mdb_cursor_del(cur, 0)) != 0)
                                        break;
                                if (commit) {
                                        int dr = db_del(st, st->commits, h.b, NTFS_HASH_LEN);
                                        if (dr < 0 && dr != -ENOENT) {
                                                rc = EIO;
                                                break;
                                        }
                                }
                                /* continue after the deleted key */
                                k.mv_size = NTFS_HASH_LEN;
                                k.mv_data = h.b;
                                rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
                                stats.objects_before--; /* counted again below */
                                if (rc == 0)
                                        stats.objects_before++;
                                if (rc == 0)
                                        continue;
                        }
                        mdb_cursor_close(cur);
                        if (rc && rc != MDB_NOTFOUND)
                                r = lmdb_err(rc);
                }
        }
        r = store_finish(st, r, true);
        store_leave(st);
        walk_release(&w);
        if (r == 0 && ret)
                *ret = stats;
        return r;
}

int ntfs_fsck(ntfs_store *st, void (*cb)(const char *problem, void *), void *ud, struct ntfs_fsck_stats *ret) {
        int r = store_enter(st);
        if (r < 0)
                return r;
        struct walk w = { .st = st, .verify = true, .problem = cb, .ud = ud };
        r = push_roots(&w, NULL, 0);
        if (r == 0)
                r = walk_run(&w);
        /* every commit in the index must exist (and be a commit) */
        if (r == 0) {
                MDB_cursor *cur;
                int rc = mdb_cursor_open(st->txn, st->commits, &cur);
                if (rc)
                        r = lmdb_err(rc);
                else {
                        MDB_val k, v;
                        for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
                             rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                                ntfs_hash h;
                                if (k.mv_size != NTFS_HASH_LEN)
                                        continue;
                                memcpy(h.b, k.mv_data, NTFS_HASH_LEN);
                                MDB_val ov;
                                if (db_get(st, st->obj, h.b, NTFS_HASH_LEN, &ov) < 0)
                                        report(&w, "in the commit index but missing", &h);
                        }
                        mdb_cursor_close(cur);
                }
        }
        /* the working states' data files */
        if (r == 0) {
                uint64_t wp = 0;
                r = wsdata_check(st, cb, ud, &wp);
                w.problems += wp;
        }
        store_leave(st);
        if (r == 0) {
                if (ret) {
                        ret->objects_checked = w.checked;
                        ret->commits = w.commits;
                        ret->problems = w.problems;
                }
                if (w.problems)
                        r = -NTFS_ECORRUPT;
        }
        walk_release(&w);
        return r;
}
