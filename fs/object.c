/* SPDX-License-Identifier: MIT
 * object.c — encoders and decoders of the store's objects. Every decoder is
 * bounds-checked: a corrupt object is -NTFS_ECORRUPT, never a crash
 * (fs/fuzz_object.c feeds them arbitrary bytes).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "fs/store-internal.h"
#include "common/banned.h"

/* ---- little writer/reader ------------------------------------------------ */

struct wbuf {
        uint8_t *p;
        size_t len, cap;
        bool oom;
};

static void w_bytes(struct wbuf *w, const void *d, size_t n) {
        if (w->oom)
                return;
        if (w->len + n > w->cap) {
                size_t nc = w->cap ? w->cap : 256;
                while (nc < w->len + n)
                        nc *= 2;
                uint8_t *np = realloc(w->p, nc);
                if (!np) {
                        w->oom = true;
                        return;
                }
                w->p = np;
                w->cap = nc;
        }
        if (n)
                memcpy(w->p + w->len, d, n);
        w->len += n;
}
static void w_u8(struct wbuf *w, uint8_t v) { w_bytes(w, &v, 1); }
static void w_u16(struct wbuf *w, uint16_t v) {
        uint8_t b[2] = { (uint8_t)(v >> 8), (uint8_t)v };
        w_bytes(w, b, 2);
}
static void w_u32(struct wbuf *w, uint32_t v) {
        uint8_t b[4];
        ntfs_put_be32(b, v);
        w_bytes(w, b, 4);
}
static void w_u64(struct wbuf *w, uint64_t v) {
        uint8_t b[8];
        ntfs_put_be64(b, v);
        w_bytes(w, b, 8);
}

struct rbuf {
        const uint8_t *p;
        size_t len, off;
        bool bad;
};
static const uint8_t *r_bytes(struct rbuf *r, size_t n) {
        if (r->bad || n > r->len - r->off) {
                r->bad = true;
                return NULL;
        }
        const uint8_t *p = r->p + r->off;
        r->off += n;
        return p;
}
static uint8_t r_u8(struct rbuf *r) {
        const uint8_t *p = r_bytes(r, 1);
        return p ? p[0] : 0;
}
static uint16_t r_u16(struct rbuf *r) {
        const uint8_t *p = r_bytes(r, 2);
        return p ? (uint16_t)(p[0] << 8 | p[1]) : 0;
}
static uint32_t r_u32(struct rbuf *r) {
        const uint8_t *p = r_bytes(r, 4);
        return p ? ntfs_get_be32(p) : 0;
}
static uint64_t r_u64(struct rbuf *r) {
        const uint8_t *p = r_bytes(r, 8);
        return p ? ntfs_get_be64(p) : 0;
}
static void r_hash(struct rbuf *r, ntfs_hash *h) {
        const uint8_t *p = r_bytes(r, NTFS_HASH_LEN);
        if (p)
                memcpy(h->b, p, NTFS_HASH_LEN);
        else
                memset(h->b, 0, NTFS_HASH_LEN);
}

/* ---- names ------------------------------------------------------------------ */

uint64_t name_hash(const char *name, size_t len) {
        uint8_t h[NTFS_HASH_LEN];
        ntfs_sha256(name, len, h);
        /* 63 bits, never 0 (0 is readdir's start cookie) and never the max
         * (so h + 1 is always a valid resume cookie). */
        uint64_t v = ntfs_get_be64(h) >> 1;
        if (v == 0)
                v = 1;
        if (v == (UINT64_MAX >> 1))
                v--;
        return v;
}

int entry_cmp(uint64_t h1, const char *n1, size_t l1, uint64_t h2, const char *n2, size_t l2) {
        if (h1 != h2)
                return h1 < h2 ? -1 : 1;
        size_t m = l1 < l2 ? l1 : l2;
        int c = memcmp(n1, n2, m);
        if (c)
                return c;
        return l1 < l2 ? -1 : l1 > l2 ? 1 : 0;
}

/* ---- entries ---------------------------------------------------------------- */

enum { E_LINKREF = 1, E_XATTR = 2 };

