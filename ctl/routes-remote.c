/* SPDX-License-Identifier: MIT
 * routes-remote.c — remotes (S3 buckets) and push/pull/clone (docs/remote.md).
 *
 *   POST   /v1/remotes                {name, url, access_key?, secret_key?, region?}
 *   GET    /v1/remotes
 *   DELETE /v1/remotes/{name}
 *   GET    /v1/remotes/{name}/tags?session=S
 *   POST   /v1/remotes/{name}/prune   {grace?, dry_run?}
 *   POST   /v1/sessions/{name}/push   {remote?, tags?, progress?}
 *   POST   /v1/sessions/{name}/pull   {remote?, merge?, progress?}
 *   POST   /v1/clone                  {remote, session, name, progress?}
 *   GET    /v1/transfers/{id}         counters of a running push/pull/clone
 *
 * Remotes live in STORE/remotes.json (mode 0600). Secret keys never leave
 * the daemon: no response carries them, and they are given to the journal
 * for redaction (with the gateway's secrets).
 */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "ctl/daemon.h"
#include "fs/sync/merge.h"
#include "fs/sync/remote.h"
#include "common/banned.h"

#define MAX_REMOTES 32

static pthread_mutex_t rlock = PTHREAD_MUTEX_INITIALIZER;
static struct ntfs_remote_cfg remotes[MAX_REMOTES];
static size_t nremotes;

static int cfg_path(char *out, size_t olen) {
        int n = snprintf(out, olen, "%s/remotes.json", D.store_dir);
        return n < 0 || (size_t)n >= olen ? -ENAMETOOLONG : 0;
}

/* Journal redaction: the gateway's secrets plus every remote's. Lock held.
 * A failure leaves the journal's previous list in force; the callers refuse
 * what would go unredacted (the daemon's start, a new remote). */
static int update_secrets(void) {
        const char *list[NTFS_JOURNAL_MAX_SECRETS + 1];
        size_t n = 0;
        const char *const *gs = D.gw ? ntfs_gateway_secrets(D.gw) : NULL;
        for (size_t i = 0; gs && gs[i]; i++) {
                if (n >= NTFS_JOURNAL_MAX_SECRETS)
                        return -E2BIG;
                list[n++] = gs[i];
        }
        for (size_t i = 0; i < nremotes; i++) {
                if (!remotes[i].secret_key[0])
                        continue;
                if (n >= NTFS_JOURNAL_MAX_SECRETS)
                        return -E2BIG;
                list[n++] = remotes[i].secret_key;
        }
        list[n] = NULL;
        int r = D.j ? ntfs_journal_set_secrets(D.j, list) : 0;
        if (r < 0)
                log_error("remote: the journal refused the secrets to redact (%s): each must be %d to %d bytes",
                          ntfs_strerror(r), NTFS_JOURNAL_SECRET_MIN, NTFS_JOURNAL_SECRET_MAX);
        return r;
}

static int save_locked(void) {
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < nremotes; i++)
                json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:s,s:s}", "name", remotes[i].name, "url",
                                                     remotes[i].url, "access_key", remotes[i].access_key,
                                                     "secret_key", remotes[i].secret_key, "region",
                                                     remotes[i].region));
        if (!arr)
                return -ENOMEM;
        _cleanup_free_ char *s = json_dumps(arr, JSON_COMPACT);
        json_decref(arr);
        if (!s)
                return -ENOMEM;
        char p[4096];
        int r = cfg_path(p, sizeof p);
        if (r == 0)
                r = ntfs_write_file_durable(p, s, strlen(s), 0600);
        explicit_bzero(s, strlen(s));
        return r;
}

static void copy_str(char *dst, size_t dl, const char *src) {
        snprintf(dst, dl, "%s", src ? src : "");
}

