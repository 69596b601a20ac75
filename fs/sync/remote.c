/* SPDX-License-Identifier: MIT
 * remote.c — push/fetch sessions to/from S3 (remote.h, docs/remote.md),
 * through the S3 client of s3.c.
 *
 * Index format (P/idx/<sha256>.idx), all integers big-endian:
 *   "NTFSIDX1", u32 npacks, npacks x 64 hex (pack names),
 *   u32 nobjects, nobjects x (32-byte hash, u32 pack number, u64 offset, u32 length)
 * offset is where the object's bytes start inside the pack.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "common/cleanup.h"
#include "common/err.h"
#include "common/fault.h"
#include "common/util.h"
#include "fs/sync/s3.h"
#include "common/banned.h"

#define PACK_MAGIC "NTFSPAK1"
#define IDX_MAGIC "NTFSIDX1"

/* ---- hash set / map (open addressing on the hash's first 8 bytes) -------------------------- */

struct loc {
        uint32_t pack;
        uint64_t off;
        uint32_t len;
};
struct hmap {
        ntfs_hash *k;
        struct loc *v;
        uint8_t *used;
        size_t cap, n;
};
static size_t hm_slot(const struct hmap *m, const ntfs_hash *h) {
        uint64_t x;
        memcpy(&x, h->b, 8);
        size_t j = x & (m->cap - 1);
        while (m->used[j] && memcmp(m->k[j].b, h->b, NTFS_HASH_LEN) != 0)
                j = (j + 1) & (m->cap - 1);
        return j;
}
static struct loc *hm_get(const struct hmap *m, const ntfs_hash *h) {
        if (!m->cap)
                return NULL;
        size_t j = hm_slot(m, h);
        return m->used[j] ? &m->v[j] : NULL;
}
static int hm_put(struct hmap *m, const ntfs_hash *h, const struct loc *v) {
        if ((m->n + 1) * 2 > m->cap) {
                struct hmap n = { .cap = m->cap ? m->cap * 2 : 1024 };
                n.k = calloc(n.cap, sizeof *n.k);
                n.v = calloc(n.cap, sizeof *n.v);
                n.used = calloc(n.cap, 1);
                if (!n.k || !n.v || !n.used) {
                        free(n.k), free(n.v), free(n.used);
                        return -ENOMEM;
                }
                for (size_t i = 0; i < m->cap; i++)
                        if (m->used[i]) {
                                size_t j = hm_slot(&n, &m->k[i]);
                                n.used[j] = 1, n.k[j] = m->k[i], n.v[j] = m->v[i], n.n++;
                        }
                free(m->k), free(m->v), free(m->used);
                *m = n;
        }
        size_t j = hm_slot(m, h);
        if (!m->used[j])
                m->n++;
        m->used[j] = 1, m->k[j] = *h, m->v[j] = v ? *v : (struct loc){ 0 };
        return 0;
}
static void hm_free(struct hmap *m) {
        free(m->k), free(m->v), free(m->used);
        *m = (struct hmap){ 0 };
}


/* ---- the remote's indexes ------------------------------------------------------------------ */

struct rindex {
        struct hmap objs;         /* hash -> (pack number, offset, length) */
        char (*packs)[NTFS_HEX_LEN + 1];
        size_t npacks, cappacks;
        struct s3 *s;
        CURL *c;
        char *msg;
        size_t msglen;
};

static int idx_parse(struct rindex *ix, const uint8_t *p, size_t n, const char *name) {
        if (n < 12 || memcmp(p, IDX_MAGIC, 8) != 0)
                goto bad;
        uint32_t np = ntfs_get_be32(p + 8);
        size_t off = 12;
        if (np > 1000000 || (n - off) / NTFS_HEX_LEN < np)
                goto bad;
        size_t base = ix->npacks;
        if (ix->npacks + np > ix->cappacks) {
                size_t nc = ix->cappacks ? ix->cappacks : 16;
                while (nc < ix->npacks + np)
                        nc *= 2;
                void *nps = realloc(ix->packs, nc * sizeof *ix->packs);
                if (!nps)
                        return -ENOMEM;
                ix->packs = nps;
                ix->cappacks = nc;
        }
        for (uint32_t i = 0; i < np; i++, off += NTFS_HEX_LEN) {
                memcpy(ix->packs[base + i], p + off, NTFS_HEX_LEN);
                ix->packs[base + i][NTFS_HEX_LEN] = 0;
                uint8_t tmp[NTFS_HASH_LEN];
                if (ntfs_unhex(ix->packs[base + i], tmp, NTFS_HASH_LEN) < 0)
                        goto bad;
        }
        ix->npacks += np;
        if (n - off < 4)
                goto bad;
        uint32_t no = ntfs_get_be32(p + off);
        off += 4;
        if ((n - off) / 48 < no)
                goto bad;
        for (uint32_t i = 0; i < no; i++, off += 48) {
                ntfs_hash h;
                memcpy(h.b, p + off, NTFS_HASH_LEN);
                struct loc l = { ntfs_get_be32(p + off + 32), ntfs_get_be64(p + off + 36), ntfs_get_be32(p + off + 44) };
                if (l.pack >= np)
                        goto bad;
                l.pack += (uint32_t)base;
                int r = hm_put(&ix->objs, &h, &l);
                if (r < 0)
                        return r;
        }
        return 0;
bad:
        snprintf(ix->msg, ix->msglen, "remote '%s': index %s is corrupt", ix->s->cfg->name, name);
        return -NTFS_ECORRUPT;
}

static int idx_key_cb(const char *key, int64_t mtime, void *ud) {
        (void)mtime;
        struct rindex *ix = ud;
        size_t kl = strlen(key);
        if (kl < 4 || strcmp(key + kl - 4, ".idx") != 0)
                return 0;
        struct s3_resp r = { 0 };
        int rc = s3_req(ix->s, ix->c, "GET", key, NULL, NULL, 0, NULL, &r, ix->msg, ix->msglen);
        if (rc == 0 && r.status != 200)
                rc = s3_fail(ix->s, key, &r, ix->msg, ix->msglen);
        if (rc == 0) {
                /* the name is the index's hash: verify it */
                const char *base = strrchr(key, '/');
                base = base ? base + 1 : key;
                uint8_t sha[NTFS_HASH_LEN];
                char hex[NTFS_HEX_LEN + 1];
                ntfs_sha256(r.body.p ? (const void *)r.body.p : "", r.body.n, sha);
                ntfs_hex(sha, NTFS_HASH_LEN, hex);
                if (strlen(base) != NTFS_HEX_LEN + 4 || memcmp(base, hex, NTFS_HEX_LEN) != 0) {
                        snprintf(ix->msg, ix->msglen, "remote '%s': index %s is corrupt (hash mismatch)",
                                 ix->s->cfg->name, key);
                        rc = -NTFS_ECORRUPT;
                } else {
                        rc = idx_parse(ix, r.body.p, r.body.n, key);
                }
        }
        s3_resp_free(&r);
        return rc;
}

