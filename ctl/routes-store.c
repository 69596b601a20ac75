/* SPDX-License-Identifier: MIT
 * routes-store.c — status, sessions, mounts, checkpoint, fork, tag,
 * rollback, log, diff, quota, gc and fsck.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "ctl/daemon.h"
#include "ctl/jsonutil.h"
#include "common/banned.h"

/* ---- status, sessions ------------------------------------------------------------ */



static int h_status(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        struct ntfs_store_stats ss;
        int r = ntfs_store_stats(D.st, &ss);
        if (r < 0)
                return d_fail(resp, r, "status");
        json_t *o = json_pack("{s:s, s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:{s:i, s:b, s:b, s:b, s:b}, "
                              "s:{s:I, s:I, s:I, s:I, s:I}}",
                              "version", NTFSD_VERSION, "store", D.store_dir, "pid", (int)getpid(), "sessions",
                              (json_int_t)ss.sessions, "tags", (json_int_t)ss.tags, "objects",
                              (json_int_t)ss.objects, "used_bytes", (json_int_t)ss.used_bytes, "data_bytes",
                              (json_int_t)ss.data_bytes, "data_reusable_bytes", (json_int_t)ss.data_reusable_bytes,
                              "mounts",
                              d_mounts_json(), "jail", "cgroup_version", D.caps.cgroup_version, "memory",
                              D.caps.cgroup_memory, "pids", D.caps.cgroup_pids, "cpu", D.caps.cgroup_cpu,
                              "seccomp", D.caps.seccomp, "space", "live_bytes", (json_int_t)ss.live_bytes,
                              "free_in_file_bytes", (json_int_t)ss.free_bytes, "reclaimable_bytes",
                              (json_int_t)ss.reclaimable_bytes, "file_bytes", (json_int_t)ss.file_bytes,
                              "disk_bytes", (json_int_t)ss.disk_bytes);
        return d_reply(resp, 200, o);
}

static int h_health(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        _cleanup_free_ char *cur = req->conn_data && *req->conn_data ? strdup(*req->conn_data) : d_seed_current();
        return d_reply(resp, 200, json_pack("{s:s, s:s?, s:b}", "status", "ok", "session", cur, "replay", 0));
}

static int h_session_new(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "name", "from", NULL };
        const char *name, *from;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "name", true, &name)) < 0 ||
            (r = d_want_string(req, resp, "from", false, &from)) < 0)
                return r;
        ntfs_hash h;
        r = ntfs_session_create(D.st, name, from, &h);
        if (r < 0)
                return ntfs_http_error(resp, r, "cannot create session '%s': %s", name, ntfs_strerror(r));
        d_journal_session_created(name, (int64_t)req->peer.uid);
        log_info("session %s created by uid %u", name, (unsigned)req->peer.uid);
        json_t *o = d_commit_json(&h, "head");
        json_object_set_new(o, "name", json_string(name));
        return d_reply(resp, 201, o);
}

static int list_cb(const struct ntfs_session_info *si, void *ud) {
        json_t *o;
        if (d_session_info_json(si, &o) == 0)
                json_array_append_new(ud, o);
        return 0;
}

static int h_session_ls(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        json_t *arr = json_array();
        int r = ntfs_session_list(D.st, list_cb, arr);
        if (r < 0) {
                json_decref(arr);
                return d_fail(resp, r, "list");
        }
        return d_reply(resp, 200, json_pack("{s:o}", "sessions", arr));
}

static int h_session_get(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        struct ntfs_session_info si;
        const char *name = d_param(req, "name");
        int r = ntfs_session_get(D.st, name, &si);
        if (r < 0)
                return ntfs_http_error(resp, r, "session '%s': %s", name, ntfs_strerror(r));
        json_t *o;
        if ((r = d_session_info_json(&si, &o)) < 0)
                return d_fail(resp, r, "session");
        return d_reply(resp, 200, o);
}

