/* SPDX-License-Identifier: MIT
 * routes-trunk.c — trunks and forks (docs/trunk.md).
 *
 * A trunk is a named line of workspace versions kept in the journal
 * (version 1, 2, ... each naming a commit). A fork is a session started from
 * one trunk version; committing it fast-forwards the trunk when the trunk has
 * not moved, or three-way merges (fs/sync/merge.c) base, trunk head and fork.
 * A conflict commits nothing and marks the fork `conflicted`.
 *
 * Serialization: commits run under one mutex of this module and advance the
 * trunk with the journal's compare-and-swap; a lost race merges again on the
 * new head (bounded retries), so no commit is lost.
 *
 * Paths: the seed's POST /trunk/init|fork|commit|abort, GET /trunk/status,
 * and /v1/trunks..., /v1/forks/{session}...
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "ctl/daemon.h"
#include "fs/sync/merge.h"
#include "common/banned.h"

#define DEFAULT_TRUNK "trunk"
#define COMMIT_RETRIES 16

static pthread_mutex_t trunk_mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- JSON ------------------------------------------------------------------------------ */

static void trunk_id(char *buf, size_t len, const char *name, uint64_t version) {
        snprintf(buf, len, "%s@%" PRIu64, name, version);
}

/* "NAME@N" or "NAME" (N = 0: head). */
static int parse_trunk_id(const char *s, char *name, size_t namelen, uint64_t *version) {
        const char *at = strrchr(s, '@');
        *version = 0;
        size_t n = at ? (size_t)(at - s) : strlen(s);
        if (n == 0 || n >= namelen)
                return -NTFS_EINVALNAME;
        memcpy(name, s, n);
        name[n] = 0;
        if (at && ntfs_parse_u64(at + 1, INT64_MAX, version) < 0)
                return -NTFS_EBADREQ;
        return ntfs_name_valid(name) ? 0 : -NTFS_EINVALNAME;
}

static json_t *version_json(const struct ntfs_trunk_version *v) {
        ntfs_hash h;
        json_t *o = NULL;
        if (v->commit && ntfs_unhex(v->commit, h.b, NTFS_HASH_LEN) == 0)
                o = d_commit_json(&h, "commit");
        else
                o = json_pack("{s:s?, s:s}", "commit", v->commit, "short", "");
        if (!o)
                return NULL;
        char id[NTFS_NAME_MAX + 32], pid[NTFS_NAME_MAX + 32];
        trunk_id(id, sizeof id, v->name, v->version);
        trunk_id(pid, sizeof pid, v->name, v->parent_version);
        json_object_set_new(o, "trunk", json_string(v->name));
        json_object_set_new(o, "version", json_integer((json_int_t)v->version));
        json_object_set_new(o, "trunk_id", json_string(id));
        json_object_set_new(o, "parent_id", v->parent_version ? json_string(pid) : json_null());
        json_object_set_new(o, "parent_version", json_integer((json_int_t)v->parent_version));
        json_object_set_new(o, "merged_from", v->merged_from ? json_string(v->merged_from) : json_null());
        json_object_set_new(o, "snapshot_path", json_string(v->commit ? v->commit : ""));
        json_object_set_new(o, "effect_cursor", json_integer(v->effect_cursor));
        json_object_set_new(o, "created_at", json_integer(v->created_ns));
        return o;
}

static json_t *fork_json(const struct ntfs_fork *f) {
        char id[NTFS_NAME_MAX + 32];
        trunk_id(id, sizeof id, f->trunk, f->base_version);
        return json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:s, s:I, s:I}", "fork_id", f->session, "session",
                         f->session, "session_id", f->session, "trunk", f->trunk, "base_version",
                         (json_int_t)f->base_version, "trunk_id", id, "status",
                         ntfs_fork_status_to_string(f->status), "created_at", (json_int_t)f->created_ns,
                         "resolved_at", (json_int_t)f->resolved_ns);
}