static int load(void) {
        char p[4096];
        int r = cfg_path(p, sizeof p);
        if (r < 0)
                return r;
        _cleanup_free_ char *s = NULL;
        size_t len = 0;
        r = ntfs_read_file(p, 1 << 20, &s, &len);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return r;
        json_t *arr = json_loadb(s, len, 0, NULL);
        explicit_bzero(s, len);
        if (!json_is_array(arr)) {
                json_decref(arr);
                return -NTFS_EBADFORMAT;
        }
        size_t i;
        json_t *o;
        json_array_foreach(arr, i, o) {
                if (nremotes >= MAX_REMOTES)
                        break;
                struct ntfs_remote_cfg *c = &remotes[nremotes];
                copy_str(c->name, sizeof c->name, d_jstr(o, "name"));
                copy_str(c->url, sizeof c->url, d_jstr(o, "url"));
                copy_str(c->access_key, sizeof c->access_key, d_jstr(o, "access_key"));
                copy_str(c->secret_key, sizeof c->secret_key, d_jstr(o, "secret_key"));
                copy_str(c->region, sizeof c->region, d_jstr(o, "region"));
                if (ntfs_name_valid(c->name))
                        nremotes++;
        }
        json_decref(arr);
        return 0;
}

static json_t *remote_json(const struct ntfs_remote_cfg *c) {
        return json_pack("{s:s,s:s,s:s,s:b}", "name", c->name, "url", c->url, "region",
                         c->region[0] ? c->region : "us-east-1", "credentials", c->access_key[0] != 0);
}

/* Copies the remote called name (NULL: the only one) into *ret. */
static int find(const char *name, struct ntfs_remote_cfg *ret) {
        int r = -NTFS_ENOTFOUND;
        pthread_mutex_lock(&rlock);
        for (size_t i = 0; i < nremotes; i++)
                if (name ? strcmp(remotes[i].name, name) == 0 : nremotes == 1) {
                        *ret = remotes[i];
                        r = 0;
                        break;
                }
        pthread_mutex_unlock(&rlock);
        return r;
}

/* ---- progress of running transfers (the client picks the id) ------------------------------ */

D_OPTABLE(ops, 32);

/* Reads the optional "progress" id of the body: 0 (*ret NULL when absent)
 * or the error answered. */
static int want_progress_id(const ntfs_http_request *req, ntfs_http_response *resp, const char **ret) {
        int r = d_want_string(req, resp, "progress", false, ret);
        if (r == 0 && *ret && !d_op_id_valid(*ret))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'progress' must be 1..64 of [A-Za-z0-9_-]");
        return r;
}

static json_t *render_progress(const void *prog) {
        struct ntfs_remote_progress p;
        ntfs_remote_progress_get(prog, &p);
        return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:b}", "bytes", (json_int_t)p.bytes, "total_bytes",
                         (json_int_t)p.total_bytes, "objects", (json_int_t)p.objects, "total_objects",
                         (json_int_t)p.total_objects, "packs", (json_int_t)p.packs, "total_packs",
                         (json_int_t)p.total_packs, "totals_final", p.totals_final != 0);
}

static int h_progress(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud;
        const char *id = d_param(req, "id");
        bool found;
        json_t *o = d_op_progress(&ops, id, &found);
        if (!found)
                return ntfs_http_error(resp, -NTFS_ENOTFOUND, "no running push, pull or clone with id '%.64s'", id);
        return d_reply(resp, 200, o);
}

/* ---- tags ---------------------------------------------------------------------------------- */

struct tagcollect {
        const char *session;
        const ntfs_hash *head;
        struct ntfs_remote_tag *v;
        size_t n, cap;
        int err;
};

/* The tags push --tags sends: session-scoped tags of the session, and
 * store-scoped tags whose commit is in the pushed history. */
