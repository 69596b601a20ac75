/* SPDX-License-Identifier: MIT
 * routes-seed.c — the seed design's paths: /session/start, /session/end,
 * /tool/execute (NanoAgent's sidecar API, in the same shapes).
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
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

/* ---- the seed's paths ------------------------------------------------------------------- */

/* The daemon-wide current seed session: the last /session/start's, as
 * NanoAgent's sidecar keeps one, for calls that name none on a connection
 * that started none (each `curl` is a connection of its own). */
static pthread_mutex_t current_lock = PTHREAD_MUTEX_INITIALIZER;
static char *current;

static void current_set(const char *name) {
        char *c = name ? strdup(name) : NULL;
        pthread_mutex_lock(&current_lock);
        free(current);
        current = c;
        pthread_mutex_unlock(&current_lock);
}

char *d_seed_current(void) {
        pthread_mutex_lock(&current_lock);
        char *c = current ? strdup(current) : NULL;
        pthread_mutex_unlock(&current_lock);
        return c;
}

/* Clears the current session if it is name. */
static void current_clear(const char *name) {
        pthread_mutex_lock(&current_lock);
        if (current && strcmp(current, name) == 0) {
                free(current);
                current = NULL;
        }
        pthread_mutex_unlock(&current_lock);
}


static int h_seed_start(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "resume_session_id", "fork_at", NULL };
        const char *resume, *fork_at;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "resume_session_id", false, &resume)) < 0 ||
            (r = d_want_string(req, resp, "fork_at", false, &fork_at)) < 0)
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
                d_journal_session_created(name, (int64_t)req->peer.uid);
        }
        if (req->conn_data) {
                free(*req->conn_data);
                *req->conn_data = strdup(name);
        }
        current_set(name);
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
        return d_reply(resp, 200, json_pack("{s:s, s:s, s:b, s:o}", "session_id", name, "sandbox_id", name,
                                          "replay_mode", replay, "restored_messages", msgs));
}

/* The session a seed call is for (a copy, or NULL): its session_id, else
 * the one its connection started, else the daemon's current one. */
static char *req_session(const ntfs_http_request *req) {
        const char *s = d_jstr(req->json, "session_id");
        if (!s && req->conn_data && *req->conn_data)
                s = *req->conn_data;
        return s ? strdup(s) : d_seed_current();
}

static int h_seed_end(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        _cleanup_free_ char *s = req_session(req);
        if (!s)
                return ntfs_http_error(resp, -NTFS_ENOSESSION, "no session: call /session/start first");
        d_journal_session_ended(s);
        current_clear(s);
        if (req->conn_data && *req->conn_data && strcmp(*req->conn_data, s) == 0) {
                free(*req->conn_data);
                *req->conn_data = NULL;
        }
        return d_reply(resp, 200, json_object());
}

static int h_seed_tool(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "tool_name", "tool_input", "tool_use_id", "session_id", NULL };
        const char *tool, *key;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "tool_name", true, &tool)) < 0 ||
            (r = d_want_string(req, resp, "tool_use_id", false, &key)) < 0)
                return r;
        _cleanup_free_ char *s = req_session(req);
        if (!s)
                return ntfs_http_error(resp, -NTFS_ENOSESSION, "no session: call /session/start first");
        json_t *input = json_object_get(req->json, "tool_input");
        if (!json_is_object(input))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'tool_input' must be an object");
        const char *cmd = d_jstr(input, "command");
        if (!cmd)
                cmd = d_jstr(input, "url"); /* fetch_url */
        if (!cmd)
                cmd = d_jstr(input, "code"); /* run_python */
        if (!cmd)
                return ntfs_http_error(resp, -NTFS_EBADREQ,
                                       "tool_input.command (.url for fetch_url, .code for run_python) is required for %s",
                                       tool);
        char why[512] = "";
        json_t *res;
        r = d_run_tool(s, tool, cmd, key, 0, &res, why, sizeof why);
        if (r < 0)
                return ntfs_http_error(resp, r, "%s", why[0] ? why : ntfs_strerror(r));
        json_t *replayed = json_object_get(res, "replayed");
        json_t *o = json_pack("{s:O, s:s, s:b}", "result", res, "effect", d_jstr(res, "effect"), "replayed",
                              json_is_true(replayed));
        json_decref(res);
        return d_reply(resp, 200, o);
}

int routes_seed_register(ntfs_router *rt) {
        static const struct ntfs_route routes[] = {
                { "POST /session/start", h_seed_start, 0 },
                { "POST /session/end", h_seed_end, 0 },
                { "POST /tool/execute", h_seed_tool, 0 },
        };
        return ntfs_router_add_table(rt, routes, ARRAY_SIZE(routes));
}
