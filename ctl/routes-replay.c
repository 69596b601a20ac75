/* SPDX-License-Identifier: MIT
 * routes-replay.c — resuming a session from the journal, saving an agent's
 * state, and replay as a tool (docs/recovery.md, docs/protocol.md):
 *
 *   POST /session/revive                  {session_id?}  (seed API)
 *   POST /v1/sessions/{name}/resume       {effects?: N}
 *   POST /v1/sessions/{name}/state        {messages, cursor, step, commit?}
 *   POST /v1/sessions/{name}/replay       {into, from_step?}
 *
 * Replay forks NAME at the commit_before of its first effect with
 * step >= from_step into the new session `into`, then walks NAME's effects in
 * journal order: a replayable effect (bash_write, bash_build) that recorded a
 * commit_after is run again on the fork through d_run_tool (journaled on the
 * fork under the key "replay:<into>:<id>") and the fork's tree is compared
 * with the recorded commit's tree; every other effect is served from the
 * journal: nothing runs, and when it recorded a commit_after (a bash_run) the
 * fork is moved to that commit, so the following steps start from the state
 * the original run had.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "ctl/daemon.h"
#include "ctl/jsonutil.h"
#include "common/banned.h"

#define RESUME_DEFAULT_EFFECTS 20
#define RESUME_MAX_EFFECTS 1000

/* ---- resume / revive -------------------------------------------------------------------------- */

/* What an agent needs to continue session name: its latest saved state
 * (messages, cursor, step, commit), the session head, its last n effects and
 * the ids of effects whose outcome is unknown. */
static int resume_json(const char *name, size_t n, json_t **ret, char *why, size_t whylen) {
        struct ntfs_session_info si;
        int r = ntfs_session_get(D.st, name, &si);
        if (r < 0) {
                snprintf(why, whylen, "session '%s': %s", name, ntfs_strerror(r));
                return r;
        }
        json_t *o = d_commit_json(&si.head, "head");
        if (!o)
                return -ENOMEM;
        json_object_set_new(o, "session", json_string(name));
        json_object_set_new(o, "session_id", json_string(name));

        struct ntfs_agent_state as = { 0 };
        r = ntfs_journal_state_load(D.j, name, true, 0, &as);
        if (r == 0) {
                json_t *m = as.messages_json ? json_loads(as.messages_json, JSON_DECODE_ANY, NULL) : NULL;
                json_object_set_new(o, "messages", m ? m : json_array());
                json_object_set_new(o, "cursor", json_integer(as.cursor));
                json_object_set_new(o, "step", json_integer((json_int_t)as.step));
                json_object_set_new(o, "state_commit", as.commit ? json_string(as.commit) : json_null());
                ntfs_agent_state_release(&as);
        } else if (r == -NTFS_ENOTFOUND || r == -NTFS_ENOSESSION) {
                json_object_set_new(o, "messages", json_array());
                json_object_set_new(o, "cursor", json_integer(0));
                json_object_set_new(o, "step", json_integer(0));
                json_object_set_new(o, "state_commit", json_null());
        } else {
                json_decref(o);
                snprintf(why, whylen, "journal: %s", ntfs_strerror(r));
                return r;
        }

        struct ntfs_effect *arr = NULL;
        size_t cnt = 0;
        r = ntfs_journal_effect_list(D.j, name, 0, 0, 0, &arr, &cnt);
        if (r == -NTFS_ENOSESSION) {
                r = 0;
                cnt = 0;
        }
        if (r < 0) {
                json_decref(o);
                snprintf(why, whylen, "journal: %s", ntfs_strerror(r));
                return r;
        }
        json_t *last = json_array(), *unknown = json_array();
        size_t pending = 0;
        for (size_t i = 0; i < cnt; i++) {
                if (arr[i].status == NTFS_EFFECT_OUTCOME_UNKNOWN)
                        json_array_append_new(unknown, json_integer(arr[i].id));
                if (arr[i].status == NTFS_EFFECT_PENDING)
                        pending++;
                if (i + n >= cnt)
                        json_array_append_new(last, ntfs_effect_to_json(&arr[i]));
        }
        uint64_t last_step = cnt ? arr[cnt - 1].step : 0;
        ntfs_effects_free(arr, cnt);
        json_object_set_new(o, "effects_total", json_integer((json_int_t)cnt));
        json_object_set_new(o, "last_step", json_integer((json_int_t)last_step));
        json_object_set_new(o, "pending", json_integer((json_int_t)pending));
        json_object_set_new(o, "outcome_unknown", unknown);
        json_object_set_new(o, "last_effects", last);
        *ret = o;
        return 0;
}

