/* SPDX-License-Identifier: MIT
 * ntfs-ctl's effect commands: exec (a command in the jail), fetch (a URL
 * through the gateway), and the journal of effects: effects, replay.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "ctl/cli/cli.h"
#include "common/banned.h"

#define MAX_EXEC_COMMAND (1024u * 1024)   /* the joined exec command */

/* Appends s to the growing command line, single-quoted unless plain. */
static int shell_quote_append(char **buf, size_t *len, const char *s) {
        bool plain = *s != 0;
        for (const char *p = s; *p; p++)
                if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-", *p))
                        plain = false;
        size_t need = strlen(s) * 4 + 4;
        if (*len + need > MAX_EXEC_COMMAND)
                return -E2BIG;
        char *n = realloc(*buf, *len + need + 1);
        if (!n)
                return -ENOMEM;
        *buf = n;
        char *o = n + *len;
        if (*len)
                *o++ = ' ';
        if (plain) {
                size_t k = strlen(s);
                memcpy(o, s, k);
                o += k;
        } else {
                *o++ = '\'';
                for (const char *p = s; *p; p++) {
                        if (*p == '\'') {
                                memcpy(o, "'\\''", 4);
                                o += 4;
                        } else
                                *o++ = *p;
                }
                *o++ = '\'';
        }
        *o = 0;
        *len = (size_t)(o - n);
        return 0;
}

/* Writes a stream of an exec result as the command wrote it: the exact
 * bytes of key_b64 when the server sent them, else the text of key. */
static void print_output(const json_t *j, const char *key, FILE *f) {
        char k[32];
        snprintf(k, sizeof k, "%s_b64", key);
        json_t *b = json_object_get(j, k), *t = json_object_get(j, key);
        _cleanup_free_ char *raw = NULL;
        size_t n = 0;
        if (json_is_string(b) && ntfs_base64_decode(json_string_value(b), json_string_length(b), &raw, &n) == 0)
                fwrite(raw, 1, n, f);
        else if (json_is_string(t))
                fwrite(json_string_value(t), 1, json_string_length(t), f);
}

int cmd_exec(struct ctx *c, const struct cmd *cmd, struct args *a) {
        if (!a->dashdash || a->nrest == 0)
                return usage_error(cmd, "exec needs '--' and a command");
        const char *tool = flag(cmd, a, "tool"), *tmo = flag(cmd, a, "timeout"), *key = flag(cmd, a, "idempotency-key");
        uint64_t timeout = 0;
        if (tmo && parse_num_flag(cmd, "timeout", tmo, 86400, &timeout))
                return EXIT_USAGE;
        _cleanup_free_ char *command = NULL;
        if (a->nrest == 1) {
                if (strlen(a->rest[0]) > MAX_EXEC_COMMAND)
                        return usage_error(cmd, "the command is longer than %u bytes", MAX_EXEC_COMMAND);
                command = strdup(a->rest[0]);
                if (!command)
                        return oom(c);
        } else {
                size_t len = 0;
                for (int i = 0; i < a->nrest; i++) {
                        int r = shell_quote_append(&command, &len, a->rest[i]);
                        if (r == -E2BIG)
                                return usage_error(cmd, "the command is longer than %u bytes", MAX_EXEC_COMMAND);
                        if (r < 0)
                                return oom(c);
                }
        }
        _cleanup_free_ char *path = session_path(a->pos[0], "/exec");
        json_t *body = json_pack("{s:s}", "command", command);
        if (!path || !body) {
                json_decref(body);
                return oom(c);
        }
        if (tool)
                set_str(body, "tool", tool);
        if (tmo)
                json_object_set_new(body, "timeout", json_integer((json_int_t)timeout));
        if (key)
                set_str(body, "idempotency_key", key);
        bool tty = has_flag(cmd, a, "tty"), no_stdin = has_flag(cmd, a, "no-stdin");
        if (!c->json) { /* streamed: output as it comes, stdin, -t, signals */
                int r = exec_stream(c, a->pos[0], body, tty, !no_stdin);
                json_decref(body);
                return r;
        }
        if (tty) {
                json_decref(body);
                return usage_error(cmd, "-t streams to a terminal; --json answers once, at the end");
        }
        json_t *j = NULL;
        /* No client deadline without --timeout: the server bounds the run. */
        unsigned cms = tmo ? (unsigned)NTFS_MIN((timeout + 60) * 1000, (uint64_t)UINT_MAX) : 0;
        int r = call_full(c, "POST", path, body, cms, &j, NULL, false);
        json_decref(body);
        if (r)
                return r;
        json_int_t code = 0;
        bool has_code = jint(j, "exit_code", &code);
        bool timed_out = jtrue(j, "timed_out");
        if (c->json)
                print_json(j);
        else {
                fflush(stderr);
                print_output(j, "stdout", stdout);
                fflush(stdout);
                print_output(j, "stderr", stderr);
                fflush(stderr);
                if (jtrue(j, "stdout_truncated"))
                        fprintf(stderr, "ntfs-ctl: stdout was truncated by the server (truncated)\n");
                if (jtrue(j, "stderr_truncated"))
                        fprintf(stderr, "ntfs-ctl: stderr was truncated by the server (truncated)\n");
                if (timed_out)
                        fprintf(stderr, "ntfs-ctl: the command timed out (timeout)\n");
        }
        json_decref(j);
        if (has_code && code >= 0 && code <= 255 && !(timed_out && code == 0))
                return (int)code;
        if (timed_out)
                return 124;
        return has_code ? EXIT_FAIL : 0;
}

