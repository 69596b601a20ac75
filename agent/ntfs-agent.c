/* SPDX-License-Identifier: MIT
 * ntfs-agent — the pure agent loop (docs/agent.md).
 *
 * It speaks only to ntfsd's control socket: a generation is asked of the
 * daemon (POST /llm/generate, keyed "gen:<session>:<n>" so that a repeated
 * request returns the recorded generation), each tool_use block is run
 * through POST /tool/execute with the block's id as its idempotency key,
 * and the message history is saved in the journal after every step
 * (POST /v1/sessions/{name}/state). It holds no key, opens no file but the
 * task file, writes no log (progress on stderr with -v), and recovers
 * nothing by itself: `--resume SESSION` loads the saved history and goes on
 * from there; whatever the daemon answers for an already journaled call is
 * what the call returned.
 *
 * Exit codes: 0 the model ended its turn; 1 an error (the model or the
 * daemon refused something); 2 usage; 3 the step limit was reached; 75 the
 * daemon could not be reached (a supervisor restarts the agent later).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/prompt.h"
#include "common/cleanup.h"
#include "common/err.h"
#include "common/util.h"
#include "ctl/client/client.h"
#include "common/banned.h"

#define EXIT_DONE 0
#define EXIT_ERROR 1
#define EXIT_USAGE 2
#define EXIT_STEP_LIMIT 3
#define EXIT_UNREACHABLE 75

#define TASK_MAX (1024 * 1024)
#define DEFAULT_MAX_STEPS 50
#define TOOL_TEXT_MAX (100 * 1024)
/* A re-run of a call that a daemon crash interrupted, at most this often. */
#define RETRY_INTERRUPTED_MAX 3
/* A call still running in the daemon (a previous agent's) is waited for. */
#define PENDING_POLL_MS 200
#define PENDING_WAIT_MAX_S 3600

struct agent {
        ntfs_client *c;
        char session[256];
        json_t *messages;
        uint64_t step; /* generations done */
        uint64_t max_steps;
        bool verbose;
        json_t *system, *tools;
        char last_code[64]; /* the error code of the last refused call */
};

/* A call's outcome: 0 a 2xx answer, CALL_SERVER the daemon refused (message
 * in errbuf), CALL_TRANSPORT the daemon is unreachable. */
#define CALL_SERVER (-1)
#define CALL_TRANSPORT (-2)

