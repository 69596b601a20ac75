/* SPDX-License-Identifier: MIT
 * jail-util.c — shell-state codec, JSON string writer (see jail-internal.h).
 */
#include "exec/jail-internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "common/banned.h"

/* ---- jbuf ---------------------------------------------------------------- */

int jbuf_put(struct jbuf *b, const void *p, size_t n) {
        if (n > SIZE_MAX / 2 - b->len)
                return -ENOMEM;
        if (b->len + n + 1 > b->cap) {
                size_t ncap = b->cap ? b->cap : 256;
                while (ncap < b->len + n + 1)
                        ncap *= 2;
                char *np = realloc(b->p, ncap);
                if (!np)
                        return -ENOMEM;
                b->p = np;
                b->cap = ncap;
        }
        if (n)
                memcpy(b->p + b->len, p, n);
        b->len += n;
        b->p[b->len] = 0;
        return 0;
}

int jbuf_puts(struct jbuf *b, const char *s) { return jbuf_put(b, s, strlen(s)); }

int jbuf_printf(struct jbuf *b, const char *fmt, ...) {
        char tmp[512];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
        va_end(ap);
        if (n < 0 || (size_t)n >= sizeof tmp)
                return -EINVAL;
        return jbuf_put(b, tmp, (size_t)n);
}

int jbuf_json_string(struct jbuf *b, const char *s, size_t n) {
        const unsigned char *u = (const unsigned char *)s;
        int r = jbuf_put(b, "\"", 1);
        size_t i = 0;
        while (r >= 0 && i < n) {
                /* Copy a run of plain characters at once. */
                size_t j = i;
                while (j < n && u[j] >= 0x20 && u[j] < 0x80 && u[j] != '"' && u[j] != '\\')
                        j++;
                if (j > i) {
                        r = jbuf_put(b, s + i, j - i);
                        i = j;
                        continue;
                }
                unsigned char c = u[i];
                if (c == '"')
                        r = jbuf_put(b, "\\\"", 2), i++;
                else if (c == '\\')
                        r = jbuf_put(b, "\\\\", 2), i++;
                else if (c == '\n')
                        r = jbuf_put(b, "\\n", 2), i++;
                else if (c == '\t')
                        r = jbuf_put(b, "\\t", 2), i++;
                else if (c < 0x20 || c == 0x7f)
                        r = jbuf_printf(b, "\\u%04x", c), i++;
                else {
                        size_t l = ntfs_utf8_seq_len(u + i, n - i);
                        if (l == 0)
                                r = jbuf_put(b, "\\ufffd", 6), i++;
                        else
                                r = jbuf_put(b, s + i, l), i += l;
                }
        }
        if (r >= 0)
                r = jbuf_put(b, "\"", 1);
        return r;
}

int jbuf_json_output(struct jbuf *b, const char *key, const char *s, size_t n) {
        int r = jbuf_printf(b, "\"%s\":", key);
        if (r < 0)
                return r;
        if (ntfs_text_clean(s, n))
                return jbuf_json_string(b, s, n);
        _cleanup_free_ char *text = NULL, *b64 = NULL;
        size_t tl = 0, bl = 0;
        if ((r = ntfs_text_lossy(s, n, &text, &tl)) < 0 || (r = ntfs_base64_encode(s, n, &b64, &bl)) < 0)
                return r;
        if ((r = jbuf_json_string(b, text, tl)) < 0 || (r = jbuf_printf(b, ",\"%s_b64\":\"", key)) < 0 ||
            (r = jbuf_put(b, b64, bl)) < 0)
                return r;
        return jbuf_put(b, "\"", 1);
}

/* ---- shell state ------------------------------------------------------------ */

void jail_state_release(struct jail_state *s) {
        if (!s)
                return;
        free(s->cwd);
        for (size_t i = 0; i < s->n_vars; i++)
                free(s->vars[i]);
        free(s->vars);
        *s = (struct jail_state){ 0 };
}