static json_t *side_json(const struct ntfs_merge_side *s, const char *commit_short) {
        if (!s->present)
                return json_pack("{s:b, s:s, s:s}", "present", false, "type", "absent", "commit", commit_short);
        char mode[16];
        snprintf(mode, sizeof mode, "%o", s->mode & 07777);
        const char *type = S_ISREG(s->mode) ? "file" : S_ISDIR(s->mode) ? "dir" : S_ISLNK(s->mode) ? "symlink"
                                                                                                   : "other";
        json_t *o = json_pack("{s:b, s:s, s:s, s:I, s:s}", "present", true, "type", type, "mode", mode, "size",
                              (json_int_t)s->size, "commit", commit_short);
        if (o && s->sha256[0])
                json_object_set_new(o, "sha256", json_string(s->sha256));
        if (o && S_ISLNK(s->mode))
                json_object_set_new(o, "target", json_string(s->target));
        return o;
}

static void short_of(const ntfs_hash *h, char out[NTFS_HEX_LEN + 1]) {
        if (ntfs_short_id(D.st, h, out) < 0) {
                char hex[NTFS_HEX_LEN + 1];
                ntfs_hash_hex(h, hex);
                snprintf(out, NTFS_HEX_LEN + 1, "%.12s", hex);
        }
}

static json_t *conflicts_json(const struct ntfs_merge_result *m, const ntfs_hash *fork, const ntfs_hash *head) {
        char fs[NTFS_HEX_LEN + 1], hs[NTFS_HEX_LEN + 1];
        short_of(fork, fs);
        short_of(head, hs);
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < m->nconflicts; i++) {
                const struct ntfs_merge_conflict *c = &m->conflicts[i];
                json_t *o = json_pack("{s:s, s:s, s:o, s:o}", "path", c->path, "reason", c->reason, "fork",
                                      side_json(&c->fork, fs), "trunk", side_json(&c->trunk, hs));
                if (!o || json_array_append_new(arr, o) < 0) {
                        json_decref(arr);
                        return NULL;
                }
        }
        return arr;
}

/* ---- operations --------------------------------------------------------------------------- */

static int hash_of(const char *hex, ntfs_hash *h) {
        return hex && ntfs_unhex(hex, h->b, NTFS_HASH_LEN) == 0 ? 0 : -NTFS_ECORRUPT;
}