static int tag_collect_cb(const struct ntfs_tag_info *t, void *ud) {
        struct tagcollect *tc = ud;
        if (t->scope == NTFS_TAG_SESSION && strcmp(t->session, tc->session) != 0)
                return 0;
        if (t->scope == NTFS_TAG_STORE) {
                int a = ntfs_remote_is_ancestor(D.st, &t->commit, tc->head);
                if (a < 0)
                        return tc->err = a;
                if (a == 0)
                        return 0;
        }
        if (tc->n == tc->cap) {
                size_t nc = tc->cap ? tc->cap * 2 : 16;
                struct ntfs_remote_tag *nv = realloc(tc->v, nc * sizeof *nv);
                if (!nv)
                        return tc->err = -ENOMEM;
                tc->v = nv, tc->cap = nc;
        }
        struct ntfs_remote_tag *o = &tc->v[tc->n++];
        *o = (struct ntfs_remote_tag){ .commit = t->commit, .store_scope = t->scope == NTFS_TAG_STORE };
        copy_str(o->name, sizeof o->name, t->name);
        return 0;
}

static json_t *tags_json(const struct ntfs_remote_tag *v, size_t n) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < n; i++) {
                char hx[NTFS_HEX_LEN + 1];
                ntfs_hash_hex(&v[i].commit, hx);
                json_array_append_new(a, json_pack("{s:s,s:s,s:s}", "name", v[i].name, "commit", hx, "scope",
                                                   v[i].store_scope ? "store" : "session"));
        }
        return a;
}

/* Can every remote tag be made here? A local tag of the same name on
 * another commit (or a session of that name) is an error naming it,
 * answered before anything changes. */
static int tags_check(ntfs_http_response *resp, const char *rname, const struct ntfs_remote_tag *v, size_t n) {
        for (size_t i = 0; i < n; i++) {
                struct ntfs_tag_info ti;
                int g = ntfs_tag_get(D.st, v[i].name, &ti);
                if (g == 0 && memcmp(ti.commit.b, v[i].commit.b, NTFS_HASH_LEN) != 0) {
                        char a[NTFS_HEX_LEN + 1], b[NTFS_HEX_LEN + 1];
                        ntfs_hash_hex(&ti.commit, a);
                        ntfs_hash_hex(&v[i].commit, b);
                        return ntfs_http_error(resp, -NTFS_ETAGEXISTS,
                                               "tag '%s' exists here at %.12s but remote '%s' has it at %.12s (tags "
                                               "never move): nothing was changed",
                                               v[i].name, a, rname, b);
                }
                if (g == -NTFS_ENOREF) {
                        struct ntfs_session_info si;
                        if (ntfs_session_get(D.st, v[i].name, &si) == 0)
                                return ntfs_http_error(resp, -NTFS_ETAGEXISTS,
                                                       "tag '%s' of remote '%s' has the name of a local session: "
                                                       "nothing was changed",
                                                       v[i].name, rname);
                } else if (g < 0) {
                        return d_fail(resp, g, v[i].name);
                }
        }
        return 0;
}

/* Makes the remote's tags here (after tags_check); those already here are kept. */
static int tags_apply(ntfs_http_response *resp, const char *session, const struct ntfs_remote_tag *v, size_t n) {
        for (size_t i = 0; i < n; i++) {
                struct ntfs_tag_info ti;
                if (ntfs_tag_get(D.st, v[i].name, &ti) == 0)
                        continue;
                char hx[NTFS_HEX_LEN + 1];
                ntfs_hash_hex(&v[i].commit, hx);
                int r = ntfs_tag_create(D.st, session, v[i].name, hx,
                                        v[i].store_scope ? NTFS_TAG_STORE : NTFS_TAG_SESSION, NULL);
                if (r < 0)
                        return d_fail(resp, r, v[i].name);
        }
        return 0;
}

static int h_tags(void *ud, const ntfs_http_request *req, ntfs_http_response *resp);