static int h_resume(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "effects", NULL };
        int r = d_check_keys(req, resp, keys);
        if (r < 0)
                return r;
        json_int_t n = RESUME_DEFAULT_EFFECTS;
        json_t *e = req->json ? json_object_get(req->json, "effects") : NULL;
        if (e) {
                if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > RESUME_MAX_EFFECTS)
                        return ntfs_http_error(resp, -NTFS_EBADREQ, "'effects' must be an integer in [0, %d]",
                                               RESUME_MAX_EFFECTS);
                n = json_integer_value(e);
        }
        char why[512] = "";
        json_t *o;
        r = resume_json(d_param(req, "name"), (size_t)n, &o, why, sizeof why);
        if (r < 0)
                return ntfs_http_error(resp, r, "%s", why[0] ? why : ntfs_strerror(r));
        return d_reply(resp, 200, o);
}

/* Seed API: the session named in the body, else the one this connection
 * started. */
static int h_revive(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "session_id", NULL };
        const char *s;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "session_id", false, &s)) < 0)
                return r;
        if (!s && req->conn_data && *req->conn_data)
                s = *req->conn_data;
        if (!s)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'session_id' is required");
        char why[512] = "";
        json_t *o;
        r = resume_json(s, RESUME_DEFAULT_EFFECTS, &o, why, sizeof why);
        if (r < 0)
                return ntfs_http_error(resp, r, "%s", why[0] ? why : ntfs_strerror(r));
        json_object_set_new(o, "restored_messages", json_deep_copy(json_object_get(o, "messages")));
        if (req->conn_data && s != *req->conn_data) { /* later seed calls on this connection use it */
                char *copy = strdup(s);
                if (copy) {
                        free(*req->conn_data);
                        *req->conn_data = copy;
                }
        }
        return d_reply(resp, 200, o);
}

/* ---- agent state ------------------------------------------------------------------------------ */

static int h_state(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "messages", "cursor", "step", "commit", NULL };
        const char *name = d_param(req, "name"), *commit;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "commit", false, &commit)) < 0)
                return r;
        json_t *msgs = req->json ? json_object_get(req->json, "messages") : NULL;
        json_t *cur = req->json ? json_object_get(req->json, "cursor") : NULL;
        json_t *step = req->json ? json_object_get(req->json, "step") : NULL;
        if (!msgs)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'messages' is required (usually an array)");
        if (!json_is_integer(cur) || json_integer_value(cur) < 0)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'cursor' must be a non-negative integer");
        if (!json_is_integer(step) || json_integer_value(step) < 0)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'step' must be a non-negative integer");
        struct ntfs_session_info si;
        if ((r = ntfs_session_get(D.st, name, &si)) < 0)
                return ntfs_http_error(resp, r, "session '%s': %s", name, ntfs_strerror(r));
        ntfs_hash h = si.head;
        if (commit && (r = ntfs_resolve(D.st, commit, &h, NULL, 0)) < 0)
                return ntfs_http_error(resp, r, "commit '%s': %s", commit, ntfs_strerror(r));
        char hex[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(&h, hex);
        _cleanup_free_ char *ms = json_dumps(msgs, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!ms)
                return ntfs_http_error(resp, -ENOMEM, "out of memory");
        r = ntfs_journal_state_save(D.j, name, (uint64_t)json_integer_value(step), ms, json_integer_value(cur), hex);
        if (r < 0)
                return d_fail(resp, r, "save state");
        json_t *o = d_commit_json(&h, "commit");
        json_object_set_new(o, "session", json_string(name));
        json_object_set_new(o, "step", json_integer(json_integer_value(step)));
        json_object_set_new(o, "cursor", json_integer(json_integer_value(cur)));
        return d_reply(resp, 200, o);
}

/* ---- replay ----------------------------------------------------------------------------------- */

static bool is_replayable(const char *cls) {
        return strcmp(cls, "replayable_fast") == 0 || strcmp(cls, "replayable_expensive") == 0;
}

/* The root tree of commit hex. */
static int tree_of(const char *hex, ntfs_hash *ret) {
        ntfs_hash id;
        int r;
        if ((r = ntfs_resolve(D.st, hex, &id, NULL, 0)) < 0)
                return r;
        struct ntfs_commit_info ci;
        if ((r = ntfs_commit_get(D.st, &id, &ci)) < 0)
                return r;
        *ret = ci.tree;
        return 0;
}

#define REPLAY_MAX_PATHS 10

struct cmp_ctx {
        json_t *paths; /* the first REPLAY_MAX_PATHS differences, "M\tpath" */
        size_t n;
};