static int h_mount(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "session", "mountpoint", "ro", "at", "autocheckpoint",
                                            "autocheckpoint_max", "relatime", NULL };
        const char *session, *mp, *at;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "session", true, &session)) < 0 ||
            (r = d_want_string(req, resp, "mountpoint", true, &mp)) < 0 ||
            (r = d_want_string(req, resp, "at", false, &at)) < 0)
                return r;
        json_t *roj = json_object_get(req->json, "ro");
        if (roj && !json_is_boolean(roj))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "field 'ro' must be a boolean");
        bool ro = json_is_true(roj);
        json_t *raj = json_object_get(req->json, "relatime");
        if (raj && !json_is_boolean(raj))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "field 'relatime' must be a boolean");
        bool relatime = json_is_true(raj);
        json_t *ac = json_object_get(req->json, "autocheckpoint");
        json_t *am = json_object_get(req->json, "autocheckpoint_max");
        if ((ac && !json_is_number(ac)) || (am && !json_is_number(am)))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "autocheckpoint must be a number of seconds");
        double idle = ac ? json_number_value(ac) : 0, maxi = am ? json_number_value(am) : 0;
        if (idle < 0 || idle > 86400 || maxi < 0 || maxi > 86400)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "autocheckpoint out of range (0..86400 s)");
        if (mp[0] != '/')
                return ntfs_http_error(resp, -NTFS_EBADREQ, "mountpoint must be an absolute path");
        if (!at) {
                struct ntfs_session_info si;
                if ((r = ntfs_session_get(D.st, session, &si)) < 0)
                        return ntfs_http_error(resp, r, "session '%s': %s", session, ntfs_strerror(r));
        }
        _cleanup_free_ char *real = NULL;
        r = d_mount_add(session, at, mp, ro, false, idle, maxi, relatime, &real);
        if (r < 0 && access("/dev/fuse", R_OK | W_OK) < 0)
                return ntfs_http_error(resp, r, "cannot mount %s: /dev/fuse: %s (ntfsd runs as uid %u and cannot open it)",
                                       mp, strerror(errno), (unsigned)geteuid());
        if (r < 0)
                return ntfs_http_error(resp, r, "cannot mount %s: %s", mp, ntfs_strerror(r));
        return d_reply(resp, 201, json_pack("{s:s, s:s, s:b, s:s?, s:b}", "mountpoint", real, "session", session,
                                          "ro", ro || at, "at", at, "relatime", relatime && !ro && !at));
}

static int h_mounts(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        return d_reply(resp, 200, json_pack("{s:o}", "mounts", d_mounts_json()));
}

static int h_unmount(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "mountpoint", NULL };
        const char *mp;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "mountpoint", true, &mp)) < 0)
                return r;
        struct dmount *m = d_mount_take(mp);
        if (!m)
                return ntfs_http_error(resp, -NTFS_ENOTFOUND, "nothing is mounted at %s", mp);
        char *path = strdup(m->mountpoint);
        r = d_mount_stop(m);
        if (r < 0)
                log_warn("unmount %s: %s", path, ntfs_strerror(r));
        json_t *o = json_pack("{s:s, s:b}", "mountpoint", path ? path : mp, "unmounted", 1);
        free(path);
        return d_reply(resp, 200, o);
}

static int h_session_end(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const char *name = d_param(req, "name");
        struct ntfs_session_info si;
        int r = ntfs_session_get(D.st, name, &si);
        if (r < 0)
                return ntfs_http_error(resp, r, "session '%s': %s", name, ntfs_strerror(r));
        if (d_persession_close)
                d_persession_close(name);
        d_session_end_begin(name); /* no mount of it starts until done */
        d_unmount_session(name);
        r = ntfs_session_end(D.st, name);
        d_session_end_done(name);
        if (r < 0)
                return ntfs_http_error(resp, r, "cannot end session '%s': %s", name, ntfs_strerror(r));
        d_journal_session_ended(name);
        return d_reply(resp, 200, json_pack("{s:s, s:b}", "name", name, "ended", 1));
}

/* ---- checkpoint, fork, tag, rollback, log, diff ---------------------------------- */


static int h_checkpoint(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "message", NULL };
        const char *name = d_param(req, "name"), *msg;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "message", false, &msg)) < 0)
                return r;
        if (msg && strlen(msg) > 1000)
                return ntfs_http_error(resp, -NTFS_ETOOLARGE, "message longer than 1000 bytes");
        ntfs_hash h;
        bool changed;
        /* a message asked for is in the log, changes or not (fs/store.h) */
        r = d_checkpoint_always(name, msg ? msg : "checkpoint", NULL, msg != NULL, &h, &changed);
        if (r < 0)
                return ntfs_http_error(resp, r, "checkpoint of '%s' failed: %s", name, ntfs_strerror(r));
        json_t *o = d_commit_json(&h, "commit");
        json_object_set_new(o, "changed", json_boolean(changed));
        return d_reply(resp, 200, o);
}

