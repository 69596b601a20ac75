/* SPDX-License-Identifier: MIT
 * ntfs-mcp — a Model Context Protocol server on stdio for one ntfs session.
 *
 *   ntfs-mcp --session NAME [--create] [--socket PATH] [--max-line BYTES]
 *
 * An MCP client (Claude Code, Codex, any agent) starts this program and
 * speaks JSON-RPC 2.0 to it, one message per line on stdin/stdout
 * (docs/mcp.md). Every tool is one or two requests to ntfsd's control socket
 * (ctl/client/client.h), so an MCP call is journaled, policed and checkpointed
 * exactly like the same call through the socket. Nothing but protocol
 * messages goes to stdout; diagnostics go to stderr.
 *
 * Structure: the main thread reads stdin with a bounded line buffer, parses
 * each line and answers the protocol methods itself (initialize, ping,
 * tools/list and the protocol errors). Each tools/call runs on its own
 * worker thread with its own client connection, so that a
 * notifications/cancelled can reach a call in flight: the main thread marks
 * it cancelled (its response is then never sent, as the MCP spec asks) and,
 * for a jailed command, asks ntfsd to kill it (POST
 * /v1/sessions/NAME/exec/cancel with the call's cancel_token).
 *
 * Protocol revisions: the initialize handshake of 2024-11-05 through
 * 2025-11-25. The answer names the client's version when it is one of
 * those, else the latest this server supports.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/util.h"
#include "ctl/client/client.h"
#include "common/banned.h"

#define MCP_VERSION "0.1.0"
#define MCP_LATEST_PROTOCOL "2025-11-25"
#define MCP_MAX_LINE_DEFAULT (4u * 1024 * 1024) /* one JSON-RPC message */
#define MCP_MAX_LINE_MIN 4096u
#define MCP_MAX_LINE_MAX (64u * 1024 * 1024)
#define MCP_MAX_INFLIGHT 16             /* concurrent tools/call */
#define MCP_COMMAND_MAX (1024u * 1024)  /* NTFS_JAIL_COMMAND_MAX */
#define MCP_ARG_MAX 4096u               /* other string arguments */
#define MCP_TIMEOUT_MS (300u * 1000)    /* non-exec requests */
#define MCP_TEXT_MAX (8u * 1024 * 1024) /* text rendering of one result */

/* JSON-RPC 2.0 error codes. */
#define RPC_PARSE_ERROR (-32700)
#define RPC_INVALID_REQUEST (-32600)
#define RPC_METHOD_NOT_FOUND (-32601)
#define RPC_INVALID_PARAMS (-32602)
#define RPC_INTERNAL_ERROR (-32603)

static const char *const supported_versions[] = {MCP_LATEST_PROTOCOL, "2025-06-18", "2025-03-26",
                                                 "2024-11-05", NULL};

static inline void mcp_json_decrefp(json_t **p) {
        json_decref(*p);
}
#define _cleanup_jsonp_ _cleanup_(mcp_json_decrefp)

/* ---- state -------------------------------------------------------------------------- */

struct tool;

/* One tools/call in flight. Guarded by S.lock; the worker owns args. */
struct call {
        bool used;      /* slot taken (a thread exists until joined) */
        bool done;      /* the worker finished; join it */
        bool cancelled; /* notifications/cancelled arrived: send nothing */
        json_t *id;     /* the request id (owned) */
        json_t *args;   /* the tool's arguments (owned) */
        const struct tool *tool;
        char token[33]; /* cancel_token sent with an exec request */
        pthread_t thread;
};

static struct {
        const char *socket;
        const char *session;
        char session_esc[3 * 256 + 1]; /* percent-encoded for paths */
        size_t max_line;
        pthread_mutex_t lock;     /* calls[] */
        pthread_mutex_t out_lock; /* stdout */
        struct call calls[MCP_MAX_INFLIGHT];
        ntfs_client *main_client; /* main thread only */
        bool out_broken;
} S = {.lock = PTHREAD_MUTEX_INITIALIZER, .out_lock = PTHREAD_MUTEX_INITIALIZER};

/* ---- output ------------------------------------------------------------------------- */

static void write_all(int fd, const char *p, size_t n) {
        while (n > 0) {
                ssize_t w = write(fd, p, n);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        S.out_broken = true;
                        return;
                }
                p += w;
                n -= (size_t)w;
        }
}

/* Writes one message as one line (compact JSON never holds a raw newline).
 * Takes the message (decrefs it). */
static void send_msg(json_t *msg) {
        if (!msg)
                return;
        char *s = json_dumps(msg, JSON_COMPACT);
        json_decref(msg);
        if (!s) {
                fprintf(stderr, "ntfs-mcp: out of memory serializing a message\n");
                return;
        }
        size_t n = strlen(s);
        pthread_mutex_lock(&S.out_lock);
        write_all(STDOUT_FILENO, s, n);
        write_all(STDOUT_FILENO, "\n", 1);
        pthread_mutex_unlock(&S.out_lock);
        free(s);
}

/* id: borrowed; NULL sends "id": null. */
static void send_error(const json_t *id, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void send_error(const json_t *id, int code, const char *fmt, ...) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        send_msg(json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(), "error",
                           "code", code, "message", msg));
}

/* result: taken. */
static void send_result(const json_t *id, json_t *result) {
        send_msg(json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result",
                           result ? result : json_object()));
}

/* ---- tool results ------------------------------------------------------------------- */

/* A tool execution error (isError: true) the model can read and act on. */
static json_t *tool_error(const char *code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static json_t *tool_error(const char *code, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        char text[1200];
        snprintf(text, sizeof text, "%s (%s)", msg, code);
        return json_pack("{s:[{s:s, s:s}], s:{s:{s:s, s:s}}, s:b}", "content", "type", "text", "text", text,
                         "structuredContent", "error", "code", code, "message", msg, "isError", 1);
}

/* A successful result: text for the model plus the daemon's JSON. Takes both. */
static json_t *tool_ok(char *text, json_t *structured) {
        json_t *r = json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text ? text : "",
                              "isError", 0);
        free(text);
        if (r && json_is_object(structured))
                json_object_set(r, "structuredContent", structured);
        json_decref(structured);
        return r;
}

/* A growing text buffer, cut at MCP_TEXT_MAX. */
struct tbuf {
        char *p;
        size_t len, cap;
        bool cut;
};

