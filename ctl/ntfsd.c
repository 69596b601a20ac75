/* SPDX-License-Identifier: MIT
 * ntfsd — the one daemon per store: the store, its FUSE mounts, the
 * journal, the policy engine, the jail and the control socket.
 *
 * Threads: the HTTP server's connection threads run the handlers; the
 * auto-checkpoint thread polls mounts; the main thread waits for SIGTERM
 * or SIGINT, then stops the server, unmounts every mount, closes the
 * journal and flushes the store.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "ctl/http.h"
#include "ctl/jsonutil.h"
#include "ctl/router.h"
#include "exec/jail.h"
#include "fs/mount.h"
#include "fs/store.h"
#include "journal/journal.h"
#include "policy/gateway.h"
#include "policy/policy.h"
#include "common/banned.h"

#define NTFSD_VERSION "0.1.0"

struct dmount {
        char *mountpoint;
        char *session; /* NULL for a read-only view */
        char *at;      /* the ref of a view */
        bool ro, internal;
        ntfs_ws *ws;
        ntfs_mount *m;
        double auto_idle, auto_max;
        uint64_t last_changes;
        int64_t last_change_ns, last_ckpt_ns;
        bool pending_changes;
        struct dmount *next;
};

struct shell_state {
        char *session;
        char *state;
        struct shell_state *next;
};

struct daemon {
        ntfs_store *st;
        ntfs_journal *j;
        ntfs_policy *pol;
        ntfs_gateway *gw;
        char *store_dir, *socket_path, *jail_bin;
        pthread_mutex_t lock; /* mounts, shell states */
        struct dmount *mounts;
        struct shell_state *shells;
        pthread_t auto_thread;
        bool stopping;
        ntfs_router *router;
        ntfs_http_server *srv;
        struct ntfs_jail_caps caps;
};

static struct daemon D;

/* ---- helpers ------------------------------------------------------------------ */

static json_t *commit_json(const ntfs_hash *h, const char *key) {
        char hex[NTFS_HEX_LEN + 1], sid[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(h, hex);
        if (ntfs_short_id(D.st, h, sid) < 0)
                snprintf(sid, sizeof sid, "%.12s", hex);
        return json_pack("{s:s, s:s}", key, hex, "short", sid);
}

static int fail(ntfs_http_response *resp, int err, const char *what) {
        return ntfs_http_error(resp, err, "%s: %s", what, ntfs_strerror(err));
}

static const char *param(const ntfs_http_request *req, const char *name) {
        return ntfs_http_request_param(req, name);
}

static int reply(ntfs_http_response *resp, int status, json_t *body) {
        if (!body)
                return ntfs_http_error(resp, -ENOMEM, "out of memory");
        return ntfs_http_respond_json(resp, status, body);
}

static const char *jstr(const json_t *o, const char *k) {
        const json_t *v = o ? json_object_get(o, k) : NULL;
        return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Rejects unknown fields and wrong types; returns 0 or answers 400. */
static int check_keys(const ntfs_http_request *req, ntfs_http_response *resp, const char *const *allowed) {
        if (!req->json)
                return 0;
        char err[256];
        int r = ntfs_json_check_keys(req->json, allowed, err, sizeof err);
        if (r < 0)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "%s", err);
        return 0;
}

static int want_string(const ntfs_http_request *req, ntfs_http_response *resp, const char *key, bool required,
                       const char **ret) {
        char err[256];
        *ret = NULL;
        if (!req->json) {
                if (required)
                        return ntfs_http_error(resp, -NTFS_EBADREQ, "missing body with field '%s'", key);
                return 0;
        }
        int r = ntfs_json_get_str(req->json, key, required, ret, err, sizeof err);
        if (r < 0)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "%s", err);
        return 0;
}

/* ---- status, sessions ------------------------------------------------------------ */

static int session_info_json(const struct ntfs_session_info *si, json_t **ret) {
        json_t *o = commit_json(&si->head, "head");
        if (!o)
                return -ENOMEM;
        char floor[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(&si->floor, floor);
        json_object_set_new(o, "name", json_string(si->name));
        json_object_set_new(o, "floor", json_string(floor));
        json_object_set_new(o, "dirty", json_boolean(si->dirty));
        json_object_set_new(o, "bytes", json_integer((json_int_t)si->bytes));
        json_object_set_new(o, "inodes", json_integer((json_int_t)si->inodes));
        json_object_set_new(o, "quota_bytes", json_integer((json_int_t)si->quota_bytes));
        json_object_set_new(o, "quota_inodes", json_integer((json_int_t)si->quota_inodes));
        json_object_set_new(o, "created", json_integer(si->created_ns));
        json_object_set_new(o, "mounts", json_integer(si->mounts));
        *ret = o;
        return 0;
}

static json_t *mounts_json(void) {
        json_t *arr = json_array();
        pthread_mutex_lock(&D.lock);
        for (struct dmount *m = D.mounts; m; m = m->next)
                json_array_append_new(arr, json_pack("{s:s, s:s?, s:b, s:s?, s:f, s:b}", "mountpoint", m->mountpoint,
                                                     "session", m->session, "ro", m->ro, "at", m->at,
                                                     "autocheckpoint", m->auto_idle, "internal", m->internal));
        pthread_mutex_unlock(&D.lock);
        return arr;
}

static int h_status(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        struct ntfs_store_stats ss;
        int r = ntfs_store_stats(D.st, &ss);
        if (r < 0)
                return fail(resp, r, "status");
        json_t *o = json_pack("{s:s, s:s, s:i, s:I, s:I, s:I, s:I, s:o, s:{s:i, s:b, s:b, s:b, s:b}}", "version",
                              NTFSD_VERSION, "store", D.store_dir, "pid", (int)getpid(), "sessions",
                              (json_int_t)ss.sessions, "tags", (json_int_t)ss.tags, "objects",
                              (json_int_t)ss.objects, "used_bytes", (json_int_t)ss.used_bytes, "mounts",
                              mounts_json(), "jail", "cgroup_version", D.caps.cgroup_version, "memory",
                              D.caps.cgroup_memory, "pids", D.caps.cgroup_pids, "cpu", D.caps.cgroup_cpu,
                              "seccomp", D.caps.seccomp);
        return reply(resp, 200, o);
}

static int h_health(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const char *cur = req->conn_data && *req->conn_data ? *req->conn_data : NULL;
        return reply(resp, 200, json_pack("{s:s, s:s?, s:b}", "status", "ok", "session", cur, "replay", 0));
}

static int h_session_new(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "name", "from", NULL };
        const char *name, *from;
        int r;
        if ((r = check_keys(req, resp, keys)) < 0 || (r = want_string(req, resp, "name", true, &name)) < 0 ||
            (r = want_string(req, resp, "from", false, &from)) < 0)
                return r;
        ntfs_hash h;
        r = ntfs_session_create(D.st, name, from, &h);
        if (r < 0)
                return ntfs_http_error(resp, r, "cannot create session '%s': %s", name, ntfs_strerror(r));
        int jr = ntfs_journal_session_create(D.j, name, (int64_t)req->peer.uid, NULL);
        if (jr < 0 && jr != -EEXIST && jr != -NTFS_ESESSEXISTS)
                log_warn("journal: session %s: %s", name, ntfs_strerror(jr));
        log_info("session %s created by uid %u", name, (unsigned)req->peer.uid);
        json_t *o = commit_json(&h, "head");
        json_object_set_new(o, "name", json_string(name));
        return reply(resp, 201, o);
}