static int op_init(const ntfs_http_request *req, ntfs_http_response *resp, const char *name, const char *from,
                   int status) {
        if (!ntfs_name_valid(name))
                return ntfs_http_error(resp, -NTFS_EINVALNAME, "invalid trunk name '%s'", name);
        ntfs_hash h;
        int r = d_checkpoint(from, "trunk init", NULL, &h, NULL);
        if (r < 0)
                return ntfs_http_error(resp, r, "session '%s': %s", from, ntfs_strerror(r));
        char hex[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(&h, hex);
        r = ntfs_journal_trunk_init(D.j, name, hex, 0);
        if (r == -EEXIST || r == -NTFS_ESESSEXISTS)
                return ntfs_http_error(resp, -NTFS_ECONFLICT, "trunk '%s' exists", name);
        if (r < 0)
                return ntfs_http_error(resp, r, "trunk '%s': %s", name, ntfs_strerror(r));
        struct ntfs_trunk_version v = { 0 };
        if ((r = ntfs_journal_trunk_get(D.j, name, 0, &v)) < 0)
                return d_fail(resp, r, "trunk");
        json_t *o = version_json(&v);
        ntfs_trunk_version_release(&v);
        (void)req;
        return d_reply(resp, status, o);
}

/* Makes session a fork of trunk at version (0: head). A session that is a
 * conflicted fork of this trunk is re-forked: rolled back to the version
 * (its uncommitted work is dropped) and active again. */
static int op_fork(const ntfs_http_request *req, ntfs_http_response *resp, const char *trunk, uint64_t version,
                   const char *session, json_t **ret) {
        if (!ntfs_name_valid(session))
                return ntfs_http_error(resp, -NTFS_EINVALNAME, "invalid session name '%s'", session);
        struct ntfs_trunk_version v = { 0 };
        int r = ntfs_journal_trunk_get(D.j, trunk, version, &v);
        if (r < 0)
                return ntfs_http_error(resp, r, "trunk '%s'%s: %s", trunk, version ? " version" : "",
                                       ntfs_strerror(r));
        uint64_t ver = v.version;
        char hex[NTFS_HEX_LEN + 1];
        snprintf(hex, sizeof hex, "%s", v.commit ? v.commit : "");
        ntfs_trunk_version_release(&v);

        pthread_mutex_lock(&trunk_mu);
        struct ntfs_fork f = { 0 };
        r = ntfs_journal_fork_get(D.j, session, &f);
        if (r == 0) {
                bool refork = f.status == NTFS_FORK_CONFLICTED && strcmp(f.trunk, trunk) == 0;
                enum ntfs_fork_status st = f.status;
                ntfs_fork_release(&f);
                if (!refork) {
                        pthread_mutex_unlock(&trunk_mu);
                        return ntfs_http_error(resp, -NTFS_ESESSEXISTS,
                                               "session '%s' is already a fork (%s); fork a new session",
                                               session, ntfs_fork_status_to_string(st));
                }
                d_flush_session_mounts(session);
                r = ntfs_rollback(D.st, session, hex, -1, NULL);
                if (r == 0)
                        r = ntfs_journal_fork_set_status(D.j, session, NTFS_FORK_ACTIVE, ver);
                if (r < 0) {
                        pthread_mutex_unlock(&trunk_mu);
                        return ntfs_http_error(resp, r, "re-fork '%s': %s", session, ntfs_strerror(r));
                }
        } else if (r == -NTFS_ENOTFOUND) {
                r = ntfs_session_create(D.st, session, hex, NULL);
                if (r < 0) {
                        pthread_mutex_unlock(&trunk_mu);
                        return ntfs_http_error(resp, r, "session '%s': %s", session, ntfs_strerror(r));
                }
                int jr = ntfs_journal_session_create(D.j, session, (int64_t)req->peer.uid, NULL);
                r = jr == -EEXIST || jr == -NTFS_ESESSEXISTS ? 0 : jr;
                if (r == 0)
                        r = ntfs_journal_fork_create(D.j, session, trunk, ver);
                if (r < 0) {
                        (void)ntfs_session_end(D.st, session);
                        pthread_mutex_unlock(&trunk_mu);
                        return ntfs_http_error(resp, r, "fork '%s': %s", session, ntfs_strerror(r));
                }
        } else {
                pthread_mutex_unlock(&trunk_mu);
                return ntfs_http_error(resp, r, "fork '%s': %s", session, ntfs_strerror(r));
        }
        r = ntfs_journal_fork_get(D.j, session, &f);
        pthread_mutex_unlock(&trunk_mu);
        if (r < 0)
                return d_fail(resp, r, "fork");
        json_t *o = fork_json(&f);
        ntfs_fork_release(&f);
        ntfs_hash h;
        if (o && hash_of(hex, &h) == 0) {
                json_t *c = d_commit_json(&h, "head");
                if (c)
                        json_object_update(o, c);
                json_decref(c);
        }
        *ret = o;
        return o ? 0 : -ENOMEM;
}

struct commit_out {
        bool conflict;
        bool fast_forward, noop;
        uint64_t version;     /* new (or current, on conflict) trunk version */
        ntfs_hash commit;     /* new trunk commit (or the current head on conflict) */
        ntfs_hash fork_commit;
        json_t *conflicts;    /* on conflict */
        size_t fork_changes, trunk_changes, line_merged;
        char trunk[NTFS_NAME_MAX + 1];
};

/* Commits session's fork. Returns 0 (see out->conflict) or an error with
 * why filled in. */
static int do_commit(const char *session, struct commit_out *out, char *why, size_t whylen) {
        struct ntfs_fork f = { 0 };
        int r = ntfs_journal_fork_get(D.j, session, &f);
        if (r < 0) {
                snprintf(why, whylen, "'%s' is not a fork of a trunk", session);
                return r == -NTFS_ENOTFOUND ? -NTFS_ENOTFOUND : r;
        }
        snprintf(out->trunk, sizeof out->trunk, "%s", f.trunk);
        uint64_t base_version = f.base_version;
        enum ntfs_fork_status status = f.status;
        ntfs_fork_release(&f);
        if (status != NTFS_FORK_ACTIVE) {
                snprintf(why, whylen, "fork '%s' is %s%s", session, ntfs_fork_status_to_string(status),
                         status == NTFS_FORK_CONFLICTED ? ": abort it, or re-fork it from the trunk's head" : "");
                return -NTFS_ECONFLICT;
        }
        r = d_checkpoint(session, "trunk commit", NULL, &out->fork_commit, NULL);
        if (r < 0) {
                snprintf(why, whylen, "checkpoint of '%s': %s", session, ntfs_strerror(r));
                return r;
        }
        char fork_hex[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(&out->fork_commit, fork_hex);
        struct ntfs_trunk_version base = { 0 };
        if ((r = ntfs_journal_trunk_get(D.j, out->trunk, base_version, &base)) < 0) {
                snprintf(why, whylen, "trunk '%s' version %" PRIu64 ": %s", out->trunk, base_version,
                         ntfs_strerror(r));
                return r;
        }
        ntfs_hash base_h;
        r = hash_of(base.commit, &base_h);
        ntfs_trunk_version_release(&base);
        if (r < 0)
                return r;
        for (int attempt = 0; attempt < COMMIT_RETRIES; attempt++) {
                struct ntfs_trunk_version head = { 0 };
                if ((r = ntfs_journal_trunk_get(D.j, out->trunk, 0, &head)) < 0) {
                        snprintf(why, whylen, "trunk '%s': %s", out->trunk, ntfs_strerror(r));
                        return r;
                }
                uint64_t head_version = head.version;
                ntfs_hash head_h;
                r = hash_of(head.commit, &head_h);
                ntfs_trunk_version_release(&head);
                if (r < 0)
                        return r;
                ntfs_hash result;
                out->fast_forward = out->noop = false;
                if (head_version == base_version || memcmp(head_h.b, base_h.b, NTFS_HASH_LEN) == 0) {
                        if (memcmp(out->fork_commit.b, head_h.b, NTFS_HASH_LEN) == 0)
                                out->noop = true;
                        out->fast_forward = true;
                        result = out->fork_commit;
                } else if (memcmp(out->fork_commit.b, base_h.b, NTFS_HASH_LEN) == 0) {
                        out->noop = true; /* the fork changed nothing: the trunk already has it all */
                        result = head_h;
                } else {
                        char scratch[NTFS_NAME_MAX + 1], msg[NTFS_NAME_MAX + 64];
                        snprintf(scratch, sizeof scratch, NTFS_MERGE_SCRATCH_PREFIX "%" PRIx64,
                                 (uint64_t)ntfs_now_ns());
                        snprintf(msg, sizeof msg, "merge fork %s into %s", session, out->trunk);
                        struct ntfs_merge_result m = { 0 };
                        r = ntfs_merge3(D.st, &base_h, &head_h, &out->fork_commit, scratch, msg, &m);
                        if (r < 0) {
                                snprintf(why, whylen, "merge: %s", ntfs_strerror(r));
                                return r;
                        }
                        out->fork_changes = m.fork_changes;
                        out->trunk_changes = m.trunk_changes;
                        out->line_merged = m.line_merged;
                        if (m.nconflicts) {
                                out->conflict = true;
                                out->version = head_version;
                                out->commit = head_h;
                                out->conflicts = conflicts_json(&m, &out->fork_commit, &head_h);
                                ntfs_merge_result_release(&m);
                                r = ntfs_journal_fork_set_status(D.j, session, NTFS_FORK_CONFLICTED, 0);
                                if (r < 0)
                                        snprintf(why, whylen, "fork status: %s", ntfs_strerror(r));
                                return r;
                        }
                        result = m.commit;
                        ntfs_merge_result_release(&m);
                }
                uint64_t now_head = 0;
                if (out->noop && !out->fast_forward) {
                        out->version = head_version;
                        out->commit = head_h;
                } else if (out->noop) {
                        out->version = head_version;
                        out->commit = head_h;
                } else {
                        char rh[NTFS_HEX_LEN + 1];
                        ntfs_hash_hex(&result, rh);
                        r = ntfs_journal_trunk_advance(D.j, out->trunk, head_version, rh, session, 0, &now_head);
                        if (r == -NTFS_ECONFLICT) {
                                log_debug("trunk %s moved to %" PRIu64 " during commit of %s; merging again",
                                          out->trunk, now_head, session);
                                continue;
                        }
                        if (r < 0) {
                                snprintf(why, whylen, "trunk '%s': %s", out->trunk, ntfs_strerror(r));
                                return r;
                        }
                        out->version = now_head;
                        out->commit = result;
                }
                r = ntfs_journal_fork_set_status(D.j, session, NTFS_FORK_COMMITTED, 0);
                if (r < 0)
                        snprintf(why, whylen, "fork status: %s", ntfs_strerror(r));
                return r;
        }
        snprintf(why, whylen, "trunk '%s' kept moving; try again", out->trunk);
        return -EBUSY;
}

static int commit_locked(const char *session, struct commit_out *out, char *why, size_t whylen) {
        pthread_mutex_lock(&trunk_mu);
        int r = do_commit(session, out, why, whylen);
        pthread_mutex_unlock(&trunk_mu);
        return r;
}

static json_t *commit_json(const struct commit_out *o, const char *session) {
        json_t *j = d_commit_json(&o->commit, "commit");
        if (!j)
                return NULL;
        char id[NTFS_NAME_MAX + 32];
        trunk_id(id, sizeof id, o->trunk, o->version);
        json_object_set_new(j, "session", json_string(session));
        json_object_set_new(j, "trunk", json_string(o->trunk));
        json_object_set_new(j, "version", json_integer((json_int_t)o->version));
        json_object_set_new(j, "fork_changes", json_integer((json_int_t)o->fork_changes));
        json_object_set_new(j, "trunk_changes", json_integer((json_int_t)o->trunk_changes));
        if (o->conflict) {
                json_object_set_new(j, "conflict", json_true());
                json_object_set_new(j, "current_trunk_id", json_string(id));
                json_object_set_new(j, "conflicts", o->conflicts ? json_incref(o->conflicts) : json_array());
        } else {
                json_object_set_new(j, "ok", json_true());
                json_object_set_new(j, "committed", json_true());
                json_object_set_new(j, "new_trunk_id", json_string(id));
                json_object_set_new(j, "fast_forward", json_boolean(o->fast_forward));
                json_object_set_new(j, "noop", json_boolean(o->noop));
                json_object_set_new(j, "merged", json_boolean(!o->fast_forward && !o->noop));
                json_object_set_new(j, "line_merged", json_integer((json_int_t)o->line_merged));
        }
        return j;
}

static int op_abort(ntfs_http_response *resp, const char *session) {
        pthread_mutex_lock(&trunk_mu);
        struct ntfs_fork f = { 0 };
        int r = ntfs_journal_fork_get(D.j, session, &f);
        if (r == 0) {
                if (f.status == NTFS_FORK_ACTIVE || f.status == NTFS_FORK_CONFLICTED)
                        r = ntfs_journal_fork_set_status(D.j, session, NTFS_FORK_ABORTED, 0);
                else
                        r = -NTFS_ECONFLICT;
        }
        enum ntfs_fork_status st = f.status;
        ntfs_fork_release(&f);
        pthread_mutex_unlock(&trunk_mu);
        if (r == -NTFS_ECONFLICT)
                return ntfs_http_error(resp, r, "fork '%s' is already %s", session, ntfs_fork_status_to_string(st));
        if (r == -NTFS_ENOTFOUND)
                return ntfs_http_error(resp, r, "'%s' is not a fork of a trunk", session);
        if (r < 0)
                return d_fail(resp, r, "abort");
        return 0;
}

static int status_json(const char *trunk, json_t **ret) {
        struct ntfs_trunk_version *vs = NULL;
        size_t nv = 0;
        int r = ntfs_journal_trunk_list(D.j, trunk, &vs, &nv);
        if (r < 0)
                return r;
        if (nv == 0) {
                ntfs_trunk_versions_free(vs, nv);
                return -NTFS_ENOTFOUND;
        }
        struct ntfs_fork *fs = NULL;
        size_t nf = 0;
        r = ntfs_journal_fork_list(D.j, trunk, false, &fs, &nf);
        if (r < 0) {
                ntfs_trunk_versions_free(vs, nv);
                return r;
        }
        json_t *o = version_json(&vs[nv - 1]);
        json_t *va = json_array(), *fa = json_array();
        size_t active = 0;
        for (size_t i = 0; va && i < nv; i++)
                json_array_append_new(va, version_json(&vs[i]));
        for (size_t i = 0; fa && i < nf; i++) {
                if (fs[i].status == NTFS_FORK_ACTIVE)
                        active++;
                json_array_append_new(fa, fork_json(&fs[i]));
        }
        ntfs_trunk_versions_free(vs, nv);
        ntfs_forks_free(fs, nf);
        if (!o || !va || !fa) {
                json_decref(o);
                json_decref(va);
                json_decref(fa);
                return -ENOMEM;
        }
        json_object_set_new(o, "name", json_string(trunk));
        json_object_set_new(o, "active_forks", json_integer((json_int_t)active));
        json_object_set_new(o, "versions", va);
        json_object_set_new(o, "forks", fa);
        *ret = o;
        return 0;
}

/* ---- /v1 ------------------------------------------------------------------------------------ */

static int h_init(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud;
        static const char *const keys[] = { "name", "from", NULL };
        const char *name, *from;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "name", true, &name)) < 0 ||
            (r = d_want_string(req, resp, "from", true, &from)) < 0)
                return r;
        return op_init(req, resp, name, from, 201);
}