static void entry_encode(struct wbuf *w, const struct tree_entry *e, bool linkref) {
        w_u64(w, e->h);
        w_u16(w, e->namelen);
        w_bytes(w, e->name, e->namelen);
        bool hasx = !linkref && !ntfs_hash_is_zero(&e->xattr);
        w_u8(w, (uint8_t)((linkref ? E_LINKREF : 0) | (hasx ? E_XATTR : 0)));
        w_u64(w, e->linkid);
        w_u32(w, e->mode);
        if (linkref)
                return;
        w_u32(w, e->uid);
        w_u32(w, e->gid);
        w_u32(w, e->nlink);
        w_u64(w, e->rdev);
        w_u64(w, e->size);
        w_u64(w, (uint64_t)e->mtime);
        w_bytes(w, e->content.b, NTFS_HASH_LEN);
        if (hasx)
                w_bytes(w, e->xattr.b, NTFS_HASH_LEN);
}

static int entry_decode(struct rbuf *r, struct tree_entry *e) {
        memset(e, 0, sizeof *e);
        e->h = r_u64(r);
        e->namelen = r_u16(r);
        e->name = (const char *)r_bytes(r, e->namelen);
        uint8_t flags = r_u8(r);
        e->linkid = r_u64(r);
        e->mode = r_u32(r);
        if (flags & ~(E_LINKREF | E_XATTR))
                return -NTFS_ECORRUPT;
        if (flags & E_LINKREF) {
                if (e->linkid == 0 || (flags & E_XATTR))
                        return -NTFS_ECORRUPT;
                e->nlink = 1;
        } else {
                e->uid = r_u32(r);
                e->gid = r_u32(r);
                e->nlink = r_u32(r);
                e->rdev = r_u64(r);
                e->size = r_u64(r);
                e->mtime = (int64_t)r_u64(r);
                r_hash(r, &e->content);
                if (flags & E_XATTR)
                        r_hash(r, &e->xattr);
        }
        if (r->bad)
                return -NTFS_ECORRUPT;
        return 0;
}

/* ---- trees and link tables ----------------------------------------------------- */

int tree_view_init(struct tree_view *v, const void *data, size_t len) {
        const uint8_t *p = data;
        if (len < 5 || (p[0] != OBJ_TREE && p[0] != OBJ_LINKS))
                return -NTFS_ECORRUPT;
        uint32_t count = ntfs_get_be32(p + 1);
        if ((uint64_t)count * 4 > len - 5)
                return -NTFS_ECORRUPT;
        v->data = p;
        v->len = len;
        v->count = count;
        v->offs = p + 5;
        return 0;
}

int tree_view_get(const struct tree_view *v, uint32_t i, struct tree_entry *ret) {
        if (i >= v->count)
                return -NTFS_ECORRUPT;
        uint32_t off = ntfs_get_be32(v->offs + 4 * (size_t)i);
        size_t start = 5 + 4 * (size_t)v->count;
        if (off < start || off >= v->len)
                return -NTFS_ECORRUPT;
        struct rbuf r = { .p = v->data, .len = v->len, .off = off };
        int rc = entry_decode(&r, ret);
        if (rc < 0)
                return rc;
        if (v->data[0] == OBJ_TREE) {
                if (ret->namelen == 0 || ret->namelen > NTFS_NAME_MAX ||
                    memchr(ret->name, '/', ret->namelen) || memchr(ret->name, 0, ret->namelen))
                        return -NTFS_ECORRUPT;
        }
        return 0;
}