static int list_cb(const struct ntfs_session_info *si, void *ud) {
        json_t *o;
        if (session_info_json(si, &o) == 0)
                json_array_append_new(ud, o);
        return 0;
}

static int h_session_ls(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        json_t *arr = json_array();
        int r = ntfs_session_list(D.st, list_cb, arr);
        if (r < 0) {
                json_decref(arr);
                return fail(resp, r, "list");
        }
        return reply(resp, 200, json_pack("{s:o}", "sessions", arr));
}

static int h_session_get(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        struct ntfs_session_info si;
        const char *name = param(req, "name");
        int r = ntfs_session_get(D.st, name, &si);
        if (r < 0)
                return ntfs_http_error(resp, r, "session '%s': %s", name, ntfs_strerror(r));
        json_t *o;
        if ((r = session_info_json(&si, &o)) < 0)
                return fail(resp, r, "session");
        return reply(resp, 200, o);
}

/* ---- mounts ------------------------------------------------------------------------ */

static void dmount_free(struct dmount *m) {
        if (!m)
                return;
        free(m->mountpoint);
        free(m->session);
        free(m->at);
        free(m);
}

/* Stops and frees m; m must already be unlinked from D.mounts. */
static int dmount_stop(struct dmount *m) {
        int r = ntfs_mount_stop(m->m);
        ntfs_ws_close(m->ws);
        if (m->internal)
                rmdir(m->mountpoint);
        dmount_free(m);
        return r;
}

static int mount_add(const char *session, const char *at, const char *mp, bool ro, bool internal, double idle,
                     double maxi, struct dmount **ret) {
        _cleanup_free_ struct dmount *m = calloc(1, sizeof *m);
        if (!m)
                return -ENOMEM;
        char *real = realpath(mp, NULL);
        if (!real)
                return -errno;
        m->mountpoint = real;
        pthread_mutex_lock(&D.lock);
        for (struct dmount *o = D.mounts; o; o = o->next)
                if (strcmp(o->mountpoint, real) == 0) {
                        pthread_mutex_unlock(&D.lock);
                        free(real);
                        return -NTFS_EMOUNTED;
                }
        pthread_mutex_unlock(&D.lock);
        int r;
        if (at || (ro && !session))
                r = ntfs_ws_open_view(D.st, at ? at : session, &m->ws);
        else
                r = ntfs_ws_open(D.st, session, &m->ws);
        if (r < 0) {
                free(real);
                return r;
        }
        struct ntfs_mount_opts o;
        ntfs_mount_opts_init(&o);
        o.mountpoint = real;
        o.read_only = ro || at;
        r = ntfs_mount_start(m->ws, &o, &m->m);
        if (r < 0) {
                ntfs_ws_close(m->ws);
                free(real);
                return r;
        }
        m->session = session && !at ? strdup(session) : NULL;
        m->at = at ? strdup(at) : NULL;
        m->ro = o.read_only;
        m->internal = internal;
        m->auto_idle = idle;
        m->auto_max = maxi;
        m->last_change_ns = m->last_ckpt_ns = ntfs_mono_ns();
        pthread_mutex_lock(&D.lock);
        m->next = D.mounts;
        D.mounts = m;
        pthread_mutex_unlock(&D.lock);
        log_info("mounted %s%s%s at %s%s", session ? session : "", at ? "@" : "", at ? at : "", real,
                 m->ro ? " (read-only)" : "");
        if (ret)
                *ret = m;
        TAKE_PTR(m);
        return 0;
}

static int h_mount(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "session", "mountpoint", "ro", "at", "autocheckpoint",
                                            "autocheckpoint_max", NULL };
        const char *session, *mp, *at;
        int r;
        if ((r = check_keys(req, resp, keys)) < 0 || (r = want_string(req, resp, "session", true, &session)) < 0 ||
            (r = want_string(req, resp, "mountpoint", true, &mp)) < 0 ||
            (r = want_string(req, resp, "at", false, &at)) < 0)
                return r;
        bool ro = json_is_true(json_object_get(req->json, "ro"));
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
        struct dmount *m;
        r = mount_add(session, at, mp, ro, false, idle, maxi, &m);
        if (r < 0)
                return ntfs_http_error(resp, r, "cannot mount %s: %s", mp, ntfs_strerror(r));
        return reply(resp, 201, json_pack("{s:s, s:s, s:b, s:s?}", "mountpoint", m->mountpoint, "session", session,
                                          "ro", m->ro, "at", at));
}

static int h_mounts(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        return reply(resp, 200, json_pack("{s:o}", "mounts", mounts_json()));
}

