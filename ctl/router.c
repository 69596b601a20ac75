/* SPDX-License-Identifier: MIT */
#include "ctl/router.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/util.h"
#include "common/banned.h"

enum seg_kind { SEG_WILD = 0, SEG_PARAM = 1, SEG_LITERAL = 2 };

struct segment {
        enum seg_kind kind;
        char *text; /* literal text, or the param name */
};

struct route {
        char *method;
        char *pattern;
        ntfs_http_handler handler;
        unsigned flags;
        size_t n_segs;
        struct segment segs[NTFS_ROUTE_MAX_SEGMENTS];
};

struct ntfs_router {
        struct route **routes;
        size_t n, cap;
};

int ntfs_router_new(ntfs_router **ret) {
        ntfs_router *r = calloc(1, sizeof *r);
        if (!r)
                return -ENOMEM;
        *ret = r;
        return 0;
}

static void route_free(struct route *rt) {
        if (!rt)
                return;
        for (size_t i = 0; i < rt->n_segs; i++)
                free(rt->segs[i].text);
        free(rt->method);
        free(rt->pattern);
        free(rt);
}

void ntfs_router_free(ntfs_router *r) {
        if (!r)
                return;
        for (size_t i = 0; i < r->n; i++)
                route_free(r->routes[i]);
        free(r->routes);
        free(r);
}

static bool method_valid(const char *m, size_t len) {
        if (len == 0 || len > 16)
                return false;
        for (size_t i = 0; i < len; i++)
                if (m[i] < 'A' || m[i] > 'Z')
                        return false;
        return true;
}

/* Same method and the same sequence of segment kinds/literals. */
static bool route_same_shape(const struct route *a, const struct route *b) {
        if (strcmp(a->method, b->method) != 0 || a->n_segs != b->n_segs)
                return false;
        for (size_t i = 0; i < a->n_segs; i++) {
                if (a->segs[i].kind != b->segs[i].kind)
                        return false;
                if (a->segs[i].kind == SEG_LITERAL && strcmp(a->segs[i].text, b->segs[i].text) != 0)
                        return false;
        }
        return true;
}

int ntfs_router_add_table(ntfs_router *r, const struct ntfs_route *routes, size_t n) {
        for (size_t i = 0; i < n; i++) {
                int e = ntfs_router_add(r, routes[i].pattern, routes[i].handler, routes[i].flags);
                if (e < 0)
                        return e;
        }
        return 0;
}