static void vlog(const struct agent *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void vlog(const struct agent *a, const char *fmt, ...) {
        if (!a->verbose)
                return;
        va_list ap;
        va_start(ap, fmt);
        fputs("ntfs-agent: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
}

static int call(struct agent *a, const char *method, const char *path, const json_t *body, json_t **ret,
                char *err, size_t errlen) {
        struct ntfs_client_response res = { 0 };
        a->last_code[0] = 0;
        int r = ntfs_client_request(a->c, method, path, body, &res);
        if (r < 0) {
                snprintf(err, errlen, "%s %s: daemon unreachable: %s", method, path, ntfs_strerror(r));
                return CALL_TRANSPORT;
        }
        if (res.status < 200 || res.status >= 300) {
                const char *code = NULL, *msg = NULL;
                (void)ntfs_client_error(&res, &code, &msg);
                snprintf(a->last_code, sizeof a->last_code, "%s", code ? code : "");
                snprintf(err, errlen, "%s %s: %s (%s)", method, path, msg ? msg : "error", code ? code : "?");
                ntfs_client_response_release(&res);
                return CALL_SERVER;
        }
        if (ret)
                *ret = res.json ? json_incref(res.json) : json_object();
        ntfs_client_response_release(&res);
        return 0;
}

static int exit_for(int r) {
        return r == CALL_TRANSPORT ? EXIT_UNREACHABLE : EXIT_ERROR;
}

static void sleep_ms(unsigned ms) {
        struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* The daemon refused because the same key is still running (an agent that
 * died left it in flight): the answer comes when it finishes. */
static bool in_flight(const struct agent *a, const char *err) {
        return strcmp(a->last_code, "conflict") == 0 && strstr(err, "still in flight") != NULL;
}

/* ---- state ----------------------------------------------------------------------------------- */

static int save_state(struct agent *a, char *err, size_t errlen) {
        char path[600], esc[512];
        if (ntfs_client_escape(a->session, esc, sizeof esc) < 0)
                return CALL_SERVER;
        snprintf(path, sizeof path, "/v1/sessions/%s/state", esc);
        json_t *body = json_pack("{s:O, s:I, s:I}", "messages", a->messages, "cursor",
                                 (json_int_t)json_array_size(a->messages), "step", (json_int_t)a->step);
        if (!body)
                return CALL_SERVER;
        int r = call(a, "POST", path, body, NULL, err, errlen);
        json_decref(body);
        return r;
}

static int load_state(struct agent *a, char *err, size_t errlen) {
        char path[600], esc[512];
        if (ntfs_client_escape(a->session, esc, sizeof esc) < 0) {
                snprintf(err, errlen, "session name too long");
                return CALL_SERVER;
        }
        snprintf(path, sizeof path, "/v1/sessions/%s/resume", esc);
        json_t *body = json_pack("{s:i}", "effects", 0), *o = NULL;
        int r = call(a, "POST", path, body, &o, err, errlen);
        json_decref(body);
        if (r < 0)
                return r;
        json_t *m = json_object_get(o, "messages");
        json_t *st = json_object_get(o, "step");
        if (!json_is_array(m)) {
                json_decref(o);
                snprintf(err, errlen, "session '%s' has no saved message history", a->session);
                return CALL_SERVER;
        }
        json_decref(a->messages);
        a->messages = json_incref(m);
        a->step = json_is_integer(st) && json_integer_value(st) > 0 ? (uint64_t)json_integer_value(st) : 0;
        json_decref(o);
        return 0;
}

/* ---- tools ----------------------------------------------------------------------------------- */

static void text_append(char **buf, size_t *len, const char *s) {
        if (!s || !*buf)
                return;
        size_t n = strlen(s);
        if (*len + n > TOOL_TEXT_MAX)
                n = TOOL_TEXT_MAX - *len;
        char *p = realloc(*buf, *len + n + 1);
        if (!p) {
                free(*buf);
                *buf = NULL;
                return;
        }
        memcpy(p + *len, s, n);
        *len += n;
        p[*len] = 0;
        *buf = p;
}

/* The text the model sees for a tool's result. Only what the call produced:
 * nothing that differs between a first run and a journaled answer
 * (replayed, effect ids, durations), so that a resumed run shows the model
 * the same conversation. */
static char *result_text(const json_t *res, bool *is_error) {
        char *buf = calloc(1, 1);
        size_t len = 0;
        char line[256];
        *is_error = false;
        json_t *ec = json_object_get(res, "exit_code");
        const char *status = json_string_value(json_object_get(res, "status"));
        if (json_is_integer(ec)) {
                snprintf(line, sizeof line, "exit code: %" JSON_INTEGER_FORMAT "%s\n", json_integer_value(ec),
                         json_is_true(json_object_get(res, "timed_out")) ? " (timed out)" : "");
                text_append(&buf, &len, line);
                text_append(&buf, &len, json_string_value(json_object_get(res, "stdout")));
                const char *e = json_string_value(json_object_get(res, "stderr"));
                if (e && *e) {
                        text_append(&buf, &len, "\n[stderr]\n");
                        text_append(&buf, &len, e);
                }
                *is_error = json_integer_value(ec) != 0 || json_is_true(json_object_get(res, "timed_out"));
        } else if (json_object_get(res, "body") && json_is_integer(json_object_get(res, "status"))) {
                snprintf(line, sizeof line, "HTTP %" JSON_INTEGER_FORMAT "%s\n",
                         json_integer_value(json_object_get(res, "status")),
                         json_is_true(json_object_get(res, "truncated")) ? " (truncated)" : "");
                text_append(&buf, &len, line);
                text_append(&buf, &len, json_string_value(json_object_get(res, "body")));
                *is_error = json_integer_value(json_object_get(res, "status")) >= 400;
        } else if (status) {
                const char *reason = json_string_value(json_object_get(res, "reason"));
                snprintf(line, sizeof line, "%s%s", status, reason ? ": " : "");
                text_append(&buf, &len, line);
                text_append(&buf, &len, reason);
                *is_error = strcmp(status, "done") != 0;
        } else {
                json_t *copy = json_deep_copy(res);
                static const char *const drop[] = { "replayed", "effect_id", "duration_ms", "checkpoint", "short",
                                                    "snapshot_id", "changed" };
                for (size_t i = 0; copy && i < ARRAY_SIZE(drop); i++)
                        json_object_del(copy, drop[i]);
                _cleanup_free_ char *s = copy ? json_dumps(copy, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
                json_decref(copy);
                text_append(&buf, &len, s ? s : "(no result)");
        }
        return buf;
}

/* Runs one tool_use block through the daemon; *ret gets the tool_result
 * block. A server refusal (policy, unknown tool) becomes an error result
 * for the model; only an unreachable daemon fails the call. */
static int run_tool(struct agent *a, const char *id, const char *name, json_t *input, json_t **ret, char *err,
                    size_t errlen) {
        char key[300];
        snprintf(key, sizeof key, "%s", id);
        unsigned retries = 0;
        int64_t deadline = ntfs_mono_ns() + (int64_t)PENDING_WAIT_MAX_S * 1000000000LL;
        _cleanup_free_ char *text = NULL;
        bool is_error = false;
        for (;;) {
                json_t *body = json_pack("{s:s, s:s, s:O, s:s}", "session_id", a->session, "tool_name", name,
                                         "tool_input", input ? input : json_object(), "tool_use_id", key);
                json_t *o = NULL;
                char why[1024] = "";
                int r = call(a, "POST", "/tool/execute", body, &o, why, sizeof why);
                json_decref(body);
                if (r == CALL_TRANSPORT) {
                        snprintf(err, errlen, "%s", why);
                        return r;
                }
                if (r == CALL_SERVER && in_flight(a, why) && ntfs_mono_ns() < deadline) {
                        vlog(a, "%s: still running in the daemon, waiting", key);
                        sleep_ms(PENDING_POLL_MS);
                        continue;
                }
                if (r == CALL_SERVER) {
                        text = strdup(why);
                        is_error = true;
                        break;
                }
                json_t *res = json_object_get(o, "result");
                const char *status = json_string_value(json_object_get(res, "status"));
                bool replayed = json_is_true(json_object_get(o, "replayed"));
                const char *effect = json_string_value(json_object_get(o, "effect"));
                if (replayed && status && strcmp(status, "pending") == 0 && ntfs_mono_ns() < deadline) {
                        /* Still running for an agent that died: wait for it. */
                        json_decref(o);
                        vlog(a, "%s: still running in the daemon, waiting", key);
                        sleep_ms(PENDING_POLL_MS);
                        continue;
                }
                if (replayed && status && strcmp(status, "failed") == 0 && !json_object_get(res, "exit_code") &&
                    !(effect && strcmp(effect, "irreversible") == 0) && retries < RETRY_INTERRUPTED_MAX) {
                        /* A daemon crash interrupted it before it finished; the
                         * daemon rolled its writes back and lets it run again
                         * under a new key (docs/recovery.md). */
                        retries++;
                        snprintf(key, sizeof key, "%s#retry%u", id, retries);
                        vlog(a, "%s: interrupted by a daemon crash, running it again as %s", id, key);
                        json_decref(o);
                        continue;
                }
                vlog(a, "%s %s: %s%s", name, key, status ? status : "done", replayed ? " (from the journal)" : "");
                text = result_text(res, &is_error);
                json_decref(o);
                break;
        }
        if (!text) {
                snprintf(err, errlen, "out of memory");
                return CALL_SERVER;
        }
        *ret = json_pack("{s:s, s:s, s:s, s:b}", "type", "tool_result", "tool_use_id", id, "content", text,
                         "is_error", is_error);
        return *ret ? 0 : CALL_SERVER;
}

/* ---- generations ------------------------------------------------------------------------------ */

static int generate(struct agent *a, const char *key, const json_t *messages, const json_t *system,
                    const json_t *tools, json_t **ret, char *err, size_t errlen) {
        json_t *body = json_pack("{s:s, s:s, s:O, s:O, s:O}", "session_id", a->session, "idempotency_key", key,
                                 "messages", messages, "system", system, "tools", tools);
        if (!body) {
                snprintf(err, errlen, "out of memory");
                return CALL_SERVER;
        }
        vlog(a, "generation %s", key);
        int64_t deadline = ntfs_mono_ns() + (int64_t)PENDING_WAIT_MAX_S * 1000000000LL;
        int r;
        while ((r = call(a, "POST", "/llm/generate", body, ret, err, errlen)) == CALL_SERVER && in_flight(a, err) &&
               ntfs_mono_ns() < deadline)
                sleep_ms(PENDING_POLL_MS);
        json_decref(body);
        if (r == 0 && !json_is_array(json_object_get(*ret, "content"))) {
                json_decref(*ret);
                snprintf(err, errlen, "/llm/generate answered without a content array");
                return CALL_SERVER;
        }
        return r;
}

static bool has_tool_use(const json_t *msg) {
        size_t i;
        json_t *b;
        json_array_foreach(json_object_get(msg, "content"), i, b)
                if (json_is_string(json_object_get(b, "type")) &&
                    strcmp(json_string_value(json_object_get(b, "type")), "tool_use") == 0)
                        return true;
        return false;
}

static void print_final(const json_t *msg) {
        json_t *content = json_object_get(msg, "content");
        if (json_is_string(content)) {
                printf("%s\n", json_string_value(content));
                return;
        }
        size_t i;
        json_t *b;
        json_array_foreach(content, i, b)
                if (json_is_string(json_object_get(b, "text")))
                        printf("%s\n", json_string_value(json_object_get(b, "text")));
        fflush(stdout);
}

/* ---- the loop (the agent keeps the conversation) ---------------------------------------------- */

static int loop(struct agent *a) {
        char err[1200] = "";
        for (;;) {
                size_t n = json_array_size(a->messages);
                if (n == 0) {
                        fprintf(stderr, "ntfs-agent: session '%s' has no task\n", a->session);
                        return EXIT_ERROR;
                }
                json_t *last = json_array_get(a->messages, n - 1);
                const char *role = json_string_value(json_object_get(last, "role"));
                if (role && strcmp(role, "assistant") == 0) {
                        if (!has_tool_use(last)) {
                                vlog(a, "done after %" PRIu64 " generation(s)", a->step);
                                print_final(last);
                                return EXIT_DONE;
                        }
                        json_t *results = json_array();
                        size_t i;
                        json_t *b;
                        json_array_foreach(json_object_get(last, "content"), i, b) {
                                const char *type = json_string_value(json_object_get(b, "type"));
                                if (!type || strcmp(type, "tool_use") != 0)
                                        continue;
                                const char *id = json_string_value(json_object_get(b, "id"));
                                const char *name = json_string_value(json_object_get(b, "name"));
                                json_t *tr = NULL;
                                int r;
                                if (!id || !name) {
                                        tr = json_pack("{s:s, s:s, s:s, s:b}", "type", "tool_result", "tool_use_id",
                                                       id ? id : "", "content", "malformed tool_use block",
                                                       "is_error", true);
                                        r = tr ? 0 : CALL_SERVER;
                                } else
                                        r = run_tool(a, id, name, json_object_get(b, "input"), &tr, err, sizeof err);
                                if (r < 0) {
                                        json_decref(results);
                                        fprintf(stderr, "ntfs-agent: %s\n", err);
                                        return exit_for(r);
                                }
                                json_array_append_new(results, tr);
                        }
                        json_array_append_new(a->messages, json_pack("{s:s, s:o}", "role", "user", "content", results));
                } else {
                        if (a->step >= a->max_steps) {
                                fprintf(stderr, "ntfs-agent: step limit (%" PRIu64 ") reached in session %s\n",
                                        a->max_steps, a->session);
                                return EXIT_STEP_LIMIT;
                        }
                        char key[400];
                        snprintf(key, sizeof key, NTFS_AGENT_GEN_KEY_FMT, a->session, (unsigned long long)a->step + 1);
                        json_t *g = NULL;
                        int r = generate(a, key, a->messages, a->system, a->tools, &g, err, sizeof err);
                        if (r < 0) {
                                fprintf(stderr, "ntfs-agent: %s\n", err);
                                return exit_for(r);
                        }
                        json_array_append_new(a->messages, json_pack("{s:s, s:O}", "role", "assistant", "content",
                                                                     json_object_get(g, "content")));
                        vlog(a, "generation %" PRIu64 ": stop_reason %s", a->step + 1,
                             json_string_value(json_object_get(g, "stop_reason")) ?: "?");
                        json_decref(g);
                        a->step++;
                }
                int r = save_state(a, err, sizeof err);
                if (r < 0) {
                        fprintf(stderr, "ntfs-agent: cannot save the state: %s\n", err);
                        return exit_for(r);
                }
        }
}

/* ---- the /step driver (the daemon keeps the conversation) ------------------------------------- */

static int step_loop(struct agent *a, const char *task) {
        char err[1200] = "";
        json_t *event = task ? json_pack("{s:s, s:s}", "type", "user_message", "content", task) : NULL;
        json_t *cursor = NULL;
        for (uint64_t iter = 0;; iter++) {
                json_t *body = json_pack("{s:s, s:I}", "session_id", a->session, "max_steps", (json_int_t)a->max_steps);
                if (event)
                        json_object_set_new(body, "event", event);
                if (cursor)
                        json_object_set_new(body, "cursor", cursor);
                event = cursor = NULL;
                json_t *o = NULL;
                int r = call(a, "POST", "/step", body, &o, err, sizeof err);
                json_decref(body);
                if (r < 0) {
                        fprintf(stderr, "ntfs-agent: %s\n", err);
                        return exit_for(r);
                }
                json_t *act = json_object_get(o, "next_action");
                const char *type = json_string_value(json_object_get(act, "type"));
                cursor = json_incref(json_object_get(o, "cursor"));
                if (!type) {
                        json_decref(o);
                        json_decref(cursor);
                        fprintf(stderr, "ntfs-agent: /step answered no next_action\n");
                        return EXIT_ERROR;
                }
                vlog(a, "/step: %s", type);
                if (strcmp(type, "done") == 0 || strcmp(type, "wait_user") == 0) {
                        const char *reason = json_string_value(json_object_get(act, "reason"));
                        int rc = reason && strcmp(reason, "step_limit") == 0 ? EXIT_STEP_LIMIT : EXIT_DONE;
                        if (json_is_object(json_object_get(act, "message")))
                                print_final(json_object_get(act, "message"));
                        if (rc == EXIT_STEP_LIMIT)
                                fprintf(stderr, "ntfs-agent: step limit (%" PRIu64 ") reached in session %s\n",
                                        a->max_steps, a->session);
                        json_decref(o);
                        json_decref(cursor);
                        return rc;
                }
                if (strcmp(type, "call_llm") == 0) {
                        const char *key = json_string_value(json_object_get(act, "idempotency_key"));
                        json_t *g = NULL;
                        r = generate(a, key ? key : "", json_object_get(act, "messages"),
                                     json_object_get(act, "system"), json_object_get(act, "tools"), &g, err,
                                     sizeof err);
                        if (r < 0) {
                                json_decref(o);
                                json_decref(cursor);
                                fprintf(stderr, "ntfs-agent: %s\n", err);
                                return exit_for(r);
                        }
                        event = json_pack("{s:s, s:O, s:O}", "type", "llm_result", "content",
                                          json_object_get(g, "content"), "stop_reason",
                                          json_object_get(g, "stop_reason") ?: json_null());
                        json_decref(g);
                } else if (strcmp(type, "execute_tool") == 0) {
                        const char *id = json_string_value(json_object_get(act, "tool_use_id"));
                        const char *name = json_string_value(json_object_get(act, "tool_name"));
                        json_t *tr = NULL;
                        r = run_tool(a, id ? id : "", name ? name : "", json_object_get(act, "tool_input"), &tr, err,
                                     sizeof err);
                        if (r < 0) {
                                json_decref(o);
                                json_decref(cursor);
                                fprintf(stderr, "ntfs-agent: %s\n", err);
                                return exit_for(r);
                        }
                        event = json_pack("{s:s, s:O, s:O, s:O}", "type", "tool_result", "tool_use_id",
                                          json_object_get(tr, "tool_use_id"), "content",
                                          json_object_get(tr, "content"), "is_error",
                                          json_object_get(tr, "is_error"));
                        json_decref(tr);
                } else {
                        fprintf(stderr, "ntfs-agent: unknown next_action '%s'\n", type);
                        json_decref(o);
                        json_decref(cursor);
                        return EXIT_ERROR;
                }
                json_decref(o);
                if (!event) {
                        json_decref(cursor);
                        fprintf(stderr, "ntfs-agent: out of memory\n");
                        return EXIT_ERROR;
                }
        }
}

/* ---- main ------------------------------------------------------------------------------------- */

static void usage(FILE *f) {
        fprintf(f, "usage: ntfs-agent [options] TASK\n"
                   "       ntfs-agent [options] --task-file FILE\n"
                   "       ntfs-agent [options] --resume SESSION\n"
                   "The pure agent loop: asks ntfsd for generations (/llm/generate), runs every tool call\n"
                   "through it (/tool/execute) and saves its history in the journal after each step.\n"
                   "  --socket PATH        ntfsd's socket (default: $NTFS_SOCKET, else $NTFS_STORE/ntfsd.sock,\n"
                   "                       else .store/ntfsd.sock)\n"
                   "  --resume SESSION     continue SESSION from its saved history\n"
                   "  --task-file FILE     read the task from FILE\n"
                   "  --max-steps N        stop after N generations (default %d; exit 3)\n"
                   "  --step               let the daemon keep the conversation (POST /step)\n"
                   "  -v, --verbose        progress on stderr\n"
                   "Exit: 0 done, 1 error, 2 usage, 3 step limit, 75 daemon unreachable.\n",
                DEFAULT_MAX_STEPS);
}

static int start_session(struct agent *a) {
        char err[1200];
        json_t *o = NULL;
        json_t *body = json_object();
        int r = call(a, "POST", "/session/start", body, &o, err, sizeof err);
        json_decref(body);
        if (r < 0) {
                fprintf(stderr, "ntfs-agent: %s\n", err);
                return exit_for(r);
        }
        const char *s = json_string_value(json_object_get(o, "session_id"));
        if (!s || strlen(s) >= sizeof a->session) {
                json_decref(o);
                fprintf(stderr, "ntfs-agent: /session/start answered no session_id\n");
                return EXIT_ERROR;
        }
        snprintf(a->session, sizeof a->session, "%s", s);
        json_decref(o);
        printf("session %s\n", a->session);
        fflush(stdout);
        return 0;
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 'S' }, { "resume", required_argument, NULL, 'r' },
                { "task-file", required_argument, NULL, 'f' }, { "max-steps", required_argument, NULL, 'n' },
                { "step", no_argument, NULL, 's' },         { "verbose", no_argument, NULL, 'v' },
                { "help", no_argument, NULL, 'h' },         { NULL, 0, NULL, 0 },
        };
        const char *sock = getenv("NTFS_SOCKET"), *resume = NULL, *task_file = NULL;
        struct agent a = { .max_steps = DEFAULT_MAX_STEPS };
        bool step_mode = false;
        int c;
        while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
                switch (c) {
                case 'S':
                        sock = optarg;
                        break;
                case 'r':
                        resume = optarg;
                        break;
                case 'f':
                        task_file = optarg;
                        break;
                case 'n':
                        if (ntfs_parse_u64(optarg, 1000000, &a.max_steps) < 0 || a.max_steps == 0) {
                                fprintf(stderr, "ntfs-agent: --max-steps wants a number in [1, 1000000]\n");
                                return EXIT_USAGE;
                        }
                        break;
                case 's':
                        step_mode = true;
                        break;
                case 'v':
                        a.verbose = true;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return EXIT_USAGE;
                }
        }
        int ntask = (optind < argc) + (task_file != NULL) + (resume != NULL);
        if (ntask != 1 || argc - optind > 1) {
                usage(stderr);
                return EXIT_USAGE;
        }
        _cleanup_free_ char *task = NULL;
        if (task_file) {
                size_t len;
                int r = ntfs_read_file(task_file, TASK_MAX, &task, &len);
                if (r < 0) {
                        fprintf(stderr, "ntfs-agent: cannot read %s: %s\n", task_file, ntfs_strerror(r));
                        return EXIT_USAGE;
                }
        } else if (optind < argc && !(task = strdup(argv[optind]))) {
                return EXIT_ERROR;
        }
        if (task && !*task) {
                fprintf(stderr, "ntfs-agent: the task is empty\n");
                return EXIT_USAGE;
        }
        if (resume && (!*resume || strlen(resume) >= sizeof a.session)) {
                fprintf(stderr, "ntfs-agent: bad session name\n");
                return EXIT_USAGE;
        }

        char defsock[4096];
        if (!sock || !*sock) {
                const char *store = getenv("NTFS_STORE");
                snprintf(defsock, sizeof defsock, "%s/ntfsd.sock", store && *store ? store : ".store");
                sock = defsock;
        }
        int r = ntfs_client_new(sock, &a.c);
        if (r < 0) {
                fprintf(stderr, "ntfs-agent: %s: %s\n", sock, ntfs_strerror(r));
                return EXIT_ERROR;
        }
        /* A tool call or a generation may take long; the daemon bounds both. */
        ntfs_client_set_timeout(a.c, 0);
        a.system = json_string(NTFS_AGENT_SYSTEM_PROMPT);
        a.tools = json_loads(NTFS_AGENT_TOOLS_JSON, 0, NULL);
        a.messages = json_array();
        int rc = EXIT_ERROR;
        if (!a.system || !a.tools || !a.messages)
                goto out;
        char err[1200];
        if (resume) {
                snprintf(a.session, sizeof a.session, "%s", resume);
                if (step_mode)
                        rc = step_loop(&a, NULL);
                else if ((r = load_state(&a, err, sizeof err)) < 0) {
                        fprintf(stderr, "ntfs-agent: %s\n", err);
                        rc = exit_for(r);
                } else {
                        vlog(&a, "resuming %s at generation %" PRIu64 " (%zu messages)", a.session, a.step,
                             json_array_size(a.messages));
                        rc = loop(&a);
                }
        } else {
                if ((rc = start_session(&a)) != 0)
                        goto out;
                if (step_mode)
                        rc = step_loop(&a, task);
                else {
                        json_array_append_new(a.messages, json_pack("{s:s, s:s}", "role", "user", "content", task));
                        if ((r = save_state(&a, err, sizeof err)) < 0) {
                                fprintf(stderr, "ntfs-agent: cannot save the state: %s\n", err);
                                rc = exit_for(r);
                        } else
                                rc = loop(&a);
                }
        }
out:
        json_decref(a.messages);
        json_decref(a.system);
        json_decref(a.tools);
        ntfs_client_free(a.c);
        return rc;
}