static struct dmount *mount_take(const char *mp) {
        char *real = realpath(mp, NULL);
        const char *key = real ? real : mp;
        struct dmount *found = NULL;
        pthread_mutex_lock(&D.lock);
        for (struct dmount **p = &D.mounts; *p; p = &(*p)->next)
                if (strcmp((*p)->mountpoint, key) == 0) {
                        found = *p;
                        *p = found->next;
                        break;
                }
        pthread_mutex_unlock(&D.lock);
        free(real);
        return found;
}

static int h_unmount(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "mountpoint", NULL };
        const char *mp;
        int r;
        if ((r = check_keys(req, resp, keys)) < 0 || (r = want_string(req, resp, "mountpoint", true, &mp)) < 0)
                return r;
        struct dmount *m = mount_take(mp);
        if (!m)
                return ntfs_http_error(resp, -NTFS_ENOTFOUND, "nothing is mounted at %s", mp);
        char *path = strdup(m->mountpoint);
        r = dmount_stop(m);
        if (r < 0)
                log_warn("unmount %s: %s", path, ntfs_strerror(r));
        json_t *o = json_pack("{s:s, s:b}", "mountpoint", path ? path : mp, "unmounted", 1);
        free(path);
        return reply(resp, 200, o);
}

/* Unmounts every mount of a session (before it ends). */
static void unmount_session(const char *session) {
        for (;;) {
                struct dmount *found = NULL;
                pthread_mutex_lock(&D.lock);
                for (struct dmount **p = &D.mounts; *p; p = &(*p)->next)
                        if ((*p)->session && strcmp((*p)->session, session) == 0) {
                                found = *p;
                                *p = found->next;
                                break;
                        }
                pthread_mutex_unlock(&D.lock);
                if (!found)
                        return;
                dmount_stop(found);
        }
}

static int h_session_end(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const char *name = param(req, "name");
        struct ntfs_session_info si;
        int r = ntfs_session_get(D.st, name, &si);
        if (r < 0)
                return ntfs_http_error(resp, r, "session '%s': %s", name, ntfs_strerror(r));
        unmount_session(name);
        r = ntfs_session_end(D.st, name);
        if (r < 0)
                return ntfs_http_error(resp, r, "cannot end session '%s': %s", name, ntfs_strerror(r));
        (void)ntfs_journal_session_end(D.j, name);
        return reply(resp, 200, json_pack("{s:s, s:b}", "name", name, "ended", 1));
}

/* The path a session is mounted at for the jail: any read-write mount of
 * it, else an internal one under the store. Caller frees. */
static int session_mountpoint(const char *session, char **ret) {
        pthread_mutex_lock(&D.lock);
        for (struct dmount *m = D.mounts; m; m = m->next)
                if (m->session && !m->ro && strcmp(m->session, session) == 0) {
                        *ret = strdup(m->mountpoint);
                        pthread_mutex_unlock(&D.lock);
                        return *ret ? 0 : -ENOMEM;
                }
        pthread_mutex_unlock(&D.lock);
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s/mnt", D.store_dir);
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return -errno;
        if (snprintf(dir, sizeof dir, "%s/mnt/%s", D.store_dir, session) >= (int)sizeof dir)
                return -ENAMETOOLONG;
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                return -errno;
        struct dmount *m;
        int r = mount_add(session, NULL, dir, false, true, 0, 0, &m);
        if (r == -NTFS_EMOUNTED) /* raced with another request */
                r = 0;
        if (r < 0)
                return r;
        *ret = strdup(dir);
        return *ret ? 0 : -ENOMEM;
}

/* ---- checkpoint, fork, tag, rollback, log, diff ---------------------------------- */

/* Flushes the kernel's view of every mount of session before a checkpoint. */
static void flush_session_mounts(const char *session) {
        pthread_mutex_lock(&D.lock);
        for (struct dmount *m = D.mounts; m; m = m->next)
                if (m->session && strcmp(m->session, session) == 0)
                        (void)ntfs_mount_flush_kernel(m->m);
        pthread_mutex_unlock(&D.lock);
}

static int do_checkpoint(const char *name, const char *msg, const char *effect, ntfs_hash *h, bool *changed) {
        flush_session_mounts(name);
        return ntfs_checkpoint(D.st, name, msg, effect, h, changed);
}

static int h_checkpoint(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "message", NULL };
        const char *name = param(req, "name"), *msg;
        int r;
        if ((r = check_keys(req, resp, keys)) < 0 || (r = want_string(req, resp, "message", false, &msg)) < 0)
                return r;
        if (msg && strlen(msg) > 1000)
                return ntfs_http_error(resp, -NTFS_ETOOLARGE, "message longer than 1000 bytes");
        ntfs_hash h;
        bool changed;
        r = do_checkpoint(name, msg ? msg : "checkpoint", NULL, &h, &changed);
        if (r < 0)
                return ntfs_http_error(resp, r, "checkpoint of '%s' failed: %s", name, ntfs_strerror(r));
        json_t *o = commit_json(&h, "commit");
        json_object_set_new(o, "changed", json_boolean(changed));
        return reply(resp, 200, o);
}

static int h_fork(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "name", "at", NULL };
        const char *src = param(req, "name"), *newname, *at;
        int r;
        if ((r = check_keys(req, resp, keys)) < 0 || (r = want_string(req, resp, "name", true, &newname)) < 0 ||
            (r = want_string(req, resp, "at", false, &at)) < 0)
                return r;
        struct ntfs_session_info si;
        if ((r = ntfs_session_get(D.st, src, &si)) < 0)
                return ntfs_http_error(resp, r, "session '%s': %s", src, ntfs_strerror(r));
        if (!at)
                flush_session_mounts(src);
        ntfs_hash h;
        r = ntfs_fork(D.st, at ? at : src, newname, &h);
        if (r < 0)
                return ntfs_http_error(resp, r, "cannot fork '%s': %s", src, ntfs_strerror(r));
        (void)ntfs_journal_session_create(D.j, newname, (int64_t)req->peer.uid, NULL);
        json_t *o = commit_json(&h, "head");
        json_object_set_new(o, "name", json_string(newname));
        return reply(resp, 201, o);
}