static int h_fork(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "name", "at", NULL };
        const char *src = d_param(req, "name"), *newname, *at;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "name", true, &newname)) < 0 ||
            (r = d_want_string(req, resp, "at", false, &at)) < 0)
                return r;
        struct ntfs_session_info si;
        if ((r = ntfs_session_get(D.st, src, &si)) < 0)
                return ntfs_http_error(resp, r, "session '%s': %s", src, ntfs_strerror(r));
        if (!at)
                d_hold_session_mounts(src);
        ntfs_hash h;
        r = ntfs_fork(D.st, at ? at : src, newname, &h);
        if (!at)
                d_release_session_mounts(src);
        if (r < 0)
                return ntfs_http_error(resp, r, "cannot fork '%s' as '%s': %s", src, newname, ntfs_strerror(r));
        d_journal_session_created(newname, (int64_t)req->peer.uid);
        json_t *o = d_commit_json(&h, "head");
        json_object_set_new(o, "name", json_string(newname));
        return d_reply(resp, 201, o);
}

static int h_tag(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "tag", "at", "scope", NULL };
        const char *name = d_param(req, "name"), *tag, *at, *scope;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "tag", true, &tag)) < 0 ||
            (r = d_want_string(req, resp, "at", false, &at)) < 0 ||
            (r = d_want_string(req, resp, "scope", false, &scope)) < 0)
                return r;
        enum ntfs_tag_scope sc = NTFS_TAG_SESSION;
        if (scope && strcmp(scope, "store") == 0)
                sc = NTFS_TAG_STORE;
        else if (scope && strcmp(scope, "session") != 0)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "scope must be 'session' or 'store'");
        ntfs_hash h;
        r = ntfs_tag_create(D.st, name, tag, at, sc, &h);
        if (r < 0)
                return ntfs_http_error(resp, r, "cannot tag '%s' as '%s': %s", name, tag, ntfs_strerror(r));
        json_t *o = d_commit_json(&h, "commit");
        json_object_set_new(o, "tag", json_string(tag));
        json_object_set_new(o, "scope", json_string(sc == NTFS_TAG_STORE ? "store" : "session"));
        return d_reply(resp, 201, o);
}

static int tag_cb(const struct ntfs_tag_info *t, void *ud) {
        json_t *o = d_commit_json(&t->commit, "commit");
        json_object_set_new(o, "tag", json_string(t->name));
        json_object_set_new(o, "scope", json_string(t->scope == NTFS_TAG_STORE ? "store" : "session"));
        json_object_set_new(o, "session", json_string(t->session));
        json_object_set_new(o, "created", json_integer(t->created_ns));
        json_array_append_new(ud, o);
        return 0;
}

static int h_tags(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        char session[NTFS_NAME_MAX + 1];
        bool have = ntfs_http_request_query(req, "session", session, sizeof session) >= 0 && session[0];
        json_t *arr = json_array();
        int r = ntfs_tag_list(D.st, have ? session : NULL, tag_cb, arr);
        if (r < 0) {
                json_decref(arr);
                return d_fail(resp, r, "tags");
        }
        return d_reply(resp, 200, json_pack("{s:o}", "tags", arr));
}

static int h_rollback(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "to", "steps", NULL };
        const char *name = d_param(req, "name"), *to;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "to", false, &to)) < 0)
                return r;
        json_t *sj = req->json ? json_object_get(req->json, "steps") : NULL;
        if (sj && !json_is_integer(sj))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "field 'steps' must be an integer");
        if ((to != NULL) == (sj != NULL))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "give exactly one of 'to' and 'steps'");
        json_int_t steps = sj ? json_integer_value(sj) : 0;
        /* 0 would only drop the work since the last checkpoint: refused,
         * as protocol.md says (N >= 1). */
        if (sj && (steps < 1 || steps > 1000000))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'steps' must be between 1 and 1000000");
        d_flush_session_mounts(name);
        ntfs_hash h;
        r = ntfs_rollback(D.st, name, to, (int)steps, &h);
        if (r < 0)
                return ntfs_http_error(resp, r, "cannot roll back '%s': %s", name, ntfs_strerror(r));
        log_info("session %s rolled back", name);
        return d_reply(resp, 200, d_commit_json(&h, "head"));
}

