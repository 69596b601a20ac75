/* SPDX-License-Identifier: MIT
 * store-refs.c — naming commits: short ids, resolving a ref (session, tag,
 * hex prefix), commit info, history, the reflog's reading, and tags.
 * Moved out of store.c (issue 68); the records live in store-internal.h.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/log.h"
#include "fs/store-internal.h"
#include "common/banned.h"

/* ---- refs ------------------------------------------------------------------------ */

static int short_id_locked(ntfs_store *st, const ntfs_hash *id, char out[NTFS_HEX_LEN + 1]) {
        /* The shortest prefix that differs from both neighbours in the
         * sorted commit index. */
        MDB_cursor *cur;
        int rc = mdb_cursor_open(st->txn, st->commits, &cur);
        if (rc)
                return lmdb_err(rc);
        size_t need = 0;
        MDB_val k = { NTFS_HASH_LEN, (void *)id->b }, v;
        /* the neighbours of id's position in the sorted index */
        uint8_t nb[2][NTFS_HASH_LEN];
        bool have[2] = { false, false };
        rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        if (rc == 0) {
                bool self = k.mv_size == NTFS_HASH_LEN && memcmp(k.mv_data, id->b, NTFS_HASH_LEN) == 0;
                if (!self && k.mv_size == NTFS_HASH_LEN) {
                        memcpy(nb[1], k.mv_data, NTFS_HASH_LEN);
                        have[1] = true;
                } else {
                        MDB_val nk, nv;
                        if (mdb_cursor_get(cur, &nk, &nv, MDB_NEXT) == 0 && nk.mv_size == NTFS_HASH_LEN) {
                                memcpy(nb[1], nk.mv_data, NTFS_HASH_LEN);
                                have[1] = true;
                                mdb_cursor_get(cur, &nk, &nv, MDB_PREV);
                        }
                }
                MDB_val pk, pv;
                if (mdb_cursor_get(cur, &pk, &pv, MDB_PREV) == 0 && pk.mv_size == NTFS_HASH_LEN &&
                    memcmp(pk.mv_data, id->b, NTFS_HASH_LEN) != 0) {
                        memcpy(nb[0], pk.mv_data, NTFS_HASH_LEN);
                        have[0] = true;
                }
        } else {
                MDB_val pk, pv;
                if (mdb_cursor_get(cur, &pk, &pv, MDB_LAST) == 0 && pk.mv_size == NTFS_HASH_LEN) {
                        memcpy(nb[0], pk.mv_data, NTFS_HASH_LEN);
                        have[0] = true;
                }
        }
        for (int d = 0; d < 2; d++) {
                if (!have[d])
                        continue;
                const uint8_t *o = nb[d];
                size_t i = 0;
                while (i < NTFS_HASH_LEN && o[i] == id->b[i])
                        i++;
                size_t digits = 2 * i;
                if (i < NTFS_HASH_LEN && (o[i] >> 4) == (id->b[i] >> 4))
                        digits++;
                if (digits + 1 > need)
                        need = digits + 1;
        }
        if (need > NTFS_HEX_LEN)
                need = NTFS_HEX_LEN;
        mdb_cursor_close(cur);
        if (need < NTFS_SHORT_ID_MIN)
                need = NTFS_SHORT_ID_MIN;
        ntfs_hash_hex(id, out);
        out[need] = 0;
        return 0;
}

int ntfs_short_id(ntfs_store *st, const ntfs_hash *commit, char out[NTFS_HEX_LEN + 1]) {
        int r = store_enter(st);
        if (r < 0)
                return r;
        r = short_id_locked(st, commit, out);
        store_leave(st);
        return r;
}

static bool is_hex(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
                      (s[i] >= 'A' && s[i] <= 'F')))
                        return false;
        return true;
}