static int h_tag(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "tag", "at", "scope", NULL };
        const char *name = param(req, "name"), *tag, *at, *scope;
        int r;
        if ((r = check_keys(req, resp, keys)) < 0 || (r = want_string(req, resp, "tag", true, &tag)) < 0 ||
            (r = want_string(req, resp, "at", false, &at)) < 0 ||
            (r = want_string(req, resp, "scope", false, &scope)) < 0)
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
        json_t *o = commit_json(&h, "commit");
        json_object_set_new(o, "tag", json_string(tag));
        json_object_set_new(o, "scope", json_string(sc == NTFS_TAG_STORE ? "store" : "session"));
        return reply(resp, 201, o);
}

static int tag_cb(const struct ntfs_tag_info *t, void *ud) {
        json_t *o = commit_json(&t->commit, "commit");
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
                return fail(resp, r, "tags");
        }
        return reply(resp, 200, json_pack("{s:o}", "tags", arr));
}

static int h_rollback(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "to", "steps", NULL };
        const char *name = param(req, "name"), *to;
        int r;
        if ((r = check_keys(req, resp, keys)) < 0 || (r = want_string(req, resp, "to", false, &to)) < 0)
                return r;
        json_t *sj = req->json ? json_object_get(req->json, "steps") : NULL;
        if (sj && !json_is_integer(sj))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "field 'steps' must be an integer");
        if ((to != NULL) == (sj != NULL))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "give exactly one of 'to' and 'steps'");
        json_int_t steps = sj ? json_integer_value(sj) : 0;
        if (steps < 0 || steps > 1000000)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'steps' must be between 0 and 1000000");
        flush_session_mounts(name);
        ntfs_hash h;
        r = ntfs_rollback(D.st, name, to, (int)steps, &h);
        if (r < 0)
                return ntfs_http_error(resp, r, "cannot roll back '%s': %s", name, ntfs_strerror(r));
        log_info("session %s rolled back", name);
        return reply(resp, 200, commit_json(&h, "head"));
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
        json_t *o = commit_json(&c->id, "commit");
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
        const char *name = param(req, "name");
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
                return fail(resp, r, "log");
        }
        return reply(resp, 200, json_pack("{s:o}", "commits", lc.arr));
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
        return strcmp(jstr(x, "path"), jstr(y, "path"));
}

static int h_diff(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const char *name = param(req, "name");
        char from[NTFS_NAME_MAX + 32], to[NTFS_NAME_MAX + 32];
        if (ntfs_http_request_query(req, "from", from, sizeof from) < 0 || !from[0])
                return ntfs_http_error(resp, -NTFS_EBADREQ, "query parameter 'from' is required");
        bool have_to = ntfs_http_request_query(req, "to", to, sizeof to) >= 0 && to[0];
        struct ntfs_session_info si;
        int r = ntfs_session_get(D.st, name, &si);
        if (r < 0)
                return ntfs_http_error(resp, r, "session '%s': %s", name, ntfs_strerror(r));
        if (!have_to)
                flush_session_mounts(name);
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
        return reply(resp, 200, json_pack("{s:s, s:s, s:o}", "from", from, "to", have_to ? to : "working state",
                                          "changes", arr));
}

