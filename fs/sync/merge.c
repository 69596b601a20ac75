/* SPDX-License-Identifier: MIT
 * merge.c — three-way merge of store commits (see merge.h and docs/trunk.md).
 *
 * Plan: list the changes base..fork (F) and base..head (H) with ntfs_diff;
 * expand added directories into their subtrees (so that both sides adding
 * the same directory merge file by file); sort both lists by path; decide
 * every path of F against H (same path, or a directory removed above or
 * below it); when nothing conflicts, replay F's decisions onto a scratch
 * session made from head and commit it with two parents.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <openssl/evp.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/util.h"
#include "fs/sync/merge.h"
#include "common/banned.h"

#define MAX_DEPTH 1024
#define PATH_MAXLEN 4096
#define XATTR_LIST_MAX_BYTES (64u * 1024)
#define XATTR_VALUE_MAX (64u * 1024)

struct ent {
        char *path;
        char kind; /* enum ntfs_diff_kind */
        uint32_t old_mode, new_mode;
        uint64_t old_size, new_size;
};

struct elist {
        struct ent *v;
        size_t n, cap;
};

static void elist_free(struct elist *l) {
        for (size_t i = 0; i < l->n; i++)
                free(l->v[i].path);
        free(l->v);
        l->v = NULL;
        l->n = l->cap = 0;
}

static int elist_add(struct elist *l, const char *path, char kind, uint32_t om, uint32_t nm, uint64_t os,
                     uint64_t ns) {
        if (l->n == l->cap) {
                size_t nc = l->cap ? l->cap * 2 : 64;
                struct ent *nv = realloc(l->v, nc * sizeof *nv);
                if (!nv)
                        return -ENOMEM;
                l->v = nv;
                l->cap = nc;
        }
        char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        l->v[l->n++] = (struct ent){ .path = p, .kind = kind, .old_mode = om, .new_mode = nm, .old_size = os,
                                     .new_size = ns };
        return 0;
}

static int diff_collect(const struct ntfs_diff_entry *e, void *ud) {
        struct elist *l = ud;
        /* a callback cannot return an error through ntfs_diff: stop and flag */
        if (elist_add(l, e->path, (char)e->kind, e->old_mode, e->new_mode, e->old_size, e->new_size) < 0) {
                l->cap = SIZE_MAX; /* marks the failure; see collect() */
                return 1;
        }
        return 0;
}

static int ent_cmp(const void *a, const void *b) {
        return strcmp(((const struct ent *)a)->path, ((const struct ent *)b)->path);
}

static struct ent *elist_find(const struct elist *l, const char *path) {
        struct ent key = { .path = (char *)path };
        return l->n ? bsearch(&key, l->v, l->n, sizeof *l->v, ent_cmp) : NULL;
}

