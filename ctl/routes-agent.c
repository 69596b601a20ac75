/* SPDX-License-Identifier: MIT
 * routes-agent.c — the daemon as the agent's state machine (docs/agent.md):
 *
 *   POST /step                      {session_id?, event?, cursor?, max_steps?}
 *   POST /v1/sessions/{name}/step   {event?, cursor?, max_steps?}
 *   -> {session_id, cursor, step, applied, next_action}
 *
 * The conversation lives in the journal as the session's agent state (the
 * same row ntfs-agent saves through /v1/sessions/{name}/state): each call
 * loads it, applies the event (ctl/step.c), saves it, and answers what to
 * do next. `cursor` counts the events applied; a client that sends the
 * cursor it was given with the last answer gets its event applied at most
 * once (a retry after a crash carries a cursor that is no longer current:
 * the event is not applied again and the current next action is answered,
 * with applied=false). Without an event the call just answers the next
 * action, so any client can pick up a session with no state of its own.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/log.h"
#include "common/util.h"
#include "ctl/daemon.h"
#include "ctl/step.h"
#include "common/banned.h"

/* One /step at a time: load, apply and save must not interleave. */
static pthread_mutex_t step_lock = PTHREAD_MUTEX_INITIALIZER;

static int step_locked(const char *session, const json_t *event, const json_t *cursor_in, uint64_t max_steps,
                       json_t **ret, char *why, size_t whylen) {
        struct ntfs_session_info si;
        int r = ntfs_session_get(D.st, session, &si);
        if (r < 0) {
                snprintf(why, whylen, "session '%s': %s", session, ntfs_strerror(r));
                return r;
        }
        json_t *messages = NULL;
        int64_t cursor = 0;
        bool no_journal_session = false;
        struct ntfs_agent_state as = { 0 };
        r = ntfs_journal_state_load(D.j, session, true, 0, &as);
        if (r == 0) {
                messages = as.messages_json ? json_loads(as.messages_json, 0, NULL) : NULL;
                cursor = as.cursor;
                ntfs_agent_state_release(&as);
                if (!json_is_array(messages)) {
                        json_decref(messages);
                        snprintf(why, whylen, "the saved state of '%s' is not a message array", session);
                        return -NTFS_ECONFLICT;
                }
        } else if (r == -NTFS_ENOTFOUND || r == -NTFS_ENOSESSION) {
                no_journal_session = r == -NTFS_ENOSESSION;
                messages = json_array();
                if (!messages)
                        return -ENOMEM;
        } else {
                snprintf(why, whylen, "journal: %s", ntfs_strerror(r));
                return r;
        }
        bool applied = false;
        if (event && (!cursor_in || json_integer_value(cursor_in) == cursor)) {
                r = ntfs_step_apply(messages, event, why, whylen);
                if (r < 0) {
                        json_decref(messages);
                        return r;
                }
                if (r > 0) {
                        applied = true;
                        cursor++;
                        _cleanup_free_ char *ms = json_dumps(messages, JSON_COMPACT);
                        if (!ms) {
                                json_decref(messages);
                                return -ENOMEM;
                        }
                        char hex[NTFS_HEX_LEN + 1];
                        ntfs_hash_hex(&si.head, hex);
                        uint64_t gens = ntfs_step_generations(messages);
                        if (no_journal_session) /* made with /v1/sessions: no journal row yet */
                                d_journal_session_created(session, -1);
                        r = ntfs_journal_state_save(D.j, session, gens, ms, cursor, hex);
                        if (r < 0) {
                                json_decref(messages);
                                snprintf(why, whylen, "journal: cannot save the state: %s", ntfs_strerror(r));
                                return r;
                        }
                }
        }
        json_t *next = ntfs_step_next(messages, session, max_steps);
        uint64_t gens = ntfs_step_generations(messages);
        json_decref(messages);
        if (!next)
                return -ENOMEM;
        json_t *o = json_pack("{s:s, s:I, s:I, s:b, s:o}", "session_id", session, "cursor", (json_int_t)cursor,
                              "step", (json_int_t)gens, "applied", applied, "next_action", next);
        if (!o)
                return -ENOMEM;
        *ret = o;
        return 0;
}

static int step_handle(const char *session, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "session_id", "event", "cursor", "max_steps", NULL };
        const char *sid;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "session_id", false, &sid)) < 0)
                return r;
        if (!session)
                session = sid ? sid : req->conn_data && *req->conn_data ? (const char *)*req->conn_data : NULL;
        else if (sid && strcmp(sid, session) != 0)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "session_id '%s' does not match the path", sid);
        if (!session)
                return ntfs_http_error(resp, -NTFS_ENOSESSION, "no session: give 'session_id' or call /session/start");
        json_t *event = req->json ? json_object_get(req->json, "event") : NULL;
        json_t *cursor = req->json ? json_object_get(req->json, "cursor") : NULL;
        json_t *ms = req->json ? json_object_get(req->json, "max_steps") : NULL;
        if (event && !json_is_object(event))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'event' must be an object");
        if (cursor && (!json_is_integer(cursor) || json_integer_value(cursor) < 0))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'cursor' must be a non-negative integer");
        if (ms && (!json_is_integer(ms) || json_integer_value(ms) < 1 || json_integer_value(ms) > 1000000))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "'max_steps' must be an integer in [1, 1000000]");
        uint64_t max_steps = ms ? (uint64_t)json_integer_value(ms) : NTFS_STEP_DEFAULT_MAX_STEPS;
        char why[512] = "";
        json_t *o = NULL;
        pthread_mutex_lock(&step_lock);
        r = step_locked(session, event, cursor, max_steps, &o, why, sizeof why);
        pthread_mutex_unlock(&step_lock);
        if (r < 0)
                return ntfs_http_error(resp, r, "%s", why[0] ? why : ntfs_strerror(r));
        return d_reply(resp, 200, o);
}

static int h_step_seed(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        return step_handle(NULL, req, resp);
}

static int h_step_session(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        return step_handle(d_param(req, "name"), req, resp);
}

int routes_agent_register(ntfs_router *rt) {
        static const struct ntfs_route routes[] = {
                { "POST /step", h_step_seed, 0 },
                { "POST /v1/sessions/{name}/step", h_step_session, 0 },
        };
        return ntfs_router_add_table(rt, routes, ARRAY_SIZE(routes));
}