static int h_list(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud, (void)req;
        struct ntfs_trunk_version *vs = NULL;
        size_t nv = 0;
        int r = ntfs_journal_trunk_list(D.j, NULL, &vs, &nv);
        if (r < 0)
                return d_fail(resp, r, "trunks");
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < nv; i++)
                json_array_append_new(arr, version_json(&vs[i]));
        ntfs_trunk_versions_free(vs, nv);
        return d_reply(resp, 200, arr ? json_pack("{s:o}", "trunks", arr) : NULL);
}

static int h_status(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud;
        const char *name = d_param(req, "name");
        json_t *o = NULL;
        int r = status_json(name, &o);
        if (r < 0)
                return ntfs_http_error(resp, r, "trunk '%s': %s", name, ntfs_strerror(r));
        return d_reply(resp, 200, o);
}

static int h_fork(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud;
        static const char *const keys[] = { "session", "version", NULL };
        const char *session;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "session", true, &session)) < 0)
                return r;
        json_t *jv = json_object_get(req->json, "version");
        if (jv && (!json_is_integer(jv) || json_integer_value(jv) < 0))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'version' must be a non-negative integer");
        json_t *o = NULL;
        r = op_fork(req, resp, d_param(req, "name"), jv ? (uint64_t)json_integer_value(jv) : 0, session, &o);
        if (r < 0 || !o)
                return r;
        return d_reply(resp, 201, o);
}