static int h_quota(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "bytes", "inodes", NULL };
        const char *name = param(req, "name");
        int r;
        if ((r = check_keys(req, resp, keys)) < 0)
                return r;
        char err[256];
        int64_t b = 0, i = 0;
        if (!req->json || ntfs_json_get_int(req->json, "bytes", false, &b, err, sizeof err) < 0 ||
            ntfs_json_get_int(req->json, "inodes", false, &i, err, sizeof err) < 0 || b < 0 || i < 0)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'bytes' and 'inodes' must be integers >= 0");
        r = ntfs_session_set_quota(D.st, name, (uint64_t)b, (uint64_t)i);
        if (r < 0)
                return ntfs_http_error(resp, r, "session '%s': %s", name, ntfs_strerror(r));
        return reply(resp, 200, json_pack("{s:s, s:I, s:I}", "name", name, "quota_bytes", (json_int_t)b,
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
        int r = ntfs_journal_for_each_commit(D.j, pin_cb, &p);
        struct ntfs_gc_stats gs = { 0 };
        if (r == 0)
                r = ntfs_gc(D.st, p.h, p.n, &gs);
        free(p.h);
        if (r < 0)
                return fail(resp, r, "gc");
        return reply(resp, 200, json_pack("{s:I, s:I, s:I, s:I}", "objects_before", (json_int_t)gs.objects_before,
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
                return fail(resp, r, "fsck");
        }
        json_t *o = json_pack("{s:b, s:I, s:I, s:o}", "ok", r == 0, "objects_checked", (json_int_t)fs.objects_checked,
                              "commits", (json_int_t)fs.commits, "problems", problems);
        if (r < 0) {
                json_object_set_new(o, "error", json_pack("{s:s, s:s}", "code", ntfs_errcode(r), "message",
                                                          "the store has corrupt or missing objects"));
                return reply(resp, 500, o);
        }
        return reply(resp, 200, o);
}

/* ---- exec (jailed tools) ------------------------------------------------------------ */

static char *shell_state_get(const char *session) {
        char *s = NULL;
        pthread_mutex_lock(&D.lock);
        for (struct shell_state *p = D.shells; p; p = p->next)
                if (strcmp(p->session, session) == 0 && p->state)
                        s = strdup(p->state);
        pthread_mutex_unlock(&D.lock);
        return s;
}

static void shell_state_set(const char *session, const char *state) {
        if (!state)
                return;
        pthread_mutex_lock(&D.lock);
        struct shell_state *p;
        for (p = D.shells; p; p = p->next)
                if (strcmp(p->session, session) == 0)
                        break;
        if (!p && (p = calloc(1, sizeof *p))) {
                p->session = strdup(session);
                p->next = D.shells;
                D.shells = p;
        }
        if (p) {
                free(p->state);
                p->state = strdup(state);
        }
        pthread_mutex_unlock(&D.lock);
}

static const char *class_name(enum ntfs_effect_class c) {
        switch (c) {
        case NTFS_CLASS_NO_SIDE_EFFECTS:
                return "no_side_effects";
        case NTFS_CLASS_REPLAYABLE_FAST:
                return "replayable_fast";
        case NTFS_CLASS_REPLAYABLE_EXPENSIVE:
                return "replayable_expensive";
        case NTFS_CLASS_IRREVERSIBLE:
                return "irreversible";
        default:
                return "recorded";
        }
}

/* Runs one jailed tool call, journaled; *ret is the result object. */
static int run_tool(const char *session, const char *tool, const char *command, const char *key, double timeout_s,
                    json_t **ret, char *why, size_t whylen) {
        const struct ntfs_tool_spec *spec = ntfs_policy_tool(D.pol, tool);
        if (!spec || spec->kind != NTFS_TOOL_KIND_EXEC) {
                snprintf(why, whylen, "unknown or non-shell tool '%s'", tool);
                return -NTFS_ENOTFOUND;
        }
        struct ntfs_quota_usage usage = { 0 };
        int r = ntfs_policy_check_call(D.pol, NULL, tool, &usage, why, whylen);
        if (r < 0)
                return r;
        struct ntfs_session_info si;
        if ((r = ntfs_session_get(D.st, session, &si)) < 0) {
                snprintf(why, whylen, "session '%s': %s", session, ntfs_strerror(r));
                return r;
        }
        char before[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(&si.head, before);
        json_t *input = json_pack("{s:s}", "command", command);
        _cleanup_free_ char *input_s = json_dumps(input, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(input);
        struct ntfs_effect *list = NULL;
        size_t nprev = 0;
        if (ntfs_journal_effect_list(D.j, session, 0, 0, 0, &list, &nprev) == 0)
                ntfs_effects_free(list, nprev);
        struct ntfs_effect_intent in = { .session = session, .step = nprev + 1, .tool = tool,
                                         .effect_class = class_name(spec->cls), .input_json = input_s,
                                         .idempotency_key = key, .commit_before = before };
        struct ntfs_effect eff = { 0 };
        bool existing = false;
        r = ntfs_journal_effect_begin(D.j, &in, &eff, &existing);
        if (r < 0) {
                snprintf(why, whylen, "journal: %s", ntfs_strerror(r));
                return r;
        }
        if (existing) {
                json_t *res = eff.result_json ? json_loads(eff.result_json, 0, NULL) : NULL;
                if (!res)
                        res = json_pack("{s:s, s:s?}", "status", ntfs_effect_status_to_string(eff.status),
                                        "reason", eff.reason);
                json_object_set_new(res, "replayed", json_true());
                json_object_set_new(res, "effect", json_string(class_name(spec->cls)));
                json_object_set_new(res, "effect_id", json_integer(eff.id));
                ntfs_effect_release(&eff);
                *ret = res;
                return 0;
        }
        _cleanup_free_ char *mp = NULL;
        r = session_mountpoint(session, &mp);
        if (r < 0) {
                snprintf(why, whylen, "cannot mount the workspace: %s", ntfs_strerror(r));
                ntfs_journal_effect_finish(D.j, eff.id, NTFS_EFFECT_FAILED, NULL, NULL, why);
                ntfs_effect_release(&eff);
                return r;
        }
        _cleanup_free_ char *state = shell_state_get(session);
        struct ntfs_jail_spec js = { .jail_binary = D.jail_bin, .workspace = mp,
                                     .workspace_ro = !spec->workspace_rw,
                                     .net = spec->net == NTFS_NET_LOOPBACK ? NTFS_JAIL_NET_LOOPBACK
                                                                           : NTFS_JAIL_NET_NONE,
                                     .command = command, .state_in = state,
                                     .timeout_ms = timeout_s > 0 ? (uint64_t)(timeout_s * 1000) : spec->timeout_ms,
                                     .output_limit = (size_t)spec->output_limit };
        struct ntfs_jail_result jr = { 0 };
        r = ntfs_jail_run(&js, &jr);
        if (r < 0) {
                snprintf(why, whylen, "jail failed: %s", jr.reason ? jr.reason : ntfs_strerror(r));
                ntfs_journal_effect_finish(D.j, eff.id, NTFS_EFFECT_FAILED, NULL, NULL, why);
                ntfs_jail_result_release(&jr);
                ntfs_effect_release(&eff);
                return r;
        }
        shell_state_set(session, jr.state_out);
        json_t *res = json_pack("{s:i, s:s%, s:s%, s:b, s:b, s:I, s:b, s:b, s:s, s:s}", "exit_code", jr.exit_code,
                                "stdout", jr.out ? jr.out : "", jr.out_len, "stderr", jr.err ? jr.err : "",
                                jr.err_len, "stdout_truncated", jr.out_truncated, "stderr_truncated",
                                jr.err_truncated, "duration_ms", (json_int_t)(jr.duration_ns / 1000000),
                                "timed_out", jr.timed_out, "oom", jr.oom, "tool", tool, "effect",
                                class_name(spec->cls));
        if (!res) /* output not valid UTF-8: return it lossily as base64-free replacement */
                res = json_pack("{s:i, s:s, s:s, s:b, s:I, s:s, s:s}", "exit_code", jr.exit_code, "stdout",
                                "[binary output]", "stderr", "", "timed_out", jr.timed_out, "duration_ms",
                                (json_int_t)(jr.duration_ns / 1000000), "tool", tool, "effect",
                                class_name(spec->cls));
        char after[NTFS_HEX_LEN + 1] = "";
        if (spec->checkpoint_after) {
                ntfs_hash h;
                bool changed;
                char msg[300], effid[32];
                snprintf(msg, sizeof msg, "%s: %.200s", tool, command);
                snprintf(effid, sizeof effid, "%" PRId64, eff.id);
                int cr = do_checkpoint(session, msg, effid, &h, &changed);
                if (cr == 0) {
                        ntfs_hash_hex(&h, after);
                        json_t *c = commit_json(&h, "checkpoint");
                        json_object_update(res, c);
                        json_decref(c);
                        json_object_set_new(res, "changed", json_boolean(changed));
                } else
                        log_warn("checkpoint after %s failed: %s", tool, ntfs_strerror(cr));
        }
        json_object_set_new(res, "replayed", json_false());
        json_object_set_new(res, "effect_id", json_integer(eff.id));
        _cleanup_free_ char *res_s = json_dumps(res, JSON_COMPACT);
        bool ok = !jr.timed_out && jr.term_signal == 0;
        ntfs_journal_effect_finish(D.j, eff.id, ok ? NTFS_EFFECT_DONE : NTFS_EFFECT_FAILED, res_s,
                                   after[0] ? after : NULL,
                                   ok ? NULL : jr.timed_out ? "timeout" : jr.oom ? "oom" : "killed");
        ntfs_jail_result_release(&jr);
        ntfs_effect_release(&eff);
        *ret = res;
        return 0;
}

static int h_exec(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "command", "tool", "timeout", "idempotency_key", NULL };
        const char *name = param(req, "name"), *cmd, *tool, *key;
        int r;
        if ((r = check_keys(req, resp, keys)) < 0 || (r = want_string(req, resp, "command", true, &cmd)) < 0 ||
            (r = want_string(req, resp, "tool", false, &tool)) < 0 ||
            (r = want_string(req, resp, "idempotency_key", false, &key)) < 0)
                return r;
        json_t *t = json_object_get(req->json, "timeout");
        if (t && (!json_is_number(t) || json_number_value(t) <= 0 || json_number_value(t) > 86400))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'timeout' must be seconds in (0, 86400]");
        char why[512] = "";
        json_t *res;
        r = run_tool(name, tool ? tool : "bash_write", cmd, key, t ? json_number_value(t) : 0, &res, why,
                     sizeof why);
        if (r < 0)
                return ntfs_http_error(resp, r, "%s", why[0] ? why : ntfs_strerror(r));
        return reply(resp, 200, res);
}

static int h_effects(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const char *name = param(req, "name");
        char ls[32];
        uint64_t limit = 0;
        if (ntfs_http_request_query(req, "limit", ls, sizeof ls) >= 0 && ls[0] &&
            ntfs_parse_u64(ls, 1000000, &limit) < 0)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'limit' must be a number");
        json_t *arr;
        int r = ntfs_journal_effect_list_json(D.j, name, 0, (size_t)limit, 0, &arr);
        if (r < 0)
                return fail(resp, r, "effects");
        return reply(resp, 200, json_pack("{s:o}", "effects", arr));
}

/* ---- the seed's paths ------------------------------------------------------------------- */

static void conn_free(void *ud, void *data) { free(data); }

static int h_seed_start(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "resume_session_id", "fork_at", NULL };
        const char *resume, *fork_at;
        int r;
        if ((r = check_keys(req, resp, keys)) < 0 || (r = want_string(req, resp, "resume_session_id", false, &resume)) < 0 ||
            (r = want_string(req, resp, "fork_at", false, &fork_at)) < 0)
                return r;
        char name[64];
        bool replay = false;
        if (resume) {
                struct ntfs_session_info si;
                if ((r = ntfs_session_get(D.st, resume, &si)) < 0)
                        return ntfs_http_error(resp, r, "session '%s': %s", resume, ntfs_strerror(r));
                snprintf(name, sizeof name, "%.63s", resume);
                replay = true;
                if (fork_at) {
                        char fname[64];
                        snprintf(fname, sizeof fname, "s-%016" PRIx64, (uint64_t)ntfs_now_ns());
                        ntfs_hash h;
                        if ((r = ntfs_fork(D.st, fork_at, fname, &h)) < 0)
                                return ntfs_http_error(resp, r, "cannot fork at '%s': %s", fork_at,
                                                       ntfs_strerror(r));
                        snprintf(name, sizeof name, "%s", fname);
                }
        } else {
                snprintf(name, sizeof name, "s-%016" PRIx64, (uint64_t)ntfs_now_ns());
                if ((r = ntfs_session_create(D.st, name, fork_at, NULL)) < 0)
                        return ntfs_http_error(resp, r, "cannot create session: %s", ntfs_strerror(r));
                (void)ntfs_journal_session_create(D.j, name, (int64_t)req->peer.uid, NULL);
        }
        if (req->conn_data) {
                free(*req->conn_data);
                *req->conn_data = strdup(name);
        }
        json_t *msgs = json_array();
        struct ntfs_agent_state as = { 0 };
        if (replay && ntfs_journal_state_load(D.j, name, true, 0, &as) == 0) {
                json_t *m = as.messages_json ? json_loads(as.messages_json, 0, NULL) : NULL;
                if (json_is_array(m)) {
                        json_decref(msgs);
                        msgs = m;
                } else
                        json_decref(m);
                ntfs_agent_state_release(&as);
        }
        return reply(resp, 200, json_pack("{s:s, s:s, s:b, s:o}", "session_id", name, "sandbox_id", name,
                                          "replay_mode", replay, "restored_messages", msgs));
}

static const char *req_session(const ntfs_http_request *req) {
        const char *s = jstr(req->json, "session_id");
        if (s)
                return s;
        return req->conn_data && *req->conn_data ? *req->conn_data : NULL;
}

static int h_seed_end(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        const char *s = req_session(req);
        if (!s)
                return ntfs_http_error(resp, -NTFS_ENOSESSION, "no session: call /session/start first");
        (void)ntfs_journal_session_end(D.j, s);
        if (req->conn_data && *req->conn_data && strcmp(*req->conn_data, s) == 0) {
                free(*req->conn_data);
                *req->conn_data = NULL;
        }
        return reply(resp, 200, json_object());
}

static int h_seed_tool(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "tool_name", "tool_input", "tool_use_id", "session_id", NULL };
        const char *tool, *key;
        int r;
        if ((r = check_keys(req, resp, keys)) < 0 || (r = want_string(req, resp, "tool_name", true, &tool)) < 0 ||
            (r = want_string(req, resp, "tool_use_id", false, &key)) < 0)
                return r;
        const char *s = req_session(req);
        if (!s)
                return ntfs_http_error(resp, -NTFS_ENOSESSION, "no session: call /session/start first");
        json_t *input = json_object_get(req->json, "tool_input");
        if (!json_is_object(input))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'tool_input' must be an object");
        const char *cmd = jstr(input, "command");
        if (!cmd)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "tool_input.command (a string) is required for %s",
                                       tool);
        char why[512] = "";
        json_t *res;
        r = run_tool(s, tool, cmd, key, 0, &res, why, sizeof why);
        if (r < 0)
                return ntfs_http_error(resp, r, "%s", why[0] ? why : ntfs_strerror(r));
        json_t *replayed = json_object_get(res, "replayed");
        json_t *o = json_pack("{s:O, s:s, s:b}", "result", res, "effect", jstr(res, "effect"), "replayed",
                              json_is_true(replayed));
        json_decref(res);
        return reply(resp, 200, o);
}

