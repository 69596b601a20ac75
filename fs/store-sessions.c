/* SPDX-License-Identifier: MIT
 * store-sessions.c — the session calls of store.h: a session's info, the
 * list, its quota, ending it, and the commit every checkpoint makes
 * (store_make_commit, store_finish). Moved out of store.c (issue 68); the
 * session records themselves (sess_get, sess_put) stay in store.c.
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

/* ---- sessions ------------------------------------------------------------------ */

static int session_info_from(ntfs_store *st, const char *name, const struct sess_rec *sr,
                             struct ntfs_session_info *ret) {
        memset(ret, 0, sizeof *ret);
        snprintf(ret->name, sizeof ret->name, "%s", name);
        ret->head = sr->head;
        ret->floor = sr->floor;
        ret->created_ns = sr->created;
        ret->bytes = sr->bytes;
        ret->inodes = sr->inodes;
        ret->quota_bytes = sr->quota_bytes;
        ret->quota_inodes = sr->quota_inodes;
        struct ino_rec root;
        if (ino_get(st, sr->wsid, NTFS_ROOT_INO, &root) == 0)
                ret->dirty = (root.flags & INO_DIRTY) != 0 || (sr->flags & 1);
        for (ntfs_ws *w = st->wss; w; w = w->next)
                if (w->session && strcmp(w->session, name) == 0)
                        ret->mounts++;
        return 0;
}

int ntfs_session_get(ntfs_store *st, const char *name, struct ntfs_session_info *ret) {
        int r = store_enter(st);
        if (r < 0)
                return r;
        struct sess_rec sr;
        r = sess_get(st, name, &sr);
        if (r == 0)
                r = session_info_from(st, name, &sr, ret);
        store_leave(st);
        return r;
}

int ntfs_session_list(ntfs_store *st, int (*cb)(const struct ntfs_session_info *, void *), void *ud) {
        int r = store_enter(st);
        if (r < 0)
                return r;
        struct ntfs_session_info *list = NULL;
        size_t n = 0, cap = 0;
        MDB_cursor *cur;
        if ((r = sess_flush(st)) < 0) {
                store_leave(st);
                return r;
        }
        int rc = mdb_cursor_open(st->txn, st->sess, &cur);
        if (rc)
                r = lmdb_err(rc);
        else {
                MDB_val k, v;
                for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
                     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                        if (v.mv_size != sizeof(struct sess_rec) || k.mv_size > NTFS_NAME_MAX)
                                continue;
                        if (n == cap) {
                                cap = cap ? cap * 2 : 16;
                                struct ntfs_session_info *nl = realloc(list, cap * sizeof *nl);
                                if (!nl) {
                                        r = -ENOMEM;
                                        break;
                                }
                                list = nl;
                        }
                        char name[NTFS_NAME_MAX + 1];
                        memcpy(name, k.mv_data, k.mv_size);
                        name[k.mv_size] = 0;
                        struct sess_rec sr;
                        memcpy(&sr, v.mv_data, sizeof sr);
                        session_info_from(st, name, &sr, &list[n++]);
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

void ntfs_store_set_default_quota(ntfs_store *st, uint64_t bytes, uint64_t inodes) {
        if (store_enter(st) < 0)
                return;
        st->default_quota_bytes = bytes;
        st->default_quota_inodes = inodes;
        store_leave(st);
}

int ntfs_session_set_quota(ntfs_store *st, const char *name, uint64_t bytes, uint64_t inodes) {
        int r = store_enter(st);
        if (r < 0)
                return r;
        struct sess_rec sr;
        r = sess_get(st, name, &sr);
        if (r == 0) {
                sr.quota_bytes = bytes;
                sr.quota_inodes = inodes;
                r = sess_put(st, name, &sr);
        }
        if (r == 0)
                r = store_commit_locked(st, true);
        store_leave(st);
        return r;
}

int store_make_commit(ntfs_store *st, const struct tree_entry *root, const ntfs_hash *links,
                      const ntfs_hash *parent, const ntfs_hash *parent2, const char *msg, const char *effect,
                      const char *session, uint64_t bytes, uint64_t inodes, ntfs_hash *ret) {
        struct commit_obj c = { 0 };
        c.root = *root;
        c.root.name = "";
        c.root.namelen = 0;
        c.root.h = 0;
        c.root.linkid = 0;
        if (links)
                c.links = *links;
        if (parent && !ntfs_hash_is_zero(parent))
                c.parents[c.nparents++] = *parent;
        if (parent2 && !ntfs_hash_is_zero(parent2))
                c.parents[c.nparents++] = *parent2;
        c.time_ns = ntfs_now_ns();
        c.bytes = bytes;
        c.inodes = inodes;
        c.message = msg ? msg : "";
        c.message_len = (uint16_t)strnlen(c.message, 1000);
        c.effect = effect ? effect : "";
        c.effect_len = (uint16_t)strnlen(c.effect, 120);
        c.session = session ? session : "";
        c.session_len = (uint16_t)strnlen(c.session, NTFS_NAME_MAX);
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len;
        int r = commit_encode(&c, &buf, &len);
        if (r < 0)
                return r;
        return obj_put(st, buf, len, ret);
}

int store_finish(ntfs_store *st, int r, bool durable) {
        if (r == 0)
                return store_commit_locked(st, durable);
        store_abort_locked(st);
        return r;
}

int ntfs_session_end(ntfs_store *st, const char *name) {
        int r = store_enter(st);
        if (r < 0)
                return r;
        struct sess_rec sr;
        r = sess_get(st, name, &sr);
        for (ntfs_ws *w = st->wss; r == 0 && w; w = w->next)
                if (w->session && strcmp(w->session, name) == 0)
                        r = -EBUSY;
        if (r == 0)
                r = sess_del(st, name);
        if (r == 0)
                r = wsid_retire(st, sr.wsid);
        /* session-scoped tags and the reflog go with it */
        while (r == 0) {
                char victim[NTFS_NAME_MAX + 1] = "";
                MDB_cursor *cur;
                int rc = mdb_cursor_open(st->txn, st->tags, &cur);
                if (rc) {
                        r = lmdb_err(rc);
                        break;
                }
                MDB_val k, v;
                for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
                     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                        struct tag_rec tc;
                        if (v.mv_size == sizeof tc)
                                memcpy(&tc, v.mv_data, sizeof tc);
                        const struct tag_rec *t = &tc;
                        if (v.mv_size == sizeof *t && t->scope == NTFS_TAG_SESSION &&
                            strcmp(t->session, name) == 0 && k.mv_size <= NTFS_NAME_MAX) {
                                memcpy(victim, k.mv_data, k.mv_size);
                                victim[k.mv_size] = 0;
                                break;
                        }
                }
                mdb_cursor_close(cur);
                if (!victim[0])
                        break;
                r = db_del(st, st->tags, victim, strlen(victim));
        }
        if (r == 0) {
                uint8_t k[NTFS_NAME_MAX + 9];
                store_reflog_key(name, 0, k);
                int n = db_del_prefix(st, st->reflog, k, strlen(name) + 1);
                if (n < 0)
                        r = n;
        }
        if (r == 0)
                r = store_commit_locked(st, true);
        if (r == 0)
                r = store_fresh_txn(st);
        if (r == 0) {
                /* reclaim its working state now that the end is durable */
                r = wsid_reclaim_all(st, NULL);
        }
        store_leave(st);
        return r;
}