bool jail_env_name_valid(const char *s, size_t len) {
        if (len == 0 || len > 255)
                return false;
        for (size_t i = 0; i < len; i++) {
                char c = s[i];
                bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
                if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
                        return false;
        }
        return true;
}

/* Decodes an escaped field of length n into a new NUL-terminated string.
 * A decoded NUL is refused (values and paths cannot hold one). */
static int unescape(const char *s, size_t n, char **ret) {
        _cleanup_free_ char *out = malloc(n + 1);
        if (!out)
                return -ENOMEM;
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)s[i];
                if (c == '\\') {
                        if (n - i < 4 || s[i + 1] != 'x')
                                return -EINVAL;
                        int hi = ntfs_hexval(s[i + 2]), lo = ntfs_hexval(s[i + 3]);
                        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                                return -EINVAL;
                        out[o++] = (char)(hi << 4 | lo);
                        i += 3;
                } else if (c < 0x20 || c > 0x7e) {
                        return -EINVAL;
                } else
                        out[o++] = (char)c;
        }
        out[o] = 0;
        *ret = TAKE_PTR(out);
        return 0;
}

static int escape(struct jbuf *b, const char *s, size_t n) {
        static const char hex[] = "0123456789abcdef";
        int r = 0;
        for (size_t i = 0; i < n && r >= 0; i++) {
                unsigned char c = (unsigned char)s[i];
                if (c >= 0x20 && c <= 0x7e && c != '\\')
                        r = jbuf_put(b, s + i, 1);
                else {
                        char e[4] = { '\\', 'x', hex[c >> 4], hex[c & 15] };
                        r = jbuf_put(b, e, 4);
                }
        }
        return r;
}

/* A relative cwd must not climb out of /workspace. */
static bool rel_path_valid(const char *p) {
        if (p[0] == '/')
                return false;
        const char *s = p;
        while (*s) {
                const char *e = strchr(s, '/');
                size_t l = e ? (size_t)(e - s) : strlen(s);
                if (l == 2 && s[0] == '.' && s[1] == '.')
                        return false;
                s += l;
                if (*s == '/')
                        s++;
        }
        return true;
}

#define STATE_HEADER "ntfs-jail-state 1"

int jail_state_parse(const char *blob, size_t len, struct jail_state *ret) {
        if (len > JAIL_STATE_MAX)
                return -E2BIG;
        struct jail_state s = { 0 };
        int r = 0;
        size_t pos = 0, line_no = 0;
        while (pos < len) {
                const char *line = blob + pos;
                const char *nl = memchr(line, '\n', len - pos);
                size_t l = nl ? (size_t)(nl - line) : len - pos;
                pos += l + (nl ? 1 : 0);
                if (l == 0)
                        continue;
                if (line_no++ == 0) {
                        if (l != strlen(STATE_HEADER) || memcmp(line, STATE_HEADER, l) != 0) {
                                r = -EINVAL;
                                break;
                        }
                        continue;
                }
                if (l >= 4 && memcmp(line, "cwd ", 4) == 0) {
                        char *c = NULL;
                        r = unescape(line + 4, l - 4, &c);
                        if (r < 0)
                                break;
                        free(s.cwd);
                        s.cwd = c;
                        if (!rel_path_valid(c)) {
                                r = -EINVAL;
                                break;
                        }
                } else if (l >= 4 && memcmp(line, "env ", 4) == 0) {
                        const char *kv = line + 4, *eq = memchr(kv, '=', l - 4);
                        if (!eq || !jail_env_name_valid(kv, (size_t)(eq - kv))) {
                                r = -EINVAL;
                                break;
                        }
                        if (s.n_vars >= JAIL_STATE_VARS_MAX) {
                                r = -E2BIG;
                                break;
                        }
                        _cleanup_free_ char *val = NULL;
                        r = unescape(eq + 1, l - 4 - (size_t)(eq + 1 - kv), &val);
                        if (r < 0)
                                break;
                        size_t nl_ = (size_t)(eq - kv), vl = strlen(val);
                        char *item = malloc(nl_ + 1 + vl + 1);
                        char **nv = item ? realloc(s.vars, (s.n_vars + 1) * sizeof *nv) : NULL;
                        if (!nv) {
                                free(item);
                                r = -ENOMEM;
                                break;
                        }
                        s.vars = nv;
                        memcpy(item, kv, nl_ + 1);
                        memcpy(item + nl_ + 1, val, vl + 1);
                        s.vars[s.n_vars++] = item;
                } else {
                        r = -EINVAL;
                        break;
                }
        }
        if (r >= 0 && line_no == 0)
                r = -EINVAL; /* empty blob: no header */
        if (r >= 0 && !s.cwd) {
                s.cwd = strdup("");
                if (!s.cwd)
                        r = -ENOMEM;
        }
        if (r < 0) {
                jail_state_release(&s);
                return r;
        }
        *ret = s;
        return 0;
}