int ntfs_router_add(ntfs_router *r, const char *pattern, ntfs_http_handler handler, unsigned flags) {
        if (!r || !pattern || !handler)
                return -EINVAL;
        const char *sp = strchr(pattern, ' ');
        if (!sp || !method_valid(pattern, (size_t)(sp - pattern)) || sp[1] != '/')
                return -EINVAL;
        struct route *rt = calloc(1, sizeof *rt);
        if (!rt)
                return -ENOMEM;
        rt->handler = handler;
        rt->flags = flags;
        rt->method = strndup(pattern, (size_t)(sp - pattern));
        rt->pattern = strdup(pattern);
        if (!rt->method || !rt->pattern) {
                route_free(rt);
                return -ENOMEM;
        }
        const char *p = sp + 1;
        size_t n_params = 0;
        int err = 0;
        /* "/" alone is the root: zero segments. */
        if (strcmp(p, "/") != 0) {
                while (*p == '/') {
                        p++;
                        size_t len = strcspn(p, "/");
                        if (len == 0 || rt->n_segs >= NTFS_ROUTE_MAX_SEGMENTS) {
                                err = -EINVAL;
                                break;
                        }
                        struct segment *s = &rt->segs[rt->n_segs];
                        if (p[0] == '{') {
                                bool wild = len >= 4 && p[len - 2] == '*' && p[len - 1] == '}';
                                size_t nlen = len - (wild ? 3 : 2);
                                if (p[len - 1] != '}' || nlen == 0 || n_params >= NTFS_ROUTE_MAX_PARAMS) {
                                        err = -EINVAL;
                                        break;
                                }
                                if (memchr(p + 1, '{', nlen) || memchr(p + 1, '}', nlen) ||
                                    memchr(p + 1, '*', nlen)) {
                                        err = -EINVAL;
                                        break;
                                }
                                if (wild && p[len] != 0) { /* '*' only last */
                                        err = -EINVAL;
                                        break;
                                }
                                s->kind = wild ? SEG_WILD : SEG_PARAM;
                                s->text = strndup(p + 1, nlen);
                                n_params++;
                        } else {
                                if (memchr(p, '{', len) || memchr(p, '}', len) || memchr(p, '%', len)) {
                                        err = -EINVAL;
                                        break;
                                }
                                s->kind = SEG_LITERAL;
                                s->text = strndup(p, len);
                        }
                        rt->n_segs++;
                        if (!s->text) {
                                err = -ENOMEM;
                                break;
                        }
                        /* duplicate param names */
                        if (s->kind != SEG_LITERAL)
                                for (size_t i = 0; i + 1 < rt->n_segs; i++)
                                        if (rt->segs[i].kind != SEG_LITERAL &&
                                            strcmp(rt->segs[i].text, s->text) == 0)
                                                err = -EINVAL;
                        if (err < 0)
                                break;
                        p += len;
                }
                if (err == 0 && *p != 0)
                        err = -EINVAL;
        }
        if (err < 0) {
                route_free(rt);
                return err;
        }
        for (size_t i = 0; i < r->n; i++)
                if (route_same_shape(r->routes[i], rt)) {
                        route_free(rt);
                        return -EEXIST;
                }
        if (r->n == r->cap) {
                size_t ncap = r->cap ? r->cap * 2 : 32;
                struct route **nr = realloc(r->routes, ncap * sizeof *nr);
                if (!nr) {
                        route_free(rt);
                        return -ENOMEM;
                }
                r->routes = nr;
                r->cap = ncap;
        }
        r->routes[r->n++] = rt;
        return 0;
}

int ntfs_http_percent_decode(const char *src, size_t len, char *dst, size_t dstlen, bool plus_is_space) {
        size_t o = 0;
        for (size_t i = 0; i < len; i++) {
                char c = src[i];
                if (c == '%') {
                        if (len - i < 3)
                                return -EINVAL;
                        int hi = ntfs_hexval(src[i + 1]), lo = ntfs_hexval(src[i + 2]);
                        if (hi < 0 || lo < 0)
                                return -EINVAL;
                        c = (char)(hi * 16 + lo);
                        i += 2;
                } else if (c == '+' && plus_is_space)
                        c = ' ';
                if (c == 0)
                        return -EINVAL;
                if (o + 1 >= dstlen)
                        return -ENAMETOOLONG;
                dst[o++] = c;
        }
        if (dstlen == 0)
                return -ENAMETOOLONG;
        dst[o] = 0;
        return (int)NTFS_MIN(o, (size_t)0x7fffffff);
}

struct pseg {
        const char *p;
        size_t len;
};

/* Splits the path into segments; the path must start with '/'. */
static int split_path(const char *path, struct pseg *segs, size_t *n) {
        size_t len = strlen(path);
        if (len == 0 || path[0] != '/')
                return -EINVAL;
        if (len > 1 && path[len - 1] == '/')
                len--; /* one trailing slash is ignored */
        *n = 0;
        if (len == 1)
                return 0;
        size_t i = 1;
        for (;;) {
                size_t start = i;
                while (i < len && path[i] != '/')
                        i++;
                if (*n >= NTFS_ROUTE_MAX_SEGMENTS * 2)
                        return -ENAMETOOLONG;
                segs[*n].p = path + start;
                segs[*n].len = i - start;
                (*n)++;
                if (i >= len)
                        break;
                i++; /* skip '/' */
        }
        return 0;
}