/* ---- fetch (the gateway, issue 7) ------------------------------------------------------ */

int cmd_fetch(struct ctx *c, const struct cmd *cmd, struct args *a) {
        const char *method = flag(cmd, a, "method"), *key = flag(cmd, a, "idempotency-key");
        _cleanup_free_ char *path = session_path(a->pos[0], "/fetch");
        json_t *body = json_pack("{s:s}", "url", a->pos[1]);
        if (!path || !body) {
                json_decref(body);
                return oom(c);
        }
        if (method)
                set_str(body, "method", method);
        if (key)
                set_str(body, "idempotency_key", key);
        json_t *j = NULL;
        int r = call(c, "POST", path, body, &j);
        json_decref(body);
        if (r)
                return r;
        json_int_t status = 0;
        (void)jint(j, "status", &status);
        if (c->json) {
                print_json(j);
        } else {
                json_t *b = json_object_get(j, "body");
                const char *enc = json_string_value(json_object_get(j, "body_encoding"));
                if (json_is_string(b) && enc && strcmp(enc, "base64") == 0) {
                        char *raw = NULL;
                        size_t rl = 0;
                        if (ntfs_base64_decode(json_string_value(b), json_string_length(b), &raw, &rl) == 0) {
                                fwrite(raw, 1, rl, stdout);
                                free(raw);
                        }
                } else if (json_is_string(b))
                        fwrite(json_string_value(b), 1, json_string_length(b), stdout);
                fflush(stdout);
                if (jtrue(j, "truncated"))
                        fprintf(stderr, "ntfs-ctl: the body was truncated at the size limit (truncated)\n");
                if (jtrue(j, "replayed"))
                        fprintf(stderr, "ntfs-ctl: served from the journal, not fetched again (replayed)\n");
                if (status >= 400)
                        fprintf(stderr, "ntfs-ctl: HTTP %lld from %s\n", (long long)status,
                                json_string_value(json_object_get(j, "url")) ?: a->pos[1]);
        }
        json_decref(j);
        return status >= 400 ? EXIT_FAIL : 0;
}

/* ---- end of fetch ------------------------------------------------------------------------- */