static int rindex_load(struct rindex *ix, struct s3 *s, CURL *c, char *msg, size_t msglen) {
        *ix = (struct rindex){ .s = s, .c = c, .msg = msg, .msglen = msglen };
        char pfx[600];
        snprintf(pfx, sizeof pfx, "%sidx/", s->prefix);
        return s3_list_keys(s, c, pfx, idx_key_cb, ix, msg, msglen);
}
static void rindex_free(struct rindex *ix) {
        hm_free(&ix->objs);
        free(ix->packs);
        ix->packs = NULL;
}

/* ---- tags at the remote: P/tags/<hex session>/<hex tag>, "<64 hex> session|store\n" ------------ */

static int tag_prefix(const struct s3 *s, const char *session, char *out, size_t olen) {
        char hx[2 * NTFS_NAME_MAX + 1];
        size_t n = strlen(session);
        if (n > NTFS_NAME_MAX)
                return -NTFS_EINVALNAME;
        ntfs_hex((const uint8_t *)session, n, hx);
        int k = snprintf(out, olen, "%stags/%s/", s->prefix, hx);
        return k < 0 || (size_t)k >= olen ? -ENAMETOOLONG : 0;
}

static int tag_key(const struct s3 *s, const char *session, const char *tag, char *out, size_t olen) {
        int r = tag_prefix(s, session, out, olen);
        size_t n = strlen(tag), at = strlen(out);
        if (r < 0)
                return r;
        if (n > NTFS_NAME_MAX || at + 2 * n + 1 > olen)
                return -ENAMETOOLONG;
        ntfs_hex((const uint8_t *)tag, n, out + at);
        return 0;
}

/* Reads one remote tag: 0 with *ret filled, -NTFS_ENOREF when absent. */
static int tag_get(struct s3 *s, CURL *c, const char *session, const char *tag, struct ntfs_remote_tag *ret,
                   char *msg, size_t msglen) {
        char key[1600];
        int rc = tag_key(s, session, tag, key, sizeof key);
        if (rc < 0)
                return rc;
        struct s3_resp r = { .body_max = 4096 };
        rc = s3_req(s, c, "GET", key, NULL, NULL, 0, NULL, &r, msg, msglen);
        if (rc == 0 && r.status == 404)
                rc = -NTFS_ENOREF;
        else if (rc == 0 && r.status != 200)
                rc = s3_fail(s, "read tag", &r, msg, msglen);
        if (rc == 0) {
                char hx[NTFS_HEX_LEN + 1];
                bool ok = r.body.n >= NTFS_HEX_LEN + 1 && r.body.p[NTFS_HEX_LEN] == ' ';
                if (ok) {
                        memcpy(hx, r.body.p, NTFS_HEX_LEN);
                        hx[NTFS_HEX_LEN] = 0;
                        ok = ntfs_unhex(hx, ret->commit.b, NTFS_HASH_LEN) == 0;
                }
                size_t rest = ok ? r.body.n - NTFS_HEX_LEN - 1 : 0;
                const char *sc = ok ? (const char *)r.body.p + NTFS_HEX_LEN + 1 : "";
                if (ok && rest >= 5 && memcmp(sc, "store", 5) == 0)
                        ret->store_scope = true;
                else if (ok && rest >= 7 && memcmp(sc, "session", 7) == 0)
                        ret->store_scope = false;
                else
                        ok = false;
                if (!ok) {
                        snprintf(msg, msglen, "remote '%s': tag '%s' of '%s' is malformed", s->cfg->name, tag,
                                 session);
                        rc = -NTFS_ECORRUPT;
                } else {
                        snprintf(ret->name, sizeof ret->name, "%s", tag);
                }
        }
        s3_resp_free(&r);
        return rc;
}

struct tagnames {
        size_t plen;
        struct buf names; /* NUL-terminated names, one after the other */
        size_t n;
};

static int tagname_cb(const char *key, int64_t mtime, void *ud) {
        (void)mtime;
        struct tagnames *t = ud;
        size_t kl = strlen(key);
        if (kl <= t->plen || (kl - t->plen) % 2 || (kl - t->plen) / 2 > NTFS_NAME_MAX)
                return 0;
        char name[NTFS_NAME_MAX + 1];
        size_t n = (kl - t->plen) / 2;
        if (ntfs_unhex(key + t->plen, (uint8_t *)name, n) < 0)
                return 0;
        name[n] = 0;
        if (strlen(name) != n || !ntfs_name_valid(name))
                return 0; /* not ours: ignored */
        t->n++;
        return buf_add(&t->names, name, n + 1);
}

static int tag_cmp(const void *a, const void *b) {
        return strcmp(((const struct ntfs_remote_tag *)a)->name, ((const struct ntfs_remote_tag *)b)->name);
}

/* Every remote tag of session: a LIST, then a GET per tag. */
static int tags_load(struct s3 *s, CURL *c, const char *session, struct ntfs_remote_tag **ret, size_t *ret_n,
                     char *msg, size_t msglen) {
        char pfx[1600];
        *ret = NULL;
        *ret_n = 0;
        int r = tag_prefix(s, session, pfx, sizeof pfx);
        if (r < 0)
                return r;
        struct tagnames t = { .plen = strlen(pfx) };
        r = s3_list_keys(s, c, pfx, tagname_cb, &t, msg, msglen);
        struct ntfs_remote_tag *v = NULL;
        size_t n = 0;
        if (r == 0 && t.n) {
                v = calloc(t.n, sizeof *v);
                if (!v)
                        r = -ENOMEM;
        }
        for (size_t at = 0; r == 0 && n < t.n; n++) {
                const char *name = (const char *)t.names.p + at;
                at += strlen(name) + 1;
                r = tag_get(s, c, session, name, &v[n], msg, msglen);
                if (r == -NTFS_ENOREF) {
                        /* listed, then gone: tags are never deleted by ntfs; skip */
                        r = 0;
                        n--, t.n--;
                }
        }
        buf_free(&t.names);
        if (r < 0) {
                free(v);
                return r;
        }
        if (n)
                qsort(v, n, sizeof *v, tag_cmp);
        *ret = v;
        *ret_n = n;
        return 0;
}