static int prefix_lookup(ntfs_store *st, const char *ref, size_t n, ntfs_hash *ret, char *ambig,
                         size_t ambig_len) {
        uint8_t lo[NTFS_HASH_LEN] = { 0 };
        char tmp[NTFS_HEX_LEN + 1];
        memset(tmp, '0', NTFS_HEX_LEN);
        tmp[NTFS_HEX_LEN] = 0;
        memcpy(tmp, ref, n);
        if (ntfs_unhex(tmp, lo, NTFS_HASH_LEN) < 0)
                return -NTFS_ENOREF;
        MDB_cursor *cur;
        int rc = mdb_cursor_open(st->txn, st->commits, &cur);
        if (rc)
                return lmdb_err(rc);
        MDB_val k = { NTFS_HASH_LEN, lo }, v;
        int found = 0;
        size_t apos = 0;
        if (ambig && ambig_len)
                ambig[0] = 0;
        for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0 && found < 10;
             rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                char hex[NTFS_HEX_LEN + 1];
                ntfs_hex(k.mv_data, NTFS_HASH_LEN, hex);
                if (strncasecmp(hex, ref, n) != 0)
                        break;
                if (found == 0)
                        memcpy(ret->b, k.mv_data, NTFS_HASH_LEN);
                found++;
                if (ambig && apos + 16 < ambig_len) {
                        hex[NTFS_SHORT_ID_MIN + 3] = 0;
                        apos += (size_t)snprintf(ambig + apos, ambig_len - apos, "%s%s", apos ? ", " : "", hex);
                }
        }
        mdb_cursor_close(cur);
        if (found == 0)
                return -NTFS_ENOREF;
        return found == 1 ? 0 : -NTFS_EAMBIGUOUS;
}

int resolve_locked(ntfs_store *st, const char *ref, ntfs_hash *ret, char *ambig, size_t ambig_len) {
        if (!ref || !*ref || strnlen(ref, 512) > NTFS_NAME_MAX + 16)
                return -NTFS_EINVALNAME;
        MDB_val v;
        size_t n = strlen(ref);
        /* tag */
        if (db_get(st, st->tags, ref, n, &v) == 0 && v.mv_size == sizeof(struct tag_rec)) {
                memcpy(ret->b, (const uint8_t *)v.mv_data + offsetof(struct tag_rec, commit), NTFS_HASH_LEN);
                return 0;
        }
        /* session, session~N */
        const char *tilde = strrchr(ref, '~');
        char name[NTFS_NAME_MAX + 1];
        uint64_t steps = 0;
        if (tilde && (size_t)(tilde - ref) <= NTFS_NAME_MAX) {
                memcpy(name, ref, (size_t)(tilde - ref));
                name[tilde - ref] = 0;
                if (ntfs_parse_u64(tilde + 1, 1000000, &steps) < 0)
                        name[0] = 0;
        } else if (n <= NTFS_NAME_MAX) {
                memcpy(name, ref, n + 1);
        } else {
                name[0] = 0;
        }
        struct sess_rec sr;
        if (name[0] && ntfs_name_valid(name) && sess_get(st, name, &sr) == 0) {
                ntfs_hash h = sr.head;
                for (uint64_t i = 0; i < steps; i++) {
                        struct commit_obj c;
                        int r = commit_load(st, &h, &c);
                        if (r < 0)
                                return r;
                        if (c.nparents == 0)
                                return -NTFS_EFLOOR;
                        h = c.parents[0];
                }
                *ret = h;
                return 0;
        }
        if (n >= 4 && n <= NTFS_HEX_LEN && is_hex(ref, n))
                return prefix_lookup(st, ref, n, ret, ambig, ambig_len);
        return -NTFS_ENOREF;
}

int ntfs_resolve(ntfs_store *st, const char *ref, ntfs_hash *ret, char *ambig, size_t ambig_len) {
        int r = store_enter(st);
        if (r < 0)
                return r;
        r = resolve_locked(st, ref, ret, ambig, ambig_len);
        store_leave(st);
        return r;
}

static void commit_info_from(const ntfs_hash *id, const struct commit_obj *c, struct ntfs_commit_info *ret) {
        memset(ret, 0, sizeof *ret);
        ret->id = *id;
        ret->tree = c->root.content;
        ret->nparents = c->nparents;
        for (int i = 0; i < c->nparents; i++)
                ret->parents[i] = c->parents[i];
        ret->time_ns = c->time_ns;
        snprintf(ret->message, sizeof ret->message, "%.*s", (int)c->message_len, c->message ? c->message : "");
        snprintf(ret->effect, sizeof ret->effect, "%.*s", (int)c->effect_len, c->effect ? c->effect : "");
        snprintf(ret->session, sizeof ret->session, "%.*s", (int)c->session_len, c->session ? c->session : "");
        ret->bytes = c->bytes;
        ret->inodes = c->inodes;
}