int cmd_effects(struct ctx *c, const struct cmd *cmd, struct args *a) {
        const char *lim = flag(cmd, a, "limit");
        uint64_t n = 0;
        if (lim && parse_num_flag(cmd, "limit", lim, 1000000, &n))
                return EXIT_USAGE;
        _cleanup_free_ char *base = session_path(a->pos[0], "/effects");
        _cleanup_free_ char *path = NULL;
        if (!base || (lim ? asprintf(&path, "%s?limit=%" PRIu64, base, n) : asprintf(&path, "%s", base)) < 0)
                return oom(c);
        json_t *j = NULL;
        int r = call(c, "GET", path, NULL, &j);
        if (r)
                return r;
        if (c->json) {
                r = print_json(j);
                json_decref(j);
                return r;
        }
        struct table t = { .ncols = 8 };
        table_add(&t, (const char *[]){ "ID", "STEP", "TOOL", "CLASS", "STATUS", "AFTER", "INPUT", "REASON" });
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(j, "effects"), i, e) {
                char b1[64], b2[64], ab[16], ib[200];
                const char *after = jstr(e, "commit_after", NULL);
                snprintf(ab, sizeof ab, "%.12s", after ? after : "-");
                json_t *in = json_object_get(e, "input");
                const char *input = NULL;
                if (json_is_object(in))
                        input = jstr(in, "command", NULL) ? jstr(in, "command", NULL) : jstr(in, "url", NULL);
                if (!input) {
                        char *s = in ? json_dumps(in, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
                        snprintf(ib, sizeof ib, "%s", s ? s : "-");
                        free(s);
                        input = ib;
                }
                _cleanup_free_ char *shortin = sanitize_dup(input, 60);
                table_add(&t, (const char *[]){ jscalar(json_object_get(e, "id"), b1, sizeof b1),
                                                jscalar(json_object_get(e, "step"), b2, sizeof b2),
                                                jstr(e, "tool", "-"), jstr(e, "effect_class", "-"),
                                                jstr(e, "status", "-"), ab, shortin ? shortin : "-",
                                                jstr(e, "reason", "-") });
        }
        if (t.nrows == 1)
                printf("no effects\n");
        else
                table_print(&t);
        table_free(&t);
        json_decref(j);
        return 0;
}

/* ---- replay (docs/recovery.md) ------------------------------------------------ */

int cmd_replay(struct ctx *c, const struct cmd *cmd, struct args *a) {
        const char *into = flag(cmd, a, "into"), *froms = flag(cmd, a, "from");
        if (!into)
                return usage_error(cmd, "replay needs --into NEWNAME");
        uint64_t from = 0;
        if (froms && parse_num_flag(cmd, "from", froms, INT64_MAX, &from))
                return EXIT_USAGE;
        _cleanup_free_ char *path = session_path(a->pos[0], "/replay");
        json_t *body = json_pack("{s:s}", "into", into);
        if (!path || !body) {
                json_decref(body);
                return oom(c);
        }
        if (froms)
                json_object_set_new(body, "from_step", json_integer((json_int_t)from));
        json_t *j = NULL;
        /* No client deadline: the server bounds each re-run by its tool's timeout. */
        int r = call_full(c, "POST", path, body, 0, &j, NULL, false);
        json_decref(body);
        if (r)
                return r;
        if (c->json) {
                r = print_json(j);
                json_decref(j);
                return r;
        }
        struct table t = { .ncols = 4 };
        table_add(&t, (const char *[]){ "STEP", "TOOL", "STATUS", "EXIT" });
        size_t i;
        json_t *st;
        json_array_foreach(json_object_get(j, "steps"), i, st) {
                char b1[64], b2[64];
                table_add(&t, (const char *[]){ jscalar(json_object_get(st, "step"), b1, sizeof b1),
                                                jstr(st, "tool", "-"), jstr(st, "status", "-"),
                                                jscalar(json_object_get(st, "exit_code"), b2, sizeof b2) });
        }
        if (t.nrows > 1)
                table_print(&t);
        table_free(&t);
        char b[64];
        printf("replayed %s into %s from %s (%s same, ", a->pos[0], jstr(j, "into", into), jstr(j, "short", "?"),
               jscalar(json_object_get(j, "same"), b, sizeof b));
        printf("%s diverged, ", jscalar(json_object_get(j, "diverged"), b, sizeof b));
        printf("%s served)\n", jscalar(json_object_get(j, "served"), b, sizeof b));
        json_t *fd = json_object_get(j, "first_divergence");
        if (json_is_integer(fd))
                printf("first divergence: step %" JSON_INTEGER_FORMAT "\n", json_integer_value(fd));
        else
                printf("no divergence\n");
        json_decref(j);
        return 0;
}