static void tb_add(struct tbuf *b, const char *s, size_t n) {
        if (b->cut)
                return;
        if (b->len + n > MCP_TEXT_MAX) {
                n = MCP_TEXT_MAX - b->len;
                b->cut = true;
        }
        if (b->len + n + 1 > b->cap) {
                size_t cap = b->cap ? b->cap : 256;
                while (cap < b->len + n + 1)
                        cap *= 2;
                char *np = realloc(b->p, cap);
                if (!np) {
                        b->cut = true;
                        return;
                }
                b->p = np;
                b->cap = cap;
        }
        memcpy(b->p + b->len, s, n);
        b->len += n;
        b->p[b->len] = 0;
}

static void tb_printf(struct tbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tb_printf(struct tbuf *b, const char *fmt, ...) {
        char tmp[1024];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
        va_end(ap);
        if (n > 0)
                tb_add(b, tmp, NTFS_MIN((size_t)n, sizeof tmp - 1));
}

/* Hands the text over (never NULL unless out of memory). */
static char *tb_take(struct tbuf *b) {
        if (b->cut && b->p && b->cap - b->len > 40) {
                int n = snprintf(b->p + b->len, b->cap - b->len, "\n[cut at %u bytes]", MCP_TEXT_MAX);
                if (n > 0)
                        b->len += NTFS_MIN((size_t)n, b->cap - b->len - 1);
        }
        if (!b->p)
                return strdup("");
        return TAKE_PTR(b->p);
}

static const char *jstr(const json_t *o, const char *k) {
        const char *s = json_string_value(json_object_get(o, k));
        return s ? s : "";
}

static json_int_t jint(const json_t *o, const char *k) {
        return json_integer_value(json_object_get(o, k));
}

/* ---- the daemon ---------------------------------------------------------------------- */

/* One request to ntfsd. Returns NULL and sets *ret_body (owned, may be NULL)
 * on a 2xx answer; else a tool error result naming the daemon's message and
 * code, or the transport failure. */
static json_t *daemon_call(ntfs_client *c, const char *method, const char *path, const json_t *body,
                           json_t **ret_body) {
        struct ntfs_client_response res = {0};
        int r = ntfs_client_request(c, method, path, body, &res);
        if (r < 0)
                return tool_error(ntfs_errcode(r), "cannot reach ntfsd at %s: %s", S.socket,
                                  ntfs_strerror(r));
        if (res.status < 200 || res.status >= 300) {
                const char *code = NULL, *msg = NULL;
                ntfs_client_error(&res, &code, &msg);
                json_t *e = tool_error(code ? code : "internal", "%s", msg ? msg : "request failed");
                ntfs_client_response_release(&res);
                return e;
        }
        *ret_body = TAKE_PTR(res.json);
        ntfs_client_response_release(&res);
        return NULL;
}

static int session_path(char *buf, size_t len, const char *suffix) {
        int n = snprintf(buf, len, "/v1/sessions/%s%s", S.session_esc, suffix);
        return n > 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

/* ---- argument checks (failures are tool errors, so the model can fix them) ---------- */

/* Every key of args must be in allowed. */
static json_t *check_keys(const json_t *args, const char *const *allowed) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)args, k, v) {
                bool ok = false;
                for (const char *const *a = allowed; *a; a++)
                        ok = ok || strcmp(*a, k) == 0;
                if (!ok)
                        return tool_error("bad_request", "unknown argument '%.64s'", k);
        }
        return NULL;
}

static json_t *want_string(const json_t *args, const char *key, bool required, size_t max, const char **ret) {
        json_t *v = json_object_get(args, key);
        *ret = NULL;
        if (!v || json_is_null(v)) {
                if (required)
                        return tool_error("bad_request", "argument '%s' is required", key);
                return NULL;
        }
        if (!json_is_string(v))
                return tool_error("bad_request", "argument '%s' must be a string", key);
        if (json_string_length(v) == 0 && required)
                return tool_error("bad_request", "argument '%s' must not be empty", key);
        if (json_string_length(v) > max)
                return tool_error("bad_request", "argument '%s' is longer than %zu bytes", key, max);
        if (strlen(json_string_value(v)) != json_string_length(v))
                return tool_error("bad_request", "argument '%s' holds a NUL byte", key);
        *ret = json_string_value(v);
        return NULL;
}

/* An integer in [lo, hi]; *ret untouched when absent. */
static json_t *want_int(const json_t *args, const char *key, json_int_t lo, json_int_t hi, bool *have,
                        json_int_t *ret) {
        json_t *v = json_object_get(args, key);
        *have = false;
        if (!v || json_is_null(v))
                return NULL;
        double d = json_number_value(v);
        if (!json_is_number(v) || d != (double)(json_int_t)d || d < (double)lo || d > (double)hi)
                return tool_error("bad_request",
                                  "argument '%s' must be an integer from %" JSON_INTEGER_FORMAT
                                  " to %" JSON_INTEGER_FORMAT,
                                  key, lo, hi);
        *have = true;
        *ret = (json_int_t)d;
        return NULL;
}

/* ---- tools ---------------------------------------------------------------------------- */

typedef json_t *(*tool_fn)(ntfs_client *c, struct call *call, const json_t *args);

struct tool {
        const char *name, *title, *description, *schema;
        tool_fn run;
        bool exec;                                           /* a jailed command (cancellable in ntfsd) */
        bool read_only, destructive, idempotent, open_world; /* annotations */
};

