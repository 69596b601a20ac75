/* SPDX-License-Identifier: MIT
 * routes-fetch.c — the gateway's routes: fetch_url and llm_generate, each
 * policy-checked and journaled write-ahead (docs/gateway.md, "The daemon
 * side").
 *
 *   POST /v1/sessions/{name}/fetch  {url, method?, idempotency_key?}
 *   POST /llm/generate              {messages, system?, tools?, max_tokens?, ...,
 *                                    session_id?, idempotency_key?}
 *   POST /v1/sessions/{name}/llm    the same, for a named session
 *
 * fetch_url is irreversible: a journaled key (the client's, or one derived
 * from the session's step) answers the recorded result, success or failure,
 * and never fetches again. llm_generate is recorded: the key is the client's
 * or derived from the request's content, a done row is served as is, and a
 * failed (or outcome_unknown) row lets the same request be generated again
 * under the next key of the chain "KEY", "KEY/r1", "KEY/r2"...
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/log.h"
#include "common/util.h"
#include "ctl/daemon.h"
#include "ctl/jsonutil.h"
#include "common/banned.h"

#define LLM_RETRY_CHAIN_MAX 64
#define _cleanup_json_ _cleanup_(json_decrefp) /* json_decrefp: jansson's own */

/* The negative error whose stable code is code, or -NTFS_EUPSTREAM. */
static int err_from_code(const char *code) {
        if (!code)
                return -NTFS_EUPSTREAM;
        for (int e = NTFS_EBASE + 1; e < NTFS_ELAST; e++)
                if (strcmp(ntfs_errcode(-e), code) == 0)
                        return -e;
        if (strcmp(code, ntfs_errcode(-ENOMEM)) == 0)
                return -ENOMEM;
        return -NTFS_EUPSTREAM;
}

/* The session must exist; then the policy (L1, quotas) admits the call and
 * its call counters are charged (d_policy_admit, ctl/routes-exec.c). */
static int admit(const char *session, const char *tool, char *why, size_t whylen) {
        struct ntfs_session_info si;
        int r = ntfs_session_get(D.st, session, &si);
        if (r < 0) {
                snprintf(why, whylen, "session '%s': %s", session, ntfs_strerror(r));
                return r;
        }
        return d_policy_admit(session, tool, NULL, NULL, why, whylen);
}

static uint64_t next_step(const char *session) {
        struct ntfs_effect *list = NULL;
        size_t n = 0;
        if (ntfs_journal_effect_list(D.j, session, 0, 0, 0, &list, &n) == 0)
                ntfs_effects_free(list, n);
        return n + 1;
}

static json_t *error_json(int err, const char *msg) {
        return json_pack("{s:{s:s, s:s}}", "error", "code", ntfs_errcode(err), "message", msg);
}

/* ---- fetch_url ------------------------------------------------------------------------ */

/* A recorded row of an irreversible effect: its result, or its error. */
static int serve_recorded_fetch(struct ntfs_effect *eff, json_t **ret, char *why, size_t whylen) {
        if (eff->status == NTFS_EFFECT_PENDING) {
                snprintf(why, whylen, "effect %" PRId64 " with this idempotency key is still in flight", eff->id);
                return -NTFS_ECONFLICT;
        }
        if (eff->status == NTFS_EFFECT_OUTCOME_UNKNOWN) {
                snprintf(why, whylen, "effect %" PRId64 " with this idempotency key has an unknown outcome (%s); "
                         "an irreversible effect is never run again", eff->id, eff->reason ? eff->reason : "crash");
                return -NTFS_ECONFLICT;
        }
        json_t *res = eff->result_json ? json_loads(eff->result_json, 0, NULL) : NULL;
        if (eff->status == NTFS_EFFECT_FAILED) {
                json_t *e = json_object_get(res, "error");
                const char *code = json_string_value(json_object_get(e, "code"));
                const char *msg = json_string_value(json_object_get(e, "message"));
                snprintf(why, whylen, "%s (recorded by effect %" PRId64 ", not fetched again)",
                         msg ? msg : eff->reason ? eff->reason : "failed", eff->id);
                int err = err_from_code(code);
                json_decref(res);
                return err;
        }
        if (!json_is_object(res)) {
                json_decref(res);
                snprintf(why, whylen, "effect %" PRId64 ": the recorded result is unreadable", eff->id);
                return -NTFS_ECORRUPT;
        }
        json_object_set_new(res, "replayed", json_true());
        json_object_set_new(res, "effect_id", json_integer(eff->id));
        *ret = res;
        return 0;
}