static int reply_commit(ntfs_http_response *resp, const char *session, bool seed) {
        struct commit_out out = { 0 };
        char why[512] = "";
        int r = commit_locked(session, &out, why, sizeof why);
        if (r < 0) {
                json_decref(out.conflicts);
                return ntfs_http_error(resp, r, "%s", why[0] ? why : ntfs_strerror(r));
        }
        json_t *j = commit_json(&out, session);
        json_decref(out.conflicts);
        if (!j)
                return d_reply(resp, 500, NULL);
        if (out.conflict && !seed) {
                char msg[512];
                size_t n = json_array_size(json_object_get(j, "conflicts"));
                const char *first = n ? d_jstr(json_array_get(json_object_get(j, "conflicts"), 0), "path") : "";
                snprintf(msg, sizeof msg, "fork '%s' conflicts with trunk '%s' on %zu path%s (first: %s)", session,
                         out.trunk, n, n == 1 ? "" : "s", first ? first : "");
                json_object_set_new(j, "error",
                                    json_pack("{s:s, s:s}", "code", ntfs_errcode(-NTFS_ECONFLICT), "message", msg));
                return d_reply(resp, 409, j);
        }
        return d_reply(resp, 200, j);
}

static int h_commit(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud;
        static const char *const keys[] = { NULL };
        int r = d_check_keys(req, resp, keys);
        if (r < 0)
                return r;
        const char *trunk = d_param(req, "name");
        const char *session = d_param(req, "session");
        if (trunk) {
                struct ntfs_fork f = { 0 };
                if ((r = ntfs_journal_fork_get(D.j, session, &f)) == 0) {
                        bool same = strcmp(f.trunk, trunk) == 0;
                        ntfs_fork_release(&f);
                        if (!same)
                                return ntfs_http_error(resp, -NTFS_ENOTFOUND, "'%s' is not a fork of trunk '%s'",
                                                       session, trunk);
                }
        }
        return reply_commit(resp, session, false);
}