static json_t *run_exec(ntfs_client *c, struct call *call, const json_t *args) {
        static const char *const keys[] = {"command", "timeout", NULL};
        static const char *const py_keys[] = {"code", "timeout", NULL}; /* run_python (docs/python.md) */
        bool py = strcmp(call->tool->name, "run_python") == 0;
        const char *cmd;
        json_t *e;
        if ((e = check_keys(args, py ? py_keys : keys)) ||
            (e = want_string(args, py ? "code" : "command", true, MCP_COMMAND_MAX, &cmd)))
                return e;
        json_t *t = json_object_get(args, "timeout");
        if (t && !json_is_null(t) &&
            (!json_is_number(t) || json_number_value(t) <= 0 || json_number_value(t) > 86400))
                return tool_error("bad_request", "argument 'timeout' must be seconds in (0, 86400]");
        _cleanup_jsonp_ json_t *body = json_pack("{s:s, s:s, s:s}", "command", cmd, "tool", call->tool->name,
                                                 "cancel_token", call->token);
        if (!body)
                return tool_error("internal", "out of memory");
        if (t && !json_is_null(t))
                json_object_set(body, "timeout", t);
        char path[1024];
        if (session_path(path, sizeof path, "/exec") < 0)
                return tool_error("invalid_name", "session name too long");
        ntfs_client_set_timeout(c, 0); /* the jail has its own timeout; cancellation ends it early */
        json_t *res = NULL;
        if ((e = daemon_call(c, "POST", path, body, &res)))
                return e;
        struct tbuf b = {0};
        json_t *out = json_object_get(res, "stdout"), *err = json_object_get(res, "stderr");
        if (json_string_length(out) > 0)
                tb_add(&b, json_string_value(out), json_string_length(out));
        if (json_is_true(json_object_get(res, "stdout_truncated")))
                tb_printf(&b, "\n[stdout truncated]");
        if (json_string_length(err) > 0) {
                tb_printf(&b, "%s[stderr]\n", b.len && b.p[b.len - 1] != '\n' ? "\n" : "");
                tb_add(&b, json_string_value(err), json_string_length(err));
                if (json_is_true(json_object_get(res, "stderr_truncated")))
                        tb_printf(&b, "\n[stderr truncated]");
        }
        if (py) { /* what the code left: bindings, ui problems, cache problems */
                static const char *const extra[] = {"namespace", "ui_problems", "cache_problems"};
                for (size_t i = 0; i < ARRAY_SIZE(extra); i++) {
                        json_t *v = json_object_get(res, extra[i]);
                        if (!v || (json_is_array(v) && json_array_size(v) == 0))
                                continue;
                        _cleanup_free_ char *txt = json_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII);
                        if (txt)
                                tb_printf(&b, "%s[%s] %s", b.len && b.p[b.len - 1] != '\n' ? "\n" : "", extra[i],
                                          txt);
                }
        }
        tb_printf(&b, "%s[exit code %" JSON_INTEGER_FORMAT "%s%s%s%s%s%s; %s, %" JSON_INTEGER_FORMAT " ms]",
                  b.len && b.p[b.len - 1] != '\n' ? "\n" : "", jint(res, "exit_code"),
                  json_is_true(json_object_get(res, "timed_out")) ? "; timed out" : "",
                  json_is_true(json_object_get(res, "cancelled")) ? "; cancelled" : "",
                  json_is_true(json_object_get(res, "replayed")) ? "; replayed from the journal" : "",
                  json_object_get(res, "short") ? "; checkpoint " : "", jstr(res, "short"),
                  json_is_false(json_object_get(res, "changed")) ? " (no change)" : "", jstr(res, "effect"),
                  jint(res, "duration_ms"));
        return tool_ok(tb_take(&b), res);
}