static int h_add(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud;
        static const char *const keys[] = { "name", "url", "access_key", "secret_key", "region", NULL };
        const char *name, *url, *ak = NULL, *sk = NULL, *region = NULL;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "name", true, &name)) < 0 ||
            (r = d_want_string(req, resp, "url", true, &url)) < 0 ||
            (r = d_want_string(req, resp, "access_key", false, &ak)) < 0 ||
            (r = d_want_string(req, resp, "secret_key", false, &sk)) < 0 ||
            (r = d_want_string(req, resp, "region", false, &region)) < 0)
                return r;
        if (!ntfs_name_valid(name))
                return ntfs_http_error(resp, -NTFS_EINVALNAME, "invalid remote name");
        char e[512], b[256], p[512];
        if (strlen(url) >= sizeof remotes[0].url || ntfs_remote_parse_url(url, e, sizeof e, b, sizeof b, p, sizeof p) < 0)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "bad remote URL (want http[s]://host[:port]/bucket[/prefix])");
        if ((ak && strlen(ak) >= sizeof remotes[0].access_key) || (sk && strlen(sk) >= sizeof remotes[0].secret_key) ||
            (region && strlen(region) >= sizeof remotes[0].region) || (!ak != !sk))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "give both access_key and secret_key (each < 256 bytes)");
        if (sk && strlen(sk) < 4)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "secret_key too short");
        pthread_mutex_lock(&rlock);
        size_t i;
        for (i = 0; i < nremotes; i++)
                if (strcmp(remotes[i].name, name) == 0)
                        break;
        if (i < nremotes || nremotes == MAX_REMOTES) {
                pthread_mutex_unlock(&rlock);
                return ntfs_http_error(resp, i < nremotes ? -NTFS_ECONFLICT : -NTFS_EQUOTA,
                                       i < nremotes ? "remote '%s' exists" : "too many remotes", name);
        }
        struct ntfs_remote_cfg *c = &remotes[nremotes++];
        *c = (struct ntfs_remote_cfg){ 0 };
        copy_str(c->name, sizeof c->name, name);
        copy_str(c->url, sizeof c->url, url);
        copy_str(c->access_key, sizeof c->access_key, ak);
        copy_str(c->secret_key, sizeof c->secret_key, sk);
        copy_str(c->region, sizeof c->region, region);
        r = update_secrets();
        if (r == 0 && (r = save_locked()) < 0)
                (void)update_secrets(); /* back to the list without it */
        if (r < 0) {
                nremotes--;
                explicit_bzero(c, sizeof *c);
        }
        json_t *o = r < 0 ? NULL : remote_json(c);
        pthread_mutex_unlock(&rlock);
        if (r < 0)
                return d_fail(resp, r, "saving remotes");
        return d_reply(resp, 201, o);
}

static int h_list(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud, (void)req;
        json_t *arr = json_array();
        pthread_mutex_lock(&rlock);
        for (size_t i = 0; arr && i < nremotes; i++)
                json_array_append_new(arr, remote_json(&remotes[i]));
        pthread_mutex_unlock(&rlock);
        return d_reply(resp, 200, arr ? json_pack("{s:o}", "remotes", arr) : NULL);
}

static int h_del(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud;
        const char *name = d_param(req, "name");
        pthread_mutex_lock(&rlock);
        size_t i;
        for (i = 0; i < nremotes; i++)
                if (strcmp(remotes[i].name, name) == 0)
                        break;
        int r = -NTFS_ENOTFOUND;
        if (i < nremotes) {
                struct ntfs_remote_cfg gone = remotes[i];
                memmove(&remotes[i], &remotes[i + 1], (nremotes - i - 1) * sizeof remotes[0]);
                nremotes--;
                r = save_locked();
                if (r < 0)
                        remotes[nremotes++] = gone; /* order changes; content kept */
                explicit_bzero(&gone, sizeof gone);
                if (update_secrets() < 0) /* the old list, a superset, stays in force */
                        log_warn("remote: the deleted remote's secret is still redacted");
        }
        pthread_mutex_unlock(&rlock);
        if (r == -NTFS_ENOTFOUND)
                return ntfs_http_error(resp, r, "no remote '%s'", name);
        if (r < 0)
                return d_fail(resp, r, "saving remotes");
        return d_reply(resp, 200, json_pack("{s:s}", "removed", name));
}