static int h_abort(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud;
        static const char *const keys[] = { NULL };
        int r = d_check_keys(req, resp, keys);
        if (r < 0)
                return r;
        const char *session = d_param(req, "session");
        if ((r = op_abort(resp, session)) < 0)
                return r;
        struct ntfs_fork f = { 0 };
        if ((r = ntfs_journal_fork_get(D.j, session, &f)) < 0)
                return d_fail(resp, r, "fork");
        json_t *o = fork_json(&f);
        ntfs_fork_release(&f);
        return d_reply(resp, 200, o);
}

static int h_fork_get(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud;
        const char *session = d_param(req, "session");
        struct ntfs_fork f = { 0 };
        int r = ntfs_journal_fork_get(D.j, session, &f);
        if (r < 0)
                return ntfs_http_error(resp, r, "fork '%s': %s", session, ntfs_strerror(r));
        json_t *o = fork_json(&f);
        ntfs_fork_release(&f);
        return d_reply(resp, 200, o);
}

/* ---- the seed's paths ------------------------------------------------------------------------ */

static const char *seed_session(const ntfs_http_request *req) {
        const char *s = d_jstr(req->json, "session_id");
        if (s)
                return s;
        return req->conn_data && *req->conn_data ? *req->conn_data : NULL;
}