static json_t *run_fetch(ntfs_client *c, struct call *call, const json_t *args) {
        static const char *const keys[] = {"url", "method", NULL};
        const char *url, *method;
        json_t *e;
        (void)call;
        if ((e = check_keys(args, keys)) || (e = want_string(args, "url", true, 8192, &url)) ||
            (e = want_string(args, "method", false, 16, &method)))
                return e;
        if (method && strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
                return tool_error("bad_request", "argument 'method' must be GET or HEAD");
        _cleanup_jsonp_ json_t *body = json_pack("{s:s, s:s}", "url", url, "method", method ? method : "GET");
        char path[1024];
        if (!body || session_path(path, sizeof path, "/fetch") < 0)
                return tool_error("internal", "cannot build the request");
        ntfs_client_set_timeout(c, MCP_TIMEOUT_MS);
        json_t *res = NULL;
        if ((e = daemon_call(c, "POST", path, body, &res)))
                return e;
        struct tbuf b = {0};
        tb_printf(&b, "HTTP %" JSON_INTEGER_FORMAT " %s", jint(res, "status"), jstr(res, "final_url"));
        const char *ct = jstr(json_object_get(res, "headers"), "content-type");
        if (*ct)
                tb_printf(&b, " (%.200s)", ct);
        tb_printf(&b, "%s%s\n\n", json_is_true(json_object_get(res, "truncated")) ? " [body truncated]" : "",
                  json_is_true(json_object_get(res, "replayed")) ? " [replayed from the journal]" : "");
        json_t *bodyv = json_object_get(res, "body");
        if (json_is_true(json_object_get(res, "body_base64")))
                tb_printf(&b,
                          "[binary body, %" JSON_INTEGER_FORMAT " bytes, base64 in structuredContent.body]",
                          jint(res, "bytes"));
        else if (json_is_string(bodyv))
                tb_add(&b, json_string_value(bodyv), json_string_length(bodyv));
        return tool_ok(tb_take(&b), res);
}

static json_t *run_checkpoint(ntfs_client *c, struct call *call, const json_t *args) {
        static const char *const keys[] = {"message", NULL};
        const char *msg;
        json_t *e;
        (void)call;
        if ((e = check_keys(args, keys)) || (e = want_string(args, "message", false, MCP_ARG_MAX, &msg)))
                return e;
        _cleanup_jsonp_ json_t *body = msg ? json_pack("{s:s}", "message", msg) : json_object();
        char path[1024];
        if (!body || session_path(path, sizeof path, "/checkpoint") < 0)
                return tool_error("internal", "cannot build the request");
        json_t *res = NULL;
        if ((e = daemon_call(c, "POST", path, body, &res)))
                return e;
        struct tbuf b = {0};
        tb_printf(&b, "checkpoint %s%s", jstr(res, "short"),
                  json_is_false(json_object_get(res, "changed")) ? " (nothing changed since the last one)"
                                                                 : "");
        return tool_ok(tb_take(&b), res);
}

static json_t *run_rollback(ntfs_client *c, struct call *call, const json_t *args) {
        static const char *const keys[] = {"to", "steps", NULL};
        const char *to;
        bool have_steps;
        json_int_t steps = 0;
        json_t *e;
        (void)call;
        if ((e = check_keys(args, keys)) || (e = want_string(args, "to", false, MCP_ARG_MAX, &to)) ||
            (e = want_int(args, "steps", 1, 1000000, &have_steps, &steps)))
                return e;
        if (!!to == have_steps)
                return tool_error("bad_request", "give exactly one of 'to' (a commit or tag) and 'steps'");
        _cleanup_jsonp_ json_t *body = to ? json_pack("{s:s}", "to", to) : json_pack("{s:I}", "steps", steps);
        char path[1024];
        if (!body || session_path(path, sizeof path, "/rollback") < 0)
                return tool_error("internal", "cannot build the request");
        json_t *res = NULL;
        if ((e = daemon_call(c, "POST", path, body, &res)))
                return e;
        struct tbuf b = {0};
        tb_printf(&b, "rolled back: the workspace is now checkpoint %s", jstr(res, "short"));
        return tool_ok(tb_take(&b), res);
}

static json_t *run_fork(ntfs_client *c, struct call *call, const json_t *args) {
        static const char *const keys[] = {"name", "at", NULL};
        const char *name, *at;
        json_t *e;
        (void)call;
        if ((e = check_keys(args, keys)) || (e = want_string(args, "name", true, 255, &name)) ||
            (e = want_string(args, "at", false, MCP_ARG_MAX, &at)))
                return e;
        _cleanup_jsonp_ json_t *body = json_pack("{s:s, s:s*}", "name", name, "at", at);
        char path[1024];
        if (!body || session_path(path, sizeof path, "/fork") < 0)
                return tool_error("internal", "cannot build the request");
        json_t *res = NULL;
        if ((e = daemon_call(c, "POST", path, body, &res)))
                return e;
        struct tbuf b = {0};
        tb_printf(&b, "forked session '%s' at %s (this server keeps working on '%s')", jstr(res, "name"),
                  jstr(res, "short"), S.session);
        return tool_ok(tb_take(&b), res);
}

static json_t *run_tag(ntfs_client *c, struct call *call, const json_t *args) {
        static const char *const keys[] = {"tag", "at", NULL};
        const char *tag, *at;
        json_t *e;
        (void)call;
        if ((e = check_keys(args, keys)) || (e = want_string(args, "tag", true, 255, &tag)) ||
            (e = want_string(args, "at", false, MCP_ARG_MAX, &at)))
                return e;
        _cleanup_jsonp_ json_t *body = json_pack("{s:s, s:s*}", "tag", tag, "at", at);
        char path[1024];
        if (!body || session_path(path, sizeof path, "/tags") < 0)
                return tool_error("internal", "cannot build the request");
        json_t *res = NULL;
        if ((e = daemon_call(c, "POST", path, body, &res)))
                return e;
        struct tbuf b = {0};
        tb_printf(&b, "tagged %s as '%s'", jstr(res, "short"), jstr(res, "tag"));
        return tool_ok(tb_take(&b), res);
}

static json_t *run_log(ntfs_client *c, struct call *call, const json_t *args) {
        static const char *const keys[] = {"max", NULL};
        bool have;
        json_int_t max = 20;
        json_t *e;
        (void)call;
        if ((e = check_keys(args, keys)) || (e = want_int(args, "max", 1, 1000, &have, &max)))
                return e;
        char path[1024], q[32];
        snprintf(q, sizeof q, "/log?max=%" JSON_INTEGER_FORMAT, max);
        if (session_path(path, sizeof path, q) < 0)
                return tool_error("invalid_name", "session name too long");
        json_t *res = NULL;
        if ((e = daemon_call(c, "GET", path, NULL, &res)))
                return e;
        struct tbuf b = {0};
        size_t i;
        json_t *cm;
        json_array_foreach(json_object_get(res, "commits"), i, cm) {
                time_t t = (time_t)(jint(cm, "time") / 1000000000);
                struct tm tm;
                char when[32] = "";
                if (gmtime_r(&t, &tm))
                        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%SZ", &tm);
                tb_printf(&b, "%s  %s  %.300s", jstr(cm, "short"), when, jstr(cm, "message"));
                json_t *tags = json_object_get(cm, "tags"), *tg;
                size_t j;
                json_array_foreach(tags, j, tg) {
                        const char *ts = json_string_value(tg);
                        tb_printf(&b, "%s%.100s", j ? ", " : "  (tags: ", ts ? ts : "");
                }
                tb_printf(&b, "%s\n", json_array_size(tags) ? ")" : "");
        }
        if (b.len == 0)
                tb_printf(&b, "no checkpoints\n");
        return tool_ok(tb_take(&b), res);
}

static json_t *run_diff(ntfs_client *c, struct call *call, const json_t *args) {
        static const char *const keys[] = {"from", "to", NULL};
        const char *from, *to;
        json_t *e;
        (void)call;
        if ((e = check_keys(args, keys)) || (e = want_string(args, "from", false, 255, &from)) ||
            (e = want_string(args, "to", false, 255, &to)))
                return e;
        char path[2048], head[80] = "";
        if (!from) { /* the session's last checkpoint */
                json_t *si = NULL;
                if (session_path(path, sizeof path, "") < 0)
                        return tool_error("invalid_name", "session name too long");
                if ((e = daemon_call(c, "GET", path, NULL, &si)))
                        return e;
                snprintf(head, sizeof head, "%s", jstr(si, "head"));
                json_decref(si);
                from = head;
        }
        char fe[3 * 256 + 1], te[3 * 256 + 1] = "", q[2 * sizeof fe + 16];
        if (ntfs_client_escape(from, fe, sizeof fe) < 0 || (to && ntfs_client_escape(to, te, sizeof te) < 0))
                return tool_error("bad_request", "argument 'from' or 'to' is too long");
        snprintf(q, sizeof q, "/diff?from=%s%s%s", fe, to ? "&to=" : "", te);
        if (session_path(path, sizeof path, q) < 0)
                return tool_error("bad_request", "arguments too long");
        json_t *res = NULL;
        if ((e = daemon_call(c, "GET", path, NULL, &res)))
                return e;
        struct tbuf b = {0};
        size_t i;
        json_t *ch;
        json_array_foreach(json_object_get(res, "changes"), i, ch) {
                const char *k = jstr(ch, "kind");
                char mark = strcmp(k, "added") == 0      ? 'A'
                            : strcmp(k, "deleted") == 0  ? 'D'
                            : strcmp(k, "modified") == 0 ? 'M'
                                                         : 'T';
                tb_printf(&b, "%c %s\n", mark, jstr(ch, "path"));
        }
        if (b.len == 0)
                tb_printf(&b, "no changes\n");
        return tool_ok(tb_take(&b), res);
}

#define EXEC_SCHEMA                                                                                          \
        "{\"type\":\"object\",\"properties\":{"                                                              \
        "\"command\":{\"type\":\"string\",\"description\":\"bash source, run as bash -c in /workspace\"},"   \
        "\"timeout\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":86400,"                         \
        "\"description\":\"wall-clock limit in seconds (the policy's limit applies when smaller)\"}},"       \
        "\"required\":[\"command\"],\"additionalProperties\":false}"

/* clang-format off */
static const struct tool tools[] = {
        {"bash_read", "Run a read-only command",
         "Run a bash command in the session's jail with /workspace mounted READ-ONLY and no network. Use "
         "it to inspect files (cat, ls, grep, find). Nothing is checkpointed. The working directory and "
         "exported variables persist from one command to the next. Returns stdout, stderr and the exit "
         "code.",
         EXEC_SCHEMA, run_exec, true, true, false, true, false},
        {"bash_write", "Run a command that changes the workspace",
         "Run a bash command in the session's jail with /workspace writable and no network, then "
         "checkpoint the workspace (the checkpoint id is in the result). Use it to create, edit, move or "
         "delete files. Cheap to redo: roll back to undo it.",
         EXEC_SCHEMA, run_exec, true, false, true, false, false},
        {"bash_build", "Run a build or test command",
         "Like bash_write, for long deterministic jobs (make, compilers, test suites, package installs "
         "from local files): /workspace writable, no network, a checkpoint and a snapshot after the "
         "command.",
         EXEC_SCHEMA, run_exec, true, false, true, false, false},
        {"bash_run", "Run a command with side effects",
         "Run a bash command whose effects may be irreversible (a server, a database client); /workspace "
         "writable, loopback network only. It is never re-run after a crash. Prefer bash_write or "
         "bash_build when the command only changes files.",
         EXEC_SCHEMA, run_exec, true, false, true, false, true},
        {"run_python", "Run Python code",
         "Run Python 3 code in the session's jail (/usr/bin/python3, pandas, matplotlib and PIL available) "
         "in the shell's working directory, /workspace writable, no network, then checkpoint. The dict "
         "'cache' persists from call to call (it is saved in the workspace, so rollback and fork carry "
         "it); values put in the dict 'ui' are returned, DataFrames, figures and images as files under "
         "/workspace/ui. Returns stdout, stderr (with the traceback of an exception), the bindings that "
         "are plain data, and the exit code.",
         "{\"type\":\"object\",\"properties\":{"
         "\"code\":{\"type\":\"string\",\"description\":\"Python source (at most 64 KiB)\"},"
         "\"timeout\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":86400,"
         "\"description\":\"wall-clock limit in seconds (the policy's limit applies when smaller)\"}},"
         "\"required\":[\"code\"],\"additionalProperties\":false}",
         run_exec, true, false, true, false, false},
        {"fetch_url", "Fetch a URL",
         "Fetch an http(s) URL through ntfs's gateway (hosts and ports the policy allows; credentials are "
         "added by the gateway, never shown). Returns the status, the final URL after redirects, selected "
         "headers and the body (text, or base64 when binary). Journaled: never repeated after a crash.",
         "{\"type\":\"object\",\"properties\":{"
         "\"url\":{\"type\":\"string\",\"description\":\"an http:// or https:// URL\"},"
         "\"method\":{\"type\":\"string\",\"enum\":[\"GET\",\"HEAD\"],\"default\":\"GET\"}},"
         "\"required\":[\"url\"],\"additionalProperties\":false}",
         run_fetch, false, true, false, false, true},
        {"checkpoint", "Checkpoint the workspace",
         "Record the workspace's current state as a checkpoint (a commit) and return its id. Checkpoints "
         "are cheap; make one before a risky change so you can roll back to it.",
         "{\"type\":\"object\",\"properties\":{"
         "\"message\":{\"type\":\"string\",\"description\":\"what this state is\"}},"
         "\"additionalProperties\":false}",
         run_checkpoint, false, false, false, false, false},
        {"rollback", "Roll the workspace back",
         "Return the workspace to an earlier checkpoint: give 'to' (a commit id, a unique prefix of one, "
         "or a tag) or 'steps' (how many checkpoints back). Changes since then are discarded from the "
         "workspace (they stay reachable in the log until garbage collection).",
         "{\"type\":\"object\",\"properties\":{"
         "\"to\":{\"type\":\"string\",\"description\":\"commit id, unique prefix or tag\"},"
         "\"steps\":{\"type\":\"integer\",\"minimum\":1,\"description\":\"checkpoints back from the head\"}},"
         "\"oneOf\":[{\"required\":[\"to\"]},{\"required\":[\"steps\"]}],\"additionalProperties\":false}",
         run_rollback, false, false, true, false, false},
        {"fork", "Fork the session",
         "Create a new session that starts from this session's head (or from 'at'), sharing all its data. "
         "This server keeps working on its own session; the fork can be used by another agent or ntfs-mcp.",
         "{\"type\":\"object\",\"properties\":{"
         "\"name\":{\"type\":\"string\",\"pattern\":\"^[A-Za-z0-9._-]+$\",\"description\":\"the new "
         "session's name\"},"
         "\"at\":{\"type\":\"string\",\"description\":\"commit id or tag to fork from (default: the "
         "head)\"}},"
         "\"required\":[\"name\"],\"additionalProperties\":false}",
         run_fork, false, false, false, false, false},
        {"tag", "Name a checkpoint",
         "Give a checkpoint (the head, or 'at') a name that rollback, diff and fork accept.",
         "{\"type\":\"object\",\"properties\":{"
         "\"tag\":{\"type\":\"string\",\"pattern\":\"^[A-Za-z0-9._-]+$\"},"
         "\"at\":{\"type\":\"string\",\"description\":\"commit id or tag (default: the head)\"}},"
         "\"required\":[\"tag\"],\"additionalProperties\":false}",
         run_tag, false, false, false, false, false},
        {"log", "List checkpoints",
         "List the session's checkpoints, newest first: id, time, message (the tool call that made it) "
         "and tags.",
         "{\"type\":\"object\",\"properties\":{"
         "\"max\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1000,\"default\":20}},"
         "\"additionalProperties\":false}",
         run_log, false, true, false, true, false},
        {"diff", "Show what changed",
         "List the files that differ between two checkpoints, or between a checkpoint and the current "
         "workspace. Without 'from': since the last checkpoint. Without 'to': up to the current workspace.",
         "{\"type\":\"object\",\"properties\":{"
         "\"from\":{\"type\":\"string\",\"description\":\"commit id or tag (default: the last checkpoint)\"},"
         "\"to\":{\"type\":\"string\",\"description\":\"commit id or tag (default: the current "
         "workspace)\"}},"
         "\"additionalProperties\":false}",
         run_diff, false, true, false, true, false},
};
/* clang-format on */

static const struct tool *tool_find(const char *name) {
        for (size_t i = 0; i < ARRAY_SIZE(tools); i++)
                if (strcmp(tools[i].name, name) == 0)
                        return &tools[i];
        return NULL;
}

static json_t *tools_list(void) {
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < ARRAY_SIZE(tools); i++) {
                const struct tool *t = &tools[i];
                json_error_t je;
                json_t *schema = json_loads(t->schema, 0, &je);
                if (!schema) { /* a bug in the table above */
                        fprintf(stderr, "ntfs-mcp: schema of %s: %s\n", t->name, je.text);
                        abort();
                }
                json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:o, s:{s:s, s:b, s:b, s:b, s:b}}",
                                                     "name", t->name, "title", t->title, "description",
                                                     t->description, "inputSchema", schema, "annotations",
                                                     "title", t->title, "readOnlyHint", t->read_only,
                                                     "destructiveHint", t->destructive, "idempotentHint",
                                                     t->idempotent, "openWorldHint", t->open_world));
        }
        return json_pack("{s:o}", "tools", arr);
}