/* ---- auto-checkpoint ----------------------------------------------------------------- */

static void *auto_main(void *arg) {
        for (;;) {
                struct timespec ts = { 0, 200 * 1000000L };
                nanosleep(&ts, NULL);
                pthread_mutex_lock(&D.lock);
                if (D.stopping) {
                        pthread_mutex_unlock(&D.lock);
                        return NULL;
                }
                char *due = NULL;
                int64_t now = ntfs_mono_ns();
                for (struct dmount *m = D.mounts; m && !due; m = m->next) {
                        if (!m->session || m->ro || (m->auto_idle <= 0 && m->auto_max <= 0))
                                continue;
                        uint64_t c = ntfs_ws_changes(m->ws);
                        if (c != m->last_changes) {
                                m->last_changes = c;
                                m->last_change_ns = now;
                                if (!m->pending_changes)
                                        m->last_ckpt_ns = now; /* burst starts */
                                m->pending_changes = true;
                        }
                        if (!m->pending_changes)
                                continue;
                        bool idle = m->auto_idle > 0 && now - m->last_change_ns >= (int64_t)(m->auto_idle * 1e9);
                        bool maxed = m->auto_max > 0 && now - m->last_ckpt_ns >= (int64_t)(m->auto_max * 1e9);
                        if (idle || maxed) {
                                m->pending_changes = false;
                                m->last_ckpt_ns = now;
                                due = strdup(m->session);
                        }
                }
                pthread_mutex_unlock(&D.lock);
                if (due) {
                        ntfs_hash h;
                        bool changed;
                        int r = ntfs_checkpoint(D.st, due, "auto-checkpoint", NULL, &h, &changed);
                        if (r < 0)
                                log_warn("auto-checkpoint of %s failed: %s", due, ntfs_strerror(r));
                        else if (changed)
                                log_debug("auto-checkpoint of %s", due);
                        free(due);
                }
        }
}