int ntfs_commit_get(ntfs_store *st, const ntfs_hash *id, struct ntfs_commit_info *ret) {
        int r = store_enter(st);
        if (r < 0)
                return r;
        struct commit_obj c;
        r = commit_load(st, id, &c);
        if (r == 0)
                commit_info_from(id, &c, ret);
        store_leave(st);
        return r;
}

int ntfs_history(ntfs_store *st, const char *name, size_t max,
             int (*cb)(const struct ntfs_commit_info *, void *), void *ud) {
        int r = store_enter(st);
        if (r < 0)
                return r;
        struct sess_rec sr;
        ntfs_hash h;
        r = sess_get(st, name, &sr);
        if (r == 0)
                h = sr.head;
        else if (r == -NTFS_ENOSESSION || r == -NTFS_EINVALNAME)
                r = resolve_locked(st, name, &h, NULL, 0);
        /* Collect first, call back without the lock (callbacks may call in). */
        struct ntfs_commit_info *list = NULL;
        size_t n = 0, cap = 0;
        while (r == 0 && n < (max ? max : SIZE_MAX)) {
                struct commit_obj c;
                if ((r = commit_load(st, &h, &c)) < 0)
                        break;
                if (n == cap) {
                        cap = cap ? cap * 2 : 32;
                        struct ntfs_commit_info *nl = realloc(list, cap * sizeof *nl);
                        if (!nl) {
                                r = -ENOMEM;
                                break;
                        }
                        list = nl;
                }
                commit_info_from(&h, &c, &list[n++]);
                if (c.nparents == 0)
                        break;
                h = c.parents[0];
        }
        store_leave(st);
        for (size_t i = 0; r == 0 && i < n; i++)
                if (cb(&list[i], ud))
                        break;
        free(list);
        return r;
}

int ntfs_reflog(ntfs_store *st, const char *name, int (*cb)(const struct ntfs_reflog_entry *, void *),
                void *ud) {
        if (!ntfs_name_valid(name))
                return -NTFS_EINVALNAME;
        int r = store_enter(st);
        if (r < 0)
                return r;
        struct ntfs_reflog_entry *list = NULL;
        size_t n = 0, cap = 0;
        uint8_t k0[NTFS_NAME_MAX + 9];
        size_t pl = strlen(name) + 1;
        store_reflog_key(name, 0, k0);
        MDB_cursor *cur;
        int rc = mdb_cursor_open(st->txn, st->reflog, &cur);
        if (rc)
                r = lmdb_err(rc);
        else {
                MDB_val k = { pl + 8, k0 }, v;
                for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
                     rc == 0 && k.mv_size == pl + 8 && memcmp(k.mv_data, k0, pl) == 0;
                     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                        if (v.mv_size != sizeof(struct reflog_rec))
                                continue;
                        if (n == cap) {
                                cap = cap ? cap * 2 : 32;
                                struct ntfs_reflog_entry *nl = realloc(list, cap * sizeof *nl);
                                if (!nl) {
                                        r = -ENOMEM;
                                        break;
                                }
                                list = nl;
                        }
                        /* LMDB values are not aligned: copy before use */
                        struct reflog_rec rrc;
                        memcpy(&rrc, v.mv_data, sizeof rrc);
                        const struct reflog_rec *rr = &rrc;
                        struct ntfs_reflog_entry *e = &list[n++];
                        e->seq = ntfs_get_be64((const uint8_t *)k.mv_data + pl);
                        e->old_head = rr->old_head;
                        e->new_head = rr->new_head;
                        e->time_ns = rr->time;
                        snprintf(e->op, sizeof e->op, "%.*s", (int)sizeof rr->op - 1, rr->op);
                }
                mdb_cursor_close(cur);
        }
        store_leave(st);
        for (size_t i = 0; r == 0 && i < n; i++)
                if (cb(&list[i], ud))
                        break;
        free(list);
        return r;
}

/* ---- tags ------------------------------------------------------------------------ */

static void tag_info_from(const char *name, size_t nl, const struct tag_rec *t, struct ntfs_tag_info *ret) {
        memset(ret, 0, sizeof *ret);
        snprintf(ret->name, sizeof ret->name, "%.*s", (int)nl, name);
        ret->commit = t->commit;
        ret->scope = t->scope;
        snprintf(ret->session, sizeof ret->session, "%.*s", NTFS_NAME_MAX, t->session);
        ret->created_ns = t->created;
}