static int h_seed_init(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud;
        static const char *const keys[] = { "name", "session_id", NULL };
        const char *name;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "name", false, &name)) < 0)
                return r;
        const char *s = seed_session(req);
        if (!s)
                return ntfs_http_error(resp, -NTFS_ENOSESSION, "no session: call /session/start first");
        return op_init(req, resp, name ? name : DEFAULT_TRUNK, s, 200);
}

static int h_seed_fork(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud;
        static const char *const keys[] = { "trunk_id", "session_id", "name", NULL };
        const char *tid, *name;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "trunk_id", false, &tid)) < 0 ||
            (r = d_want_string(req, resp, "name", false, &name)) < 0)
                return r;
        char trunk[NTFS_NAME_MAX + 1];
        uint64_t version = 0;
        if ((r = parse_trunk_id(tid ? tid : DEFAULT_TRUNK, trunk, sizeof trunk, &version)) < 0)
                return ntfs_http_error(resp, r, "bad trunk_id '%s'", tid);
        char gen[64];
        snprintf(gen, sizeof gen, "fork-%016" PRIx64, (uint64_t)ntfs_now_ns());
        const char *session = name ? name : gen;
        json_t *o = NULL;
        if ((r = op_fork(req, resp, trunk, version, session, &o)) < 0 || !o)
                return r;
        /* this connection now works on the fork */
        if (req->conn_data) {
                free(*req->conn_data);
                *req->conn_data = strdup(session);
        }
        return d_reply(resp, 200, o);
}