/* ---- calls in flight ----------------------------------------------------------------- */

static void *call_thread(void *arg) {
        struct call *call = arg;
        json_t *result = NULL;
        ntfs_client *c = NULL;
        pthread_mutex_lock(&S.lock);
        bool cancelled = call->cancelled;
        pthread_mutex_unlock(&S.lock);
        if (!cancelled) {
                int r = ntfs_client_new(S.socket, &c);
                if (r < 0)
                        result = tool_error(ntfs_errcode(r), "cannot reach ntfsd at %s: %s", S.socket,
                                            ntfs_strerror(r));
                else {
                        ntfs_client_set_timeout(c, MCP_TIMEOUT_MS);
                        result = call->tool->run(c, call, call->args);
                }
        }
        ntfs_client_free(c);
        pthread_mutex_lock(&S.lock);
        if (!call->cancelled) {
                if (result)
                        send_result(call->id, result);
                else
                        send_error(call->id, RPC_INTERNAL_ERROR, "out of memory");
                result = NULL;
        }
        call->done = true;
        pthread_mutex_unlock(&S.lock);
        json_decref(result);
        return NULL;
}

/* Joins finished workers and frees their slots. all: wait for every one. */
static void reap(bool all) {
        for (size_t i = 0; i < MCP_MAX_INFLIGHT; i++) {
                struct call *call = &S.calls[i];
                pthread_mutex_lock(&S.lock);
                bool join = call->used && (call->done || all);
                pthread_mutex_unlock(&S.lock);
                if (!join)
                        continue;
                pthread_join(call->thread, NULL);
                pthread_mutex_lock(&S.lock);
                json_decref(call->id);
                json_decref(call->args);
                *call = (struct call){0};
                pthread_mutex_unlock(&S.lock);
        }
}