int ntfs_tag_create(ntfs_store *st, const char *session, const char *tag, const char *at,
                    enum ntfs_tag_scope scope, ntfs_hash *ret) {
        if (!ntfs_name_valid(tag))
                return -NTFS_EINVALNAME;
        if (scope != NTFS_TAG_SESSION && scope != NTFS_TAG_STORE)
                return -EINVAL;
        int r = store_enter(st);
        if (r < 0)
                return r;
        struct sess_rec sr;
        ntfs_hash h;
        MDB_val v;
        r = sess_get(st, session, &sr);
        if (r == 0) {
                if (at)
                        r = resolve_locked(st, at, &h, NULL, 0);
                else
                        h = sr.head;
        }
        if (r == 0 && db_get(st, st->tags, tag, strlen(tag), &v) == 0)
                r = -NTFS_ETAGEXISTS;
        /* A tag may not shadow a session name either (refs resolve tags first). */
        if (r == 0 && db_get(st, st->sess, tag, strlen(tag), &v) == 0)
                r = -NTFS_ETAGEXISTS;
        if (r == 0) {
                struct tag_rec t = { .commit = h, .scope = scope, .created = ntfs_now_ns() };
                snprintf(t.session, sizeof t.session, "%s", session);
                r = db_put(st, st->tags, tag, strlen(tag), &t, sizeof t);
        }
        if (r == 0)
                r = store_commit_locked(st, true);
        if (r == 0 && ret)
                *ret = h;
        store_leave(st);
        return r;
}

int ntfs_tag_get(ntfs_store *st, const char *tag, struct ntfs_tag_info *ret) {
        if (!ntfs_name_valid(tag))
                return -NTFS_EINVALNAME;
        int r = store_enter(st);
        if (r < 0)
                return r;
        MDB_val v;
        r = db_get(st, st->tags, tag, strlen(tag), &v);
        if (r == -ENOENT)
                r = -NTFS_ENOREF;
        else if (r == 0 && v.mv_size != sizeof(struct tag_rec))
                r = -NTFS_ECORRUPT;
        if (r == 0) {
                struct tag_rec tc;
                memcpy(&tc, v.mv_data, sizeof tc);
                tag_info_from(tag, strlen(tag), &tc, ret);
        }
        store_leave(st);
        return r;
}

int ntfs_tag_delete(ntfs_store *st, const char *tag) {
        if (!ntfs_name_valid(tag))
                return -NTFS_EINVALNAME;
        int r = store_enter(st);
        if (r < 0)
                return r;
        r = db_del(st, st->tags, tag, strlen(tag));
        if (r == -ENOENT)
                r = -NTFS_ENOREF;
        if (r == 0)
                r = store_commit_locked(st, true);
        store_leave(st);
        return r;
}

int ntfs_tag_list(ntfs_store *st, const char *session, int (*cb)(const struct ntfs_tag_info *, void *),
                  void *ud) {
        int r = store_enter(st);
        if (r < 0)
                return r;
        struct ntfs_tag_info *list = NULL;
        size_t n = 0, cap = 0;
        MDB_cursor *cur;
        int rc = mdb_cursor_open(st->txn, st->tags, &cur);
        if (rc)
                r = lmdb_err(rc);
        else {
                MDB_val k, v;
                for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
                     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                        struct tag_rec tc;
                        if (v.mv_size == sizeof tc)
                                memcpy(&tc, v.mv_data, sizeof tc);
                        const struct tag_rec *t = &tc;
                        if (v.mv_size != sizeof *t || k.mv_size > NTFS_NAME_MAX)
                                continue;
                        if (session && t->scope == NTFS_TAG_SESSION && strcmp(t->session, session) != 0)
                                continue;
                        if (n == cap) {
                                cap = cap ? cap * 2 : 16;
                                struct ntfs_tag_info *nl = realloc(list, cap * sizeof *nl);
                                if (!nl) {
                                        r = -ENOMEM;
                                        break;
                                }
                                list = nl;
                        }
                        tag_info_from(k.mv_data, k.mv_size, t, &list[n++]);
                }
                mdb_cursor_close(cur);
        }
        store_leave(st);
        for (size_t i = 0; r == 0 && i < n; i++)
                if (cb(&list[i], ud))
                        break;
        free(list);
        return r;
}