struct log_ctx {
        json_t *arr;
        json_t *tags; /* commit hex -> [names] */
};

static int log_tag_cb(const struct ntfs_tag_info *t, void *ud) {
        char hex[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(&t->commit, hex);
        json_t *l = json_object_get(ud, hex);
        if (!l) {
                l = json_array();
                json_object_set_new(ud, hex, l);
        }
        json_array_append_new(l, json_string(t->name));
        return 0;
}

static int log_cb(const struct ntfs_commit_info *c, void *ud) {
        struct log_ctx *lc = ud;
        json_t *o = d_commit_json(&c->id, "commit");
        json_t *parents = json_array();
        for (int i = 0; i < c->nparents; i++) {
                char hex[NTFS_HEX_LEN + 1];
                ntfs_hash_hex(&c->parents[i], hex);
                json_array_append_new(parents, json_string(hex));
        }
        char hex[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(&c->id, hex);
        json_t *tags = json_object_get(lc->tags, hex);
        json_object_set_new(o, "parents", parents);
        json_object_set_new(o, "message", json_string(c->message));
        json_object_set_new(o, "effect", json_string(c->effect));
        json_object_set_new(o, "time", json_integer(c->time_ns));
        json_object_set_new(o, "bytes", json_integer((json_int_t)c->bytes));
        json_object_set(o, "tags", tags ? tags : json_array());
        if (!tags)
                json_decref(json_object_get(o, "tags")), json_object_set_new(o, "tags", json_array());
        json_array_append_new(lc->arr, o);
        return 0;
}

static int h_log(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const char *name = d_param(req, "name");
        char maxs[32];
        uint64_t max = 0;
        if (ntfs_http_request_query(req, "max", maxs, sizeof maxs) >= 0 && maxs[0] &&
            ntfs_parse_u64(maxs, 1000000, &max) < 0)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'max' must be a number");
        struct ntfs_session_info si;
        int r = ntfs_session_get(D.st, name, &si);
        if (r < 0)
                return ntfs_http_error(resp, r, "session '%s': %s", name, ntfs_strerror(r));
        struct log_ctx lc = { .arr = json_array(), .tags = json_object() };
        r = ntfs_tag_list(D.st, name, log_tag_cb, lc.tags);
        if (r == 0)
                r = ntfs_history(D.st, name, (size_t)max, log_cb, &lc);
        json_decref(lc.tags);
        if (r < 0) {
                json_decref(lc.arr);
                return d_fail(resp, r, "log");
        }
        return d_reply(resp, 200, json_pack("{s:o}", "commits", lc.arr));
}

static int diff_cb(const struct ntfs_diff_entry *e, void *ud) {
        const char *kind = e->kind == NTFS_DIFF_ADDED      ? "added"
                           : e->kind == NTFS_DIFF_DELETED  ? "deleted"
                           : e->kind == NTFS_DIFF_MODIFIED ? "modified"
                           : e->kind == NTFS_DIFF_TYPE     ? "type"
                                                           : "mode";
        json_array_append_new(ud, json_pack("{s:s, s:s, s:i, s:i, s:I, s:I}", "path", e->path, "kind", kind,
                                            "old_mode", (int)e->old_mode, "new_mode", (int)e->new_mode, "old_size",
                                            (json_int_t)e->old_size, "new_size", (json_int_t)e->new_size));
        return 0;
}

static int path_cmp(const void *a, const void *b) {
        const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
        return strcmp(d_jstr(x, "path"), d_jstr(y, "path"));
}

static int h_diff(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const char *name = d_param(req, "name");
        char from[NTFS_NAME_MAX + 32], to[NTFS_NAME_MAX + 32];
        if (ntfs_http_request_query(req, "from", from, sizeof from) < 0 || !from[0])
                return ntfs_http_error(resp, -NTFS_EBADREQ, "query parameter 'from' is required");
        bool have_to = ntfs_http_request_query(req, "to", to, sizeof to) >= 0 && to[0];
        struct ntfs_session_info si;
        int r = ntfs_session_get(D.st, name, &si);
        if (r < 0)
                return ntfs_http_error(resp, r, "session '%s': %s", name, ntfs_strerror(r));
        if (!have_to)
                d_flush_session_mounts(name);
        json_t *arr = json_array();
        r = ntfs_diff(D.st, from, have_to ? to : NULL, have_to ? NULL : name, diff_cb, arr);
        if (r < 0) {
                json_decref(arr);
                return ntfs_http_error(resp, r, "diff failed: %s", ntfs_strerror(r));
        }
        size_t n = json_array_size(arr);
        json_t **items = calloc(n ? n : 1, sizeof *items);
        if (items) {
                for (size_t i = 0; i < n; i++)
                        items[i] = json_incref(json_array_get(arr, i));
                qsort(items, n, sizeof *items, path_cmp);
                json_array_clear(arr);
                for (size_t i = 0; i < n; i++)
                        json_array_append_new(arr, items[i]);
                free(items);
        }
        return d_reply(resp, 200, json_pack("{s:s, s:s, s:o}", "from", from, "to", have_to ? to : "working state",
                                          "changes", arr));
}

static int h_quota(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "bytes", "inodes", NULL };
        const char *name = d_param(req, "name");
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0)
                return r;
        char err[256];
        int64_t b = 0, i = 0;
        if (!req->json || ntfs_json_get_int(req->json, "bytes", false, &b, err, sizeof err) < 0 ||
            ntfs_json_get_int(req->json, "inodes", false, &i, err, sizeof err) < 0 || b < 0 || i < 0)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'bytes' and 'inodes' must be integers >= 0");
        r = ntfs_session_set_quota(D.st, name, (uint64_t)b, (uint64_t)i);
        if (r < 0)
                return ntfs_http_error(resp, r, "session '%s': %s", name, ntfs_strerror(r));
        return d_reply(resp, 200, json_pack("{s:s, s:I, s:I}", "name", name, "quota_bytes", (json_int_t)b,
                                          "quota_inodes", (json_int_t)i));
}