static int cmp_cb(const struct ntfs_diff_entry *e, void *ud) {
        struct cmp_ctx *c = ud;
        if (c->n++ < REPLAY_MAX_PATHS) {
                char line[4200];
                snprintf(line, sizeof line, "%c\t%s", (char)e->kind, e->path);
                json_array_append_new(c->paths, json_string(line));
        }
        return 0;
}

/* Runs or serves one effect of the original on the fork; appends its step
 * object to steps. *diverged is set when the trees differ. */
static int replay_one(const char *into, const struct ntfs_effect *e, json_t *steps, bool *diverged, char *why,
                      size_t whylen) {
        json_t *st = json_pack("{s:I, s:I, s:s, s:s}", "step", (json_int_t)e->step, "effect_id", (json_int_t)e->id,
                               "tool", e->tool, "effect", e->effect_class);
        if (!st)
                return -ENOMEM;
        json_array_append_new(steps, st);
        int r;
        *diverged = false;
        /* A cancelled call was stopped part way (a signal, its client gone):
         * running it again would run it to its end, which never happened. */
        bool cancelled = e->status == NTFS_EFFECT_FAILED && e->reason && strcmp(e->reason, "cancelled") == 0;
        if (!is_replayable(e->effect_class) || !e->commit_after || cancelled) {
                /* Served: nothing runs. A state change it recorded (bash_run,
                 * or what a cancelled call had done when it was stopped) is
                 * applied by moving the fork to its commit. A replayable
                 * effect without commit_after left no state (it failed before
                 * its checkpoint, or recovery rolled it back). */
                json_object_set_new(st, "status", json_string("served"));
                json_object_set_new(st, "recorded_status", json_string(ntfs_effect_status_to_string(e->status)));
                if (cancelled)
                        json_object_set_new(st, "recorded_reason", json_string("cancelled"));
                if (e->commit_after && (!is_replayable(e->effect_class) || cancelled)) {
                        ntfs_hash h;
                        if ((r = ntfs_rollback(D.st, into, e->commit_after, 0, &h)) < 0) {
                                snprintf(why, whylen, "step %" PRIu64 ": cannot apply the recorded commit %.12s: %s",
                                         e->step, e->commit_after, ntfs_strerror(r));
                                return r;
                        }
                }
                return 0;
        }
        json_t *input = e->input_json ? json_loads(e->input_json, 0, NULL) : NULL;
        const char *cmd = d_jstr(input, "command");
        if (!cmd) {
                json_decref(input);
                snprintf(why, whylen, "step %" PRIu64 ": effect %" PRId64 " has no command to replay", e->step, e->id);
                return -NTFS_EBADREQ;
        }
        char key[NTFS_NAME_MAX + 64];
        snprintf(key, sizeof key, "replay:%s:%" PRId64, into, e->id);
        json_t *res = NULL;
        r = d_run_tool(into, e->tool, cmd, key, 0, &res, why, whylen);
        json_decref(input);
        if (r < 0)
                return r;
        json_object_set_new(st, "exit_code", json_incref(json_object_get(res, "exit_code")));
        json_object_set_new(st, "replay_effect_id", json_incref(json_object_get(res, "effect_id")));
        json_decref(res);
        /* The fork's head is the re-run's checkpoint (d_run_tool made it). */
        struct ntfs_session_info si;
        if ((r = ntfs_session_get(D.st, into, &si)) < 0) {
                snprintf(why, whylen, "session '%s': %s", into, ntfs_strerror(r));
                return r;
        }
        char got_commit[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(&si.head, got_commit);
        ntfs_hash want, got;
        if ((r = tree_of(e->commit_after, &want)) < 0 || (r = tree_of(got_commit, &got)) < 0) {
                snprintf(why, whylen, "step %" PRIu64 ": %s", e->step, ntfs_strerror(r));
                return r;
        }
        char wh[NTFS_HEX_LEN + 1], gh[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(&want, wh);
        ntfs_hash_hex(&got, gh);
        /* Tree ids also cover timestamps, which a re-run never reproduces;
         * the verdict is the content comparison (paths, types, modes, owners,
         * xattrs, file bytes) of ntfs_diff, which ignores times. */
        struct cmp_ctx cc = { .paths = json_array() };
        if (strcmp(wh, gh) != 0 && (r = ntfs_diff(D.st, e->commit_after, got_commit, NULL, cmp_cb, &cc)) < 0) {
                json_decref(cc.paths);
                snprintf(why, whylen, "step %" PRIu64 ": diff: %s", e->step, ntfs_strerror(r));
                return r;
        }
        *diverged = cc.n > 0;
        json_object_set_new(st, "status", json_string(*diverged ? "diverged" : "same"));
        json_object_set_new(st, "identical_tree", json_boolean(strcmp(wh, gh) == 0));
        json_object_set_new(st, "recorded_tree", json_string(wh));
        json_object_set_new(st, "replayed_tree", json_string(gh));
        json_object_set_new(st, "differences", json_integer((json_int_t)cc.n));
        json_object_set_new(st, "paths", cc.paths);
        return 0;
}

static int h_replay(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "into", "from_step", NULL };
        const char *name = d_param(req, "name"), *into;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "into", true, &into)) < 0)
                return r;
        uint64_t from = 0;
        json_t *fs = json_object_get(req->json, "from_step");
        if (fs) {
                if (!json_is_integer(fs) || json_integer_value(fs) < 0)
                        return ntfs_http_error(resp, -NTFS_EBADREQ, "'from_step' must be a non-negative integer");
                from = (uint64_t)json_integer_value(fs);
        }
        if (!ntfs_name_valid(into))
                return ntfs_http_error(resp, -NTFS_EINVALNAME, "'%s' is not a valid session name", into);
        struct ntfs_session_info si;
        if ((r = ntfs_session_get(D.st, name, &si)) < 0)
                return ntfs_http_error(resp, r, "session '%s': %s", name, ntfs_strerror(r));
        struct ntfs_effect *arr = NULL;
        size_t n = 0;
        r = ntfs_journal_effect_list(D.j, name, from, 0, 0, &arr, &n);
        if (r == -NTFS_ENOSESSION)
                n = 0;
        else if (r < 0)
                return d_fail(resp, r, "effects");
        size_t first = 0;
        while (first < n && (arr[first].status == NTFS_EFFECT_PENDING || !arr[first].commit_before))
                first++;
        if (first == n) {
                ntfs_effects_free(arr, n);
                return ntfs_http_error(resp, -NTFS_ENOTFOUND, "session '%s' has no finished effect at step >= %" PRIu64,
                                       name, from);
        }
        ntfs_hash base;
        r = ntfs_fork(D.st, arr[first].commit_before, into, &base);
        if (r < 0) {
                r = ntfs_http_error(resp, r, "cannot fork '%s' at %.12s into '%s': %s", name,
                                    arr[first].commit_before, into, ntfs_strerror(r));
                ntfs_effects_free(arr, n);
                return r;
        }
        d_journal_session_created(into, (int64_t)req->peer.uid);
        log_info("replay: %s from step %" PRIu64 " into %s (forked at %.12s, %zu effect(s))", name,
                 arr[first].step, into, arr[first].commit_before, n - first);

        json_t *steps = json_array();
        json_t *first_div = json_null();
        unsigned same = 0, div = 0, served = 0;
        char why[512] = "";
        for (size_t i = first; i < n; i++) {
                if (arr[i].status == NTFS_EFFECT_PENDING)
                        continue; /* in flight now, or awaiting recovery: nothing recorded */
                bool d = false;
                r = replay_one(into, &arr[i], steps, &d, why, sizeof why);
                if (r < 0) {
                        json_decref(steps);
                        json_decref(first_div);
                        ntfs_effects_free(arr, n);
                        return ntfs_http_error(resp, r, "replay into '%s' stopped: %s", into,
                                               why[0] ? why : ntfs_strerror(r));
                }
                const char *s = d_jstr(json_array_get(steps, json_array_size(steps) - 1), "status");
                if (strcmp(s, "served") == 0)
                        served++;
                else if (d)
                        div++;
                else
                        same++;
                if (d && json_is_null(first_div)) {
                        json_decref(first_div);
                        first_div = json_integer((json_int_t)arr[i].step);
                }
        }
        ntfs_effects_free(arr, n);
        log_info("replay into %s: %u same, %u diverged, %u served", into, same, div, served);
        json_t *o = d_commit_json(&base, "base");
        json_object_set_new(o, "session", json_string(name));
        json_object_set_new(o, "into", json_string(into));
        json_object_set_new(o, "steps", steps);
        json_object_set_new(o, "first_divergence", first_div);
        json_object_set_new(o, "same", json_integer(same));
        json_object_set_new(o, "diverged", json_integer(div));
        json_object_set_new(o, "served", json_integer(served));
        return d_reply(resp, 200, o);
}

int routes_replay_register(ntfs_router *rt) {
        static const struct ntfs_route routes[] = {
                { "POST /session/revive", h_revive, 0 },
                { "POST /v1/sessions/{name}/resume", h_resume, 0 },
                { "POST /v1/sessions/{name}/state", h_state, 0 },
                { "POST /v1/sessions/{name}/replay", h_replay, 0 },
        };
        return ntfs_router_add_table(rt, routes, ARRAY_SIZE(routes));
}