static bool shell_owned(const char *name, size_t n) {
        static const char *const owned[] = { "PWD", "OLDPWD", "SHLVL", "_" };
        for (size_t i = 0; i < ARRAY_SIZE(owned); i++)
                if (strlen(owned[i]) == n && memcmp(owned[i], name, n) == 0)
                        return true;
        return false;
}

int jail_state_from_raw(const char *raw, size_t len, char **ret, size_t *ret_len) {
        if (len > JAIL_STATE_MAX)
                return -E2BIG;
        struct jbuf b = { 0 };
        const char *cwd = "";
        size_t cwd_len = 0, n_vars = 0;
        int r = jbuf_puts(&b, STATE_HEADER "\n");
        /* First pass: the last cwd= item wins. */
        for (size_t pos = 0; pos < len;) {
                const char *it = raw + pos, *z = memchr(it, 0, len - pos);
                size_t l = z ? (size_t)(z - it) : len - pos;
                pos += l + 1;
                if (l >= 4 && memcmp(it, "cwd=", 4) == 0) {
                        const char *p = it + 4;
                        size_t pl = l - 4;
                        static const char ws[] = "/workspace";
                        size_t wl = sizeof ws - 1;
                        if (pl >= wl && memcmp(p, ws, wl) == 0 && (pl == wl || p[wl] == '/')) {
                                cwd = p + wl;
                                cwd_len = pl - wl;
                                while (cwd_len && cwd[0] == '/')
                                        cwd++, cwd_len--;
                        } else
                                cwd = "", cwd_len = 0;
                }
        }
        if (r >= 0)
                r = jbuf_puts(&b, "cwd ");
        if (r >= 0)
                r = escape(&b, cwd, cwd_len);
        if (r >= 0)
                r = jbuf_puts(&b, "\n");
        for (size_t pos = 0; r >= 0 && pos < len;) {
                const char *it = raw + pos, *z = memchr(it, 0, len - pos);
                size_t l = z ? (size_t)(z - it) : len - pos;
                pos += l + 1;
                if (l < 4 || memcmp(it, "env=", 4) != 0)
                        continue;
                const char *kv = it + 4, *eq = memchr(kv, '=', l - 4);
                if (!eq)
                        continue;
                size_t nl = (size_t)(eq - kv);
                if (!jail_env_name_valid(kv, nl) || shell_owned(kv, nl))
                        continue;
                if (++n_vars > JAIL_STATE_VARS_MAX) {
                        r = -E2BIG;
                        break;
                }
                r = jbuf_puts(&b, "env ");
                if (r >= 0)
                        r = jbuf_put(&b, kv, nl + 1);
                if (r >= 0)
                        r = escape(&b, eq + 1, l - 4 - nl - 1);
                if (r >= 0)
                        r = jbuf_puts(&b, "\n");
        }
        if (r >= 0 && b.len > JAIL_STATE_MAX)
                r = -E2BIG;
        if (r < 0) {
                free(b.p);
                return r;
        }
        *ret = b.p;
        if (ret_len)
                *ret_len = b.len;
        return 0;
}