int ntfs_remote_list_tags(const struct ntfs_remote_cfg *cfg, const char *session, struct ntfs_remote_tag **ret,
                          size_t *ret_n, struct ntfs_remote_stats *stats, char *msg, size_t msglen) {
        pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
        struct ntfs_remote_stats dummy = { 0 };
        struct s3 s;
        int r = s3_init(&s, cfg, stats ? stats : &dummy, &lock, msg, msglen);
        if (r < 0)
                return r;
        CURL *c = curl_easy_init();
        if (!c) {
                s3_done(&s);
                return -ENOMEM;
        }
        r = tags_load(&s, c, session, ret, ret_n, msg, msglen);
        curl_easy_cleanup(c);
        s3_done(&s);
        return r;
}

static int tag_conflict(struct s3 *s, const char *session, const struct ntfs_remote_tag *mine,
                        const ntfs_hash *theirs, char *msg, size_t msglen) {
        char a[NTFS_HEX_LEN + 1], b[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(&mine->commit, a);
        ntfs_hash_hex(theirs, b);
        snprintf(msg, msglen,
                 "remote '%s': tag '%s' of '%s' exists there at %.12s, here at %.12s (tags never move; rename or "
                 "delete the local tag)",
                 s->cfg->name, mine->name, session, b, a);
        return -NTFS_ETAGEXISTS;
}

/* Creates one tag at the remote, or finds it there with the same commit
 * (0); another commit is -NTFS_ETAGEXISTS naming it. */
static int tag_put(struct s3 *s, CURL *c, const char *session, const struct ntfs_remote_tag *t, char *msg,
                   size_t msglen) {
        char key[1600], body[NTFS_HEX_LEN + 16];
        int rc = tag_key(s, session, t->name, key, sizeof key);
        if (rc < 0)
                return rc;
        ntfs_hash_hex(&t->commit, body);
        snprintf(body + NTFS_HEX_LEN, sizeof body - NTFS_HEX_LEN, " %s\n", t->store_scope ? "store" : "session");
        struct s3_resp r = { .body_max = 1 << 16 };
        rc = s3_req(s, c, "PUT", key, NULL, body, strlen(body), "If-None-Match: *", &r, msg, msglen);
        long status = r.status;
        s3_resp_free(&r);
        if (rc < 0 || status == 200)
                return rc;
        /* 412: it exists (RGW may say 409 or 500 on a race): read it back */
        struct ntfs_remote_tag there;
        char m2[256];
        int g = tag_get(s, c, session, t->name, &there, m2, sizeof m2);
        if (g == 0)
                return memcmp(there.commit.b, t->commit.b, NTFS_HASH_LEN) == 0
                               ? 0
                               : tag_conflict(s, session, t, &there.commit, msg, msglen);
        struct s3_resp fake = { .status = status };
        return s3_fail(s, "create tag", &fake, msg, msglen);
}

/* ---- push ----------------------------------------------------------------------------------- */

struct uploader;
struct job {
        struct uploader *u;
        struct buf pack;
        uint64_t nobjs;
        char name[NTFS_HEX_LEN + 1];
        pthread_t th;
        int rc;
        char msg[512];
};
struct uploader {
        struct s3 *s;
        struct job *jobs[NTFS_REMOTE_PARALLEL];
        size_t njobs;
        int rc;
        char *msg;
        size_t msglen;
};

static void *job_run(void *ud) {
        struct job *j = ud;
        struct s3 *s = j->u->s;
        CURL *c = curl_easy_init();
        if (!c) {
                j->rc = -ENOMEM;
                return NULL;
        }
        char key[700];
        snprintf(key, sizeof key, "%spacks/%s.pack", s->prefix, j->name);
        /* resume: a pack stored by an interrupted push is not sent again */
        struct s3_resp h = { 0 };
        j->rc = s3_req(s, c, "HEAD", key, NULL, NULL, 0, NULL, &h, j->msg, sizeof j->msg);
        bool have = j->rc == 0 && h.status == 200;
        s3_resp_free(&h);
        if (!have) {
                struct s3_resp r = { .body_max = 1 << 20 };
                j->rc = s3_req(s, c, "PUT", key, NULL, j->pack.p, j->pack.n, NULL, &r, j->msg, sizeof j->msg);
                if (j->rc == 0 && r.status != 200)
                        j->rc = s3_fail(s, "upload pack", &r, j->msg, sizeof j->msg);
                s3_resp_free(&r);
        }
        if (j->rc == 0)
                j->rc = NTFS_FAULT("remote.pack"); /* tests: die after a pack is stored */
        if (j->rc == 0) {
                PROG_ADD(s->prog, bytes, j->pack.n);
                PROG_ADD(s->prog, objects, j->nobjs);
                PROG_ADD(s->prog, packs, 1);
        }
        curl_easy_cleanup(c);
        return NULL;
}

static int job_join(struct uploader *u, struct job *j) {
        pthread_join(j->th, NULL);
        if (j->rc < 0 && u->rc == 0) {
                u->rc = j->rc;
                snprintf(u->msg, u->msglen, "%s", j->msg);
        }
        buf_free(&j->pack);
        free(j);
        return u->rc;
}

static int uploader_send(struct uploader *u, struct buf *pack, uint64_t nobjs, char name[NTFS_HEX_LEN + 1]) {
        if (u->njobs == NTFS_REMOTE_PARALLEL) {
                job_join(u, u->jobs[0]);
                memmove(u->jobs, u->jobs + 1, (u->njobs - 1) * sizeof *u->jobs);
                u->njobs--;
        }
        if (u->rc < 0)
                return u->rc;
        struct job *j = calloc(1, sizeof *j);
        if (!j)
                return -ENOMEM;
        j->u = u;
        j->pack = *pack;
        j->nobjs = nobjs;
        *pack = (struct buf){ 0 };
        memcpy(j->name, name, NTFS_HEX_LEN + 1);
        int r = pthread_create(&j->th, NULL, job_run, j);
        if (r != 0) {
                buf_free(&j->pack);
                free(j);
                return -r;
        }
        u->jobs[u->njobs++] = j;
        return 0;
}
static int uploader_finish(struct uploader *u) {
        for (size_t i = 0; i < u->njobs; i++)
                job_join(u, u->jobs[i]);
        u->njobs = 0;
        return u->rc;
}

struct pushwalk {
        struct rindex *remote;
        struct uploader *up;
        struct buf pack;         /* the pack being filled */
        struct buf entries;      /* index entries of this push: hash, pack#, off, len */
        struct buf packnames;    /* 64 hex each */
        uint32_t npacks;
        uint64_t nobjs, pack_objs;
};

static int flush_pack(struct pushwalk *w) {
        if (w->pack.n <= 8)
                return 0;
        uint8_t sha[NTFS_HASH_LEN];
        char name[NTFS_HEX_LEN + 1];
        ntfs_sha256(w->pack.p, w->pack.n, sha);
        ntfs_hex(sha, NTFS_HASH_LEN, name);
        int r = buf_add(&w->packnames, name, NTFS_HEX_LEN);
        if (r == 0)
                r = uploader_send(w->up, &w->pack, w->pack_objs, name);
        w->npacks++;
        w->pack_objs = 0;
        return r;
}

static int push_cb(const ntfs_hash *h, const void *data, size_t len, void *ud) {
        struct pushwalk *w = ud;
        if (hm_get(&w->remote->objs, h))
                return 1; /* the remote has it and (invariant) all it refers to */
        int r;
        if (w->pack.n == 0 && (r = buf_add(&w->pack, PACK_MAGIC, 8)) < 0)
                return r;
        uint8_t hdr[36], ent[48];
        memcpy(hdr, h->b, NTFS_HASH_LEN);
        ntfs_put_be32(hdr + 32, (uint32_t)len);
        if ((r = buf_add(&w->pack, hdr, sizeof hdr)) < 0)
                return r;
        memcpy(ent, h->b, NTFS_HASH_LEN);
        ntfs_put_be32(ent + 32, w->npacks);
        ntfs_put_be64(ent + 36, w->pack.n);
        ntfs_put_be32(ent + 44, (uint32_t)len);
        if ((r = buf_add(&w->pack, data, len)) < 0 || (r = buf_add(&w->entries, ent, sizeof ent)) < 0)
                return r;
        /* later walks (tags) skip it and, by the walk's closure, its children */
        if ((r = hm_put(&w->remote->objs, h, NULL)) < 0)
                return r;
        w->nobjs++;
        w->pack_objs++;
        if (w->pack.n >= NTFS_REMOTE_PACK_MAX && (r = flush_pack(w)) < 0)
                return r;
        return 0;
}

int ntfs_remote_is_ancestor(ntfs_store *st, const ntfs_hash *anc, const ntfs_hash *desc) {
        struct hmap seen = { 0 };
        struct buf q = { 0 };
        int r = buf_add(&q, desc->b, NTFS_HASH_LEN), found = 0;
        size_t at = 0;
        while (r == 0 && !found && at < q.n) {
                ntfs_hash h;
                memcpy(h.b, q.p + at, NTFS_HASH_LEN);
                at += NTFS_HASH_LEN;
                if (memcmp(h.b, anc->b, NTFS_HASH_LEN) == 0) {
                        found = 1;
                        break;
                }
                if (hm_get(&seen, &h))
                        continue;
                if ((r = hm_put(&seen, &h, NULL)) < 0)
                        break;
                struct ntfs_commit_info ci;
                if (ntfs_commit_get(st, &h, &ci) < 0)
                        continue;
                for (int i = 0; i < ci.nparents && r == 0; i++)
                        r = buf_add(&q, ci.parents[i].b, NTFS_HASH_LEN);
        }
        hm_free(&seen);
        buf_free(&q);
        return r < 0 ? r : found;
}

/* Every ancestor of start (itself included) into set. */
static int ancestors(ntfs_store *st, const ntfs_hash *start, struct hmap *set, struct buf *order) {
        struct buf q = { 0 };
        int r = buf_add(&q, start->b, NTFS_HASH_LEN);
        for (size_t at = 0; r == 0 && at < q.n; at += NTFS_HASH_LEN) {
                ntfs_hash h;
                memcpy(h.b, q.p + at, NTFS_HASH_LEN);
                if (hm_get(set, &h))
                        continue;
                if ((r = hm_put(set, &h, NULL)) < 0 || (order && (r = buf_add(order, h.b, NTFS_HASH_LEN)) < 0))
                        break;
                struct ntfs_commit_info ci;
                if (ntfs_commit_get(st, &h, &ci) < 0)
                        continue;
                for (int i = 0; i < ci.nparents && r == 0; i++)
                        r = buf_add(&q, ci.parents[i].b, NTFS_HASH_LEN);
        }
        buf_free(&q);
        return r;
}

int ntfs_remote_merge_base(ntfs_store *st, const ntfs_hash *a, const ntfs_hash *b, ntfs_hash *ret) {
        struct hmap sa = { 0 }, sb = { 0 };
        struct buf order = { 0 };
        int r = ancestors(st, a, &sa, NULL);
        if (r == 0)
                r = ancestors(st, b, &sb, &order);
        if (r == 0) {
                r = -NTFS_ENOREF;
                for (size_t at = 0; at < order.n; at += NTFS_HASH_LEN) {
                        ntfs_hash h;
                        memcpy(h.b, order.p + at, NTFS_HASH_LEN);
                        if (hm_get(&sa, &h)) {
                                *ret = h;
                                r = 0;
                                break;
                        }
                }
        }
        hm_free(&sa);
        hm_free(&sb);
        buf_free(&order);
        return r;
}

static int ensure_bucket(struct s3 *s, CURL *c, char *msg, size_t msglen) {
        struct s3_resp r = { .body_max = 1 << 16 };
        int rc = s3_req(s, c, "PUT", NULL, NULL, NULL, 0, NULL, &r, msg, msglen);
        if (rc == 0 && r.status != 200 && r.status != 409)
                rc = s3_fail(s, "create bucket", &r, msg, msglen);
        s3_resp_free(&r);
        return rc;
}

struct countwalk {
        struct hmap *remote, seen;
        struct ntfs_remote_progress *p;
        uint64_t cur; /* bytes of the pack being simulated */
};

/* The same decisions as push_cb, counting instead of packing. */
static int count_cb(const ntfs_hash *h, const void *data, size_t len, void *ud) {
        (void)data;
        struct countwalk *cw = ud;
        if (hm_get(cw->remote, h) || hm_get(&cw->seen, h))
                return 1;
        int r = hm_put(&cw->seen, h, NULL);
        if (r < 0)
                return r;
        if (cw->cur == 0)
                cw->cur = 8;
        cw->cur += 36 + len;
        cw->p->total_objects++;
        if (cw->cur >= NTFS_REMOTE_PACK_MAX) {
                cw->p->total_bytes += cw->cur;
                cw->p->total_packs++;
                cw->cur = 0;
        }
        return 0;
}

static int push_count(ntfs_store *st, struct rindex *ix, const ntfs_hash *head, bool walk_head,
                      const struct ntfs_remote_tag *tags, const bool *skip_tag, size_t ntags,
                      struct ntfs_remote_progress *p) {
        struct ntfs_remote_progress tot = { 0 };
        struct countwalk cw = { .remote = &ix->objs, .p = &tot };
        int r = walk_head ? ntfs_object_walk(st, head, count_cb, &cw) : 0;
        for (size_t i = 0; r == 0 && i < ntags; i++)
                if (!skip_tag[i])
                        r = ntfs_object_walk(st, &tags[i].commit, count_cb, &cw);
        if (cw.cur > 8) {
                tot.total_bytes += cw.cur;
                tot.total_packs++;
        }
        hm_free(&cw.seen);
        if (r == 0) {
                __atomic_store_n(&p->total_bytes, tot.total_bytes, __ATOMIC_RELAXED);
                __atomic_store_n(&p->total_objects, tot.total_objects, __ATOMIC_RELAXED);
                __atomic_store_n(&p->total_packs, tot.total_packs, __ATOMIC_RELAXED);
                __atomic_store_n(&p->totals_final, 1, __ATOMIC_RELEASE);
        }
        return r;
}

static const struct ntfs_remote_tag *tag_find(const struct ntfs_remote_tag *v, size_t n, const char *name) {
        struct ntfs_remote_tag key;
        snprintf(key.name, sizeof key.name, "%s", name);
        return n ? bsearch(&key, v, n, sizeof *v, tag_cmp) : NULL;
}

int ntfs_remote_push(ntfs_store *st, const struct ntfs_remote_cfg *cfg, const char *session, const ntfs_hash *head,
                     const struct ntfs_remote_tag *tags, size_t ntags, ntfs_hash *ret_old,
                     struct ntfs_remote_stats *stats, struct ntfs_remote_progress *prog, char *msg, size_t msglen) {
        pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
        struct ntfs_remote_stats dummy = { 0 };
        struct s3 s;
        int r = s3_init(&s, cfg, stats ? stats : &dummy, &lock, msg, msglen);
        if (r < 0)
                return r;
        s.prog = prog;
        CURL *c = curl_easy_init();
        bool *skip_tag = ntags ? calloc(ntags, sizeof *skip_tag) : NULL;
        if (!c || (ntags && !skip_tag)) {
                curl_easy_cleanup(c);
                free(skip_tag);
                s3_done(&s);
                return -ENOMEM;
        }
        ntfs_hash old = { { 0 } };
        char etag[130] = "", cond[200];
        bool no_bucket = false, head_same = false;
        size_t tags_todo = 0;
        struct rindex ix = { 0 };
        struct uploader up = { .s = &s, .msg = msg, .msglen = msglen };
        struct pushwalk w = { .remote = &ix, .up = &up };

        r = s3_get_head(&s, c, session, &old, etag, sizeof etag, &no_bucket, msg, msglen);
        if (r == -NTFS_ENOREF) {
                r = no_bucket ? ensure_bucket(&s, c, msg, msglen) : 0;
                snprintf(cond, sizeof cond, "If-None-Match: *");
        } else if (r == 0) {
                /* RGW 16 compares If-Match with the bare ETag (no quotes) */
                const char *e = etag;
                size_t el = strlen(e);
                if (el >= 2 && e[0] == '"' && e[el - 1] == '"')
                        e++, el -= 2;
                snprintf(cond, sizeof cond, "If-Match: %.*s", (int)el, e);
                head_same = memcmp(old.b, head->b, NTFS_HASH_LEN) == 0;
                int a = head_same ? 1 : ntfs_remote_is_ancestor(st, &old, head);
                if (a == 0) {
                        char hx[NTFS_HEX_LEN + 1];
                        ntfs_hash_hex(&old, hx);
                        snprintf(msg, msglen,
                                 "remote '%s' has commits for '%s' that this session lacks (remote head %.12s): pull first",
                                 cfg->name, session, hx);
                        r = -NTFS_ECONFLICT;
                }
                if (a < 0)
                        r = a;
        }
        /* Tags already at the remote: the same commit is done, another one
         * is refused here, before anything is uploaded or moved. */
        if (r == 0 && ntags) {
                struct ntfs_remote_tag *there = NULL;
                size_t nthere = 0;
                r = tags_load(&s, c, session, &there, &nthere, msg, msglen);
                for (size_t i = 0; r == 0 && i < ntags; i++) {
                        const struct ntfs_remote_tag *t = tag_find(there, nthere, tags[i].name);
                        if (t && memcmp(t->commit.b, tags[i].commit.b, NTFS_HASH_LEN) != 0)
                                r = tag_conflict(&s, session, &tags[i], &t->commit, msg, msglen);
                        skip_tag[i] = t != NULL;
                        tags_todo += t == NULL;
                }
                free(there);
        }
        if (r == 0 && head_same && tags_todo == 0) {
                snprintf(msg, msglen, "up to date");
                goto out;
        }
        if (r == 0)
                r = rindex_load(&ix, &s, c, msg, msglen);
        if (r == 0 && prog)
                r = push_count(st, &ix, head, !head_same, tags, skip_tag, ntags, prog);
        if (r == 0 && !head_same)
                r = ntfs_object_walk(st, head, push_cb, &w);
        for (size_t i = 0; r == 0 && i < ntags; i++)
                if (!skip_tag[i])
                        r = ntfs_object_walk(st, &tags[i].commit, push_cb, &w);
        if (r == 0)
                r = flush_pack(&w);
        int r2 = uploader_finish(&up);
        if (r == 0)
                r = r2;
        if (r == 0 && w.nobjs > 0) {
                /* the index of this push, after every pack it names */
                struct buf idx = { 0 };
                uint8_t n4[4];
                r = buf_add(&idx, IDX_MAGIC, 8);
                ntfs_put_be32(n4, w.npacks);
                if (r == 0)
                        r = buf_add(&idx, n4, 4);
                if (r == 0)
                        r = buf_add(&idx, w.packnames.p, w.packnames.n);
                ntfs_put_be32(n4, (uint32_t)w.nobjs);
                if (r == 0)
                        r = buf_add(&idx, n4, 4);
                if (r == 0)
                        r = buf_add(&idx, w.entries.p, w.entries.n);
                if (r == 0) {
                        uint8_t sha[NTFS_HASH_LEN];
                        char hx[NTFS_HEX_LEN + 1], key[700];
                        ntfs_sha256(idx.p, idx.n, sha);
                        ntfs_hex(sha, NTFS_HASH_LEN, hx);
                        snprintf(key, sizeof key, "%sidx/%s.idx", s.prefix, hx);
                        struct s3_resp rr = { .body_max = 1 << 16 };
                        r = s3_req(&s, c, "PUT", key, NULL, idx.p, idx.n, NULL, &rr, msg, msglen);
                        if (r == 0 && rr.status != 200)
                                r = s3_fail(&s, "upload index", &rr, msg, msglen);
                        s3_resp_free(&rr);
                }
                buf_free(&idx);
        }
        /* the tags, after the index of their closure and before the head: a
         * tag conflict found only now (a race) leaves the head unmoved */
        for (size_t i = 0; r == 0 && i < ntags; i++)
                if (!skip_tag[i])
                        r = tag_put(&s, c, session, &tags[i], msg, msglen);
        if (r == 0 && !head_same) {
                /* compare-and-swap of the head */
                char key[1600], body[NTFS_HEX_LEN + 2];
                s3_head_key(&s, session, key, sizeof key);
                ntfs_hash_hex(head, body);
                body[NTFS_HEX_LEN] = '\n';
                body[NTFS_HEX_LEN + 1] = 0;
                struct s3_resp rr = { .body_max = 1 << 16 };
                r = s3_req(&s, c, "PUT", key, NULL, body, NTFS_HEX_LEN + 1, cond, &rr, msg, msglen);
                if (r == 0 && (rr.status == 412 || rr.status == 409)) {
                        snprintf(msg, msglen, "remote '%s': '%s' moved while pushing (another push won): pull first",
                                 cfg->name, session);
                        r = -NTFS_ECONFLICT;
                } else if (r == 0 && rr.status != 200) {
                        /* RGW answers a conditional PUT that lost a race with
                         * 500 as well as 412: read the head back to decide. */
                        ntfs_hash now;
                        char etag2[130];
                        bool nb = false;
                        char m2[256];
                        int g = s3_get_head(&s, c, session, &now, etag2, sizeof etag2, &nb, m2, sizeof m2);
                        if (g == 0 && memcmp(now.b, head->b, NTFS_HASH_LEN) == 0) {
                                r = 0; /* our write landed */
                        } else if (g == 0 && memcmp(now.b, old.b, NTFS_HASH_LEN) != 0) {
                                snprintf(msg, msglen,
                                         "remote '%s': '%s' moved while pushing (another push won): pull first",
                                         cfg->name, session);
                                r = -NTFS_ECONFLICT;
                        } else {
                                r = s3_fail(&s, "move head", &rr, msg, msglen);
                        }
                }
                s3_resp_free(&rr);
        }
        if (r == 0 && head_same)
                snprintf(msg, msglen, "up to date");
        if (stats) {
                stats->objects += w.nobjs;
                stats->packs += w.npacks;
        }
out:
        if (r == 0 && ret_old)
                *ret_old = old;
        free(skip_tag);
        buf_free(&w.pack);
        buf_free(&w.entries);
        buf_free(&w.packnames);
        rindex_free(&ix);
        curl_easy_cleanup(c);
        s3_done(&s);
        return r;
}

/* ---- fetch ---------------------------------------------------------------------------------- */

/* Fetch in bounded memory: a depth-first walk of the remote closure that
 * writes each object to the store after all it refers to (children before
 * parents, so the store's objects stay closed under references whatever
 * happens), holding the objects of one path from a root plus a few packs
 * (the last NTFS_REMOTE_FETCH_PACKS downloaded; packs hold objects in the
 * order a push walked them, which is the order this walk asks for them). */

struct frame {
        ntfs_hash h;
        uint8_t *data;
        size_t len;
        struct buf kids; /* hashes the object refers to */
        size_t next;     /* kids still to visit: [0, next) from the end */
};

struct cached_pack {
        uint32_t pack;
        uint64_t used; /* LRU stamp; 0 = empty slot */
        struct buf body;
};

struct fetch {
        ntfs_store *st;
        struct s3 *s;
        CURL *c;
        struct rindex *ix;
        struct hmap seen;
        struct frame *fr;
        size_t nfr, capfr;
        struct cached_pack cache[NTFS_REMOTE_FETCH_PACKS];
        uint64_t clock, objects;
        struct ntfs_remote_stats *stats;
        char *msg;
        size_t msglen;
};

static int push_ref(const ntfs_hash *rh, void *ud) {
        return buf_add(ud, rh->b, NTFS_HASH_LEN);
}

/* The pack numbered pk, from the cache or downloaded (evicting the least
 * recently used). hx names the object wanted, for the messages. */
static int fetch_pack(struct fetch *f, uint32_t pk, const char *hx, const struct buf **ret) {
        struct cached_pack *slot = &f->cache[0];
        for (size_t i = 0; i < NTFS_REMOTE_FETCH_PACKS; i++) {
                if (f->cache[i].used && f->cache[i].pack == pk) {
                        f->cache[i].used = ++f->clock;
                        *ret = &f->cache[i].body;
                        return 0;
                }
                if (f->cache[i].used < slot->used)
                        slot = &f->cache[i];
        }
        buf_free(&slot->body);
        slot->used = 0;
        char key[700];
        snprintf(key, sizeof key, "%spacks/%s.pack", f->s->prefix, f->ix->packs[pk]);
        struct s3_resp rr = { .body_max = 4ull * NTFS_REMOTE_PACK_MAX };
        int r = s3_req(f->s, f->c, "GET", key, NULL, NULL, 0, NULL, &rr, f->msg, f->msglen);
        if (r == 0 && rr.status == 404) {
                snprintf(f->msg, f->msglen, "remote '%s': pack %s (holding object %s) is missing", f->s->cfg->name,
                         f->ix->packs[pk], hx);
                r = -NTFS_ECORRUPT;
        } else if (r == 0 && rr.status != 200) {
                r = s3_fail(f->s, "download pack", &rr, f->msg, f->msglen);
        }
        if (r < 0) {
                s3_resp_free(&rr);
                return r;
        }
        slot->body = rr.body;
        slot->pack = pk;
        slot->used = ++f->clock;
        if (f->stats)
                f->stats->packs++;
        PROG_ADD(f->s->prog, packs, 1);
        *ret = &slot->body;
        return 0;
}

/* Visits h: nothing when seen or held by the store; else its bytes are
 * taken from its pack, verified, and pushed as a new frame. */
static int fetch_enter(struct fetch *f, const ntfs_hash *h) {
        if (hm_get(&f->seen, h))
                return 0; /* a DAG: seen means written already */
        int r = hm_put(&f->seen, h, NULL);
        if (r < 0)
                return r;
        int has = ntfs_object_has(f->st, h);
        if (has != 0)
                return has < 0 ? has : 0; /* the store holds it and (invariant) all it refers to */
        char hx[NTFS_HEX_LEN + 1];
        ntfs_hash_hex(h, hx);
        const struct loc *l = hm_get(&f->ix->objs, h);
        if (!l) {
                snprintf(f->msg, f->msglen, "remote '%s': object %s is missing", f->s->cfg->name, hx);
                return -NTFS_ECORRUPT;
        }
        const struct buf *pk;
        if ((r = fetch_pack(f, l->pack, hx, &pk)) < 0)
                return r;
        if (l->off > pk->n || l->len > pk->n - l->off) {
                snprintf(f->msg, f->msglen, "remote '%s': object %s is corrupt (outside pack %s)", f->s->cfg->name,
                         hx, f->ix->packs[l->pack]);
                return -NTFS_ECORRUPT;
        }
        const uint8_t *data = pk->p + l->off;
        ntfs_hash got;
        ntfs_sha256(data, l->len, got.b);
        struct buf kids = { 0 };
        if (memcmp(got.b, h->b, NTFS_HASH_LEN) != 0 || ntfs_object_refs(data, l->len, push_ref, &kids) < 0) {
                buf_free(&kids);
                snprintf(f->msg, f->msglen, "remote '%s': object %s is corrupt (in pack %s)", f->s->cfg->name, hx,
                         f->ix->packs[l->pack]);
                return -NTFS_ECORRUPT;
        }
        if (f->nfr == f->capfr) {
                size_t nc = f->capfr ? f->capfr * 2 : 64;
                struct frame *nf = realloc(f->fr, nc * sizeof *nf);
                if (!nf) {
                        buf_free(&kids);
                        return -ENOMEM;
                }
                f->fr = nf, f->capfr = nc;
        }
        uint8_t *copy = malloc(l->len ? l->len : 1);
        if (!copy) {
                buf_free(&kids);
                return -ENOMEM;
        }
        memcpy(copy, data, l->len);
        f->fr[f->nfr++] = (struct frame){ .h = *h, .data = copy, .len = l->len, .kids = kids,
                                          .next = kids.n / NTFS_HASH_LEN };
        PROG_ADD(f->s->prog, objects, 1);
        PROG_ADD(f->s->prog, bytes, l->len);
        return 0;
}

static void frame_free(struct frame *fr) {
        free(fr->data);
        buf_free(&fr->kids);
}

/* The closure of root, written children first. */
static int fetch_root(struct fetch *f, const ntfs_hash *root) {
        int r = fetch_enter(f, root);
        while (r == 0 && f->nfr) {
                struct frame *top = &f->fr[f->nfr - 1];
                if (top->next > 0) {
                        /* last reference first: the order of the push's walk */
                        ntfs_hash k;
                        top->next--;
                        memcpy(k.b, top->kids.p + top->next * NTFS_HASH_LEN, NTFS_HASH_LEN);
                        r = fetch_enter(f, &k);
                        continue;
                }
                r = ntfs_object_put_verified(f->st, top->data, top->len, &top->h);
                if (r < 0) {
                        snprintf(f->msg, f->msglen, "importing object: %s", ntfs_strerror(r));
                        break;
                }
                f->objects++;
                frame_free(top);
                f->nfr--;
        }
        return r;
}

/* Totals for the bar: what the store lacks of everything the indexes list
 * (an upper bound: objects of other sessions count too). */
static int fetch_count(ntfs_store *st, const struct rindex *ix, struct ntfs_remote_progress *p) {
        bool *need = ix->npacks ? calloc(ix->npacks, sizeof *need) : NULL;
        if (ix->npacks && !need)
                return -ENOMEM;
        uint64_t objs = 0, bytes = 0, packs = 0;
        int r = 0;
        for (size_t i = 0; i < ix->objs.cap && r == 0; i++) {
                if (!ix->objs.used[i])
                        continue;
                int has = ntfs_object_has(st, &ix->objs.k[i]);
                if (has < 0)
                        r = has;
                if (has != 0)
                        continue;
                objs++;
                bytes += ix->objs.v[i].len;
                if (!need[ix->objs.v[i].pack]) {
                        need[ix->objs.v[i].pack] = true;
                        packs++;
                }
        }
        free(need);
        if (r == 0) {
                __atomic_store_n(&p->total_bytes, bytes, __ATOMIC_RELAXED);
                __atomic_store_n(&p->total_objects, objs, __ATOMIC_RELAXED);
                __atomic_store_n(&p->total_packs, packs, __ATOMIC_RELAXED);
                __atomic_store_n(&p->totals_final, 1, __ATOMIC_RELEASE);
        }
        return r;
}

int ntfs_remote_fetch(ntfs_store *st, const struct ntfs_remote_cfg *cfg, const char *session, ntfs_hash *ret_head,
                      struct ntfs_remote_tag **ret_tags, size_t *ret_ntags, struct ntfs_remote_stats *stats,
                      struct ntfs_remote_progress *prog, char *msg, size_t msglen) {
        pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
        struct ntfs_remote_stats dummy = { 0 };
        struct s3 s;
        if (ret_tags) {
                *ret_tags = NULL;
                *ret_ntags = 0;
        }
        int r = s3_init(&s, cfg, stats ? stats : &dummy, &lock, msg, msglen);
        if (r < 0)
                return r;
        s.prog = prog;
        CURL *c = curl_easy_init();
        if (!c) {
                s3_done(&s);
                return -ENOMEM;
        }
        ntfs_hash head;
        char etag[130];
        struct rindex ix = { 0 };
        struct ntfs_remote_tag *tags = NULL;
        size_t ntags = 0;
        struct fetch f = { .st = st, .s = &s, .c = c, .ix = &ix, .stats = stats, .msg = msg, .msglen = msglen };

        r = s3_get_head(&s, c, session, &head, etag, sizeof etag, NULL, msg, msglen);
        if (r == -NTFS_ENOREF)
                snprintf(msg, msglen, "remote '%s' has no session '%s'", cfg->name, session);
        if (r == 0 && ret_tags)
                r = tags_load(&s, c, session, &tags, &ntags, msg, msglen);
        if (r == 0)
                r = rindex_load(&ix, &s, c, msg, msglen);
        if (r == 0 && prog)
                r = fetch_count(st, &ix, prog);
        /* Walk the remote closure of the head and of the tags; stop at
         * objects st holds (the store's objects are closed under references). */
        if (r == 0)
                r = fetch_root(&f, &head);
        for (size_t i = 0; r == 0 && i < ntags; i++)
                r = fetch_root(&f, &tags[i].commit);
        /* On an error the objects written so far stay: closed under
         * references, named by no ref (gc takes them). Nothing moves. */
        if (r == 0 || f.objects) {
                int rf = ntfs_store_flush(st, true);
                if (r == 0)
                        r = rf;
        }
        if (stats)
                stats->objects += f.objects;
        if (r == 0)
                *ret_head = head;
        if (r == 0 && ret_tags) {
                *ret_tags = TAKE_PTR(tags);
                *ret_ntags = ntags;
        }
        free(tags);
        for (size_t i = 0; i < f.nfr; i++)
                frame_free(&f.fr[i]);
        free(f.fr);
        for (size_t i = 0; i < NTFS_REMOTE_FETCH_PACKS; i++)
                buf_free(&f.cache[i].body);
        hm_free(&f.seen);
        rindex_free(&ix);
        curl_easy_cleanup(c);
        s3_done(&s);
        return r;
}

/* ---- prune ---------------------------------------------------------------------------------- */

struct prunewalk {
        struct hmap named; /* pack names (as hashes) some index names */
        struct buf doomed; /* keys to delete, NUL-terminated */
        size_t ndoomed, kept;
        int64_t cutoff;
        size_t plen;
};

static int prune_pack_cb(const char *key, int64_t mtime, void *ud) {
        struct prunewalk *pw = ud;
        size_t kl = strlen(key);
        ntfs_hash h;
        char hx[NTFS_HEX_LEN + 1];
        if (kl != pw->plen + NTFS_HEX_LEN + 5 || strcmp(key + kl - 5, ".pack") != 0)
                return 0; /* not a pack name of ours */
        memcpy(hx, key + pw->plen, NTFS_HEX_LEN);
        hx[NTFS_HEX_LEN] = 0;
        if (ntfs_unhex(hx, h.b, NTFS_HASH_LEN) < 0)
                return 0;
        if (hm_get(&pw->named, &h))
                return 0;
        if (mtime < 0 || mtime > pw->cutoff) {
                pw->kept++; /* maybe a push in progress: its index comes after its packs */
                return 0;
        }
        pw->ndoomed++;
        return buf_add(&pw->doomed, key, kl + 1);
}

int ntfs_remote_prune(const struct ntfs_remote_cfg *cfg, int64_t grace_s, bool dry_run, uint64_t *ret_deleted,
                      uint64_t *ret_young, struct ntfs_remote_stats *stats, char *msg, size_t msglen) {
        pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
        struct ntfs_remote_stats dummy = { 0 };
        struct s3 s;
        int r = s3_init(&s, cfg, stats ? stats : &dummy, &lock, msg, msglen);
        if (r < 0)
                return r;
        CURL *c = curl_easy_init();
        if (!c) {
                s3_done(&s);
                return -ENOMEM;
        }
        struct rindex ix = { 0 };
        struct prunewalk pw = { .cutoff = ntfs_now_ns() / 1000000000 - grace_s };
        char pfx[600];
        snprintf(pfx, sizeof pfx, "%spacks/", s.prefix);
        pw.plen = strlen(pfx);
        r = rindex_load(&ix, &s, c, msg, msglen);
        for (size_t i = 0; r == 0 && i < ix.npacks; i++) {
                ntfs_hash h;
                if (ntfs_unhex(ix.packs[i], h.b, NTFS_HASH_LEN) == 0)
                        r = hm_put(&pw.named, &h, NULL);
        }
        if (r == 0)
                r = s3_list_keys(&s, c, pfx, prune_pack_cb, &pw, msg, msglen);
        uint64_t deleted = 0;
        for (size_t at = 0, i = 0; r == 0 && !dry_run && i < pw.ndoomed; i++) {
                const char *key = (const char *)pw.doomed.p + at;
                at += strlen(key) + 1;
                struct s3_resp rr = { .body_max = 1 << 16 };
                r = s3_req(&s, c, "DELETE", key, NULL, NULL, 0, NULL, &rr, msg, msglen);
                if (r == 0 && rr.status != 204 && rr.status != 200 && rr.status != 404)
                        r = s3_fail(&s, "delete pack", &rr, msg, msglen);
                s3_resp_free(&rr);
                deleted += r == 0;
        }
        if (r == 0) {
                *ret_deleted = dry_run ? pw.ndoomed : deleted;
                *ret_young = pw.kept;
        }
        hm_free(&pw.named);
        buf_free(&pw.doomed);
        rindex_free(&ix);
        curl_easy_cleanup(c);
        s3_done(&s);
        return r;
}