/* Does rt match segs? Fills score (one char per pattern segment). */
static bool route_matches(const struct route *rt, const struct pseg *segs, size_t n, char *score) {
        size_t i;
        for (i = 0; i < rt->n_segs; i++) {
                const struct segment *s = &rt->segs[i];
                if (s->kind == SEG_WILD) {
                        score[i] = '0';
                        score[i + 1] = 0;
                        return true;
                }
                if (i >= n)
                        return false;
                if (s->kind == SEG_PARAM) {
                        if (segs[i].len == 0)
                                return false;
                        score[i] = '1';
                } else {
                        if (strlen(s->text) != segs[i].len || memcmp(s->text, segs[i].p, segs[i].len) != 0)
                                return false;
                        score[i] = '2';
                }
        }
        score[i] = 0;
        return i == n;
}

static void allow_add(char *allow, size_t allow_len, const char *method) {
        if (!allow || allow_len == 0)
                return;
        /* skip duplicates */
        size_t ml = strlen(method);
        for (const char *p = allow; *p;) {
                size_t l = strcspn(p, ",");
                if (l == ml && strncmp(p, method, ml) == 0)
                        return;
                p += l;
                while (*p == ',' || *p == ' ')
                        p++;
        }
        size_t cur = strlen(allow);
        int w = snprintf(allow + cur, allow_len - cur, "%s%s", cur ? ", " : "", method);
        if (w < 0 || (size_t)w >= allow_len - cur)
                allow[cur] = 0;
}

int ntfs_router_lookup(const ntfs_router *r, const char *method, const char *raw_path,
                       struct ntfs_route_match *m, char *allow, size_t allow_len) {
        struct pseg segs[NTFS_ROUTE_MAX_SEGMENTS * 2];
        size_t n = 0;
        int err = split_path(raw_path, segs, &n);
        if (err < 0)
                return err;
        if (allow && allow_len)
                allow[0] = 0;
        const struct route *best = NULL;
        char best_score[NTFS_ROUTE_MAX_SEGMENTS + 1] = "", score[NTFS_ROUTE_MAX_SEGMENTS + 1];
        bool other_method = false;
        for (size_t i = 0; i < r->n; i++) {
                const struct route *rt = r->routes[i];
                if (!route_matches(rt, segs, n, score))
                        continue;
                if (strcmp(rt->method, method) != 0) {
                        other_method = true;
                        allow_add(allow, allow_len, rt->method);
                        continue;
                }
                if (!best || strcmp(score, best_score) > 0) {
                        best = rt;
                        memcpy(best_score, score, sizeof score);
                }
        }
        if (!best)
                return other_method ? -EOPNOTSUPP : -NTFS_ENOTFOUND;

        m->handler = best->handler;
        m->flags = best->flags;
        m->pattern = best->pattern;
        m->n_params = 0;
        size_t used = 0;
        for (size_t i = 0; i < best->n_segs; i++) {
                const struct segment *s = &best->segs[i];
                if (s->kind == SEG_LITERAL)
                        continue;
                const char *src;
                size_t len;
                if (s->kind == SEG_WILD) {
                        if (i < n) {
                                src = segs[i].p;
                                len = (size_t)(segs[n - 1].p + segs[n - 1].len - src);
                        } else {
                                src = "";
                                len = 0;
                        }
                } else {
                        src = segs[i].p;
                        len = segs[i].len;
                }
                int d = ntfs_http_percent_decode(src, len, m->storage + used, sizeof m->storage - used, false);
                if (d < 0)
                        return d;
                m->params[m->n_params].name = s->text;
                m->params[m->n_params].value = m->storage + used;
                m->n_params++;
                used += (size_t)d + 1;
        }
        return 0;
}

const char *ntfs_router_session_param(const char *pattern) {
        const char *p = strchr(pattern, ' '); /* "METHOD /path" */
        return p && strncmp(p + 1, "/v1/sessions/{name}", 19) == 0 ? "name" : "session";
}