/* ---- gc, fsck --------------------------------------------------------------------- */

struct pins {
        ntfs_hash *h;
        size_t n, cap;
};

static int pin_cb(const char *commit, void *ud) {
        struct pins *p = ud;
        ntfs_hash h;
        if (!commit || ntfs_unhex(commit, h.b, NTFS_HASH_LEN) < 0)
                return 0;
        if (p->n == p->cap) {
                size_t nc = p->cap ? p->cap * 2 : 64;
                ntfs_hash *nh = realloc(p->h, nc * sizeof *nh);
                if (!nh)
                        return -ENOMEM;
                p->h = nh;
                p->cap = nc;
        }
        p->h[p->n++] = h;
        return 0;
}

static int h_gc(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        struct pins p = { 0 };
        /* every commit the journal references is a root */
        int r = ntfs_journal_for_each_commit(D.j, pin_cb, &p);
        struct ntfs_gc_stats gs = { 0 };
        if (r >= 0)
                r = ntfs_gc(D.st, p.h, p.n, &gs);
        free(p.h);
        if (r < 0)
                return d_fail(resp, r, "gc");
        return d_reply(resp, 200, json_pack("{s:I, s:I, s:I, s:I}", "objects_before", (json_int_t)gs.objects_before,
                                          "objects_freed", (json_int_t)gs.objects_freed, "bytes_freed",
                                          (json_int_t)gs.bytes_freed, "states_freed", (json_int_t)gs.states_freed));
}

static void fsck_cb(const char *problem, void *ud) { json_array_append_new(ud, json_string(problem)); }

static int h_fsck(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        json_t *problems = json_array();
        struct ntfs_fsck_stats fs = { 0 };
        int r = ntfs_fsck(D.st, fsck_cb, problems, &fs);
        if (r < 0 && r != -NTFS_ECORRUPT) {
                json_decref(problems);
                return d_fail(resp, r, "fsck");
        }
        json_t *o = json_pack("{s:b, s:I, s:I, s:o}", "ok", r == 0, "objects_checked", (json_int_t)fs.objects_checked,
                              "commits", (json_int_t)fs.commits, "problems", problems);
        if (r < 0) {
                json_object_set_new(o, "error", json_pack("{s:s, s:s}", "code", ntfs_errcode(r), "message",
                                                          "the store has corrupt or missing objects"));
                return d_reply(resp, 500, o);
        }
        return d_reply(resp, 200, o);
}

/* ---- compact ---------------------------------------------------------------------- */

/* The compaction running, for GET /v1/compact/progress/{id}: the copy's
 * size as LMDB writes it, against the live bytes. One at a time (the store
 * lock serializes them anyway). */