static json_t *stats_json(json_t *o, const struct ntfs_remote_stats *s) {
        if (o)
                json_object_set_new(o, "transfer",
                                    json_pack("{s:I,s:I,s:I,s:I,s:I}", "requests", (json_int_t)s->requests,
                                              "bytes_sent", (json_int_t)s->bytes_sent, "bytes_received",
                                              (json_int_t)s->bytes_received, "objects", (json_int_t)s->objects,
                                              "packs", (json_int_t)s->packs));
        return o;
}

static int pick_remote(const ntfs_http_request *req, ntfs_http_response *resp, const char *key,
                       struct ntfs_remote_cfg *cfg) {
        const char *rn = NULL;
        int r = d_want_string(req, resp, key, false, &rn);
        if (r < 0)
                return r;
        if (find(rn, cfg) < 0)
                return ntfs_http_error(resp, -NTFS_ENOTFOUND, rn ? "no remote '%s'" : "%s",
                                       rn ? rn : "name the remote (there is not exactly one)");
        return 0;
}

static int h_push(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud;
        static const char *const keys[] = { "remote", "tags", "progress", NULL };
        const char *name = d_param(req, "name"), *pid = NULL;
        struct ntfs_remote_cfg cfg;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = want_progress_id(req, resp, &pid)) < 0 ||
            (r = pick_remote(req, resp, "remote", &cfg)) < 0)
                return r;
        json_t *jt = json_object_get(req->json, "tags");
        if (jt && !json_is_boolean(jt))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'tags' must be a boolean");
        ntfs_hash head, old;
        bool changed;
        if ((r = d_checkpoint(name, "before push", NULL, &head, &changed)) < 0) {
                explicit_bzero(&cfg, sizeof cfg);
                return d_fail(resp, r, name);
        }
        struct tagcollect tc = { .session = name, .head = &head };
        if (jt && json_is_true(jt)) {
                r = ntfs_tag_list(D.st, name, tag_collect_cb, &tc);
                if (r == 0)
                        r = tc.err;
                if (r < 0) {
                        free(tc.v);
                        explicit_bzero(&cfg, sizeof cfg);
                        return d_fail(resp, r, "listing tags");
                }
        }
        struct ntfs_remote_stats st = { 0 };
        char msg[1024] = "", rname[NTFS_NAME_MAX + 1];
        copy_str(rname, sizeof rname, cfg.name);
        struct ntfs_remote_progress prog = { 0 };
        struct d_op *op = d_op_start(&ops, pid, "push", name, &prog, render_progress);
        /* no progress: push skips the counting walk nobody would watch */
        r = ntfs_remote_push(D.st, &cfg, name, &head, tc.v, tc.n, &old, &st, op ? &prog : NULL, msg, sizeof msg);
        d_op_end(&ops, op);
        explicit_bzero(&cfg, sizeof cfg);
        if (r < 0) {
                free(tc.v);
                return ntfs_http_error(resp, r, "%s", msg[0] ? msg : ntfs_strerror(r));
        }
        json_t *o = d_commit_json(&head, "head");
        if (o) {
                json_object_set_new(o, "session", json_string(name));
                json_object_set_new(o, "remote", json_string(rname));
                json_object_set_new(o, "up_to_date", json_boolean(strcmp(msg, "up to date") == 0));
                if (jt && json_is_true(jt))
                        json_object_set_new(o, "tags", tags_json(tc.v, tc.n));
        }
        free(tc.v);
        return d_reply(resp, 200, stats_json(o, &st));
}