/* ---- conversation: an agent session's messages ------------------------------------------- */

/* Prints s after prefix, every control character (but, in s, the newline)
 * shown as '?': a model's words reach a terminal. Continuation lines are
 * indented. */
static void print_block(const char *prefix, const char *s) {
        for (const unsigned char *p = (const unsigned char *)prefix; *p; p++)
                putchar(*p < 0x20 || *p == 0x7f ? '?' : *p);
        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                if (*p == '\n')
                        fputs(p[1] ? "\n    " : "", stdout);
                else
                        putchar(*p < 0x20 || *p == 0x7f ? '?' : *p);
        }
        putchar('\n');
}

/* The text of a tool result's content: a string, or the text of its blocks. */
static void print_result(const char *prefix, const json_t *content) {
        if (json_is_string(content)) {
                print_block(prefix, json_string_value(content));
                return;
        }
        size_t i;
        json_t *b;
        bool any = false;
        json_array_foreach(content, i, b) {
                const char *t = jstr(b, "text", NULL);
                if (t) {
                        print_block(prefix, t);
                        any = true;
                }
        }
        if (!any)
                print_block(prefix, "");
}

int cmd_conversation(struct ctx *c, const struct cmd *cmd, struct args *a) {
        _cleanup_free_ char *path = session_path(a->pos[0], "/resume");
        json_t *body = json_pack("{s:i}", "effects", 0);
        if (!path || !body) {
                json_decref(body);
                return oom(c);
        }
        json_t *j = NULL;
        int r = call(c, "POST", path, body, &j);
        json_decref(body);
        if (r)
                return r;
        json_t *msgs = json_object_get(j, "messages");
        if (c->json) {
                json_t *o = json_pack("{s:s, s:O?, s:O}", "session", a->pos[0], "step", json_object_get(j, "step"),
                                      "messages", msgs ? msgs : json_null());
                r = o ? print_json(o) : oom(c);
                json_decref(o);
                json_decref(j);
                return r;
        }
        if (json_array_size(msgs) == 0)
                printf("no conversation saved for %s\n", a->pos[0]);
        size_t i;
        json_t *m;
        json_array_foreach(msgs, i, m) {
                char prefix[160];
                const char *role = jstr(m, "role", "?");
                json_t *content = json_object_get(m, "content");
                if (json_is_string(content)) {
                        snprintf(prefix, sizeof prefix, "[%zu] %s: ", i + 1, role);
                        print_block(prefix, json_string_value(content));
                        continue;
                }
                size_t k;
                json_t *b;
                json_array_foreach(content, k, b) {
                        const char *type = jstr(b, "type", "?");
                        if (strcmp(type, "text") == 0) {
                                snprintf(prefix, sizeof prefix, "[%zu] %s: ", i + 1, role);
                                print_block(prefix, jstr(b, "text", ""));
                        } else if (strcmp(type, "tool_use") == 0) {
                                _cleanup_free_ char *in = json_dumps(json_object_get(b, "input"),
                                                                     JSON_COMPACT | JSON_ENCODE_ANY);
                                snprintf(prefix, sizeof prefix, "[%zu] %s calls %.40s (%.80s): ", i + 1, role,
                                         jstr(b, "name", "?"), jstr(b, "id", "?"));
                                print_block(prefix, in ? in : "");
                        } else if (strcmp(type, "tool_result") == 0) {
                                snprintf(prefix, sizeof prefix, "[%zu] %s result of %.80s%s: ", i + 1, role,
                                         jstr(b, "tool_use_id", "?"), jtrue(b, "is_error") ? " (error)" : "");
                                print_result(prefix, json_object_get(b, "content"));
                        } else {
                                snprintf(prefix, sizeof prefix, "[%zu] %s: ", i + 1, role);
                                print_block(prefix, type);
                        }
                }
        }
        json_decref(j);
        return 0;
}