static struct {
        pthread_mutex_t mu;
        bool running;
        char id[72];
        char path[PATH_MAX];
        uint64_t total;
        int64_t t0;
} compact_state = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void compact_started(const char *copy_path, uint64_t total, void *ud) {
        pthread_mutex_lock(&compact_state.mu);
        snprintf(compact_state.path, sizeof compact_state.path, "%s", copy_path);
        compact_state.total = total;
        pthread_mutex_unlock(&compact_state.mu);
}

/* A mount taken down for a compaction, to be made again after it. */
struct remount {
        char *mp, *session, *at;
        bool ro, relatime;
        double idle, maxi;
};

/* --remount: the clients' mounts (none internal: a running command's is
 * left, and the compaction then refused) are unmounted; returns how many. */
static size_t remount_take(struct remount *rm, size_t max) {
        size_t n = 0;
        pthread_mutex_lock(&D.lock);
        for (struct dmount *m = D.mounts; m && n < max; m = m->next)
                if (!m->internal && !atomic_load(&m->exited)) {
                        rm[n] = (struct remount){ .mp = strdup(m->mountpoint),
                                                  .session = m->session ? strdup(m->session) : NULL,
                                                  .at = m->at ? strdup(m->at) : NULL, .ro = m->ro,
                                                  .relatime = m->relatime, .idle = m->auto_idle,
                                                  .maxi = m->auto_max };
                        if (rm[n].mp && (rm[n].session || rm[n].at))
                                n++;
                        else {
                                free(rm[n].mp);
                                free(rm[n].session);
                                free(rm[n].at);
                        }
                }
        pthread_mutex_unlock(&D.lock);
        for (size_t i = 0; i < n; i++) {
                struct dmount *m = d_mount_take(rm[i].mp);
                int r = m ? d_mount_stop(m) : 0;
                if (r < 0)
                        log_warn("compact: unmount %s: %s", rm[i].mp, ntfs_strerror(r));
        }
        return n;
}

/* Mounts again what remount_take() unmounted; the failures are listed. */
static json_t *remount_give(struct remount *rm, size_t n) {
        json_t *failed = json_array();
        for (size_t i = 0; i < n; i++) {
                int r = d_mount_add(rm[i].session ? rm[i].session : rm[i].at, rm[i].at, rm[i].mp, rm[i].ro, false,
                                    rm[i].idle, rm[i].maxi, rm[i].relatime, NULL);
                if (r < 0) {
                        log_warn("compact: cannot mount %s again: %s", rm[i].mp, ntfs_strerror(r));
                        json_array_append_new(failed, json_pack("{s:s, s:s}", "mountpoint", rm[i].mp, "error",
                                                                ntfs_strerror(r)));
                }
                free(rm[i].mp);
                free(rm[i].session);
                free(rm[i].at);
        }
        return failed;
}

#define REMOUNT_MAX 256