static int h_tags(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud;
        const char *rn = d_param(req, "name");
        char sess[NTFS_NAME_MAX + 1];
        int q = ntfs_http_request_query(req, "session", sess, sizeof sess);
        if (q <= 0 || !ntfs_name_valid(sess))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "want ?session=NAME (a valid session name)");
        struct ntfs_remote_cfg cfg;
        if (find(rn, &cfg) < 0)
                return ntfs_http_error(resp, -NTFS_ENOTFOUND, "no remote '%s'", rn);
        struct ntfs_remote_tag *v = NULL;
        size_t n = 0;
        char msg[1024] = "";
        int r = ntfs_remote_list_tags(&cfg, sess, &v, &n, NULL, msg, sizeof msg);
        explicit_bzero(&cfg, sizeof cfg);
        if (r < 0)
                return ntfs_http_error(resp, r, "%s", msg[0] ? msg : ntfs_strerror(r));
        json_t *a = tags_json(v, n);
        free(v);
        return d_reply(resp, 200, a ? json_pack("{s:s,s:s,s:o}", "remote", rn, "session", sess, "tags", a) : NULL);
}

/* Three-way merge of the remote head (theirs) with the local head (ours);
 * on success *local is the merge commit and the session points at it. */
static int merge_remote(ntfs_http_response *resp, const char *name, const char *rname, ntfs_hash *local,
                        const ntfs_hash *rhead) {
        static unsigned long seq;
        ntfs_hash base;
        int r = ntfs_remote_merge_base(D.st, local, rhead, &base);
        if (r < 0)
                return ntfs_http_error(resp, -NTFS_ECONFLICT, "'%s' and remote '%s' share no history", name, rname);
        char scratch[NTFS_NAME_MAX + 1], msg[512];
        snprintf(scratch, sizeof scratch, "%sremote-%d-%lu", NTFS_MERGE_SCRATCH_PREFIX, (int)getpid(),
                 __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
        snprintf(msg, sizeof msg, "merge remote '%s' into '%s'", rname, name);
        struct ntfs_merge_result res = { 0 };
        if ((r = ntfs_merge3(D.st, &base, rhead, local, scratch, msg, &res)) < 0)
                return d_fail(resp, r, "merge");
        if (res.nconflicts > 0) {
                r = ntfs_http_error(resp, -NTFS_ECONFLICT, "merge with remote '%s': %zu conflicts (first: %s, %s)",
                                    rname, res.nconflicts, res.conflicts[0].path, res.conflicts[0].reason);
                ntfs_merge_result_release(&res);
                return r;
        }
        char hx[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(&res.commit, hx);
        ntfs_merge_result_release(&res);
        if ((r = ntfs_rollback(D.st, name, hx, -1, local)) < 0)
                return d_fail(resp, r, "merge");
        return 0;
}

static int h_pull(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud;
        static const char *const keys[] = { "remote", "merge", "progress", NULL };
        const char *name = d_param(req, "name"), *pid = NULL;
        struct ntfs_remote_cfg cfg;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = want_progress_id(req, resp, &pid)) < 0 ||
            (r = pick_remote(req, resp, "remote", &cfg)) < 0)
                return r;
        json_t *jm = json_object_get(req->json, "merge");
        if (jm && !json_is_boolean(jm)) {
                explicit_bzero(&cfg, sizeof cfg);
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'merge' must be a boolean");
        }
        bool merge = jm && json_is_true(jm);
        char rname[NTFS_NAME_MAX + 1];
        copy_str(rname, sizeof rname, cfg.name);
        ntfs_hash local, rhead;
        bool changed;
        if ((r = d_checkpoint(name, "before pull", NULL, &local, &changed)) < 0) {
                explicit_bzero(&cfg, sizeof cfg);
                return d_fail(resp, r, name);
        }
        struct ntfs_remote_stats st = { 0 };
        char msg[1024] = "";
        _cleanup_free_ struct ntfs_remote_tag *tags = NULL;
        size_t ntags = 0;
        struct ntfs_remote_progress prog = { 0 };
        struct d_op *op = d_op_start(&ops, pid, "pull", name, &prog, render_progress);
        r = ntfs_remote_fetch(D.st, &cfg, name, &rhead, &tags, &ntags, &st, op ? &prog : NULL, msg, sizeof msg);
        d_op_end(&ops, op);
        explicit_bzero(&cfg, sizeof cfg);
        if (r < 0)
                return ntfs_http_error(resp, r, "%s", msg[0] ? msg : ntfs_strerror(r));
        if ((r = tags_check(resp, rname, tags, ntags)) < 0)
                return r;
        const char *result;
        if (memcmp(local.b, rhead.b, NTFS_HASH_LEN) == 0) {
                result = "up_to_date";
        } else if ((r = ntfs_remote_is_ancestor(D.st, &rhead, &local)) == 1) {
                result = "ahead";
        } else if (r == 0 && (r = ntfs_remote_is_ancestor(D.st, &local, &rhead)) == 1) {
                char hx[NTFS_HEX_LEN + 1];
                ntfs_hash_hex(&rhead, hx);
                if ((r = ntfs_rollback(D.st, name, hx, -1, &local)) < 0)
                        return d_fail(resp, r, "fast-forward");
                result = "fast_forward";
        } else if (r == 0 && !merge) {
                return ntfs_http_error(resp, -NTFS_ECONFLICT,
                                       "'%s' and remote '%s' have diverged: pull with merge (--merge)", name, rname);
        } else if (r == 0) {
                if ((r = merge_remote(resp, name, rname, &local, &rhead)) < 0)
                        return r;
                result = "merged";
        } else {
                return d_fail(resp, r, "pull");
        }
        if ((r = tags_apply(resp, name, tags, ntags)) < 0)
                return r;
        json_t *o = d_commit_json(&local, "head");
        if (o) {
                json_object_set_new(o, "session", json_string(name));
                json_object_set_new(o, "remote", json_string(rname));
                json_object_set_new(o, "result", json_string(result));
                json_object_set_new(o, "tags", tags_json(tags, ntags));
        }
        return d_reply(resp, 200, stats_json(o, &st));
}