uint32_t tree_view_seek(const struct tree_view *v, uint64_t h, const char *name, size_t namelen) {
        uint32_t lo = 0, hi = v->count;
        while (lo < hi) {
                uint32_t mid = lo + (hi - lo) / 2;
                uint32_t off = ntfs_get_be32(v->offs + 4 * (size_t)mid);
                /* Compare on the encoded prefix (h, namelen, name) directly. */
                if ((size_t)off + 10 > v->len)
                        return v->count; /* corrupt: callers' get() reports it */
                uint64_t eh = ntfs_get_be64(v->data + off);
                uint16_t nl = (uint16_t)(v->data[off + 8] << 8 | v->data[off + 9]);
                if ((size_t)off + 10 + nl > v->len)
                        return v->count;
                int c = entry_cmp(eh, (const char *)v->data + off + 10, nl, h, name, namelen);
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

int tree_builder_add(struct tree_builder *b, const struct tree_entry *e) {
        if (b->count == b->ocap) {
                uint32_t nc = b->ocap ? b->ocap * 2 : 64;
                uint32_t *no = realloc(b->offs, nc * sizeof *no);
                if (!no)
                        return -ENOMEM;
                b->offs = no;
                b->ocap = nc;
        }
        struct wbuf w = { .p = b->buf, .len = b->len, .cap = b->cap };
        b->offs[b->count] = (uint32_t)b->len; /* relative to entries start */
        entry_encode(&w, e, e->linkid != 0 && e->namelen != 0);
        b->buf = w.p;
        b->cap = w.cap;
        if (w.oom)
                return -ENOMEM;
        if (w.len > UINT32_MAX / 2)
                return -EFBIG;
        b->len = w.len;
        b->count++;
        return 0;
}

int tree_builder_finish(struct tree_builder *b, uint8_t type, uint8_t **ret, size_t *ret_len) {
        struct wbuf w = { 0 };
        size_t start = 5 + 4 * (size_t)b->count;
        w_u8(&w, type);
        w_u32(&w, b->count);
        for (uint32_t i = 0; i < b->count; i++)
                w_u32(&w, (uint32_t)(start + b->offs[i]));
        w_bytes(&w, b->buf, b->len);
        tree_builder_release(b);
        if (w.oom) {
                free(w.p);
                return -ENOMEM;
        }
        *ret = w.p;
        *ret_len = w.len;
        return 0;
}

void tree_builder_release(struct tree_builder *b) {
        free(b->buf);
        free(b->offs);
        memset(b, 0, sizeof *b);
}

/* ---- commits ------------------------------------------------------------------- */

int commit_encode(const struct commit_obj *c, uint8_t **ret, size_t *ret_len) {
        struct wbuf w = { 0 };
        w_u8(&w, OBJ_COMMIT);
        w_u8(&w, NTFS_FORMAT_VERSION);
        entry_encode(&w, &c->root, false);
        w_bytes(&w, c->links.b, NTFS_HASH_LEN);
        w_u8(&w, (uint8_t)c->nparents);
        for (int i = 0; i < c->nparents; i++)
                w_bytes(&w, c->parents[i].b, NTFS_HASH_LEN);
        w_u64(&w, (uint64_t)c->time_ns);
        w_u64(&w, c->bytes);
        w_u64(&w, c->inodes);
        w_u16(&w, c->message_len);
        w_bytes(&w, c->message, c->message_len);
        w_u16(&w, c->effect_len);
        w_bytes(&w, c->effect, c->effect_len);
        w_u16(&w, c->session_len);
        w_bytes(&w, c->session, c->session_len);
        if (w.oom) {
                free(w.p);
                return -ENOMEM;
        }
        *ret = w.p;
        *ret_len = w.len;
        return 0;
}

int commit_decode(const void *data, size_t len, struct commit_obj *c) {
        struct rbuf r = { .p = data, .len = len };
        memset(c, 0, sizeof *c);
        if (r_u8(&r) != OBJ_COMMIT || r_u8(&r) != NTFS_FORMAT_VERSION)
                return -NTFS_ECORRUPT;
        int rc = entry_decode(&r, &c->root);
        if (rc < 0)
                return rc;
        if (!S_ISDIR(c->root.mode) || c->root.linkid)
                return -NTFS_ECORRUPT;
        r_hash(&r, &c->links);
        c->nparents = r_u8(&r);
        if (c->nparents > 2)
                return -NTFS_ECORRUPT;
        for (int i = 0; i < c->nparents; i++)
                r_hash(&r, &c->parents[i]);
        c->time_ns = (int64_t)r_u64(&r);
        c->bytes = r_u64(&r);
        c->inodes = r_u64(&r);
        c->message_len = r_u16(&r);
        c->message = (const char *)r_bytes(&r, c->message_len);
        c->effect_len = r_u16(&r);
        c->effect = (const char *)r_bytes(&r, c->effect_len);
        c->session_len = r_u16(&r);
        c->session = (const char *)r_bytes(&r, c->session_len);
        if (r.bad || r.off != r.len)
                return -NTFS_ECORRUPT;
        return 0;
}

/* ---- files ------------------------------------------------------------------------ */

int file_view_init(struct file_view *v, const void *data, size_t len) {
        const uint8_t *p = data;
        if (len < 13 || p[0] != OBJ_FILE)
                return -NTFS_ECORRUPT;
        v->size = ntfs_get_be64(p + 1);
        v->n = ntfs_get_be32(p + 9);
        if ((uint64_t)v->n * NTFS_HASH_LEN != len - 13)
                return -NTFS_ECORRUPT;
        if ((v->size + NTFS_CHUNK_SIZE - 1) / NTFS_CHUNK_SIZE != v->n)
                return -NTFS_ECORRUPT;
        v->hashes = p + 13;
        return 0;
}

/* ---- generic check (fsck, gc) --------------------------------------------------- */

static int check_entry_refs(const struct tree_entry *e, int (*ref)(const ntfs_hash *, void *), void *ud) {
        int rc;
        if (e->linkid && e->namelen)
                return 0; /* a reference into the link table */
        if (!ntfs_hash_is_zero(&e->content) && (rc = ref(&e->content, ud)) < 0)
                return rc;
        if (!ntfs_hash_is_zero(&e->xattr) && (rc = ref(&e->xattr, ud)) < 0)
                return rc;
        if ((S_ISDIR(e->mode) || S_ISREG(e->mode) || S_ISLNK(e->mode)) && ntfs_hash_is_zero(&e->content))
                return -NTFS_ECORRUPT;
        return 0;
}

int object_check(const void *data, size_t len, int (*ref)(const ntfs_hash *, void *), void *ud) {
        if (len == 0)
                return -NTFS_ECORRUPT;
        const uint8_t *p = data;
        int rc;
        switch (p[0]) {
        case OBJ_BLOB:
                return len - 1 <= NTFS_CHUNK_SIZE ? 0 : -NTFS_ECORRUPT;
        case OBJ_FILE: {
                struct file_view v;
                if ((rc = file_view_init(&v, data, len)) < 0)
                        return rc;
                for (uint32_t i = 0; i < v.n; i++) {
                        ntfs_hash h;
                        memcpy(h.b, v.hashes + (size_t)i * NTFS_HASH_LEN, NTFS_HASH_LEN);
                        if (!ntfs_hash_is_zero(&h) && (rc = ref(&h, ud)) < 0)
                                return rc;
                }
                return 0;
        }
        case OBJ_TREE:
        case OBJ_LINKS: {
                struct tree_view v;
                if ((rc = tree_view_init(&v, data, len)) < 0)
                        return rc;
                struct tree_entry prev = { 0 };
                for (uint32_t i = 0; i < v.count; i++) {
                        struct tree_entry e;
                        if ((rc = tree_view_get(&v, i, &e)) < 0)
                                return rc;
                        if (p[0] == OBJ_TREE) {
                                if (e.h != name_hash(e.name, e.namelen))
                                        return -NTFS_ECORRUPT;
                                if (i && entry_cmp(prev.h, prev.name, prev.namelen, e.h, e.name, e.namelen) >= 0)
                                        return -NTFS_ECORRUPT;
                        } else {
                                if (e.namelen || e.linkid == 0 || (i && e.linkid <= prev.linkid))
                                        return -NTFS_ECORRUPT;
                        }
                        if ((rc = check_entry_refs(&e, ref, ud)) < 0)
                                return rc;
                        prev = e;
                }
                return 0;
        }
        case OBJ_COMMIT: {
                struct commit_obj c;
                if ((rc = commit_decode(data, len, &c)) < 0)
                        return rc;
                if ((rc = check_entry_refs(&c.root, ref, ud)) < 0)
                        return rc;
                if (!ntfs_hash_is_zero(&c.links) && (rc = ref(&c.links, ud)) < 0)
                        return rc;
                for (int i = 0; i < c.nparents; i++)
                        if ((rc = ref(&c.parents[i], ud)) < 0)
                                return rc;
                return 0;
        }
        case OBJ_XATTR: {
                struct rbuf r = { .p = data, .len = len, .off = 1 };
                uint32_t n = r_u32(&r);
                for (uint32_t i = 0; i < n && !r.bad; i++) {
                        uint16_t nl = r_u16(&r);
                        r_bytes(&r, nl);
                        uint32_t vl = r_u32(&r);
                        r_bytes(&r, vl);
                }
                return (r.bad || r.off != r.len) ? -NTFS_ECORRUPT : 0;
        }
        default:
                return -NTFS_ECORRUPT;
        }
}