static int run_fetch(const char *session, const char *url, const char *method, const char *key, json_t **ret,
                     char *why, size_t whylen) {
        static const char tool[] = "fetch_url";
        const struct ntfs_tool_spec *spec = ntfs_policy_tool(D.pol, tool);
        if (!spec) {
                snprintf(why, whylen, "unknown tool '%s'", tool);
                return -NTFS_ENOTFOUND;
        }
        if (!url || !*url) {
                snprintf(why, whylen, "a URL is required");
                return -NTFS_EBADREQ;
        }
        if (method && strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0 && strcmp(method, "POST") != 0) {
                snprintf(why, whylen, "method '%.16s' not supported (GET, HEAD, POST)", method);
                return -NTFS_EBADREQ;
        }
        /* A known key is served before the policy: a replay is not a new call. */
        if (key) {
                _cleanup_(ntfs_effect_release) struct ntfs_effect known = { 0 };
                if (ntfs_journal_effect_get_by_key(D.j, session, key, &known) == 0)
                        return serve_recorded_fetch(&known, ret, why, whylen);
        }
        int r = admit(session, tool, why, whylen);
        if (r < 0)
                return r;
        _cleanup_json_ json_t *input = json_pack("{s:s, s:s}", "url", url, "method", method ? method : "GET");
        _cleanup_free_ char *input_s = input ? json_dumps(input, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
        if (!input_s)
                return -ENOMEM;
        struct ntfs_effect_intent in = { .session = session, .step = next_step(session), .tool = tool,
                                         .effect_class = ntfs_effect_class_name(spec->cls), .input_json = input_s,
                                         .idempotency_key = key };
        _cleanup_(ntfs_effect_release) struct ntfs_effect eff = { 0 };
        bool existing = false;
        r = ntfs_journal_effect_begin(D.j, &in, &eff, &existing);
        if (r < 0) {
                snprintf(why, whylen, "journal: %s", ntfs_strerror(r));
                return r;
        }
        if (existing)
                return serve_recorded_fetch(&eff, ret, why, whylen);

        struct ntfs_fetch_opts fo = { .method = method };
        struct ntfs_fetch_result fr;
        /* Crash-matrix fault points (docs/recovery.md): crash only. */
        (void)NTFS_FAULT("fetch.after_begin");
        r = ntfs_gateway_fetch(D.gw, url, &fo, &fr);
        (void)NTFS_FAULT("fetch.after_fetch");
        if (r < 0) {
                const char *msg = fr.error[0] ? fr.error : ntfs_strerror(r);
                snprintf(why, whylen, "%s", msg);
                _cleanup_json_ json_t *ej = error_json(r, msg);
                _cleanup_free_ char *es = ej ? json_dumps(ej, JSON_COMPACT) : NULL;
                int fr2 = ntfs_journal_effect_finish(D.j, eff.id, NTFS_EFFECT_FAILED, es, NULL, msg);
                if (fr2 < 0)
                        log_warn("journal finish of effect %" PRId64 ": %s", eff.id, ntfs_strerror(fr2));
                ntfs_fetch_result_release(&fr);
                return r;
        }
        json_t *res = ntfs_fetch_result_to_json(&fr);
        uint64_t bytes = fr.bytes;
        ntfs_fetch_result_release(&fr);
        if (!res) {
                ntfs_journal_effect_finish(D.j, eff.id, NTFS_EFFECT_FAILED, NULL, NULL, "out of memory");
                return -ENOMEM;
        }
        json_object_set_new(res, "tool", json_string(tool));
        json_object_set_new(res, "effect", json_string(ntfs_effect_class_name(spec->cls)));
        json_object_set_new(res, "effect_id", json_integer(eff.id));
        _cleanup_free_ char *res_s = json_dumps(res, JSON_COMPACT);
        r = ntfs_journal_effect_finish(D.j, eff.id, NTFS_EFFECT_DONE, res_s, NULL, NULL);
        if (r < 0)
                log_warn("journal finish of effect %" PRId64 ": %s", eff.id, ntfs_strerror(r));
        d_policy_charge(session, 0, bytes);
        json_object_set_new(res, "replayed", json_false());
        *ret = res;
        return 0;
}

int d_run_fetch(const char *session, const char *url, const char *key, json_t **ret, char *why, size_t whylen) {
        return run_fetch(session, url, NULL, key, ret, why, whylen);
}

static int h_fetch(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        static const char *const keys[] = { "url", "method", "idempotency_key", NULL };
        const char *name = d_param(req, "name"), *url, *method, *key;
        int r;
        if ((r = d_check_keys(req, resp, keys)) < 0 || (r = d_want_string(req, resp, "url", true, &url)) < 0 ||
            (r = d_want_string(req, resp, "method", false, &method)) < 0 ||
            (r = d_want_key(req, resp, &key)) < 0)
                return r;
        char why[768] = "";
        json_t *res = NULL;
        r = run_fetch(name, url, method, key, &res, why, sizeof why);
        if (r < 0)
                return ntfs_http_error(resp, r, "%s", why[0] ? why : ntfs_strerror(r));
        return d_reply(resp, 200, res);
}

/* ---- llm_generate ----------------------------------------------------------------------- */

/* Members of the request passed to the Messages API (the gateway checks them). */
static const char *const llm_keys[] = { "messages", "system", "tools", "tool_choice", "max_tokens",
                                        "temperature", "top_p", "top_k", "stop_sequences", "metadata",
                                        "model", "stream", "session_id", "idempotency_key", NULL };

/* Runs the generation; *ret is the response (new reference). */
static int llm_call(json_t *request, json_t **ret, char *why, size_t whylen) {
        int r = ntfs_gateway_llm_generate_ex(D.gw, request, ret, why, whylen);
        if (r < 0 && !why[0])
                snprintf(why, whylen, "%s", ntfs_strerror(r));
        return r;
}

static int run_llm(const char *session, json_t *request, const char *key, json_t **ret, char *why,
                   size_t whylen) {
        static const char tool[] = "llm_generate";
        const struct ntfs_tool_spec *spec = ntfs_policy_tool(D.pol, tool);
        if (!spec) {
                snprintf(why, whylen, "unknown tool '%s'", tool);
                return -NTFS_ENOTFOUND;
        }
        if (!session) { /* nothing to journal into: a plain gateway call */
                int r = ntfs_policy_check_call(D.pol, NULL, tool, NULL, why, whylen);
                if (r < 0)
                        return r;
                if ((r = llm_call(request, ret, why, whylen)) < 0)
                        return r;
                json_object_set_new(*ret, "journaled", json_false());
                return 0;
        }
        int r;
        _cleanup_free_ char *input_s = json_dumps(request, JSON_COMPACT | JSON_SORT_KEYS);
        if (!input_s)
                return -ENOMEM;
        char derived[65];
        if (!key) {
                /* The same request in the same session is the same generation. */
                if ((r = ntfs_journal_derive_key(session, 0, tool, input_s, derived)) < 0) {
                        snprintf(why, whylen, "request is not JSON");
                        return r;
                }
                key = derived;
        }
        if (strlen(key) > NTFS_JOURNAL_MAX_KEY - 8) {
                snprintf(why, whylen, "idempotency_key longer than %d bytes", NTFS_JOURNAL_MAX_KEY - 8);
                return -NTFS_EBADREQ;
        }
        /* A recorded generation is served before the policy (a resume is not a new call). */
        for (unsigned n = 0; n < LLM_RETRY_CHAIN_MAX; n++) {
                char k[NTFS_JOURNAL_MAX_KEY + 1];
                if (n == 0)
                        snprintf(k, sizeof k, "%s", key);
                else
                        snprintf(k, sizeof k, "%s/r%u", key, n);
                _cleanup_(ntfs_effect_release) struct ntfs_effect known = { 0 };
                if (ntfs_journal_effect_get_by_key(D.j, session, k, &known) < 0)
                        break;
                if (known.status == NTFS_EFFECT_DONE) {
                        json_t *res = known.result_json ? json_loads(known.result_json, 0, NULL) : NULL;
                        if (json_is_object(res)) {
                                json_object_set_new(res, "replayed", json_true());
                                json_object_set_new(res, "effect_id", json_integer(known.id));
                                *ret = res;
                                return 0;
                        }
                        json_decref(res);
                        break;
                }
        }
        r = admit(session, tool, why, whylen);
        if (r < 0)
                return r;
        _cleanup_(ntfs_effect_release) struct ntfs_effect eff = { 0 };
        bool existing = true;
        for (unsigned n = 0; existing; n++) {
                if (n >= LLM_RETRY_CHAIN_MAX) {
                        snprintf(why, whylen, "more than %d failed generations under this idempotency key",
                                 LLM_RETRY_CHAIN_MAX);
                        return -NTFS_ECONFLICT;
                }
                char k[NTFS_JOURNAL_MAX_KEY + 1];
                if (n == 0)
                        snprintf(k, sizeof k, "%s", key);
                else
                        snprintf(k, sizeof k, "%s/r%u", key, n);
                ntfs_effect_release(&eff);
                struct ntfs_effect_intent in = { .session = session, .step = next_step(session), .tool = tool,
                                                 .effect_class = ntfs_effect_class_name(spec->cls),
                                                 .input_json = input_s, .idempotency_key = k };
                r = ntfs_journal_effect_begin(D.j, &in, &eff, &existing);
                if (r < 0) {
                        snprintf(why, whylen, "journal: %s", ntfs_strerror(r));
                        return r;
                }
                if (!existing)
                        break;
                if (eff.status == NTFS_EFFECT_DONE) {
                        json_t *res = eff.result_json ? json_loads(eff.result_json, 0, NULL) : NULL;
                        if (!json_is_object(res)) {
                                json_decref(res);
                                snprintf(why, whylen, "effect %" PRId64 ": the recorded generation is unreadable",
                                         eff.id);
                                return -NTFS_ECORRUPT;
                        }
                        json_object_set_new(res, "replayed", json_true());
                        json_object_set_new(res, "effect_id", json_integer(eff.id));
                        *ret = res;
                        return 0;
                }
                if (eff.status == NTFS_EFFECT_PENDING) {
                        snprintf(why, whylen, "generation %" PRId64 " with this idempotency key is still in flight",
                                 eff.id);
                        return -NTFS_ECONFLICT;
                }
                /* failed or outcome_unknown: nothing was recorded; generate anew */
        }
        json_t *res = NULL;
        r = llm_call(request, &res, why, whylen);
        if (r < 0) {
                _cleanup_json_ json_t *ej = error_json(r, why);
                _cleanup_free_ char *es = ej ? json_dumps(ej, JSON_COMPACT) : NULL;
                int fr = ntfs_journal_effect_finish(D.j, eff.id, NTFS_EFFECT_FAILED, es, NULL, why);
                if (fr < 0)
                        log_warn("journal finish of effect %" PRId64 ": %s", eff.id, ntfs_strerror(fr));
                return r;
        }
        _cleanup_free_ char *res_s = json_dumps(res, JSON_COMPACT);
        r = ntfs_journal_effect_finish(D.j, eff.id, NTFS_EFFECT_DONE, res_s, NULL, NULL);
        if (r < 0) /* the generation is answered anyway; a resume will generate again */
                log_warn("journal finish of effect %" PRId64 ": %s", eff.id, ntfs_strerror(r));
        json_object_set_new(res, "replayed", json_false());
        json_object_set_new(res, "effect_id", json_integer(eff.id));
        *ret = res;
        return 0;
}

static int llm_handle(const char *session, const ntfs_http_request *req, ntfs_http_response *resp) {
        const char *key, *sid;
        int r;
        if ((r = d_check_keys(req, resp, llm_keys)) < 0 ||
            (r = d_want_key(req, resp, &key)) < 0 ||
            (r = d_want_string(req, resp, "session_id", false, &sid)) < 0)
                return r;
        if (!json_is_object(req->json))
                return ntfs_http_error(resp, -NTFS_EBADREQ, "the body must be a JSON object with 'messages'");
        if (!session)
                session = sid ? sid : req->conn_data && *req->conn_data ? (const char *)*req->conn_data : NULL;
        else if (sid && strcmp(sid, session) != 0)
                return ntfs_http_error(resp, -NTFS_EBADREQ, "session_id '%s' does not match the path", sid);
        _cleanup_json_ json_t *request = json_deep_copy(req->json);
        if (!request)
                return ntfs_http_error(resp, -ENOMEM, "out of memory");
        json_object_del(request, "session_id");
        json_object_del(request, "idempotency_key");
        char why[768] = "";
        json_t *res = NULL;
        r = run_llm(session, request, key, &res, why, sizeof why);
        if (r < 0)
                return ntfs_http_error(resp, r, "%s", why[0] ? why : ntfs_strerror(r));
        return d_reply(resp, 200, res);
}

static int h_llm_seed(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        return llm_handle(NULL, req, resp);
}

static int h_llm_session(void *ud, const ntfs_http_request *req, ntfs_http_response *resp) {
        return llm_handle(d_param(req, "name"), req, resp);
}

int routes_fetch_register(ntfs_router *rt) {
        static const struct ntfs_route routes[] = {
                { "POST /v1/sessions/{name}/fetch", h_fetch, 0 },
                { "POST /llm/generate", h_llm_seed, 0 },
                { "POST /v1/sessions/{name}/llm", h_llm_session, 0 },
        };
        return ntfs_router_add_table(rt, routes, ARRAY_SIZE(routes));
}