static void random_token(char out[33]) {
        uint8_t b[16];
        size_t got = 0;
        while (got < sizeof b) {
                ssize_t n = getrandom(b + got, sizeof b - got, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) { /* no entropy source: time and address still make it unique here */
                        uint64_t t = (uint64_t)ntfs_mono_ns() ^ (uint64_t)(uintptr_t)out;
                        memcpy(b, &t, sizeof t);
                        break;
                }
                got += (size_t)n;
        }
        ntfs_hex(b, sizeof b, out);
        out[32] = 0;
}

static void start_call(const json_t *id, const struct tool *t, json_t *args) {
        pthread_mutex_lock(&S.lock);
        struct call *slot = NULL;
        for (size_t i = 0; i < MCP_MAX_INFLIGHT; i++) {
                struct call *c = &S.calls[i];
                if (c->used && !c->done && json_equal(c->id, (json_t *)id)) {
                        pthread_mutex_unlock(&S.lock);
                        send_error(id, RPC_INVALID_REQUEST, "a request with this id is still in flight");
                        return;
                }
                if (!c->used && !slot)
                        slot = c;
        }
        if (!slot) {
                pthread_mutex_unlock(&S.lock);
                send_error(id, RPC_INTERNAL_ERROR, "too many tool calls in flight (at most %d)",
                           MCP_MAX_INFLIGHT);
                return;
        }
        *slot = (struct call){.used = true, .id = json_deep_copy(id), .args = json_incref(args), .tool = t};
        random_token(slot->token);
        int r = pthread_create(&slot->thread, NULL, call_thread, slot);
        if (r != 0) {
                json_decref(slot->id);
                json_decref(slot->args);
                *slot = (struct call){0};
                pthread_mutex_unlock(&S.lock);
                send_error(id, RPC_INTERNAL_ERROR, "cannot start a worker thread: %s", strerror(r));
                return;
        }
        pthread_mutex_unlock(&S.lock);
}

/* Asks ntfsd to end the jailed command of a cancelled call. The request may
 * race the exec request it cancels: retry while the call has not reached
 * the daemon yet (not_found) and is still running. */
static void cancel_in_daemon(ntfs_client *c, size_t slot, const char *token) {
        char path[1024];
        if (session_path(path, sizeof path, "/exec/cancel") < 0)
                return;
        _cleanup_jsonp_ json_t *body = json_pack("{s:s}", "cancel_token", token);
        for (int attempt = 0; attempt < 40; attempt++) {
                char err[512] = "";
                int r = ntfs_client_call(c, "POST", path, body, NULL, err, sizeof err);
                if (r != -NTFS_ENOTFOUND) {
                        if (r < 0)
                                fprintf(stderr, "ntfs-mcp: cancel: %s\n", err[0] ? err : ntfs_strerror(r));
                        return;
                }
                pthread_mutex_lock(&S.lock);
                bool running =
                        S.calls[slot].used && !S.calls[slot].done && strcmp(S.calls[slot].token, token) == 0;
                pthread_mutex_unlock(&S.lock);
                if (!running)
                        return;
                nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
        }
}

/* requestId: borrowed. all: cancel every call (shutdown). c: a client the
 * calling thread owns. */
static void cancel_calls(ntfs_client *c, const json_t *request_id, bool all) {
        for (size_t i = 0; i < MCP_MAX_INFLIGHT; i++) {
                char token[33] = "";
                pthread_mutex_lock(&S.lock);
                struct call *k = &S.calls[i];
                if (k->used && !k->done && !k->cancelled &&
                    (all || json_equal(k->id, (json_t *)request_id))) {
                        k->cancelled = true;
                        if (k->tool->exec)
                                memcpy(token, k->token, sizeof token);
                }
                pthread_mutex_unlock(&S.lock);
                if (token[0])
                        cancel_in_daemon(c, i, token);
        }
}

/* ---- protocol ------------------------------------------------------------------------- */

static void handle_initialize(const json_t *id, const json_t *params) {
        const char *want = json_string_value(json_object_get(params, "protocolVersion"));
        if (!want) {
                send_error(id, RPC_INVALID_PARAMS,
                           "initialize: params.protocolVersion (a string) is required");
                return;
        }
        const char *v = MCP_LATEST_PROTOCOL;
        for (const char *const *s = supported_versions; *s; s++)
                if (strcmp(*s, want) == 0)
                        v = *s;
        char instructions[1024];
        snprintf(
                instructions, sizeof instructions,
                "You work in the ntfs session '%s': a versioned workspace mounted at /workspace inside a "
                "jail. "
                "Run commands with bash_read (read-only), bash_write (changes files; checkpointed), "
                "bash_build "
                "(long builds/tests; checkpointed) or bash_run (side effects, loopback network). Use "
                "checkpoint "
                "before risky changes and rollback to undo; log and diff show history. fetch_url fetches web "
                "pages through the gateway.",
                S.session);
        send_result(id, json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", v,
                                  "capabilities", "tools", "listChanged", 0, "serverInfo", "name", "ntfs-mcp",
                                  "title", "ntfs", "version", MCP_VERSION, "instructions", instructions));
}