/* ---- main ----------------------------------------------------------------------------- */

static void usage(FILE *f) {
        fprintf(f, "Usage: ntfsd [--store DIR] [--socket PATH] [-f|--foreground] [--log-level LEVEL]\n"
                   "             [--policy FILE] [--env-file FILE] [--jail PATH]\n"
                   "\n"
                   "The ntfs daemon: owns one store, serves its control socket and its mounts.\n"
                   "  --store DIR       store folder (default: $NTFS_STORE, else ./.store)\n"
                   "  --socket PATH     control socket (default: $NTFS_SOCKET, else STORE/ntfsd.sock)\n"
                   "  -f, --foreground  stay in the foreground (the only mode in this version)\n"
                   "  --log-level L     error, warn, info (default) or debug\n"
                   "  --policy FILE     policy file (docs/policy.md); default: the built-in registry\n"
                   "  --env-file FILE   .env-style file with ANTHROPIC_API_KEY etc. (gateway credentials)\n"
                   "  --jail PATH       the ntfs-jail helper (default: found next to ntfsd)\n"
                   "SIGTERM or SIGINT: unmount everything, flush the store, exit 0.\n");
}

static char *find_jail(const char *argv0) {
        const char *e = getenv("NTFS_JAIL");
        if (e)
                return strdup(e);
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n > 0) {
                self[n] = 0;
                char *slash = strrchr(self, '/');
                if (slash) {
                        *slash = 0;
                        const char *cands[] = { "ntfs-jail", "../exec/ntfs-jail" };
                        for (size_t i = 0; i < ARRAY_SIZE(cands); i++) {
                                char p[PATH_MAX + 32];
                                snprintf(p, sizeof p, "%s/%s", self, cands[i]);
                                if (access(p, X_OK) == 0)
                                        return realpath(p, NULL);
                        }
                }
        }
        return strdup("ntfs-jail");
}