/* First index whose path is >= s. */
static size_t elist_lower(const struct elist *l, const char *s) {
        size_t lo = 0, hi = l->n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (strcmp(l->v[mid].path, s) < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

static bool is_removal_of_dir(const struct ent *e) {
        return (e->kind == NTFS_DIFF_DELETED || e->kind == NTFS_DIFF_TYPE) && S_ISDIR(e->old_mode);
}

static bool adds_dir(const struct ent *e) {
        return (e->kind == NTFS_DIFF_ADDED || e->kind == NTFS_DIFF_TYPE) && S_ISDIR(e->new_mode);
}

/* ---- paths in a workspace ------------------------------------------------------------- */

/* Walks path (relative, '/'-separated). On success *ret_parent / *ret_attr
 * describe the last component, whose name is copied to name. -ENOENT when
 * the last component is missing (then *ret_parent is valid and *parent_ok
 * true); other errors as the store reports them. */
static int ws_walk(ntfs_ws *ws, const char *path, uint64_t *ret_parent, char name[NTFS_NAME_MAX + 1],
                   struct ntfs_attr *ret_attr, bool *parent_ok) {
        char buf[PATH_MAXLEN];
        if (strlen(path) >= sizeof buf)
                return -ENAMETOOLONG;
        snprintf(buf, sizeof buf, "%s", path);
        uint64_t cur = NTFS_ROOT_INO;
        char *save = NULL;
        if (parent_ok)
                *parent_ok = false;
        char *tok = strtok_r(buf, "/", &save);
        if (!tok)
                return -EINVAL;
        for (;;) {
                char *next = strtok_r(NULL, "/", &save);
                if (strlen(tok) > NTFS_NAME_MAX)
                        return -ENAMETOOLONG;
                struct ntfs_attr a;
                int r = ntfs_ws_lookup(ws, cur, tok, &a);
                if (!next) {
                        *ret_parent = cur;
                        snprintf(name, NTFS_NAME_MAX + 1, "%s", tok);
                        if (parent_ok)
                                *parent_ok = true;
                        if (r < 0)
                                return r;
                        if (ret_attr)
                                *ret_attr = a;
                        return 0;
                }
                if (r < 0)
                        return r;
                if (!S_ISDIR(a.mode))
                        return -ENOTDIR;
                cur = a.ino;
                tok = next;
        }
}

static int ws_stat(ntfs_ws *ws, const char *path, struct ntfs_attr *ret) {
        uint64_t parent;
        char name[NTFS_NAME_MAX + 1];
        return ws_walk(ws, path, &parent, name, ret, NULL);
}

/* Reads a whole regular file (at most max bytes, else -EFBIG). */
static int read_all(ntfs_ws *ws, const struct ntfs_attr *a, size_t max, char **ret, size_t *ret_len) {
        if (a->size > max)
                return -EFBIG;
        size_t n = (size_t)a->size;
        _cleanup_free_ char *buf = malloc(n + 1);
        if (!buf)
                return -ENOMEM;
        size_t off = 0;
        while (off < n) {
                ssize_t k = ntfs_ws_read(ws, a->ino, buf + off, n - off, off);
                if (k < 0)
                        return (int)k;
                if (k == 0)
                        break;
                off += (size_t)k;
        }
        buf[off] = 0;
        *ret_len = off;
        *ret = TAKE_PTR(buf);
        return 0;
}

static int hash_file(ntfs_ws *ws, const struct ntfs_attr *a, char out[65]) {
        EVP_MD_CTX *ctx = EVP_MD_CTX_new();
        if (!ctx)
                return -ENOMEM;
        int r = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 ? 0 : -EIO;
        _cleanup_free_ char *buf = malloc(NTFS_CHUNK_SIZE);
        if (!buf)
                r = -ENOMEM;
        uint64_t off = 0;
        while (r == 0) {
                ssize_t k = ntfs_ws_read(ws, a->ino, buf, NTFS_CHUNK_SIZE, off);
                if (k < 0)
                        r = (int)k;
                else if (k == 0)
                        break;
                else if (EVP_DigestUpdate(ctx, buf, (size_t)k) != 1)
                        r = -EIO;
                else
                        off += (uint64_t)k;
        }
        uint8_t md[EVP_MAX_MD_SIZE];
        unsigned mdlen = 0;
        if (r == 0 && (EVP_DigestFinal_ex(ctx, md, &mdlen) != 1 || mdlen != NTFS_HASH_LEN))
                r = -EIO;
        EVP_MD_CTX_free(ctx);
        if (r == 0)
                ntfs_hex(md, NTFS_HASH_LEN, out);
        return r;
}

/* Describes path in ws (absent is not an error). */
static int side_get(ntfs_ws *ws, const char *path, struct ntfs_merge_side *s) {
        memset(s, 0, sizeof *s);
        struct ntfs_attr a;
        int r = ws_stat(ws, path, &a);
        if (r == -ENOENT || r == -ENOTDIR)
                return 0;
        if (r < 0)
                return r;
        s->present = true;
        s->mode = a.mode;
        s->size = a.size;
        if (S_ISREG(a.mode))
                return hash_file(ws, &a, s->sha256);
        if (S_ISLNK(a.mode)) {
                ssize_t k = ntfs_ws_readlink(ws, a.ino, s->target, sizeof s->target - 1);
                if (k < 0)
                        return (int)k;
                s->target[k] = 0;
        }
        if (S_ISCHR(a.mode) || S_ISBLK(a.mode))
                snprintf(s->target, sizeof s->target, "%llu", (unsigned long long)a.rdev);
        return 0;
}

static bool same_content(const struct ntfs_merge_side *a, const struct ntfs_merge_side *b) {
        return a->present == b->present && (a->mode & S_IFMT) == (b->mode & S_IFMT) && a->size == b->size &&
               strcmp(a->sha256, b->sha256) == 0 && strcmp(a->target, b->target) == 0;
}

/* ---- expanding added directories ------------------------------------------------------ */

struct kids {
        char **names;
        struct ntfs_attr *attrs;
        size_t n, cap;
        int err;
};

static int kids_cb(const char *name, const struct ntfs_attr *attr, uint64_t next_cookie, void *ud) {
        (void)next_cookie;
        struct kids *k = ud;
        if (k->n == k->cap) {
                size_t nc = k->cap ? k->cap * 2 : 16;
                char **nn = realloc(k->names, nc * sizeof *nn);
                if (!nn) {
                        k->err = -ENOMEM;
                        return 1;
                }
                k->names = nn;
                struct ntfs_attr *na = realloc(k->attrs, nc * sizeof *na);
                if (!na) {
                        k->err = -ENOMEM;
                        return 1;
                }
                k->attrs = na;
                k->cap = nc;
        }
        if (!(k->names[k->n] = strdup(name))) {
                k->err = -ENOMEM;
                return 1;
        }
        k->attrs[k->n++] = *attr;
        return 0;
}

static void kids_free(struct kids *k) {
        for (size_t i = 0; i < k->n; i++)
                free(k->names[i]);
        free(k->names);
        free(k->attrs);
}

static int list_dir(ntfs_ws *ws, uint64_t ino, struct kids *k) {
        memset(k, 0, sizeof *k);
        int r = ntfs_ws_readdir(ws, ino, 0, true, 0, kids_cb, k);
        if (r >= 0 && k->err)
                r = k->err;
        if (r < 0)
                kids_free(k);
        return r < 0 ? r : 0;
}

static int expand_dir(ntfs_ws *ws, uint64_t ino, const char *path, struct elist *out, int depth) {
        if (depth > MAX_DEPTH)
                return -ELOOP;
        struct kids k;
        int r = list_dir(ws, ino, &k);
        if (r < 0)
                return r;
        for (size_t i = 0; r == 0 && i < k.n; i++) {
                char sub[PATH_MAXLEN];
                if ((size_t)snprintf(sub, sizeof sub, "%s/%s", path, k.names[i]) >= sizeof sub) {
                        r = -ENAMETOOLONG;
                        break;
                }
                r = elist_add(out, sub, NTFS_DIFF_ADDED, 0, k.attrs[i].mode, 0, k.attrs[i].size);
                if (r == 0 && S_ISDIR(k.attrs[i].mode))
                        r = expand_dir(ws, k.attrs[i].ino, sub, out, depth + 1);
        }
        kids_free(&k);
        return r;
}

/* Diff from..to, plus the contents of every added directory (from view). */
static int collect(ntfs_store *st, const char *from, const char *to, ntfs_ws *view, struct elist *out) {
        int r = ntfs_diff(st, from, to, NULL, diff_collect, out);
        if (r == 0 && out->cap == SIZE_MAX)
                r = -ENOMEM;
        if (out->cap == SIZE_MAX)
                out->cap = out->n;
        size_t n0 = out->n;
        for (size_t i = 0; r == 0 && i < n0; i++) {
                if (!adds_dir(&out->v[i]))
                        continue;
                struct ntfs_attr a;
                char *p = out->v[i].path; /* stable: only the array moves */
                if ((r = ws_stat(view, p, &a)) == 0)
                        r = expand_dir(view, a.ino, p, out, 0);
        }
        if (r == 0 && out->n)
                qsort(out->v, out->n, sizeof *out->v, ent_cmp);
        return r;
}

/* ---- conflicts ------------------------------------------------------------------------ */

static int add_conflict(struct ntfs_merge_result *res, size_t *cap, const char *path, const char *reason,
                        ntfs_ws *fv, ntfs_ws *hv) {
        if (res->nconflicts == *cap) {
                size_t nc = *cap ? *cap * 2 : 8;
                struct ntfs_merge_conflict *n = realloc(res->conflicts, nc * sizeof *n);
                if (!n)
                        return -ENOMEM;
                res->conflicts = n;
                *cap = nc;
        }
        struct ntfs_merge_conflict *c = &res->conflicts[res->nconflicts];
        memset(c, 0, sizeof *c);
        int r = side_get(fv, path, &c->fork);
        if (r == 0)
                r = side_get(hv, path, &c->trunk);
        if (r < 0)
                return r;
        if (!(c->path = strdup(path)))
                return -ENOMEM;
        c->reason = reason;
        res->nconflicts++;
        return 0;
}

/* ---- what to do with each fork change --------------------------------------------------- */

enum act_kind {
        ACT_REMOVE = 1,  /* remove path (recursively) */
        ACT_COPY,        /* remove what is there, copy the fork's entry (not a dir's children) */
        ACT_CONTENT,     /* keep the entry, replace the file content with the fork's */
        ACT_TEXT,        /* keep the entry, write the merged text */
        ACT_META,        /* mode/uid/gid/xattrs from the fork */
};

struct act {
        const char *path; /* borrowed from the F list */
        enum act_kind kind;
        uint32_t final_mode; /* ACT_CONTENT/ACT_TEXT/ACT_META: 0 = leave as is */
        char *text;          /* ACT_TEXT */
        size_t text_len;
};

struct plan {
        struct act *v;
        size_t n, cap;
};

static int plan_add(struct plan *p, const char *path, enum act_kind k, uint32_t final_mode, char *text,
                    size_t text_len) {
        if (p->n == p->cap) {
                size_t nc = p->cap ? p->cap * 2 : 32;
                struct act *nv = realloc(p->v, nc * sizeof *nv);
                if (!nv)
                        return -ENOMEM;
                p->v = nv;
                p->cap = nc;
        }
        p->v[p->n++] = (struct act){ .path = path, .kind = k, .final_mode = final_mode, .text = text,
                                     .text_len = text_len };
        return 0;
}

static void plan_free(struct plan *p) {
        for (size_t i = 0; i < p->n; i++)
                free(p->v[i].text);
        free(p->v);
}

static bool mode_changed(const struct ent *e) {
        if (e->kind == NTFS_DIFF_ADDED || e->kind == NTFS_DIFF_TYPE)
                return true;
        return e->old_mode != e->new_mode;
}

static bool content_changed(const struct ent *e) {
        return e->kind == NTFS_DIFF_MODIFIED || e->kind == NTFS_DIFF_ADDED || e->kind == NTFS_DIFF_TYPE;
}

/* Both sides changed path f->path (h is H's entry). Adds an action, a
 * conflict, or nothing (head already has the right state). */
static int decide_both(const struct ent *f, const struct ent *h, ntfs_ws *bv, ntfs_ws *fv, ntfs_ws *hv,
                       struct plan *plan, struct ntfs_merge_result *res, size_t *ccap) {
        bool fdel = f->kind == NTFS_DIFF_DELETED, hdel = h->kind == NTFS_DIFF_DELETED;
        if (fdel && hdel)
                return 0;
        if (fdel || hdel)
                return add_conflict(res, ccap, f->path, "delete/modify", fv, hv);
        if ((f->new_mode & S_IFMT) != (h->new_mode & S_IFMT))
                return add_conflict(res, ccap, f->path,
                                    f->kind == NTFS_DIFF_ADDED && h->kind == NTFS_DIFF_ADDED ? "add/add" : "type",
                                    fv, hv);
        struct ntfs_merge_side sf, sh;
        int r = side_get(fv, f->path, &sf);
        if (r == 0)
                r = side_get(hv, f->path, &sh);
        if (r < 0)
                return r;
        if (!sf.present || !sh.present)
                return -NTFS_ECORRUPT; /* the diffs said both exist */
        bool cf = content_changed(f), ch = content_changed(h);
        bool mf = mode_changed(f), mh = mode_changed(h);
        uint32_t final_mode = sh.mode;
        if (sf.mode != sh.mode) {
                if (mf && mh)
                        return add_conflict(res, ccap, f->path, "mode", fv, hv);
                if (mf)
                        final_mode = sf.mode;
        }
        if (S_ISDIR(sf.mode))
                return final_mode != sh.mode ? plan_add(plan, f->path, ACT_META, final_mode, NULL, 0) : 0;
        if (same_content(&sf, &sh) || !cf)
                return final_mode != sh.mode ? plan_add(plan, f->path, ACT_META, final_mode, NULL, 0) : 0;
        if (!ch) /* only the fork changed the content */
                return plan_add(plan, f->path, ACT_CONTENT, final_mode, NULL, 0);
        /* both changed the content differently: lines, when both are text edits */
        const char *why = f->kind == NTFS_DIFF_ADDED && h->kind == NTFS_DIFF_ADDED ? "add/add" : "content";
        if (f->kind != NTFS_DIFF_MODIFIED || h->kind != NTFS_DIFF_MODIFIED || !S_ISREG(sf.mode))
                return add_conflict(res, ccap, f->path, why, fv, hv);
        struct ntfs_attr ab, af, ah;
        if (ws_stat(bv, f->path, &ab) < 0 || !S_ISREG(ab.mode) || ws_stat(fv, f->path, &af) < 0 ||
            ws_stat(hv, f->path, &ah) < 0)
                return add_conflict(res, ccap, f->path, why, fv, hv);
        _cleanup_free_ char *tb = NULL, *tf = NULL, *th = NULL;
        size_t lb, lf, lh;
        if (read_all(bv, &ab, NTFS_MERGE_TEXT_MAX, &tb, &lb) < 0 ||
            read_all(fv, &af, NTFS_MERGE_TEXT_MAX, &tf, &lf) < 0 ||
            read_all(hv, &ah, NTFS_MERGE_TEXT_MAX, &th, &lh) < 0 || memchr(tb, 0, lb) || memchr(tf, 0, lf) ||
            memchr(th, 0, lh))
                return add_conflict(res, ccap, f->path, why, fv, hv);
        char *out = NULL;
        size_t outlen = 0;
        r = ntfs_merge_text(tb, lb, tf, lf, th, lh, &out, &outlen);
        if (r == 0) {
                res->line_merged++;
                r = plan_add(plan, f->path, ACT_TEXT, final_mode, out, outlen);
                if (r < 0)
                        free(out);
                return r;
        }
        free(out);
        if (r < 0 && r != -EFBIG && r != -E2BIG)
                return r;
        return add_conflict(res, ccap, f->path, why, fv, hv);
}

/* ---- applying the plan ---------------------------------------------------------------------- */

static int rm_rf_ino(ntfs_ws *ws, uint64_t parent, const char *name, int depth) {
        if (depth > MAX_DEPTH)
                return -ELOOP;
        struct ntfs_attr a;
        int r = ntfs_ws_lookup(ws, parent, name, &a);
        if (r < 0)
                return r;
        if (!S_ISDIR(a.mode))
                return ntfs_ws_unlink(ws, parent, name);
        struct kids k;
        if ((r = list_dir(ws, a.ino, &k)) < 0)
                return r;
        for (size_t i = 0; r == 0 && i < k.n; i++)
                r = rm_rf_ino(ws, a.ino, k.names[i], depth + 1);
        kids_free(&k);
        return r < 0 ? r : ntfs_ws_rmdir(ws, parent, name);
}

static int rm_rf(ntfs_ws *ws, const char *path) {
        uint64_t parent;
        char name[NTFS_NAME_MAX + 1];
        int r = ws_walk(ws, path, &parent, name, NULL, NULL);
        if (r == -ENOENT || r == -ENOTDIR)
                return 0;
        if (r < 0)
                return r;
        r = rm_rf_ino(ws, parent, name, 0);
        return r == -ENOENT ? 0 : r;
}

static int copy_xattrs(ntfs_ws *src, uint64_t sino, ntfs_ws *dst, uint64_t dino) {
        _cleanup_free_ char *list = malloc(XATTR_LIST_MAX_BYTES);
        _cleanup_free_ char *val = malloc(XATTR_VALUE_MAX);
        if (!list || !val)
                return -ENOMEM;
        /* drop what dst has, then set what src has */
        ssize_t n = ntfs_ws_listxattr(dst, dino, list, XATTR_LIST_MAX_BYTES);
        if (n < 0 && n != -EOPNOTSUPP && n != -ENODATA)
                return (int)n;
        for (ssize_t off = 0; n > 0 && off < n; off += (ssize_t)strlen(list + off) + 1) {
                int r = ntfs_ws_removexattr(dst, dino, list + off);
                if (r < 0 && r != -ENODATA)
                        return r;
        }
        n = ntfs_ws_listxattr(src, sino, list, XATTR_LIST_MAX_BYTES);
        if (n < 0 && n != -EOPNOTSUPP && n != -ENODATA)
                return (int)n;
        for (ssize_t off = 0; n > 0 && off < n; off += (ssize_t)strlen(list + off) + 1) {
                ssize_t vl = ntfs_ws_getxattr(src, sino, list + off, val, XATTR_VALUE_MAX);
                if (vl < 0)
                        return (int)vl;
                int r = ntfs_ws_setxattr(dst, dino, list + off, val, (size_t)vl, 0);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int copy_data(ntfs_ws *src, uint64_t sino, ntfs_ws *dst, uint64_t dino) {
        struct ntfs_attr z = { .size = 0 };
        int r = ntfs_ws_setattr(dst, dino, &z, NTFS_SET_SIZE, &(struct ntfs_attr){ 0 });
        if (r < 0)
                return r;
        _cleanup_free_ char *buf = malloc(NTFS_CHUNK_SIZE);
        if (!buf)
                return -ENOMEM;
        uint64_t off = 0;
        for (;;) {
                ssize_t k = ntfs_ws_read(src, sino, buf, NTFS_CHUNK_SIZE, off);
                if (k < 0)
                        return (int)k;
                if (k == 0)
                        return 0;
                for (ssize_t done = 0; done < k;) {
                        ssize_t w = ntfs_ws_write(dst, dino, buf + done, (size_t)(k - done), off + (uint64_t)done,
                                                  false);
                        if (w < 0)
                                return (int)w;
                        if (w == 0)
                                return -EIO;
                        done += w;
                }
                off += (uint64_t)k;
        }
}

static int set_meta(ntfs_ws *dst, uint64_t dino, const struct ntfs_attr *from, uint32_t mode, bool mtime) {
        struct ntfs_attr in = *from;
        in.mode = mode;
        unsigned set = NTFS_SET_MODE | NTFS_SET_UID | NTFS_SET_GID | (mtime ? NTFS_SET_MTIME : 0);
        return ntfs_ws_setattr(dst, dino, &in, set, &(struct ntfs_attr){ 0 });
}

/* Creates the fork's entry at path in dst (a directory without children). */
static int copy_entry(ntfs_ws *fv, ntfs_ws *dst, const char *path) {
        struct ntfs_attr a, na;
        uint64_t parent;
        char name[NTFS_NAME_MAX + 1];
        int r = ws_stat(fv, path, &a);
        if (r < 0)
                return r;
        r = ws_walk(dst, path, &parent, name, NULL, NULL);
        if (r == 0)
                r = rm_rf(dst, path);
        else if (r == -ENOENT)
                r = 0;
        if (r < 0)
                return r;
        if (S_ISDIR(a.mode))
                r = ntfs_ws_mkdir(dst, parent, name, a.mode & 07777, a.uid, a.gid, &na);
        else if (S_ISLNK(a.mode)) {
                char target[PATH_MAXLEN + 1];
                ssize_t k = ntfs_ws_readlink(fv, a.ino, target, PATH_MAXLEN);
                if (k < 0)
                        return (int)k;
                target[k] = 0;
                r = ntfs_ws_symlink(dst, parent, name, target, a.uid, a.gid, &na);
        } else
                r = ntfs_ws_mknod(dst, parent, name, a.mode, a.rdev, a.uid, a.gid, &na);
        if (r == 0 && S_ISREG(a.mode))
                r = copy_data(fv, a.ino, dst, na.ino);
        if (r == 0 && !S_ISLNK(a.mode))
                r = set_meta(dst, na.ino, &a, a.mode & 07777, true);
        if (r == 0)
                r = copy_xattrs(fv, a.ino, dst, na.ino);
        return r;
}

static int apply(const struct act *x, ntfs_ws *fv, ntfs_ws *dst) {
        struct ntfs_attr a, d;
        int r;
        switch (x->kind) {
        case ACT_REMOVE:
                return rm_rf(dst, x->path);
        case ACT_COPY:
                return copy_entry(fv, dst, x->path);
        case ACT_CONTENT:
                if ((r = ws_stat(fv, x->path, &a)) < 0 || (r = ws_stat(dst, x->path, &d)) < 0)
                        return r;
                if (S_ISLNK(a.mode)) {
                        if ((r = copy_entry(fv, dst, x->path)) < 0)
                                return r;
                } else if ((r = copy_data(fv, a.ino, dst, d.ino)) < 0)
                        return r;
                if (S_ISLNK(a.mode) || !x->final_mode)
                        return 0;
                return set_meta(dst, d.ino, &d, x->final_mode & 07777, false);
        case ACT_TEXT: {
                if ((r = ws_stat(dst, x->path, &d)) < 0)
                        return r;
                struct ntfs_attr z = { .size = 0 };
                if ((r = ntfs_ws_setattr(dst, d.ino, &z, NTFS_SET_SIZE, &(struct ntfs_attr){ 0 })) < 0)
                        return r;
                for (size_t done = 0; done < x->text_len;) {
                        ssize_t w = ntfs_ws_write(dst, d.ino, x->text + done, x->text_len - done, done, false);
                        if (w < 0)
                                return (int)w;
                        if (w == 0)
                                return -EIO;
                        done += (size_t)w;
                }
                return x->final_mode ? set_meta(dst, d.ino, &d, x->final_mode & 07777, false) : 0;
        }
        case ACT_META:
                if ((r = ws_stat(fv, x->path, &a)) < 0 || (r = ws_stat(dst, x->path, &d)) < 0)
                        return r;
                if (S_ISLNK(d.mode))
                        return 0;
                if ((r = set_meta(dst, d.ino, &a, (x->final_mode ? x->final_mode : a.mode) & 07777, false)) < 0)
                        return r;
                return copy_xattrs(fv, a.ino, dst, d.ino);
        }
        return -EINVAL;
}

/* ---- the merge ------------------------------------------------------------------------------- */

void ntfs_merge_result_release(struct ntfs_merge_result *res) {
        if (!res)
                return;
        for (size_t i = 0; i < res->nconflicts; i++)
                free(res->conflicts[i].path);
        free(res->conflicts);
        res->conflicts = NULL;
        res->nconflicts = 0;
}

static int decide(const struct elist *F, const struct elist *H, ntfs_ws *bv, ntfs_ws *fv, ntfs_ws *hv,
                  struct plan *plan, struct ntfs_merge_result *res) {
        size_t ccap = 0;
        int r = 0;
        for (size_t i = 0; r == 0 && i < F->n; i++) {
                const struct ent *f = &F->v[i];
                bool fdel = f->kind == NTFS_DIFF_DELETED;
                /* a directory removed above this path on the trunk */
                bool skip = false, conflict = false;
                char anc[PATH_MAXLEN];
                snprintf(anc, sizeof anc, "%s", f->path);
                for (char *s = strrchr(anc, '/'); s && !skip && !conflict; s = strrchr(anc, '/')) {
                        *s = 0;
                        const struct ent *h = elist_find(H, anc);
                        if (h && is_removal_of_dir(h)) {
                                if (fdel)
                                        skip = true; /* already gone with its directory */
                                else
                                        conflict = true;
                        }
                }
                if (conflict) {
                        r = add_conflict(res, &ccap, f->path, "delete/modify", fv, hv);
                        continue;
                }
                if (skip)
                        continue;
                /* this fork change removes a directory: the trunk must not have added or
                 * changed anything inside it */
                if (is_removal_of_dir(f)) {
                        char pre[PATH_MAXLEN];
                        if ((size_t)snprintf(pre, sizeof pre, "%s/", f->path) >= sizeof pre)
                                return -ENAMETOOLONG;
                        size_t pl = strlen(pre);
                        size_t before = res->nconflicts;
                        for (size_t j = elist_lower(H, pre); r == 0 && j < H->n && strncmp(H->v[j].path, pre, pl) == 0;
                             j++)
                                if (H->v[j].kind != NTFS_DIFF_DELETED)
                                        r = add_conflict(res, &ccap, H->v[j].path, "delete/modify", fv, hv);
                        if (r < 0 || res->nconflicts > before)
                                continue;
                }
                const struct ent *h = elist_find(H, f->path);
                if (h) {
                        r = decide_both(f, h, bv, fv, hv, plan, res, &ccap);
                        continue;
                }
                switch (f->kind) {
                case NTFS_DIFF_DELETED:
                        r = plan_add(plan, f->path, ACT_REMOVE, 0, NULL, 0);
                        break;
                case NTFS_DIFF_ADDED:
                case NTFS_DIFF_TYPE:
                        r = plan_add(plan, f->path, ACT_COPY, 0, NULL, 0);
                        break;
                case NTFS_DIFF_MODIFIED:
                        r = plan_add(plan, f->path, ACT_CONTENT, f->new_mode, NULL, 0);
                        break;
                default:
                        r = plan_add(plan, f->path, ACT_META, f->new_mode, NULL, 0);
                        break;
                }
        }
        return r;
}

static int open_view(ntfs_store *st, const ntfs_hash *h, ntfs_ws **ret) {
        char hex[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(h, hex);
        return ntfs_ws_open_view(st, hex, ret);
}

int ntfs_merge3(ntfs_store *st, const ntfs_hash *base, const ntfs_hash *head, const ntfs_hash *fork,
                const char *scratch_session, const char *message, struct ntfs_merge_result *ret) {
        if (!st || !base || !head || !fork || !scratch_session || !ret)
                return -EINVAL;
        char bh[NTFS_HEX_LEN + 1], hh[NTFS_HEX_LEN + 1], fh[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(base, bh);
        ntfs_hash_hex(head, hh);
        ntfs_hash_hex(fork, fh);
        struct ntfs_merge_result res = { 0 };
        struct elist F = { 0 }, H = { 0 };
        struct plan plan = { 0 };
        ntfs_ws *bv = NULL, *fv = NULL, *hv = NULL, *mw = NULL;
        bool scratch = false;
        int r = open_view(st, base, &bv);
        if (r == 0)
                r = open_view(st, fork, &fv);
        if (r == 0)
                r = open_view(st, head, &hv);
        if (r == 0)
                r = collect(st, bh, fh, fv, &F);
        if (r == 0)
                r = collect(st, bh, hh, hv, &H);
        if (r == 0) {
                res.fork_changes = F.n;
                res.trunk_changes = H.n;
                r = decide(&F, &H, bv, fv, hv, &plan, &res);
        }
        if (r == 0 && res.nconflicts == 0) {
                r = ntfs_session_create(st, scratch_session, hh, NULL);
                scratch = r == 0;
                if (r == 0)
                        r = ntfs_ws_open(st, scratch_session, &mw);
                for (size_t i = 0; r == 0 && i < plan.n; i++)
                        r = apply(&plan.v[i], fv, mw);
                res.applied = plan.n;
                if (mw) {
                        ntfs_ws_close(mw);
                        mw = NULL;
                }
                if (r == 0)
                        r = ntfs_checkpoint_merge(st, scratch_session, message, fork, &res.commit);
        }
        if (scratch)
                (void)ntfs_session_end(st, scratch_session);
        if (bv)
                ntfs_ws_close(bv);
        if (fv)
                ntfs_ws_close(fv);
        if (hv)
                ntfs_ws_close(hv);
        elist_free(&F);
        elist_free(&H);
        plan_free(&plan);
        if (r < 0) {
                ntfs_merge_result_release(&res);
                return r;
        }
        *ret = res;
        return 0;
}

/* ---- line-level merge (diff3) ------------------------------------------------------------- */

struct lines {
        const char **p;
        size_t *len;
        size_t n;
};

static void lines_free(struct lines *l) {
        free(l->p);
        free(l->len);
}

static int split_lines(const char *s, size_t n, struct lines *l) {
        size_t count = 0;
        for (size_t i = 0; i < n; i++)
                if (s[i] == '\n')
                        count++;
        count++;
        l->p = calloc(count, sizeof *l->p);
        l->len = calloc(count, sizeof *l->len);
        l->n = 0;
        if (!l->p || !l->len) {
                lines_free(l);
                return -ENOMEM;
        }
        size_t start = 0;
        for (size_t i = 0; i < n; i++)
                if (s[i] == '\n') {
                        l->p[l->n] = s + start;
                        l->len[l->n++] = i + 1 - start;
                        start = i + 1;
                }
        if (start < n) {
                l->p[l->n] = s + start;
                l->len[l->n++] = n - start;
        }
        return 0;
}

static bool line_eq(const struct lines *a, size_t i, const struct lines *b, size_t j) {
        return a->len[i] == b->len[j] && memcmp(a->p[i], b->p[j], a->len[i]) == 0;
}

/* Most cells an LCS table may have (after trimming common ends). */
#define LCS_MAX_CELLS (8u << 20)

/* m[i] = index in b matched to line i of a (LCS), or SIZE_MAX. */
static int lcs_match(const struct lines *a, const struct lines *b, size_t *m) {
        size_t n = a->n, k = b->n;
        for (size_t i = 0; i < n; i++)
                m[i] = SIZE_MAX;
        size_t pre = 0;
        while (pre < n && pre < k && line_eq(a, pre, b, pre)) {
                m[pre] = pre;
                pre++;
        }
        size_t suf = 0;
        while (suf < n - pre && suf < k - pre && line_eq(a, n - 1 - suf, b, k - 1 - suf)) {
                m[n - 1 - suf] = k - 1 - suf;
                suf++;
        }
        size_t rn = n - pre - suf, rk = k - pre - suf;
        if (rn == 0 || rk == 0)
                return 0;
        if ((uint64_t)(rn + 1) * (uint64_t)(rk + 1) > LCS_MAX_CELLS)
                return -E2BIG;
        uint32_t *t = calloc((rn + 1) * (rk + 1), sizeof *t);
        if (!t)
                return -ENOMEM;
#define T(i, j) t[(size_t)(i) * (rk + 1) + (j)]
        for (size_t i = rn; i-- > 0;)
                for (size_t j = rk; j-- > 0;)
                        T(i, j) = line_eq(a, pre + i, b, pre + j) ? T(i + 1, j + 1) + 1
                                                                  : NTFS_MAX(T(i + 1, j), T(i, j + 1));
        size_t i = 0, j = 0;
        while (i < rn && j < rk) {
                if (line_eq(a, pre + i, b, pre + j)) {
                        m[pre + i] = pre + j;
                        i++;
                        j++;
                } else if (T(i + 1, j) >= T(i, j + 1))
                        i++;
                else
                        j++;
        }
#undef T
        free(t);
        return 0;
}

struct obuf {
        char *p;
        size_t n, cap;
};

static int out_put(struct obuf *o, const char *s, size_t n) {
        if (o->n + n + 1 > o->cap) {
                size_t nc = o->cap ? o->cap : 4096;
                while (nc < o->n + n + 1)
                        nc *= 2;
                char *np = realloc(o->p, nc);
                if (!np)
                        return -ENOMEM;
                o->p = np;
                o->cap = nc;
        }
        memcpy(o->p + o->n, s, n);
        o->n += n;
        o->p[o->n] = 0;
        return 0;
}

static int out_lines(struct obuf *o, const struct lines *l, size_t from, size_t to) {
        int r = 0;
        for (size_t i = from; r == 0 && i < to; i++)
                r = out_put(o, l->p[i], l->len[i]);
        return r;
}

static bool range_eq(const struct lines *a, size_t a0, size_t a1, const struct lines *b, size_t b0, size_t b1) {
        if (a1 - a0 != b1 - b0)
                return false;
        for (size_t i = 0; i < a1 - a0; i++)
                if (!line_eq(a, a0 + i, b, b0 + i))
                        return false;
        return true;
}

/* Conflict markers must start a line. */
static int out_marker(struct obuf *o, const char *m) {
        int r = 0;
        if (o->n && o->p[o->n - 1] != '\n')
                r = out_put(o, "\n", 1);
        return r ? r : out_put(o, m, strlen(m));
}

int ntfs_merge_text(const char *base, size_t base_len, const char *ours, size_t ours_len, const char *theirs,
                    size_t theirs_len, char **ret, size_t *ret_len) {
        if (!base || !ours || !theirs || !ret || !ret_len)
                return -EINVAL;
        if (base_len > NTFS_MERGE_TEXT_MAX || ours_len > NTFS_MERGE_TEXT_MAX || theirs_len > NTFS_MERGE_TEXT_MAX)
                return -EFBIG;
        struct lines B = { 0 }, O = { 0 }, T = { 0 };
        struct obuf out = { 0 };
        size_t *mo = NULL, *mt = NULL;
        bool conflicted = false;
        int r = split_lines(base, base_len, &B);
        if (r == 0 && (r = split_lines(ours, ours_len, &O)) < 0)
                lines_free(&B);
        if (r == 0 && (r = split_lines(theirs, theirs_len, &T)) < 0) {
                lines_free(&B);
                lines_free(&O);
        }
        if (r < 0)
                return r;
        mo = calloc(B.n + 1, sizeof *mo);
        mt = calloc(B.n + 1, sizeof *mt);
        if (!mo || !mt)
                r = -ENOMEM;
        if (r == 0)
                r = lcs_match(&B, &O, mo);
        if (r == 0)
                r = lcs_match(&B, &T, mt);
        if (r == 0)
                r = out_put(&out, "", 0);
        size_t lb = 0, lo = 0, lt = 0;
        while (r == 0) {
                /* next base line matched on both sides from here: a stable line */
                size_t i = lb;
                while (i < B.n && !(mo[i] != SIZE_MAX && mt[i] != SIZE_MAX && mo[i] >= lo && mt[i] >= lt))
                        i++;
                size_t eo = i < B.n ? mo[i] : O.n, et = i < B.n ? mt[i] : T.n;
                /* the unstable chunk base[lb,i) ours[lo,eo) theirs[lt,et) */
                if (lb < i || lo < eo || lt < et) {
                        bool ochg = !range_eq(&B, lb, i, &O, lo, eo), tchg = !range_eq(&B, lb, i, &T, lt, et);
                        if (!ochg)
                                r = out_lines(&out, &T, lt, et);
                        else if (!tchg || range_eq(&O, lo, eo, &T, lt, et))
                                r = out_lines(&out, &O, lo, eo);
                        else {
                                conflicted = true;
                                if ((r = out_marker(&out, "<<<<<<< ours\n")) == 0 &&
                                    (r = out_lines(&out, &O, lo, eo)) == 0 &&
                                    (r = out_marker(&out, "||||||| base\n")) == 0 &&
                                    (r = out_lines(&out, &B, lb, i)) == 0 && (r = out_marker(&out, "=======\n")) == 0 &&
                                    (r = out_lines(&out, &T, lt, et)) == 0)
                                        r = out_marker(&out, ">>>>>>> theirs\n");
                        }
                }
                if (r < 0 || i >= B.n)
                        break;
                r = out_put(&out, B.p[i], B.len[i]);
                lb = i + 1;
                lo = eo + 1;
                lt = et + 1;
        }
        lines_free(&B);
        lines_free(&O);
        lines_free(&T);
        free(mo);
        free(mt);
        if (r < 0) {
                free(out.p);
                return r;
        }
        *ret = out.p;
        *ret_len = out.n;
        return conflicted ? 1 : 0;
}