static void handle_tools_call(const json_t *id, const json_t *params) {
        const char *name = json_string_value(json_object_get(params, "name"));
        if (!name) {
                send_error(id, RPC_INVALID_PARAMS, "tools/call: params.name (a string) is required");
                return;
        }
        const struct tool *t = tool_find(name);
        if (!t) {
                send_error(id, RPC_INVALID_PARAMS, "Unknown tool: %.100s", name);
                return;
        }
        json_t *args = json_object_get(params, "arguments");
        if (args && !json_is_null(args) && !json_is_object(args)) {
                send_error(id, RPC_INVALID_PARAMS, "tools/call: params.arguments must be an object");
                return;
        }
        _cleanup_jsonp_ json_t *empty = NULL;
        if (!args || json_is_null(args))
                args = empty = json_object();
        start_call(id, t, args);
}

static void handle_notification(const char *method, const json_t *params) {
        if (strcmp(method, "notifications/cancelled") == 0) {
                const json_t *rid = json_object_get(params, "requestId");
                if (rid && (json_is_string(rid) || json_is_integer(rid)))
                        cancel_calls(S.main_client, rid, false);
        }
        /* notifications/initialized and anything else: nothing to do; a
         * notification is never answered. */
}

static void handle_message(const char *line, size_t len) {
        json_error_t je;
        _cleanup_jsonp_ json_t *msg = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
        if (!msg) {
                send_error(NULL, RPC_PARSE_ERROR, "Parse error: %s (line %d, column %d)", je.text, je.line,
                           je.column);
                return;
        }
        if (json_is_array(msg)) {
                send_error(NULL, RPC_INVALID_REQUEST, "Invalid Request: batches are not supported");
                return;
        }
        if (!json_is_object(msg)) {
                send_error(NULL, RPC_INVALID_REQUEST, "Invalid Request: a message must be a JSON object");
                return;
        }
        json_t *id = json_object_get(msg, "id");
        if (id && !json_is_string(id) && !json_is_integer(id)) {
                send_error(NULL, RPC_INVALID_REQUEST, "Invalid Request: 'id' must be a string or an integer");
                return;
        }
        if (!json_is_string(json_object_get(msg, "jsonrpc")) || strcmp(jstr(msg, "jsonrpc"), "2.0") != 0) {
                send_error(id, RPC_INVALID_REQUEST, "Invalid Request: 'jsonrpc' must be \"2.0\"");
                return;
        }
        json_t *m = json_object_get(msg, "method");
        if (!m) {
                if (id && (json_object_get(msg, "result") || json_object_get(msg, "error")))
                        return; /* a response; this server sends no requests */
                send_error(id, RPC_INVALID_REQUEST, "Invalid Request: 'method' is required");
                return;
        }
        if (!json_is_string(m)) {
                send_error(id, RPC_INVALID_REQUEST, "Invalid Request: 'method' must be a string");
                return;
        }
        const char *method = json_string_value(m);
        json_t *params = json_object_get(msg, "params");
        if (!id) {
                if (!params || json_is_object(params))
                        handle_notification(method, params);
                return;
        }
        if (params && !json_is_object(params)) {
                send_error(id, RPC_INVALID_PARAMS, "Invalid params: 'params' must be an object");
                return;
        }
        if (strcmp(method, "initialize") == 0)
                handle_initialize(id, params);
        else if (strcmp(method, "ping") == 0)
                send_result(id, json_object());
        else if (strcmp(method, "tools/list") == 0)
                send_result(id, tools_list());
        else if (strcmp(method, "tools/call") == 0)
                handle_tools_call(id, params);
        else
                send_error(id, RPC_METHOD_NOT_FOUND, "Method not found: %.100s", method);
}

/* Reads stdin line by line until EOF. A line longer than S.max_line is
 * refused with one error and skipped up to its newline. */
static int serve(void) {
        size_t cap = NTFS_MIN((size_t)65536, S.max_line + 1), len = 0, scanned = 0;
        _cleanup_free_ char *buf = malloc(cap);
        bool discarding = false;
        if (!buf)
                return -ENOMEM;
        for (;;) {
                if (S.out_broken)
                        return -EPIPE;
                if (len == cap) {
                        if (cap < S.max_line + 1) {
                                size_t ncap = NTFS_MIN(cap * 2, S.max_line + 1);
                                char *nb = realloc(buf, ncap);
                                if (!nb)
                                        return -ENOMEM;
                                buf = nb;
                                cap = ncap;
                        } else { /* no newline within max_line bytes */
                                if (!discarding)
                                        send_error(NULL, RPC_INVALID_REQUEST,
                                                   "Invalid Request: message longer than %zu bytes",
                                                   S.max_line);
                                discarding = true;
                                len = scanned = 0;
                        }
                }
                ssize_t n = read(STDIN_FILENO, buf + len, cap - len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        break;
                len += (size_t)n;
                reap(false);
                size_t start = 0;
                for (size_t i = scanned; i < len; i++) {
                        if (buf[i] != '\n')
                                continue;
                        size_t end = i;
                        if (end > start && buf[end - 1] == '\r')
                                end--;
                        if (discarding)
                                discarding = false;
                        else if (end > start)
                                handle_message(buf + start, end - start);
                        start = i + 1;
                }
                memmove(buf, buf + start, len - start);
                len -= start;
                scanned = len;
        }
        if (len > 0 && !discarding) /* a last message without its newline */
                handle_message(buf, len);
        return 0;
}

/* SIGTERM/SIGINT/SIGHUP: the client shuts us down. Kill the jailed
 * commands still running (they would otherwise run to their timeout), give
 * the workers a moment to see their answers, and exit. */
static void *signal_thread(void *arg) {
        (void)arg;
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGHUP);
        int sig = 0;
        while (sigwait(&set, &sig) != 0)
                ;
        ntfs_client *c = NULL;
        if (ntfs_client_new(S.socket, &c) == 0) {
                ntfs_client_set_timeout(c, 5000);
                cancel_calls(c, NULL, true);
                ntfs_client_free(c);
        }
        for (int i = 0; i < 100; i++) { /* up to 10 s */
                bool busy = false;
                pthread_mutex_lock(&S.lock);
                for (size_t k = 0; k < MCP_MAX_INFLIGHT; k++)
                        busy = busy || (S.calls[k].used && !S.calls[k].done);
                pthread_mutex_unlock(&S.lock);
                if (!busy)
                        break;
                nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
        }
        _exit(0);
}