#define ROUTE(pat, fn, flags)                                                                  \
        do {                                                                                   \
                int _r = ntfs_router_add(D.router, pat, fn, flags);                            \
                if (_r < 0) {                                                                  \
                        log_error("route %s: %s", pat, ntfs_strerror(_r));                     \
                        return 1;                                                              \
                }                                                                              \
        } while (0)

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "store", required_argument, NULL, 's' },    { "socket", required_argument, NULL, 'S' },
                { "foreground", no_argument, NULL, 'f' },     { "log-level", required_argument, NULL, 'l' },
                { "policy", required_argument, NULL, 'p' },   { "env-file", required_argument, NULL, 'e' },
                { "jail", required_argument, NULL, 'j' },     { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        const char *store = getenv("NTFS_STORE"), *sock = getenv("NTFS_SOCKET"), *policy = NULL, *envf = NULL,
                   *jail = NULL;
        int c;
        while ((c = getopt_long(argc, argv, "fh", opts, NULL)) != -1) {
                switch (c) {
                case 's':
                        store = optarg;
                        break;
                case 'S':
                        sock = optarg;
                        break;
                case 'f':
                        break;
                case 'l': {
                        enum ntfs_log_level lvl;
                        if (ntfs_log_parse_level(optarg, &lvl) < 0) {
                                fprintf(stderr, "ntfsd: unknown log level '%s'\n", optarg);
                                return 2;
                        }
                        ntfs_log_set_level(lvl);
                        break;
                }
                case 'p':
                        policy = optarg;
                        break;
                case 'e':
                        envf = optarg;
                        break;
                case 'j':
                        jail = optarg;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (optind < argc) {
                usage(stderr);
                return 2;
        }
        if (!store || !*store)
                store = ".store";

        /* Signals are handled by the main thread only. */
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &set, NULL);
        signal(SIGPIPE, SIG_IGN);

        int r = ntfs_store_open(store, NULL, &D.st);
        if (r < 0) {
                fprintf(stderr, "ntfsd: cannot open store %s: %s\n", store, ntfs_strerror(r));
                return 1;
        }
        D.store_dir = strdup(ntfs_store_dir(D.st));
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/journal.db", D.store_dir);
        if ((r = ntfs_journal_open(path, &D.j)) < 0) {
                fprintf(stderr, "ntfsd: cannot open journal %s: %s\n", path, ntfs_strerror(r));
                ntfs_store_close(D.st);
                return 1;
        }
        char why[512] = "";
        r = policy ? ntfs_policy_load(policy, &D.pol, why, sizeof why) : ntfs_policy_new_default(&D.pol);
        if (r < 0) {
                fprintf(stderr, "ntfsd: policy %s: %s\n", policy ? policy : "(default)", why[0] ? why : ntfs_strerror(r));
                return 1;
        }
        if ((r = ntfs_gateway_new(D.pol, envf, 0, &D.gw, why, sizeof why)) < 0) {
                fprintf(stderr, "ntfsd: gateway: %s\n", why[0] ? why : ntfs_strerror(r));
                return 1;
        }
        (void)ntfs_journal_set_secrets(D.j, ntfs_gateway_secrets(D.gw));
        D.jail_bin = jail ? strdup(jail) : find_jail(argv[0]);
        (void)ntfs_jail_probe(&D.caps);
        pthread_mutex_init(&D.lock, NULL);

        if (sock && *sock)
                D.socket_path = strdup(sock);
        else {
                snprintf(path, sizeof path, "%s/ntfsd.sock", D.store_dir);
                D.socket_path = strdup(path);
        }
        if ((r = ntfs_router_new(&D.router)) < 0)
                return 1;
        ROUTE("GET /v1/status", h_status, 0);
        ROUTE("GET /health", h_health, 0);
        ROUTE("POST /v1/sessions", h_session_new, 0);
        ROUTE("GET /v1/sessions", h_session_ls, 0);
        ROUTE("GET /v1/sessions/{name}", h_session_get, 0);
        ROUTE("DELETE /v1/sessions/{name}", h_session_end, 0);
        ROUTE("POST /v1/sessions/{name}/checkpoint", h_checkpoint, 0);
        ROUTE("POST /v1/sessions/{name}/fork", h_fork, 0);
        ROUTE("POST /v1/sessions/{name}/tags", h_tag, 0);
        ROUTE("GET /v1/tags", h_tags, 0);
        ROUTE("POST /v1/sessions/{name}/rollback", h_rollback, 0);
        ROUTE("GET /v1/sessions/{name}/log", h_log, 0);
        ROUTE("GET /v1/sessions/{name}/diff", h_diff, 0);
        ROUTE("PUT /v1/sessions/{name}/quota", h_quota, 0);
        ROUTE("POST /v1/sessions/{name}/exec", h_exec, 0);
        ROUTE("GET /v1/sessions/{name}/effects", h_effects, 0);
        ROUTE("POST /v1/mounts", h_mount, 0);
        ROUTE("GET /v1/mounts", h_mounts, 0);
        ROUTE("POST /v1/mounts/unmount", h_unmount, 0);
        ROUTE("POST /v1/gc", h_gc, 0);
        ROUTE("POST /v1/fsck", h_fsck, 0);
        ROUTE("POST /session/start", h_seed_start, 0);
        ROUTE("POST /session/end", h_seed_end, 0);
        ROUTE("POST /tool/execute", h_seed_tool, 0);

        struct ntfs_http_config cfg = { .socket_path = D.socket_path, .router = D.router,
                                        .conn_data_free = conn_free };
        if ((r = ntfs_http_server_new(&cfg, NULL, &D, &D.srv)) < 0 || (r = ntfs_http_server_start(D.srv)) < 0) {
                fprintf(stderr, "ntfsd: cannot serve %s: %s\n", D.socket_path, ntfs_strerror(r));
                return 1;
        }
        if (pthread_create(&D.auto_thread, NULL, auto_main, NULL) != 0) {
                fprintf(stderr, "ntfsd: cannot start the auto-checkpoint thread\n");
                return 1;
        }
        log_info("ntfsd %s: store %s, socket %s, jail %s", NTFSD_VERSION, D.store_dir, D.socket_path, D.jail_bin);

        int sig = 0;
        sigwait(&set, &sig);
        log_info("signal %d: shutting down", sig);

        ntfs_http_server_stop(D.srv);
        pthread_mutex_lock(&D.lock);
        D.stopping = true;
        pthread_mutex_unlock(&D.lock);
        pthread_join(D.auto_thread, NULL);
        for (;;) {
                pthread_mutex_lock(&D.lock);
                struct dmount *m = D.mounts;
                if (m)
                        D.mounts = m->next;
                pthread_mutex_unlock(&D.lock);
                if (!m)
                        break;
                dmount_stop(m);
        }
        ntfs_http_server_free(D.srv);
        ntfs_router_free(D.router);
        while (D.shells) {
                struct shell_state *s = D.shells;
                D.shells = s->next;
                free(s->session);
                free(s->state);
                free(s);
        }
        ntfs_gateway_free(D.gw);
        ntfs_policy_free(D.pol);
        ntfs_journal_close(D.j);
        ntfs_store_close(D.st);
        unlink(D.socket_path);
        free(D.socket_path);
        free(D.store_dir);
        free(D.jail_bin);
        pthread_mutex_destroy(&D.lock);
        log_info("stopped");
        return 0;
}