static int h_compact(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "progress", "remount", NULL };
        const char *pid = NULL;
        int r = d_check_keys(req, resp, keys);
        if (r < 0 || (r = d_want_string(req, resp, "progress", false, &pid)) < 0)
                return r;
        if (pid && !d_op_id_valid(pid))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'progress' must be 1..64 of [A-Za-z0-9_-]");
        json_t *rmv = req->json ? json_object_get(req->json, "remount") : NULL;
        if (rmv && !json_is_boolean(rmv))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'remount' must be true or false");
        pthread_mutex_lock(&compact_state.mu);
        if (compact_state.running) {
                pthread_mutex_unlock(&compact_state.mu);
                return ntfs_http_error_code(resp, 409, "busy", "a compaction is running");
        }
        compact_state.running = true;
        snprintf(compact_state.id, sizeof compact_state.id, "%s", pid ? pid : "");
        compact_state.path[0] = 0;
        compact_state.total = 0;
        compact_state.t0 = ntfs_mono_ns();
        pthread_mutex_unlock(&compact_state.mu);
        struct remount *rm = json_is_true(rmv) ? calloc(REMOUNT_MAX, sizeof *rm) : NULL;
        size_t nrm = rm ? remount_take(rm, REMOUNT_MAX) : 0;
        struct ntfs_compact_result cr;
        int64_t t0 = ntfs_mono_ns();
        r = json_is_true(rmv) && !rm ? -ENOMEM : ntfs_store_compact(D.st, compact_started, NULL, &cr);
        double secs = (double)(ntfs_mono_ns() - t0) / 1e9;
        json_t *failed = rm ? remount_give(rm, nrm) : NULL;
        bool remounted = rm != NULL;
        free(rm);
        pthread_mutex_lock(&compact_state.mu);
        compact_state.running = false;
        pthread_mutex_unlock(&compact_state.mu);
        if (r == -EBUSY) {
                json_decref(failed);
                return ntfs_http_error_code(resp, 409, "busy",
                                            json_is_true(rmv)
                                                    ? "a command is running in the store (its internal mount is "
                                                      "open); run compact again when it has ended"
                                                    : "the store has mounts or views open; compaction needs none: "
                                                      "unmount them (ntfs-ctl mounts, ntfs-ctl umount) or use "
                                                      "ntfs-ctl compact --remount");
        }
        if (r < 0) {
                json_decref(failed);
                return d_fail(resp, r, "compact");
        }
        log_info("compact: data.mdb %" PRIu64 " -> %" PRIu64 " bytes on disk in %.1fs", cr.disk_before,
                 cr.disk_after, secs);
        json_t *o = json_pack("{s:I, s:I, s:I, s:I, s:I, s:f}", "file_bytes_before", (json_int_t)cr.file_before,
                              "file_bytes_after", (json_int_t)cr.file_after, "disk_bytes_before",
                              (json_int_t)cr.disk_before, "disk_bytes_after", (json_int_t)cr.disk_after,
                              "freed_bytes",
                              (json_int_t)(cr.disk_before > cr.disk_after ? cr.disk_before - cr.disk_after : 0),
                              "seconds", secs);
        if (o && remounted) {
                json_object_set_new(o, "remounted", json_integer((json_int_t)(nrm - json_array_size(failed))));
                json_object_set_new(o, "remount_failed", failed);
                failed = NULL;
        }
        json_decref(failed);
        return d_reply(resp, 200, o);
}

static int h_compact_progress(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const char *id = d_param(req, "id");
        pthread_mutex_lock(&compact_state.mu);
        bool found = compact_state.running && id && compact_state.id[0] && strcmp(id, compact_state.id) == 0;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s", compact_state.path);
        uint64_t total = compact_state.total;
        double elapsed = (double)(ntfs_mono_ns() - compact_state.t0) / 1e9;
        pthread_mutex_unlock(&compact_state.mu);
        if (!found)
                return ntfs_http_error(resp, -NTFS_ENOTFOUND, "no compaction running with progress id '%.80s'",
                                       id ? id : "");
        struct stat sb;
        uint64_t bytes = path[0] && stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
        return d_reply(resp, 200, json_pack("{s:s, s:I, s:I, s:f}", "op", "compact", "bytes", (json_int_t)bytes,
                                          "total_bytes", (json_int_t)total, "elapsed", elapsed));
}

int routes_store_register(ntfs_router *rt) {
        static const struct ntfs_route routes[] = {
                { "GET /v1/status", h_status, 0 },
                { "GET /health", h_health, 0 },
                { "POST /v1/sessions", h_session_new, 0 },
                { "GET /v1/sessions", h_session_ls, 0 },
                { "GET /v1/sessions/{name}", h_session_get, 0 },
                { "DELETE /v1/sessions/{name}", h_session_end, 0 },
                { "POST /v1/sessions/{name}/checkpoint", h_checkpoint, 0 },
                { "POST /v1/sessions/{name}/fork", h_fork, 0 },
                { "POST /v1/sessions/{name}/tags", h_tag, 0 },
                { "GET /v1/tags", h_tags, 0 },
                { "POST /v1/sessions/{name}/rollback", h_rollback, 0 },
                { "GET /v1/sessions/{name}/log", h_log, 0 },
                { "GET /v1/sessions/{name}/diff", h_diff, 0 },
                { "PUT /v1/sessions/{name}/quota", h_quota, 0 },
                { "POST /v1/mounts", h_mount, 0 },
                { "GET /v1/mounts", h_mounts, 0 },
                { "POST /v1/mounts/unmount", h_unmount, 0 },
                { "POST /v1/gc", h_gc, 0 },
                { "POST /v1/fsck", h_fsck, 0 },
                { "POST /v1/compact", h_compact, 0 },
                { "GET /v1/compact/progress/{id}", h_compact_progress, 0 },
        };
        return ntfs_router_add_table(rt, routes, ARRAY_SIZE(routes));
}