static int h_seed_commit(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud;
        static const char *const keys[] = { "session_id", NULL };
        int r = d_check_keys(req, resp, keys);
        if (r < 0)
                return r;
        const char *s = seed_session(req);
        if (!s)
                return ntfs_http_error(resp, -NTFS_ENOSESSION, "no session: call /session/start first");
        return reply_commit(resp, s, true);
}

static int h_seed_abort(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud;
        static const char *const keys[] = { "session_id", NULL };
        int r = d_check_keys(req, resp, keys);
        if (r < 0)
                return r;
        const char *s = seed_session(req);
        if (!s)
                return ntfs_http_error(resp, -NTFS_ENOSESSION, "no session: call /session/start first");
        if ((r = op_abort(resp, s)) < 0)
                return r;
        return d_reply(resp, 200, json_object());
}

static int h_seed_status(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        (void)ud;
        char trunk[NTFS_NAME_MAX + 1] = "";
        if (ntfs_http_request_query(req, "trunk", trunk, sizeof trunk) < 0 || !trunk[0]) {
                /* the trunk of this connection's fork, else the default */
                const char *s = req->conn_data && *req->conn_data ? *req->conn_data : NULL;
                struct ntfs_fork f = { 0 };
                if (s && ntfs_journal_fork_get(D.j, s, &f) == 0) {
                        snprintf(trunk, sizeof trunk, "%s", f.trunk);
                        ntfs_fork_release(&f);
                } else
                        snprintf(trunk, sizeof trunk, "%s", DEFAULT_TRUNK);
        }
        if (!ntfs_name_valid(trunk))
                return ntfs_http_error(resp, -NTFS_EINVALNAME, "invalid trunk name");
        json_t *o = NULL;
        int r = status_json(trunk, &o);
        if (r < 0)
                return ntfs_http_error(resp, r, "trunk '%s': %s", trunk, ntfs_strerror(r));
        return d_reply(resp, 200, o);
}

/* ---- registration ---------------------------------------------------------------------------- */

static int drop_scratch(const struct ntfs_session_info *si, void *ud) {
        char ***names = ud;
        (void)names;
        if (strncmp(si->name, NTFS_MERGE_SCRATCH_PREFIX, strlen(NTFS_MERGE_SCRATCH_PREFIX)) == 0) {
                int r = ntfs_session_end(D.st, si->name);
                if (r < 0)
                        log_warn("trunk: cannot remove leftover merge session %s: %s", si->name, ntfs_strerror(r));
        }
        return 0;
}

int routes_trunk_register(ntfs_router *rt) {
        /* scratch sessions of merges interrupted by a crash: nothing refers to them */
        if (D.st)
                (void)ntfs_session_list(D.st, drop_scratch, NULL);
        static const struct ntfs_route routes[] = {
                { "POST /v1/trunks", h_init, 0 },
                { "GET /v1/trunks", h_list, 0 },
                { "GET /v1/trunks/{name}", h_status, 0 },
                { "POST /v1/trunks/{name}/forks", h_fork, 0 },
                { "POST /v1/trunks/{name}/forks/{session}/commit", h_commit, 0 },
                { "POST /v1/trunks/{name}/forks/{session}/abort", h_abort, 0 },
                { "GET /v1/forks/{session}", h_fork_get, 0 },
                { "POST /v1/forks/{session}/commit", h_commit, 0 },
                { "POST /v1/forks/{session}/abort", h_abort, 0 },
                { "POST /trunk/init", h_seed_init, 0 },
                { "POST /trunk/fork", h_seed_fork, 0 },
                { "POST /trunk/commit", h_seed_commit, 0 },
                { "POST /trunk/abort", h_seed_abort, 0 },
                { "GET /trunk/status", h_seed_status, 0 },
        };
        return ntfs_router_add_table(rt, routes, ARRAY_SIZE(routes));
}