static int h_clone(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud;
        static const char *const keys[] = { "remote", "session", "name", "progress", NULL };
        const char *sess, *newname, *pid = NULL;
        struct ntfs_remote_cfg cfg;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "session", true, &sess)) < 0 ||
            (r = d_want_string(req, resp, "name", true, &newname)) < 0 ||
            (r = want_progress_id(req, resp, &pid)) < 0 || (r = pick_remote(req, resp, "remote", &cfg)) < 0)
                return r;
        struct ntfs_session_info si;
        if (!ntfs_name_valid(newname) || !ntfs_name_valid(sess)) {
                explicit_bzero(&cfg, sizeof cfg);
                return ntfs_http_error(resp, -NTFS_EINVALNAME, "invalid session name");
        }
        if (ntfs_session_get(D.st, newname, &si) == 0) {
                explicit_bzero(&cfg, sizeof cfg);
                return ntfs_http_error(resp, -NTFS_ESESSEXISTS, "session '%s' exists", newname);
        }
        char rname[NTFS_NAME_MAX + 1];
        copy_str(rname, sizeof rname, cfg.name);
        ntfs_hash rhead, h;
        struct ntfs_remote_stats st = { 0 };
        char msg[1024] = "";
        _cleanup_free_ struct ntfs_remote_tag *tags = NULL;
        size_t ntags = 0;
        struct ntfs_remote_progress prog = { 0 };
        struct d_op *op = d_op_start(&ops, pid, "clone", newname, &prog, render_progress);
        r = ntfs_remote_fetch(D.st, &cfg, sess, &rhead, &tags, &ntags, &st, op ? &prog : NULL, msg, sizeof msg);
        d_op_end(&ops, op);
        explicit_bzero(&cfg, sizeof cfg);
        if (r < 0)
                return ntfs_http_error(resp, r, "%s", msg[0] ? msg : ntfs_strerror(r));
        if ((r = tags_check(resp, rname, tags, ntags)) < 0)
                return r;
        for (size_t i = 0; i < ntags; i++)
                if (strcmp(tags[i].name, newname) == 0)
                        return ntfs_http_error(resp, -NTFS_ETAGEXISTS,
                                               "remote '%s' has a tag '%s' for '%s': choose another name", rname,
                                               newname, sess);
        char hx[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(&rhead, hx);
        if ((r = ntfs_session_create(D.st, newname, hx, &h)) < 0)
                return d_fail(resp, r, newname);
        if ((r = tags_apply(resp, newname, tags, ntags)) < 0)
                return r;
        json_t *o = d_commit_json(&h, "head");
        if (o) {
                json_object_set_new(o, "name", json_string(newname));
                json_object_set_new(o, "remote", json_string(rname));
                json_object_set_new(o, "session", json_string(sess));
                json_object_set_new(o, "tags", tags_json(tags, ntags));
        }
        return d_reply(resp, 201, stats_json(o, &st));
}

