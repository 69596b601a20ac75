/* SPDX-License-Identifier: MIT
 * ntfs-ctl's output: usage and failure messages, JSON printing and field
 * access, human-readable sizes, times and paths, and an aligned table.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "ctl/cli/cli.h"
#include "common/banned.h"

/* ---- output helpers ------------------------------------------------------- */

void print_usage_line(FILE *f, const struct cmd *cmd) {
        fprintf(f, "usage: ntfs-ctl [--socket PATH] [--json] %s%s%s\n", cmd->name, cmd->synopsis[0] ? " " : "",
                cmd->synopsis);
}

int usage_error(const struct cmd *cmd, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        fputs("ntfs-ctl: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
        if (cmd) {
                print_usage_line(stderr, cmd);
                fprintf(stderr, "Try 'ntfs-ctl %s --help' for more information.\n", cmd->name);
        } else
                fputs("Try 'ntfs-ctl --help' for more information.\n", stderr);
        return EXIT_USAGE;
}

/* Prints "ntfs-ctl: MESSAGE (CODE)" and, with --json, the error object on
 * stdout so that machines always get one JSON document. */
int fail(struct ctx *c, const json_t *server_body, const char *code, const char *fmt, ...) {
        char msg[2048];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        fprintf(stderr, "ntfs-ctl: %s (%s)\n", msg, code);
        if (c && c->json) {
                json_t *o = server_body ? json_incref((json_t *)server_body)
                                        : json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);
                char *s = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
                if (s)
                        printf("%s\n", s);
                free(s);
                json_decref(o);
        }
        return EXIT_FAIL;
}

int print_json(const json_t *j) {
        if (!j) {
                printf("{}\n");
                return 0;
        }
        _cleanup_free_ char *s = json_dumps(j, JSON_INDENT(2) | JSON_ENCODE_ANY);
        if (!s)
                return fail(NULL, NULL, "out_of_memory", "cannot format the answer");
        printf("%s\n", s);
        return 0;
}

/* Borrowed string of o[key], or dflt. Numbers/bools are not strings. */
const char *jstr(const json_t *o, const char *key, const char *dflt) {
        const char *s = json_string_value(json_object_get(o, key));
        return s ? s : dflt;
}

bool jint(const json_t *o, const char *key, json_int_t *ret) {
        json_t *v = json_object_get(o, key);
        if (json_is_integer(v)) {
                *ret = json_integer_value(v);
                return true;
        }
        if (json_is_real(v)) {
                *ret = (json_int_t)json_real_value(v);
                return true;
        }
        return false;
}

bool jtrue(const json_t *o, const char *key) {
        return json_is_true(json_object_get(o, key));
}

/* A scalar as text into buf ("-" for absent/null). */
const char *jscalar(const json_t *v, char *buf, size_t len) {
        if (!v || json_is_null(v))
                return "-";
        if (json_is_string(v))
                return json_string_value(v);
        if (json_is_integer(v)) {
                snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
                return buf;
        }
        if (json_is_real(v)) {
                snprintf(buf, len, "%g", json_real_value(v));
                return buf;
        }
        if (json_is_boolean(v))
                return json_is_true(v) ? "yes" : "no";
        char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        snprintf(buf, len, "%s", s ? s : "?");
        free(s);
        return buf;
}

const char *human_bytes(uint64_t b, char *buf, size_t len) {
        static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
        double v = (double)b;
        size_t u = 0;
        while (v >= 1024 && u + 1 < ARRAY_SIZE(units)) {
                v /= 1024;
                u++;
        }
        if (u == 0)
                snprintf(buf, len, "%" PRIu64 " B", b);
        else
                snprintf(buf, len, "%.1f %s", v, units[u]);
        return buf;
}

/* Times arrive as ns (log, effects), maybe s or ms elsewhere, or a string. */
const char *human_time(const json_t *v, char *buf, size_t len) {
        if (json_is_string(v))
                return json_string_value(v);
        if (!json_is_integer(v) && !json_is_real(v))
                return "-";
        double t = json_number_value(v);
        if (t > 1e17)
                t /= 1e9;
        else if (t > 1e14)
                t /= 1e6;
        else if (t > 1e11)
                t /= 1e3;
        time_t secs = (time_t)t;
        struct tm tm;
        if (!localtime_r(&secs, &tm) || strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm) == 0)
                return "-";
        return buf;
}

/* Writes s with C-style quoting when it holds control characters, a quote
 * or a backslash (as git's core.quotePath does for those). */
void print_path(const char *s) {
        bool plain = true;
        for (const unsigned char *p = (const unsigned char *)s; *p; p++)
                if (*p < 0x20 || *p == 0x7f || *p == '"' || *p == '\\')
                        plain = false;
        if (plain) {
                fputs(s, stdout);
                return;
        }
        putchar('"');
        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                switch (*p) {
                case '\n': fputs("\\n", stdout); break;
                case '\t': fputs("\\t", stdout); break;
                case '\r': fputs("\\r", stdout); break;
                case '"': fputs("\\\"", stdout); break;
                case '\\': fputs("\\\\", stdout); break;
                default:
                        if (*p < 0x20 || *p == 0x7f)
                                printf("\\%03o", *p);
                        else
                                putchar(*p);
                }
        }
        putchar('"');
}

/* Replaces control characters with '?' (for table cells from the server). */
char *sanitize_dup(const char *s, size_t maxlen) {
        size_t n = strnlen(s, maxlen);
        bool cut = s[n] != 0;
        char *d = malloc(n + 4);
        if (!d)
                return NULL;
        for (size_t i = 0; i < n; i++)
                d[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
        if (cut) {
                memcpy(d + n, "...", 3);
                n += 3;
        }
        d[n] = 0;
        return d;
}

/* ---- a small table printer: aligned columns, two spaces apart ------------ */

void table_free(struct table *t) {
        for (size_t i = 0; i < t->nrows * (size_t)t->ncols; i++)
                free(t->cells[i]);
        free(t->cells);
}

/* Adds a row of ncols strings (copied, sanitized; NULL prints "-"). */
int table_add(struct table *t, const char *const *row) {
        if (t->nrows == t->cap) {
                size_t cap = t->cap ? t->cap * 2 : 16;
                char **n = reallocarray(t->cells, cap * (size_t)t->ncols, sizeof *n);
                if (!n)
                        return -ENOMEM;
                t->cells = n;
                t->cap = cap;
        }
        char **dst = t->cells + t->nrows * (size_t)t->ncols;
        for (int i = 0; i < t->ncols; i++) {
                dst[i] = sanitize_dup(row[i] ? row[i] : "-", 200);
                if (!dst[i]) {
                        for (int k = 0; k < i; k++)
                                free(dst[k]);
                        return -ENOMEM;
                }
        }
        t->nrows++;
        return 0;
}

void table_print(const struct table *t) {
        size_t w[TABLE_MAX_COLS] = { 0 };
        for (size_t r = 0; r < t->nrows; r++)
                for (int i = 0; i < t->ncols; i++)
                        w[i] = NTFS_MAX(w[i], strlen(t->cells[r * (size_t)t->ncols + i]));
        for (size_t r = 0; r < t->nrows; r++) {
                for (int i = 0; i < t->ncols; i++) {
                        const char *s = t->cells[r * (size_t)t->ncols + i];
                        if (i + 1 < t->ncols)
                                printf("%-*s  ", (int)w[i], s);
                        else
                                printf("%s\n", s);
                }
        }
}