/* ---- main ------------------------------------------------------------------------------ */

static void usage(FILE *f) {
        fprintf(f,
                "usage: ntfs-mcp --session NAME [--create] [--socket PATH] [--max-line BYTES]\n"
                "\n"
                "A Model Context Protocol server on stdin/stdout (JSON-RPC 2.0, one message per\n"
                "line) whose tools run in the ntfs session NAME through ntfsd (docs/mcp.md).\n"
                "\n"
                "  --session NAME   the session the tools work on (required)\n"
                "  --create         create the session first if it does not exist\n"
                "  --socket PATH    ntfsd's control socket; default $NTFS_SOCKET, else\n"
                "                   $NTFS_STORE/ntfsd.sock, else ./.store/ntfsd.sock\n"
                "  --max-line BYTES longest accepted message (default %u)\n"
                "  -h, --help       this text\n"
                "  --version        print the version\n"
                "\n"
                "Exit: 0 when the client closes stdin, 1 when ntfsd or the session cannot be\n"
                "reached at startup, 2 on a usage error.\n",
                MCP_MAX_LINE_DEFAULT);
}

/* One request at startup; prints why it failed. */
static int startup_call(const char *method, const char *path, const json_t *body) {
        struct ntfs_client_response res = {0};
        int r = ntfs_client_request(S.main_client, method, path, body, &res);
        if (r < 0) {
                fprintf(stderr, "ntfs-mcp: cannot reach ntfsd at %s: %s\n", S.socket, ntfs_strerror(r));
                return r;
        }
        if (res.status >= 200 && res.status < 300) {
                ntfs_client_response_release(&res);
                return 0;
        }
        const char *code = NULL, *msg = NULL;
        ntfs_client_error(&res, &code, &msg);
        r = ntfs_client_errcode_parse(code ? code : "");
        if (!(r == -NTFS_ENOSESSION && strcmp(method, "GET") == 0) && r != -NTFS_ESESSEXISTS)
                fprintf(stderr, "ntfs-mcp: session '%s': %s (%s)\n", S.session, msg ? msg : "failed",
                        code ? code : "?");
        ntfs_client_response_release(&res);
        return r;
}

/* Checks (or creates) the session before serving. */
static int open_session(bool create) {
        char path[1024];
        if (session_path(path, sizeof path, "") < 0) {
                fprintf(stderr, "ntfs-mcp: session name too long\n");
                return -ENAMETOOLONG;
        }
        int r = startup_call("GET", path, NULL);
        if (r == -NTFS_ENOSESSION && create) {
                _cleanup_jsonp_ json_t *body = json_pack("{s:s}", "name", S.session);
                r = startup_call("POST", "/v1/sessions", body);
                if (r == -NTFS_ESESSEXISTS) /* created meanwhile by someone else */
                        r = 0;
        } else if (r == -NTFS_ENOSESSION)
                fprintf(stderr, "ntfs-mcp: session '%s' does not exist (start with --create to create it)\n",
                        S.session);
        return r;
}

int main(int argc, char **argv) {
        enum { OPT_CREATE = 256, OPT_SOCKET, OPT_SESSION, OPT_MAXLINE, OPT_VERSION };
        static const struct option opts[] = {
                {"session", required_argument, NULL, OPT_SESSION},
                {"create", no_argument, NULL, OPT_CREATE},
                {"socket", required_argument, NULL, OPT_SOCKET},
                {"max-line", required_argument, NULL, OPT_MAXLINE},
                {"help", no_argument, NULL, 'h'},
                {"version", no_argument, NULL, OPT_VERSION},
                {NULL, 0, NULL, 0},
        };
        char sockbuf[PATH_MAX];
        bool create = false;
        S.max_line = MCP_MAX_LINE_DEFAULT;
        int o;
        while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                uint64_t v;
                switch (o) {
                case OPT_SESSION:
                        S.session = optarg;
                        break;
                case OPT_CREATE:
                        create = true;
                        break;
                case OPT_SOCKET:
                        S.socket = optarg;
                        break;
                case OPT_MAXLINE:
                        if (ntfs_parse_u64(optarg, MCP_MAX_LINE_MAX, &v) < 0 || v < MCP_MAX_LINE_MIN) {
                                fprintf(stderr, "ntfs-mcp: --max-line must be %u..%u bytes\n",
                                        MCP_MAX_LINE_MIN, MCP_MAX_LINE_MAX);
                                return 2;
                        }
                        S.max_line = (size_t)v;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                case OPT_VERSION:
                        printf("ntfs-mcp %s (MCP %s)\n", MCP_VERSION, MCP_LATEST_PROTOCOL);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (optind < argc || !S.session) {
                fprintf(stderr, "ntfs-mcp: %s\n",
                        optind < argc ? "unexpected argument" : "--session NAME is required");
                usage(stderr);
                return 2;
        }
        if (!ntfs_name_valid(S.session)) {
                fprintf(stderr, "ntfs-mcp: invalid session name '%s'\n", S.session);
                return 2;
        }
        if (ntfs_client_escape(S.session, S.session_esc, sizeof S.session_esc) < 0) {
                fprintf(stderr, "ntfs-mcp: session name too long\n");
                return 2;
        }
        if (!S.socket)
                S.socket = ntfs_client_default_socket(sockbuf, sizeof sockbuf);
        signal(SIGPIPE, SIG_IGN); /* a closed stdout is seen as EPIPE */
        /* SIGTERM, SIGINT, SIGHUP go to signal_thread only (blocked before
         * any other thread exists, so every thread inherits the mask). */
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &set, NULL);

        int r = ntfs_client_new(S.socket, &S.main_client);
        if (r < 0) {
                fprintf(stderr, "ntfs-mcp: %s\n", ntfs_strerror(r));
                return 1;
        }
        ntfs_client_set_timeout(S.main_client, 30000);
        if (open_session(create) < 0) {
                ntfs_client_free(S.main_client);
                return 1;
        }
        pthread_t sig_thread;
        if ((r = pthread_create(&sig_thread, NULL, signal_thread, NULL)) != 0) {
                fprintf(stderr, "ntfs-mcp: cannot start the signal thread: %s\n", strerror(r));
                ntfs_client_free(S.main_client);
                return 1;
        }
        r = serve();
        /* End of input: answer the calls still running, then exit (the
         * client ends us with SIGTERM if it does not want to wait). */
        reap(true);
        ntfs_client_free(S.main_client);
        if (r < 0 && r != -EPIPE) {
                fprintf(stderr, "ntfs-mcp: reading stdin: %s\n", ntfs_strerror(r));
                return 1;
        }
        return 0;
}