static int h_prune(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud;
        static const char *const keys[] = { "grace", "dry_run", NULL };
        const char *rn = d_param(req, "name");
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0)
                return r;
        json_t *jg = json_object_get(req->json, "grace"), *jd = json_object_get(req->json, "dry_run");
        if ((jg && (!json_is_integer(jg) || json_integer_value(jg) < 0 || json_integer_value(jg) > 365 * 86400)) ||
            (jd && !json_is_boolean(jd)))
                return ntfs_http_error(resp, -NTFS_EBADREQ,
                                       "'grace' must be seconds (0..31536000) and 'dry_run' a boolean");
        int64_t grace = jg ? (int64_t)json_integer_value(jg) : 3600;
        bool dry = jd && json_is_true(jd);
        struct ntfs_remote_cfg cfg;
        if (find(rn, &cfg) < 0)
                return ntfs_http_error(resp, -NTFS_ENOTFOUND, "no remote '%s'", rn);
        struct ntfs_remote_stats st = { 0 };
        uint64_t deleted = 0, young = 0;
        char msg[1024] = "";
        r = ntfs_remote_prune(&cfg, grace, dry, &deleted, &young, &st, msg, sizeof msg);
        explicit_bzero(&cfg, sizeof cfg);
        if (r < 0)
                return ntfs_http_error(resp, r, "%s", msg[0] ? msg : ntfs_strerror(r));
        json_t *o = json_pack("{s:s,s:I,s:I,s:b,s:I}", "remote", rn, "deleted", (json_int_t)deleted, "young",
                              (json_int_t)young, "dry_run", dry, "grace", (json_int_t)grace);
        return d_reply(resp, 200, stats_json(o, &st));
}

int routes_remote_register(ntfs_router *rt) {
        pthread_mutex_lock(&rlock);
        int r = load();
        if (r < 0)
                log_warn("remote: cannot read remotes.json: %s", ntfs_strerror(r));
        r = update_secrets();
        pthread_mutex_unlock(&rlock);
        if (r < 0)
                return r; /* no start without redaction */
        static const struct ntfs_route routes[] = {
                { "POST /v1/remotes", h_add, 0 },
                { "GET /v1/remotes", h_list, 0 },
                { "DELETE /v1/remotes/{name}", h_del, 0 },
                { "POST /v1/sessions/{name}/push", h_push, 0 },
                { "POST /v1/sessions/{name}/pull", h_pull, 0 },
                { "POST /v1/clone", h_clone, 0 },
                { "GET /v1/remotes/{name}/tags", h_tags, 0 },
                { "POST /v1/remotes/{name}/prune", h_prune, 0 },
                { "GET /v1/transfers/{id}", h_progress, 0 },
        };
        return ntfs_router_add_table(rt, routes, ARRAY_SIZE(routes));
}
